"""Tests of r2mad_core.theory.simulation: multi-round Monte Carlo debates of the latent-concept model with
confidence-weighted readers."""

from __future__ import annotations

import numpy as np
import pytest

from r2mad_core.theory import model as th
from r2mad_core.theory import simulation
from r2mad_core.theory.model import LatentConceptModel

# ----------------------------------------------------------------------------- Monte Carlo debate


def test_debate_simulation_counts_hand_built() -> None:
    # one trial, 3 agents, rounds 0..2
    answers = np.array([[[0, 1, 0], [1, 1, 0], [0, 0, 0]]])
    sim = simulation.DebateSimulation(answers)
    np.testing.assert_allclose(sim.accuracy, [2 / 3, 1 / 3, 1.0])
    np.testing.assert_array_equal(sim.correct_to_wrong, [1, 0])
    np.testing.assert_array_equal(sim.wrong_to_correct, [0, 2])
    assert sim.correct_to_wrong_rate == pytest.approx(1 / 3)  # 1 of 3 correct states (2 + 1)
    np.testing.assert_array_equal(sim.majority_accuracy, [1.0, 0.0, 1.0])


def test_simulate_debate_deterministic_and_herding() -> None:
    model = LatentConceptModel(num_concepts=3, kappa=1.5, generation_kappa=3.0)
    prior = th.shared_misconception_prior(3, 0.3, 0.6, n_agents=3)
    a = simulation.simulate_debate(model, prior, rounds=2, num_trials=500, seed=7)
    b = simulation.simulate_debate(model, prior, rounds=2, num_trials=500, seed=7)
    np.testing.assert_array_equal(a.answers, b.answers)
    # majority dominance: a misconception-leaning population gets worse over rounds
    assert a.accuracy[-1] < a.accuracy[0]


def test_confidence_weighting_lowers_correct_to_wrong_rate() -> None:
    """Theory-level version of the claim (debate loop not involved): down-weighting low-confidence
    (mostly misconceived) peers lowers the C->W rate and raises final accuracy."""
    df = simulation.confidence_flip_comparison(num_trials=3000, seed=1).set_index("condition")
    assert df.loc["confidence", "accuracy_round0"] == df.loc["vanilla", "accuracy_round0"]
    assert df.loc["confidence", "correct_to_wrong_rate"] < df.loc["vanilla", "correct_to_wrong_rate"] - 0.03
    assert df.loc["confidence", "accuracy_final"] > df.loc["vanilla", "accuracy_final"] + 0.03
    # with weight 1 on every annotation the two conditions coincide exactly (same random stream)
    same = simulation.confidence_flip_comparison(
        confidence=simulation.ConfidenceModel(low_weight=1.0, high_weight=1.0, p_low_if_wrong=0.5), num_trials=500
    ).set_index("condition")
    assert same.loc["confidence", "correct_to_wrong_rate"] == same.loc["vanilla", "correct_to_wrong_rate"]
    assert same.loc["confidence", "accuracy_final"] == same.loc["vanilla", "accuracy_final"]
