"""A run's metrics (``metrics.json``): accuracy with its CI, cost per query, completion health, the summary line.

Everything here reads transcripts and never calls an engine. :func:`completion_health` counts the truncated
completions (finish reason ``length``: all rounds, the voted last round, extra calls) and the limits that cut a
completion; ``metrics["truncated_share"]`` is their share of the debate completions. How their answers are scored
is :mod:`r2mad_core.debate.vote`'s ``truncated_answers``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from r2mad_core.data import answers
from r2mad_core.debate.vote import check_truncated_answers, is_truncated, rescore_record
from r2mad_core.records import ExtraCallRecord, RoundRecord, Transcript, TurnRecord, as_transcript, as_transcripts
from r2mad_lab.experiments.statistics import accuracy_with_ci

TAGS = ("debate", "summary", "judge")


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
