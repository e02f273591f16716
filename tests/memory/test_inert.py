"""The one rule of inert settings (r2mad_core.memory.inert): at K = 1 lambda_t cannot change the pick, so a sweep
of gamma (or fixed_lambda) there is refused before it runs, with one line naming the setting and why."""

from __future__ import annotations

import numpy as np
import pytest

from r2mad_core.memory import inert
from r2mad_core.memory.retrieval import mmr_select, mmr_tradeoff
from r2mad_lab.reproduce.points import sweep_points


def test_the_rule_holds_in_the_retrieval_itself() -> None:
    rng = np.random.default_rng(0)
    q, c = 200, 6
    relevance = rng.random((q, c)) * (rng.random((q, c)) < 0.6)
    pairwise = rng.random((q, c, c))
    valid = np.ones((q, c), dtype=bool)
    consensus = rng.choice([0.5, 2 / 3, 1.0], size=q)
    picks = {g: mmr_select(relevance, pairwise, mmr_tradeoff(consensus, g), valid, 1)[0] for g in (0.0, 0.5, 0.9, 1.0)}
    assert all(np.array_equal(picks[0.0], picks[g]) for g in (0.5, 0.9))  # inert among gamma < 1 at K = 1
    assert not np.array_equal(picks[0.9], picks[1.0])  # gamma = 1: lambda_t = 0 on a unanimous round
    at_k3 = {g: mmr_select(relevance, pairwise, mmr_tradeoff(consensus, g), valid, 3)[0] for g in (0.0, 0.9)}
    assert not np.array_equal(at_k3[0.0], at_k3[0.9])  # at K = 3 gamma acts


def test_an_inert_sweep_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"^--sweep gamma: gamma is inert at K = 1 \(top_k = 1\): lambda_t only "
                                         r"matters with K >= 2") as caught:
        sweep_points([("gamma", [0.5, 0.7, 0.9])], {"top_k": 1})
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="fixed_lambda is inert at K = 1"):
        sweep_points([("fixed_lambda", [0.25, 0.75])], {"top_k": 1})
    # where it acts: K >= 2 set or swept, or a value that lets lambda_t reach 0; other settings; no settings known
    assert len(sweep_points([("gamma", [0.5, 0.9])], {"top_k": 3})) == 2
    assert len(sweep_points([("gamma", [0, 0.9]), ("top_k", [1, 3])], {"top_k": 1})) == 4
    assert len(sweep_points([("gamma", [0.9, 1.0])], {"top_k": 1})) == 2
    assert len(sweep_points([("w_high", [0.5, 0.6])], {"top_k": 1})) == 2
    assert len(sweep_points([("gamma", [0.5, 0.9])])) == 2
    assert inert.inert_sweep_problem([("gamma", [0.5, 0.9])], {}) is not None  # K's default is 1
