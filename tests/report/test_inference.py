"""The one inference rule (docs/statistics.md, r2mad_lab/report/inference.py): its tests are the exact ones, it holds
its error rate on a known null, it finds a planted effect at the stated power, and generated text carries no verdict
word without an adjusted p below alpha. Every simulation is seeded (no wall time, no flakiness)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from r2mad_lab.report import inference, multiplicity, power
from r2mad_lab.report.comparison import OrderingClaim, check_orderings, claims_summary


def test_one_stratum_is_mcnemars_exact_test_and_the_average_is_tested_as_shown() -> None:
    from scipy.stats import binomtest

    rng = np.random.default_rng(3)
    a, b = rng.random(120) < 0.6, rng.random(120) < 0.45
    one = inference.paired_estimate(a, b)
    assert one.test == "exact McNemar" and one.difference == pytest.approx(a.mean() - b.mean())
    assert one.p_value == pytest.approx(binomtest(one.a_only, one.a_only + one.b_only, 0.5).pvalue)
    assert one.ci_low < one.difference < one.ci_high
    # two benchmarks of unequal size: the estimate is the mean of the per-benchmark differences (the table's Average),
    # not the pooled difference, and its exact p agrees with a brute-force sign-flip enumeration
    strata = np.array(["x"] * 90 + ["y"] * 30)
    two = inference.paired_estimate(a, b, strata)
    per = [a[strata == s].mean() - b[strata == s].mean() for s in ("x", "y")]
    assert two.difference == pytest.approx(np.mean(per)) and two.strata == 2
    counts = inference.stratum_counts(a, b, strata)
    draws = np.random.default_rng(0).binomial(counts[:, 1] + counts[:, 2], 0.5, size=(200_000, 2))
    stat = ((2 * draws - (counts[:, 1] + counts[:, 2])) / (2 * counts[:, 0])).sum(axis=1)
    assert two.p_value == pytest.approx(np.mean(np.abs(stat) >= abs(two.difference) - 1e-12), abs=0.01)


def test_minimum_n_is_derived_from_the_mde_not_chosen() -> None:
    n = inference.minimum_n()
    assert math.isnan(power.planned_minimum_detectable_effect(n - 1, 0.5))
    assert not math.isnan(power.planned_minimum_detectable_effect(n, 0.5))
    assert inference.too_small(n - 1) and not inference.too_small(n)
    # below it no verdict word, whatever the p
    assert "significant" not in inference.verdict(1e-6, n - 1, "one test")
    assert inference.verdict(0.001, n, "one test").startswith("significant (Holm-adjusted p = 0.001 < 0.05")
    assert inference.verdict(0.2, 40, "one test").startswith("not distinguishable from no difference at n = 40")


def _null_cells(rng: np.random.Generator, cells: int, n: int) -> list[float]:
    """One replication of the known null: the same configuration under two seeds. Each cell's questions have their
    own difficulty; both seeds draw each question's correctness from it independently."""
    p_values = []
    for _ in range(cells):
        difficulty = rng.beta(2, 2, size=n)
        a, b = rng.random(n) < difficulty, rng.random(n) < difficulty
        strata = np.repeat(["one", "two"], n // 2)
        p_values.append(inference.paired_estimate(a, b, strata, n_bootstrap=10).p_value)
    return p_values


def test_a_known_null_keeps_the_any_cell_significant_rate_at_or_under_alpha() -> None:
    rng = np.random.default_rng(2026)
    replications, cells = 200, 10
    any_significant = 0
    for _ in range(replications):
        adjusted = multiplicity.holm(_null_cells(rng, cells, 60))
        any_significant += any(inference.decides(p, 60) for p in adjusted)
    assert any_significant / replications <= inference.ALPHA
    # the rule is what does it: the unadjusted p would call some cell significant far more often
    rng = np.random.default_rng(2026)
    unadjusted = sum(min(_null_cells(rng, cells, 60)) < inference.ALPHA for _ in range(60))
    assert unadjusted / 60 > 2 * inference.ALPHA


@pytest.mark.slow  # 60 claims tables (check_orderings with its bootstrap): about 10 s of CPU
def test_the_claims_table_on_a_known_null_calls_nothing_significant_beyond_alpha() -> None:
    """Two methods that are the same configuration under two seeds, on four benchmarks: the claims table's
    'significant' (p_holm over its family) fires in at most alpha of the replications."""
    rng = np.random.default_rng(7)
    claims = [OrderingClaim("tab:main_results", "M", "Average", "R2-MAD", w) for w in ("MAD", "CoT", "MAD-M2")]
    claims += [OrderingClaim("tab:main_results", "M", b, "R2-MAD", "MAD") for b in ("MATH500", "Economics")]
    fired = 0
    replications = 60
    for _ in range(replications):
        rows = []
        for benchmark in ("MATH500", "Economics", "Engineering", "TruthfulQA"):
            difficulty = rng.beta(2, 2, size=40)
            for method in ("R2-MAD", "MAD", "CoT", "MAD-M2"):
                correct = rng.random(40) < difficulty
                rows += [{"model": "M", "method": method, "benchmark": benchmark, "sample_id": f"{benchmark}-{i}",
                          "correct": bool(c)} for i, c in enumerate(correct)]
        table = check_orderings(pd.DataFrame(rows), claims, reported=_reported(), n_bootstrap=20)
        fired += bool(table["significant"].any())
        assert (table["p_holm"] >= table["p_value"] - 1e-12).all()
    assert fired / replications <= inference.ALPHA


def _reported() -> pd.DataFrame:
    rows = [("tab:main_results", "M", m, b, "accuracy", 0.5) for m in ("R2-MAD", "MAD", "CoT", "MAD-M2")
            for b in ("MATH500", "Economics", "Engineering", "TruthfulQA", "Average")]
    return pd.DataFrame(rows, columns=["table", "model", "method", "benchmark", "metric", "value"])


def test_a_planted_effect_is_found_at_the_stated_power() -> None:
    n, discordance, difference = 200, 0.3, 0.1
    stated = power.mcnemar_power(n, discordance, difference)
    assert 0.6 < stated < 0.95
    rng = np.random.default_rng(11)
    replications, found = 1000, 0
    share = (1 + difference / discordance) / 2
    for _ in range(replications):
        kind = rng.random(n)
        a_only = kind < discordance * share
        b_only = (kind >= discordance * share) & (kind < discordance)
        both = rng.random(n) < 0.5
        a, b = a_only | (both & ~a_only & ~b_only), b_only | (both & ~a_only & ~b_only)
        estimate = inference.paired_estimate(a, b, n_bootstrap=10)
        found += inference.decides(estimate.p_value, n) and estimate.difference > 0
    rate = found / replications
    assert abs(rate - stated) < 3 * math.sqrt(stated * (1 - stated) / replications) + 0.01


def test_a_planted_trend_is_found_and_a_flat_one_is_not() -> None:
    rng = np.random.default_rng(5)
    x = [0.0, 0.3, 0.6, 0.9]
    planted = np.column_stack([rng.random(150) < 0.4 + 0.3 * g for g in x])
    trend = inference.trend_test(planted, x, seed=1)
    assert trend.slope == pytest.approx(np.polyfit(x, planted.mean(axis=0), 1)[0])
    assert trend.slope > 0 and trend.p_value < 0.01
    difficulty = rng.beta(2, 2, size=150)
    flat = np.column_stack([rng.random(150) < difficulty for _ in x])
    assert inference.trend_test(flat, x, seed=1).p_value > 0.05


def test_pooled_replicates_reduce_each_question_over_its_seeds_and_test_on_questions() -> None:
    rng = np.random.default_rng(9)
    a = {"x": rng.random((50, 3)) < 0.8, "y": rng.random((30, 3)) < 0.75}
    b = {"x": rng.random((50, 3)) < 0.5, "y": rng.random((30, 3)) < 0.5}
    pooled = inference.pooled_paired(a, b)
    per_seed = [np.mean([a[k][:, s].mean() - b[k][:, s].mean() for k in a]) for s in range(3)]
    assert pooled.difference == pytest.approx(np.mean(per_seed)) and pooled.strata == 2
    assert pooled.ci_low < pooled.difference < pooled.ci_high and pooled.p_value < 0.05
    assert pooled.n == 80  # questions, not question-seeds
    # its SE is the clustered bootstrap's: the per-question mean differences' SE, strata averaged
    per_question = {k: (a[k].astype(float) - b[k]).mean(axis=1) for k in a}
    analytic = np.sqrt(sum(v.var(ddof=0) / v.size for v in per_question.values())) / len(per_question)
    assert pooled.se == pytest.approx(analytic, rel=0.1)
    assert ("over 3 seeds (2 benchmarks)" in pooled.test
            and "Monte Carlo over 20,000 draws (p resolution 5.0e-05)" in pooled.test)


def _help_some_hurt_others(rng: np.random.Generator, seeds: int, questions: int = 60) -> tuple[dict, dict]:
    """A null in the mean: the variant helps half the questions by +0.3 and hurts the other half by -0.3, per seed."""
    out_a, out_b = {}, {}
    for stratum in ("x", "y"):
        p = rng.uniform(0.35, 0.65, questions)
        effect = rng.choice([0.3, -0.3], size=questions)  # questions drawn from a population with mean effect 0
        out_a[stratum] = rng.random((questions, seeds)) < (p + effect)[:, None]
        out_b[stratum] = rng.random((questions, seeds)) < p[:, None]
    return out_a, out_b


def test_the_replicates_test_holds_its_size_when_a_variant_helps_some_questions_and_hurts_others() -> None:
    """At 10 seeds the question-seeds are far from independent (each question's effect repeats in all its seeds): a
    test on question-seeds rejected 26% of this null; the test on the questions' mean differences holds alpha."""
    rng = np.random.default_rng(3)
    trials, rejected, naive = 300, 0, 0
    for trial in range(trials):
        a, b = _help_some_hurt_others(rng, seeds=10)
        rejected += inference.pooled_paired(a, b, n_bootstrap=10, draws=999).p_value < 0.05
        if trial < 100:  # the old test: one sign test over (seed, benchmark) strata of question-seeds
            x = np.concatenate([a[k].ravel() for k in a])
            y = np.concatenate([b[k].ravel() for k in a])
            labels = np.concatenate([[f"{k}{s}" for _ in range(a[k].shape[0]) for s in range(10)] for k in a])
            naive += inference.stratified_sign_p(inference.stratum_counts(x, y, labels)) < 0.05
    assert rejected / trials <= 0.07, f"size {rejected / trials:.3f} at 10 seeds"
    # the test on question-seeds does not hold it (the planted failure)
    assert naive / 100 > 0.12, f"old test: {naive}%"


def test_the_verdict_check_can_fail() -> None:
    good = inference.verdict(0.003, 100, "the 4 comparisons of this sentence")
    assert inference.verdict_problems(f"R2-MAD vs MAD: {good}.") == []
    assert inference.verdict_problems("R2-MAD is significant (Holm-adjusted p = 0.08 over the 2 comparisons).")
    assert inference.verdict_problems("R2-MAD ranks first (0.710), then MAD (0.700).")
    assert inference.verdict_problems("The difference is not significant at 0.05.")
    assert inference.verdict_problems("R2-MAD beats MAD.")
    assert not inference.verdict_problems("3 of 17 with p_holm < 0.05 are significant (Holm over the 17 comparisons).")
    assert not inference.verdict_problems(
        "| ordering | p | p_holm | significant |\n|---|---|---|---|\n| a > b | 0.01 | 0.03 | True |")
    count = inference.count_phrase([0.01, 0.5], [100, 100], "the 2 cells")
    assert count.startswith("1 of 2 significant (p_holm < 0.05, Holm over the 2 cells)")
    assert not inference.verdict_problems(count)
    assert "significant" not in inference.count_phrase([0.001, 0.5], [4, 8], "the 2 cells")


def test_claims_summary_names_its_family_and_decides_by_p_holm() -> None:
    rows = []
    for benchmark in ("MATH500", "Economics"):
        for i in range(60):
            rows.append({"model": "M", "method": "R2-MAD", "benchmark": benchmark, "sample_id": f"{benchmark}-{i}",
                         "correct": i % 3 != 0})
            rows.append({"model": "M", "method": "MAD", "benchmark": benchmark, "sample_id": f"{benchmark}-{i}",
                         "correct": i % 2 == 0})
    claims = [OrderingClaim("tab:main_results", "M", "Average", "R2-MAD", "MAD"),
              OrderingClaim("tab:main_results", "M", "MATH500", "R2-MAD", "MAD"),
              OrderingClaim("tab:main_results", "M", "Economics", "MAD", "R2-MAD")]
    table = check_orderings(pd.DataFrame(rows), claims, reported=_reported(), n_bootstrap=50)
    assert table["p_holm"].tolist() == pytest.approx(multiplicity.holm(table["p_value"]))
    assert (table["significant"] == ((table["p_holm"] < 0.05) & (table["outcome"] == "as claimed"))).all()
    assert table["test"].iloc[0].startswith("stratified exact sign test over 2 strata")
    summary = claims_summary(table)
    assert "Holm-adjusted over the claims family of 3" in summary.sentence()
    assert summary.verdict_line() == (f"Claims: {summary.holds} of 3 go the claimed way ({summary.significant} of them "
                                      f"with p_holm < 0.05, Holm over the claims family of 3), 1 reversed, 0 tied.")
    assert inference.verdict_problems(summary.sentence()) == []


def _swept_point(folder, monkeypatch_store: dict, setting: dict, outcomes: dict[str, list[bool]]):
    """A sweep point's figures folder: a 2-cell table whose manifest names each cell's run (``cell_runs``), the runs'
    records kept in ``monkeypatch_store`` (what ``load_run`` reads)."""
    from hand_transcripts import transcript

    from r2mad_core.records import as_transcript
    from r2mad_lab.report.artifacts import save_table
    from r2mad_lab.report.tables import Table
    from r2mad_lab.reproduce.points import plan_points

    values = pd.DataFrame({"MATH500": [float(np.mean(v)) for v in outcomes.values()]},
                          index=pd.Index(list(outcomes), name="method"))
    values.columns.name = "benchmark"
    cell_runs = []
    for method, correct in outcomes.items():
        run = folder / "runs" / method
        monkeypatch_store[str(run)] = [as_transcript(transcript(f"q{i}", correct=bool(c)))
                                       for i, c in enumerate(correct)]
        cell_runs.append({"cell": [method, "MATH500"], "runs": [["M / math500", str(run)]]})
    save_table(Table(values=values, ci_low=values - 0.1, ci_high=values + 0.1), "tab_t", folder, profile="p",
               cell_runs=cell_runs)
    # the point the profile (gamma 0.9) makes of this setting, at the folder its run wrote
    return plan_points({"gamma": 0.9}, "p", {}, [(k, [v]) for k, v in setting.items()], [0])[0].at(folder)


def test_a_sweep_table_has_each_points_paired_difference_and_a_trend_test(tmp_path, monkeypatch) -> None:
    from r2mad_lab.reproduce.compare import sweep as sweep_comparison
    from r2mad_lab.reproduce.compare import tables

    store: dict = {}
    monkeypatch.setattr(tables, "load_run", lambda run: ({}, store[str(run)]))
    rng = np.random.default_rng(4)
    base = rng.random(80)
    same = list(rng.random(80) < 0.5)
    points = [_swept_point(tmp_path / str(g), store, {"gamma": g}, {"R2-MAD": list(base < 0.3 + 0.6 * g / 0.9),
                                                                       "MAD": same}) for g in (0.0, 0.45, 0.9)]
    sentences = sweep_comparison.sweep_artifacts(points, "gamma", "p", 0.9, tmp_path / "sweep")
    paired = pd.read_csv(tmp_path / "sweep" / "tab_sweep_tab_t_paired.csv")
    assert set(paired["setting"]) == {"gamma=0.0", "gamma=0.45"}  # the profile's point is the reference
    r2 = paired[paired["cell"] == "R2-MAD / MATH500"].set_index("setting")
    assert r2.at["gamma=0.0", "difference"] == pytest.approx(np.mean(base < 0.3) - np.mean(base < 0.9))
    assert (r2.at["gamma=0.0", "p_holm"] < 0.05
            and r2.at["gamma=0.0", "verdict"].startswith("significant (Holm-adjusted"))
    assert (r2["trend gamma slope"] > 0).all() and (r2["trend gamma p_holm"] < 0.05).all()
    mad = paired[paired["cell"] == "MAD / MATH500"]
    assert (mad["difference"] == 0).all() and mad["verdict"].str.startswith("not distinguishable").all()
    caption = (tmp_path / "sweep" / "tab_sweep_tab_t.md").read_text()
    assert "Trend along gamma" in caption and "paired difference from the profile's point" in caption
    assert inference.verdict_problems(caption) == [] and inference.verdict_problems(" ".join(sentences)) == []
    assert inference.verdict_problems((tmp_path / "sweep" / "tab_sweep_tab_t_paired.md").read_text()) == []


def test_a_monte_carlo_p_is_named_with_its_resolution_never_exact() -> None:
    floor = 1.0 / (1 + inference.MONTE_CARLO_DRAWS)
    assert inference.fmt_p(floor) == "p < 1/20,001 (Monte Carlo, 20,000 draws)"
    assert inference.fmt_p(1.0 / 4001, draws=4000) == "p < 1/4,001 (Monte Carlo, 4,000 draws)"
    assert inference.fmt_p(0.0123, draws=4000) == "p = 0.0123 (Monte Carlo, 4,000 draws)"
    assert inference.fmt_p(0.0123) == "p = 0.0123"
    # a stratified test over a large support is Monte Carlo: its estimate carries the draws and its name says so
    import numpy as np

    rng = np.random.default_rng(3)
    a, b = rng.random(2000) < 0.7, rng.random(2000) < 0.5
    strata = np.repeat(["s1", "s2", "s3", "s4"], [470, 490, 510, 530])  # four sizes (one size is one binomial)
    est = inference.paired_estimate(a, b, strata, n_bootstrap=50)
    assert est.draws == inference.MONTE_CARLO_DRAWS and "Monte Carlo" in est.test and "exact" not in est.test
    assert inference.fmt_p(est.p_value, est.draws).startswith("p < 1/20,001 (Monte Carlo")
    exact = inference.paired_estimate(a[:40], b[:40], n_bootstrap=50)
    assert exact.draws == 0 and "Monte Carlo" not in inference.fmt_p(exact.p_value, exact.draws)


def test_one_benchmark_is_mcnemars_exact_test_with_its_exact_interval() -> None:
    a = [True] * 10 + [True] * 8 + [False] * 2 + [False] * 5
    b = [True] * 10 + [False] * 8 + [True] * 2 + [False] * 5
    test = inference.paired_estimate(a, b)
    assert (test.a_only, test.b_only, test.n, test.strata) == (8, 2, 25, 1) and test.test == "exact McNemar"
    # two-sided exact binomial, 8 of 10 at p = 0.5: 2 * P(X >= 8) = 2 * 56 / 1024
    assert test.p_value == pytest.approx(112 / 1024)
    assert test.difference == pytest.approx(6 / 25)
    assert test.ci_low < 0 < test.difference < test.ci_high  # p > 0.05: the exact interval holds 0
    same = inference.paired_estimate([True, False], [True, False])
    assert same.p_value == 1.0 and same.ci_low < 0 < same.ci_high  # never a point interval at d = 0
