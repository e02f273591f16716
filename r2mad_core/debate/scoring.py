"""Scoring: final answer by vote, accuracy with a bootstrap CI, paired tests, the shared-misconception
subset, stance transitions, token/time cost and completion health (Section 5, Tables 1-4, Appendix A).

Everything here reads transcripts (:class:`r2mad_core.records.TranscriptRecord`, the lines of
``transcripts.jsonl``, see :mod:`r2mad_core.experiments.cell`; a hand-made dict goes through
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

Stance transitions (Table 3 and Appendix "Additional Flip and Recovery Analysis")
-----------------------------------------------------------------------------------
Over all consecutive executed round pairs (t-1, t) of every agent of every sample in the subset
(samples that stopped early contribute only the rounds they ran):
``C->W = #(correct at t-1 and wrong at t) / #(correct at t-1)`` and
``W->C = #(wrong at t-1 and correct at t) / #(wrong at t-1)``; a None answer counts as wrong;
a rate with an empty denominator is NaN.

Shared-misconception subset (RQ4): the samples where a strict majority of the MAD agents is wrong
at round 0 (``#wrong > n_agents / 2``), computed from a MAD run's transcripts.

Truncated completions (finish reason ``length``, cut off at ``max_tokens``)
-------------------------------------------------------------------------
Every turn records its ``finish_reason`` and a ``truncated`` flag; :func:`completion_health` counts
them (all rounds, the voted last round, extra calls) and ``metrics["truncated_share"]`` is their
share of the debate completions. How their answers are scored is the named option
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

Accuracy CI: percentile bootstrap over samples. Resampling n Bernoulli outcomes with replacement
and averaging is exactly a Binomial(n, p_hat) / n draw, so the B bootstrap replicates are drawn
as one vectorised ``rng.binomial`` call (seeded).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from r2mad_core.data import answers
from r2mad_core.debate.loop import group_answers
from r2mad_core.debate.settings import VOTE_RULES  # noqa: F401  (the vote rules are a debate setting)
from r2mad_core.records import (ExtraCallRecord, RoundRecord, TranscriptRecord, TurnRecord, VoteRecord, as_transcript,
                                as_transcripts)

#: A transcript record, or its JSON object (validated at the door by :func:`r2mad_core.records.as_transcript`).
Transcript = Union[TranscriptRecord, Mapping[str, Any]]

TRUNCATED_ANSWER_POLICIES = ("keep", "missing")
TAGS = ("debate", "summary", "judge")
TRUNCATED_FINISH_REASON = "length"


# --------------------------------------------------------------------------------------------
# Vote
# --------------------------------------------------------------------------------------------
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
    for value, c in zip(values, corrects):
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


# --------------------------------------------------------------------------------------------
# Accuracy and paired tests
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Accuracy:
    accuracy: float
    low: float
    high: float
    n: int
    level: float
    n_bootstrap: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        pct = round(self.level * 100)
        return f"{self.accuracy:.3f} [{pct}% CI {self.low:.3f}, {self.high:.3f}] (n={self.n})"


#: Below this many questions an accuracy's CI is the exact Clopper-Pearson interval, not the percentile bootstrap (the
#: rule's small-sample n at alpha = 0.05, r2mad_core.report.inference.minimum_n; docs/statistics.md rule 6).
EXACT_INTERVAL_BELOW = 15


def accuracy_with_ci(
    correct: Sequence[bool] | np.ndarray, *, level: float = 0.95, n_bootstrap: int = 10_000, seed: int = 0
) -> Accuracy:
    """Accuracy with a percentile bootstrap CI (seeded; see the module docstring), the exact Clopper-Pearson interval
    below :data:`EXACT_INTERVAL_BELOW` questions (``n_bootstrap`` recorded as 0). Empty -> NaN."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"accuracy_with_ci: level must be in (0, 1), found {level}")
    if n_bootstrap < 1:
        raise ValueError(f"accuracy_with_ci: n_bootstrap must be >= 1, found {n_bootstrap}")
    x = np.asarray(correct, dtype=bool)
    n = int(x.size)
    if n == 0:
        return Accuracy(math.nan, math.nan, math.nan, 0, level, n_bootstrap)
    p = float(x.mean())
    alpha = (1.0 - level) / 2.0
    if n < EXACT_INTERVAL_BELOW:
        # the percentile bootstrap collapses at small n ("0.000 [0.000, 0.000]" at n = 1): the exact
        # (Clopper-Pearson) interval instead, which covers at least `level` at every n
        from scipy.stats import beta  # lazy: scipy.stats takes seconds to import

        k = int(x.sum())
        low = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
        high = 1.0 if k == n else float(beta.ppf(1.0 - alpha, k + 1, n - k))
        return Accuracy(p, low, high, n, level, 0)
    rng = np.random.default_rng(seed)
    replicates = rng.binomial(n, p, size=n_bootstrap) / n
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return Accuracy(p, float(low), float(high), n, level, n_bootstrap)


@dataclass(frozen=True)
class PairedTest:
    """Method A vs method B on the same samples: McNemar's exact test and the accuracy difference."""

    n: int
    accuracy_a: float
    accuracy_b: float
    difference: float  # accuracy_a - accuracy_b
    only_a_correct: int
    only_b_correct: int
    p_value: float
    difference_low: float
    difference_high: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_test(
    correct_a: Mapping[str, bool] | Sequence[bool],
    correct_b: Mapping[str, bool] | Sequence[bool],
    *,
    level: float = 0.95,
    n_bootstrap: int = 10_000,
    seed: int = 0,
) -> PairedTest:
    """McNemar's exact test (two-sided binomial test on the discordant pairs) and a paired
    bootstrap CI of the accuracy difference. Mappings are matched by sample id (they must cover
    the same ids); sequences by position."""
    if isinstance(correct_a, Mapping) or isinstance(correct_b, Mapping):
        if not (isinstance(correct_a, Mapping) and isinstance(correct_b, Mapping)):
            raise TypeError("paired_test: give two mappings (sample id -> correct) or two sequences")
        ids_a, ids_b = set(correct_a), set(correct_b)
        if ids_a != ids_b:
            raise ValueError(
                f"paired_test: the two runs cover different samples: {len(ids_a - ids_b)} only in A "
                f"(e.g. {sorted(ids_a - ids_b)[:3]}), {len(ids_b - ids_a)} only in B (e.g. {sorted(ids_b - ids_a)[:3]})"
            )
        ids = sorted(ids_a)
        a = np.array([bool(correct_a[i]) for i in ids])
        b = np.array([bool(correct_b[i]) for i in ids])
    else:
        a = np.asarray(correct_a, dtype=bool)
        b = np.asarray(correct_b, dtype=bool)
        if a.shape != b.shape:
            raise ValueError(f"paired_test: {a.size} outcomes for A but {b.size} for B")
    n = int(a.size)
    if n == 0:
        raise ValueError("paired_test: no samples")
    from scipy.stats import binomtest  # imported here: scipy.stats takes seconds to import

    only_a = int(np.sum(a & ~b))
    only_b = int(np.sum(~a & b))
    discordant = only_a + only_b
    p_value = 1.0 if discordant == 0 else float(binomtest(only_a, discordant, 0.5).pvalue)
    # Paired bootstrap: resampling the n pairs with replacement only matters through how many of
    # the drawn pairs are "only A correct" / "only B correct" / concordant: a multinomial draw.
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, [only_a / n, only_b / n, 1.0 - discordant / n], size=n_bootstrap)
    diffs = (counts[:, 0] - counts[:, 1]) / n
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(diffs, [alpha, 1.0 - alpha])
    return PairedTest(
        n=n,
        accuracy_a=float(a.mean()),
        accuracy_b=float(b.mean()),
        difference=float(a.mean() - b.mean()),
        only_a_correct=only_a,
        only_b_correct=only_b,
        p_value=p_value,
        difference_low=float(low),
        difference_high=float(high),
    )


def correct_by_sample(records: Iterable[Transcript]) -> dict[str, bool]:
    return {r.sample_id: bool(r.correct) for r in map(as_transcript, records)}


# --------------------------------------------------------------------------------------------
# Shared misconception and stance transitions
# --------------------------------------------------------------------------------------------
def shared_misconception_subset(mad_records: Iterable[Transcript]) -> set[str]:
    """Sample ids where a strict majority of the MAD agents is wrong at round 0 (RQ4)."""
    subset = set()
    for r in map(as_transcript, mad_records):
        first = r.rounds[0].agents
        wrong = sum(1 for a in first if not a.correct)
        if wrong * 2 > len(first):
            subset.add(r.sample_id)
    return subset


@dataclass(frozen=True)
class TransitionRates:
    c_to_w: float
    w_to_c: float
    n_correct_before: int
    n_wrong_before: int
    n_c_to_w: int
    n_w_to_c: int
    n_samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stance_transitions(records: Iterable[Transcript], subset: Iterable[str] | None = None) -> TransitionRates:
    """C->W and W->C rates over agent-round transitions (definition in the module docstring)."""
    keep = None if subset is None else set(subset)
    n_c = n_w = c_to_w = w_to_c = n_samples = 0
    for r in map(as_transcript, records):
        if keep is not None and r.sample_id not in keep:
            continue
        n_samples += 1
        rounds = r.rounds
        for before, after in zip(rounds, rounds[1:]):
            for a_before, a_after in zip(before.agents, after.agents):
                if a_before.correct:
                    n_c += 1
                    c_to_w += int(not a_after.correct)
                else:
                    n_w += 1
                    w_to_c += int(bool(a_after.correct))
    return TransitionRates(
        c_to_w=c_to_w / n_c if n_c else math.nan,
        w_to_c=w_to_c / n_w if n_w else math.nan,
        n_correct_before=n_c,
        n_wrong_before=n_w,
        n_c_to_w=c_to_w,
        n_w_to_c=w_to_c,
        n_samples=n_samples,
    )


# --------------------------------------------------------------------------------------------
# Cost and completion health
# --------------------------------------------------------------------------------------------
def sample_cost(record: Transcript | Sequence[RoundRecord]) -> dict[str, dict[str, float]]:
    """Per-tag requests / cached / prompt / completion tokens of one transcript record (or of its rounds, as
    the run cell computes them before the record exists)."""
    rounds = record if isinstance(record, (list, tuple)) else as_transcript(record).rounds
    out: dict[str, dict[str, float]] = defaultdict(
        lambda: {"requests": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}
    )
    for r in rounds:
        for item in [*r.agents, *r.extra_calls]:
            c = out["debate" if isinstance(item, TurnRecord) else item.tag]
            c["requests"] += 1
            c["cached"] += int(bool(item.cached))
            c["prompt_tokens"] += item.prompt_tokens
            c["completion_tokens"] += item.completion_tokens
            c["seconds"] += item.seconds
    return {tag: dict(v) for tag, v in out.items()}


def cost_per_query(records: Sequence[Transcript]) -> dict[str, Any]:
    """Mean tokens per query by tag (prompt, completion, total), mean requests, wall seconds per query."""
    n = len(records)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    seconds = 0.0
    for record in map(as_transcript, records):
        for tag, c in sample_cost(record).items():
            for k, v in c.items():
                totals[tag][k] += v
        seconds += float(record.seconds)
    per_tag = {}
    for tag in sorted(totals):
        t = totals[tag]
        per_tag[tag] = {
            "requests": t["requests"] / n,
            "cached_fraction": t["cached"] / t["requests"] if t["requests"] else math.nan,
            "prompt_tokens": t["prompt_tokens"] / n,
            "completion_tokens": t["completion_tokens"] / n,
            "total_tokens": (t["prompt_tokens"] + t["completion_tokens"]) / n,
        }
    return {"n": n, "tokens_per_query": per_tag, "seconds_per_query": seconds / n if n else math.nan}


#: The limits counted apart in ``completion_health`` (debate turns and extra calls together): a prompt that did
#: not fit the context, an output the context capped, a ``max_tokens`` cut, an output that stopped inside
#: ``<think>`` (usually also one of the cuts before), and prompts that fit only after experiences were left out.
LIMIT_COUNTS = ("context_overflow", "context_capped", "max_tokens_cut", "unclosed_thinking", "trimmed_prompts")


def turn_cut(turn: TurnRecord | ExtraCallRecord) -> str | None:
    """The limit that ended a transcript turn or extra call (``context_overflow``, ``context_capped``,
    ``max_tokens``), None if none did. A record written before ``cut`` was recorded: a ``length`` turn with no
    generated token is an overflow, any other ``length`` turn a ``max_tokens`` cut."""
    if turn.cut:
        return str(turn.cut)
    if not is_truncated(turn):
        return None
    return "context_overflow" if not turn.completion_tokens else "max_tokens"


def limit_counts(records: Iterable[Transcript]) -> dict[str, int]:
    """:data:`LIMIT_COUNTS` over every completion of ``records`` (debate turns, summaries, judgements)."""
    counts = dict.fromkeys(LIMIT_COUNTS, 0)
    names = {"context_overflow": "context_overflow", "context_capped": "context_capped", "max_tokens": "max_tokens_cut"}
    for record in map(as_transcript, records):
        for r in record.rounds:
            for item in [*r.agents, *r.extra_calls]:
                cut = turn_cut(item)
                if cut in names:
                    counts[names[cut]] += 1
                counts["unclosed_thinking"] += int(bool(item.unclosed_thinking))
                counts["trimmed_prompts"] += int(bool(getattr(item, "trimmed_experiences", 0)))
    return counts


def answer_from_fallback(record: Transcript, response: str) -> bool:
    """Whether the answer of ``response`` (a turn of ``record``) came from a fallback extraction rule."""
    _, source = answers.extract_answer_with_source(response, record.benchmark, num_options=record.num_options)
    return source in answers.FALLBACK_SOURCES


def completion_health(records: Iterable[Transcript]) -> dict[str, int]:
    """Counts of debate completions: total, truncated (finish_reason ``length``), errors, empty
    texts, no extractable answer, an answer that came from a fallback rule rather than the prompt's
    format (``answer_fallback``: "the answer is (C)" without ``((C))``, a "The answer is 12" line
    without a box; :data:`r2mad_core.data.answers.FALLBACK_SOURCES`, re-read from the stored
    response); the same for the last round (the voted answers) and for extra calls
    (summaries/judgements) that were truncated; and :data:`LIMIT_COUNTS`, the limits that cut a
    completion, each apart (:func:`limit_counts`)."""
    records = as_transcripts(records)
    counts = dict.fromkeys(
        (
            "completions",
            "truncated",
            "error",
            "empty",
            "no_answer",
            "answer_fallback",
            "final_round_truncated",
            "final_round_no_answer",
            "final_round_answer_fallback",
            "extra_calls_truncated",
            "final_answer_none",
        ),
        0,
    )
    counts.update(limit_counts(records))
    for record in records:
        rounds = record.rounds
        for k, r in enumerate(rounds):
            last = k == len(rounds) - 1
            for a in r.agents:
                counts["completions"] += 1
                truncated = is_truncated(a)
                counts["truncated"] += int(truncated)
                counts["error"] += int(a.finish_reason == "error")
                counts["empty"] += int(not a.response.strip())
                counts["no_answer"] += int(a.answer is None)
                fallback = a.answer is not None and answer_from_fallback(record, a.response)
                counts["answer_fallback"] += int(fallback)
                if last:
                    counts["final_round_truncated"] += int(truncated)
                    counts["final_round_no_answer"] += int(a.answer is None)
                    counts["final_round_answer_fallback"] += int(fallback)
            for call in r.extra_calls:
                counts["extra_calls_truncated"] += int(is_truncated(call))
        counts["final_answer_none"] += int(record.final_answer is None)
    return counts


# --------------------------------------------------------------------------------------------
# Everything for metrics.json
# --------------------------------------------------------------------------------------------
def agent_accuracy_by_round(records: Sequence[Transcript]) -> list[float]:
    """Mean per-agent correctness at each round index, over the samples that ran that round."""
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for record in map(as_transcript, records):
        for r in record.rounds:
            s = sums[r.round]
            s[0] += sum(1 for a in r.agents if a.correct)
            s[1] += len(r.agents)
    return [sums[t][0] / sums[t][1] for t in sorted(sums)]


def agents_correct_by_round(records: Sequence[Transcript], horizon: int) -> list[tuple[int, int]]:
    """``(correct agent answers, answers)`` at each round t = 0 .. horizon-1 over every record; a debate
    that stopped early (unanimity) keeps its last answers for the rounds it did not run, so every round
    counts the same debates."""
    records = [as_transcript(r) for r in records]
    totals = []
    for t in range(horizon):
        right = count = 0
        for record in records:
            agents = record.rounds[min(t, len(record.rounds) - 1)].agents
            right += sum(1 for a in agents if a.correct)
            count += len(agents)
        totals.append((right, count))
    return totals


def compute_metrics(
    records: Sequence[Transcript],
    *,
    vote_rule: str | None = None,
    run_seed: int = 0,
    level: float = 0.95,
    n_bootstrap: int = 10_000,
    bootstrap_seed: int = 0,
    truncated_answers: str = "keep",
) -> dict[str, Any]:
    """The metrics of a run from its transcript records. ``vote_rule`` None uses each record's
    stored final answer; a rule name recomputes it (no generation). ``truncated_answers`` is how the
    answers of truncated completions count (module docstring; ``"missing"`` re-votes every record)."""
    check_truncated_answers(truncated_answers)
    records = [as_transcript(r) for r in records]
    rule = vote_rule if vote_rule is not None else (records[0].vote.rule if records else None)
    if vote_rule is not None or truncated_answers != "keep":
        records = [
            rescore_record(r, vote_rule=vote_rule, truncated_answers=truncated_answers, run_seed=run_seed)
            for r in records
        ]
    finals = [bool(r.correct) for r in records]
    ties = sum(1 for r in records if r.vote.tied)
    acc = accuracy_with_ci(finals, level=level, n_bootstrap=n_bootstrap, seed=bootstrap_seed)
    health = completion_health(records)
    return {
        "n": len(records),
        "accuracy": acc.accuracy,
        "ci_low": acc.low,
        "ci_high": acc.high,
        "ci_level": level,
        "n_bootstrap": n_bootstrap,
        "vote_rule": rule,
        "vote_ties": ties,
        "agent_accuracy_by_round": agent_accuracy_by_round(records),
        "mean_rounds_executed": (sum(len(r.rounds) for r in records) / len(records)) if records else math.nan,
        "stopped_early": sum(1 for r in records if r.stopped_early),
        **cost_per_query(records),
        "completion_health": health,
        "truncated_share": health["truncated"] / health["completions"] if health["completions"] else math.nan,
        "truncated_answers": truncated_answers,
    }


#: What each limit count of ``completion_health`` is called in the summary line.
CAUSE_NAMES = {"max_tokens_cut": "cut off at max_tokens", "context_overflow": "context overflow",
               "context_capped": "capped by the context"}


def truncation_causes(health: Mapping[str, Any]) -> str:
    """What cut the truncated completions, by name: the one cause (``context overflow``, ``cut off at
    max_tokens``, ``capped by the context``), or each with its count (counted over every call, summaries
    included, :func:`limit_counts`); metrics without the counts: ``cut off at max_tokens``."""
    causes = [(name, int(health.get(key, 0) or 0)) for key, name in CAUSE_NAMES.items()]
    causes = [(name, n) for name, n in causes if n]
    if not causes:
        return CAUSE_NAMES["max_tokens_cut"]
    if len(causes) == 1:
        return causes[0][0]
    return "by cause: " + ", ".join(f"{name} {n}" for name, n in causes)


def summary_line(metrics: Mapping[str, Any]) -> str:
    """One line: accuracy with CI and the cost per query."""
    level = round(metrics.get("ci_level", 0.95) * 100)
    tokens = metrics.get("tokens_per_query", {})
    cost = ", ".join(
        f"{tag} {tokens[tag]['total_tokens']:.0f}" for tag in sorted(tokens)
    ) or "no generations"
    health = metrics.get("completion_health", {})
    truncated, completions = health.get("truncated", 0), health.get("completions", 0)
    truncation = f"truncated {truncated}/{completions}"
    if truncated:
        policy = metrics.get("truncated_answers", "keep")
        truncation += (
            f" ({truncated / completions:.1%} {truncation_causes(health)}; their answers "
            + ("count as written" if policy == "keep" else "count as missing") + ")"
        )
    return (
        f"accuracy {metrics['accuracy']:.3f} [{level}% CI {metrics['ci_low']:.3f}, {metrics['ci_high']:.3f}] "
        f"(n={metrics['n']}) | tokens/query: {cost} | {metrics['seconds_per_query']:.2f} s/query | "
        f"{truncation}, no answer {health.get('no_answer', 0)}"
        + (f", answer from a fallback {health['answer_fallback']}" if health.get("answer_fallback") else "")
    )


def mean_accuracy_with_ci(
    groups: Sequence[Sequence[bool]], *, level: float = 0.95, n_bootstrap: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """The paper's "Average" column: the mean of per-benchmark accuracies, with a percentile
    bootstrap CI that resamples the questions of each benchmark independently.

    Resampling n Bernoulli outcomes and averaging is a Binomial(n, p_hat)/n draw, so each
    replicate is the mean over benchmarks of one such draw per benchmark. Returns
    ``(mean, low, high)``; NaNs when a group is empty.
    """
    arrays = [np.asarray(g, dtype=bool) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        return (math.nan, math.nan, math.nan)
    if len(arrays) == 1:  # one benchmark: its accuracy's interval (exact below the cutoff), as its own cell shows
        one = accuracy_with_ci(arrays[0], level=level, n_bootstrap=n_bootstrap, seed=seed)
        return (one.accuracy, one.low, one.high)
    rng = np.random.default_rng(seed)
    replicates = np.zeros(n_bootstrap)
    for outcomes in arrays:
        replicates += rng.binomial(outcomes.size, outcomes.mean(), size=n_bootstrap) / outcomes.size
    replicates /= len(arrays)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return (float(np.mean([a.mean() for a in arrays])), float(low), float(high))


# ----------------------------------------------------------------------------------------------
# What R2-MAD's transcripts record about retrieval (Eq. 5-6) and confidence (Eq. 7)
# ----------------------------------------------------------------------------------------------
def retrieval_trace(record: Transcript) -> list[dict[str, Any]]:
    """One row per agent and round t > 0 of an R2-MAD transcript: the answer, whether it was correct,
    lambda_t (Eq. 6), the retrieved case ids with their similarity, reward and the confidence c_{j,i}
    (Eq. 7) and annotation given to each peer (empty fields for a method that retrieved nothing)."""
    rows = []
    for rnd in as_transcript(record).rounds[1:]:
        for agent in rnd.agents:
            info = agent.retrieved  # the round hook's own record (its keys are the hook's)
            rows.append({"round": rnd.round, "agent": agent.agent, "answer": agent.answer,
                         "correct": agent.correct, "lambda_t": info.get("lambda"),
                         "retrieved": info.get("case_ids"), "similarity": info.get("similarities"),
                         "reward": info.get("rewards"), "confidence c_ji": info.get("confidence"),
                         "annotation": info.get("annotation")})
    return rows


def lambda_by_consensus(records: Iterable[Transcript]) -> dict[tuple[float, float], int]:
    """How often each (Cons(Z^(t-1)), lambda_t) pair occurred over every agent and round t > 0 (Eq. 6
    makes lambda_t a function of Cons(Z^(t-1)), so each consensus value maps to one lambda)."""
    counts: dict[tuple[float, float], int] = defaultdict(int)
    for record in map(as_transcript, records):
        for previous, rnd in zip(record.rounds, record.rounds[1:]):
            for agent in rnd.agents:
                value = agent.retrieved.get("lambda")
                if value is not None:
                    counts[(round(float(previous.consensus_ratio), 3), float(value))] += 1
    return dict(sorted(counts.items()))


def peer_confidences(records: Iterable[Transcript]) -> list[float]:
    """Every confidence c_{j,i} (Eq. 7) an agent computed for a peer, over all rounds t > 0."""
    values = []
    for record in map(as_transcript, records):
        for rnd in record.rounds[1:]:
            for agent in rnd.agents:
                values += [float(v) for v in (agent.retrieved.get("confidence") or {}).values() if v is not None]
    return values


@dataclass(frozen=True)
class AnnotationCounts:
    """The peer annotations an agent read (Eq. 7's thresholds), split by whether the annotated peer's
    answer (its previous-round answer, the one shown) was correct."""

    high_correct: int = 0
    low_correct: int = 0
    none_correct: int = 0
    high_wrong: int = 0
    low_wrong: int = 0
    none_wrong: int = 0

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def share(self, label: str) -> float:
        """Share of all annotations that were ``high``, ``low`` or ``none``."""
        count = getattr(self, f"{label}_correct") + getattr(self, f"{label}_wrong")
        return count / self.total if self.total else math.nan

    def rate(self, label: str, peer_correct: bool) -> float:
        """P(annotation = label | the peer's shown answer is correct / wrong)."""
        side = "correct" if peer_correct else "wrong"
        denominator = sum(getattr(self, f"{name}_{side}") for name in ("high", "low", "none"))
        return getattr(self, f"{label}_{side}") / denominator if denominator else math.nan

    @property
    def informativeness(self) -> float:
        """P(high | correct peer) - P(high | wrong peer): 0 when the annotations carry no information
        about who is right, 1 when they separate right from wrong perfectly."""
        return self.rate("high", True) - self.rate("high", False)


def annotation_counts(records: Iterable[Transcript]) -> AnnotationCounts:
    """Count the confidence annotations shown to agents (``peer_confidence`` of every turn at t > 0)
    against the correctness of the annotated peer's answer at t - 1."""
    counts = {f"{label}_{side}": 0 for label in ("high", "low", "none") for side in ("correct", "wrong")}
    for record in map(as_transcript, records):
        for previous, rnd in zip(record.rounds, record.rounds[1:]):
            shown = {a.agent: bool(a.correct) for a in previous.agents}
            for agent in rnd.agents:
                for peer, label in agent.peer_confidence.items():
                    side = "correct" if shown.get(peer, False) else "wrong"
                    counts[f"{label or 'none'}_{side}"] += 1
    return AnnotationCounts(**counts)


def masking_decisions(records: Iterable[Transcript]) -> list[dict[str, Any]]:
    """MAD-M2's masking of every round t > 0: how many responses were kept and, for subjective
    masking, the judge's verdicts (comma-separated)."""
    rows = []
    for record in map(as_transcript, records):
        for rnd in record.rounds[1:]:
            info = rnd.masking or {}  # the peer selector's own record (its keys are the selector's)
            if not info:
                continue
            rows.append({"round": rnd.round, "responses kept": len(info.get("kept") or []),
                         "verdicts": ",".join(str(v) for v in info.get("verdicts", [])) or None})
    return rows


def replayed_share(records: Sequence[Transcript]) -> float:
    """Share of the generations of these transcripts (every agent turn and extra call: summaries,
    judgements) that came from the response cache (``cached``) when the transcripts were written."""
    total = cached = 0
    for record in map(as_transcript, records):
        for rnd in record.rounds:
            for item in [*rnd.agents, *rnd.extra_calls]:
                total += 1
                cached += bool(item.cached)
    return cached / total if total else math.nan
