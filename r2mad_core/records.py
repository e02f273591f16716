"""Records: the typed schema of a run directory's files (``transcripts.jsonl`` lines and ``config.json``).

One transcript line is one finished debate of one question (:class:`TranscriptRecord`): every round t
(:class:`RoundRecord`) with every agent's response z_i^(t) (Eq. 1; :class:`TurnRecord`), the consensus
Cons(Z^(t)) of Eq. 2's debate state, the summary h^(t), and for R2-MAD what the round hook did: the experiences
retrieved by Eq. 8's MMR policy (``retrieved``: case ids, scores, lambda_t) and the confidence c_ji of Eqs. 5-7
with its annotation. Then the vote over the last round (:class:`VoteRecord`), token costs and wall time.

These models are the one declaration of the transcript (docs/design.md, "Runs and results"): the debate loop
builds them as it runs (:mod:`r2mad_core.debate.loop` appends :class:`RoundRecord` s of :class:`TurnRecord` s to
each debate state and fills in ``correct``, ``summary`` and ``seconds`` when they are known), the run cell
writes them (:func:`r2mad_lab.experiments.cell.transcript_record`, one ``model_dump`` per line), and every
reader -- scoring, grid results, findings, memory construction -- gets them back, validated, from
:class:`r2mad_lab.experiments.transcripts.TranscriptStore` and reads attributes. A line that does not fit is an error
naming the file, the line and the field, not an ``AttributeError`` three modules later. Transcripts written
before these models existed have the same JSON and load unchanged (tests/test_records.py keeps a line of that
format). :func:`as_transcript` is the door for a hand-made record (a dict).

Reading a run directory back: :func:`read_config` (``config.json`` checked against :class:`RunConfig`) and
:func:`check_records` (no record of another cell counted as this one's), with their errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence, Union

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer


class _Record(BaseModel):
    # Not frozen: the debate loop fills in correctness, summaries and wall time after a turn is built;
    # readers treat records as read-only (scoring copies with ``model_copy(update=...)``).
    model_config = ConfigDict(extra="forbid")


#: Fields written only when set (a transcript with no cut completion has the bytes it had before they existed).
_LIMIT_FIELDS = {"cut": None, "unclosed_thinking": False, "trimmed_experiences": 0}


class _LimitsOnlyWhenSet(_Record):
    @model_serializer(mode="wrap")
    def _drop_unset_limits(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items() if not (k in _LIMIT_FIELDS and v == _LIMIT_FIELDS[k])}


class TurnRecord(_LimitsOnlyWhenSet):
    """Agent i's response z_i^(t) at one round, as the loop recorded it (one of ``agents`` of a round)."""

    agent: int
    prompt_id: str = ""  # first 16 hex digits of SHA-256 of the request's chat messages
    response: str
    answer: str | None
    correct: bool | None  # None while the debate runs; filled by r2mad_core.debate.loop.score_turns
    finish_reason: str
    truncated: bool  # finish_reason == "length": cut off at max_tokens (answer still extracted)
    empty: bool  # a blank (or whitespace-only) response
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    seconds: float
    mean_logprob: float | None = None
    visible_peers: tuple[int, ...] | None = None  # the peers this agent read (None at round 0)
    peer_confidence: dict[int, str | None] = {}  # peer j -> its Eq. 7 annotation shown to agent i (None: none)
    n_experiences: int = 0
    retrieved: dict[str, Any] = {}  # the round hook's record: policy, case ids, scores, lambda_t, confidence
    # Written only when set: the limit that ended the response (context_overflow, context_capped, max_tokens:
    # r2mad_core.engine.CUTS), a response that stopped inside <think>, experiences left out to fit.
    cut: Literal["context_overflow", "context_capped", "max_tokens"] | None = None
    unclosed_thinking: bool = False
    trimmed_experiences: int = 0


class ExtraCallRecord(_LimitsOnlyWhenSet):
    """A non-debate generation (summary, judge) charged to the question."""

    tag: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    cached: bool
    seconds: float
    cut: Literal["context_overflow", "context_capped", "max_tokens"] | None = None
    unclosed_thinking: bool = False

    @classmethod
    def from_completion(cls, tag: str, completion: Any) -> "ExtraCallRecord":
        """The cost of ``completion`` (an :class:`r2mad_core.engine.Completion`) under ``tag``."""
        return cls(tag=tag, prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
                   finish_reason=completion.finish_reason, cached=completion.cached, seconds=completion.seconds,
                   cut=getattr(completion, "cut", None),
                   unclosed_thinking=bool(getattr(completion, "unclosed_thinking", False)))


class RoundRecord(_Record):
    """Round t of one debate: Z^(t) (``agents``), Cons(Z^(t)) (Eq. 3), h^(t) (Eq. 2), MAD-M2's masking record,
    the extra calls charged to the round and this debate's share of the round's wall time."""

    round: int
    agents: list[TurnRecord]
    consensus_ratio: float
    unanimous: bool
    summary: str | None
    masking: dict[str, Any] | None
    extra_calls: list[ExtraCallRecord]
    seconds: float

    @property
    def index(self) -> int:
        """t (the debate loop's name for ``round``)."""
        return self.round

    @property
    def turns(self) -> list[TurnRecord]:
        """The agents' turns (the debate loop's name for ``agents``)."""
        return self.agents

    @property
    def responses(self) -> list[str]:
        return [t.response for t in self.agents]

    @property
    def answers(self) -> list[str | None]:
        return [t.answer for t in self.agents]


class VoteRecord(_Record):
    """The final answer of the last round (:func:`r2mad_core.debate.vote.vote`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    answer: str | None
    correct: bool
    rule: str
    group_sizes: tuple[int, ...]  # sizes of the answer groups, largest first
    tied: bool  # a tie between the largest groups was broken by the seeded rule


class TokenCount(_Record):
    requests: int | float
    cached: int | float
    prompt_tokens: int | float
    completion_tokens: int | float
    seconds: float


class TranscriptRecord(_Record):
    """One line of ``transcripts.jsonl``: one question's finished debate."""

    sample_id: str
    benchmark: str
    split: Literal["test", "train", "all"]
    gold: str
    num_options: int | None
    method: str
    seed: int
    rounds: list[RoundRecord]
    n_rounds_executed: int
    stopped_early: bool
    final_answer: str | None
    correct: bool
    vote: VoteRecord
    tokens: dict[str, TokenCount] = {}  # by tag: debate, summary, judge (written always; recomputable)
    seconds: float
    truncated_completions: int


#: A transcript record, or its JSON object (validated at the door by :func:`as_transcript`).
Transcript = Union[TranscriptRecord, Mapping[str, Any]]


def as_transcript(record: TranscriptRecord | Any) -> TranscriptRecord:
    """``record`` itself when it is a :class:`TranscriptRecord`, else the JSON object of one line validated into
    one (a hand-made record; ``ValueError`` naming the first field that does not fit)."""
    if isinstance(record, TranscriptRecord):
        return record
    try:
        return TranscriptRecord.model_validate(record)
    except ValidationError as exc:
        found = problems(TranscriptRecord, record)
        raise ValueError(f"not a transcript record (r2mad_core.records.TranscriptRecord): {found[0] if found else exc}"
                         + (f"; and {len(found) - 1} more" if len(found) > 1 else "")) from None


def as_transcripts(records: Iterable[TranscriptRecord | Any]) -> list[TranscriptRecord]:
    """:func:`as_transcript` of each record."""
    return [as_transcript(r) for r in records]


class RunConfig(BaseModel):
    """``config.json`` of a run directory: what produced it (checked on resume). Unknown keys are kept
    (a method's ``inputs``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    format: int
    benchmark: str
    split: str
    limit: int | None
    seed: int
    method: dict[str, Any]
    engine: dict[str, Any]
    n_samples: int
    sample_ids_sha256: str
    r2mad_version: str
    chunk_size: int


def without_seconds(value: Any) -> Any:
    """A transcript record (or any JSON value) without its wall-time fields: every ``seconds`` key (per sample,
    round, turn, extra call and tag). They measure one run's wall clock and engine time, so they differ between
    any two runs, whatever the schedule; two runs of the same requests must agree on everything else."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, dict):
        # str keys as in the file (a record's peer_confidence has int keys in memory, str keys in JSON)
        return {str(k) if isinstance(k, int) else k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, (list, tuple)):
        return [without_seconds(v) for v in value]
    return value


def problems(model: type[BaseModel], data: Any) -> list[str]:
    """The schema problems of ``data``, one ``field.path: message (found value)`` each; ``[]`` if it fits."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        out = []
        for error in exc.errors(include_url=False):
            where = ".".join(str(p) for p in error["loc"]) or "(the record)"
            found = "missing" if error["type"] == "missing" else repr(error["input"])[:80]
            out.append(f"{where}: {error['msg']} (found {found})")
        return out
    return []


# ------------------------------------------------------------------------------------------------
# Reading a run directory's files (r2mad_lab.experiments.cell writes them)
# ------------------------------------------------------------------------------------------------
class RunConfigMismatch(ValueError):
    """The run directory holds a different cell than the one requested (or a config.json that cannot be read)."""


class TranscriptError(ValueError):
    """``transcripts.jsonl`` is damaged in a way that is not a truncated last line, or holds another cell's records."""


def read_config(path: Path) -> dict[str, Any]:
    """A run directory's ``config.json``, checked against :class:`r2mad_core.records.RunConfig`; RunConfigMismatch
    naming the file and the first problem when it is not valid JSON or does not fit (hand-edited, damaged)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunConfigMismatch(f"{path}: not valid JSON ({exc}); restore it or use another --out directory") from None
    mismatch = problems(RunConfig, found)
    if mismatch:
        raise RunConfigMismatch(
            f"{path}: does not fit the run configuration schema (r2mad_core.records.RunConfig): {mismatch[0]}"
            + (f"; and {len(mismatch) - 1} more" if len(mismatch) > 1 else "")
            + "; restore it or use another --out directory"
        )
    return found


def check_records(path: Path, records: Any, ids: Sequence[str], **cell: Any) -> None:
    """TranscriptError when stored ``records`` are not this cell's: a sample not among ``ids``, or a record whose
    method, seed, split or benchmark (each record says them) differs from ``cell``'s. Beside config.json's check,
    so that no record of another cell is ever counted as this one's."""
    records = list(records)
    stray = sorted({r.sample_id for r in records} - set(ids))
    if stray:
        raise TranscriptError(f"{path}: holds samples not in this cell, e.g. {stray[:3]}")
    for record in records:
        for name, expected in cell.items():
            found = getattr(record, name)
            if found != expected:
                raise TranscriptError(
                    f"{path}: sample {record.sample_id!r} was run with {name} {found!r}, this cell's is {expected!r}; "
                    "use another --out directory"
                )
