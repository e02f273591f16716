"""RQ4's subset design (docs/statistics.md, "Subsets"): a subset selected on one arm's own round 0 favours the other arm
even when both arms are the same computation; a shared round 0 (or a selector neither arm uses) does not.

The known null: two identical configurations (each question's agents right with the question's own probability at
round 0; the debate keeps the round-0 majority's answer with probability 0.6, else redraws it), many pairs of runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hand_transcripts import transcript

from r2mad_core.records import TranscriptRecord
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.report import inference
from r2mad_lab.report.results import (
    BIASED_DESIGN,
    SELECTOR_DESIGN,
    SHARED_DESIGN,
    CellOutcome,
    GridResults,
    subset_design,
)
from r2mad_lab.report.stances import shared_misconception_subset

QUESTIONS = 150
PAIRS = 24


def _round0(rng: np.random.Generator, p: np.ndarray, tag: str) -> list[tuple[np.ndarray, str]]:
    return [(rng.random(3) < pq, f"{tag}-{q}") for q, pq in enumerate(p)]


def _run(rng: np.random.Generator, p: np.ndarray, round0: list[tuple[np.ndarray, str]]) -> list[TranscriptRecord]:
    records = []
    for q, ((agents, tag), pq) in enumerate(zip(round0, p, strict=False)):
        majority = int(agents.sum()) >= 2
        final = majority if rng.random() < 0.6 else bool(rng.random() < pq)
        turns = [{"agent": i, "response": f"{tag}-{i}", "answer": "A" if ok else "B", "correct": bool(ok)}
                 for i, ok in enumerate(agents)]
        records.append(TranscriptRecord.model_validate(
            transcript(f"q{q}", [{"agents": turns}], correct=bool(final), final_answer="A" if final else "B")))
    return records


def _subset_difference(a: list[TranscriptRecord], b: list[TranscriptRecord], selector: list[TranscriptRecord]) -> float:
    ids = shared_misconception_subset(selector)
    x = [r.correct for r in a if r.sample_id in ids]
    y = [r.correct for r in b if r.sample_id in ids]
    return inference.paired_estimate(x, y, n_bootstrap=10).difference


def _designs(seed: int = 0) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {"paper": [], "shared": [], "selector": []}
    for pair in range(PAIRS):
        p = rng.beta(2, 2, QUESTIONS)
        own_a, own_b, third = (_round0(rng, p, f"{pair}-{arm}") for arm in "abc")
        a, b = _run(rng, p, own_a), _run(rng, p, own_b)
        out["paper"].append(_subset_difference(a, b, selector=b))  # the subset of the MAD run, one arm
        assert subset_design(b, a, b) == BIASED_DESIGN
        shared_a, shared_b = _run(rng, p, own_b), _run(rng, p, own_b)  # both replay one round 0
        assert subset_design(shared_b, shared_a, shared_b) == SHARED_DESIGN
        out["shared"].append(_subset_difference(shared_a, shared_b, selector=shared_b))
        selector = _run(rng, p, third)
        assert subset_design(selector, a, b) == SELECTOR_DESIGN
        out["selector"].append(_subset_difference(a, b, selector=selector))
    return out


@pytest.fixture(scope="module")
def designs() -> dict[str, list[float]]:
    return _designs()


def _mean_and_se(values: list[float]) -> tuple[float, float]:
    x = np.asarray(values)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


@pytest.mark.parametrize("design", ["shared", "selector"])
def test_identical_configurations_differ_by_nothing_on_an_unbiased_subset(designs, design) -> None:
    mean, se = _mean_and_se(designs[design])
    assert abs(mean) < 3 * se, f"{design}: mean subset difference {mean:+.3f} (SE {se:.3f}) of two identical arms"


def test_identical_configurations_differ_on_the_papers_subset(designs) -> None:
    """The known null fails on the paper's design: the arm whose round 0 is not the selector comes out ahead."""
    mean, se = _mean_and_se(designs["paper"])
    assert mean > 3 * se and mean > 0.03, f"paper's design: {mean:+.3f} (SE {se:.3f})"
    assert sum(d > 0 for d in designs["paper"]) >= 0.75 * PAIRS


def _outcome(method: str, records: list[TranscriptRecord]) -> CellOutcome:
    spec = ModelSpec.from_entry({"label": "Sim", "engine": "simulated", "model": None,
                                 "stands_in_for": "Qwen2.5-7B-Instruct", "options": {}})
    return CellOutcome(spec, "truthfulqa", method, Path("runs") / method, records, {"n": len(records)})


def test_the_claims_refuse_a_subset_selected_on_one_arm() -> None:
    rng = np.random.default_rng(1)
    p = rng.beta(2, 2, 40)
    own_mad, own_r2 = _round0(rng, p, "mad"), _round0(rng, p, "r2")
    independent = GridResults([_outcome("MAD", _run(rng, p, own_mad)), _outcome("R2-MAD", _run(rng, p, own_r2))])
    assert independent.subset_designs("R2-MAD", "MAD", "MAD") == {("Sim", "truthfulqa"): BIASED_DESIGN}
    with pytest.raises(ValueError, match="selected on one arm"):
        independent.unbiased_subset_per_question(["MAD", "R2-MAD"], reference="MAD")
    suffix = " (shared round 0)"
    shared = GridResults([_outcome("MAD" + suffix, _run(rng, p, own_mad)),
                          _outcome("R2-MAD" + suffix, _run(rng, p, own_mad))])
    frame = shared.unbiased_subset_per_question(["MAD", "R2-MAD"], reference="MAD" + suffix, suffix=suffix)
    assert set(frame["method"]) == {"MAD", "R2-MAD"}
    assert (frame["sample_id"].nunique() == len(shared_misconception_subset(
        shared.get("Sim", "truthfulqa", "MAD" + suffix).records)))
