"""Score and exact intervals for accuracies and their differences, which keep their coverage at small n.

Wilson 1927; Newcombe 1998; Zou and Donner 2008; Clopper and Pearson 1934: where a percentile bootstrap collapses,
these intervals keep their coverage, and they agree with a test by construction.

- :func:`wilson`: the score interval of one proportion k / n; :func:`accuracy_se` the standard error of an
  accuracy (or a mean of accuracies over strata) the tables print beside its CI.
- :func:`mover`: the interval of a weighted sum of independent estimates from their own intervals (the method of
  variance estimates recovery, Zou and Donner 2008): ``L = est - sqrt(sum_i (w_i (est_i - bound_i))^2)`` with each
  ``bound_i`` the end of interval i on the side that lowers the sum (the upper end likewise). With the Wilson
  intervals of two proportions and weights +1, -1 it is Newcombe's (1998) hybrid score interval for the difference of
  two independent proportions (his method 10).
- :func:`difference_from_paper`: a reproduced accuracy against the paper's, as two independent samples (the paper's
  number is an accuracy over its own test split of known size, not a constant): the difference ``mean_k (p_k - P_k)``
  over benchmarks with its MOVER-Wilson interval. A perfect reproduction contains 0 about 95% of the time; the
  paper's number inside the reproduced CI alone (which ignores the paper's own sampling error) fails a perfect
  reproduction about 17% of the time at equal sizes (tests/report/test_intervals.py).
- :func:`mcnemar_interval`: the exact interval of a paired difference on one benchmark that agrees with McNemar's
  exact test by construction (it excludes 0 exactly when p < 0.05), used below the small-sample n, where the
  percentile bootstrap collapses (docs/statistics.md).
"""

from __future__ import annotations

import math
from typing import Sequence


def accuracy_se(accuracies: Sequence[float], sizes: Sequence[int]) -> float:
    """The standard error of the mean over strata of accuracies ``p_k`` on ``n_k`` questions,
    ``sqrt(sum_k p_k (1 - p_k) / n_k) / K``: the standard deviation of the tables' bootstrap (per stratum a
    Binomial(n_k, p_k) / n_k draw, averaged), so the SE is of the same estimate as the CI beside it."""
    pairs = [(float(p), float(n)) for p, n in zip(accuracies, sizes, strict=False)]
    if not pairs or any(n <= 0 or math.isnan(p) or math.isnan(n) for p, n in pairs):
        return math.nan
    return math.sqrt(sum(p * (1.0 - p) / n for p, n in pairs)) / len(pairs)


#: The two-sided 95% normal quantile (the intervals are 95%; scipy is not needed for it).
Z95 = 1.959963984540054


def _z(level: float) -> float:
    if math.isclose(level, 0.95):
        return Z95
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of the proportion ``k / n`` (``k`` may be fractional: an accuracy times n)."""
    if n <= 0:
        return math.nan, math.nan
    z = _z(level)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mover(estimates: Sequence[float], intervals: Sequence[tuple[float, float]],
          weights: Sequence[float]) -> tuple[float, float]:
    """The interval of ``sum_i w_i est_i`` from independent estimates and their intervals (module docstring)."""
    total = sum(w * e for w, e in zip(weights, estimates, strict=False))
    down = up = 0.0
    for w, e, (low, high) in zip(weights, estimates, intervals, strict=False):
        lower_side, upper_side = (low, high) if w >= 0 else (high, low)
        down += (w * (e - lower_side)) ** 2
        up += (w * (upper_side - e)) ** 2
    return total - math.sqrt(down), total + math.sqrt(up)


def difference_from_paper(reproduced: Sequence[tuple[float, int]], paper: Sequence[tuple[float, int]],
                          level: float = 0.95) -> tuple[float, float, float]:
    """(difference, low, high): the mean over benchmarks of ``reproduced accuracy - paper accuracy``, each given as
    (accuracy, questions), the two runs independent samples; the interval is MOVER over the Wilson intervals of the
    2K accuracies (Newcombe's method 10 for one benchmark). NaN when a size is unknown."""
    if not reproduced or len(reproduced) != len(paper):
        return math.nan, math.nan, math.nan
    estimates, intervals, weights = [], [], []
    k = len(reproduced)
    for sign, side in ((1.0, reproduced), (-1.0, paper)):
        for value, n in side:
            if n is None or not n or math.isnan(float(n)) or math.isnan(float(value)):
                return math.nan, math.nan, math.nan
            estimates.append(float(value))
            intervals.append(wilson(float(value) * float(n), float(n), level))
            weights.append(sign / k)
    low, high = mover(estimates, intervals, weights)
    return sum(w * e for w, e in zip(weights, estimates, strict=False)), low, high


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of the proportion ``k / n``; [0, 1] when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    from scipy.stats import beta  # lazy: scipy.stats takes seconds to import

    tail = (1.0 - level) / 2.0
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1.0 - tail, k + 1, n - k))
    return low, high


#: The level of the discordance's exact bound in :func:`mcnemar_interval` (it only widens the interval).
DISCORDANCE_LEVEL = 0.99


def mcnemar_interval(b: int, c: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact interval of a paired difference ``(b - c) / n`` that agrees with McNemar's exact test by
    construction: the difference is ``psi (2 theta - 1)``, ``psi`` the discordance and ``theta`` the share of the
    ``d = b + c`` discordant questions the first got right. ``theta``'s interval is the Clopper-Pearson one of b / d at
    ``level``, the inversion of the two-sided exact binomial test of theta = 1/2 that McNemar's is, so it excludes
    1/2 exactly when p < 1 - level; each end is scaled by the bound of ``psi``'s exact interval (at
    :data:`DISCORDANCE_LEVEL`) that moves it away from 0 when it is on the far side of 0 from the other end, and
    toward 0 otherwise, so the interval excludes 0 exactly when the test rejects. At d = 0 it is [-psi_U, psi_U],
    never a point (a bootstrap's [0, 0]). Its coverage is checked at small n in tests/report/test_intervals.py."""
    d = b + c
    if n <= 0:
        return math.nan, math.nan
    theta_low, theta_high = clopper_pearson(b, d, level)
    psi_low, psi_high = clopper_pearson(d, n, DISCORDANCE_LEVEL)
    low = 2.0 * theta_low - 1.0
    high = 2.0 * theta_high - 1.0
    return (low * (psi_high if low < 0 else psi_low)), (high * (psi_high if high > 0 else psi_low))
