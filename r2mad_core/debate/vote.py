"""The final answer of a debate: Appendix A's vote over the last round, and a transcript scored again (no generation).

Everything here reads transcripts (:class:`r2mad_core.records.TranscriptRecord`, the lines of
``transcripts.jsonl``, see :mod:`r2mad_lab.experiments.transcripts`; a hand-made dict goes through
:func:`r2mad_core.records.as_transcript`) and never calls an engine, so a new vote rule or answer parser
never needs new generations.

Final answer (Appendix A: "majority voting is performed over the responses of all agents")
-----------------------------------------------------------------------------------------
``plurality`` (default): the answers of the last executed round are grouped into checker-equivalent
groups (:func:`r2mad_core.debate.loop.group_answers`, the grouping of Cons(Z), Eq. 3); the largest group
wins; None answers never win (all None -> None, scored wrong). Ties between groups of the same
size are broken by a seeded random choice: ``numpy.random.default_rng`` seeded with the first 8
bytes of SHA-256 of ``"{run seed}:{sample id}"``; candidates in order of their lowest agent index.
The winning group's answer is the one of its lowest-index agent. Self-Consistency votes over its k
samples the same way; CoT has a single answer.

``authors_majority_correct``: the rule of the authors' code, for comparison. The debate counts as
correct when more last-round agents are correct than wrong (a None answer is wrong); the reported
answer is then the last correct agent's answer, otherwise the last wrong agent's answer. It looks
at the gold answer, so it is a scoring rule only.

Truncated completions (finish reason ``length``, cut off at ``max_tokens``)
-------------------------------------------------------------------------
Every turn records its ``finish_reason`` and a ``truncated`` flag (counted by
:func:`r2mad_lab.experiments.metrics.completion_health`). How their answers are scored is the named option
``truncated_answers`` (:data:`TRUNCATED_ANSWER_POLICIES`):

- ``"keep"`` (default): the answer written before the cut counts, as a reader of the text would take
  it. It is the answer the debate itself used: the peers read that text, and the consensus ratio and
  early stopping counted that answer, so scoring the same answer keeps the score consistent with the
  debate that ran; a model that stated a boxed answer and kept writing still answered. The paper
  does not mention truncation (its max_tokens, 6144, makes it rare); the CPU profile's small
  max_tokens makes it common, hence the counts in every summary and the ``"missing"`` option.
- ``"missing"``: a truncated turn's answer is treated as no answer (None, wrong): per-agent
  correctness, the final vote (re-voted under the record's rule, or ``vote_rule``), stance transitions
  and per-round accuracy follow. Consensus ratios stay as run (they steered the debate). Recomputed
  from transcripts (:func:`rescore_record`), no generation: ``r2mad score --truncated-answers missing``.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from r2mad_core.data import answers
from r2mad_core.debate.loop import group_answers
from r2mad_core.debate.settings import VOTE_RULES
from r2mad_core.records import ExtraCallRecord, Transcript, TranscriptRecord, TurnRecord, VoteRecord, as_transcript

TRUNCATED_ANSWER_POLICIES = ("keep", "missing")
TRUNCATED_FINISH_REASON = "length"


#: The final answer of one sample: the transcript's own vote record.
Vote = VoteRecord


def tie_break_seed(run_seed: int, sample_id: str) -> int:
    digest = hashlib.sha256(f"{run_seed}:{sample_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def plurality_vote(
    values: Sequence[str | None], benchmark: str, *, run_seed: int = 0, sample_id: str = ""
) -> tuple[str | None, bool, tuple[int, ...]]:
    """(answer, tied, group sizes) by plurality over checker-equivalent answers (module docstring)."""
    groups = group_answers(values, benchmark)
    if not groups:
        return None, False, ()
    sizes = tuple(sorted((len(g) for g in groups), reverse=True))
    top = max(len(g) for g in groups)
    leaders = [g for g in groups if len(g) == top]  # ordered by lowest agent index
    if len(leaders) == 1:
        return values[leaders[0][0]], False, sizes
    rng = np.random.default_rng(tie_break_seed(run_seed, sample_id))
    chosen = leaders[int(rng.integers(len(leaders)))]
    return values[chosen[0]], True, sizes


def vote(
    values: Sequence[str | None],
    gold: str,
    benchmark: str,
    *,
    rule: str = "plurality",
    run_seed: int = 0,
    sample_id: str = "",
    corrects: Sequence[bool] | None = None,
) -> Vote:
    """The final answer of one sample from its last-round answers (or SC's k answers)."""
    if rule not in VOTE_RULES:
        raise ValueError(f"unknown vote rule {rule!r}: expected one of {VOTE_RULES}")
    if corrects is None:
        corrects = [v is not None and answers.is_correct(v, gold, benchmark) for v in values]
    if len(corrects) != len(values):
        raise ValueError(f"vote: {len(values)} answers but {len(corrects)} correctness flags")
    if rule == "plurality":
        answer, tied, sizes = plurality_vote(values, benchmark, run_seed=run_seed, sample_id=sample_id)
        if answer is None:
            return Vote(answer=None, correct=False, rule=rule, group_sizes=sizes, tied=tied)
        # The winner's correctness is its group's: every member is equivalent to it.
        winner_correct = answers.is_correct(answer, gold, benchmark)
        return Vote(answer=answer, correct=bool(winner_correct), rule=rule, group_sizes=sizes, tied=tied)
    # authors_majority_correct
    n_correct = sum(bool(c) for c in corrects)
    n_wrong = len(corrects) - n_correct
    is_final_correct = n_correct > n_wrong
    answer = None
    for value, c in zip(values, corrects, strict=False):
        if bool(c) == is_final_correct:
            answer = value
    sizes = tuple(sorted((len(g) for g in group_answers(values, benchmark)), reverse=True))
    return Vote(answer=answer, correct=is_final_correct, rule=rule, group_sizes=sizes, tied=False)


def final_round_answers(record: Transcript) -> tuple[list[str | None], list[bool]]:
    """Answers and correctness of the last executed round of a transcript record."""
    last = as_transcript(record).rounds[-1].agents
    return [a.answer for a in last], [bool(a.correct) for a in last]


def revote(record: Transcript, *, rule: str = "plurality", run_seed: int = 0) -> Vote:
    """Recompute the final answer of a transcript record under ``rule`` (no generation)."""
    record = as_transcript(record)
    values, corrects = final_round_answers(record)
    return vote(
        values,
        record.gold,
        record.benchmark,
        rule=rule,
        run_seed=run_seed,
        sample_id=record.sample_id,
        corrects=corrects,
    )


def reextract(record: Transcript) -> TranscriptRecord:
    """A copy of a transcript record with answers re-extracted from the stored responses and
    correctness recomputed (after a parser change). Consensus ratios stay as run: they steered
    early stopping. The final answer must be recomputed with :func:`revote`."""
    record = as_transcript(record)
    rounds = []
    for r in record.rounds:
        agents = []
        for a in r.agents:
            answer = answers.extract_answer(a.response, record.benchmark, num_options=record.num_options)
            correct = answer is not None and answers.is_correct(answer, record.gold, record.benchmark)
            agents.append(a.model_copy(update={"answer": answer, "correct": correct}))
        rounds.append(r.model_copy(update={"agents": agents}))
    return record.model_copy(update={"rounds": rounds})


def is_truncated(turn: TurnRecord | ExtraCallRecord) -> bool:
    """A transcript turn (or extra call) cut off at ``max_tokens`` (finish reason ``length``)."""
    return turn.finish_reason == TRUNCATED_FINISH_REASON


def check_truncated_answers(policy: str) -> str:
    if policy not in TRUNCATED_ANSWER_POLICIES:
        raise ValueError(f"unknown truncated_answers {policy!r}: expected one of {TRUNCATED_ANSWER_POLICIES}")
    return policy


def rescore_record(
    record: Transcript,
    *,
    vote_rule: str | None = None,
    truncated_answers: str = "keep",
    run_seed: int = 0,
) -> TranscriptRecord:
    """A copy of a transcript record scored under ``truncated_answers`` (module docstring) with its final
    answer re-voted under ``vote_rule`` (None: the record's own rule). No generation."""
    check_truncated_answers(truncated_answers)
    out = as_transcript(record)
    if truncated_answers == "missing":
        rounds = []
        for r in out.rounds:
            agents = [
                a.model_copy(update={"answer": None, "correct": False}) if is_truncated(a) else a
                for a in r.agents
            ]
            rounds.append(r.model_copy(update={"agents": agents}))
        out = out.model_copy(update={"rounds": rounds})
    rule = vote_rule or out.vote.rule or "plurality"
    result = revote(out, rule=rule, run_seed=run_seed)
    return out.model_copy(update={"final_answer": result.answer, "correct": result.correct, "vote": result})
