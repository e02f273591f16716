"""Retrieval (Eq. 5-6) on hand-computed examples, and the policies of the retrieval ablation."""

import numpy as np
import pytest

from r2mad_core.memory import retrieval
from r2mad_core.memory.retrieval import (
    POLICIES,
    RetrievalConfig,
    mmr_tradeoff,
    query_seed,
    retrieve,
    top_candidates,
)

# Six cases in 3-d (unit vectors), the query s = (1, 0, 0):
#   e0 = (1, 0, 0)      sim(e0, s) = 1.0   r = 0
#   e1 = (.8, .6, 0)    sim(e1, s) = 0.8   r = 1
#   e2 = (.6, .8, 0)    sim(e2, s) = 0.6   r = 1
#   e3 = (.6, 0, .8)    sim(e3, s) = 0.6   r = 1
#   e4 = (0, 1, 0)      sim(e4, s) = 0.0   r = 1
#   e5 = (0, 0, 1)      sim(e5, s) = 0.0   r = 0
# Case-case similarities used below:
#   sim(., e1): e0 .8, e2 .96, e3 .48, e4 .6, e5 0
#   sim(., e3): e0 .6, e2 .36, e4 0,  e5 .8
#   sim(., e5): e0 0,  e2 0,   e3 .8, e4 0
CASES = np.array(
    [[1, 0, 0], [0.8, 0.6, 0], [0.6, 0.8, 0], [0.6, 0, 0.8], [0, 1, 0], [0, 0, 1]], dtype=np.float32
)
REWARDS = np.array([0, 1, 1, 1, 1, 0], dtype=np.float32)
QUERY = np.array([[1, 0, 0]], dtype=np.float32)


def test_lambda_from_consensus():
    # Eq. 6: lambda_t = 1 - gamma * Cons, gamma = 0.9
    np.testing.assert_allclose(mmr_tradeoff([1 / 3, 2 / 3, 1.0], 0.9), [0.7, 0.4, 0.1], rtol=1e-6)
    np.testing.assert_allclose(mmr_tradeoff([0.5], 0.0), [1.0])
    with pytest.raises(ValueError, match="consensus"):
        mmr_tradeoff([1.2])
    with pytest.raises(ValueError, match="consensus"):
        mmr_tradeoff([np.nan])


def test_mmr_low_consensus_hand_computed():
    # Cons = 1/3 -> lambda = 0.7.
    # step 1: 0.7 * sim * r -> e1 .56, e2 .42, e3 .42, others 0          -> e1 (0.56)
    # step 2: 0.7*sim*r - 0.3*sim(e, e1):
    #   e0 0 - .24 = -.24; e2 .42 - .288 = .132; e3 .42 - .144 = .276; e4 -.18; e5 0   -> e3 (0.276)
    # step 3: redundancy = max(sim(e,e1), sim(e,e3)): e0 .8, e2 .96, e4 .6, e5 .8
    #   e0 -.24; e2 .42 - .288 = .132; e4 -.18; e5 -.24                                  -> e2 (0.132)
    result = retrieve(QUERY, CASES, REWARDS, [1 / 3], RetrievalConfig(k=3))
    assert result.indices.tolist() == [[1, 3, 2]]
    np.testing.assert_allclose(result.scores[0], [0.56, 0.276, 0.132], atol=1e-5)
    np.testing.assert_allclose(result.similarities[0], [0.8, 0.6, 0.6], atol=1e-6)
    np.testing.assert_allclose(result.lambdas, [0.7], atol=1e-6)


def test_mmr_high_consensus_hand_computed():
    # Cons = 1 -> lambda = 0.1.
    # step 1: 0.1 * sim * r -> e1 .08 (best)                                             -> e1 (0.08)
    # step 2: 0.1*sim*r - 0.9*sim(e, e1):
    #   e0 -.72; e2 .06 - .864 = -.804; e3 .06 - .432 = -.372; e4 -.54; e5 0 - 0 = 0      -> e5 (0.0)
    # step 3: redundancy = max(sim(e,e1), sim(e,e5)): e0 .8, e2 .96, e3 .8, e4 .6
    #   e0 -.72; e2 -.804; e3 .06 - .72 = -.66; e4 -.54                                  -> e4 (-0.54)
    result = retrieve(QUERY, CASES, REWARDS, [1.0], RetrievalConfig(k=3))
    assert result.indices.tolist() == [[1, 5, 4]]
    np.testing.assert_allclose(result.scores[0], [0.08, 0.0, -0.54], atol=1e-5)


def test_queries_are_independent_in_a_batch():
    both = retrieve(np.vstack([QUERY, QUERY]), CASES, REWARDS, [1 / 3, 1.0], RetrievalConfig(k=3))
    assert both.indices.tolist() == [[1, 3, 2], [1, 5, 4]]


def test_k1_lambda_has_no_effect():
    # With K = 1 the redundancy term is empty: the pick is argmax sim * r whatever lambda_t > 0.
    low = retrieve(QUERY, CASES, REWARDS, [1 / 3], RetrievalConfig(k=1))
    high = retrieve(QUERY, CASES, REWARDS, [1.0], RetrievalConfig(k=1))
    assert low.indices.tolist() == high.indices.tolist() == [[1]]
    assert low.lambdas[0] != high.lambdas[0]


def test_fixed_lambda_matches_state_aware_at_same_lambda():
    fixed = retrieve(QUERY, CASES, REWARDS, [0.0], RetrievalConfig(policy="fixed_lambda", fixed_lambda=0.1, k=3))
    assert fixed.indices.tolist() == [[1, 5, 4]]  # = state_aware at Cons = 1 (lambda 0.1)
    fixed = retrieve(QUERY, CASES, REWARDS, [1.0], RetrievalConfig(policy="fixed_lambda", fixed_lambda=0.7, k=3))
    assert fixed.indices.tolist() == [[1, 3, 2]]  # consensus is ignored
    np.testing.assert_allclose(fixed.lambdas, [0.7])


def test_candidates_are_top_3k_by_similarity():
    # K = 1 -> 3 candidates: e0, e1, and (tie .6) e2 (lower index first). e3 is never a candidate.
    result = retrieve(QUERY, CASES, REWARDS, [1 / 3], RetrievalConfig(k=1))
    assert result.candidate_indices.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(result.candidate_similarities[0], [1.0, 0.8, 0.6], atol=1e-6)
    # A positive case outside the top-3K is not retrievable even when it is the only positive one.
    rewards = np.array([0, 0, 0, 1, 0, 0], dtype=np.float32)
    result = retrieve(QUERY, CASES, rewards, [1 / 3], RetrievalConfig(k=1))
    assert 3 not in result.candidate_indices[0]
    assert result.indices.tolist() == [[0]]  # all candidates score 0: the most similar wins the tie


def test_similarity_policy_ignores_rewards():
    result = retrieve(QUERY, CASES, REWARDS, [1.0], RetrievalConfig(policy="similarity", k=3))
    assert result.indices.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(result.scores[0], [1.0, 0.8, 0.6], atol=1e-6)
    assert np.isnan(result.lambdas).all()


def test_positive_only_policy():
    result = retrieve(QUERY, CASES, REWARDS, [1.0], RetrievalConfig(policy="positive_only", k=3))
    assert result.indices.tolist() == [[1, 2, 3]]
    # fewer positive cases than K -> padded with -1
    rewards = np.array([0, 0, 0, 0, 1, 0], dtype=np.float32)
    result = retrieve(QUERY, CASES, rewards, [1.0], RetrievalConfig(policy="positive_only", k=2))
    assert result.indices.tolist() == [[4, -1]]
    assert np.isnan(result.similarities[0, 1])


def test_diversity_only_policy():
    for seed in range(12):
        result = retrieve(QUERY, CASES, REWARDS, [1 / 3], RetrievalConfig(policy="diversity_only", k=2), seeds=[seed])
        first, second = result.indices[0]
        # the second pick minimises the similarity to the first among the other candidates
        others = [c for c in result.candidate_indices[0] if c not in (first, -1)]
        sims = CASES[others] @ CASES[first]
        assert np.isclose(CASES[second] @ CASES[first], sims.min())
        assert result.lambdas[0] == 0.0
        # rewards play no role
        flipped = retrieve(QUERY, CASES, 1 - REWARDS, [1 / 3], RetrievalConfig(policy="diversity_only", k=2),
                           seeds=[seed])
        assert flipped.indices.tolist() == result.indices.tolist()
    anchors = {
        int(retrieve(QUERY, CASES, REWARDS, [1.0], RetrievalConfig(policy="diversity_only", k=2),
                     seeds=[s]).indices[0, 0])
        for s in range(40)
    }
    assert anchors == {0, 1, 2, 3, 4, 5}  # K=2 -> all 6 cases are candidates; the anchor is random among them


def test_random_policy():
    config = RetrievalConfig(policy="random", k=2)
    a = retrieve(QUERY, CASES, REWARDS, [1.0], config, seeds=[7])
    b = retrieve(-QUERY, CASES, REWARDS, [0.5], config, seeds=[7])
    assert a.indices.tolist() == b.indices.tolist()  # ignores the query and consensus, reproducible
    assert len(set(a.indices[0])) == 2
    seen = set()
    for seed in range(60):
        picks = retrieve(QUERY, CASES, REWARDS, [1.0], config, seeds=[seed]).indices[0]
        assert len(set(picks.tolist())) == 2 and picks.min() >= 0 and picks.max() < 6
        seen.update(picks.tolist())
    assert seen == set(range(6))
    np.testing.assert_allclose(a.similarities[0], CASES[a.indices[0]] @ QUERY[0], atol=1e-6)


def test_small_and_empty_banks():
    for policy in POLICIES:
        result = retrieve(QUERY, CASES[:2], REWARDS[:2], [0.5], RetrievalConfig(policy=policy, k=3))
        picked = result.indices[0]
        assert sorted(picked[picked >= 0].tolist()) == ([1] if policy == "positive_only" else [0, 1])
        assert (picked == -1).sum() == (2 if policy == "positive_only" else 1)
        empty = retrieve(QUERY, CASES[:0], REWARDS[:0], [0.5], RetrievalConfig(policy=policy, k=3))
        assert (empty.indices == -1).all()


def test_top_candidates_orders_and_pads():
    sims = np.array([[0.1, 0.9, 0.5, 0.9, -np.inf]], dtype=np.float32)
    idx, val = top_candidates(sims, 3)
    assert idx.tolist() == [[1, 3, 2]]
    idx, val = top_candidates(sims, 6)
    assert idx.tolist() == [[1, 3, 2, 0, -1, -1]]


def test_query_seed_is_stable_and_distinct():
    assert query_seed(0, "q1", 1, 2) == query_seed(0, "q1", 1, 2)
    assert len({query_seed(0, "q1", t, a) for t in range(3) for a in range(3)}) == 9
    assert query_seed(1, "q1", 1, 2) != query_seed(0, "q1", 1, 2)


def test_bad_inputs():
    with pytest.raises(ValueError, match="policy"):
        RetrievalConfig(policy="mmr")
    with pytest.raises(ValueError, match="top_k must be >= 1"):  # K's bound is the declaration's (memory/settings.py)
        RetrievalConfig(k=0)
    with pytest.raises(ValueError, match="dimension"):
        retrieve(np.ones((1, 4), np.float32), CASES, REWARDS, [1.0])
    with pytest.raises(ValueError, match="rewards"):
        retrieve(QUERY, CASES, REWARDS[:3], [1.0])
    with pytest.raises(ValueError, match="consensus_ratios"):
        retrieve(QUERY, CASES, REWARDS, [1.0, 0.5])


def test_only_the_seeded_policies_derive_seeds(monkeypatch):
    import r2mad_core.memory.retrieval as retrieval

    calls = []
    real = retrieval.query_seed
    monkeypatch.setattr(retrieval, "query_seed", lambda *keys: calls.append(keys) or real(*keys))
    queries = np.stack([QUERY[0], CASES[4]])
    for policy in POLICIES:
        calls.clear()
        config = RetrievalConfig(policy=policy, k=2)
        implicit = retrieve(queries, CASES, REWARDS, [0.5, 1.0], config)
        explicit = retrieve(queries, CASES, REWARDS, [0.5, 1.0], config, seeds=[real(0, 0), real(0, 1)])
        assert implicit.indices.tolist() == explicit.indices.tolist()
        # default seeds = query_seed(config.seed, position), drawn only by the policies that use them
        assert calls == ([(0, 0), (0, 1)] if retrieval.POLICIES[policy].seeded else [])
        with pytest.raises(ValueError, match="seeds has 1 entries, expected one per query"):
            retrieve(queries, CASES, REWARDS, [0.5, 1.0], config, seeds=[3])
    assert {name for name, spec in retrieval.POLICIES.items() if spec.seeded} == {"random", "diversity_only"}


def test_a_policy_is_one_registry_entry() -> None:
    """A new policy registered from outside the package is accepted by the config, the spec parser, the method and
    the labels (Table 3), and retrieve() dispatches to it."""
    from r2mad_core.methods import get_method  # noqa: F401  (the method reads the registry at build time)

    def least_similar(query: retrieval.Query) -> retrieval.RetrievalResult:
        similarity = query.queries @ query.bank.T
        cand, cand_sim = retrieval.top_candidates(-similarity, query.config.num_candidates)
        k = query.config.k
        lambdas = np.full(query.size, np.nan, dtype=np.float32)
        return retrieval.RetrievalResult(cand[:, :k].copy(), -cand_sim[:, :k], -cand_sim[:, :k], lambdas, cand,
                                         -cand_sim, query.config.policy)

    spec = retrieval.register_policy(retrieval.PolicySpec("toy_least_similar", "Least similar", least_similar))
    try:
        assert retrieval.parse_retrieval_policy("toy_least_similar") == ("toy_least_similar", None)
        assert retrieval.policy_label("toy_least_similar") == "Least similar"
        assert retrieval.policy_spec_of_label("Least similar") == "toy_least_similar"
        bank = np.eye(4, dtype=np.float32)
        query = np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32)
        result = retrieval.retrieve(query, bank, np.ones(4), [0.5], retrieval.RetrievalConfig(policy=spec.name, k=1))
        assert result.indices[0, 0] != 0  # never the identical case
        with pytest.raises(ValueError, match="already registered"):
            retrieval.register_policy(spec)
    finally:
        del retrieval.POLICIES[spec.name]
    assert retrieval.policy_label("fixed_lambda:0.25") == "Fixed-lambda (0.25)"
    assert retrieval.policy_spec_of_label("Fixed-lambda (0.25)") == "fixed_lambda:0.25"
    assert retrieval.policy_label("state_aware") == "Debate-State-Aware"
