"""The committed per-question table (figures/sim/samples.parquet, issue 60): the claims table's paired tests redone
from it in pandas give the package's p (docs/elsewhere.md shows the five lines).

The table is written by notebook 10 (:func:`r2mad_lab.reproduce.collect.collect_reproduction`, ``samples_dir``)
beside the profile's figures, at the commit its MANIFEST.json names (tests/test_committed_artifacts.py).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from r2mad_lab.export import table
from r2mad_lab.report import comparison, inference

FIGURES = Path(__file__).resolve().parents[2] / "figures" / "sim"


@pytest.fixture(scope="module")
def samples() -> pd.DataFrame:
    path = FIGURES / table.TABLE_NAME
    assert path.is_file(), f"{path} is missing: make reproduce writes it (notebook 10)"
    return pd.read_parquet(path)


def five_lines(t: pd.DataFrame, better: str, worse: str, benchmark: str | None = None) -> float:
    """docs/elsewhere.md's recomputation, as a reader types it."""
    pair = t[t.method == better].merge(t[t.method == worse], on=["model", "benchmark_label", "sample_id"])
    pair = pair if benchmark is None else pair[pair.benchmark_label == benchmark]
    counts = inference.stratum_counts(pair.correct_x, pair.correct_y, pair.model + " / " + pair.benchmark_label)
    return inference.stratified_sign_p(counts)


def test_the_committed_claims_p_of_r2mad_vs_mad_is_redone_from_the_table(samples):
    claims = pd.read_csv(FIGURES / "tab_paper_claims.csv", dtype=str)
    row = claims[(claims["table"] == "tab:main_results") & (claims["ordering"] == "R2-MAD > MAD")].iloc[0]
    p = five_lines(samples, "R2-MAD", "MAD")
    assert f"{p:.3g}" == row["p"]
    # the claims table's strata are "model / benchmark" in the tables' names (benchmark_label): the Monte Carlo
    # draws of the stratified sign test follow the strata's sorted order, so the same names give the same p
    frame = samples.assign(benchmark=samples["benchmark_label"])
    found = comparison.check_orderings(frame, [comparison.OrderingClaim("tab:main_results", "Qwen2.5-7B-Instruct",
                                                                        "Average", "R2-MAD", "MAD")], n_bootstrap=200)
    assert found["p_value"].iloc[0] == p


def test_the_math500_exact_mcnemar_from_the_table_is_the_packages(samples):
    p = five_lines(samples, "R2-MAD", "MAD", "MATH500")
    frame = samples.assign(benchmark=samples["benchmark_label"])
    found = comparison.check_orderings(frame, [comparison.OrderingClaim("tab:main_results", "Qwen2.5-7B-Instruct",
                                                                        "MATH500", "R2-MAD", "MAD")], n_bootstrap=200)
    assert found["test"].iloc[0] == "exact McNemar" and found["p_value"].iloc[0] == p
    math = samples[(samples.benchmark_label == "MATH500") & samples.method.isin(["R2-MAD", "MAD"])]
    assert len(math) == 2 * found["n_pairs"].iloc[0]


def test_the_table_has_one_row_per_question_of_every_cell(samples):
    assert list(samples.columns) == table.COLUMNS
    assert not samples.duplicated(["variant", "model", "method", "run", "sample_id"]).any()
    accuracy = pd.read_csv(FIGURES / "tab_main_results.csv")
    for (method, label), part in samples[samples.method.isin(accuracy["method"])].groupby(
        ["method", "benchmark_label"]):
        shown = accuracy[(accuracy["method"] == method) & (accuracy["benchmark"] == label)]
        if len(shown):
            assert part["correct"].mean() == pytest.approx(float(shown["value"].iloc[0]), abs=1e-6)
