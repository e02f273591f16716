"""Score and exact intervals for accuracies and their differences, which keep their coverage at small n.

Wilson 1927; Newcombe 1998; Zou and Donner 2008; Clopper and Pearson 1934: where a percentile bootstrap collapses,
these intervals keep their coverage, and they agree with a test by construction.

- :func:`wilson`: the score interval of one proportion k / n; :func:`accuracy_se` the standard error of an
  accuracy (or a mean of accuracies over strata) the tables print beside its CI; the exact (Clopper-Pearson) interval
  of one accuracy is :func:`r2mad_lab.experiments.statistics.clopper_pearson`, which a run's metrics use.
- :func:`average_accuracy`: the paper's Average column, the mean of per-benchmark accuracies, with its CI and SE: the
  stratified percentile bootstrap, or, where a benchmark is below the small-sample n, the benchmarks' exact intervals
  combined by MOVER (never a point: the bootstrap gave "0.500 [0.500, 0.500]" at n = 1).
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
- :class:`SignDistribution`: the exact distribution of the stratified sign statistic
  ``T = sum_k (2 B_k - d_k) / (K n_k)``, ``B_k ~ Binomial(d_k, theta)``, by convolution with equal values merged: the
  one owner of that distribution, which the stratified sign test's exact p
  (:func:`r2mad_lab.report.inference.stratified_sign_p`, at theta = 1/2) and :func:`stratified_sign_interval` read.
- :func:`stratified_sign_interval`: the interval of a mean over strata of paired differences, the inversion of the
  stratified sign test, so that it excludes 0 exactly when that test's exact p < 0.05 (several strata at small n).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from r2mad_lab.experiments.statistics import EXACT_INTERVAL_BELOW, accuracy_with_ci, clopper_pearson


def accuracy_se(accuracies: Sequence[float], sizes: Sequence[int]) -> float:
    """The standard error of the mean over strata of accuracies ``p_k`` on ``n_k`` questions,
    ``sqrt(sum_k p_k (1 - p_k) / n_k) / K``: the standard deviation of the tables' bootstrap (per stratum a
    Binomial(n_k, p_k) / n_k draw, averaged), so the SE is of the same estimate as the CI beside it."""
    pairs = [(float(p), float(n)) for p, n in zip(accuracies, sizes, strict=False)]
    if not pairs or any(n <= 0 or math.isnan(p) or math.isnan(n) for p, n in pairs):
        return math.nan
    return math.sqrt(sum(p * (1.0 - p) / n for p, n in pairs)) / len(pairs)


class AverageAccuracy(NamedTuple):
    """The Average column's cell: the mean of per-benchmark accuracies, its CI and its SE (:func:`average_accuracy`)."""

    mean: float
    low: float
    high: float
    se: float


def average_accuracy(groups: Sequence[Sequence[bool]], *, level: float = 0.95, n_bootstrap: int = 10_000,
                     seed: int = 0) -> AverageAccuracy:
    """The paper's "Average" column: the mean of per-benchmark accuracies (each group one benchmark's outcomes), with
    a percentile bootstrap CI that resamples the questions of each benchmark independently (each replicate is the mean
    over benchmarks of one Binomial(n_k, p_k) / n_k draw), and its SE (:func:`accuracy_se`, that bootstrap's standard
    deviation). Where a benchmark has fewer than
    :data:`~r2mad_lab.experiments.statistics.EXACT_INTERVAL_BELOW` questions the bootstrap collapses, so the CI is
    the benchmarks' Clopper-Pearson intervals combined by MOVER (:func:`mover`, weights 1/K), which never shrinks to
    a point; one benchmark: its own cell's interval. NaNs when a group is empty."""
    arrays = [np.asarray(g, dtype=bool) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        return AverageAccuracy(math.nan, math.nan, math.nan, math.nan)
    means = [float(a.mean()) for a in arrays]
    se = accuracy_se(means, [a.size for a in arrays])
    if len(arrays) == 1:  # one benchmark: its accuracy's interval (exact below the cutoff), as its own cell shows
        one = accuracy_with_ci(arrays[0], level=level, n_bootstrap=n_bootstrap, seed=seed)
        return AverageAccuracy(one.accuracy, one.low, one.high, se)
    if min(a.size for a in arrays) < EXACT_INTERVAL_BELOW:
        exact = [clopper_pearson(int(a.sum()), int(a.size), level) for a in arrays]
        low, high = mover(means, exact, [1.0 / len(arrays)] * len(arrays))
        return AverageAccuracy(float(np.mean(means)), max(0.0, low), min(1.0, high), se)
    rng = np.random.default_rng(seed)
    replicates = np.zeros(n_bootstrap)
    for outcomes in arrays:
        replicates += rng.binomial(outcomes.size, outcomes.mean(), size=n_bootstrap) / outcomes.size
    replicates /= len(arrays)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return AverageAccuracy(float(np.mean(means)), float(low), float(high), se)


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


# --------------------------------------------------------------------------------------------
# Several strata at small n: the stratified sign test and the interval that inverts it
# --------------------------------------------------------------------------------------------
#: Values of the stratified sign statistic closer than this are one value (the test's tolerance).
TOLERANCE = 1e-12


def _log_choose(m: int) -> np.ndarray:
    return np.array([math.lgamma(m + 1) - math.lgamma(j + 1) - math.lgamma(m - j + 1) for j in range(m + 1)])


def sign_groups(counts: np.ndarray) -> list[tuple[float, int]]:
    """(weight ``1 / (K n)``, discordant questions ``D``) per size ``n`` among the strata of ``counts`` (rows n_k, b_k,
    c_k), strata without discordance left out: under a common theta the strata of one size add up to one
    ``Binomial(D, theta)`` (a sum of binomials of one p is binomial), so they are convolved as one."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    strata = len(counts)
    by_size: dict[int, int] = {}
    for n_k, b_k, c_k in counts:
        if b_k + c_k:
            by_size[int(n_k)] = by_size.get(int(n_k), 0) + int(b_k + c_k)
    return [(1.0 / (strata * n_k), d) for n_k, d in sorted(by_size.items())]


def sign_statistic(counts: np.ndarray) -> float:
    """The stratified sign statistic of ``counts`` (rows n_k, b_k, c_k), ``t = sum_k (b_k - c_k) / (K n_k)``: the
    observed mean of the per-stratum differences, computed once here for the test and for its interval."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    return float(np.sum((counts[:, 1] - counts[:, 2]) * (1.0 / (len(counts) * counts[:, 0]))))


def exact_support(counts: np.ndarray) -> float:
    """The bound on the support of :class:`SignDistribution` for ``counts``: the product over the strata's sizes of
    (discordant questions of that size + 1), at most the product of the strata's ``d_k + 1``; the convolution's
    arrays never exceed it."""
    return float(np.prod([d + 1.0 for _, d in sign_groups(counts)]))


class SignDistribution:
    """The exact distribution of the stratified sign statistic ``T = sum_k w_k (2 B_k - d_k)``, ``w_k = 1 / (K n_k)``,
    given the discordant counts ``d_k``, with ``B_k ~ Binomial(d_k, theta)`` independent (a common ``theta``, the
    share of discordant questions the first arm got right). At theta = 1/2 it is the stratified sign test's null.

    The support is built once by convolving the sizes' binomials (:func:`sign_groups`), merging values closer than
    :data:`TOLERANCE` after every step (strata of different sizes reach one value many ways), so it stays at most
    :func:`exact_support`; :meth:`probabilities` then costs one multiply and one ``bincount`` per size at any theta.
    """

    def __init__(self, counts: np.ndarray) -> None:
        values = np.zeros(1)
        self._steps: list[tuple[int, np.ndarray, np.ndarray, int]] = []
        for weight, d in sign_groups(counts):
            combined = (values[:, None] + weight * (2.0 * np.arange(d + 1) - d)[None, :]).ravel()
            order = np.argsort(combined, kind="stable")
            ordered = combined[order]
            starts = np.concatenate(([True], np.diff(ordered) > TOLERANCE))
            inverse = np.empty(combined.size, dtype=np.int64)
            inverse[order] = np.cumsum(starts) - 1
            values = ordered[starts]
            self._steps.append((np.arange(d + 1), _log_choose(d), inverse, values.size))
        self.values = values

    def probabilities(self, theta: float) -> np.ndarray:
        """``P_theta(T = v)`` for each value ``v`` of :attr:`values` (sorted ascending)."""
        probs = np.ones(1)
        for j, log_choose, inverse, size in self._steps:
            d = j.size - 1
            if theta <= 0.0 or theta >= 1.0:
                pmf = (j == (d if theta >= 1.0 else 0)).astype(float)
            else:
                pmf = np.exp(log_choose + j * math.log(theta) + (d - j) * math.log1p(-theta))
            probs = np.bincount(inverse, weights=np.outer(probs, pmf).ravel(), minlength=size)
        return probs

    def upper_tail(self, observed: float, theta: float = 0.5) -> float:
        """``P_theta(T >= observed)``, values within :data:`TOLERANCE` of it counted as equal."""
        return self.tails(observed, theta)[0]

    def lower_tail(self, observed: float, theta: float = 0.5) -> float:
        """``P_theta(T <= observed)``, values within :data:`TOLERANCE` of it counted as equal."""
        return self.tails(observed, theta)[1]

    def tails(self, observed: float, theta: float = 0.5) -> tuple[float, float]:
        """``(P_theta(T >= observed), P_theta(T <= observed))``, values within :data:`TOLERANCE` of it counted as
        equal, from one pass of :meth:`probabilities`."""
        probs = self.probabilities(theta)
        return (min(1.0, float(probs[self.values >= observed - TOLERANCE].sum())),
                min(1.0, float(probs[self.values <= observed + TOLERANCE].sum())))

    def p_value(self, observed: float) -> float:
        """The two-sided p of the stratified sign test, twice the smaller tail at theta = 1/2: the null is symmetric,
        so it is ``P(|T| >= |observed|)``, and it is below alpha exactly when one tail is below alpha / 2, the very
        numbers :func:`stratified_sign_interval` compares."""
        return min(1.0, 2.0 * min(self.tails(observed, 0.5)))


def stratified_sign_interval(counts: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The interval of the mean over strata of paired differences, ``Delta = mean_k (b_k - c_k) / n_k`` (``counts``
    rows n_k, b_k, c_k), that inverts the stratified sign test, so that it excludes 0 exactly when the test's exact p
    (:meth:`SignDistribution.p_value`) is below ``1 - level``.

    Construction (the several-strata form of :func:`mcnemar_interval`, as in Clopper and Pearson 1934): with
    ``d_k = b_k + c_k`` and ``w_k = 1 / (K n_k)``, ``T = sum_k w_k (2 b_k - d_k)`` is the observed difference itself.
    Given the ``d_k`` and a common ``theta``, ``b_k ~ Binomial(d_k, theta)``; ``P_theta(T >= t)`` rises with theta, so
    ``theta_L`` solves ``P_theta(T >= t) = alpha / 2`` and ``theta_U`` solves ``P_theta(T <= t) = alpha / 2``
    (brentq on the exact distribution, :class:`SignDistribution`; 0 and 1 where ``t`` is the least or the largest
    value). At theta = 1/2 the tails are the test's own, so ``theta_L > 1/2`` exactly when the upper tail is below
    alpha / 2 (the root is searched on the side of 1/2 that tail says), likewise ``theta_U < 1/2``, and the two-sided
    p is twice the smaller tail. ``theta`` is clamped to contain the point's ``theta_hat = S / sum_k w_k d_k``
    (``S = sum_k w_k b_k``), which never changes which side of 1/2 an end is on. The difference is
    ``psi (2 theta - 1)``, ``psi = mean_k d_k / n_k`` the mean discordance: each end ``2 theta - 1`` is scaled, as in
    :func:`mcnemar_interval`, by the bound of psi's interval (MOVER over the strata's Clopper-Pearson intervals at
    :data:`DISCORDANCE_LEVEL`) that moves it away from 0 when it is on the far side of 0 from the other end and toward
    0 otherwise; psi's lower bound is positive whenever some ``d_k > 0`` (it is at least ``sum_k w_k low_k``), so no
    end changes sign, and the interval excludes 0 exactly when the theta interval excludes 1/2, exactly when p < alpha.
    The shown difference ``psi_hat (2 theta_hat - 1)`` lies inside. One stratum: :func:`mcnemar_interval` itself.

    Agreement is by construction wherever the p is exact (:func:`r2mad_lab.report.inference.stratified_sign_p`
    convolves while :func:`exact_support` is at most ``EXACT_SUPPORT``), which is where
    :func:`r2mad_lab.report.inference.paired_estimate` uses it: several strata, one below the cutoff of a single
    test. Not elsewhere: with every stratum at or above the cutoff the shown CI is the stratified bootstrap's, and at
    small n beside a Monte Carlo p the MOVER combination of the strata's exact intervals; neither is tied to the
    test. The common theta is the model the interval inverts; its coverage under strata of different discordance and
    theta is measured in tests/report/test_intervals.py (0.970-1.000 at n = 4-14, 2-4 strata)."""
    from scipy.optimize import brentq  # lazy, as scipy.stats

    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    n, b, c = counts[:, 0], counts[:, 1], counts[:, 2]
    if len(counts) == 1:
        return mcnemar_interval(int(b[0]), int(c[0]), int(n[0]), level)
    if np.any(n <= 0):
        return math.nan, math.nan
    strata = len(counts)
    d = b + c
    weights = 1.0 / (strata * n)
    observed = sign_statistic(counts)
    tail = (1.0 - level) / 2.0
    distribution = SignDistribution(counts)
    upper_half, lower_half = distribution.tails(observed, 0.5)

    def end(which: int, at_half: float) -> float:  # which 0: theta_L from the upper tail; 1: theta_U from the lower
        side = distribution.upper_tail if which == 0 else distribution.lower_tail

        def excess(theta: float) -> float:
            return side(observed, theta) - tail

        if which == 0:
            if observed <= distribution.values[0] + TOLERANCE:
                return 0.0
            if at_half < tail:  # the test rejects upward: the root is above 1/2
                return max(float(brentq(excess, 0.5, 1.0, xtol=1e-11)), math.nextafter(0.5, 1.0))
            return float(brentq(excess, 0.0, 0.5, xtol=1e-11)) if at_half > tail else 0.5
        if observed >= distribution.values[-1] - TOLERANCE:
            return 1.0
        if at_half < tail:  # the test rejects downward: the root is below 1/2
            return min(float(brentq(excess, 0.0, 0.5, xtol=1e-11)), math.nextafter(0.5, 0.0))
        return float(brentq(excess, 0.5, 1.0, xtol=1e-11)) if at_half > tail else 0.5

    theta_low, theta_high = end(0, upper_half), end(1, lower_half)
    spread = float(np.sum(weights * d))
    if spread > 0:  # the point's theta inside (it never crosses 1/2: theta_hat > 1/2 exactly when t > 0)
        theta_hat = float(np.sum(weights * b)) / spread
        theta_low, theta_high = min(theta_low, theta_hat), max(theta_high, theta_hat)
    psi_low, psi_high = mover((d / n).tolist(), [clopper_pearson(int(k), int(m), DISCORDANCE_LEVEL)
                                                  for k, m in zip(d, n, strict=False)], [1.0 / strata] * strata)
    psi_low, psi_high = max(psi_low, 0.0), min(psi_high, 1.0)
    low, high = 2.0 * theta_low - 1.0, 2.0 * theta_high - 1.0
    return (low * (psi_high if low < 0 else psi_low)), (high * (psi_high if high > 0 else psi_low))
