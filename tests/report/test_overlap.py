"""Near-identical rows (report/overlap.py): measured from hand-made transcripts, named above the stated share."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from hand_transcripts import transcript

from r2mad_lab.report import overlap
from r2mad_lab.report.tables import Table


def _record(sample: str, picks: list[list[str]]) -> dict:
    """A two-round transcript of one question: round 0, then round 1 where agent i retrieved ``picks[i]``."""
    return transcript(sample, [{"agents": [{"agent": i} for i in range(len(picks))]},
                               {"agents": [{"agent": i, "retrieved": {"case_ids": p}} for i, p in enumerate(picks)]}])


def _cell(records: list[dict]) -> list:
    return [SimpleNamespace(model=SimpleNamespace(label="M"), benchmark="B", records=records)]


def test_a_hand_made_pair_of_runs_is_named_near_identical_above_the_share() -> None:
    base = [_record(f"q{i}", [[f"c{i}"], [f"d{i}"]]) for i in range(10)]  # 20 retrievals
    same = [_record(f"q{i}", [[f"c{i}"], [f"d{i}" if i < 9 else "other"]]) for i in range(10)]  # 19 of 20 the same
    apart = [_record(f"q{i}", [[f"e{i}"], [f"d{i}" if i < 5 else "x"]]) for i in range(10)]  # 5 of 20
    share, n = overlap.shared_share(overlap.retrievals(_cell(base)), overlap.retrievals(_cell(same)))
    assert (share, n) == (0.95, 20)
    values = pd.DataFrame({"B": [0.5, 0.5, 0.5]}, index=pd.Index(["Positive-only", "State-aware", "Random"], name="m"))
    table = Table(values=values, cells={("Positive-only", "B"): _cell(base), ("State-aware", "B"): _cell(same),
                                        ("Random", "B"): _cell(apart)})
    assert overlap.near_identical_pairs(table) == [("Positive-only", "State-aware", 0.95, 20)]
    note = overlap.near_identical_note(table)
    assert note.startswith("Near-identical rows (the same retrieved cases on at least 80%")
    assert "Positive-only and State-aware (95% of 20)" in note and "Random" not in note
    table.equal_rows = [("Positive-only", "State-aware")]  # equal by construction: named as such, not again
    assert overlap.near_identical_note(table) == ""
