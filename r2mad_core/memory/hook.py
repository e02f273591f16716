"""R2-MAD in the debate loop: the round hook (Eq. 2, 5-7) and ICL-CoT's hook.

:class:`R2MadHook` is the :class:`~r2mad_core.debate.loop.RoundHook` of R2-MAD. Before every round t > 0 it

1. embeds every active sample's previous responses Z^(t-1) in one batch (each distinct text once, through
   a :class:`~r2mad_core.memory.embeddings.CachedEmbedder`; the vectors serve confidence and, with the
   ``components`` state encoding, the state). ``finish_round(t-1)`` already starts this on a background
   thread while the engine writes the round's summaries, so it is off the critical path,
2. embeds every (sample, agent) debate state s_i^(t) = <x, z_i^(t-1), h^(t-1), Cons(Z^(t-1))> (Eq. 2) in
   one batch,
3. retrieves E_i^(t) from agent i's bank for all samples at once (Eq. 5-6, :mod:`r2mad_core.memory.retrieval`),
4. computes every c_{j,i} (Eq. 7, :mod:`r2mad_core.memory.confidence`) and the annotations (w_h, w_l),

and returns, per sample and agent, an :class:`~r2mad_core.debate.loop.AgentRoundContext`: the experiences to show
(``prompts.ExperienceView``), the peer annotations, and a ``record`` that the transcript stores under
``retrieved``: policy, retrieved case ids/indices, MMR scores, similarities, lambda_t, candidate ids and
every c_{j,i} (NaN -> null).

Ablations (Table 2): ``use_memory=False`` ("w/o Memory") retrieves as usual but shows no experiences (the
confidence is still estimated from the retrieved cases); ``use_confidence=False`` ("w/o Confidence")
shows no annotation (c_{j,i} is still computed and recorded, for analysis). The retrieval policies of
Table 3 and the authors'-code variants are options of :class:`R2MadSettings`.

:class:`IclCotHook` (Appendix "Comparison with a Retrieval-Augmented Single-Agent Baseline"): single-agent
CoT whose task prompt carries K experiences from the same bank (agent 0's) retrieved by question
similarity, as in-context examples.

Building the banks (Appendix A "Memory Construction") lives in :mod:`r2mad_lab.experiments.build_memory`, above the
experiment runner; this module only reads banks.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from r2mad_core.data import benchmarks
from r2mad_core.debate import prompts
from r2mad_core.debate.loop import AgentRoundContext, DebateState
from r2mad_core.memory.banks import MemoryBank, MemoryBankError, MemoryBankSet, poison_bank
from r2mad_core.memory.cases import AgentDebateState, MemoryCase, encode_states
from r2mad_core.memory.confidence import ConfidenceConfig, annotate_matrix, confidence_from_retrieval
from r2mad_core.memory.embeddings import CachedEmbedder, Embedder, get_embedder
from r2mad_core.memory.retrieval import POLICIES, RetrievalConfig, query_seed, retrieve
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import MemorySettings

logger = logging.getLogger(__name__)


def _check_memory_fits_run(
    method_label: str, bank_set: Any, bank_samples: Any, benchmark: str, samples: Sequence[Any]
) -> None:
    """The bank is the run's benchmark and holds none of the run's questions (ValueError naming the problem)."""
    if benchmark != bank_set.benchmark:
        raise ValueError(f"{method_label}: memory built for {bank_set.benchmark!r}, the run is on {benchmark!r}")
    leaked = [s.id for s in samples if s.id in bank_samples]
    if leaked:
        raise ValueError(
            f"{method_label}: {len(leaked)} question(s) of this run are in the memory bank (built from split "
            f"{bank_set.split!r}), e.g. {leaked[:3]}: evaluation questions must not be in memory"
        )


@dataclass(frozen=True)
class R2MadSettings:
    """Everything the R2-MAD hook needs besides the bank and the embedder."""

    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    confidence: ConfidenceConfig = field(default_factory=ConfidenceConfig)
    use_memory: bool = True
    use_confidence: bool = True
    seed: int = 0
    batch_size: int = 32
    max_experience_chars: int | None = None  # truncate each shown past response (None: in full, as the paper)
    experience_reference: str = "answer"  # y in each shown experience: answer | solution | none (reference_text)
    # the Similarity-based policy (Table 3): "state" (the authors' code: the debate state, as every policy) or
    # "question" (the paper's "task similarity alone": the question against the cases' questions)
    similarity_match: str = "state"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_settings(cls, settings: MemorySettings, *, seed: int = 0, policy: str = "state_aware",
                      confidence: Mapping[str, Any] | None = None, **hook: Any) -> "R2MadSettings":
        """Everything the hook needs from one :class:`~r2mad_core.memory.settings.MemorySettings`: the retrieval and
        confidence configurations built from it (:meth:`RetrievalConfig.from_settings`,
        :meth:`ConfidenceConfig.from_settings`), every field of its own named as a memory setting
        (``max_experience_chars``), and the hook-only fields in ``hook`` (``use_memory``, ...)."""
        names = [f.name for f in fields(cls) if f.name in MEMORY_DEFAULTS]
        return cls(retrieval=RetrievalConfig.from_settings(settings, policy=policy, seed=seed),
                   confidence=ConfidenceConfig.from_settings(settings, **(confidence or {})),
                   seed=seed, **{**settings.typed(names), **hook})


EXPERIENCE_REFERENCES = ("answer", "solution", "none")
#: What a question-or-state similarity compares (R2-MAD's Similarity-based policy, ICL-CoT's retrieval).
SIMILARITY_MATCHES = ("question", "state")


def reference_text(case: MemoryCase, mode: str = "answer", solutions: Mapping[str, str] | None = None) -> str:
    """y of Eq. 4 as shown in an experience (``experience_reference`` option).

    ``answer`` (our default; the paper's e carries y but gives no rendering): multiple choice shows the letter and
    the option text (``B. <text>``, read from the question's option lines), MATH500 the reference final answer.
    ``solution`` (the authors' code): the full reference solution from ``solutions`` (sample id -> text; MATH500
    has one; multiple choice falls back to the answer). ``none``: nothing (y hidden; an ablation).
    """
    if mode not in EXPERIENCE_REFERENCES:
        raise ValueError(f"experience_reference must be one of {EXPERIENCE_REFERENCES}, found {mode!r}")
    if mode == "none":
        return ""
    if mode == "solution" and solutions and solutions.get(case.sample_id, "").strip():
        return solutions[case.sample_id].strip()
    if case.num_options:  # multiple choice: the option line "B. text" of the question
        prefix = f"{case.gold}. "
        for line in case.state.question.splitlines():
            if line.startswith(prefix):
                return line.strip()
    return case.gold


def experience_view(
    case: MemoryCase,
    max_response_chars: int | None = None,
    reference: str = "answer",
    solutions: Mapping[str, str] | None = None,
    wording: str = "paper",
) -> prompts.ExperienceView:
    """A memory case e = <s, Z, y, zeta, r> (Eq. 4) as the agent sees it: its own response, answer and
    correctness, the reference y (:func:`reference_text`), the debate outcome.

    ``max_response_chars`` shortens the past response (small-context models), marking the cut with "[...]".
    ``wording="authors"`` (the prompts of the authors' code): a multiple-choice y is the letter alone, as their
    ``<example_solution>`` shows it (src/utils/data_utils.py: the solution of a multiple-choice question is its
    answer); the stance change (the agent's answer differs from its previous round's) is filled in.
    """
    response = case.response
    if max_response_chars is not None and len(response) > max_response_chars:
        response = response[:max_response_chars].rstrip() + " [...]"
    shown = reference_text(case, reference, solutions)
    if wording == "authors" and case.num_options and reference != "none":
        shown = case.gold
    stance = None
    if case.previous_answers:
        stance = case.previous_answers[case.agent_index] != case.answer
    return prompts.ExperienceView(
        question=case.state.question,
        response=response,
        answer=case.answer,
        correct=case.is_correct,
        outcome_correct=bool(case.reward),
        summary=case.state.previous_summary,
        consensus_ratio=case.state.consensus_ratio,
        reference=shown,
        reference_is_solution=reference == "solution" and bool(solutions and solutions.get(case.sample_id, "").strip()),
        stance_changed=stance,
    )


def reference_solutions(benchmark: str, data_dir: Any = None) -> dict[str, str]:
    """Sample id -> reference solution for ``experience_reference="solution"`` (MATH500; others: empty)."""
    return {
        s.id: str(s.metadata.get("solution") or "")
        for s in benchmarks.load(benchmark, "all", data_dir)
        if s.metadata.get("solution")
    }


def _finite_or_none(values: Sequence[float]) -> list[float | None]:
    return [None if (v is None or not math.isfinite(float(v))) else round(float(v), 6) for v in values]


class R2MadHook:
    """The R2-MAD :class:`~r2mad_core.debate.loop.RoundHook` (module docstring)."""

    def __init__(self, bank_set: MemoryBankSet, embedder: Embedder, settings: R2MadSettings = R2MadSettings(),
                 solutions: Mapping[str, str] | None = None) -> None:
        bank_set.check_compatible(embedder)
        self.solutions = dict(solutions or {})  # experience_reference="solution": sample id -> reference solution
        self.bank_set = bank_set
        self.embedder = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)
        self.settings = settings
        self._bank_samples = {c.sample_id for b in bank_set.banks for c in b.cases}
        self._prefetch: threading.Thread | None = None
        self._prefetch_error: BaseException | None = None
        self._question_keys: dict[int, np.ndarray] = {}  # agent -> its bank's question embeddings (similarity_match)

    # Overlap (performance): R2-MAD's critical path is round t -> summary h^(t) -> state embedding and retrieval
    # -> round t+1. The responses Z^(t) are known before the summary call and their embeddings (confidence,
    # Eq. 7; the components of the ``components`` state encoding) do not depend on h^(t), so finish_round(t),
    # which the loop calls between the answers of round t and its summary call, embeds them on a background
    # thread while the engine writes the summaries; prepare_round(t+1) waits for it and finds them in the
    # CachedEmbedder. Same texts, same order, same vectors as embedding them in prepare_round.
    def finish_round(self, round_index: int, states: Sequence[DebateState]) -> None:
        """Start embedding the round's responses of the debates that go on (see the comment above)."""
        self._join_prefetch()
        going_on = [state for state in states if not state.finished]
        texts = [text for state in going_on for text in state.rounds[-1].responses]
        if self.bank_set.state_encoding == "components":
            texts += [state.question for state in going_on]
        if not texts:
            return
        self._prefetch = threading.Thread(
            target=self._embed_in_background, args=(texts,), name="r2mad-embed-responses", daemon=True
        )
        self._prefetch.start()

    def _embed_in_background(self, texts: list[str]) -> None:
        try:
            self.embedder.encode(texts, batch_size=self.settings.batch_size)
        except BaseException as error:  # re-raised by the main thread in prepare_round
            self._prefetch_error = error

    def _join_prefetch(self) -> None:
        thread, self._prefetch = self._prefetch, None
        if thread is not None:
            thread.join()
        error, self._prefetch_error = self._prefetch_error, None
        if error is not None:
            raise error

    def check_run(self, benchmark: str, samples: Sequence[Any], config: Any) -> None:
        """Before any generation: the debate's agents match the banks (one per agent), the benchmark is the
        banks' and no question of the run is in memory (ValueError naming the problem)."""
        if config.n_agents != self.bank_set.n_agents:
            raise ValueError(
                f"R2-MAD: the debate has {config.n_agents} agents but the memory has {self.bank_set.n_agents} "
                "agent banks (one per agent): use as many agents as the bank was built with"
            )
        _check_memory_fits_run("R2-MAD", self.bank_set, self._bank_samples, benchmark, samples)

    def _check_states(self, states: Sequence[DebateState]) -> None:
        for state in states:  # run_debate without run_cell: the same checks, per debate
            self.check_run(state.benchmark, [state.sample], state.config)

    def prepare_round(self, round_index: int, states: Sequence[DebateState]) -> list[list[AgentRoundContext] | None]:
        self._join_prefetch()
        if round_index == 0 or not states:
            return [None] * len(states)
        self._check_states(states)
        s = self.settings
        n = self.bank_set.n_agents
        q = len(states)
        # 1. every agent's previous response, embedded once: [Q, n, d]
        texts = [text for state in states for text in state.previous_responses]
        current = self.embedder.encode(texts, batch_size=s.batch_size).reshape(q, n, self.embedder.dim)
        # 2. the debate states s_i^(t), ordered (agent, sample)
        agent_states = [
            AgentDebateState(
                question=state.question,
                previous_response=state.previous_responses[i],
                previous_summary=state.previous_summary or "",
                consensus_ratio=float(state.previous_consensus_ratio),
            )
            for i in range(n)
            for state in states
        ]
        state_vectors = encode_states(
            self.embedder, agent_states, self.bank_set.state_layout, self.bank_set.state_encoding, s.batch_size
        ).reshape(n, q, self.embedder.dim)
        consensus = np.array([state.previous_consensus_ratio for state in states], dtype=np.float64)
        contexts: list[list[AgentRoundContext]] = [[] for _ in states]
        for i in range(n):
            bank = self.bank_set[i]
            seeds = None  # query_seed has a cost per call: only the seeded policies get them
            if POLICIES[s.retrieval.policy].seeded:
                seeds = [query_seed(s.seed, state.sample.id, round_index, i) for state in states]
            queries, keys = state_vectors[i], bank.state_embeddings
            if s.retrieval.policy == "similarity" and s.similarity_match == "question":
                queries, keys = self._task_similarity(i, states)
            result = retrieve(queries, keys, bank.rewards, consensus, s.retrieval, seeds)
            confidence = confidence_from_retrieval(
                bank, result.indices, result.candidate_indices, current, s.confidence
            )
            labels = annotate_matrix(confidence, s.confidence.w_high, s.confidence.w_low)
            for row, state in enumerate(states):
                contexts[row].append(self._context(bank, i, result, row, confidence[row], labels[row],
                                                   state.config.task_prompt))
        return contexts

    def _task_similarity(self, agent: int, states: Sequence[DebateState]) -> tuple[np.ndarray, np.ndarray]:
        """``similarity_match="question"``: the questions of the run against the questions of agent i's cases."""
        if agent not in self._question_keys:
            questions = [case.state.question for case in self.bank_set[agent].cases]
            self._question_keys[agent] = self.embedder.encode(questions, batch_size=self.settings.batch_size)
        queries = self.embedder.encode([state.question for state in states], batch_size=self.settings.batch_size)
        return queries, self._question_keys[agent]

    def _context(self, bank: MemoryBank, agent: int, result: Any, row: int, confidence: np.ndarray,
                 labels: Sequence[str | None], wording: str = "paper") -> AgentRoundContext:
        s = self.settings
        picked = [int(k) for k in result.indices[row] if k >= 0]
        cases = [bank.cases[k] for k in picked]
        peers = [j for j in range(len(confidence)) if j != agent]
        record = {
            "policy": s.retrieval.policy,
            "top_k": s.retrieval.k,
            "case_ids": [c.case_id for c in cases],
            "case_indices": picked,
            "scores": _finite_or_none(result.scores[row][: len(picked)]),
            "similarities": _finite_or_none(result.similarities[row][: len(picked)]),
            "rewards": [c.reward for c in cases],
            "lambda": _finite_or_none([result.lambdas[row]])[0],
            "candidate_ids": [bank.cases[int(k)].case_id for k in result.candidate_indices[row] if k >= 0],
            "confidence": {str(j): _finite_or_none([confidence[j]])[0] for j in peers},
            "annotation": {str(j): labels[j] for j in peers},
            **({"similarity_match": s.similarity_match} if s.retrieval.policy == "similarity" else {}),
            "memory_shown": s.use_memory,
            "confidence_shown": s.use_confidence,
        }
        return AgentRoundContext(
            experiences=tuple(
                experience_view(c, s.max_experience_chars, s.experience_reference, self.solutions, wording)
                for c in cases
            ) if s.use_memory else (),
            peer_confidence={j: labels[j] for j in peers} if s.use_confidence else {},
            record=record,
        )


class IclCotHook:
    """ICL-CoT: at round 0, K experiences from agent ``bank_agent``'s bank retrieved by question similarity.

    ``match="question"`` (default): cosine between the question and the cases' questions, one case per
    distinct training question (its latest round: the agent's final response), top-K questions.
    ``match="state"`` (authors' code): the question embedding against the stored state embeddings, top-K cases.
    """

    def __init__(self, bank_set: MemoryBankSet, embedder: Embedder, settings: MemorySettings | None = None,
                 match: str = "question", bank_agent: int = 0, batch_size: int = 32,
                 experience_reference: str = "answer", solutions: Mapping[str, str] | None = None) -> None:
        """``settings``: K (``top_k``) and ``max_experience_chars``, from one checked
        :class:`~r2mad_core.memory.settings.MemorySettings` (its defaults and bounds; None: the declaration's)."""
        if match not in SIMILARITY_MATCHES:
            raise ValueError(f"ICL-CoT match must be 'question' or 'state', found {match!r}")
        settings = settings if settings is not None else MemorySettings()
        bank_set.check_compatible(embedder)
        self.bank_set = bank_set
        self.embedder = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)
        self.top_k = settings.top_k
        self.match = match
        self.bank = bank_set[bank_agent]
        self.batch_size = batch_size
        self.max_experience_chars = settings.max_experience_chars
        self.experience_reference = experience_reference
        self.solutions = dict(solutions or {})
        self._bank_samples = {c.sample_id for c in self.bank.cases}
        if match == "question":
            latest: dict[str, int] = {}
            for k, case in enumerate(self.bank.cases):
                if (case.sample_id not in latest
                        or case.round_index > self.bank.cases[latest[case.sample_id]].round_index):
                    latest[case.sample_id] = k
            self._rows = np.array(sorted(latest.values()), dtype=np.int64)
            questions = [self.bank.cases[k].state.question for k in self._rows]
            self._keys = self.embedder.encode(questions, batch_size=batch_size)
        else:
            self._rows = np.arange(len(self.bank), dtype=np.int64)
            self._keys = self.bank.state_embeddings

    def check_run(self, benchmark: str, samples: Sequence[Any], config: Any) -> None:
        """Before any generation: the benchmark is the bank's and no question of the run is in memory."""
        _check_memory_fits_run("ICL-CoT", self.bank_set, self._bank_samples, benchmark, samples)

    def prepare_round(self, round_index: int, states: Sequence[DebateState]) -> list[list[AgentRoundContext] | None]:
        if round_index != 0 or not states:
            return [None] * len(states)
        for state in states:
            if state.sample.id in self._bank_samples:
                raise ValueError(f"ICL-CoT: sample {state.sample.id!r} of this run is in the memory bank")
        queries = self.embedder.encode([state.question for state in states], batch_size=self.batch_size)
        config = RetrievalConfig(policy="similarity", k=self.top_k, candidate_factor=1)
        result = retrieve(queries, self._keys, np.ones(len(self._keys)), np.zeros(len(states)), config)
        out: list[list[AgentRoundContext] | None] = []
        for row, state in enumerate(states):
            picked = [int(self._rows[k]) for k in result.indices[row] if k >= 0]
            cases = [self.bank.cases[k] for k in picked]
            record = {
                "policy": f"icl_{self.match}_similarity",
                "case_ids": [c.case_id for c in cases],
                "case_indices": picked,
                "similarities": _finite_or_none(result.similarities[row][: len(picked)]),
            }
            views = tuple(
                experience_view(c, self.max_experience_chars, self.experience_reference, self.solutions,
                                state.config.task_prompt) for c in cases
            )
            out.append([AgentRoundContext(experiences=views, record=record)] * state.n_agents)
        return out


# ------------------------------------------------------------------------------------------------
# Loading banks for a run
# ------------------------------------------------------------------------------------------------
def _load_embedder(name: str, memory: str | Path, whose: str) -> Embedder:
    try:
        return get_embedder(name)
    except (ImportError, RuntimeError, OSError, ValueError) as exc:
        raise MemoryBankError(f"{memory}: cannot load {whose} embedder {name!r}: {exc}") from exc


def load_memory(
    memory: str | Path,
    benchmark: str | None = None,
    embedder: str | Embedder | None = None,
    poison_fraction: float = 0.0,
    poison_seed: int = 0,
) -> tuple[MemoryBankSet, Embedder]:
    """Load a verified bank set and the embedder it was built with (``embedder`` None: the manifest's).

    Every problem is a :class:`MemoryBankError` naming the bank: an unusable or corrupted bank, another
    benchmark or embedder, or an embedder that cannot be loaded."""
    if isinstance(embedder, str):
        embedder = _load_embedder(embedder, memory, "requested")  # resolves aliases ("minilm") to the name banks record
    bank_set = MemoryBankSet.load(memory, embedder=embedder, benchmark=benchmark)
    if embedder is None:
        embedder = _load_embedder(bank_set.embedder_name, memory, "the bank's")
    bank_set.check_compatible(embedder, where=str(memory))
    if poison_fraction:
        bank_set = poison_bank(bank_set, poison_fraction, poison_seed)  # type: ignore[assignment]
    return bank_set, embedder
