"""Latent-concept simulations of the paper's theory (Section 3-4, Appendix "Proofs").

The model (the skew decomposition, eq:estornell of Section 3, and the decomposition with memory, eq:joint_gen of
Section 4.1). A finite concept space Theta = {0, ..., K-1} holds the true concept theta* (index ``TRUE_CONCEPT = 0``)
and a misconception theta' (index ``MISCONCEPTION = 1``); the other concepts are distractors. Answer ``a`` is the answer
concept ``a`` produces, so answers and concepts share indices. Agent i holds a concept prior P(theta | phi_i); a
response z is drawn from the response likelihood

    P(z = a | theta = k) = exp(kappa * [a == k]) / (exp(kappa) + K - 1),

so a response aligned with theta' has the log-likelihood margin
kappa = log P(z' | theta') / P(z' | theta*) of Theorem C.3. Agent i's debate posterior is

    P_{w,E}(theta | Z, x, E_i, phi_i)  ∝  P(x | theta) P(theta | E_i, phi_i) prod_j P(z_j | theta)^{w_{j,i}}

(the bracket of eq:joint_gen without the generation term), where the memory-corrected prior is
Proposition 4.1: P(theta | E, phi) = P(theta | phi) P(E | theta, phi) / P(E | phi). Its next response
is drawn from  P(z_i^{t+1} = a) = sum_theta P(a | theta) P_{w,E}(theta | ...)  (eq:joint_gen).

What this module computes, exactly: the posterior (:func:`debate_log_posterior`), the log-odds L_i of
Definition C.1 (``def:log_odds``; :func:`log_odds`), its decomposition into vanilla + memory lift +
confidence lift (Lemma C.2, ``lemma:log_odds_decomp``; :func:`log_odds_decomposition`), the answer
distribution (:func:`answer_distribution`) and one draw from it (:func:`sample_answers`).

Built on it: :mod:`r2mad_core.theory.checks` measures Proposition 4.1, Proposition 4.2, Lemma C.2 and
Theorem C.3 in this model; :mod:`r2mad_core.theory.simulation` runs multi-round Monte Carlo debates with
confidence-weighted readers. The simulated engine (``r2mad_core.theory.agents``) draws its agents'
answers from the same functions (:func:`memory_log_likelihood`, :func:`debate_log_posterior`,
:func:`answer_distribution`, :func:`sample_answers`).

Everything is vectorized with numpy: arrays may carry any leading batch dimensions
(trials, agents, ...) before the concept axis, which is always last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


# ---------------------------------------------------------------------------------------------
# Model ingredients
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatentConceptModel:
    """The parts of eq:joint_gen shared by every agent.

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
    num_concepts: int, prior_true: float, prior_misconception: float, n_agents: int | None = None
) -> np.ndarray:
    """A concept prior P(theta | phi) with mass ``prior_true`` on theta*, ``prior_misconception`` on
    theta' and the rest spread evenly over the distractors. Returns log-probabilities, shape (K,) or
    (n_agents, K)."""
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
    if n_agents is not None:
        log_prior = np.broadcast_to(log_prior, (n_agents, num_concepts)).copy()
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
    """sum_j w_{j,i} log P(z_j | theta) for every concept (the weighted skew of eq:joint_gen).

    ``peer_answers``: int array (..., n) of answer indices, ``NO_ANSWER`` (-1) for responses without
    an answer (they contribute nothing). ``peer_weights``: (..., n) or ``None`` (all 1).
    ``log_likelihood``: (K answers, K concepts). Returns (..., K).
    """
    peer_answers = np.asarray(peer_answers)
    if peer_answers.size and (peer_answers.max(initial=-1) >= log_likelihood.shape[0]
                              or peer_answers.min(initial=0) < NO_ANSWER):
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
    """log P_{w,E}(theta | Z, x, E_i, phi_i) of eq:joint_gen (normalized over concepts).

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
    """P(z_i^{t+1} = a) = sum_theta P(a | theta) P(theta | ...) (eq:joint_gen), shape (..., K)."""
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
    ratios = np.where(peer_answers == NO_ANSWER, 0.0,
                      per_peer_ratio[np.where(peer_answers == NO_ANSWER, 0, peer_answers)])
    weights = np.broadcast_to(np.asarray(peer_weights, dtype=float), peer_answers.shape)
    confidence_lift = np.sum((weights - 1.0) * ratios, axis=-1)
    return LogOddsDecomposition(total, vanilla, np.broadcast_to(memory_lift, total.shape), confidence_lift)


# ---------------------------------------------------------------------------------------------
# Drawing an answer from the answer distribution
# ---------------------------------------------------------------------------------------------


def sample_answers(rng: np.random.Generator, probabilities: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probabilities`` (..., K) (inverse-CDF, vectorized)."""
    cdf = np.cumsum(probabilities, axis=-1)
    u = rng.random(probabilities.shape[:-1] + (1,)) * cdf[..., -1:]
    return np.minimum((u > cdf).sum(axis=-1), probabilities.shape[-1] - 1)
