"""Memory cases (Eq. 4) and the debate states they hold (Eq. 2), with the outcome reward r_i of a finished debate.

Records, state text and encoding, and the cases of one finished debate with their outcome reward r_i.

Debate state (Eq. 2, ``eq:debate_state`` of the paper), before agent i writes round t > 0:

    s_i^(t) = < x, z_i^(t-1), h^(t-1), Cons(Z^(t-1)) >

(task, agent i's previous response, the summary of the previous round, the previous round's consensus
ratio, Eq. 3). Memory case (Eq. 4, ``eq:memory_case``), extracted for every agent i and every round t > 0 of a
finished debate (Appendix A "Memory Construction": round 0 is excluded, all rounds are forced):

    e_i^(t) = < s_i^(t), Z^(t), y, zeta_i^(t), r_i >

We store Z^(t) with every agent's parsed answer and correctness zeta_j^(t) (confidence, Eq. 7, needs agent
j's correctness in agent i's case, which Eq. 4 implies through Z^(t) and y), and also Z^(t-1) with its
correctness (for the authors'-code confidence variant, see ``confidence.py``).

**Outcome reward r_i** (``reward_definition``):

- ``"final_vote"`` (default; ours -- the paper does not define r_i operationally): 1 when the debate's final answer
  (majority vote over the last round) is correct. The paper calls r_i "the outcome reward" and says it "only requires
  a signal indicating whether a concluded debate reached a good answer" (Section 4.2), i.e. a property of the
  concluded debate, not of one agent's round.
- ``"agent_final"``: 1 when agent i's own last-round answer is correct (r indexed by i, still an outcome).
- ``"round_correctness"`` (the authors' code): r = zeta_i^(t), agent i's correctness in that round. This is
  what the authors' code ranks by in MMR (``response_correct``).

**State text** (``state_layout``), the text embedded as s (the authors embed one text per state):

- ``"full"`` (default): question, the consensus ratio, the previous summary, then the previous response.
  Eq. 2 has all four parts; putting the long response last means an embedder that truncates (MiniLM: 256
  word pieces) loses the tail of the response rather than the summary.
- ``"authors"``: question, previous response, previous summary (the authors' code; no consensus).

**State encoding** (``state_encoding``): ``"text"`` (default; one embedding of the state text, as the paper
encodes "the current debate state into an embedding vector") or ``"components"`` (the normalised sum of the
unit embeddings of question, previous response and summary: no truncation of the composite text and each
response is embedded once; the consensus ratio then enters only through lambda_t).

The banks that hold these cases, their embeddings and their files are :mod:`r2mad_core.memory.banks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from r2mad_core.memory.embeddings import Embedder
from r2mad_core.records import TranscriptRecord, as_transcript

REWARD_DEFINITIONS = ("final_vote", "agent_final", "round_correctness")
STATE_LAYOUTS = ("full", "authors")
STATE_ENCODINGS = ("text", "components")


# ------------------------------------------------------------------------------------------------
# Records
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentDebateState:
    """s_i^(t) = <x, z_i^(t-1), h^(t-1), Cons(Z^(t-1))> (Eq. 2)."""

    question: str
    previous_response: str
    previous_summary: str
    consensus_ratio: float


@dataclass(frozen=True)
class MemoryCase:
    """e_i^(t) = <s_i^(t), Z^(t), y, zeta_i^(t), r_i> (Eq. 4), with every agent's answers and correctness."""

    case_id: str
    sample_id: str
    agent_index: int
    round_index: int
    state: AgentDebateState
    responses: tuple[str, ...]  # Z^(t)
    answers: tuple[str | None, ...]  # a(z_j^(t))
    correct: tuple[bool, ...]  # zeta_j^(t) for every agent j
    gold: str  # y
    reward: int  # r_i
    previous_responses: tuple[str, ...] = ()  # Z^(t-1)
    previous_answers: tuple[str | None, ...] = ()
    previous_correct: tuple[bool, ...] = ()
    final_answer: str | None = None  # the debate's voted answer (for audits)
    final_correct: bool | None = None
    num_options: int | None = None  # multiple choice: the question's option count (answer re-extraction)

    @property
    def response(self) -> str:
        """z_i^(t), the agent's own response in this case."""
        return self.responses[self.agent_index]

    @property
    def answer(self) -> str | None:
        return self.answers[self.agent_index]

    @property
    def is_correct(self) -> bool:
        """zeta_i^(t)."""
        return self.correct[self.agent_index]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, row: Mapping[str, Any], where: str = "") -> "MemoryCase":
        """The case of one JSON row (``where`` names it in errors); ValueError when it is not a valid case."""
        try:
            state = AgentDebateState(**row["state"])
            values = {f.name: row[f.name] for f in dataclasses.fields(cls) if f.name != "state" and f.name in row}
            for name in ("responses", "answers", "correct", "previous_responses", "previous_answers",
                         "previous_correct"):
                if name in values:
                    values[name] = tuple(values[name])
            case = cls(state=state, **values)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not a memory case ({exc})") from exc
        n = len(case.responses)
        if not (len(case.answers) == len(case.correct) == n) or not 0 <= case.agent_index < n:
            raise ValueError(
                f"{where}: responses/answers/correct must have one entry per agent and agent_index in range, "
                f"found {len(case.responses)}/{len(case.answers)}/{len(case.correct)} and {case.agent_index}"
            )
        return case


@dataclass(frozen=True)
class DebateRound:
    """What memory needs from one debate round t: Z^(t), answers, correctness, h^(t), Cons(Z^(t))."""

    responses: tuple[str, ...]
    answers: tuple[str | None, ...]
    correct: tuple[bool, ...]
    summary: str
    consensus_ratio: float


@dataclass(frozen=True)
class DebateRecord:
    """A finished debate on one training question, all rounds forced (Appendix A)."""

    sample_id: str
    question: str
    gold: str
    rounds: tuple[DebateRound, ...]
    final_answer: str | None
    final_correct: bool
    num_options: int | None = None


# ------------------------------------------------------------------------------------------------
# State text
# ------------------------------------------------------------------------------------------------
def format_state_text(state: AgentDebateState, layout: str = "full") -> str:
    """The text embedded as the debate state (see the module docstring for the layouts)."""
    if layout == "full":
        parts = [f"Question:\n{state.question}", f"Consensus ratio of the previous round: {state.consensus_ratio:.2f}"]
        if state.previous_summary:
            parts.append(f"Previous round summary:\n{state.previous_summary}")
        parts.append(f"Previous response:\n{state.previous_response}")
        return "\n\n".join(parts)
    if layout == "authors":
        parts = [state.question, state.previous_response, state.previous_summary]
        return "\n".join(p for p in parts if p).strip()
    raise ValueError(f"unknown state layout {layout!r}: expected one of {STATE_LAYOUTS}")


def encode_states(
    embedder: Embedder,
    states: Sequence[AgentDebateState],
    layout: str = "full",
    encoding: str = "text",
    batch_size: int = 32,
    show_progress: bool = False,
) -> np.ndarray:
    """Unit float32 embeddings [len(states), d] of debate states (``encoding``: "text" or "components")."""
    if encoding == "text":
        texts = [format_state_text(s, layout) for s in states]
        return embedder.encode(texts, batch_size=batch_size, show_progress=show_progress)
    if encoding != "components":
        raise ValueError(f"unknown state encoding {encoding!r}: expected one of {STATE_ENCODINGS}")
    if not states:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    texts = list(dict.fromkeys(
        t for s in states for t in (s.question, s.previous_response, s.previous_summary) if t
    ))
    vectors = embedder.encode(texts, batch_size=batch_size, show_progress=show_progress)
    row = {t: k for k, t in enumerate(texts)}
    out = np.zeros((len(states), embedder.dim), dtype=np.float32)
    for k, s in enumerate(states):
        for t in (s.question, s.previous_response, s.previous_summary):
            if t:
                out[k] += vectors[row[t]]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


# ------------------------------------------------------------------------------------------------
# Cases from debates
# ------------------------------------------------------------------------------------------------
def outcome_reward(record: DebateRecord, agent_index: int, round_index: int, reward_definition: str) -> int:
    """r_i for agent i's round-t case under ``reward_definition`` (module docstring)."""
    if reward_definition == "final_vote":
        return int(bool(record.final_correct))
    if reward_definition == "agent_final":
        return int(bool(record.rounds[-1].correct[agent_index]))
    if reward_definition == "round_correctness":
        return int(bool(record.rounds[round_index].correct[agent_index]))
    raise ValueError(f"unknown reward definition {reward_definition!r}: expected one of {REWARD_DEFINITIONS}")


def cases_from_debate(record: DebateRecord, reward_definition: str = "final_vote") -> list[list[MemoryCase]]:
    """Memory cases e_i^(t) for every agent i and round t >= 1 of one debate, grouped by agent."""
    if reward_definition not in REWARD_DEFINITIONS:
        raise ValueError(f"unknown reward definition {reward_definition!r}: expected one of {REWARD_DEFINITIONS}")
    if not record.rounds:
        raise ValueError(f"debate {record.sample_id!r} has no rounds")
    n = len(record.rounds[0].responses)
    for t, r in enumerate(record.rounds):
        if not (len(r.responses) == len(r.answers) == len(r.correct) == n):
            raise ValueError(
                f"debate {record.sample_id!r} round {t}: expected {n} responses/answers/correct, found "
                f"{len(r.responses)}/{len(r.answers)}/{len(r.correct)}"
            )
    per_agent: list[list[MemoryCase]] = [[] for _ in range(n)]
    for t in range(1, len(record.rounds)):
        prev, cur = record.rounds[t - 1], record.rounds[t]
        for i in range(n):
            state = AgentDebateState(
                question=record.question,
                previous_response=prev.responses[i],
                previous_summary=prev.summary or "",
                consensus_ratio=float(prev.consensus_ratio),
            )
            per_agent[i].append(
                MemoryCase(
                    case_id=f"{record.sample_id}#t{t}#a{i}",
                    sample_id=record.sample_id,
                    agent_index=i,
                    round_index=t,
                    state=state,
                    responses=tuple(cur.responses),
                    answers=tuple(cur.answers),
                    correct=tuple(bool(c) for c in cur.correct),
                    gold=record.gold,
                    reward=outcome_reward(record, i, t, reward_definition),
                    previous_responses=tuple(prev.responses),
                    previous_answers=tuple(prev.answers),
                    previous_correct=tuple(bool(c) for c in prev.correct),
                    final_answer=record.final_answer,
                    final_correct=bool(record.final_correct),
                    num_options=record.num_options,
                )
            )
    return per_agent


def debate_record_from_transcript(row: TranscriptRecord | Mapping[str, Any], question: str) -> DebateRecord:
    """A (scored) transcript line of :mod:`r2mad_lab.experiments.cell` as the input of memory building.

    Reads ``rounds[t].agents[i].{response, answer, correct}``, ``rounds[t].{summary, consensus_ratio}``,
    ``gold``, ``final_answer``, ``correct`` (the voted answer's correctness) and ``num_options`` of a
    :class:`r2mad_core.records.TranscriptRecord` (a dict is validated into one). The question text is not in
    transcripts: pass it.
    """
    row = as_transcript(row)
    where = f"transcript of sample {row.sample_id!r}"
    rounds = []
    for t, r in enumerate(row.rounds):
        corrects = [a.correct for a in r.agents]
        if any(c is None for c in corrects):
            raise ValueError(f"{where}, round {t}: per-agent correctness missing (transcript not scored)")
        rounds.append(
            DebateRound(
                responses=tuple(r.responses),
                answers=tuple(r.answers),
                correct=tuple(bool(c) for c in corrects),
                summary=r.summary or "",
                consensus_ratio=float(r.consensus_ratio),
            )
        )
    return DebateRecord(
        sample_id=row.sample_id,
        question=question,
        gold=row.gold,
        rounds=tuple(rounds),
        final_answer=row.final_answer,
        final_correct=bool(row.correct),
        num_options=row.num_options,
    )
