"""Confidence c_{j,i} (Eq. 7) on a hand-made bank, its options and the annotation thresholds."""

import numpy as np
import pytest

from r2mad_core.memory.banks import MemoryBank
from r2mad_core.memory.cases import AgentDebateState, MemoryCase
from r2mad_core.memory.confidence import (
    ConfidenceConfig,
    annotate,
    annotate_matrix,
    confidence_from_retrieval,
    peer_confidence,
)

# Three agents, 2-d embeddings. Retrieving agent i = 0; current responses z_0 = z_1 = (1, 0), z_2 = (0, 1).
CURRENT = np.array([[[1, 0], [1, 0], [0, 1]]], dtype=np.float32)  # [Q=1, n=3, d=2]
# Agent j's stored response in each of three cases, and its correctness zeta_j:
#   case 0: z_1 = (1, 0)   sim 1    zeta_1 = 1 | z_2 = (0, 1)   sim 1   zeta_2 = 0
#   case 1: z_1 = (.6, .8) sim .6   zeta_1 = 0 | z_2 = (.6, .8) sim .8  zeta_2 = 1
#   case 2: z_1 = (-1, 0)  sim -1->0 zeta_1 = 0 | z_2 = (1, 0)  sim 0   zeta_2 = 1
HISTORY = np.array(
    [
        [[1, 0], [1, 0], [0, 1]],
        [[0, 1], [0.6, 0.8], [0.6, 0.8]],
        [[1, 0], [-1, 0], [1, 0]],
    ],
    dtype=np.float32,
)
CORRECT = np.array([[1, 1, 0], [0, 0, 1], [1, 0, 1]], dtype=np.float32)  # zeta_j per case (column j)
REWARDS = np.array([0, 1, 1], dtype=np.float32)


def test_paper_confidence_hand_computed():
    # c_1 = (1*1 + .6*0 + 0*0) / (1 + .6 + 0) = 1/1.6 = .625      -> high
    # c_2 = (1*0 + .8*1 + 0*1) / (1 + .8 + 0) = .8/1.8 = .4444    -> low
    c = peer_confidence(CURRENT, np.array([[0, 1, 2]]), HISTORY, CORRECT, retrieving_agents=np.array([0]))
    assert np.isnan(c[0, 0])  # no self-annotation
    np.testing.assert_allclose(c[0, 1:], [0.625, 0.8 / 1.8], atol=1e-6)
    assert annotate_matrix(c) == [[None, "high", "low"]]


def test_evidence_subset_and_padding():
    # Only case 1 retrieved (+ padding): c_1 = .6*0/.6 = 0, c_2 = .8*1/.8 = 1
    c = peer_confidence(CURRENT, np.array([[1, -1, -1]]), HISTORY, CORRECT)
    np.testing.assert_allclose(c[0, 1:], [0.0, 1.0], atol=1e-6)


def test_no_evidence_gives_nan():
    c = peer_confidence(CURRENT, np.array([[-1, -1, -1]]), HISTORY, CORRECT)
    assert np.isnan(c).all()
    # case 2 only: sim(z_1) = -1 clipped to 0 and sim(z_2) = 0 -> zero denominators -> no evidence
    c = peer_confidence(CURRENT, np.array([[2]]), HISTORY, CORRECT)
    assert np.isnan(c[0, 1]) and np.isnan(c[0, 2])
    assert c[0, 0] == 1.0  # agent 0 itself has evidence (sim 1, correct) unless masked as the retriever
    c = peer_confidence(CURRENT, np.array([[2]]), HISTORY, CORRECT, retrieving_agents=np.array([0]))
    assert annotate_matrix(c) == [[None, None, None]]


def _case(k: int) -> MemoryCase:
    return MemoryCase(
        case_id=f"s{k}#t1#a0", sample_id=f"s{k}", agent_index=0, round_index=1,
        state=AgentDebateState("q", "prev", "", 1 / 3),
        responses=("a", "b", "c"), answers=("A", "B", "C"),
        correct=tuple(bool(x) for x in CORRECT[k]), gold="A", reward=int(REWARDS[k]),
        previous_responses=("a0", "b0", "c0"), previous_answers=("A", "B", "C"),
        previous_correct=(True, True, True),
    )


def _bank() -> MemoryBank:
    states = np.eye(3, 2, dtype=np.float32)
    states[2] = [0.6, 0.8]
    return MemoryBank(0, [_case(k) for k in range(3)], states, HISTORY, HISTORY[::-1].copy())


def test_options_on_a_bank():
    bank = _bank()
    retrieved = np.array([[0, 1, 2]])
    paper = confidence_from_retrieval(bank, retrieved, None, CURRENT)
    np.testing.assert_allclose(paper[0, 1:], [0.625, 0.8 / 1.8], atol=1e-6)
    # authors' label: the retrieving agent 0's correctness zeta_0 = (1, 0, 1) for every peer
    #   c_1 = (1*1 + .6*0 + 0*1)/1.6 = .625 ; c_2 = (1*1 + .8*0 + 0*1)/1.8 = .5556
    authors = confidence_from_retrieval(
        bank, retrieved, None, CURRENT, ConfidenceConfig(evidence_label="retrieving_agent_correctness")
    )
    np.testing.assert_allclose(authors[0, 1:], [0.625, 1 / 1.8], atol=1e-6)
    # outcome reward r = (0, 1, 1): c_1 = .6/1.6 = .375 ; c_2 = .8/1.8
    reward = confidence_from_retrieval(bank, retrieved, None, CURRENT,
                                       ConfidenceConfig(evidence_label="outcome_reward"))
    np.testing.assert_allclose(reward[0, 1:], [0.375, 0.8 / 1.8], atol=1e-6)
    # pooling over the candidates instead of the retrieved cases
    pooled = confidence_from_retrieval(
        bank, np.array([[1, -1, -1]]), np.array([[0, 1, 2]]), CURRENT, ConfidenceConfig(evidence_pool="candidates")
    )
    np.testing.assert_allclose(pooled, paper, atol=1e-6)
    with pytest.raises(ValueError, match="candidate"):
        confidence_from_retrieval(bank, retrieved, None, CURRENT, ConfidenceConfig(evidence_pool="candidates"))
    # "state" round: the stored previous responses are HISTORY reversed (case 0 <-> case 2), all correct
    #   c_j = 1 wherever there is evidence
    state = confidence_from_retrieval(bank, retrieved, None, CURRENT, ConfidenceConfig(peer_response_round="state"))
    np.testing.assert_allclose(state[0, 1:], [1.0, 1.0], atol=1e-6)


def test_annotation_thresholds():
    assert annotate(0.55) is None and annotate(0.45) is None  # boundaries: no annotation
    assert annotate(0.5500001) == "high"
    assert annotate(0.4499999) == "low"
    assert annotate(0.5) is None
    assert annotate(float("nan")) is None and annotate(None) is None
    assert annotate(1.0) == "high" and annotate(0.0) == "low"
    assert annotate(0.6, w_high=0.6, w_low=0.6) is None
    assert annotate(0.61, w_high=0.6, w_low=0.6) == "high"
    assert annotate_matrix(np.array([[0.45, 0.55, np.nan, 0.7, 0.2]])) == [[None, None, None, "high", "low"]]
    with pytest.raises(ValueError, match="w_low"):
        annotate(0.5, w_high=0.4, w_low=0.6)
    with pytest.raises(ValueError, match="w_low"):
        ConfidenceConfig(w_high=0.4, w_low=0.6)


def test_bad_shapes():
    with pytest.raises(ValueError, match="agents, dim"):
        peer_confidence(CURRENT[:, :2], np.array([[0]]), HISTORY, CORRECT)
    with pytest.raises(IndexError, match="outside the bank"):
        peer_confidence(CURRENT, np.array([[5]]), HISTORY, CORRECT)
    with pytest.raises(ValueError, match="evidence_label"):
        ConfidenceConfig(evidence_label="reward")
