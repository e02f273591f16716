"""What R2-MAD's transcripts record about retrieval (Eqs. 5-6) and confidence (Eq. 7), read back for the notebooks.

Each function reads transcript records (the round hook's own ``retrieved`` record of every turn at t > 0 and the
``peer_confidence`` annotations shown) and never calls an engine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from r2mad_core.records import Transcript, as_transcript


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
        for previous, rnd in zip(record.rounds, record.rounds[1:], strict=False):
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
        for previous, rnd in zip(record.rounds, record.rounds[1:], strict=False):
            shown = {a.agent: bool(a.correct) for a in previous.agents}
            for agent in rnd.agents:
                for peer, label in agent.peer_confidence.items():
                    side = "correct" if shown.get(peer, False) else "wrong"
                    counts[f"{label or 'none'}_{side}"] += 1
    return AnnotationCounts(**counts)
