"""Power of the claims' exact McNemar tests (r2mad_lab.report.power, issue 26): the exact power and the
minimum detectable effect against a Monte Carlo simulation of paired binary outcomes, the assumptions
before a run, and what the paper profile's run can test."""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np
import pandas as pd
import pytest

from r2mad_lab.report import power
from r2mad_lab.report.comparison import PAPER_ORDERING_CLAIMS


def binomtest(*args, **kwargs):
    """scipy's exact binomial test, imported on first use: scipy.stats takes about a second to import, which every
    `make test` worker paid while collecting this module (issue 35)."""
    from scipy.stats import binomtest as scipy_binomtest

    return scipy_binomtest(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _first_significant(d: int) -> int:
    """The smallest b > d / 2 that scipy's exact binomial test finds significant (p < 0.05) among d discordant
    pairs, d + 1 when none is. Found by bisection: past d / 2 the two-sided p-value (p = 1/2) only falls as b
    grows, so the significant b are exactly those from this one on. A simulation's runs share few values of d
    (753 pairs: about 90 values over 8,000 runs), so this asks scipy about 7 times per d instead of once per
    distinct (b, c) (about 1,500 calls of ~1.5 ms of CPU each in the 753-pair test)."""
    low, high = d // 2 + 1, d + 1  # the answer lies in [low, high]; high = d + 1 means none
    while low < high:
        middle = (low + high) // 2
        if binomtest(middle, d, 0.5).pvalue < 0.05:
            high = middle
        else:
            low = middle + 1
    return low


def _significant(b: int, c: int) -> bool:
    """The claims' rule, as check_orderings applies it: better strictly ahead and exact McNemar p < 0.05
    (b >= the first significant b implies b > d / 2, i.e. b > c)."""
    return b >= _first_significant(b + c)


def _simulated_power(n: int, discordance: float, difference: float, runs: int, seed: int) -> float:
    """Share of simulated runs (n paired questions, outcomes drawn per question) that confirm the claim."""
    rng = np.random.default_rng(seed)
    p10, p01 = (discordance + difference) / 2, (discordance - difference) / 2
    # per question: only the better method right, only the worse, both or neither; the test reads only a run's counts
    # b and c of the first two, so each run draws its counts at once: Multinomial(n; p10, p01, rest), the law of the
    # counts of n questions drawn one by one (which drew 3 million numbers a call at n = 753, ~0.13 s of CPU). Over
    # 300 seeds per case the simulated power stayed within 0.019 of 0.80 (tolerance 0.025), within 0.022 of the
    # exact power at 211 pairs (0.03), and at most 0.51 at 70% of the MDE (< 0.7).
    counts = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=runs)
    return float(np.mean([_significant(int(b), int(c)) for b, c in counts[:, :2]]))


# Tolerance: 4000 simulated runs give a standard error of sqrt(0.8 * 0.2 / 4000) = 0.0063 at 80% power;
# the MDE's simulated power must lie within 0.025 (four standard errors) of 0.80.
@pytest.mark.parametrize(("n", "discordance"), [(134, 0.25), (753, 0.19)])
def test_minimum_detectable_effect_matches_a_monte_carlo_simulation(n: int, discordance: float) -> None:
    mde = power.minimum_detectable_effect(n, discordance)
    assert 0 < mde < discordance
    assert power.mcnemar_power(n, discordance, mde) == pytest.approx(0.8, abs=1e-4)
    simulated = _simulated_power(n, discordance, mde, runs=4000, seed=n)
    assert simulated == pytest.approx(0.80, abs=0.025)
    # a difference 30% smaller is detected clearly less often: the MDE is the smallest one
    assert _simulated_power(n, discordance, 0.7 * mde, runs=4000, seed=n + 1) < 0.7


def test_exact_power_matches_simulation_away_from_the_mde() -> None:
    exact = power.mcnemar_power(211, 0.2, 0.04)
    assert 0.2 < exact < 0.6
    assert _simulated_power(211, 0.2, 0.04, runs=4000, seed=3) == pytest.approx(exact, abs=0.03)


def test_critical_values_are_those_of_scipys_exact_binomial_test() -> None:
    critical = power._critical_values(80, 0.05)
    for d in range(81):
        # the first b past the middle that scipy finds significant
        first = next((b for b in range(d + 1) if b * 2 > d and binomtest(b, d, 0.5).pvalue < 0.05), None)
        assert critical[d] == (first if first is not None else d + 1), d
    # hand check: 6 of 6 discordant pairs give p = 2 / 64 = 0.031 < 0.05; 5 of 5 give 0.0625
    assert critical[5] == 6 and critical[6] == 6


def test_power_edges_and_errors() -> None:
    assert power.mcnemar_power(100, 0.2, 0.0) < 0.025  # no difference: at most alpha / 2 in the claimed direction
    assert power.mcnemar_power(100, 0.0, 0.0) == 0.0
    assert power.mcnemar_power(100, 0.2, 0.05) < power.mcnemar_power(100, 0.2, 0.1) < power.mcnemar_power(400, 0.2, 0.1)
    assert math.isnan(power.minimum_detectable_effect(100, 0.0))  # no discordant question: nothing detectable
    assert math.isnan(power.minimum_detectable_effect(8, 0.05))  # 8 questions: not even all discordant ones in favour
    with pytest.raises(ValueError, match="needs a discordance"):
        power.mcnemar_power(100, 0.05, 0.1)
    with pytest.raises(ValueError, match="positive integer"):
        power.mcnemar_power(0, 0.1, 0.0)
    with pytest.raises(ValueError, match="discordance must be in"):
        power.minimum_detectable_effect(10, 1.5)


def test_assumed_discordance() -> None:
    # independent outcomes: p1 (1 - p2) + p2 (1 - p1)
    assert power.assumed_discordance(0.6, 0.5, correlation=0.0) == pytest.approx(0.6 * 0.5 + 0.5 * 0.4)
    # perfectly correlated at the Frechet bound: only the accuracy gap is discordant
    assert power.assumed_discordance(0.6, 0.5, correlation=1.0) == pytest.approx(0.1)
    # the default (0.5) lies between, for the paper's R2-MAD vs MAD on Qwen2.5-7B (0.607 vs 0.571)
    both = 0.607 * 0.571 + 0.5 * math.sqrt(0.607 * 0.393 * 0.571 * 0.429)
    assert power.assumed_discordance(0.607, 0.571) == pytest.approx(0.607 + 0.571 - 2 * both)
    with pytest.raises(ValueError, match="p_better"):
        power.assumed_discordance(1.2, 0.5)


def test_subset_sizes_inferred_from_the_papers_percentages() -> None:
    # RQ4: Engineering 27.10% vs 17.42%: 42/155 and 27/155, the only denominator up to 242 that fits
    assert power.inferred_subset_size([0.2710, 0.1742], 242, proxy=134.6) == 155
    # Economics 29.41% vs 17.65% fit every multiple of 17; the nearest to MAD's wrong answers (211 x 0.355)
    assert power.inferred_subset_size([0.2941, 0.1765], 211, proxy=211 * (1 - 0.645)) == 68


def test_with_power_is_a_pre_run_quantity_at_the_holm_level() -> None:
    """No post-hoc power: the claims table's mde and power_paper come from n and the paper's accuracies at alpha / m,
    never from the discordance the run observed (two runs with other outcomes get the same power)."""
    claims = pd.DataFrame([
        {"n_pairs": 753, "better_only": 113, "worse_only": 28, "paper_better": 0.607, "paper_worse": 0.571,
         "duplicate_of": None},
        {"n_pairs": 8, "better_only": 0, "worse_only": 0, "paper_better": 0.607, "paper_worse": 0.571,
         "duplicate_of": None},
        {"n_pairs": 377, "better_only": 13, "worse_only": 11, "paper_better": 0.663, "paper_worse": 0.654,
         "duplicate_of": None},
    ])
    out = power.with_power(claims)
    level = 0.05 / 3
    assert (out["alpha_holm"] == level).all() and "discordance" not in out.columns
    psi = power.assumed_discordance(0.607, 0.571)
    assert out["assumed_discordance"][0] == pytest.approx(psi)
    assert out["power_paper_difference"][0] == pytest.approx(power.mcnemar_power(753, psi, 0.036, level))
    assert out["mde"][0] == pytest.approx(power.planned_minimum_detectable_effect(753, 0.571, alpha=level))
    assert math.isnan(out["mde"][1])  # 8 pairs detect nothing at alpha / 3
    other = power.with_power(claims.assign(better_only=[1, 4, 200], worse_only=[0, 4, 3]))
    assert other[["mde", "power_paper_difference"]].equals(out[["mde", "power_paper_difference"]])
    # the Holm level lowers the power: the unadjusted power of the first claim is higher
    assert power.mcnemar_power(753, psi, 0.036, 0.05) > out["power_paper_difference"][0]
    assert out["detectable"].tolist() == [bool(p >= 0.8) for p in out["power_paper_difference"]]


def _plans_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """power.planned_claims computed once per distinct call (its arguments with the defaults filled in), a copy of the
    frame handed out each time: claims_power_lines plans the claims itself, and a test that checks both the plan
    and the lines would otherwise solve every claim's MDE twice (~0.5 s of CPU for the paper profile)."""
    planned_claims = power.planned_claims
    signature = inspect.signature(planned_claims)
    plans: dict[str, pd.DataFrame] = {}

    def once(*args, **kwargs) -> pd.DataFrame:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = repr(sorted(bound.arguments.items()))
        if key not in plans:
            plans[key] = planned_claims(*args, **kwargs)
        return plans[key].copy()

    monkeypatch.setattr(power, "planned_claims", once)


def test_the_paper_profile_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    _plans_once(monkeypatch)
    plan = power.planned_claims("paper")
    assert len(plan) == 29  # every claim: 3 models x 5, 2 ablation, 7 policies, 2 subsets, ICL, 2 large models
    by_table = plan.groupby("table")["n_pairs"].unique().map(sorted).to_dict()
    assert by_table["tab:main_results"] == [753]  # 134 + 211 + 242 + 166
    assert by_table["tab:retrieval_ablation"] == [754]  # two models x (211 + 166)
    assert by_table["fig:combined_eval (text)"] == [68, 155]
    assert by_table["tab:large_models"] == [753]
    assert (plan["testable"] == (plan["power_paper_difference"] >= 0.8)).all()
    lines = power.claims_power_lines("paper")
    holm = power.planned_claims("paper", alpha=power.holm_alpha(29))  # the claims are one Holm family
    assert holm["testable"].sum() <= plan["testable"].sum()
    testable = int(holm["testable"].sum())
    assert "alpha / 29 = 0.0017" in lines[0]
    assert f"{testable} of 29 claims testable, {29 - testable} not" in lines[0]
    assert lines[1] == f"  can test ({testable}):" and f"  cannot test ({29 - testable}):" in lines
    assert len(lines) == 1 + 2 + 29
    # the authors' split puts 243 questions in Engineering's test split; a test_limit caps every split
    # planned_claims plans each claim on its own (a row per claim), so planning only the main table's 12 claims gives
    # the same rows for them as planning all 29, at less than half the CPU (each claim solves for its MDE)
    main = [claim for claim in PAPER_ORDERING_CLAIMS if claim.table == "tab:main_results"]
    authors = power.planned_claims({**_fields("paper"), "split_rule": "authors"}, claims=main)
    assert sorted(authors[authors["table"] == "tab:main_results"]["n_pairs"].unique()) == [754]
    small = power.planned_claims({**_fields("paper"), "test_limit": 10}, claims=main)
    assert sorted(small[small["table"] == "tab:main_results"]["n_pairs"].unique()) == [40]


def _fields(name: str) -> dict:
    from r2mad_lab.experiments.profiles import load_profile

    return dict(load_profile(name).fields)


def test_a_stand_in_profile_plans_its_own_claims() -> None:
    plan = power.planned_claims("sim")  # one simulated model standing in for Qwen2.5-7B-Instruct
    assert len(plan) == 17
    assert set(plan["paper_model"]) == {"Qwen2.5-7B-Instruct", "(both)"}
    assert sorted(plan[plan["paper_model"] == "(both)"]["n_pairs"].unique()) == [377]
