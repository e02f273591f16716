"""Latent-concept simulations of the paper's theory (Section 3-4, Appendix "Proofs").

The model (Eq. estornell and Eq. joint_gen). A finite concept space Theta = {0, ..., K-1} holds the
true concept theta* (index ``TRUE_CONCEPT = 0``) and a misconception theta' (index
``MISCONCEPTION = 1``); the other concepts are distractors. Answer ``a`` is the answer concept ``a``
produces, so answers and concepts share indices. Agent i holds a concept prior P(theta | phi_i); a
response z is drawn from the response likelihood

    P(z = a | theta = k) = exp(kappa * [a == k]) / (exp(kappa) + K - 1),

so a response aligned with theta' has the log-likelihood margin
kappa = log P(z' | theta') / P(z' | theta*) of Theorem C.3. Agent i's debate posterior is

    P_{w,E}(theta | Z, x, E_i, phi_i)  ∝  P(x | theta) P(theta | E_i, phi_i) prod_j P(z_j | theta)^{w_{j,i}}

(the bracket of Eq. joint_gen without the generation term), where the memory-corrected prior is
Proposition 4.1: P(theta | E, phi) = P(theta | phi) P(E | theta, phi) / P(E | phi). Its next response
is drawn from  P(z_i^{t+1} = a) = sum_theta P(a | theta) P_{w,E}(theta | ...)  (Eq. joint_gen).

What this module computes
- exactly: the posterior (:func:`debate_log_posterior`), the log-odds L_i of Definition C.1
  (:func:`log_odds`), its decomposition into vanilla + memory lift + confidence lift (Lemma C.2,
  :func:`log_odds_decomposition`), the answer distribution (:func:`answer_distribution`);
- by Monte Carlo: agents' accuracy after a debate step (:func:`check_joint_bound`) and over T
  rounds (:func:`simulate_debate`);
- the checks of Proposition 4.1 (:func:`check_prior_correction`), Proposition 4.2
  (:func:`check_collapse_rate`), Lemma C.2 (:func:`check_log_odds_decomposition`) and Theorem C.3
  (:func:`check_joint_bound`), each returning the measured quantities.

The simulated engine (``r2mad_core.engines.simulated``) draws its agents' answers from the same
functions (:func:`memory_log_likelihood`, :func:`debate_log_posterior`, :func:`answer_distribution`).

Everything is vectorized with numpy: arrays may carry any leading batch dimensions
(trials, agents, ...) before the concept axis, which is always last.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit

logger = logging.getLogger(__name__)

TRUE_CONCEPT = 0
"""Index of the true concept theta* (and of the gold answer)."""
MISCONCEPTION = 1
"""Index of the shared misconception theta' (and of the misconception answer)."""
NO_ANSWER = -1
"""Peer answer code for a response without a parseable answer: it carries no evidence."""

def logsumexp(a: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
    """log sum exp over ``axis`` with the max shift (plain numpy: scipy's version carries array-API
    overhead that dominates the small arrays here)."""
    a = np.asarray(a, dtype=float)
    peak = np.max(a, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    out = np.log(np.sum(np.exp(a - peak), axis=axis, keepdims=True)) + peak
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


SIGMOID_SECOND_DERIVATIVE_SUP = 1.0 / (6.0 * np.sqrt(3.0))
"""sup_L |sigma''(L)| = 1 / (6 sqrt 3) ≈ 0.0962, reached at L = ±log(2 + sqrt 3)."""


# ---------------------------------------------------------------------------------------------
# Model ingredients
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatentConceptModel:
    """The parts of Eq. joint_gen shared by every agent.

    Attributes:
        num_concepts: K = |Theta| (>= 2). Concept 0 is theta*, concept 1 is theta'.
        kappa: peer response log-likelihood margin (> 0) in P(z_j | theta): how strongly a peer's
            answer a points at concept a (Theorem C.3's kappa).
        generation_kappa: margin of the generation term P(z_i^{t+1} | theta); ``None`` = ``kappa``.
            A larger value makes an agent's answer follow its posterior mode more faithfully.
        task_log_likelihood: log P(x | theta) per concept; ``None`` = uniform (cancels).
    """

    num_concepts: int = 2
    kappa: float = 2.0
    generation_kappa: float | None = None
    task_log_likelihood: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.num_concepts < 2:
            raise ValueError(f"LatentConceptModel.num_concepts: expected >= 2, found {self.num_concepts}")
        if not self.kappa > 0:
            raise ValueError(f"LatentConceptModel.kappa: expected > 0, found {self.kappa}")
        if self.generation_kappa is not None and not self.generation_kappa > 0:
            raise ValueError(
                f"LatentConceptModel.generation_kappa: expected > 0 or None, found {self.generation_kappa}"
            )
        if self.task_log_likelihood is not None and len(self.task_log_likelihood) != self.num_concepts:
            raise ValueError(
                "LatentConceptModel.task_log_likelihood: expected one value per concept "
                f"({self.num_concepts}), found {len(self.task_log_likelihood)}"
            )

    def response_log_likelihood(self) -> np.ndarray:
        """log P(z = a | theta = k) of a peer response, shape (answers K, concepts K)."""
        return response_log_likelihood(self.num_concepts, self.kappa)

    def generation_log_likelihood(self) -> np.ndarray:
        """log P(z_i^{t+1} = a | theta = k) of the agent's own next response, shape (K, K)."""
        kappa = self.kappa if self.generation_kappa is None else self.generation_kappa
        return response_log_likelihood(self.num_concepts, kappa)

    def task_term(self) -> np.ndarray:
        """log P(x | theta), shape (K,) (zeros when uniform)."""
        if self.task_log_likelihood is None:
            return np.zeros(self.num_concepts)
        return np.asarray(self.task_log_likelihood, dtype=float)

    @property
    def correct_answer_probabilities(self) -> tuple[float, float]:
        """(P*, P'): P(a(z) = y | theta*) and P(a(z) = y | theta') of the generation term (Theorem C.3)."""
        gen = np.exp(self.generation_log_likelihood())
        return float(gen[TRUE_CONCEPT, TRUE_CONCEPT]), float(gen[TRUE_CONCEPT, MISCONCEPTION])


def response_log_likelihood(num_concepts: int, kappa: float) -> np.ndarray:
    """log P(z = a | theta = k) = kappa [a == k] - log(exp(kappa) + K - 1); shape (K answers, K concepts)."""
    return kappa * np.eye(num_concepts) - np.logaddexp(kappa, np.log(num_concepts - 1))


def shared_misconception_prior(
    num_concepts: int, prior_true: float, prior_misconception: float, num_agents: int | None = None
) -> np.ndarray:
    """A concept prior P(theta | phi) with mass ``prior_true`` on theta*, ``prior_misconception`` on
    theta' and the rest spread evenly over the distractors. Returns log-probabilities, shape (K,) or
    (num_agents, K)."""
    if num_concepts < 2:
        raise ValueError(f"num_concepts: expected >= 2, found {num_concepts}")
    rest = 1.0 - prior_true - prior_misconception
    if prior_true <= 0 or prior_misconception <= 0 or rest < -1e-12 or (num_concepts == 2 and rest > 1e-12):
        raise ValueError(
            f"prior: expected prior_true > 0, prior_misconception > 0 and the rest >= 0 spread over "
            f"{num_concepts - 2} distractor(s) (exactly 0 when K = 2); found prior_true={prior_true}, "
            f"prior_misconception={prior_misconception}"
        )
    prior = np.full(num_concepts, max(rest, 0.0) / max(num_concepts - 2, 1))
    prior[TRUE_CONCEPT] = prior_true
    prior[MISCONCEPTION] = prior_misconception
    with np.errstate(divide="ignore"):
        log_prior = np.log(prior / prior.sum())
    if num_agents is not None:
        log_prior = np.broadcast_to(log_prior, (num_agents, num_concepts)).copy()
    return log_prior


def memory_log_likelihood(
    num_concepts: int,
    supporting: np.ndarray | float = 0.0,
    contrastive: np.ndarray | float = 0.0,
    ratio_supporting: float = 1.5,
    ratio_contrastive: float = 1.3,
    misleading_supporting: np.ndarray | float = 0.0,
    misleading_contrastive: np.ndarray | float = 0.0,
) -> np.ndarray:
    """log P(E | theta) (up to a constant) of retrieved experiences E.

    The memory model shared by the theory and the simulated engine: a *supporting* experience (one
    whose recorded answer was correct) multiplies the likelihood of theta* by ``ratio_supporting``
    against every other concept; a *contrastive* experience (a similar case that went wrong) divides
    the likelihood of the misconception theta' by ``ratio_contrastive``. Hence

        Lambda_mem = log P(E | theta*) / P(E | theta')
                   = supporting log(ratio_supporting) + contrastive log(ratio_contrastive).

    Ratios < 1 model misleading memories. ``supporting``/``contrastive`` are counts with any batch
    shape; the result has shape batch + (K,).

    Mislabelled experiences (a poisoned memory, Section 5.5) teach the opposite lesson: one *labelled*
    correct whose answer was in fact wrong (``misleading_supporting``) multiplies the likelihood of the
    misconception theta' by ``ratio_supporting``; one labelled incorrect whose answer was in fact right
    (``misleading_contrastive``) divides the likelihood of theta* by ``ratio_contrastive``. Each lowers
    Lambda_mem by the log-ratio a truthful experience would have added.
    """
    if ratio_supporting <= 0 or ratio_contrastive <= 0:
        raise ValueError(
            f"memory likelihood ratios: expected > 0, found ratio_supporting={ratio_supporting}, "
            f"ratio_contrastive={ratio_contrastive}"
        )
    supporting = np.asarray(supporting, dtype=float)
    contrastive = np.asarray(contrastive, dtype=float)
    misleading_supporting = np.asarray(misleading_supporting, dtype=float)
    misleading_contrastive = np.asarray(misleading_contrastive, dtype=float)
    shape = np.broadcast_shapes(
        supporting.shape, contrastive.shape, misleading_supporting.shape, misleading_contrastive.shape
    )
    out = np.zeros(shape + (num_concepts,))
    out[..., TRUE_CONCEPT] = supporting * np.log(ratio_supporting) - misleading_contrastive * np.log(ratio_contrastive)
    out[..., MISCONCEPTION] = misleading_supporting * np.log(ratio_supporting) - contrastive * np.log(ratio_contrastive)
    return out


def memory_lift_log_likelihood(num_concepts: int, memory_lift: np.ndarray | float) -> np.ndarray:
    """log P(E | theta) for evidence whose log-likelihood ratio theta* : theta (every theta != theta*)
    equals ``memory_lift``: Lambda_mem(E) = memory_lift exactly. Shape batch + (K,)."""
    memory_lift = np.asarray(memory_lift, dtype=float)
    out = np.zeros(memory_lift.shape + (num_concepts,))
    out[..., TRUE_CONCEPT] = memory_lift
    return out


# ---------------------------------------------------------------------------------------------
# Exact posterior computations
# ---------------------------------------------------------------------------------------------


def corrected_prior(log_prior: np.ndarray, log_memory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Proposition 4.1: log P(theta | E, phi) = log P(theta | phi) + log P(E | theta, phi) - log P(E | phi).

    Returns (log corrected prior, log evidence log P(E | phi) = logsumexp_theta(prior + memory)).
    """
    joint = np.asarray(log_prior, dtype=float) + np.asarray(log_memory, dtype=float)
    log_evidence = logsumexp(joint, axis=-1)
    return joint - log_evidence[..., None], log_evidence


def peer_skew(
    peer_answers: np.ndarray, peer_weights: np.ndarray | None, log_likelihood: np.ndarray
) -> np.ndarray:
    """sum_j w_{j,i} log P(z_j | theta) for every concept (the weighted skew of Eq. joint_gen).

    ``peer_answers``: int array (..., n) of answer indices, ``NO_ANSWER`` (-1) for responses without
    an answer (they contribute nothing). ``peer_weights``: (..., n) or ``None`` (all 1).
    ``log_likelihood``: (K answers, K concepts). Returns (..., K).
    """
    peer_answers = np.asarray(peer_answers)
    if peer_answers.size and (peer_answers.max(initial=-1) >= log_likelihood.shape[0] or peer_answers.min(initial=0) < NO_ANSWER):
        raise ValueError(
            f"peer_answers: expected indices in [-1, {log_likelihood.shape[0] - 1}], found range "
            f"[{peer_answers.min()}, {peer_answers.max()}]"
        )
    answered = peer_answers != NO_ANSWER
    rows = log_likelihood[np.where(answered, peer_answers, 0)]  # (..., n, K)
    weights = np.ones(peer_answers.shape) if peer_weights is None else np.asarray(peer_weights, dtype=float)
    weights = np.broadcast_to(weights, peer_answers.shape)
    return np.sum(np.where(answered[..., None], weights[..., None] * rows, 0.0), axis=-2)


def debate_log_posterior(
    model: LatentConceptModel,
    log_prior: np.ndarray,
    peer_answers: np.ndarray | None = None,
    peer_weights: np.ndarray | None = None,
    log_memory: np.ndarray | None = None,
) -> np.ndarray:
    """log P_{w,E}(theta | Z, x, E_i, phi_i) of Eq. joint_gen (normalized over concepts).

    ``log_prior`` (..., K); ``peer_answers``/``peer_weights`` (..., n) or ``None`` (round 0: no peers);
    ``log_memory`` (..., K) = log P(E | theta) or ``None`` (no memory). Broadcasts over leading axes.
    """
    log_prior = np.asarray(log_prior, dtype=float)
    if log_prior.shape[-1] != model.num_concepts:
        raise ValueError(
            f"log_prior: expected last axis of size {model.num_concepts}, found shape {log_prior.shape}"
        )
    score = log_prior + model.task_term()
    if log_memory is not None:
        score = score + corrected_prior(np.zeros(model.num_concepts), log_memory)[0]
    if peer_answers is not None:
        score = score + peer_skew(peer_answers, peer_weights, model.response_log_likelihood())
    return score - logsumexp(score, axis=-1, keepdims=True)


def answer_distribution(model: LatentConceptModel, log_posterior: np.ndarray) -> np.ndarray:
    """P(z_i^{t+1} = a) = sum_theta P(a | theta) P(theta | ...) (Eq. joint_gen), shape (..., K)."""
    gen = np.exp(model.generation_log_likelihood())  # (answers, concepts)
    return np.exp(log_posterior) @ gen.T


def log_odds(log_posterior: np.ndarray) -> np.ndarray:
    """Definition C.1: L = log P(theta* | ...) / P(theta' | ...), shape (...)."""
    return log_posterior[..., TRUE_CONCEPT] - log_posterior[..., MISCONCEPTION]


@dataclass
class LogOddsDecomposition:
    """Lemma C.2: ``total`` = ``vanilla`` + ``memory_lift`` + ``confidence_lift`` (arrays of one shape).

    ``total`` is computed from the full posterior (weights and memory), ``vanilla`` from the
    posterior with w = 1 and no memory, the two lifts from their closed forms.
    """

    total: np.ndarray
    vanilla: np.ndarray
    memory_lift: np.ndarray
    confidence_lift: np.ndarray

    @property
    def residual(self) -> np.ndarray:
        return self.total - (self.vanilla + self.memory_lift + self.confidence_lift)


def log_odds_decomposition(
    model: LatentConceptModel,
    log_prior: np.ndarray,
    peer_answers: np.ndarray,
    peer_weights: np.ndarray,
    log_memory: np.ndarray,
) -> LogOddsDecomposition:
    """Lemma C.2 for one or many agents: the three terms computed independently."""
    total = log_odds(debate_log_posterior(model, log_prior, peer_answers, peer_weights, log_memory))
    vanilla = log_odds(debate_log_posterior(model, log_prior, peer_answers, None, None))
    log_memory = np.asarray(log_memory, dtype=float)
    memory_lift = log_memory[..., TRUE_CONCEPT] - log_memory[..., MISCONCEPTION]
    loglik = model.response_log_likelihood()
    per_peer_ratio = loglik[:, TRUE_CONCEPT] - loglik[:, MISCONCEPTION]  # log P(z|θ*)/P(z|θ') per answer
    peer_answers = np.asarray(peer_answers)
    ratios = np.where(peer_answers == NO_ANSWER, 0.0, per_peer_ratio[np.where(peer_answers == NO_ANSWER, 0, peer_answers)])
    weights = np.broadcast_to(np.asarray(peer_weights, dtype=float), peer_answers.shape)
    confidence_lift = np.sum((weights - 1.0) * ratios, axis=-1)
    return LogOddsDecomposition(total, vanilla, np.broadcast_to(memory_lift, total.shape), confidence_lift)


# ---------------------------------------------------------------------------------------------
# Check: Proposition 4.1 (memory as prior correction)
# ---------------------------------------------------------------------------------------------


@dataclass
class PriorCorrectionCheck:
    """Measured quantities of Proposition 4.1 over random priors and memories (arrays over cases).

    ``identity_error``: max |P(theta|E) - P(theta) P(E|theta) / P(E)| where the left side is the
    normalized posterior of :func:`debate_log_posterior` (no peers) and the right side the formula.
    ``odds_gain``: the true-vs-misconception odds after / before; ``likelihood_ratio``:
    P(E|theta*) / P(E|theta'). The proposition says they are equal; ``odds_gain > 1`` exactly when the
    likelihood ratio exceeds 1.
    """

    identity_error: float
    odds_gain: np.ndarray
    likelihood_ratio: np.ndarray
    prior_odds: np.ndarray
    corrected_odds: np.ndarray

    @property
    def max_log_gain_error(self) -> float:
        return float(np.max(np.abs(np.log(self.odds_gain) - np.log(self.likelihood_ratio))))


def check_prior_correction(
    num_cases: int = 200, num_concepts: int = 4, seed: int = 0
) -> PriorCorrectionCheck:
    """Draw random priors (Dirichlet) and memory likelihoods (log-normal) and measure Proposition 4.1."""
    rng = np.random.default_rng(seed)
    prior = rng.dirichlet(np.ones(num_concepts), size=num_cases)
    memory_likelihood = np.exp(rng.normal(0.0, 1.0, size=(num_cases, num_concepts)))
    model = LatentConceptModel(num_concepts=num_concepts)
    log_post = debate_log_posterior(model, np.log(prior), log_memory=np.log(memory_likelihood))
    evidence = np.sum(prior * memory_likelihood, axis=-1, keepdims=True)
    formula = prior * memory_likelihood / evidence
    identity_error = float(np.max(np.abs(np.exp(log_post) - formula)))
    prior_odds = prior[:, TRUE_CONCEPT] / prior[:, MISCONCEPTION]
    corrected_odds = np.exp(log_odds(log_post))
    ratio = memory_likelihood[:, TRUE_CONCEPT] / memory_likelihood[:, MISCONCEPTION]
    return PriorCorrectionCheck(identity_error, corrected_odds / prior_odds, ratio, prior_odds, corrected_odds)


# ---------------------------------------------------------------------------------------------
# Check: Proposition 4.2 (anti-majority dominance)
# ---------------------------------------------------------------------------------------------


def collapse_curve(
    model: LatentConceptModel,
    majority_sizes: Sequence[int],
    alphas: Sequence[float],
    prior_true: float = 0.5,
    prior_misconception: float = 0.3,
    num_minority: int = 1,
) -> pd.DataFrame:
    """Posterior of one agent reading m misconceived responses (weight alpha) and ``num_minority``
    correct responses (weight 1), for every (alpha, m). Columns: alpha, m, log_odds (Definition C.1),
    log_mass_off_misconception = log(1 - P(theta' | ...)), posterior_misconception, accuracy (P(a(z)=y))."""
    K = model.num_concepts
    log_prior = shared_misconception_prior(K, prior_true, prior_misconception if K > 2 else 1 - prior_true)
    rows = []
    for alpha in alphas:
        for m in majority_sizes:
            answers = np.array([MISCONCEPTION] * m + [TRUE_CONCEPT] * num_minority)
            weights = np.array([alpha] * m + [1.0] * num_minority)
            log_post = debate_log_posterior(model, log_prior, answers, weights)
            log_off = logsumexp(np.delete(log_post, MISCONCEPTION))
            rows.append(
                {
                    "alpha": float(alpha),
                    "m": int(m),
                    "log_odds": float(log_odds(log_post)),
                    "log_mass_off_misconception": float(log_off),
                    "posterior_misconception": float(np.exp(log_post[MISCONCEPTION])),
                    "accuracy": float(answer_distribution(model, log_post)[TRUE_CONCEPT]),
                }
            )
    return pd.DataFrame(rows)


@dataclass
class CollapseRateCheck:
    """Proposition 4.2 measured: per alpha, the fitted slope over m of the exact log-odds and of
    log(1 - P(theta')) (the rate at which the posterior collapses onto theta'), and the predicted
    log-rate alpha * log r with r = P(z'|theta*) / P(z'|theta') = exp(-kappa)."""

    slopes: pd.DataFrame  # alpha, predicted_slope, log_odds_slope, collapse_slope, collapse_slope_error
    curve: pd.DataFrame  # collapse_curve output
    log_r: float


def check_collapse_rate(
    model: LatentConceptModel | None = None,
    alphas: Sequence[float] = (1.0, 0.75, 0.5, 0.25),
    majority_sizes: Sequence[int] = tuple(range(0, 41)),
    fit_from: int = 20,
    prior_true: float = 0.5,
    prior_misconception: float = 0.3,
    num_minority: int = 1,
) -> CollapseRateCheck:
    """Fit the slope over m (least squares) of the log-odds (all m) and of log(1 - P(theta')) (m >=
    ``fit_from``, where the theta' term dominates) and compare with alpha * log r."""
    model = model or LatentConceptModel(num_concepts=4, kappa=1.0)
    curve = collapse_curve(model, majority_sizes, alphas, prior_true, prior_misconception, num_minority)
    loglik = model.response_log_likelihood()
    log_r = float(loglik[MISCONCEPTION, TRUE_CONCEPT] - loglik[MISCONCEPTION, MISCONCEPTION])
    rows = []
    for alpha, group in curve.groupby("alpha", sort=False):
        tail = group[group["m"] >= fit_from]
        log_odds_slope = np.polyfit(group["m"], group["log_odds"], 1)[0]
        collapse_slope = np.polyfit(tail["m"], tail["log_mass_off_misconception"], 1)[0]
        predicted = alpha * log_r
        rows.append(
            {
                "alpha": alpha,
                "predicted_slope": predicted,
                "vanilla_slope": log_r,
                "log_odds_slope": log_odds_slope,
                "collapse_slope": collapse_slope,
                "collapse_slope_error": collapse_slope - predicted,
            }
        )
    return CollapseRateCheck(pd.DataFrame(rows), curve, log_r)


# ---------------------------------------------------------------------------------------------
# Check: Lemma C.2 (log-odds decomposition)
# ---------------------------------------------------------------------------------------------


def additivity_grid(
    model: LatentConceptModel,
    memory_lifts: Sequence[float],
    alphas: Sequence[float],
    num_agents: int = 3,
    m: int = 2,
    prior_true: float = 0.3,
    prior_misconception: float = 0.5,
) -> pd.DataFrame:
    """Lemma C.2 on a grid of (delta_mem, alpha): one agent reads m misconceived responses weighted
    alpha and num_agents - m correct ones (weight 1), with memory lift delta_mem. Columns: delta_mem,
    alpha, total_lift (= L - L_van measured from posteriors), memory_lift, confidence_lift,
    predicted_confidence_lift ((1 - alpha) m kappa), residual."""
    K = model.num_concepts
    log_prior = shared_misconception_prior(K, prior_true, prior_misconception if K > 2 else 1 - prior_true)
    answers = np.array([MISCONCEPTION] * m + [TRUE_CONCEPT] * (num_agents - m))
    d, a = np.meshgrid(np.asarray(memory_lifts, float), np.asarray(alphas, float), indexing="ij")
    weights = np.where(np.arange(num_agents) < m, a[..., None], 1.0)
    decomposition = log_odds_decomposition(
        model, log_prior, np.broadcast_to(answers, weights.shape), weights, memory_lift_log_likelihood(K, d)
    )
    return pd.DataFrame(
        {
            "delta_mem": d.ravel(),
            "alpha": a.ravel(),
            "vanilla_log_odds": decomposition.vanilla.ravel(),
            "total_lift": (decomposition.total - decomposition.vanilla).ravel(),
            "memory_lift": decomposition.memory_lift.ravel(),
            "confidence_lift": decomposition.confidence_lift.ravel(),
            "predicted_confidence_lift": ((1 - a) * m * model.kappa).ravel(),
            "residual": decomposition.residual.ravel(),
        }
    )


@dataclass
class DecompositionCheck:
    """Lemma C.2 measured on random cases: the largest |L - (L_van + Lambda_mem + Lambda_cw)| and the
    grid of :func:`additivity_grid`."""

    max_residual: float
    num_cases: int
    grid: pd.DataFrame


def check_log_odds_decomposition(
    num_cases: int = 500, num_concepts: int = 4, num_agents: int = 5, seed: int = 0
) -> DecompositionCheck:
    """Random priors, peer answers (some unanswered), weights in (0, 2) and memory likelihoods:
    measure the decomposition residual; plus the structured (delta_mem, alpha) grid."""
    rng = np.random.default_rng(seed)
    model = LatentConceptModel(num_concepts=num_concepts, kappa=float(rng.uniform(0.5, 3.0)))
    log_prior = np.log(rng.dirichlet(np.ones(num_concepts), size=num_cases))
    answers = rng.integers(NO_ANSWER, num_concepts, size=(num_cases, num_agents))
    weights = rng.uniform(0.05, 2.0, size=(num_cases, num_agents))
    log_memory = rng.normal(0.0, 1.5, size=(num_cases, num_concepts))
    decomposition = log_odds_decomposition(model, log_prior, answers, weights, log_memory)
    grid = additivity_grid(
        LatentConceptModel(num_concepts=2, kappa=1.0),
        memory_lifts=np.linspace(0.0, 2.0, 5),
        alphas=np.linspace(0.2, 1.0, 5),
    )
    return DecompositionCheck(float(np.max(np.abs(decomposition.residual))), num_cases, grid)


# ---------------------------------------------------------------------------------------------
# Check: Theorem C.3 (joint bound)
# ---------------------------------------------------------------------------------------------


def sigmoid_slope(x: np.ndarray) -> np.ndarray:
    """sigma'(x) = sigma(x)(1 - sigma(x))."""
    s = expit(x)
    return s * (1.0 - s)


def joint_bound_cell(
    num_agents: int,
    m: int,
    alpha: float,
    memory_lift: float,
    kappa: float,
    num_concepts: int = 2,
    prior_true: float = 0.3,
    prior_misconception: float = 0.5,
    prior_spread: float = 0.3,
    memory_noise: float = 0.0,
    num_trials: int = 2000,
    seed: int = 0,
) -> dict:
    """Theorem C.3 for one setting. Round T-1 holds m misconceived responses z' and n - m correct ones;
    every agent reads all n (weights alpha on the m misconceived, 1 on the rest) and retrieved
    memory with Lambda_mem = ``memory_lift`` (+ N(0, memory_noise^2) per agent and trial when
    ``memory_noise`` > 0, so that delta_mem = E[Lambda_mem] = memory_lift). Agents' priors differ:
    log-odds offsets evenly spaced in ±``prior_spread``.

    Returns exact and Monte Carlo accuracies (vanilla and joint), rho (the infimum of
    (P* - P') sigma'(L) over every agent's log-odds range [L_van, L_van + Delta L]), the remainder
    R = 1/2 sup|sigma''| (P* - P') (delta_mem + (1 - alpha) m kappa)^2 (the paper absorbs P* - P'
    into its constants; keeping it is the derivation's exact form), the bound and its slack.
    """
    if not 0 <= m <= num_agents:
        raise ValueError(f"m: expected 0 <= m <= num_agents={num_agents}, found {m}")
    model = LatentConceptModel(num_concepts=num_concepts, kappa=kappa)
    K = num_concepts
    base = shared_misconception_prior(K, prior_true, prior_misconception if K > 2 else 1 - prior_true)
    offsets = np.linspace(-prior_spread, prior_spread, num_agents) if num_agents > 1 else np.zeros(1)
    log_prior = np.tile(base, (num_agents, 1))
    log_prior[:, TRUE_CONCEPT] += offsets / 2
    log_prior[:, MISCONCEPTION] -= offsets / 2
    log_prior -= logsumexp(log_prior, axis=-1, keepdims=True)

    answers = np.array([MISCONCEPTION] * m + [TRUE_CONCEPT] * (num_agents - m))
    weights = np.where(np.arange(num_agents) < m, alpha, 1.0)
    answers_all = np.broadcast_to(answers, (num_agents, num_agents))
    weights_all = np.broadcast_to(weights, (num_agents, num_agents))

    # exact (memory at its mean)
    post_van = debate_log_posterior(model, log_prior, answers_all, None, None)
    post_joint = debate_log_posterior(
        model, log_prior, answers_all, weights_all, memory_lift_log_likelihood(K, np.full(num_agents, memory_lift))
    )
    acc_van_exact = answer_distribution(model, post_van)[:, TRUE_CONCEPT]
    acc_joint_exact = answer_distribution(model, post_joint)[:, TRUE_CONCEPT]

    # Monte Carlo: memory drawn per trial and agent, answers sampled from the answer distribution
    rng = np.random.default_rng(seed)
    lifts = memory_lift + memory_noise * rng.standard_normal((num_trials, num_agents))
    post_mc = debate_log_posterior(
        model, log_prior, answers_all, weights_all, memory_lift_log_likelihood(K, lifts)
    )
    p_joint_mc = answer_distribution(model, post_mc)[..., TRUE_CONCEPT]
    correct_joint = rng.random((num_trials, num_agents)) < p_joint_mc
    correct_van = rng.random((num_trials, num_agents)) < acc_van_exact
    acc_van_mc = float(correct_van.mean())
    acc_joint_mc = float(correct_joint.mean())
    # E over memory draws of the exact accuracy (equals the exact value when memory_noise == 0)
    acc_joint_expected = float(p_joint_mc.mean()) if memory_noise > 0 else float(acc_joint_exact.mean())

    p_star, p_prime = model.correct_answer_probabilities
    confidence_lift = (1.0 - alpha) * m * kappa
    total_lift = memory_lift + confidence_lift
    l_van = log_odds(post_van)
    # the log-odds of agent i move from L_van to L_van + Delta L (Delta L per trial when memory is
    # noisy); sigma' is unimodal, so its infimum over that range sits at an endpoint
    delta_draws = lifts + confidence_lift
    low = l_van + min(0.0, float(delta_draws.min()))
    high = l_van + max(0.0, float(delta_draws.max()))
    rho = float((p_star - p_prime) * np.min(np.minimum(sigmoid_slope(low), sigmoid_slope(high))))
    remainder = 0.5 * SIGMOID_SECOND_DERIVATIVE_SUP * (p_star - p_prime) * total_lift**2
    bound = float(acc_van_exact.mean()) + rho * memory_lift + rho * confidence_lift - remainder
    standard_error = float(np.sqrt(max(acc_joint_mc * (1 - acc_joint_mc), 1e-12) / (num_trials * num_agents)))
    return {
        "num_agents": num_agents,
        "m": m,
        "alpha": alpha,
        "delta_mem": memory_lift,
        "kappa": kappa,
        "num_concepts": num_concepts,
        "memory_noise": memory_noise,
        "vanilla_log_odds_mean": float(l_van.mean()),
        "accuracy_vanilla_exact": float(acc_van_exact.mean()),
        "accuracy_joint_exact": acc_joint_expected,
        "accuracy_vanilla_mc": acc_van_mc,
        "accuracy_joint_mc": acc_joint_mc,
        "mc_standard_error": standard_error,
        "rho": rho,
        "memory_lift_term": rho * memory_lift,
        "confidence_lift_term": rho * confidence_lift,
        "remainder": remainder,
        "bound": bound,
        "bound_without_remainder": bound + remainder,
        "actual_lift": acc_joint_expected - float(acc_van_exact.mean()),
        "guaranteed_lift": bound - float(acc_van_exact.mean()),
        "slack": acc_joint_mc - bound,
        "slack_exact": acc_joint_expected - bound,
        "holds": bool(acc_joint_mc >= bound - 4 * standard_error),
        "holds_exact": bool(acc_joint_expected >= bound - 1e-12),
        "holds_without_remainder": bool(acc_joint_expected >= bound + remainder - 1e-12),
    }


def check_joint_bound(
    num_agents: int = 3,
    majority_sizes: Sequence[int] | None = None,
    alphas: Sequence[float] = (1.0, 0.7, 0.4, 0.1),
    memory_lifts: Sequence[float] = (0.0, 0.5, 1.0, 2.0),
    kappas: Sequence[float] = (0.5, 1.0, 2.0),
    num_concepts: Sequence[int] = (2,),
    memory_noise: float = 0.0,
    num_trials: int = 2000,
    tight_slack: float = 0.02,
    seed: int = 0,
) -> pd.DataFrame:
    """Theorem C.3 over a grid of (m >= n/2, alpha, delta_mem, kappa[, K]): one row per cell from
    :func:`joint_bound_cell`, plus ``tightness``: "no lift" (delta_mem = 0 and alpha = 1: the bound
    is the vanilla accuracy itself), "vacuous" (the guaranteed lift bound - P_van is <= 0: the
    remainder outweighs the first-order lifts), "tight" (slack_exact <= ``tight_slack``), else
    "loose"."""
    if majority_sizes is None:
        majority_sizes = range(int(np.ceil(num_agents / 2)), num_agents + 1)
    rows = []
    cell = 0
    for K in num_concepts:
        for m in majority_sizes:
            for alpha in alphas:
                for delta in memory_lifts:
                    for kappa in kappas:
                        rows.append(
                            joint_bound_cell(
                                num_agents, m, float(alpha), float(delta), float(kappa), num_concepts=K,
                                memory_noise=memory_noise, num_trials=num_trials, seed=seed + cell,
                            )
                        )
                        cell += 1
    df = pd.DataFrame(rows)
    no_lift = (df["delta_mem"] == 0) & ((df["alpha"] == 1) | (df["m"] == 0))
    df["tightness"] = np.select(
        [no_lift, df["guaranteed_lift"] <= 0, df["slack_exact"] <= tight_slack],
        ["no lift", "vacuous", "tight"],
        default="loose",
    )
    return df


# ---------------------------------------------------------------------------------------------
# Multi-round Monte Carlo debate
# ---------------------------------------------------------------------------------------------


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


def sample_answers(rng: np.random.Generator, probabilities: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probabilities`` (..., K) (inverse-CDF, vectorized)."""
    cdf = np.cumsum(probabilities, axis=-1)
    u = rng.random(probabilities.shape[:-1] + (1,)) * cdf[..., -1:]
    return np.minimum((u > cdf).sum(axis=-1), probabilities.shape[-1] - 1)


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
    the Eq. joint_gen posterior given all n answers of the previous round (the agent's own included),
    weighted by ``confidence``. ``log_prior`` (n, K); ``log_memory`` (n, K) or None."""
    log_prior = np.asarray(log_prior, dtype=float)
    n = log_prior.shape[0]
    confidence = confidence or ConfidenceModel.none()
    rng = np.random.default_rng(seed)
    answers = np.empty((num_trials, rounds + 1, n), dtype=int)
    post0 = debate_log_posterior(model, log_prior, log_memory=log_memory)
    answers[:, 0] = sample_answers(rng, np.broadcast_to(answer_distribution(model, post0), (num_trials, n, model.num_concepts)))
    for t in range(1, rounds + 1):
        previous = answers[:, t - 1]  # (trials, n)
        peers = np.broadcast_to(previous[:, None, :], (num_trials, n, n))
        weights = confidence.sample_weights(peers == TRUE_CONCEPT, rng)
        post = debate_log_posterior(model, log_prior, peers, weights, log_memory)
        answers[:, t] = sample_answers(rng, answer_distribution(model, post))
    return DebateSimulation(answers)


def confidence_flip_comparison(
    num_agents: int = 3,
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
    log_prior = shared_misconception_prior(num_concepts, prior_true, prior_misconception, num_agents)
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
