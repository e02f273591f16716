"""Records: the typed schema of a run directory's files (``transcripts.jsonl`` lines and ``config.json``).

One transcript line is one finished debate of one question (:class:`TranscriptRecord`): every round t
(:class:`RoundRecordModel`) with every agent's response z_i^(t) (Eq. 1; :class:`TurnRecord`), the consensus
Cons(Z^(t)) of Eq. 2's debate state, the summary h^(t), and for R2-MAD what the round hook did: the experiences
retrieved by Eq. 8's MMR policy (``retrieved``: case ids, scores, lambda_t) and the confidence c_ji of Eqs. 5-7
with its annotation. Then the vote over the last round, token costs and wall time.

The writer (:func:`r2mad_core.experiments.cell.transcript_record`) and the reader
(:class:`r2mad_core.experiments.cell.TranscriptStore`) both go through these models, so a line that does not fit the
schema is an error naming the file, the line and the field, not a ``KeyError`` three modules later. Readers get
plain dicts (the JSON as written); ``TranscriptRecord.model_validate(record)`` gives the typed view.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TurnRecord(_Record):
    """Agent i's response at one round (:class:`r2mad_core.debate.loop.AgentTurn`)."""

    agent: int
    response: str
    answer: str | None
    correct: bool | None
    finish_reason: str
    truncated: bool
    empty: bool
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    seconds: float
    # Written for every turn; a reader does not need them (a hand-made record may leave them out).
    prompt_id: str = ""
    mean_logprob: float | None = None
    visible_peers: list[int] | None = None
    peer_confidence: dict[str, str | None] = {}  # peer j -> its Eq. 7 annotation shown to agent i (None: none)
    n_experiences: int = 0
    retrieved: dict[str, Any] = {}  # the round hook's record: policy, case ids, scores, lambda_t, confidence
    # Written only when set: the limit that ended the response (context_overflow, context_capped, max_tokens:
    # r2mad_core.engines.base.CUTS), a response that stopped inside <think>, experiences left out to fit.
    cut: Literal["context_overflow", "context_capped", "max_tokens"] | None = None
    unclosed_thinking: bool = False
    trimmed_experiences: int = 0


class ExtraCallRecord(_Record):
    """A non-debate generation (summary, judge) charged to the question."""

    tag: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    cached: bool
    seconds: float
    cut: Literal["context_overflow", "context_capped", "max_tokens"] | None = None
    unclosed_thinking: bool = False


class RoundRecordModel(_Record):
    """Round t of one debate (:class:`r2mad_core.debate.loop.RoundRecord`)."""

    round: int
    agents: list[TurnRecord]
    consensus_ratio: float
    unanimous: bool
    summary: str | None
    masking: dict[str, Any] | None
    extra_calls: list[ExtraCallRecord]
    seconds: float


class VoteRecord(_Record):
    """The final answer of the last round (:class:`r2mad_core.debate.scoring.VoteResult`)."""

    answer: str | None
    correct: bool
    rule: str
    group_sizes: list[int]
    tied: bool


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
    rounds: list[RoundRecordModel]
    n_rounds_executed: int
    stopped_early: bool
    final_answer: str | None
    correct: bool
    vote: VoteRecord
    tokens: dict[str, TokenCount] = {}  # by tag: debate, summary, judge (written always; recomputable)
    seconds: float
    truncated_completions: int


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
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
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
