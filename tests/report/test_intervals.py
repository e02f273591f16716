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
    rng = np.random.default_rng(5)
    groups = [rng.random(n) < p for n, p in ((134, 0.55), (211, 0.7), (242, 0.4))]
    se = intervals.accuracy_se([g.mean() for g in groups], [g.size for g in groups])
    replicates = np.mean([rng.binomial(g.size, g.mean(), size=20000) / g.size for g in groups], axis=0)
    assert se == pytest.approx(float(np.std(replicates)), rel=0.03)
    mean, lo, hi, shown = intervals.average_accuracy(groups, n_bootstrap=20000)
    assert shown == se and (hi - lo) / (2 * 1.96) == pytest.approx(se, rel=0.06)  # the CI beside it: about +-1.96 SE


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


# --------------------------------------------------------------------------------------------
# Several strata at small n: the interval that inverts the stratified sign test
# --------------------------------------------------------------------------------------------
def _cells(n: int) -> list[tuple[int, int, int]]:
    return [(n, b, c) for b in range(n + 1) for c in range(n + 1 - b)]


def _tables():
    """Every count table of 2 strata of sizes in {3, 5, 8} (4,171) and of 3 strata of sizes 3, 5 and 8 (9,450)."""
    import itertools

    for sizes in itertools.combinations_with_replacement((3, 5, 8), 2):
        for rows in itertools.product(*(_cells(n) for n in sizes)):
            yield np.array(rows)
    for rows in itertools.product(_cells(3), _cells(5), _cells(8)):
        yield np.array(rows)


def test_the_stratified_interval_excludes_0_exactly_when_the_stratified_sign_test_rejects() -> None:
    import functools

    exact = functools.lru_cache(maxsize=None)(intervals.mcnemar_interval)
    tables = disagreements = old_disagreements = 0
    for counts in _tables():
        p = inference.stratified_sign_p(counts)
        low, high = intervals.stratified_sign_interval(counts)
        shown = float(np.mean((counts[:, 1] - counts[:, 2]) / counts[:, 0]))
        assert low <= shown <= high and low < high, (counts.tolist(), low, high)
        assert not inference.is_monte_carlo(counts)
        tables += 1
        disagreements += (p < 0.05) != (low > 0 or high < 0)
        # the construction it replaces: MOVER over the strata's exact intervals
        k = len(counts)
        old_low, old_high = intervals.mover((counts[:, 1] - counts[:, 2]) / counts[:, 0],
                                            [exact(int(b), int(c), int(n)) for n, b, c in counts], [1.0 / k] * k)
        old_disagreements += (p < 0.05) != (old_low > 0 or old_high < 0)
    assert tables == 4171 + 9450 and disagreements == 0
    # measured: 328 of the 4,171 and 970 of the 9,450 (all but 2 a p < 0.05 beside a CI containing 0)
    assert old_disagreements > 1000, old_disagreements


def test_paired_estimate_uses_it_below_the_cutoff_and_mcnemars_interval_for_one_stratum() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.random(27) < 0.7, rng.random(27) < 0.4
    strata = np.repeat(["x", "y", "z"], [6, 9, 12])
    est = inference.paired_estimate(a, b, strata, n_bootstrap=20)
    counts = inference.stratum_counts(a, b, strata)
    assert (est.ci_low, est.ci_high) == intervals.stratified_sign_interval(counts)
    assert est.p_value == inference.stratified_sign_p(counts) and est.draws == 0
    one = inference.paired_estimate(a[:9], b[:9], n_bootstrap=20)
    row = inference.stratum_counts(a[:9], b[:9])[0]
    assert (one.ci_low, one.ci_high) == intervals.mcnemar_interval(int(row[1]), int(row[2]), int(row[0]))
    assert intervals.stratified_sign_interval(row[None, :]) == (one.ci_low, one.ci_high)
    # no discordance anywhere: never a point, p = 1
    same = inference.paired_estimate(a, a, strata, n_bootstrap=20)
    assert same.ci_low < 0 < same.ci_high and same.p_value == 1.0
    # five sizes below the cutoff, every question discordant: still exact (the merged support), so still agreeing
    sizes = np.array([10, 11, 12, 13, 14])
    counts = np.stack([sizes, sizes - 3, np.full(5, 3)], axis=1)
    assert not inference.is_monte_carlo(counts) and intervals.exact_support(counts) == 11 * 12 * 13 * 14 * 15
    low, high = intervals.stratified_sign_interval(counts)
    assert (inference.stratified_sign_p(counts) < 0.05) == (low > 0) and low > 0


def test_the_stratified_interval_of_a_hand_computed_table() -> None:
    """Strata (n, b, c) = (4, 2, 1) and (2, 1, 0): w = (1/8, 1/4), d = (3, 1), t = 2/8 - 1/8 + 1/4 = 3/8 (the shown
    difference, mean(1/4, 1/2)). T >= 3/8 needs B_2 = 1 and B_1 >= 2: P = theta^3 (3 - 2 theta); T <= 3/8 fails
    only at B_1 = 3, B_2 = 1: P = 1 - theta^4. So theta_L solves theta^3 (3 - 2 theta) = 0.025, theta_U = 0.975^(1/4),
    p = 2 P_1/2(T >= 3/8) = 1/2. psi_hat = mean(3/4, 1/2) = 0.625; the 99% Clopper-Pearson upper bounds of 3/4 and
    1/2 are 0.995^(1/4) and 0.995^(1/2) (closed forms: 1 - u^4 = 1 - u^2 = 0.005 at the top count), MOVER:
    psi_U = 0.625 + hypot((u_1 - 3/4) / 2, (u_2 - 1/2) / 2); both ends are scaled by psi_U (the lower end is below 0,
    the upper above)."""
    import itertools
    import math

    counts = np.array([[4, 2, 1], [2, 1, 0]])
    # the tails by brute-force enumeration of (B_1, B_2), against the closed forms
    for theta in (0.2, 0.5, 0.9):
        upper = sum(math.comb(3, x) * math.comb(1, y) * theta ** (x + y) * (1 - theta) ** (4 - x - y)
                    for x, y in itertools.product(range(4), range(2)) if (2 * x - 3) / 8 + (2 * y - 1) / 4 >= 3 / 8)
        assert upper == pytest.approx(theta ** 3 * (3 - 2 * theta))
        assert intervals.SignDistribution(counts).tails(3 / 8, theta) == pytest.approx((upper, 1 - theta ** 4))
    low, high = 0.0, 1.0
    for _ in range(100):  # bisection, no scipy
        mid = (low + high) / 2
        low, high = (mid, high) if mid ** 3 * (3 - 2 * mid) < 0.025 else (low, mid)
    theta_low, theta_high = low, 0.975 ** 0.25
    psi_high = 0.625 + math.hypot((0.995 ** 0.25 - 0.75) / 2, (0.995 ** 0.5 - 0.5) / 2)
    got = intervals.stratified_sign_interval(counts)
    assert got == pytest.approx(((2 * theta_low - 1) * psi_high, (2 * theta_high - 1) * psi_high), abs=1e-9)
    assert got == pytest.approx((-0.517699, 0.891713), abs=1e-6)
    assert inference.stratified_sign_p(counts) == pytest.approx(0.5)


#: (sizes, p10, p01): strata of their own discordance p10 + p01 and their own theta p10 / (p10 + p01).
COVERAGE_SCENARIOS = (
    ((6, 6, 6), (0.2, 0.2, 0.2), (0.2, 0.2, 0.2)),  # the test's null: coverage is 1 - its size
    ((8, 12), (0.4, 0.05), (0.05, 0.4)),  # opposite effects that cancel
    ((4, 9, 14), (0.3, 0.0, 0.1), (0.0, 0.3, 0.1)),
    ((5, 7, 10, 14), (0.5, 0.3, 0.2, 0.1), (0.0, 0.05, 0.1, 0.0)),
    ((10, 10, 10), (0.45, 0.05, 0.0), (0.05, 0.0, 0.0)),  # very different discordance
    ((14, 14), (0.6, 0.5), (0.0, 0.0)),
    ((10, 12, 6), (0.0, 0.52, 0.41), (0.37, 0.06, 0.41)),
    ((14, 5, 7, 13), (0.37, 0.0, 0.48, 0.26), (0.37, 0.59, 0.05, 0.26)),
    ((9, 4, 13), (0.01, 0.28, 0.25), (0.06, 0.28, 0.25)),
    ((4, 11), (0.9, 0.0), (0.0, 0.3)),
)


def test_the_stratified_interval_covers_at_small_n_with_heterogeneous_strata() -> None:
    """Measured (seed 56, 600 tables per scenario): coverage 0.970-1.000 over the ten scenarios (mean 0.987), the
    lowest where the truth is 0 (at the test's own null it is 1 - the exact test's size); the MOVER construction it
    replaced covered 0.993-1.000 there, at about the same mean width (0.737 against 0.723)."""
    rng = np.random.default_rng(56)
    coverage = []
    for sizes, p10, p01 in COVERAGE_SCENARIOS:
        truth = float(np.mean(np.subtract(p10, p01)))
        covered = 0
        for _ in range(600):
            counts = np.array([(n, *rng.multinomial(n, [x, y, 1 - x - y])[:2]) for n, x, y in zip(sizes, p10, p01,
                                                                                                  strict=True)])
            low, high = intervals.stratified_sign_interval(counts)
            covered += low <= truth <= high
        coverage.append(covered / 600)
    assert min(coverage) >= 0.93, coverage
    assert np.mean(coverage) >= 0.96, coverage


def test_an_average_accuracy_at_small_n_is_never_a_point_and_covers() -> None:
    # the cpu profile's shape: one question per benchmark, one right and one wrong; the bootstrap gave [0.5, 0.5]
    mean, low, high, _ = intervals.average_accuracy([[False], [True]], n_bootstrap=1000)
    cp_wrong, cp_right = intervals.clopper_pearson(0, 1), intervals.clopper_pearson(1, 1)
    assert mean == 0.5 and (low, high) == pytest.approx((0.5 - (1 - cp_right[0]) / 2, 0.5 + cp_wrong[1] / 2))
    _, low, high, _ = intervals.average_accuracy([[False], [False]])  # was [0.000, 0.000]
    assert low == 0.0 and high == pytest.approx(cp_wrong[1] / np.sqrt(2))  # MOVER: sqrt(2 (0.975 / 2)^2)
    # coverage at tiny's and the cpu profile's sizes, four benchmarks of different accuracy
    rng = np.random.default_rng(11)
    truth = np.array([0.2, 0.5, 0.7, 0.9])
    for n in (1, 4, 10):
        covered = 0
        for _ in range(400):
            groups = [rng.random(n) < p for p in truth]
            _, lo, hi, _ = intervals.average_accuracy(groups, n_bootstrap=10)
            covered += lo <= truth.mean() <= hi
        assert covered / 400 >= 0.95, (n, covered / 400)
