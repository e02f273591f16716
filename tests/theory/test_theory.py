"""Tests of r2mad_core.theory.model: the latent-concept model (Eq. estornell, Eq. joint_gen), the memory-corrected
prior of Proposition 4.1, the log-odds of Definition C.1 and the answer draws."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from r2mad_core.theory import model as th
from r2mad_core.theory.model import MISCONCEPTION, NO_ANSWER, TRUE_CONCEPT, LatentConceptModel

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


# ----------------------------------------------------------------------------- Proposition 4.1 (the formula)


def test_prior_correction_hand_example() -> None:
    # prior (0.2, 0.6, 0.2), P(E | theta) = (3, 1, 1): P(E) = 1.4, corrected = (3/7, 3/7, 1/7);
    # the theta*:theta' odds rise from 1/3 to 1, i.e. exactly by the likelihood ratio 3
    log_corr, log_evidence = th.corrected_prior(np.log([0.2, 0.6, 0.2]), np.log([3.0, 1.0, 1.0]))
    np.testing.assert_allclose(np.exp(log_corr), [3 / 7, 3 / 7, 1 / 7], atol=1e-15)
    assert np.exp(log_evidence) == pytest.approx(1.4, abs=1e-15)


# ----------------------------------------------------------------------------- answer draws


def test_sample_answers_degenerate_and_frequencies() -> None:
    rng = np.random.default_rng(0)
    probs = np.broadcast_to([0.0, 1.0, 0.0], (1000, 3))
    assert (th.sample_answers(rng, probs) == 1).all()
    draws = th.sample_answers(rng, np.broadcast_to([0.2, 0.3, 0.5], (20000, 3)))
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / 20000, [0.2, 0.3, 0.5], atol=0.015)


def test_the_model_needs_only_numpy() -> None:
    """The model the simulated engine draws from imports neither pandas nor scipy (the checks and the
    Monte Carlo tables live in theory_checks / theory_simulation): importing the engine stays light."""
    code = "import sys, r2mad_core.theory.agents; print(sorted({'pandas', 'scipy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
