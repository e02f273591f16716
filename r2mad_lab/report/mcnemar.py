"""The exact power of McNemar's test and the minimum detectable effect (McNemar 1947; Lachin 1992).

Lachin 1992, Stat. Med. 11:1239-1251: the power of the exact
conditional test as its unconditional rejection probability, the minimum detectable effect, and the discordance two
accuracies imply under an assumed correlation. The model and its sources are in :mod:`r2mad_lab.report.power`
(which uses these for the claims) and docs/power.md; :mod:`r2mad_lab.report.inference` derives the rule's
small-sample n from :func:`planned_minimum_detectable_effect`.

    power(n, psi, delta) = sum_d Binom(d; n, psi) * P(B >= c_d | d),   B | d ~ Binomial(d, (1 + delta / psi) / 2),

c_d the smallest b > d / 2 whose two-sided exact p-value is below alpha.
"""

from __future__ import annotations

import functools
import math

import numpy as np

ALPHA = 0.05
#: The power a claim's test must have to call it testable.
TARGET_POWER = 0.8
#: The correlation of two methods' per-question correctness assumed before a run (ours; docs/power.md).
ASSUMED_CORRELATION = 0.5


@functools.lru_cache(maxsize=256)
def _critical_values(n: int, alpha: float) -> np.ndarray:
    """c_d for d = 0..n: the smallest b > d/2 with two-sided exact p-value < alpha (d + 1: none)."""
    from scipy.stats import binom  # lazy: scipy.stats takes seconds to import

    critical = np.empty(n + 1, dtype=np.int64)
    for d in range(n + 1):
        b = np.arange(d // 2 + 1, d + 1)
        p_values = np.minimum(1.0, 2.0 * binom.sf(b - 1, d, 0.5))
        below = np.flatnonzero(p_values < alpha)
        critical[d] = b[below[0]] if below.size else d + 1
    return critical


def _check(n: int, discordance: float, alpha: float) -> None:
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"power: the number of paired questions must be a positive integer, found {n!r}")
    if not 0.0 <= discordance <= 1.0:
        raise ValueError(f"power: the discordance must be in [0, 1], found {discordance!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"power: alpha must be in (0, 1), found {alpha!r}")


def mcnemar_power(n: int, discordance: float, difference: float, alpha: float = ALPHA) -> float:
    """The probability that the exact McNemar test on ``n`` pairs finds the better method significantly
    better (two-sided p < ``alpha``, in the claimed direction) when the discordance is ``discordance`` and the
    accuracy difference ``difference`` (module docstring). Requires |difference| <= discordance."""
    _check(n, discordance, alpha)
    if abs(difference) > discordance + 1e-12:
        raise ValueError(f"power: a difference of {difference:g} needs a discordance of at least that, found "
                         f"{discordance:g}")
    if discordance == 0.0:
        return 0.0
    from scipy.stats import binom  # lazy: scipy.stats takes seconds to import

    share = min(1.0, max(0.0, (1.0 + difference / discordance) / 2.0))
    d = np.arange(n + 1)
    critical = _critical_values(int(n), float(alpha))
    rejects = binom.sf(critical - 1, d, share)
    rejects[critical > d] = 0.0
    return float(np.sum(binom.pmf(d, n, discordance) * rejects))


def minimum_detectable_effect(n: int, discordance: float, alpha: float = ALPHA, power: float = TARGET_POWER) -> float:
    """The smallest accuracy difference the exact McNemar test on ``n`` pairs detects with probability
    ``power`` at a fixed ``discordance``; NaN when no difference up to the discordance reaches it."""
    _check(n, discordance, alpha)
    if discordance == 0.0 or mcnemar_power(n, discordance, discordance, alpha) < power:
        return math.nan
    from scipy.optimize import brentq  # lazy: scipy takes seconds to import

    return float(brentq(lambda delta: mcnemar_power(n, discordance, delta, alpha) - power, 0.0, discordance, xtol=1e-6))


def assumed_discordance(p_better: float, p_worse: float, correlation: float = ASSUMED_CORRELATION) -> float:
    """The discordance of two methods with accuracies ``p_better`` and ``p_worse`` whose per-question
    correctness has the given (phi) correlation; at least |p_better - p_worse| (module docstring)."""
    for name, value in (("p_better", p_better), ("p_worse", p_worse)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"assumed_discordance: {name} must be an accuracy in [0, 1], found {value!r}")
    if not -1.0 <= correlation <= 1.0:
        raise ValueError(f"assumed_discordance: the correlation must be in [-1, 1], found {correlation!r}")
    both = p_better * p_worse + correlation * math.sqrt(p_better * (1 - p_better) * p_worse * (1 - p_worse))
    both = min(max(both, p_better + p_worse - 1.0, 0.0), min(p_better, p_worse))
    return max(p_better + p_worse - 2.0 * both, abs(p_better - p_worse))


def planned_minimum_detectable_effect(n: int, p_worse: float, correlation: float = ASSUMED_CORRELATION,
                                      alpha: float = ALPHA, power: float = TARGET_POWER) -> float:
    """Before a run: the smallest difference detectable with ``power`` over a method at accuracy ``p_worse``,
    the discordance moving with the difference (:func:`assumed_discordance`); NaN when none up to 1 - p_worse."""
    from scipy.optimize import brentq  # lazy: scipy takes seconds to import

    def gap(delta: float) -> float:
        return mcnemar_power(n, assumed_discordance(p_worse + delta, p_worse, correlation), delta, alpha) - power

    top = 1.0 - p_worse
    if top <= 0.0 or gap(top) < 0.0:
        return math.nan
    return float(brentq(gap, 0.0, top, xtol=1e-6))
