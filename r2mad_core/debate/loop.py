"""The round-synchronous multi-agent debate loop and the debate state (Eq. 1-3).

One loop runs every method of the paper (CoT, Self-Consistency, MAD, MAD-M2, R2-MAD, ICL-CoT): a
method is a :class:`DebateConfig` plus optional plug-ins (a :class:`RoundHook`, a
:class:`PeerSelector`), see :mod:`r2mad_core.methods`.

Rounds are ``t = 0 .. n_rounds - 1`` (the paper's "3 agents over 3 rounds" is t = 0, 1, 2).

- Round 0: agent i answers alone: its persona phi_i (``prompts.system_prompt(benchmark, persona)``)
  as the system turn, ``prompts.task_prompt`` as the user turn.
- Round t > 0: agent i reads the other agents' round t-1 responses Z^(t-1) through
  ``prompts.debate_prompt`` and updates its answer (Eq. 1, P(z_i^(t) | x, Z^(t-1), phi_i)). As in
  Du et al. and the authors' code, each agent keeps its own conversation: system, then its earlier
  user/assistant turns, then the new user turn.
- Each round is ONE ``engine.generate`` call over every active (sample x agent). The extra calls
  of a round (debate summaries, MAD-M2 judgements) are batched the same way: one call each.
- After every round the answers a(z_i) are extracted (``answers.extract_answer``) and the
  consensus ratio (Eq. 3) is computed:
  ``Cons(Z) = max_y (1/n) sum_i 1[a(z_i) = y]``, over checker-equivalent answers
  (``answers.canonical_answer`` to group cheaply, ``answers.answers_equivalent`` to merge groups).
  An answer that could not be extracted (None) agrees with nothing, not even another None; all
  None gives Cons = 0.
- A sample stops early when all agents agree (Cons = 1, every answer extracted) and
  ``stop_at_unanimity`` is set (the paper's evaluation); memory construction sets it off to force
  the full rounds (Appendix A, "Memory Construction").
- Optional debate summaries h^(t) (Eq. 2) with ``prompts.summary_prompt``, option ``summaries``:
  ``every_round`` (the paper, "each round requires summarizing", and the authors' code) after every executed
  round, the last one and a round where the debate stops included; ``before_next_round`` (ours) only for the
  samples that go on to round t+1 (h^(t) is part of the debate state s_i^(t+1); a third of the summaries).
  Tag ``summary``, their own ``summary_max_tokens`` (the prompt asks for 2 sentences). ``summary_agents``
  chooses the agent-responses slot of the summary prompt (:func:`r2mad_core.debate.prompts.summary_prompt`).
- A peer's empty response at round t > 0 (option ``empty_peers``): ``drop`` (the authors' code) leaves it out of
  the other agents' prompts; ``show`` (ours) shows an empty block. ``unclosed_thinking``: ``drop`` (ours) keeps a
  response whose ``<think>`` never closed as the text before the tag; ``keep`` (the authors' code) keeps the partial
  reasoning as the response (:attr:`r2mad_core.engine.Completion.unclosed_thinking`).
- Gold answers never steer the loop: stopping, consensus, hooks and masking see extracted answers
  only. Per-agent correctness is filled in by :func:`score_turns` after the debate, for scoring. The one
  exception is labelled as such: ``consensus_rule="authors_reads_gold"`` (the authors' ``_check_consensus``,
  :func:`authors_consensus`) declares consensus when every agent is correct by the gold answer, and otherwise
  compares lower-cased answer strings (three missing answers agree, and the debate stops).
- ``task_prompt="authors"``: every prompt byte as the authors' code writes it (:mod:`r2mad_core.debate.prompts`:
  the ``Question: `` of a multiple-choice question, also in the embedded state; MATH500's unformatted
  ``\\boxed{{answer}}`` system prompts; their peers header, annotations, experiences and summary prompt, whose
  answers are written as their checker returns them, :func:`authors_answer_text`).

Schedules: the loop above is ``schedule="rounds"`` (every phase of a round waits for the slowest sequence of
the whole batch). ``schedule="questions"`` (:mod:`r2mad_core.debate.scheduling`) runs the same phases -- the functions
:func:`select_peers`, :func:`round_contexts`, :func:`round_requests`, :func:`record_round`, :func:`finish_round`
and :func:`summarize` -- for one sample at a time, each sample advancing as soon as its own requests are back; the
requests, hence (with per-request seeds) the transcripts, are the same.

Extension points
----------------
:class:`RoundHook` (R2-MAD memory and confidence, ICL-CoT). Before the prompts of round t are
built, the loop calls ``hook.prepare_round(t, states)`` with the :class:`DebateState` of every
active sample, for every round t >= 0 (a hook that only acts on debate rounds returns ``None`` at
t = 0). The loop passes one state per call (a list of one), under both schedules, so that a hook's
floating-point results never depend on which samples share a call (:func:`round_contexts`). Each state exposes
everything the debate state s_i^(t) of Eq. 2 needs: the sample (x), each agent's previous response z_i^(t-1) and answer,
the previous summary h^(t-1), the previous consensus ratio Cons(Z^(t-1)), and all earlier rounds (``state.rounds``). The
hook returns, per state, per agent, an :class:`AgentRoundContext`: the experiences E_i^(t) to show
(``prompts.ExperienceView``), the confidence annotation agent i puts on each peer j
(``"high"``/``"low"``/None, Eq. 7 thresholds) and a JSON-serialisable ``record`` stored in the
transcript under ``retrieved`` for that agent and round. ``None`` (for a state or an agent) means
"no context". After a round's answers (and before its summaries) the loop calls
``hook.finish_round(t, states)`` if the hook defines it.

:class:`PeerSelector` (MAD-M2 masking): before the prompts of round t > 0, decides which peers
each agent sees (``select_peers(t, states, engine, config)``); it may issue one batched engine
call per round (the subjective judge) and returns a JSON record per sample stored in the
transcript under the round's ``masking`` key. An agent that sees no peer answers the task prompt
again (re-solves alone) rather than reading an empty list of solutions.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from r2mad_core.data import answers
from r2mad_core.data.benchmarks import MULTIPLE_CHOICE_BENCHMARKS
from r2mad_core.debate import prompts
from r2mad_core.debate.settings import (  # noqa: F401  (the vocabularies, importable from here as before)
    DEFAULTS,
    EMPTY_PEER_MODES,
    LOOP_CHOICES,
    ROUND0_MODES,
    SPECS,
    SUMMARY_AGENT_SLOTS,
    SUMMARY_SCHEDULES,
    UNCLOSED_THINKING_MODES,
    DebateSettings,
)
from r2mad_core.engine import Completion, Engine, Message, Request, SamplingParams, hash_messages
from r2mad_core.records import ExtraCallRecord, RoundRecord, TurnRecord

if TYPE_CHECKING:  # pragma: no cover
    from r2mad_core.data.benchmarks import Sample

logger = logging.getLogger(__name__)

#: The settings the loop reads (all but the vote rule, which scores the transcript afterwards).
DEBATE_CONFIG_SETTINGS = tuple(name for name in SPECS if name != "vote_rule")

DEBATE_TAG = "debate"
SUMMARY_TAG = "summary"


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DebateConfig:
    """One configuration of the debate loop.

    ``personas[i]`` is agent i's persona index (default ``0..n_agents-1``: MAD's three personas);
    ``sample_indices[i]`` is agent i's ``Request.sample_index`` (default all 0). Self-Consistency
    with k paths is ``personas = (0,) * k``, ``sample_indices = (0, ..., k-1)``, one round, so
    that CoT, SC path 0 and MAD agent 0 round 0 are the same request and share the cache.

    Paper defaults (Appendix A): 3 agents, 3 rounds, temperature 1.0, top_p 1.0; max_tokens is
    6144 in the paper and comes from the profile here. ``seed`` is the run seed
    (``SamplingParams.seed``).

    ``round0`` (the paper is silent; ours): ``shared`` (default) makes every method's round 0 the same
    requests as MAD's (paired comparison, common random numbers): round-0 debate requests always ask
    for logprobs, so MAD-M2 objective, which needs them, replays MAD's round 0 too. ``independent``
    gives the run its own sampling stream (``stream``, set by :func:`r2mad_core.methods.get_method` from
    the method's name and options): every request's seed differs from every other method's, as in the
    paper's separate runs.

    ``task_prompt``: ``paper`` (default; the appendix's one task prompt for every benchmark) or ``authors``
    (the authors' code's benchmark-specific wording, :data:`r2mad_core.debate.prompts.AUTHORS_TASK_TEMPLATES`).
    """

    n_agents: int = DEFAULTS["n_agents"]
    n_rounds: int = DEFAULTS["n_rounds"]
    temperature: float = DEFAULTS["temperature"]
    top_p: float = DEFAULTS["top_p"]
    max_tokens: int = DEFAULTS["max_tokens"]
    seed: int = 0
    logprobs: bool = False
    stop_at_unanimity: bool = DEFAULTS["stop_at_unanimity"]
    with_summaries: bool = DEFAULTS["with_summaries"]
    summary_max_tokens: int = DEFAULTS["summary_max_tokens"]
    personas: tuple[int, ...] | None = None
    sample_indices: tuple[int, ...] | None = None
    round0: str = DEFAULTS["round0"]
    stream: str = ""
    task_prompt: str = DEFAULTS["task_prompt"]
    summaries: str = DEFAULTS["summaries"]
    summary_agents: str = DEFAULTS["summary_agents"]
    empty_peers: str = DEFAULTS["empty_peers"]
    unclosed_thinking: str = DEFAULTS["unclosed_thinking"]
    consensus_rule: str = DEFAULTS["consensus_rule"]
    task_suffix: str = ""  # appended to round 0's task prompt (the authors' CoT: prompts.AUTHORS_COT_SUFFIX)

    def __post_init__(self) -> None:
        for name, spec in SPECS.items():  # the one declaration's bounds and vocabularies (debate/settings.py)
            if name not in DEBATE_CONFIG_SETTINGS:
                continue
            if spec.kind == "int":
                _check_int(name, getattr(self, name), minimum=int(spec.minimum or 0))
            else:
                spec.check("DebateConfig", name, getattr(self, name))
        _check_int("seed", self.seed, minimum=None)
        personas = tuple(range(self.n_agents)) if self.personas is None else tuple(self.personas)
        indices = (0,) * self.n_agents if self.sample_indices is None else tuple(self.sample_indices)
        if len(personas) != self.n_agents:
            raise ValueError(
                f"DebateConfig.personas: expected {self.n_agents} entries (one per agent), found {len(personas)}"
            )
        if len(indices) != self.n_agents:
            raise ValueError(
                f"DebateConfig.sample_indices: expected {self.n_agents} entries (one per agent), found {len(indices)}"
            )
        for name, values in (("personas", personas), ("sample_indices", indices)):
            for v in values:
                _check_int(f"{name} entry", v, minimum=0)
        object.__setattr__(self, "personas", personas)
        object.__setattr__(self, "sample_indices", indices)

    @classmethod
    def from_settings(cls, settings: DebateSettings, **loop: Any) -> "DebateConfig":
        """The loop configuration of ``settings`` (temperature and top_p as floats, the flags as bools; the vote rule
        is the method's, not the loop's) with the loop-only fields in ``loop`` (``personas``, ``sample_indices``,
        ``logprobs``; or a setting's override, e.g. ``with_summaries=True``)."""
        values = {**settings.values(DEBATE_CONFIG_SETTINGS), **loop}
        values["temperature"], values["top_p"] = float(values["temperature"]), float(values["top_p"])
        values["stop_at_unanimity"], values["with_summaries"] = (bool(values["stop_at_unanimity"]),
                                                                 bool(values["with_summaries"]))
        return cls(**values)

    def check_benchmark(self, benchmark: str) -> None:
        """Raise ValueError when an agent's persona does not exist for ``benchmark``."""
        available = prompts.num_personas(benchmark)
        for agent, persona in enumerate(self.personas or ()):
            if persona >= available:
                raise ValueError(
                    f"agent {agent} uses persona {persona}, but {benchmark} has {available} personas "
                    f"(0..{available - 1}); use at most {available} agents"
                )

    @property
    def sampling_seed(self) -> int:
        """The seed every request carries: the run seed, or with ``round0="independent"`` the run seed mixed
        with the run's ``stream`` (so no request of this run equals one of another method's run)."""
        if self.round0 != "independent":
            return self.seed
        digest = hashlib.sha256(f"{self.seed}:{self.stream}".encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF

    def sampling_params(self, round_index: int | None = None) -> SamplingParams:
        """Debate-turn sampling; round 0 asks for logprobs under ``round0="shared"`` (class docstring)."""
        shared_round0 = round_index == 0 and self.round0 == "shared"
        return SamplingParams(
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            max_tokens=self.max_tokens,
            seed=self.sampling_seed,
            logprobs=self.logprobs or shared_round0,
        )

    def summary_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            max_tokens=self.summary_max_tokens,
            seed=self.sampling_seed,
            logprobs=False,
        )

    def summarizes_after(self, round_index: int, state: "DebateState") -> bool:
        """Is h^(t) written after round t for this (just recorded) state? (option ``summaries``)"""
        if not self.with_summaries:
            return False
        if self.summaries == "every_round":
            return True
        return round_index < self.n_rounds - 1 and not state.finished

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in LOOP_CHOICES:
            if d[name] == DEFAULTS[name]:  # the earlier default: the config (and the run directory's key) as before
                del d[name]
        if not d["task_suffix"]:  # the earlier configs (and run keys) had no suffix
            del d["task_suffix"]
        d["personas"] = list(self.personas or ())
        d["sample_indices"] = list(self.sample_indices or ())
        return d


def _check_int(name: str, value: Any, minimum: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"DebateConfig.{name}: expected an integer, found {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"DebateConfig.{name}: expected an integer >= {minimum}, found {value}")


# --------------------------------------------------------------------------------------------
# Records: the transcript's own types (r2mad_core.records), built here as the debate runs
# --------------------------------------------------------------------------------------------
#: Agent i's response z_i^(t) at one round, with everything the transcript keeps.
AgentTurn = TurnRecord
#: Cost of one non-debate generation (a summary, a judgement) attributed to a sample.
ExtraCall = ExtraCallRecord


@dataclass
class DebateState:
    """The running debate of one sample: what hooks and peer selectors read.

    ``conversations[i]`` is agent i's chat so far (system, user/assistant turns). Properties give
    the pieces of agent i's debate state s_i^(t) = <x, z_i^(t-1), h^(t-1), Cons(Z^(t-1))> (Eq. 2).
    """

    sample: "Sample"
    benchmark: str
    config: DebateConfig
    rounds: list[RoundRecord] = field(default_factory=list)
    conversations: list[list[Message]] = field(default_factory=list)
    finished: bool = False
    stopped_early: bool = False
    pending_extra_calls: list[ExtraCallRecord] = field(default_factory=list)

    @property
    def question(self) -> str:
        """x as every prompt and the debate state show it (``task_prompt="authors"``: a multiple-choice question
        prefixed ``Question: ``, :func:`r2mad_core.debate.prompts.question_text`)."""
        return prompts.question_text(self.sample.question, bool(self.sample.choices), self.config.task_prompt)

    @property
    def next_round(self) -> int:
        return len(self.rounds)

    @property
    def previous_round(self) -> RoundRecord | None:
        return self.rounds[-1] if self.rounds else None

    @property
    def previous_responses(self) -> list[str] | None:
        return None if not self.rounds else self.rounds[-1].responses

    @property
    def previous_answers(self) -> list[str | None] | None:
        return None if not self.rounds else self.rounds[-1].answers

    @property
    def previous_summary(self) -> str | None:
        return None if not self.rounds else self.rounds[-1].summary

    @property
    def previous_consensus_ratio(self) -> float | None:
        return None if not self.rounds else self.rounds[-1].consensus_ratio

    @property
    def n_agents(self) -> int:
        return self.config.n_agents

    @property
    def num_options(self) -> int | None:
        return len(self.sample.choices) if self.sample.choices else None


@dataclass(frozen=True)
class AgentRoundContext:
    """What a :class:`RoundHook` adds to agent i's user turn at round t.

    ``experiences``: E_i^(t) (Eq. 4-6), shown before the task/debate text.
    ``peer_confidence``: peer index j -> ``"high"``/``"low"``/None, the prompt-level realisation
    of w_{j,i}^(t) (Eq. 7 thresholds). ``record``: JSON-serialisable, stored in the transcript
    under ``retrieved`` for this agent and round (case ids, scores, confidence values, ...).
    """

    experiences: tuple[prompts.ExperienceView, ...] = ()
    peer_confidence: Mapping[int, str | None] = field(default_factory=dict)
    record: Mapping[str, Any] = field(default_factory=dict)


EMPTY_CONTEXT = AgentRoundContext()


@runtime_checkable
class RoundHook(Protocol):
    """Plug-in called before each round's prompts are built (see the module docstring).

    ``prepare_round(round_index, states)`` returns one entry per state (same order), each a
    sequence of one :class:`AgentRoundContext` per agent, or None. Optionally a hook may define
    ``finish_round(round_index, states) -> None``, called after the round's answers are in, and
    ``check_run(benchmark, samples, config) -> None``, which :mod:`r2mad_lab.experiments.cell` calls
    before any generation and which raises ValueError when the hook cannot serve that run (e.g. a
    memory bank with another number of agents, or holding the run's questions).
    """

    def prepare_round(
        self, round_index: int, states: Sequence[DebateState]
    ) -> Sequence[Sequence[AgentRoundContext | None] | None]: ...


@dataclass(frozen=True)
class PeerSelection:
    """Which previous-round responses each agent sees at this round, plus a transcript record."""

    visible: tuple[tuple[int, ...], ...]  # one tuple of peer indices per agent
    record: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class PeerSelector(Protocol):
    """Plug-in deciding the peers each agent sees at round t > 0 (MAD-M2 masking).

    Returns one :class:`PeerSelection` per state. May call ``engine.generate`` once per round.
    """

    def select_peers(
        self, round_index: int, states: Sequence[DebateState], engine: Engine, config: DebateConfig
    ) -> Sequence[PeerSelection]: ...


def all_other_peers(n_agents: int) -> tuple[tuple[int, ...], ...]:
    """Du et al.'s MAD: agent i sees every j != i, in agent order."""
    return tuple(tuple(j for j in range(n_agents) if j != i) for i in range(n_agents))


# --------------------------------------------------------------------------------------------
# Consensus (Eq. 3)
# --------------------------------------------------------------------------------------------
def group_answers(values: Sequence[str | None], benchmark: str) -> list[list[int]]:
    """Group agent indices by checker-equivalent answers; None answers are left out.

    Groups are ordered by their lowest agent index and list their members in agent order.
    Answers with the same ``canonical_answer`` are grouped at once; remaining groups are merged
    when ``answers_equivalent`` holds between their first members (math equivalence).
    """
    by_canonical: dict[str, list[int]] = {}
    for i, value in enumerate(values):
        if value is None:
            continue
        by_canonical.setdefault(answers.canonical_answer(value, benchmark), []).append(i)
    groups: list[list[int]] = []
    for members in by_canonical.values():
        for group in groups:
            if answers.answers_equivalent(values[group[0]], values[members[0]], benchmark):
                group.extend(members)
                group.sort()
                break
        else:
            groups.append(list(members))
    groups.sort(key=lambda g: g[0])
    return groups


def consensus_ratio(values: Sequence[str | None], benchmark: str) -> float:
    """Cons(Z) (Eq. 3): the fraction of agents agreeing on the most popular extracted answer."""
    if not values:
        raise ValueError("consensus_ratio: no answers given")
    groups = group_answers(values, benchmark)
    return max((len(g) for g in groups), default=0) / len(values)


def is_unanimous(values: Sequence[str | None], benchmark: str) -> bool:
    """All agents extracted an answer and all answers are equivalent."""
    return bool(values) and all(v is not None for v in values) and len(group_answers(values, benchmark)) == 1


#: ``consensus_rule="authors_reads_gold"``: the authors' consensus threshold (run_mad.py, --consensus_threshold 0.8).
AUTHORS_CONSENSUS_THRESHOLD = 0.8


def authors_answer_text(value: str | None, benchmark: str) -> str:
    """An extracted answer as the authors' checkers return it (src/checker.py): a missing answer is ``""``; a
    multiple-choice letter is lower case (``MMLUProChecker.parse_answer``)."""
    if value is None:
        return ""
    return value.lower() if benchmark in MULTIPLE_CHOICE_BENCHMARKS else value


def authors_consensus(values: Sequence[str | None], gold: str, benchmark: str) -> tuple[float, bool]:
    """Cons(Z) and the early stop as the authors' code has them (src/multi_agent_debate.py, ``_check_consensus``):
    **reads the gold answer**: every agent correct is consensus (ratio 1.0) whatever the answers; otherwise the
    share of the most common lower-cased, stripped answer string (a missing answer is ``""``, so missing answers
    agree with each other), consensus when it is at least :data:`AUTHORS_CONSENSUS_THRESHOLD`."""
    if not values:
        raise ValueError("authors_consensus: no answers given")
    if all(v is not None and answers.is_correct(v, gold, benchmark) for v in values):
        return 1.0, True
    normalized = [authors_answer_text(v, benchmark).lower().strip() for v in values]
    top = max(normalized.count(v) for v in normalized)
    ratio = top / len(values)
    return ratio, ratio >= AUTHORS_CONSENSUS_THRESHOLD


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------
def prompt_id(messages: Sequence[Message]) -> str:
    """A short stable id of a prompt's chat messages (first 16 hex digits of a SHA-256)."""
    digest = hashlib.sha256()  # of json.dumps([{"role", "content"}, ...], ensure_ascii=False, separators=(",", ":"))
    hash_messages(digest, messages)
    return digest.hexdigest()[:16]


def _mean_logprob(completion: Completion) -> float | None:
    if completion.logprobs is None:
        return None
    if not completion.logprobs:
        return float("-inf")
    return float(sum(completion.logprobs) / len(completion.logprobs))


def generate_checked(engine: Engine, requests: list[Request]) -> list[Completion]:
    if not requests:
        return []
    completions = engine.generate(requests)
    if len(completions) != len(requests):
        raise RuntimeError(
            f"engine {getattr(engine, 'identity', engine)!r} returned {len(completions)} completions "
            f"for {len(requests)} requests"
        )
    return list(completions)


def new_states(samples: Sequence["Sample"], benchmark: str, config: DebateConfig) -> list[DebateState]:
    """Fresh debate states: each agent's conversation starts with its persona's system prompt."""
    config.check_benchmark(benchmark)
    seen: set[str] = set()
    states = []
    for sample in samples:
        if sample.id in seen:
            raise ValueError(f"run_debate: sample id {sample.id!r} appears twice in the batch")
        seen.add(sample.id)
        if sample.benchmark != benchmark:
            raise ValueError(
                f"run_debate: sample {sample.id!r} belongs to benchmark {sample.benchmark!r}, "
                f"the debate runs {benchmark!r}"
            )
        conversations = [
            [{"role": "system", "content": prompts.system_prompt(benchmark, persona, config.task_prompt)}]
            for persona in (config.personas or ())
        ]
        states.append(DebateState(sample=sample, benchmark=benchmark, config=config, conversations=conversations))
    return states


def run_debate(
    samples: Sequence["Sample"],
    engine: Engine,
    config: DebateConfig,
    *,
    benchmark: str | None = None,
    hook: RoundHook | None = None,
    peer_selector: PeerSelector | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> list[DebateState]:
    """Debate every sample round-synchronously (``schedule="rounds"``); return their finished states
    (input order). :func:`r2mad_core.debate.scheduling.run_scheduled` chooses between this loop and the per-question
    schedule.

    ``benchmark`` defaults to the samples' benchmark (they must all share it). ``on_round(t, n)``
    is called after each round with the number of samples that took part (progress reporting).
    Correctness per turn is filled in only at the end (:func:`score_turns`).
    """
    if not samples:
        return []
    if benchmark is None:
        benchmark = samples[0].benchmark
    states = new_states(samples, benchmark, config)
    for round_index in range(config.n_rounds):
        active = [s for s in states if not s.finished]
        if not active:
            break
        started = time.perf_counter()
        selections = select_peers(round_index, active, engine, config, peer_selector)
        contexts = round_contexts(round_index, active, config, hook)
        requests, pending = round_requests(round_index, active, selections, contexts, config)
        completions = generate_checked(engine, requests)
        record_round(round_index, active, selections, pending, completions, config)
        finish_round(round_index, active, hook)
        summarize(engine, config, [s for s in active if config.summarizes_after(round_index, s)], round_index)

        elapsed = time.perf_counter() - started
        for state in active:
            state.rounds[-1].seconds = elapsed / len(active)
        if on_round is not None:
            on_round(round_index, len(active))
        logger.debug("round %d: %d samples, %.2f s", round_index, len(active), elapsed)
    return states


# The phases of one round, shared by both schedules (rounds: all active samples at once; questions: one
# sample at a time). Each phase sees only the states it is given, so calling them per sample gives the same
# requests, in the same order within a sample, as calling them for the whole batch.
PendingTurn = tuple[DebateState, int, list[Message], "tuple[int, ...] | None", AgentRoundContext]


def select_peers(
    round_index: int,
    states: Sequence[DebateState],
    engine: Engine,
    config: DebateConfig,
    peer_selector: PeerSelector | None,
) -> list[PeerSelection | None]:
    """The peer selector's choice for each state at round t > 0 (None: every other agent)."""
    if round_index == 0 or peer_selector is None:
        return [None] * len(states)
    selections = list(peer_selector.select_peers(round_index, states, engine, config))
    if len(selections) != len(states):
        raise RuntimeError(f"peer selector returned {len(selections)} selections for {len(states)} samples")
    return selections


def round_contexts(
    round_index: int, states: Sequence[DebateState], config: DebateConfig, hook: RoundHook | None
) -> list[Sequence[AgentRoundContext | None] | None]:
    """``hook.prepare_round`` for these states, checked (None per state without a hook).

    The hook is called once per state (a list of one), in order, under both schedules. Its results then do
    not depend on which other samples share a call: numpy's matrix products (retrieval, confidence) and a
    neural embedder's batches are not batch-invariant in the last bits, so one batched call over a round's
    samples and one call per sample would record different similarities (and could, on a near tie, retrieve
    differently).
    """
    if hook is None:
        return [None] * len(states)
    contexts = []
    for state in states:
        entries = list(hook.prepare_round(round_index, [state]))
        if len(entries) != 1:
            raise RuntimeError(f"round hook returned {len(entries)} entries for 1 sample")
        contexts.append(entries[0])
    for state, state_contexts in zip(states, contexts, strict=False):
        if state_contexts is not None and len(state_contexts) != config.n_agents:
            raise RuntimeError(
                f"round hook returned {len(state_contexts)} agent contexts for sample {state.sample.id!r}, "
                f"expected {config.n_agents}"
            )
    return contexts


def round_requests(
    round_index: int,
    states: Sequence[DebateState],
    selections: Sequence[PeerSelection | None],
    contexts: Sequence[Sequence[AgentRoundContext | None] | None],
    config: DebateConfig,
) -> tuple[list[Request], list[PendingTurn]]:
    """Every (state x agent) request of round t (Eq. 1), in state then agent order."""
    params = config.sampling_params(round_index)
    requests: list[Request] = []
    pending: list[PendingTurn] = []
    for state, selection, state_contexts in zip(states, selections, contexts, strict=False):
        if round_index > 0:
            visible_all = selection.visible if selection is not None else all_other_peers(config.n_agents)
            if len(visible_all) != config.n_agents:
                raise RuntimeError(
                    f"peer selector gave {len(visible_all)} peer lists for sample {state.sample.id!r}, "
                    f"expected {config.n_agents}"
                )
        for agent in range(config.n_agents):
            context = (state_contexts[agent] if state_contexts is not None else None) or EMPTY_CONTEXT
            visible: tuple[int, ...] | None = None
            if round_index == 0:
                user = prompts.task_prompt(
                    state.benchmark, state.question, context.experiences, wording=config.task_prompt
                ) + config.task_suffix
            else:
                visible = tuple(visible_all[agent])
                bad = [j for j in visible if j == agent or not 0 <= j < config.n_agents]
                if bad:
                    raise RuntimeError(f"agent {agent} cannot see peers {bad} (sample {state.sample.id!r})")
                previous = state.rounds[-1].turns
                seen = visible
                if config.empty_peers == "drop":  # the authors' code: an empty response is left out
                    visible = tuple(j for j in seen if previous[j].response.strip())
                if seen:  # every seen peer empty and dropped: an empty list of solutions, as the authors' code
                    peers = [
                        prompts.PeerResponse(text=previous[j].response, confidence=context.peer_confidence.get(j))
                        for j in visible
                    ]
                    user = prompts.debate_prompt(
                        state.benchmark, state.question, peers, context.experiences, wording=config.task_prompt,
                        weighted=bool(context.peer_confidence),
                    )
                else:
                    user = prompts.task_prompt(
                        state.benchmark, state.question, context.experiences, wording=config.task_prompt
                    )
            messages = [*state.conversations[agent], {"role": "user", "content": user}]
            requests.append(
                Request(
                    messages=tuple(messages),
                    params=params,
                    sample_index=(config.sample_indices or ())[agent],
                    tag=DEBATE_TAG,
                )
            )
            pending.append((state, agent, messages, visible, context))
    return requests, pending


def record_round(
    round_index: int,
    states: Sequence[DebateState],
    selections: Sequence[PeerSelection | None],
    pending: Sequence[PendingTurn],
    completions: Sequence[Completion],
    config: DebateConfig,
) -> None:
    """Append round t's record (Z^(t), answers, Cons(Z^(t)), Eq. 3) to each state; mark finished states."""
    turns: dict[int, list[TurnRecord]] = {id(s): [] for s in states}
    for (state, agent, messages, visible, context), completion in zip(pending, completions, strict=False):
        text = completion.text or ""
        if config.unclosed_thinking == "keep" and getattr(completion, "thinking_partial", ""):
            text = (text + completion.thinking_partial).strip()  # the authors' code: the partial reasoning stays
        if config.task_prompt == "authors":  # src/multi_agent_debate.py: remove_think_tags(r).strip()
            text = text.strip()
        answer = answers.extract_answer(text, state.benchmark, num_options=state.num_options)
        state.conversations[agent] = [*messages, {"role": "assistant", "content": text}]
        turns[id(state)].append(
            TurnRecord(
                agent=agent,
                prompt_id=prompt_id(messages),
                response=text,
                answer=answer,
                correct=None,
                finish_reason=completion.finish_reason,
                truncated=completion.finish_reason == "length",
                empty=not text.strip(),
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                cached=completion.cached,
                seconds=completion.seconds,
                mean_logprob=_mean_logprob(completion),
                visible_peers=visible,
                peer_confidence={int(j): c for j, c in context.peer_confidence.items()},
                n_experiences=len(context.experiences),
                retrieved=dict(context.record),
                cut=completion.cut,
                unclosed_thinking=completion.unclosed_thinking,
                trimmed_experiences=completion.trimmed_experiences,
            )
        )
    for state, selection in zip(states, selections, strict=False):
        values = [t.answer for t in turns[id(state)]]
        if config.consensus_rule == "authors_reads_gold":
            ratio, unanimous = authors_consensus(values, state.sample.gold, state.benchmark)
        else:
            ratio, unanimous = consensus_ratio(values, state.benchmark), is_unanimous(values, state.benchmark)
        state.rounds.append(
            RoundRecord(
                round=round_index,
                agents=turns[id(state)],
                consensus_ratio=ratio,
                unanimous=unanimous,
                summary=None,
                masking=dict(selection.record) if selection is not None else None,
                extra_calls=state.pending_extra_calls,
                seconds=0.0,
            )
        )
        state.pending_extra_calls = []
        if round_index == config.n_rounds - 1:
            state.finished = True
        elif unanimous and config.stop_at_unanimity:
            state.finished = True
            state.stopped_early = True


def finish_round(round_index: int, states: Sequence[DebateState], hook: RoundHook | None) -> None:
    """``hook.finish_round(t, states)`` when the hook defines it: one call for the round's samples (R2-MAD
    embeds their responses on a background thread while the summaries are written; per text, so the
    vectors do not depend on the call with a deterministic embedder)."""
    finish = getattr(hook, "finish_round", None)
    if callable(finish):
        finish(round_index, states)


def summarize(engine: Engine, config: DebateConfig, states: Sequence[DebateState], round_index: int) -> None:
    """h^(t) for every state in one batched call (Eq. 2; the appendix summary prompt)."""
    if not states:
        return
    params = config.summary_params()
    requests = []
    for state in states:
        current = state.rounds[-1]
        previous_summary = state.rounds[-2].summary if len(state.rounds) > 1 else None
        previous_answers = state.rounds[-2].answers if len(state.rounds) > 1 else None
        shown, shown_before = current.answers, previous_answers
        if config.task_prompt == "authors":
            shown = [authors_answer_text(a, state.benchmark) for a in current.answers]
            if previous_answers is not None:
                shown_before = [authors_answer_text(a, state.benchmark) for a in previous_answers]
        text = prompts.summary_prompt(state.question, previous_summary, current.responses, current.consensus_ratio,
                                      answers=shown, previous_answers=shown_before,
                                      slot=config.summary_agents, wording=config.task_prompt)
        requests.append(Request(messages=({"role": "user", "content": text},), params=params, tag=SUMMARY_TAG))
    for state, completion in zip(states, generate_checked(engine, requests), strict=False):
        state.rounds[-1].summary = (completion.text or "").strip()
        state.rounds[-1].extra_calls.append(ExtraCallRecord.from_completion(SUMMARY_TAG, completion))


def record_extra_call(state: DebateState, call: ExtraCallRecord) -> None:
    """Attribute an extra generation (e.g. a MAD-M2 judgement) to the round being prepared.

    Peer selectors run before the round's record exists; the cost is kept on the state and moved
    to the round record when the round is appended (see :func:`run_debate`).
    """
    state.pending_extra_calls.append(call)


def score_turns(states: Sequence[DebateState]) -> None:
    """Fill in each turn's correctness against the gold answer (after the debate; scoring only)."""
    for state in states:
        for round_record in state.rounds:
            for turn in round_record.turns:
                turn.correct = turn.answer is not None and answers.is_correct(
                    turn.answer, state.sample.gold, state.benchmark
                )

