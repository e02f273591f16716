"""Stance transitions (Table 3) and the shared-misconception subset (RQ4), read from transcripts.

Stance transitions (Table 3 and Appendix "Additional Flip and Recovery Analysis")
-----------------------------------------------------------------------------------
Over all consecutive executed round pairs (t-1, t) of every agent of every sample in the subset
(samples that stopped early contribute only the rounds they ran):
``C->W = #(correct at t-1 and wrong at t) / #(correct at t-1)`` and
``W->C = #(wrong at t-1 and correct at t) / #(wrong at t-1)``; a None answer counts as wrong;
a rate with an empty denominator is NaN.

Shared-misconception subset (RQ4): the samples where a strict majority of the MAD agents is wrong
at round 0 (``#wrong > n_agents / 2``), computed from a MAD run's transcripts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from r2mad_core.records import Transcript, as_transcript


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
        for before, after in zip(rounds, rounds[1:], strict=False):
            for a_before, a_after in zip(before.agents, after.agents, strict=False):
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
