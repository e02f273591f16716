"""Tests of r2mad_core.theory: Proposition 4.1, Proposition 4.2, Lemma C.2, Theorem C.3."""

from __future__ import annotations

import numpy as np
import pytest

from r2mad_core import theory as th
from r2mad_core.theory import MISCONCEPTION, NO_ANSWER, TRUE_CONCEPT, LatentConceptModel


# ----------------------------------------------------------------------------- model ingredients


def test_response_likelihood_hand_computed() -> None:
    # K = 3, kappa = log 2: P(a = k | k) = 2 / (2 + 2) = 0.5, every other answer 0.25
    p = np.exp(th.response_log_likelihood(3, np.log(2.0)))
    np.testing.assert_allclose(p, [[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]], atol=1e-15)
    np.testing.assert_allclose(p.sum(axis=0), 1.0)
    # the margin of a misconception-aligned response is exactly kappa
    model = LatentConceptModel(num_concepts=5, kappa=1.7)
    ll = model.response_log_likelihood()
    assert ll[MISCONCEPTION, MISCONCEPTION] - ll[MISCONCEPTION, TRUE_CONCEPT] == pytest.approx(1.7, abs=1e-14)


def test_model_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="num_concepts"):
        LatentConceptModel(num_concepts=1)
    with pytest.raises(ValueError, match="kappa"):
        LatentConceptModel(kappa=0.0)
    with pytest.raises(ValueError, match="task_log_likelihood"):
        LatentConceptModel(num_concepts=3, task_log_likelihood=(0.0, 0.0))
    with pytest.raises(ValueError, match="prior"):
        th.shared_misconception_prior(2, 0.3, 0.5)  # K = 2 must sum to 1
    with pytest.raises(ValueError, match="peer_answers"):
        th.peer_skew(np.array([0, 5]), None, th.response_log_likelihood(3, 1.0))


def test_vanilla_and_weighted_posterior_hand_computed() -> None:
    # K = 2, kappa = log 3, flat prior; peers answer (theta', theta', theta*):
    # odds theta*:theta' = 3 * (1/3)^2 = 1/3  ->  L = -log 3
    model = LatentConceptModel(num_concepts=2, kappa=np.log(3.0))
    log_prior = np.log([0.5, 0.5])
    peers = np.array([MISCONCEPTION, MISCONCEPTION, TRUE_CONCEPT])
    post = th.debate_log_posterior(model, log_prior, peers)
    assert th.log_odds(post) == pytest.approx(-np.log(3.0), abs=1e-14)
    np.testing.assert_allclose(np.exp(post), [0.25, 0.75], atol=1e-15)
    # weight 0.5 on both misconceived peers: odds = 3 * (1/3)^(0.5 * 2) = 1  ->  L = 0
    post_w = th.debate_log_posterior(model, log_prior, peers, np.array([0.5, 0.5, 1.0]))
    assert th.log_odds(post_w) == pytest.approx(0.0, abs=1e-14)
    # an unanswered peer carries no evidence
    post_na = th.debate_log_posterior(model, log_prior, np.array([MISCONCEPTION, NO_ANSWER, TRUE_CONCEPT]))
    assert th.log_odds(post_na) == pytest.approx(0.0, abs=1e-14)
    # answer distribution: P(y) = 0.25 * 3/4 + 0.75 * 1/4 = 0.375
    np.testing.assert_allclose(th.answer_distribution(model, post), [0.375, 0.625], atol=1e-15)


def test_task_likelihood_enters_the_posterior() -> None:
    model = LatentConceptModel(num_concepts=2, kappa=1.0, task_log_likelihood=(np.log(2.0), 0.0))
    post = th.debate_log_posterior(model, np.log([0.5, 0.5]))
    assert th.log_odds(post) == pytest.approx(np.log(2.0), abs=1e-14)


def test_memory_log_likelihood_ratio() -> None:
    ll = th.memory_log_likelihood(4, supporting=2, contrastive=1, ratio_supporting=1.5, ratio_contrastive=1.3)
    lift = ll[TRUE_CONCEPT] - ll[MISCONCEPTION]
    assert lift == pytest.approx(2 * np.log(1.5) + np.log(1.3), abs=1e-14)
    # distractors are untouched relative to each other and to nothing-retrieved
    assert ll[2] == ll[3] == 0.0
    np.testing.assert_array_equal(th.memory_log_likelihood(4), np.zeros(4))
    # batched counts
    batch = th.memory_log_likelihood(3, supporting=np.array([0, 1, 2]), contrastive=0)
    assert batch.shape == (3, 3)
    np.testing.assert_allclose(batch[:, 0], np.log(1.5) * np.array([0, 1, 2]))


# ----------------------------------------------------------------------------- Proposition 4.1


def test_prior_correction_hand_example() -> None:
    # prior (0.2, 0.6, 0.2), P(E | theta) = (3, 1, 1): P(E) = 1.4, corrected = (3/7, 3/7, 1/7);
    # the theta*:theta' odds rise from 1/3 to 1, i.e. exactly by the likelihood ratio 3
    log_corr, log_evidence = th.corrected_prior(np.log([0.2, 0.6, 0.2]), np.log([3.0, 1.0, 1.0]))
    np.testing.assert_allclose(np.exp(log_corr), [3 / 7, 3 / 7, 1 / 7], atol=1e-15)
    assert np.exp(log_evidence) == pytest.approx(1.4, abs=1e-15)


def test_prior_correction_check() -> None:
    check = th.check_prior_correction(num_cases=300, num_concepts=5, seed=3)
    assert check.identity_error < 1e-12
    assert check.max_log_gain_error < 1e-12
    # gain > 1 exactly where the evidence favours theta*
    np.testing.assert_array_equal(check.odds_gain > 1, check.likelihood_ratio > 1)
    assert 0 < (check.likelihood_ratio > 1).sum() < 300  # both directions are exercised


# ----------------------------------------------------------------------------- Proposition 4.2


def test_collapse_rate_slopes_match_alpha_log_r() -> None:
    check = th.check_collapse_rate()
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
    slopes = th.check_collapse_rate().slopes.set_index("alpha")
    errors = np.abs(slopes["log_odds_slope"] - slopes.index.to_numpy() * -1.0)
    assert errors.loc[1.0] < 1e-9  # alpha = 1 cannot tell
    assert errors.loc[0.5] == pytest.approx(0.25, abs=1e-9)  # alpha^2 - alpha = -0.25


# ----------------------------------------------------------------------------- Lemma C.2


def test_log_odds_decomposition_exact_on_random_cases() -> None:
    check = th.check_log_odds_decomposition(num_cases=400, num_concepts=4, num_agents=5, seed=1)
    assert check.num_cases == 400
    assert check.max_residual < 1e-12


def test_additivity_grid_lifts() -> None:
    model = LatentConceptModel(num_concepts=3, kappa=1.3)
    grid = th.additivity_grid(
        model, memory_lifts=[0.0, 0.4, 1.1], alphas=[0.25, 0.6, 1.0], num_agents=3, m=2,
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
    row = th.joint_bound_cell(num_agents=3, m=2, alpha=0.5, memory_lift=0.4, kappa=1.0, num_trials=500)
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
        th.joint_bound_cell(num_agents=3, m=4, alpha=0.5, memory_lift=0.0, kappa=1.0)


def test_joint_bound_holds_on_binary_grid_and_reports_tightness() -> None:
    df = th.check_joint_bound(num_agents=3, num_trials=1500)
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
    monkeypatch.setattr(th, "memory_lift_log_likelihood", lambda K, lift: np.zeros(np.shape(lift) + (K,)))
    df = th.check_joint_bound(alphas=(1.0,), memory_lifts=(0.5,), kappas=(0.5,), num_trials=200)
    assert not df["holds_exact"].all()


# ----------------------------------------------------------------------------- Monte Carlo debate


def test_sample_answers_degenerate_and_frequencies() -> None:
    rng = np.random.default_rng(0)
    probs = np.broadcast_to([0.0, 1.0, 0.0], (1000, 3))
    assert (th.sample_answers(rng, probs) == 1).all()
    draws = th.sample_answers(rng, np.broadcast_to([0.2, 0.3, 0.5], (20000, 3)))
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / 20000, [0.2, 0.3, 0.5], atol=0.015)


def test_debate_simulation_counts_hand_built() -> None:
    # one trial, 3 agents, rounds 0..2
    answers = np.array([[[0, 1, 0], [1, 1, 0], [0, 0, 0]]])
    sim = th.DebateSimulation(answers)
    np.testing.assert_allclose(sim.accuracy, [2 / 3, 1 / 3, 1.0])
    np.testing.assert_array_equal(sim.correct_to_wrong, [1, 0])
    np.testing.assert_array_equal(sim.wrong_to_correct, [0, 2])
    assert sim.correct_to_wrong_rate == pytest.approx(1 / 3)  # 1 of 3 correct states (2 + 1)
    np.testing.assert_array_equal(sim.majority_accuracy, [1.0, 0.0, 1.0])


def test_simulate_debate_deterministic_and_herding() -> None:
    model = LatentConceptModel(num_concepts=3, kappa=1.5, generation_kappa=3.0)
    prior = th.shared_misconception_prior(3, 0.3, 0.6, num_agents=3)
    a = th.simulate_debate(model, prior, rounds=2, num_trials=500, seed=7)
    b = th.simulate_debate(model, prior, rounds=2, num_trials=500, seed=7)
    np.testing.assert_array_equal(a.answers, b.answers)
    # majority dominance: a misconception-leaning population gets worse over rounds
    assert a.accuracy[-1] < a.accuracy[0]


def test_confidence_weighting_lowers_correct_to_wrong_rate() -> None:
    """Theory-level version of the claim (debate loop not involved): down-weighting low-confidence
    (mostly misconceived) peers lowers the C->W rate and raises final accuracy."""
    df = th.confidence_flip_comparison(num_trials=3000, seed=1).set_index("condition")
    assert df.loc["confidence", "accuracy_round0"] == df.loc["vanilla", "accuracy_round0"]
    assert df.loc["confidence", "correct_to_wrong_rate"] < df.loc["vanilla", "correct_to_wrong_rate"] - 0.03
    assert df.loc["confidence", "accuracy_final"] > df.loc["vanilla", "accuracy_final"] + 0.03
    # with weight 1 on every annotation the two conditions coincide exactly (same random stream)
    same = th.confidence_flip_comparison(
        confidence=th.ConfidenceModel(low_weight=1.0, high_weight=1.0, p_low_if_wrong=0.5), num_trials=500
    ).set_index("condition")
    assert same.loc["confidence", "correct_to_wrong_rate"] == same.loc["vanilla", "correct_to_wrong_rate"]
    assert same.loc["confidence", "accuracy_final"] == same.loc["vanilla", "accuracy_final"]
