"""Multi-round Monte Carlo debates in the latent-concept model of :mod:`r2mad_core.theory.model`.

Round 0: every agent draws its answer from its (memory-corrected, Proposition 4.1) prior; round t > 0: from
the posterior of the decomposition with memory (``eq:joint_gen`` of the paper, Section 4.1) given all n answers of
round t - 1, each peer's
term raised to a confidence weight w_{j,i} (Section 4.3, ``sec:conf_weight``: the paper realizes w as
high/low-confidence annotations, :class:`ConfidenceModel` samples them). :class:`DebateSimulation`
measures accuracy, majority accuracy and the correct-to-wrong / wrong-to-correct transitions per round;
:func:`confidence_flip_comparison` is the theory-level version of the paper's "confidence weighting lowers
C->W flips" claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from r2mad_core.theory.model import (
    TRUE_CONCEPT,
    LatentConceptModel,
    answer_distribution,
    debate_log_posterior,
    sample_answers,
    shared_misconception_prior,
)


@dataclass(frozen=True)
class ConfidenceModel:
    """How a reader weights a peer's response (Sec. 4.3 realized as annotations).

    A response whose answer is wrong is annotated low confidence with probability
    ``p_low_if_wrong`` (else high with ``p_high_if_wrong``, else none); a correct response is
    annotated low with ``p_low_if_correct`` and high with ``p_high_if_correct``. Low -> weight
    ``low_weight`` (alpha < 1), high -> ``high_weight`` (> 1), none -> 1. The default
    ``ConfidenceModel.none()`` never annotates (vanilla debate).
    """

    low_weight: float = 0.5
    high_weight: float = 1.5
    p_low_if_wrong: float = 0.0
    p_high_if_wrong: float = 0.0
    p_low_if_correct: float = 0.0
    p_high_if_correct: float = 0.0

    @classmethod
    def none(cls) -> "ConfidenceModel":
        return cls()

    def sample_weights(self, correct: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Weights with the shape of ``correct`` (bool array of the responses' correctness)."""
        u = rng.random(correct.shape)
        p_low = np.where(correct, self.p_low_if_correct, self.p_low_if_wrong)
        p_high = np.where(correct, self.p_high_if_correct, self.p_high_if_wrong)
        return np.where(u < p_low, self.low_weight, np.where(u < p_low + p_high, self.high_weight, 1.0))


@dataclass
class DebateSimulation:
    """Monte Carlo debate results. ``answers``: (trials, rounds + 1, agents) answer indices.

    ``accuracy``: per round, mean over trials and agents; ``majority_accuracy``: per round, fraction of
    trials whose plurality answer (ties broken toward the lowest index... i.e. toward theta*) is right;
    ``correct_to_wrong`` / ``wrong_to_correct``: per transition t-1 -> t, the number of agent
    transitions; ``correct_to_wrong_rate``: C->W transitions / correct agents at t-1 (pooled).
    """

    answers: np.ndarray
    accuracy: np.ndarray = field(init=False)
    majority_accuracy: np.ndarray = field(init=False)
    correct_to_wrong: np.ndarray = field(init=False)
    wrong_to_correct: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        correct = self.answers == TRUE_CONCEPT
        self.accuracy = correct.mean(axis=(0, 2))
        K = int(self.answers.max()) + 1
        counts = np.stack([(self.answers == k).sum(axis=-1) for k in range(max(K, 2))], axis=-1)
        self.majority_accuracy = (counts.argmax(axis=-1) == TRUE_CONCEPT).mean(axis=0)
        self.correct_to_wrong = (correct[:, :-1] & ~correct[:, 1:]).sum(axis=(0, 2))
        self.wrong_to_correct = (~correct[:, :-1] & correct[:, 1:]).sum(axis=(0, 2))

    @property
    def correct_to_wrong_rate(self) -> float:
        correct_before = (self.answers[:, :-1] == TRUE_CONCEPT).sum()
        return float(self.correct_to_wrong.sum() / max(correct_before, 1))

    @property
    def wrong_to_correct_rate(self) -> float:
        wrong_before = (self.answers[:, :-1] != TRUE_CONCEPT).sum()
        return float(self.wrong_to_correct.sum() / max(wrong_before, 1))


def simulate_debate(
    model: LatentConceptModel,
    log_prior: np.ndarray,
    rounds: int = 2,
    num_trials: int = 2000,
    confidence: ConfidenceModel | None = None,
    log_memory: np.ndarray | None = None,
    seed: int = 0,
) -> DebateSimulation:
    """Monte Carlo debate: round 0 answers from the (memory-corrected) prior, every later round from
    the eq:joint_gen posterior given all n answers of the previous round (the agent's own included),
    weighted by ``confidence``. ``log_prior`` (n, K); ``log_memory`` (n, K) or None."""
    log_prior = np.asarray(log_prior, dtype=float)
    n = log_prior.shape[0]
    confidence = confidence or ConfidenceModel.none()
    rng = np.random.default_rng(seed)
    answers = np.empty((num_trials, rounds + 1, n), dtype=int)
    post0 = debate_log_posterior(model, log_prior, log_memory=log_memory)
    answers[:, 0] = sample_answers(
        rng, np.broadcast_to(answer_distribution(model, post0), (num_trials, n, model.num_concepts)))
    for t in range(1, rounds + 1):
        previous = answers[:, t - 1]  # (trials, n)
        peers = np.broadcast_to(previous[:, None, :], (num_trials, n, n))
        weights = confidence.sample_weights(peers == TRUE_CONCEPT, rng)
        post = debate_log_posterior(model, log_prior, peers, weights, log_memory)
        answers[:, t] = sample_answers(rng, answer_distribution(model, post))
    return DebateSimulation(answers)


def confidence_flip_comparison(
    n_agents: int = 3,
    num_concepts: int = 4,
    kappa: float = 1.0,
    generation_kappa: float = 3.0,
    prior_true: float = 0.3,
    prior_misconception: float = 0.55,
    confidence: ConfidenceModel | None = None,
    rounds: int = 2,
    num_trials: int = 4000,
    seed: int = 0,
) -> pd.DataFrame:
    """Shared-misconception debates with and without confidence weighting (theory-level version of
    the "confidence weighting lowers C->W" claim). One row per condition: accuracy per round,
    C->W rate, W->C rate."""
    model = LatentConceptModel(num_concepts=num_concepts, kappa=kappa, generation_kappa=generation_kappa)
    log_prior = shared_misconception_prior(num_concepts, prior_true, prior_misconception, n_agents)
    confidence = confidence or ConfidenceModel(
        low_weight=0.4, high_weight=1.5, p_low_if_wrong=0.6, p_high_if_wrong=0.1,
        p_low_if_correct=0.1, p_high_if_correct=0.4,
    )
    rows = []
    for name, conf in (("vanilla", ConfidenceModel.none()), ("confidence", confidence)):
        sim = simulate_debate(model, log_prior, rounds, num_trials, conf, seed=seed)
        rows.append(
            {
                "condition": name,
                "accuracy_round0": float(sim.accuracy[0]),
                "accuracy_final": float(sim.accuracy[-1]),
                "majority_accuracy_final": float(sim.majority_accuracy[-1]),
                "correct_to_wrong_rate": sim.correct_to_wrong_rate,
                "wrong_to_correct_rate": sim.wrong_to_correct_rate,
            }
        )
    return pd.DataFrame(rows)
