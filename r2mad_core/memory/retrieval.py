"""Debate-state-aware memory retrieval (Section 4.2, Eq. 5-6) and the policies of the retrieval ablation (Table 3).

Given agent i's current debate state embedding s = emb(s_i^(t)) and its memory bank M_i (unit-norm state
embeddings, rewards r_i(e)):

1. **Candidates** C_i^(t): the top-3K cases of M_i by cosine similarity sim(e, s) between s and the stored
   state embeddings (Appendix A: "ranking all entries in the agent's memory bank by cosine similarity ...
   retaining the top-3K").
2. **MMR** (Eq. 5): starting from E = {}, greedily add
   ``argmax_{e in C \\ E} [ lambda_t * sim(e, s) * r(e) - (1 - lambda_t) * max_{e' in E} sim(e, e') ]``
   until |E| = K, with ``lambda_t = 1 - gamma * Cons(Z^(t-1))`` (Eq. 6), gamma = 0.9.

Choices the paper leaves open, made here:

- sim(e, e') between two cases is the cosine of their **state** embeddings (the same space as sim(e, s)).
  The authors' code compares the embeddings of the case *documents* instead; we keep one space.
- The max over an empty E is 0, so the first pick maximises lambda_t * sim(e, s) * r(e). Ties are broken
  towards the more similar candidate (candidates are ordered by similarity).
- With K = 1 (the authors' run script uses ``--n_retrieval 1``) the redundancy term is always empty and
  lambda_t > 0 only rescales the first-pick scores: **lambda_t has no effect** on what is retrieved (the
  pick is the most similar r = 1 candidate). Both protocol presets use K = 1 (:mod:`r2mad_lab.experiments.protocol`);
  ``RetrievalConfig`` defaults to 3 and the retrieval ablation (notebook 04) also runs at K = 3, where lambda acts.
- Cases with sim(e, s) < 0 and r = 1 score below r = 0 cases (whose relevance term is 0): this is Eq. 5 as
  written.

Policies (``RetrievalConfig.policy``), each returning K case indices per query:

- ``state_aware`` (default): the method above.
- ``fixed_lambda``: MMR with a constant lambda (``fixed_lambda``, the paper tries 0.25 / 0.5 / 0.75).
- ``similarity``: task similarity only, the top-K by cosine (no reward, no diversity).
- ``positive_only``: the top-K by cosine among cases with r(e) = 1 only.
- ``diversity_only``: MMR without the relevance term (lambda = 0) over the same 3K candidates. Every first
  pick then ties at 0; the tie is broken by a seeded random anchor among the candidates (as the authors'
  code does), so the set carries no similarity bias beyond the candidate filter.
- ``random``: 3K cases drawn uniformly without replacement from the whole bank (seeded per query); the
  first K are retrieved.

All queries of one agent-round are handled together: one matrix product [Q, d] x [d, N], ``argpartition``
for the top-3K, and MMR vectorised across queries over the small [Q, 3K, 3K] candidate similarity tensor.
There is no Python loop over bank cases; the only per-query loop is the seeded draw of ``random`` and
``diversity_only``.
"""

from __future__ import annotations

import zlib
from dataclasses import InitVar, dataclass, field, fields
from typing import Any, Callable, Sequence

import numpy as np

from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import POLICY_REGISTRY, MemorySettings
from r2mad_core.plugins import entry_problem

CANDIDATE_FACTOR = 3


@dataclass(frozen=True)
class RetrievalConfig:
    """How E_i^(t) is chosen. ``k`` = K; ``candidate_factor`` * K candidates (the paper's 3K). The tuning values'
    defaults and bounds are :class:`~r2mad_core.memory.settings.MemorySettings`' (``k`` is its ``top_k``); a
    field of the same name as a memory setting takes that setting (:meth:`from_settings`)."""

    policy: str = "state_aware"
    k: int = MEMORY_DEFAULTS["top_k"]
    gamma: float = MEMORY_DEFAULTS["gamma"]
    fixed_lambda: float = MEMORY_DEFAULTS["fixed_lambda"]
    candidate_factor: int = CANDIDATE_FACTOR
    seed: int = 0

    #: Built from a checked :class:`~r2mad_core.memory.settings.MemorySettings` (:meth:`from_settings`): its values
    #: are not checked again (a frozen object checked when made is trusted downstream).
    checked: InitVar[bool] = False

    def __post_init__(self, checked: bool) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown retrieval policy {self.policy!r}: expected one of {tuple(POLICIES)}")
        if self.candidate_factor < 1:
            raise ValueError(f"candidate_factor must be >= 1, found {self.candidate_factor}")
        if not checked:  # made by hand: the bounds are the declaration's (memory/settings.py), checked by it
            MemorySettings.check_all("RetrievalConfig", {"top_k": self.k, **{
                f.name: getattr(self, f.name) for f in fields(self) if f.name in MEMORY_DEFAULTS}})

    @classmethod
    def from_settings(cls, settings: MemorySettings, **retrieval: Any) -> "RetrievalConfig":
        """The retrieval configuration of ``settings`` (K, gamma, the fixed lambda, and every other field named as a
        memory setting) with the retrieval-only fields in ``retrieval`` (``policy``, ``seed``); ``settings`` was
        checked when it was made, so nothing is checked again."""
        names = [f.name for f in fields(cls) if f.name in MEMORY_DEFAULTS]
        return cls(k=settings.top_k, **{**settings.typed(names), **retrieval}, checked=True)

    @property
    def num_candidates(self) -> int:
        return self.candidate_factor * self.k


@dataclass
class RetrievalResult:
    """Per query q: the K retrieved cases (``-1`` = no case: the bank had fewer eligible cases).

    ``scores`` is the selection score at pick time (the Eq. 5 objective for the MMR policies, the cosine
    similarity for ``similarity``/``positive_only``, NaN for ``random``); ``similarities`` is sim(e, s);
    ``lambdas`` is lambda_t (NaN for policies without one). ``candidate_*`` hold the 3K candidates ordered
    by similarity (the authors' confidence variant pools over them).
    """

    indices: np.ndarray  # [Q, K] int64
    scores: np.ndarray  # [Q, K] float32
    similarities: np.ndarray  # [Q, K] float32
    lambdas: np.ndarray  # [Q] float32
    candidate_indices: np.ndarray  # [Q, C] int64
    candidate_similarities: np.ndarray  # [Q, C] float32
    policy: str = field(default="state_aware")

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def mmr_tradeoff(consensus_ratio: np.ndarray | float, gamma: float = MEMORY_DEFAULTS["gamma"]) -> np.ndarray:
    """lambda_t = 1 - gamma * Cons(Z^(t-1)) (Eq. 6), elementwise."""
    cons = np.asarray(consensus_ratio, dtype=np.float64)
    if np.any(~np.isfinite(cons)) or np.any((cons < 0) | (cons > 1)):
        raise ValueError(f"consensus ratios must be finite and in [0, 1], found {cons.ravel()[:8]}")
    return (1.0 - gamma * cons).astype(np.float32)


def query_seed(base_seed: int, *keys: int | str) -> int:
    """A reproducible 63-bit seed for one query from a base seed and keys (sample id, round, agent).

    Independent of the batch a query arrives in, so the random policies give the same picks whatever the
    batching.
    """
    entropy = [int(base_seed) & 0xFFFFFFFF]
    for key in keys:
        if isinstance(key, str):
            entropy.append(zlib.crc32(key.encode("utf-8")))
        else:
            entropy.append(int(key) & 0xFFFFFFFF)
    return int(np.random.SeedSequence(entropy).generate_state(2, np.uint64)[0] >> np.uint64(1))


def _as_unit_matrix(name: str, matrix: np.ndarray, dim: int | None = None) -> np.ndarray:
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D [rows, dim], found shape {matrix.shape}")
    if dim is not None and matrix.shape[1] != dim:
        raise ValueError(f"{name} has dimension {matrix.shape[1]}, expected {dim} (same embedder as the bank?)")
    return matrix.astype(np.float32, copy=False)


def top_candidates(similarities: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``count`` largest entries (ties: lower index first), ordered by decreasing value.

    Entries equal to -inf are not eligible; missing slots are -1 with similarity -inf.
    Returns (indices [Q, count] int64, values [Q, count] float32).
    """
    q, n = similarities.shape
    take = min(count, n)
    if take == 0:
        return np.full((q, count), -1, dtype=np.int64), np.full((q, count), -np.inf, dtype=np.float32)
    if take < n:  # the largest `take` entries land in the last `take` columns (no negated copy)
        part = np.argpartition(similarities, n - take, axis=1)[:, n - take :]
    else:
        part = np.broadcast_to(np.arange(n), (q, n))
    # a[rows, i] is np.take_along_axis(a, i, axis=1) without its Python-level checks (~12 us a call; retrieval runs
    # one query at a time, 28,200 times in notebook 04)
    rows = np.arange(q)[:, None]
    values = similarities[rows, part]
    order = np.lexsort((part, -values), axis=1)  # primary: value descending; secondary: index ascending
    idx = part[rows, order].astype(np.int64)
    val = values[rows, order].astype(np.float32)
    idx[~np.isfinite(val)] = -1
    if take < count:
        idx = np.pad(idx, ((0, 0), (0, count - take)), constant_values=-1)
        val = np.pad(val, ((0, 0), (0, count - take)), constant_values=-np.inf)
    return idx, val


def mmr_select(
    relevance: np.ndarray,
    pairwise: np.ndarray,
    lambdas: np.ndarray,
    valid: np.ndarray,
    k: int,
    first_pick: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy MMR (Eq. 5) over candidate sets, vectorised across queries.

    relevance [Q, C] = sim(e, s) * r(e); pairwise [Q, C, C] = sim(e, e'); lambdas [Q]; valid [Q, C] marks
    real candidates. ``first_pick`` [Q] (optional) forces the first selection (diversity-only anchor).
    Returns (positions [Q, k] into the candidate axis, -1 when exhausted; scores [Q, k], NaN when exhausted).
    """
    q, c = relevance.shape
    lam = np.asarray(lambdas, dtype=np.float32).reshape(q, 1)
    rows = np.arange(q)
    redundancy = np.zeros((q, c), dtype=np.float32)  # max over the empty set is 0
    taken = ~valid.copy()
    positions = np.full((q, k), -1, dtype=np.int64)
    scores = np.full((q, k), np.nan, dtype=np.float32)
    for step in range(k):
        objective = lam * relevance - (1.0 - lam) * redundancy
        objective = np.where(taken, -np.inf, objective)
        pick = np.argmax(objective, axis=1)
        if step == 0 and first_pick is not None:
            pick = np.where(first_pick >= 0, first_pick, pick)
        best = objective[rows, pick]
        ok = np.isfinite(best)
        positions[ok, step] = pick[ok]
        scores[ok, step] = best[ok]
        taken[rows[ok], pick[ok]] = True
        redundancy[ok] = np.maximum(redundancy[ok], pairwise[rows[ok], pick[ok], :])
    return positions, scores


def retrieve(
    query_embeddings: np.ndarray,
    state_embeddings: np.ndarray,
    rewards: np.ndarray,
    consensus_ratios: np.ndarray | Sequence[float],
    config: RetrievalConfig | None = None,
    seeds: Sequence[int] | np.ndarray | None = None,
) -> RetrievalResult:
    """Retrieve K cases per query from one agent's bank (all queries of an agent-round at once).

    query_embeddings [Q, d] unit rows (emb(s_i^(t))); state_embeddings [N, d] unit rows of the bank;
    rewards [N] r_i(e) in {0, 1}; consensus_ratios [Q] Cons(Z^(t-1)); seeds [Q] for the random policies
    (default: derived from ``config.seed`` and the query position).
    """
    config = RetrievalConfig() if config is None else config
    queries = _as_unit_matrix("query_embeddings", query_embeddings)
    bank = _as_unit_matrix("state_embeddings", state_embeddings, queries.shape[1])
    rewards = np.asarray(rewards, dtype=np.float32).reshape(-1)
    if rewards.shape[0] != bank.shape[0]:
        raise ValueError(f"rewards has {rewards.shape[0]} entries, expected one per bank case ({bank.shape[0]})")
    q, n = queries.shape[0], bank.shape[0]
    cons = np.asarray(consensus_ratios, dtype=np.float64).reshape(-1)
    if cons.shape[0] != q:
        raise ValueError(f"consensus_ratios has {cons.shape[0]} entries, expected one per query ({q})")
    if seeds is None and POLICIES[config.policy].seeded:  # only these draw; the others need no seeds
        seeds = [query_seed(config.seed, position) for position in range(q)]
    if seeds is not None:
        seeds = np.asarray(seeds, dtype=np.uint64).reshape(-1)
        if seeds.shape[0] != q:
            raise ValueError(f"seeds has {seeds.shape[0]} entries, expected one per query ({q})")

    spec = POLICIES[config.policy]
    if n == 0:
        c, k = config.num_candidates, config.k
        lambdas = spec.tradeoff(cons, config) if spec.tradeoff else np.full(q, np.nan, dtype=np.float32)
        none_idx = np.full((q, c), -1, dtype=np.int64)
        none_val = np.full((q, c), np.nan, dtype=np.float32)
        return RetrievalResult(none_idx[:, :k].copy(), none_val[:, :k].copy(), none_val[:, :k].copy(),
                               lambdas, none_idx, none_val, config.policy)
    return spec.select(Query(queries, bank, rewards, cons, config, seeds))


# --------------------------------------------------------------------------------------------
# The policies (Table 3), one registry
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """Everything a policy sees for one agent-round: Q unit query rows, the bank's N unit rows, rewards [N],
    Cons [Q], the config and the per-query seeds (None unless the policy is ``seeded``)."""

    queries: np.ndarray
    bank: np.ndarray
    rewards: np.ndarray
    consensus: np.ndarray
    config: RetrievalConfig
    seeds: np.ndarray | None

    @property
    def size(self) -> int:
        return int(self.queries.shape[0])


@dataclass(frozen=True)
class PolicySpec:
    """One retrieval policy: ``select(query) -> RetrievalResult``; ``label`` is its Table 3 row name;
    ``parameter`` names the config field a spec string sets (``fixed_lambda:0.25``); ``seeded`` policies get
    per-query seeds; ``tradeoff(consensus, config)`` gives lambda_t per query for the MMR policies.

    ``reads``: the tuning fields of :class:`RetrievalConfig` (:data:`TUNING_FIELDS`: ``gamma``, ``fixed_lambda``)
    the policy reads besides K (None: all of them, the safe default for a registered policy). A run of a policy that
    does not read gamma does not record gamma, so a change of gamma leaves it the very same run
    (:func:`r2mad_core.methods.get_method`)."""

    name: str
    label: str
    select: Callable[[Query], "RetrievalResult"]
    parameter: str | None = None
    seeded: bool = False
    tradeoff: Callable[[np.ndarray, RetrievalConfig], np.ndarray] | None = None
    reads: tuple[str, ...] | None = None

    @property
    def unread(self) -> tuple[str, ...]:
        """The tuning fields this policy does not read (:attr:`reads`)."""
        return () if self.reads is None else tuple(f for f in TUNING_FIELDS if f not in self.reads)


#: The RetrievalConfig fields only some policies read (Eq. 6's gamma; the fixed lambda of the Fixed-lambda rows).
TUNING_FIELDS = ("gamma", "fixed_lambda")


POLICIES: dict[str, PolicySpec] = POLICY_REGISTRY  # the one registry (memory/settings.py reads its names)


def _registration_problem(spec: PolicySpec) -> str | None:
    """What ``spec`` lacks to retrieve and to appear in the ablation table (None: nothing)."""
    problem = entry_problem(spec.name, POLICIES, label=spec.label, kind="policy",
                            label_role="its row name in the retrieval-ablation table",
                            name_note=" (no ':', which separates a value)")
    if problem is not None:
        return problem
    if not callable(spec.select):
        return "needs select: a function Query -> RetrievalResult (e.g. mmr_policy)"
    if spec.tradeoff is not None and not callable(spec.tradeoff):
        return "tradeoff must be a function (consensus [Q], RetrievalConfig) -> lambda_t [Q], or None"
    if spec.select is mmr_policy and spec.tradeoff is None:
        return "selects with mmr_policy, which needs a tradeoff (consensus [Q], RetrievalConfig) -> lambda_t [Q]"
    if spec.parameter is not None and spec.parameter not in RetrievalConfig.__dataclass_fields__:
        return (f"sets parameter {spec.parameter!r}, which is not a RetrievalConfig field "
                f"({', '.join(RetrievalConfig.__dataclass_fields__)})")
    return None


def register_policy(spec: PolicySpec) -> PolicySpec:
    """Add a retrieval policy; it then shows up in the CLI (``--retrieval-policy``), the profiles'
    ``retrieval_policies`` and the retrieval-ablation table (under ``spec.label``). A spec that lacks something is
    refused here, with one line naming it. An MMR variant (Eq. 5) is ``PolicySpec(name, label, mmr_policy,
    tradeoff=...)``: its own lambda_t per query, the same candidates and greedy selection as the paper's policy."""
    problem = _registration_problem(spec)
    if problem is not None:
        raise ValueError(f"register_policy: retrieval policy {getattr(spec, 'name', spec)!r} {problem}")
    POLICIES[spec.name] = spec
    return spec


def policy_label(spec: str) -> str:
    """The table label of a policy spec string: ``fixed_lambda:0.25`` -> ``Fixed-lambda (0.25)``."""
    name, value = parse_retrieval_policy(spec)
    label = POLICIES[name].label
    return f"{label} ({value:.2f})" if value is not None else label


def policy_spec_of_label(label: str) -> str:
    """The inverse of :func:`policy_label`: ``Fixed-lambda (0.25)`` -> ``fixed_lambda:0.25``."""
    for spec in POLICIES.values():
        if spec.parameter is None and spec.label == label:
            return spec.name
        if spec.parameter is not None and label.startswith(spec.label + " (") and label.endswith(")"):
            return f"{spec.name}:{float(label[len(spec.label) + 2:-1])}"
    raise ValueError(f"unknown retrieval policy label {label!r}: "
                     f"expected one of {[p.label for p in POLICIES.values()]}")


def parse_retrieval_policy(spec: str) -> tuple[str, float | None]:
    """``"fixed_lambda:0.25"`` -> ``("fixed_lambda", 0.25)``; ``"state_aware"`` -> ``("state_aware", None)``.

    (A colon, not ``=``: papermill cannot read a parameters cell with ``=`` inside a string.)
    """
    name, _, value = str(spec).partition(":")
    if name not in POLICIES:
        raise ValueError(f"retrieval policy {spec!r}: expected one of {tuple(POLICIES)}")
    parameter = POLICIES[name].parameter
    if parameter is not None:
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"retrieval policy {spec!r}: {name} needs a value, e.g. {name}:0.5") from None
        if not 0.0 <= number <= 1.0:
            raise ValueError(f"retrieval policy {spec!r}: lambda must be in [0, 1]")
        return name, number
    if value:
        takes = [p.name for p in POLICIES.values() if p.parameter]
        verb = "takes" if len(takes) == 1 else "take"
        raise ValueError(f"retrieval policy {spec!r}: only {', '.join(takes)} {verb} a value")
    return name, None


def _random_draw(query: Query) -> RetrievalResult:
    """``random``: 3K cases uniformly without replacement from the whole bank (seeded per query); the first K kept."""
    q, n, c, k = query.size, query.bank.shape[0], query.config.num_candidates, query.config.k
    take = min(c, n)
    cand = np.full((q, c), -1, dtype=np.int64)
    for row, seed in enumerate(query.seeds):
        cand[row, :take] = np.random.default_rng(int(seed)).choice(n, size=take, replace=False)
    cand_sim = _gathered_similarities(query.queries, query.bank, cand)
    lambdas = np.full(q, np.nan, dtype=np.float32)
    scores = np.full((q, k), np.nan, dtype=np.float32)
    return RetrievalResult(cand[:, :k].copy(), scores, cand_sim[:, :k].copy(), lambdas, cand, cand_sim,
                           query.config.policy)


def candidates(query: Query, positive_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The top-3K candidates by cosine (Appendix A), optionally among r(e) = 1 cases only."""
    similarity = query.queries @ query.bank.T  # [Q, N] cosine
    if positive_only:
        similarity = np.where(query.rewards[None, :] > 0, similarity, -np.inf)
    return top_candidates(similarity, query.config.num_candidates)


def _top_by_similarity(query: Query, positive_only: bool = False) -> RetrievalResult:
    """``similarity`` / ``positive_only``: the top-K candidates by cosine."""
    cand, cand_sim = candidates(query, positive_only)
    indices = cand[:, : query.config.k].copy()
    sims = np.where(indices >= 0, cand_sim[:, : query.config.k], np.nan).astype(np.float32)
    lambdas = np.full(query.size, np.nan, dtype=np.float32)
    return RetrievalResult(indices, sims.copy(), sims, lambdas, cand, _nan_invalid(cand_sim, cand >= 0),
                           query.config.policy)


def mmr_policy(query: Query) -> RetrievalResult:
    """The MMR policies (Eq. 5): greedy MMR over the top-3K candidates by cosine (:func:`candidates`), lambda_t per
    query from the registered policy's ``tradeoff(consensus, config)`` (Eq. 6 for ``state_aware``; a constant for
    ``fixed_lambda``; 0 for ``diversity_only``). Public so that a new MMR policy needs only its tradeoff:
    ``register_policy(PolicySpec("my_policy", "My MMR", mmr_policy, tradeoff=...))``. A ``seeded`` policy's first
    pick is a seeded random anchor among the candidates (every first pick ties when lambda_t = 0)."""
    spec = POLICIES[query.config.policy]
    lambdas = spec.tradeoff(query.consensus, query.config)
    cand, cand_sim = candidates(query)
    valid = cand >= 0
    safe = np.where(valid, cand, 0)
    cand_vectors = query.bank[safe] * valid[..., None]  # [Q, C, d], zero rows for padding
    pairwise = np.matmul(cand_vectors, cand_vectors.transpose(0, 2, 1))  # [Q, C, C]
    cand_rewards = np.where(valid, query.rewards[safe], 0.0).astype(np.float32)
    relevance = np.where(valid, cand_sim, 0.0).astype(np.float32) * cand_rewards
    first_pick = None
    if spec.seeded:  # diversity_only: a seeded random anchor among the candidates (every first pick ties at 0)
        counts = valid.sum(axis=1)
        first_pick = np.array(
            [int(np.random.default_rng(int(s)).integers(m)) if m else -1
             for s, m in zip(query.seeds, counts, strict=False)],
            dtype=np.int64,
        )
    positions, scores = mmr_select(relevance, pairwise, lambdas, valid, query.config.k, first_pick)
    picked = positions >= 0
    safe_pos = np.where(picked, positions, 0)
    rows = np.arange(query.size)[:, None]  # as in top_candidates: a[rows, i] is np.take_along_axis(a, i, axis=1)
    indices = np.where(picked, cand[rows, safe_pos], -1)
    sims = np.where(picked, cand_sim[rows, safe_pos], np.nan).astype(np.float32)
    return RetrievalResult(indices, scores, sims, lambdas, cand, _nan_invalid(cand_sim, valid), query.config.policy)


for _spec in (
    PolicySpec("state_aware", "Debate-State-Aware", mmr_policy,
               tradeoff=lambda cons, config: mmr_tradeoff(cons, config.gamma), reads=("gamma",)),
    PolicySpec("fixed_lambda", "Fixed-lambda", mmr_policy, parameter="fixed_lambda",
               tradeoff=lambda cons, config: np.full(cons.shape[0], config.fixed_lambda, dtype=np.float32),
               reads=("fixed_lambda",)),
    PolicySpec("similarity", "Similarity-based", _top_by_similarity, reads=()),
    PolicySpec("positive_only", "Positive-only", lambda query: _top_by_similarity(query, positive_only=True), reads=()),
    PolicySpec("diversity_only", "Diversity-only", mmr_policy, seeded=True,
               tradeoff=lambda cons, config: np.zeros(cons.shape[0], dtype=np.float32), reads=()),
    PolicySpec("random", "Random", _random_draw, seeded=True, reads=()),
):
    register_policy(_spec)


def _nan_invalid(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return np.where(valid, values, np.nan).astype(np.float32)


def _gathered_similarities(queries: np.ndarray, bank: np.ndarray, indices: np.ndarray) -> np.ndarray:
    valid = indices >= 0
    vectors = bank[np.where(valid, indices, 0)]  # [Q, C, d]
    sims = np.einsum("qd,qcd->qc", queries, vectors)
    return np.where(valid, sims, np.nan).astype(np.float32)
