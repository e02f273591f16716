"""Memory bank audit: sizes, reward balance, duplicate states, stale embeddings and label consistency of a bank set.

Limitations: "we recommend auditing the memory bank before applying the framework").

Every label of a memory case (Eq. 4, ``eq:memory_case``: e_i^(t) = < s_i^(t), Z^(t), y, zeta_i^(t), r_i >) is
re-derived from what the case stores: the answers a(z_j^(t)) are re-extracted from the responses, every
correctness zeta_j^(t) is re-checked against y, and the outcome reward r_i against its definition
(:mod:`r2mad_core.memory.cases`); the embeddings of the states s_i^(t) (Eq. 2) and responses are recomputed on a
sample. ``r2mad audit BANK`` prints it; notebook 02 tabulates it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from r2mad_core.data import answers
from r2mad_core.memory.banks import MemoryBankSet
from r2mad_core.memory.cases import encode_states, format_state_text
from r2mad_core.memory.embeddings import Embedder


@dataclass
class BankAudit:
    """What :func:`audit_bank_set` found, per agent where it applies. Shares are fractions of cases."""

    benchmark: str
    embedder_name: str
    reward_definition: str
    cases_per_agent: list[int]
    positive_reward_share: list[float]
    own_correct_share: list[float]
    duplicate_states: list[int]  # cases whose state text repeats an earlier case's (same bank)
    near_duplicate_states: list[int]  # other cases (text not repeated) within the cosine threshold of an earlier one
    embeddings_checked: int = 0  # cases whose embeddings were recomputed (0: no embedder given)
    stale_state_embeddings: int = 0
    stale_response_embeddings: int = 0
    max_embedding_drift: float = 0.0  # 1 - min cosine(stored, recomputed)
    answers_reextracted_differ: int = 0  # stored answers that a(.) no longer extracts from the response
    correctness_disagree: int = 0  # cases with a stored zeta_j that is_correct(answer_j, y) contradicts
    reward_disagree: int | None = 0  # cases whose r_i contradicts the reward definition (None: not checkable)
    total_cases: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def correctness_disagree_share(self) -> float:
        return self.correctness_disagree / self.total_cases if self.total_cases else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["correctness_disagree_share"] = self.correctness_disagree_share
        return out

    def format(self) -> str:
        lines = [
            f"memory bank: {self.benchmark}, embedder {self.embedder_name}, reward {self.reward_definition}",
            f"cases per agent: {self.cases_per_agent} (total {self.total_cases})",
            "reward balance (share r=1): " + ", ".join(f"{x:.3f}" for x in self.positive_reward_share),
            "own correctness (share zeta_i=1): " + ", ".join(f"{x:.3f}" for x in self.own_correct_share),
            f"duplicate states (identical text): {self.duplicate_states}; "
            f"near-duplicates: {self.near_duplicate_states}",
        ]
        if self.embeddings_checked:
            lines.append(
                f"embeddings recomputed for {self.embeddings_checked} cases: {self.stale_state_embeddings} stale state "
                f"and {self.stale_response_embeddings} stale response embeddings "
                f"(max drift {self.max_embedding_drift:.2e})"
            )
        else:
            lines.append("embeddings: not recomputed (no embedder)")
        lines.append(
            f"stored answers not re-extracted from their response: {self.answers_reextracted_differ}; "
            f"cases whose correctness labels disagree with is_correct: {self.correctness_disagree} "
            f"({100 * self.correctness_disagree_share:.1f}%)"
        )
        lines.append(
            "rewards inconsistent with the reward definition: "
            + ("not checkable" if self.reward_disagree is None else str(self.reward_disagree))
        )
        if self.examples:
            lines.append("examples: " + "; ".join(self.examples[:8]))
        return "\n".join(lines)


def audit_bank_set(
    bank_set: MemoryBankSet,
    embedder: Embedder | None = None,
    sample_size: int = 32,
    seed: int = 0,
    near_duplicate_threshold: float = 0.999,
    drift_tolerance: float = 1e-3,
) -> BankAudit:
    """Check a bank set: sizes, reward balance, duplicate states, stale embeddings, label consistency.

    ``embedder`` (the bank's own) recomputes the state and response embeddings of ``sample_size`` random
    cases per agent; a cosine below ``1 - drift_tolerance`` to the stored vector counts as stale. Labels:
    every stored answer is re-extracted from its response (``answers.extract_answer``) and every zeta_j is
    re-checked with ``answers.is_correct(answer_j, y)``; rewards are re-derived for ``final_vote`` (from the
    stored final answer) and ``round_correctness`` (from zeta_i); ``agent_final`` is not checkable per case.
    """
    if embedder is not None:
        bank_set.check_compatible(embedder)
    benchmark = bank_set.benchmark
    audit = BankAudit(
        benchmark=benchmark,
        embedder_name=bank_set.embedder_name,
        reward_definition=bank_set.reward_definition,
        cases_per_agent=[len(b) for b in bank_set.banks],
        positive_reward_share=[float(b.rewards.mean()) if len(b) else 0.0 for b in bank_set.banks],
        own_correct_share=[float(b.correct[:, b.agent_index].mean()) if len(b) else 0.0 for b in bank_set.banks],
        duplicate_states=[],
        near_duplicate_states=[],
        total_cases=sum(len(b) for b in bank_set.banks),
    )
    if bank_set.reward_definition == "agent_final":
        audit.reward_disagree = None

    def correct_of(answer: str | None, gold: str) -> bool:
        return answer is not None and answers.is_correct(answer, gold, benchmark)

    rng = np.random.default_rng(seed)
    for bank in bank_set.banks:
        texts = [format_state_text(c.state, bank_set.state_layout) for c in bank.cases]
        seen: set[str] = set()
        exact = np.zeros(len(texts), dtype=bool)
        for k, text in enumerate(texts):
            exact[k] = text in seen
            seen.add(text)
        audit.duplicate_states.append(int(exact.sum()))
        near = _near_duplicates(bank.state_embeddings, near_duplicate_threshold)
        audit.near_duplicate_states.append(int((near & ~exact).sum()))

        for case in bank.cases:
            labels_ok = True
            for response, answer, zeta in zip(case.responses, case.answers, case.correct, strict=False):
                extracted = answers.extract_answer(response, benchmark, num_options=case.num_options)
                if (extracted is None) != (answer is None) or (
                    extracted is not None and answer is not None
                    and answers.canonical_answer(extracted, benchmark) != answers.canonical_answer(answer, benchmark)
                ):
                    audit.answers_reextracted_differ += 1
                if correct_of(answer, case.gold) != bool(zeta):
                    labels_ok = False
            if not labels_ok:
                audit.correctness_disagree += 1
                if len(audit.examples) < 8:
                    audit.examples.append(f"{case.case_id}: correctness labels contradict is_correct")
            if audit.reward_disagree is not None:
                if bank_set.reward_definition == "final_vote":
                    expected = int(correct_of(case.final_answer, case.gold))
                else:  # round_correctness
                    expected = int(bool(case.is_correct))
                if expected != case.reward:
                    audit.reward_disagree += 1

        if embedder is not None and len(bank):
            rows = np.sort(rng.choice(len(bank), size=min(sample_size, len(bank)), replace=False))
            cases = [bank.cases[k] for k in rows]
            states = encode_states(embedder, [c.state for c in cases], bank_set.state_layout, bank_set.state_encoding)
            state_cos = np.einsum("kd,kd->k", states, bank.state_embeddings[rows])
            responses = embedder.encode([t for c in cases for t in c.responses]).reshape(len(rows), bank.n_agents, -1)
            response_cos = np.einsum("kjd,kjd->kj", responses, bank.response_embeddings[rows])
            audit.embeddings_checked += len(rows)
            audit.stale_state_embeddings += int((state_cos < 1 - drift_tolerance).sum())
            audit.stale_response_embeddings += int((response_cos < 1 - drift_tolerance).any(axis=1).sum())
            drift = float(1 - min(state_cos.min(), response_cos.min()))
            audit.max_embedding_drift = max(audit.max_embedding_drift, drift)
            for k, cos in zip(rows, state_cos, strict=False):
                if cos < 1 - drift_tolerance and len(audit.examples) < 8:
                    audit.examples.append(f"{bank.cases[k].case_id}: stale state embedding (cos {cos:.4f})")
    return audit


def _near_duplicates(vectors: np.ndarray, threshold: float, block: int = 2048) -> np.ndarray:
    """Mask of the rows whose cosine to some earlier row is >= threshold (blocked: no N x N matrix)."""
    n = len(vectors)
    flagged = np.zeros(n, dtype=bool)
    for start in range(0, n, block):
        stop = min(n, start + block)
        sims = vectors[start:stop] @ vectors[:stop].T  # [b, stop]
        cols = np.arange(stop)
        rows = np.arange(start, stop)[:, None]
        sims = np.where(cols[None, :] < rows, sims, -np.inf)  # earlier rows only
        flagged[start:stop] = (sims >= threshold).any(axis=1)
    return flagged
