"""Score and exact intervals (report/intervals.py): a perfect reproduction is consistent with the paper about 95% of
the time (the paper's number inside the reproduced CI alone fails it about 17% of the time), and the exact interval
of a paired difference covers at small n and agrees with McNemar's exact test by construction."""

from __future__ import annotations

import numpy as np
import pytest

from r2mad_lab.report import inference, intervals


def test_wilson_and_mover_give_newcombes_interval() -> None:
    low, high = intervals.wilson(0, 1)
    assert low == 0.0 and high == pytest.approx(0.7935, abs=1e-4)  # Wilson at 0 of 1, never a point
    # Newcombe (1998) Table II, example (a): 56/70 vs 48/80, method 10: [0.0524, 0.3339]
    d, lo, hi = intervals.difference_from_paper([(56 / 70, 70)], [(48 / 80, 80)])
    assert d == pytest.approx(0.2) and lo == pytest.approx(0.0524, abs=1e-4) and hi == pytest.approx(0.3339, abs=1e-4)


def test_a_perfect_reproduction_is_rejected_near_alpha_not_one_time_in_six() -> None:
    rng = np.random.default_rng(7)
    true = np.array([0.53, 0.70, 0.41, 0.62])
    sizes = np.array([134, 211, 242, 166])  # the paper's test splits; the reproduction the same sizes
    trials = 2000
    old = new = new_average = 0
    for _ in range(trials):
        paper = rng.binomial(sizes, true) / sizes
        mine = rng.binomial(sizes, true) / sizes
        # the old check: the paper's number inside the reproduced accuracy's 95% interval (normal, as the bootstrap's)
        half = 1.96 * np.sqrt(mine[0] * (1 - mine[0]) / sizes[0])
        old += not (mine[0] - half <= paper[0] <= mine[0] + half)
        _, lo, hi = intervals.difference_from_paper([(mine[0], sizes[0])], [(paper[0], sizes[0])])
        new += not (lo <= 0.0 <= hi)
        _, lo, hi = intervals.difference_from_paper(list(zip(mine, sizes, strict=False)),
                                                    list(zip(paper, sizes, strict=False)))
        new_average += not (lo <= 0.0 <= hi)
    assert 0.13 <= old / trials <= 0.21  # the CI alone ignores the paper's own error: ~16.6%
    assert 0.03 <= new / trials <= 0.07 and 0.03 <= new_average / trials <= 0.07


def test_compare_with_paper_states_the_two_sample_interval() -> None:
    import pandas as pd

    from r2mad_lab.report.comparison import compare_with_paper

    reproduced = pd.DataFrame([
        ("tab:main_results", "SmolLM2", "R2-MAD", "MATH500", "accuracy", 0.5, 0.4, 0.6, 134),
        ("tab:main_results", "SmolLM2", "R2-MAD", "Economics", "accuracy", 0.2, 0.1, 0.3, 211),
        ("tab:main_results", "SmolLM2", "R2-MAD", "Average", "accuracy", 0.35, 0.3, 0.4, 345),
    ], columns=["table", "model", "method", "benchmark", "metric", "value", "ci_low", "ci_high", "n"])
    out = compare_with_paper(reproduced, stand_ins={"SmolLM2": "Qwen2.5-7B-Instruct"}).set_index("benchmark")
    expected = intervals.difference_from_paper([(0.5, 134)], [(0.522, 134)])
    assert out.at["MATH500", "difference_low"] == pytest.approx(expected[1])
    assert bool(out.at["MATH500", "consistent_with_paper"]) and not bool(out.at["Economics", "consistent_with_paper"])
    assert out.at["Average", "difference_low"] < out.at["Average", "difference_high"] < 0.0  # Economics' gap carries it


def test_the_exact_paired_interval_agrees_with_mcnemar_and_covers_at_small_n() -> None:
    for n in (1, 4, 8, 14):
        for b in range(n + 1):
            for c in range(n + 1 - b):
                lo, hi = intervals.mcnemar_interval(b, c, n)
                p = inference.stratified_sign_p(np.array([[n, b, c]]))
                assert lo <= (b - c) / n <= hi and lo < hi
                assert (p < 0.05) == (lo > 0 or hi < 0), (n, b, c, p, lo, hi)
    assert intervals.mcnemar_interval(0, 0, 1)[1] > 0.5  # n = 1, no discordance: not the bootstrap's [0, 0]
    rng = np.random.default_rng(11)
    for n, p10, p01 in ((4, 0.2, 0.1), (8, 0.3, 0.05), (12, 0.1, 0.1), (14, 0.4, 0.2)):
        draws = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=3000)
        covered = np.mean([intervals.mcnemar_interval(int(b), int(c), n)[0] <= p10 - p01
                           <= intervals.mcnemar_interval(int(b), int(c), n)[1] for b, c, _ in draws])
        assert covered >= 0.93, (n, covered)


def test_the_se_beside_a_ci_is_the_sd_of_the_same_bootstrap() -> None:
    from r2mad_lab.experiments.statistics import mean_accuracy_with_ci

    rng = np.random.default_rng(5)
    groups = [rng.random(n) < p for n, p in ((134, 0.55), (211, 0.7), (242, 0.4))]
    se = intervals.accuracy_se([g.mean() for g in groups], [g.size for g in groups])
    replicates = np.mean([rng.binomial(g.size, g.mean(), size=20000) / g.size for g in groups], axis=0)
    assert se == pytest.approx(float(np.std(replicates)), rel=0.03)
    mean, lo, hi = mean_accuracy_with_ci(groups, n_bootstrap=20000)
    assert (hi - lo) / (2 * 1.96) == pytest.approx(se, rel=0.06)  # the CI beside it: about +-1.96 SE


def test_tables_print_the_se_beside_every_ci_and_read_it_back_from_a_tidy_csv(tmp_path) -> None:
    import pandas as pd

    from r2mad_lab.report.tables import Table, read_table, render_markdown, table_to_tidy

    index = pd.Index(["a", "b"], name="method")
    values = pd.DataFrame({"X": [0.5, 0.25]}, index=index)
    table = Table(values=values, ci_low=values - 0.1, ci_high=values + 0.1,
                  se=pd.DataFrame({"X": [0.05, 0.04]}, index=index))
    assert "0.500 [0.400, 0.600] SE 0.050" in render_markdown(table)
    tidy = table_to_tidy(table)  # the saved CSV's layout: the SE after the CI
    assert list(tidy.columns[-4:]) == ["value", "ci_low", "ci_high", "se"]
    assert list(table_to_tidy(Table(values=values, ci_low=values - 0.1, ci_high=values + 0.1)).columns[-3:]) == [
        "value", "ci_low", "ci_high"]  # a table without SEs
    tidy.to_csv(tmp_path / "t.csv", index=False)
    assert read_table(tmp_path / "t.csv").se["X"].tolist() == [0.05, 0.04]


def test_an_average_at_small_n_has_an_interval_that_never_collapses_and_covers() -> None:
    # tiny's shape: four benchmarks of 4 questions; the bootstrap gave [0, 0] when no question was discordant
    strata = np.repeat(["a", "b", "c", "d"], 4)
    same = np.array([True, False] * 8)
    est = inference.paired_estimate(same, same, strata, n_bootstrap=200)
    assert est.ci_low < 0 < est.ci_high
    rng = np.random.default_rng(2)
    p10, p01 = np.array([0.3, 0.1, 0.2, 0.0]), np.array([0.1, 0.1, 0.0, 0.2])
    truth, covered = float(np.mean(p10 - p01)), 0
    for _ in range(400):
        u = rng.random((4, 4))
        a = (u < p10[:, None]) | (u > 1 - 0.4)
        b = ((u >= p10[:, None]) & (u < (p10 + p01)[:, None])) | (u > 1 - 0.4)
        e = inference.paired_estimate(a.ravel(), b.ravel(), strata, n_bootstrap=50)
        covered += e.ci_low <= truth <= e.ci_high
    assert covered / 400 >= 0.93
