"""Tests of r2mad_core.theory.checks: Proposition 4.1, Proposition 4.2, Lemma C.2 and Theorem C.3 measured in
the latent-concept model."""

from __future__ import annotations

import numpy as np
import pytest

from r2mad_core.theory import checks
from r2mad_core.theory import model as th
from r2mad_core.theory.model import LatentConceptModel

# ----------------------------------------------------------------------------- Proposition 4.1


def test_prior_correction_check() -> None:
    check = checks.check_prior_correction(num_cases=300, num_concepts=5, seed=3)
    assert check.identity_error < 1e-12
    assert check.max_log_gain_error < 1e-12
    # gain > 1 exactly where the evidence favours theta*
    np.testing.assert_array_equal(check.odds_gain > 1, check.likelihood_ratio > 1)
    assert 0 < (check.likelihood_ratio > 1).sum() < 300  # both directions are exercised


# ----------------------------------------------------------------------------- Proposition 4.2


def test_collapse_rate_slopes_match_alpha_log_r() -> None:
    check = checks.check_collapse_rate()
    assert check.log_r == pytest.approx(-1.0, abs=1e-14)  # kappa = 1
    slopes = check.slopes.set_index("alpha")
    for alpha, row in slopes.iterrows():
        # exact log-odds: slope alpha log r to float precision
        assert row["log_odds_slope"] == pytest.approx(alpha * check.log_r, abs=1e-9)
        # collapse of the posterior mass onto theta': the same rate asymptotically
        assert row["collapse_slope"] == pytest.approx(alpha * check.log_r, rel=0.01)
    # vanilla (alpha = 1) collapses 4x faster than alpha = 0.25
    assert slopes.loc[1.0, "collapse_slope"] / slopes.loc[0.25, "collapse_slope"] == pytest.approx(4.0, rel=0.01)
    # the mass off theta' shrinks with m and grows as the majority's weight drops
    curve = check.curve
    for _, group in curve.groupby("alpha"):
        assert np.all(np.diff(group.sort_values("m")["log_mass_off_misconception"]) < 0)
    at_m = curve[curve["m"] == 10].sort_values("alpha")
    assert np.all(np.diff(at_m["log_mass_off_misconception"]) < 0)


def test_collapse_rate_check_detects_a_wrong_exponent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The slope test fails when the skew uses w^2 instead of w (mutation check)."""
    right = th.peer_skew

    def squared_exponent(answers, weights, loglik):  # type: ignore[no-untyped-def]
        return right(answers, None if weights is None else np.asarray(weights) ** 2, loglik)

    monkeypatch.setattr(th, "peer_skew", squared_exponent)
    slopes = checks.check_collapse_rate().slopes.set_index("alpha")
    errors = np.abs(slopes["log_odds_slope"] - slopes.index.to_numpy() * -1.0)
    assert errors.loc[1.0] < 1e-9  # alpha = 1 cannot tell
    assert errors.loc[0.5] == pytest.approx(0.25, abs=1e-9)  # alpha^2 - alpha = -0.25


# ----------------------------------------------------------------------------- Lemma C.2


def test_log_odds_decomposition_exact_on_random_cases() -> None:
    check = checks.check_log_odds_decomposition(num_cases=400, num_concepts=4, n_agents=5, seed=1)
    assert check.num_cases == 400
    assert check.max_residual < 1e-12


def test_additivity_grid_lifts() -> None:
    model = LatentConceptModel(num_concepts=3, kappa=1.3)
    grid = checks.additivity_grid(
        model, memory_lifts=[0.0, 0.4, 1.1], alphas=[0.25, 0.6, 1.0], n_agents=3, m=2,
        prior_true=0.3, prior_misconception=0.5,
    ).set_index(["delta_mem", "alpha"])
    assert np.max(np.abs(grid["residual"])) < 1e-12
    # alpha = 1: no confidence lift; delta_mem = 0: no memory lift (exactly)
    assert (grid.xs(1.0, level="alpha")["confidence_lift"] == 0).all()
    assert (grid.xs(0.0, level="delta_mem")["memory_lift"] == 0).all()
    # closed forms: Lambda_cw = (1 - alpha) m kappa, Lambda_mem = delta_mem
    np.testing.assert_allclose(grid["confidence_lift"], grid["predicted_confidence_lift"], atol=1e-12)
    np.testing.assert_allclose(grid["memory_lift"], grid.index.get_level_values("delta_mem"), atol=1e-15)
    assert grid.loc[(0.0, 0.25), "confidence_lift"] == pytest.approx(0.75 * 2 * 1.3, abs=1e-12)
    # no interaction: the joint lift is the sum of the single lifts
    joint = grid.loc[(1.1, 0.25), "total_lift"]
    assert joint == pytest.approx(grid.loc[(1.1, 1.0), "total_lift"] + grid.loc[(0.0, 0.25), "total_lift"], abs=1e-12)


# ----------------------------------------------------------------------------- Theorem C.3


def test_joint_bound_cell_hand_computed_terms() -> None:
    row = checks.joint_bound_cell(n_agents=3, m=2, alpha=0.5, memory_lift=0.4, kappa=1.0, num_trials=500)
    p_star = np.e / (np.e + 1)
    p_prime = 1 / (np.e + 1)
    lift = 0.4 + 0.5 * 2 * 1.0
    assert row["remainder"] == pytest.approx(0.5 / (6 * np.sqrt(3)) * (p_star - p_prime) * lift**2, rel=1e-12)
    assert row["confidence_lift_term"] == pytest.approx(row["rho"] * 1.0, rel=1e-12)
    assert row["bound"] == pytest.approx(
        row["accuracy_vanilla_exact"] + row["rho"] * lift - row["remainder"], rel=1e-12
    )
    assert 0 < row["rho"] <= 0.25 * (p_star - p_prime)
    with pytest.raises(ValueError, match="m"):
        checks.joint_bound_cell(n_agents=3, m=4, alpha=0.5, memory_lift=0.0, kappa=1.0)


def test_joint_bound_holds_on_binary_grid_and_reports_tightness() -> None:
    df = checks.check_joint_bound(n_agents=3, num_trials=1500)
    assert len(df) == 2 * 4 * 4 * 3  # m in {2, 3}, 4 alphas, 4 memory lifts, 3 kappas
    assert df["holds_exact"].all()
    assert df["holds"].all()  # Monte Carlo within 4 standard errors
    # binary concept space: the mean-value form (no remainder) holds too
    assert df["holds_without_remainder"].all()
    no_lift = df[(df["alpha"] == 1.0) & (df["delta_mem"] == 0.0)]
    np.testing.assert_allclose(no_lift["bound"], no_lift["accuracy_vanilla_exact"], atol=0)
    assert (no_lift["tightness"] == "no lift").all()
    # Monte Carlo agrees with the exact accuracy
    assert np.max(np.abs(df["accuracy_joint_mc"] - df["accuracy_joint_exact"]) / df["mc_standard_error"]) < 5
    # lifts never hurt: accuracy grows with delta_mem and with 1 - alpha
    assert (df["actual_lift"] >= -1e-12).all()
    counts = df["tightness"].value_counts()
    assert counts.get("tight", 0) > 0 and counts.get("vacuous", 0) > 0


def test_joint_bound_check_detects_ignored_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the simulator dropped the memory evidence, the bound would fail where delta_mem is large."""
    monkeypatch.setattr(checks, "memory_lift_log_likelihood", lambda K, lift: np.zeros(np.shape(lift) + (K,)))
    df = checks.check_joint_bound(alphas=(1.0,), memory_lifts=(0.5,), kappas=(0.5,), num_trials=200)
    assert not df["holds_exact"].all()
