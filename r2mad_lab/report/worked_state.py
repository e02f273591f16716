"""One debate state of an R2-MAD run, read back so that notebook 04 can redo its round by hand (Eqs. 2-7).

:func:`find_state` picks, in a finished R2-MAD run directory, the agent-round whose numbers teach the most: round
t > 0, consensus Cons(Z^(t-1)) < 1 (so lambda_t = 1 - gamma * Cons (Eq. 6) is above 1 - gamma), at least one
retrieved case with reward r_i(e) = 1 (a non-zero relevance term of Eq. 5), as many retrieved cases as the run's K
(so the redundancy term of Eq. 5 acts from the second pick on) and finite confidences c_{j,i} (Eq. 7) for the
peers. Where no agent-round has all of these (a small run of a model at chance: every debate unanimous, or every
retrieved case of reward 0), it takes the best there is and names what is missing (:attr:`WorkedState.missing`). It
returns a :class:`WorkedState`: the state s_i^(t) (Eq. 2) and its embedding, computed as the round hook
computes it (:func:`r2mad_core.memory.cases.encode_states`, the bank's embedder, state layout and encoding), agent
i's memory bank M_i, every agent's current response embedded, the run's K, gamma and thresholds, and what the run
recorded for this agent-round (:attr:`WorkedState.recorded`: case ids, MMR scores, similarities, lambda_t,
candidates, c_{j,i}).

It does no arithmetic of the method: the notebook computes the similarities, the top-3K candidates, the MMR scores
and the confidences in numpy and asserts that they are what the run recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from r2mad_core.data import benchmarks
from r2mad_core.debate import prompts
from r2mad_core.memory.banks import MemoryBank
from r2mad_core.memory.cases import AgentDebateState, encode_states
from r2mad_core.memory.hook import load_memory
from r2mad_core.memory.retrieval import RetrievalConfig
from r2mad_core.records import TranscriptRecord
from r2mad_lab.experiments.cell import load_run
from r2mad_lab.experiments.run_settings import read_settings
from r2mad_lab.report.viewer import _find_bank

#: The run options the by-hand computation of the notebook follows: Eq. 5-6's policy on an unpoisoned bank. A run with
#: other values is passed over by :func:`find_state`. The confidence options (the paper's reading or the authors'
#: code, :mod:`r2mad_core.memory.confidence`) are carried in :class:`WorkedState` for the notebook to follow.
REQUIRED_OPTIONS = {"retrieval_policy": "state_aware", "poison_fraction": 0.0}


#: What makes an agent-round teach, in the order it counts (the first elements of :func:`_teaches`'s key).
TEACHES = ("Cons < 1", "a retrieved case of reward 1", "a finite peer confidence")


class WorkedStateError(ValueError):
    """A run directory that holds no agent-round to work by hand (one line naming it and why)."""


@dataclass(frozen=True)
class WorkedState:
    """Agent ``agent``'s state before round ``round`` of question ``sample_id`` and what the run did with it."""

    run_dir: Path
    benchmark: str
    sample_id: str
    gold: str
    round: int
    agent: int
    state: AgentDebateState  # s_i^(t) = <x, z_i^(t-1), h^(t-1), Cons(Z^(t-1))> (Eq. 2)
    previous_answers: tuple[str | None, ...]  # a(z_j^(t-1)) of every agent
    previous_correct: tuple[bool | None, ...]
    query: np.ndarray  # [d] unit emb(s_i^(t)), as the round hook embedded it
    responses: np.ndarray  # [n, d] unit embeddings of every agent's current response z_j^(t-1) (Eq. 7's z_j)
    bank: MemoryBank  # M_i: state_embeddings [N, d], rewards [N], response_embeddings [N, n, d], correct [N, n]
    k: int
    candidate_factor: int
    gamma: float
    w_high: float
    w_low: float
    confidence_label: str  # "peer_correctness" (the paper's zeta_j), or the authors' code's variants
    confidence_pool: str  # "retrieved" (the paper's K cases) or "candidates" (the authors' code: all 3K)
    peer_response_round: str  # "case" (the paper's z_j(e_k)) or "state" (the authors' code)
    recorded: dict[str, Any]  # the transcript's record of this agent-round (the round hook's ``retrieved``)
    missing: tuple[str, ...] = ()  # what would teach more and no agent-round of the runs has (module docstring)

    @property
    def consensus(self) -> float:
        return self.state.consensus_ratio

    def case_ids(self, rows: Sequence[int]) -> list[str]:
        """The case ids of bank rows ``rows``."""
        return [self.bank.cases[int(r)].case_id for r in rows]

    def describe(self) -> str:
        return (f"{self.benchmark} question {self.sample_id} (gold {self.gold}), agent {self.agent} before round "
                f"{self.round}: previous answers {list(self.previous_answers)}, Cons(Z^({self.round - 1})) = "
                f"{self.consensus:.3f}; bank of {len(self.bank)} cases, K = {self.k}, 3K = "
                f"{self.k * self.candidate_factor} candidates, gamma = {self.gamma}"
                + (f"\n(no agent-round of these runs has {' and '.join(self.missing)}: this one is the best there is)"
                   if self.missing else ""))


def _recorded(turn: Any) -> dict[str, Any]:
    return dict(turn.retrieved or {})


def _teaches(record: TranscriptRecord, t: int, agent: int, k: int) -> tuple[int, ...] | None:
    """How much agent-round (record, t, agent) teaches, as a sort key (larger first); None: it cannot serve."""
    previous, rnd = record.rounds[t - 1], record.rounds[t]
    info = _recorded(rnd.agents[agent])
    rewards = info.get("rewards") or []
    confidences = [v for v in (info.get("confidence") or {}).values() if v is not None]
    if not rewards or not info.get("confidence"):  # nothing retrieved, or no peer's confidence recorded
        return None
    return (previous.consensus_ratio < 1.0, max(rewards) > 0, bool(confidences),  # what TEACHES names, in its order
            min(len(rewards), 3),  # picks after the first: the redundancy term of Eq. 5 acts
            len(rewards) == k,  # K cases found (a small bank may hold fewer)
            0 in rewards,  # a zero relevance term among the picks, explained in the notebook
            sum(0.0 < v < 1.0 for v in confidences),  # confidences that are neither all-correct nor all-wrong
            len(confidences))


def find_state(run_dirs: str | Path | Sequence[str | Path], memory: str | Path | None = None,
               data_dir: Any = None) -> WorkedState:
    """The agent-round that teaches most (module docstring) among the R2-MAD runs ``run_dirs`` (one or several
    run directories; the first wins a tie), read back.

    ``memory``: the bank directory when it is not where the run's config names it (as ``r2mad view --memory``);
    ``data_dir``: the benchmark files the run read (None: $R2MAD_DATA_DIR, else the packaged ones)."""
    dirs = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(d) for d in run_dirs]
    best: tuple[tuple[int, ...], Path, dict[str, Any], TranscriptRecord, int, int] | None = None
    for run_dir in dirs:
        config, records = load_run(run_dir)
        settings = read_settings(config)
        if settings.method != "r2mad":
            raise WorkedStateError(f"{run_dir}: not an R2-MAD run (method {settings.method!r})")
        if settings.memory.retrieval_policy != REQUIRED_OPTIONS["retrieval_policy"] or \
                settings.options.get("poison_fraction", 0.0) != REQUIRED_OPTIONS["poison_fraction"]:
            continue
        k = settings.memory.top_k
        for record in records:
            for t in range(1, len(record.rounds)):
                for agent in range(len(record.rounds[t].agents)):
                    key = _teaches(record, t, agent, k)
                    if key is not None and (best is None or key > best[0]):
                        best = (key, run_dir, config, record, t, agent)
    if best is None:
        raise WorkedStateError(f"{', '.join(map(str, dirs))}: no agent-round of a state-aware run on an "
                               "unpoisoned bank retrieved a case and recorded its peers' confidence")
    key, run_dir, config, record, t, agent = best
    missing = tuple(name for name, held in zip(TEACHES, key, strict=False) if not held)
    settings = read_settings(config)  # the run's settings, read back whole (defaults from the declarations)
    retrieval = RetrievalConfig.from_settings(settings.memory)  # K and the candidates, as the run's retrieval took them
    options = settings.options
    bank_dir = _find_bank(run_dir, memory if memory is not None else options.get("memory"))
    if bank_dir is None:
        raise WorkedStateError(f"{run_dir}: memory bank {options.get('memory')} not found (give it as memory=...)")
    bank_set, embedder = load_memory(bank_dir, record.benchmark, options.get("embedder"))
    previous = record.rounds[t - 1]
    texts = [turn.response for turn in previous.agents]
    task_prompt = settings.debate.task_prompt
    state = AgentDebateState(question=_question(record, task_prompt, run_dir, data_dir), previous_response=texts[agent],
                             previous_summary=previous.summary or "", consensus_ratio=float(previous.consensus_ratio))
    query = encode_states(embedder, [state], bank_set.state_layout, bank_set.state_encoding)[0]
    return WorkedState(
        run_dir=run_dir, benchmark=record.benchmark, sample_id=record.sample_id, gold=record.gold, round=t,
        agent=agent, state=state, previous_answers=tuple(turn.answer for turn in previous.agents),
        previous_correct=tuple(turn.correct for turn in previous.agents), query=query,
        responses=embedder.encode(texts), bank=bank_set[agent], k=retrieval.k,
        candidate_factor=retrieval.candidate_factor, gamma=float(settings.memory.gamma),
        w_high=float(settings.memory.w_high), w_low=float(settings.memory.w_low),
        confidence_label=str(settings.choices["confidence_label"]),
        confidence_pool=str(settings.choices["confidence_pool"]),
        peer_response_round=str(settings.choices["peer_response_round"]),
        recorded=_recorded(record.rounds[t].agents[agent]),
        missing=missing)


def _question(record: TranscriptRecord, task_prompt: str, run_dir: Path, data_dir: Any = None) -> str:
    """The question text x as the debate's prompts and state showed it
    (:func:`r2mad_core.debate.prompts.question_text`)."""
    for sample in benchmarks.load(record.benchmark, record.split, data_dir):
        if sample.id == record.sample_id:
            return prompts.question_text(sample.question, bool(sample.choices), task_prompt)
    raise WorkedStateError(f"{run_dir}: question {record.sample_id} not found in the {record.benchmark} files")
