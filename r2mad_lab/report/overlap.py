"""Near-identical rows: how often two rows of a table retrieved the same cases (Eq. 5), from their transcripts.

The note names the pairs above :data:`NEAR_IDENTICAL_SHARE`.

Two retrieval policies can differ in their definition and still pick the same cases almost always (at K = 1
Positive-only and Debate-State-Aware both pick the most similar case of reward 1 unless lambda_t reaches 0): their
rows then differ mostly by sampling noise, and a reader comparing them should know it. A retrieval of row a and one of
row b are paired when they are the same (question, round, agent) of the same (model, benchmark) cell; the share is
the fraction of paired retrievals whose case ids are the same set. Rows equal by construction
(``Table.equal_rows``) are already named as such and are not named again.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Iterable, Sequence

from r2mad_core.records import as_transcript

#: Rows whose paired retrievals are the same cases on at least this share are named near-identical.
NEAR_IDENTICAL_SHARE = 0.8


def retrievals(outcomes: Iterable[Any]) -> dict[tuple, frozenset]:
    """(model, benchmark, question, round, agent) -> the retrieved case ids, over the records of ``outcomes``
    (``CellOutcome``\\ s); a retrieval that recorded no case ids is left out."""
    out = {}
    for outcome in outcomes:
        model = getattr(outcome, "model", None)
        cell = (getattr(model, "label", model), getattr(outcome, "benchmark", None))
        for record in getattr(outcome, "records", None) or ():
            try:
                record = as_transcript(record)
            except ValueError:  # not a debate transcript (a table of other cells): nothing retrieved to compare
                continue
            for rnd in record.rounds[1:]:
                for agent in rnd.agents:
                    ids = (agent.retrieved or {}).get("case_ids")
                    if ids is not None:
                        out[(*cell, record.sample_id, rnd.round, agent.agent)] = frozenset(map(str, ids))
    return out


def shared_share(a: dict[tuple, frozenset], b: dict[tuple, frozenset]) -> tuple[float, int]:
    """(share of the paired retrievals with the same cases, paired retrievals); (nan, 0) when none pair."""
    paired = [key for key in a if key in b]
    if not paired:
        return float("nan"), 0
    return sum(a[k] == b[k] for k in paired) / len(paired), len(paired)


def near_identical_pairs(table: Any, threshold: float = NEAR_IDENTICAL_SHARE) -> list[tuple[Any, Any, float, int]]:
    """(row a, row b, share, paired retrievals) of every pair of rows of ``table`` (a
    :class:`~r2mad_lab.report.tables.Table` with ``cells``) whose retrievals over its benchmark columns (not the
    Average, which repeats them) are the same cases on at least ``threshold`` of the paired ones; pairs inside one
    group of rows equal by construction are left out."""
    cells = getattr(table, "cells", None) or {}
    rows: dict[Any, list[Any]] = {}
    for (row, column), outcomes in cells.items():
        if str(column) != "Average":
            rows.setdefault(row, []).extend(outcomes)
    equal = [set(group) for group in getattr(table, "equal_rows", ()) or ()]
    found = {row: retrievals(outcomes) for row, outcomes in rows.items()}
    pairs = []
    for a, b in combinations([r for r in rows if found[r]], 2):
        if any(a in group and b in group for group in equal):
            continue
        share, n = shared_share(found[a], found[b])
        if n and share >= threshold:
            pairs.append((a, b, share, n))
    return pairs


def _name(row: Any) -> str:
    return " / ".join(map(str, row)) if isinstance(row, tuple) else str(row)


def near_identical_note(table: Any, threshold: float = NEAR_IDENTICAL_SHARE) -> str:
    """The sentence a table's caption carries when some of its rows are near-identical (:func:`near_identical_pairs`),
    else ""."""
    pairs = near_identical_pairs(table, threshold)
    if not pairs:
        return ""
    named = "; ".join(f"{_name(a)} and {_name(b)} ({share:.0%} of {n:,})" for a, b, share, n in pairs)
    return (f"Near-identical rows (the same retrieved cases on at least {threshold:.0%} of the retrievals both made, "
            f"from the transcripts): {named}; their difference is mostly sampling noise.")


def with_note(caption: str | None, notes: Sequence[str]) -> str | None:
    """``caption`` with each non-empty note of ``notes`` appended once."""
    text = caption or ""
    for note in notes:
        if note and note not in text:
            text = f"{text.rstrip()} {note}" if text.strip() else note
    return text if text or caption is not None else caption
