"""Inert settings: which of R2-MAD's retrieval settings cannot change what is retrieved, given the others (Eq. 5-6).

The one rule, owned here: the MMR trade-off lambda (lambda_t = 1 - gamma * Cons(Z^(t-1)) of Eq. 6, or the constant
``fixed_lambda``) weighs relevance against redundancy, and the redundancy term is the max similarity to the cases
already picked: empty for the first pick. With K = 1 (``top_k``) there is only a first pick, whose score is
``lambda_t * sim(e, s) * r(e)``: any lambda_t > 0 only rescales it, and the pick is the most similar case of reward 1
whatever lambda_t is (:mod:`r2mad_core.memory.retrieval`). So at K = 1 the tuning fields (``gamma``,
``fixed_lambda``) are inert among the values that keep lambda_t > 0 in every state (gamma < 1, fixed_lambda > 0); a
value that lets lambda_t reach 0 (gamma = 1 on a unanimous round, fixed_lambda = 0) ties every score and picks the
most similar case whatever its reward, a different computation.

A sweep (``reproduce --sweep gamma=...``) whose every point is the same computation is refused before it runs
(:func:`inert_sweep_problem`, called where the sweep's axes are parsed): its points would be tested as if the
setting were a factor.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from r2mad_core.memory.settings import DEFAULTS

#: The settings that set lambda_t (Eq. 6), each with the test of a value that keeps lambda_t > 0 in every state.
LAMBDA_SETTINGS = {
    "gamma": lambda value: float(value) < 1.0,  # lambda_t = 1 - gamma * Cons >= 1 - gamma > 0
    "fixed_lambda": lambda value: float(value) > 0.0,
}


def inert_at(name: str, top_k: Any) -> bool:
    """Whether ``name`` can change what is retrieved at ``top_k`` only through lambda_t reaching 0 (module
    docstring)."""
    return name in LAMBDA_SETTINGS and top_k is not None and int(top_k) <= 1


def inert_sweep_problem(axes: Sequence[tuple[str, Sequence[Any]]], settings: Mapping[str, Any]) -> str | None:
    """The one-line reason a sweep over ``axes`` (``[(key, values), ...]``) is inert given ``settings`` (the profile's
    values with its ``--set`` overrides), or None: an axis of a lambda setting whose values all keep lambda_t > 0 (or
    all let it reach 0), at every swept or set K of 1."""
    swept = dict(axes)
    ks = list(swept.get("top_k", [settings.get("top_k", DEFAULTS["top_k"])]))
    for name, values in axes:
        if name not in LAMBDA_SETTINGS or not all(inert_at(name, k) for k in ks):
            continue
        positive = {bool(LAMBDA_SETTINGS[name](v)) for v in values}
        if len(positive) == 1:
            return (f"--sweep {name}: {name} is inert at K = 1 (top_k = {ks[0]}): lambda_t only matters with K >= 2; "
                    f"at K = 1 MMR's first pick is the top-similarity case of reward 1 whatever lambda_t "
                    f"{'> 0' if positive == {True} else '= 0'} is, so every point would be the same computation "
                    f"(sweep it where it acts: --set top_k=3, or --sweep top_k too)")
    return None
