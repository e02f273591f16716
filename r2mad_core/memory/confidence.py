"""Memory-derived confidence c_{j,i}^(t) (Section 4.3, Eq. 7) and its prompt-level annotation.

For agent i with retrieved experiences E_i^(t) = {e_1, ..., e_K} and each peer j:

    c_{j,i} = sum_k sim(z_j, z_j(e_k)) * zeta_j(e_k) / sum_k sim(z_j, z_j(e_k))

where z_j is agent j's current response (the one agent i is about to read, i.e. z_j^(t-1) when agent i
writes round t), z_j(e_k) is agent j's response stored in e_k (its part of Z^(t') of Eq. 4) and
zeta_j(e_k) in {0, 1} its correctness. Similarities are cosines of unit embeddings, **clipped at 0** (a
negative similarity is no evidence, and keeps c in [0, 1]). When the denominator is 0 (no retrieved case,
or every similarity <= 0) there is no evidence and c is NaN: no annotation.

The weight w_{j,i} is realised in the prompt (Appendix A): agent j's response is annotated "high" when
c > w_h (0.55), "low" when c < w_l (0.45), and not annotated otherwise (the boundaries themselves give no
annotation).

Options (the paper's reading is the default; the others reproduce the authors' code, ``src/agent.py``):

- ``evidence_label``: what is averaged. ``"peer_correctness"`` (paper: zeta_j(e_k), peer j's own
  correctness in the case); ``"retrieving_agent_correctness"`` (authors' code: the retrieving agent i's
  correctness zeta_i(e_k) in the case, the same for every peer); ``"outcome_reward"`` (r_i(e_k)).
- ``evidence_pool``: ``"retrieved"`` (paper: the K cases of E_i^(t)) or ``"candidates"`` (authors' code:
  all 3K candidates of the first retrieval stage).
- ``peer_response_round``: which of agent j's historical responses is compared. ``"case"`` (paper: the
  response in Z^(t') stored in the case) or ``"state"`` (authors' code: the response of round t'-1 that
  was part of the case's debate state, i.e. the same position in the debate as the current z_j).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import MemorySettings

if TYPE_CHECKING:  # pragma: no cover
    from r2mad_core.memory.banks import MemoryBank

W_HIGH = MEMORY_DEFAULTS["w_high"]
W_LOW = MEMORY_DEFAULTS["w_low"]
EVIDENCE_LABELS = ("peer_correctness", "retrieving_agent_correctness", "outcome_reward")
EVIDENCE_POOLS = ("retrieved", "candidates")
PEER_RESPONSE_ROUNDS = ("case", "state")

Annotation = Literal["high", "low"]


@dataclass(frozen=True)
class ConfidenceConfig:
    w_high: float = W_HIGH
    w_low: float = W_LOW
    evidence_label: str = "peer_correctness"
    evidence_pool: str = "retrieved"
    peer_response_round: str = "case"

    def __post_init__(self) -> None:
        check_thresholds(self.w_high, self.w_low)
        if self.evidence_label not in EVIDENCE_LABELS:
            raise ValueError(f"unknown evidence_label {self.evidence_label!r}: expected one of {EVIDENCE_LABELS}")
        if self.evidence_pool not in EVIDENCE_POOLS:
            raise ValueError(f"unknown evidence_pool {self.evidence_pool!r}: expected one of {EVIDENCE_POOLS}")
        if self.peer_response_round not in PEER_RESPONSE_ROUNDS:
            raise ValueError(
                f"unknown peer_response_round {self.peer_response_round!r}: expected one of {PEER_RESPONSE_ROUNDS}"
            )

    @classmethod
    def from_settings(cls, settings: MemorySettings, **confidence: Any) -> "ConfidenceConfig":
        """The confidence configuration of ``settings`` (the thresholds w_h/w_l, and every other field named as a
        memory setting) with the protocol's evidence choices in ``confidence`` (``evidence_label``, ...)."""
        names = [f.name for f in fields(cls) if f.name in MEMORY_DEFAULTS]
        return cls(**{**settings.typed(names), **confidence})


def check_thresholds(w_high: float, w_low: float) -> None:
    if not (np.isfinite(w_high) and np.isfinite(w_low)):
        raise ValueError(f"confidence thresholds must be finite, found w_high={w_high}, w_low={w_low}")
    if w_low > w_high:
        raise ValueError(f"confidence thresholds need w_low <= w_high, found w_low={w_low} > w_high={w_high}")


def peer_confidence(
    current_responses: np.ndarray,
    evidence_indices: np.ndarray,
    historical_responses: np.ndarray,
    evidence_labels: np.ndarray,
    retrieving_agents: np.ndarray | None = None,
) -> np.ndarray:
    """c_{j,i} (Eq. 7) for Q queries (one per (sample, retrieving agent i)) and every agent j.

    current_responses [Q, n, d]: unit embeddings of every agent's current response z_j.
    evidence_indices [Q, M]: bank rows of the evidence cases (-1 = none).
    historical_responses [N, n, d]: unit embeddings of agent j's response in each bank case.
    evidence_labels [N, n]: the label averaged for agent j in each case (zeta_j(e), or a per-case value
    broadcast over j for the authors' variants).
    retrieving_agents [Q] (optional): agent i of each query; c_{i,i} is set to NaN (no self-annotation).
    Returns [Q, n] float64, NaN where there is no evidence.
    """
    current = np.asarray(current_responses, dtype=np.float32)
    history = np.asarray(historical_responses, dtype=np.float32)
    labels = np.asarray(evidence_labels, dtype=np.float32)
    idx = np.asarray(evidence_indices, dtype=np.int64)
    if current.ndim != 3 or history.ndim != 3:
        raise ValueError(
            f"expected current_responses [Q, n, d] and historical_responses [N, n, d], "
            f"found {current.shape} and {history.shape}"
        )
    if current.shape[1:] != history.shape[1:]:
        raise ValueError(
            f"current responses {current.shape[1:]} and stored responses {history.shape[1:]} differ in "
            "(agents, dim): same number of agents and the same embedder are required"
        )
    if labels.shape != history.shape[:2]:
        raise ValueError(f"evidence_labels has shape {labels.shape}, expected {history.shape[:2]}")
    if idx.ndim != 2 or idx.shape[0] != current.shape[0]:
        raise ValueError(f"evidence_indices must be [Q={current.shape[0]}, M], found {idx.shape}")
    if np.any(idx >= history.shape[0]):
        raise IndexError(f"evidence index {int(idx.max())} outside the bank ({history.shape[0]} cases)")
    valid = idx >= 0
    safe = np.where(valid, idx, 0)
    if history.shape[0] == 0:
        similarity = np.zeros(idx.shape + (current.shape[1],), dtype=np.float32)
        gathered_labels = similarity
    else:
        similarity = np.einsum("qjd,qmjd->qmj", current, history[safe])  # [Q, M, n]
        gathered_labels = labels[safe]  # [Q, M, n]
    weights = np.where(valid[..., None], np.clip(similarity, 0.0, None), 0.0).astype(np.float64)
    numerator = (weights * gathered_labels).sum(axis=1)
    denominator = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        confidence = np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), np.nan)
    if retrieving_agents is not None:
        agents = np.asarray(retrieving_agents, dtype=np.int64).reshape(-1)
        if agents.shape[0] != confidence.shape[0]:
            raise ValueError(f"retrieving_agents has {agents.shape[0]} entries, expected {confidence.shape[0]}")
        confidence[np.arange(agents.shape[0]), agents] = np.nan
    return confidence


def annotate(confidence: float | None, w_high: float = W_HIGH, w_low: float = W_LOW) -> Annotation | None:
    """"high" if c > w_h, "low" if c < w_l, else None (also for missing/NaN c); boundaries give None."""
    check_thresholds(w_high, w_low)
    if confidence is None or not np.isfinite(confidence):
        return None
    if confidence > w_high:
        return "high"
    if confidence < w_low:
        return "low"
    return None


def annotate_matrix(confidence: np.ndarray, w_high: float = W_HIGH,
                    w_low: float = W_LOW) -> list[list[Annotation | None]]:
    """:func:`annotate` over a [Q, n] confidence matrix (NaN -> None)."""
    check_thresholds(w_high, w_low)
    c = np.asarray(confidence, dtype=np.float64)
    high = c > w_high  # NaN compares False
    low = c < w_low
    return [
        ["high" if h else "low" if lo else None for h, lo in zip(hrow, lrow, strict=False)]
        for hrow, lrow in zip(high.tolist(), low.tolist(), strict=False)
    ]


def confidence_from_retrieval(
    bank: "MemoryBank",
    retrieved_indices: np.ndarray,
    candidate_indices: np.ndarray | None,
    current_responses: np.ndarray,
    config: ConfidenceConfig = ConfidenceConfig(),
) -> np.ndarray:
    """c_{j,i} [Q, n] for agent i = ``bank.agent_index`` from its retrieval of one round (Eq. 7 + options).

    ``retrieved_indices`` [Q, K] are the cases of E_i^(t); ``candidate_indices`` [Q, 3K] the first-stage
    candidates (used when ``config.evidence_pool == "candidates"``); ``current_responses`` [Q, n, d] the unit
    embeddings of every agent's current response. c_{i,i} is NaN.
    """
    if config.evidence_pool == "candidates":
        if candidate_indices is None:
            raise ValueError("evidence_pool='candidates' needs the candidate indices of the retrieval")
        evidence = candidate_indices
    else:
        evidence = retrieved_indices
    history, labels = bank.evidence(config.evidence_label, config.peer_response_round)
    q = np.asarray(current_responses).shape[0]
    return peer_confidence(current_responses, evidence, history, labels, np.full(q, bank.agent_index))
