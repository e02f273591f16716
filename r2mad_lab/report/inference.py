"""Inference: the one rule by which the package calls a difference significant, a ranking or a win (docs/statistics.md).

Every table, caption, "What this shows" sentence, headline and manifest note that states a conclusion takes it from
here:

- **Estimate**: the paired difference of two runs on the same questions, with its 95% CI. Over several strata
  (benchmarks, seeds) the estimate is the quantity the tables show, the mean of the per-stratum differences
  ``d = (1/K) sum_k (acc_a,k - acc_b,k)``; its CI resamples questions within each stratum (a stratified paired
  bootstrap: per stratum a multinomial draw of the (only a, only b, concordant) counts); at small n the exact
  intervals that invert the test below (:func:`paired_estimate`).
- **Test**: in one stratum McNemar's exact test (the two-sided binomial test of the ``b_k`` questions only ``a`` got
  right among the ``b_k + c_k`` discordant ones). Over several strata the stratified sign test of the same ``d``:
  under no difference each discordant question of stratum k is +1/n_k or -1/n_k with probability 1/2, independently,
  so ``T = sum_k (2 B_k - D_k) / (K n_k)`` with ``B_k ~ Binomial(D_k, 1/2)``; the two-sided p is ``P(|T| >= |d|)``,
  exact by convolution while the support is small (:data:`EXACT_SUPPORT`; the distribution's one owner is
  :class:`r2mad_lab.report.intervals.SignDistribution`, which the small-sample CI inverts), else from
  :data:`MONTE_CARLO_DRAWS` seeded draws
  (``(1 + hits) / (1 + draws)``). With one stratum it is McNemar's exact test; with equal n_k it is the exact
  stratified McNemar (Cochran-Mantel-Haenszel for matched pairs).
- **Family**: the tests one table or one sentence makes at once; their p-values are Holm-adjusted
  (:mod:`r2mad_lab.report.multiplicity`) and the family is named beside the verdict.
- **Verdict**: "significant", "ranks first", "wins", "beats", "holds significantly" only from an adjusted p below
  :data:`ALPHA`; otherwise "not distinguishable from no difference at n = N" (:func:`verdict`).
- **Small samples**: below :func:`minimum_n` paired questions (the smallest n at which any difference is detectable
  with 80% power, :func:`r2mad_lab.report.mcnemar.planned_minimum_detectable_effect`) no verdict word is generated and
  every table says the sample cannot support inference (:func:`small_sample_line`).
- **Trend** along a numeric swept axis (:func:`trend_test`): the OLS slope of the shown value against the axis, with
  a paired permutation test that permutes each question's outcomes across the points (the question as its own
  stratum: under no effect of the axis its outcomes are exchangeable over the points).

The practice follows Miller (2024), "Adding Error Bars to Evals: A Statistical Approach to Language Model
Evaluations" (arXiv:2411.00640): standard errors/CIs on every score, paired differences on the same questions,
clustering where questions are grouped (here: strata), power analysis before the run. This module goes further in
three ways: exact tests (no normal approximation at small n), a multiplicity adjustment named beside every verdict,
and verdict words generated only from the adjusted p.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np

from r2mad_lab.report import multiplicity
from r2mad_lab.report.mcnemar import planned_minimum_detectable_effect

ALPHA = multiplicity.ALPHA
TARGET_POWER = 0.8
#: Draws of the stratified sign test and the trend's permutation test when the exact support is too large.
MONTE_CARLO_DRAWS = 20_000
#: Largest support convolved exactly: the bound :func:`r2mad_lab.report.intervals.exact_support`, the product over
#: the strata's sizes of (their discordant questions + 1), strata of one size being one binomial (it was the product
#: over the strata of D_k + 1, at most 200,000). It covers any number of strata of at most five sizes below the
#: cutoff of a single test (15^5 < 10^6), where the small-sample interval inverts the exact test.
EXACT_SUPPORT = 1_000_000
#: Words that state a conclusion; generated only from an adjusted p below alpha (tests/report/test_inference.py greps
#: for them).
VERDICT_WORDS = ("significant", "ranks first", "wins", "beats", "holds significantly")
NULL_PHRASE = "not distinguishable from no difference"


# --------------------------------------------------------------------------------------------
# The estimate and its test
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairedEstimate:
    """The paired difference ``a - b`` (mean over strata of the per-stratum differences), its CI and its test."""

    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int  # paired questions (over every stratum)
    a_only: int
    b_only: int
    strata: int
    test: str  # the test's name as generated text states it
    se: float = math.nan  # standard error of the difference (the bootstrap's standard deviation)
    draws: int = 0  # Monte Carlo draws behind ``p_value``; 0: the p is exact

    @property
    def value_a_minus_b(self) -> float:
        return self.difference


def _as_arrays(a: Sequence[bool], b: Sequence[bool],
               strata: Sequence[Any] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.asarray(a, dtype=bool)
    y = np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired estimate: {x.size} outcomes for a but {y.size} for b")
    if x.size == 0:
        raise ValueError("paired estimate: no paired questions")
    labels = np.zeros(x.size, dtype=np.int64) if strata is None else np.unique(np.asarray(strata, dtype=str),
                                                                             return_inverse=True)[1].ravel()
    if labels.size != x.size:
        raise ValueError(f"paired estimate: {labels.size} strata labels for {x.size} paired questions")
    return x, y, labels


def stratum_counts(a: Sequence[bool], b: Sequence[bool], strata: Sequence[Any] | None = None) -> np.ndarray:
    """One row per stratum: (n_k, only a right, only b right)."""
    x, y, labels = _as_arrays(a, b, strata)
    rows = []
    for k in range(int(labels.max()) + 1):
        mine = labels == k
        rows.append((int(mine.sum()), int(np.sum(x[mine] & ~y[mine])), int(np.sum(~x[mine] & y[mine]))))
    return np.asarray(rows, dtype=np.int64)


def stratified_sign_p(counts: np.ndarray, seed: int = 0) -> float:
    """Two-sided p of the stratified sign test of ``d = mean_k (b_k - c_k) / n_k`` (module docstring); ``counts``
    rows (n_k, b_k, c_k). One stratum: McNemar's exact p. Several: exact while the merged support is at most
    :data:`EXACT_SUPPORT` (:func:`r2mad_lab.report.intervals.exact_support`), twice the smaller tail of the exact
    null (:class:`r2mad_lab.report.intervals.SignDistribution`, the one owner of that distribution, which the
    small-sample interval inverts), else Monte Carlo."""
    from scipy.stats import binom  # lazy: scipy.stats takes seconds to import

    from r2mad_lab.report.intervals import TOLERANCE, SignDistribution, sign_statistic

    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    strata = len(counts)
    n, b, c = counts[:, 0], counts[:, 1], counts[:, 2]
    d = b + c
    if not d.sum():
        return 1.0
    if strata == 1:  # McNemar's exact test (scipy's binomtest gives the same, it is the symmetric binomial)
        k, m = int(b[0]), int(d[0])
        tail = binom.cdf(min(k, m - k), m, 0.5)
        return float(min(1.0, 2.0 * tail))
    observed = sign_statistic(counts)
    if not is_monte_carlo(counts):
        return SignDistribution(counts).p_value(observed)
    weights = 1.0 / (strata * n)
    rng = np.random.default_rng(seed)
    draws = rng.binomial(d[None, :], 0.5, size=(MONTE_CARLO_DRAWS, strata))
    total = ((2 * draws - d[None, :]) * weights[None, :]).sum(axis=1)
    hits = int(np.sum(np.abs(total) >= abs(observed) - TOLERANCE))
    return (1 + hits) / (1 + MONTE_CARLO_DRAWS)


def is_monte_carlo(counts: np.ndarray) -> bool:
    """Whether :func:`stratified_sign_p` of ``counts`` is a Monte Carlo p (the exact support is too large)."""
    from r2mad_lab.report.intervals import exact_support

    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    d = counts[:, 1] + counts[:, 2]
    return len(counts) > 1 and bool(d.sum()) and exact_support(counts) > EXACT_SUPPORT


def test_name(strata: int, monte_carlo: bool = False) -> str:
    if strata == 1:
        return "exact McNemar"
    if monte_carlo:
        return (f"stratified sign test over {strata} strata (McNemar per stratum, the mean of their differences; "
                f"Monte Carlo p over {MONTE_CARLO_DRAWS:,} draws, resolution {1.0 / (1 + MONTE_CARLO_DRAWS):.1e})")
    return f"stratified exact sign test over {strata} strata (McNemar per stratum, the mean of their differences)"


def paired_estimate(a: Sequence[bool], b: Sequence[bool], strata: Sequence[Any] | None = None, *,
                    level: float = 0.95, n_bootstrap: int = 2000, seed: int = 0) -> PairedEstimate:
    """The paired difference ``a - b`` on the same questions (the mean of the per-stratum differences), its CI and
    its exact test (module docstring). The CI of one stratum is the exact interval that agrees with McNemar's exact
    test by construction (:func:`r2mad_lab.report.intervals.mcnemar_interval`: it excludes 0 exactly when p < 0.05,
    and keeps its coverage at small n). Over several strata where a stratum is below the cutoff of a single test (the
    bootstrap collapses there) it is the inversion of the stratified sign test
    (:func:`r2mad_lab.report.intervals.stratified_sign_interval`), which agrees with the test's exact p by
    construction and never collapses to a point; in the rare such case whose p is Monte Carlo (a support above
    :data:`EXACT_SUPPORT`: several strata of many sizes) the strata's exact intervals combined by MOVER
    (:func:`r2mad_lab.report.intervals.mover`), which need not agree with the p. Otherwise (every stratum at or above
    the cutoff) the stratified bootstrap's, not tied to the test either. The SE is the bootstrap's standard
    deviation of the same estimate."""
    counts = stratum_counts(a, b, strata)
    n, b_only, c_only = counts[:, 0], counts[:, 1], counts[:, 2]
    strata_n = len(counts)
    difference = float(np.mean((b_only - c_only) / n))
    rng = np.random.default_rng(seed)
    total = np.zeros(n_bootstrap)
    for n_k, b_k, c_k in counts:
        draw = rng.multinomial(n_k, [b_k / n_k, c_k / n_k, 1.0 - (b_k + c_k) / n_k], size=n_bootstrap)
        total += (draw[:, 0] - draw[:, 1]) / n_k
    total /= strata_n
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(total, [tail, 1.0 - tail])
    monte_carlo = is_monte_carlo(counts)
    if strata_n == 1:  # the exact interval that agrees with McNemar's exact test (never a bootstrap point at small n)
        from r2mad_lab.report.intervals import mcnemar_interval

        low, high = mcnemar_interval(int(b_only[0]), int(c_only[0]), int(n[0]), level)
    elif int(n.min()) < cutoff() and not monte_carlo:  # the stratified sign test inverted: agrees with its exact p
        from r2mad_lab.report.intervals import stratified_sign_interval

        low, high = stratified_sign_interval(counts, level)
    elif int(n.min()) < cutoff():  # small n beside a Monte Carlo p: the strata's exact intervals, by MOVER
        from r2mad_lab.report.intervals import mcnemar_interval, mover

        low, high = mover((b_only - c_only) / n, [mcnemar_interval(int(b), int(c), int(m), level)
                                                  for m, b, c in counts], [1.0 / strata_n] * strata_n)
    return PairedEstimate(difference, float(low), float(high), stratified_sign_p(counts, seed), int(n.sum()),
                          int(b_only.sum()), int(c_only.sum()), strata_n, test_name(strata_n, monte_carlo),
                          float(np.std(total, ddof=1)) if n_bootstrap > 1 else math.nan,
                          MONTE_CARLO_DRAWS if monte_carlo else 0)


# --------------------------------------------------------------------------------------------
# Small samples
# --------------------------------------------------------------------------------------------
#: :func:`minimum_n` at the Holm level of a family of m tests (alpha = 0.05 / m, 80% power), m = 1 .. 30: a constant
#: of the rule, computed once (``tests/report/test_inference.py`` recomputes it), so a start pays no scipy for it.
MINIMUM_N_AT_HOLM: dict[int, int] = {1: 15, 2: 17, 3: 17, 4: 19, 5: 19, 6: 19, 7: 21, 8: 21, 9: 21, 10: 21, 11: 21,
                                     12: 21, **{m: 24 for m in range(13, 26)}, **{m: 26 for m in range(26, 31)}}


@functools.lru_cache(maxsize=64)
def minimum_n(alpha: float = ALPHA, power: float = TARGET_POWER) -> int:
    """The smallest number of paired questions at which the exact McNemar test at ``alpha`` detects *some* difference
    with ``power``: the planned minimum detectable effect
    (:func:`r2mad_lab.report.mcnemar.planned_minimum_detectable_effect`, a method at accuracy 0.5 against one up to 1.0,
    the assumed correlation) exists. Below it no verdict is generated.
    At the Holm levels 0.05 / m (m <= 30) and 80% power it is read from :data:`MINIMUM_N_AT_HOLM`."""
    if power == TARGET_POWER:
        for m, n in MINIMUM_N_AT_HOLM.items():
            if math.isclose(alpha, ALPHA / m, rel_tol=1e-12):
                return n
    return computed_minimum_n(alpha, power)


def computed_minimum_n(alpha: float = ALPHA, power: float = TARGET_POWER) -> int:
    """:func:`minimum_n` computed (scipy): the search over n."""
    for n in range(1, 1000):
        if not math.isnan(planned_minimum_detectable_effect(n, 0.5, alpha=alpha, power=power)):
            return n
    return 1000


def cutoff(alpha: float = ALPHA, family: int = 1) -> int:
    """The no-inference cutoff of a test in a Holm family of ``family`` tests: :func:`minimum_n` at alpha / family
    (the level of Holm's first step), applied to each benchmark cell's paired questions."""
    return minimum_n(alpha / max(1, int(family)))


def too_small(n: int | float, alpha: float = ALPHA, family: int = 1) -> bool:
    """``n`` paired questions (per compared benchmark cell) cannot support inference in a family of ``family`` tests
    (:func:`cutoff`)."""
    return n is None or (isinstance(n, float) and math.isnan(n)) or int(n) < cutoff(alpha, family)


def family_size_of(name: str | None) -> int:
    """The size a family's name states (``"the claims family of 14"``, ``"the 5 cells of this table"``, ``"each
    cell's 4 points"``); 1 when it states none. Generated text names a family with its size, and the checker reads the
    size back with this one function."""
    import re

    sizes = re.findall(r"(?:\bof|\bthe|'s) ([0-9]+)\b", name or "")
    return int(sizes[-1]) if sizes else 1


def cutoff_phrase(alpha: float = ALPHA, family: int = 1, family_name: str | None = None) -> str:
    """``below n = 24, the cutoff of the claims family of 14``: the one way a text states a family's no-inference cutoff
    (:func:`cutoff`), its family named, so that every text of one family states the same n
    (:func:`r2mad_lab.report.consistency.cutoff_problems` checks it). ``family_name`` ends with its size ("... of 14");
    without one, a family of ``family`` tests (one: "a single test")."""
    m = max(1, int(family))
    if family_name is None:
        family_name = "a single test" if m == 1 else f"a family of {m}"
    return f"below n = {cutoff(alpha, m)}, the cutoff of {family_name}"


def small_sample_line(n: int | float, alpha: float = ALPHA, power: float = TARGET_POWER,
                      what: str = "paired questions", family: int = 1, family_name: str | None = None) -> str:
    """The sentence every table and caption of a sample below :func:`cutoff` carries; it names the family whose
    cutoff it states (:func:`cutoff_phrase`): a text that draws no verdict of its own states the cutoff of a single
    test, the lowest of any family, so a sample below it supports no inference in any family."""
    m = max(1, int(family))
    level = alpha / m
    shown = "?" if n is None or (isinstance(n, float) and math.isnan(n)) else f"{int(n)}"
    at = f"alpha = {alpha:g}" if m <= 1 else f"the Holm level alpha / {m} = {level:.2g}"
    return (f"Small sample: n = {shown} {what} is {cutoff_phrase(alpha, m, family_name)} (the smallest n at which the "
            f"exact McNemar test at {at} detects any difference with {power:.0%} power, docs/statistics.md): this "
            f"sample cannot support inference, and no verdict is drawn from it; an accuracy's interval at this n is "
            f"the exact Clopper-Pearson one.")


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------
def fmt_p(p: float, draws: int = 0) -> str:
    """``p = 0.031``, ``p = 2.0e-05``, ``p = 1``; a Monte Carlo p (``draws`` > 0, ``(1 + hits) / (1 + draws)``) is
    named as such with its resolution: ``p = 0.0123 (Monte Carlo, 20,000 draws)``, and at its floor, where no draw
    reached the observed value, ``p < 1/20,001 (Monte Carlo, 20,000 draws)``: the p is at most the floor, never
    "exact" and never printed as a value. ``draws`` 0: an exact p (a p equal to the default draws' floor is read as
    that floor, so a caller that lost the count still never prints it as a value)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "p = --"
    p = float(p)
    if not draws and math.isclose(p, 1.0 / (1 + MONTE_CARLO_DRAWS), rel_tol=1e-9):
        draws = MONTE_CARLO_DRAWS
    if draws:
        if p <= 1.0 / (1 + draws) * (1 + 1e-9):
            return f"p < 1/{draws + 1:,} (Monte Carlo, {draws:,} draws)"
        shown = f"{p:.3g}" if p >= 0.001 else f"{p:.1e}"
        return f"p = {shown} (Monte Carlo, {draws:,} draws)"
    return f"p = {p:.3g}" if p >= 0.001 else f"p = {p:.1e}"


def p_kind(p: float, draws: int = 0) -> str:
    """What a table's ``p`` cell is (:func:`fmt_p`'s wording, for a column beside a numeric p): ``exact``, ``Monte
    Carlo, 20,000 draws``, or at the floor ``Monte Carlo floor: p < 1/20,001`` (the number shown is then a bound)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "--"
    text = fmt_p(p, draws)
    if "Monte Carlo" not in text:
        return "exact"
    return (f"Monte Carlo floor: {text.split(' (')[0]}" if text.startswith("p < ")
            else text[text.index("(") + 1:-1])


def decides(p_adjusted: float, n: int | float, alpha: float = ALPHA, family_size: int = 1) -> bool:
    """The rule: an adjusted p below ``alpha`` on a sample large enough for inference in its family
    (``n``: the smallest benchmark cell's paired questions; :func:`cutoff`)."""
    return (p_adjusted is not None and not math.isnan(float(p_adjusted)) and float(p_adjusted) < alpha
            and not too_small(n, alpha, family_size))


def verdict(p_adjusted: float, n: int | float, family: str, alpha: float = ALPHA,
            family_size: int | None = None) -> str:
    """The verdict phrase of one test: ``significant (Holm-adjusted p = 0.003 < 0.05 over <family>)`` or
    ``not distinguishable from no difference at n = 40 (Holm-adjusted p = 0.2 over <family>)``; below
    :func:`cutoff` (at the family's Holm level) no verdict phrase at all (neither word nor null phrase)."""
    adjusted = f"{multiplicity.RULE}-adjusted {fmt_p(p_adjusted)}"
    family_size = family_size_of(family) if family_size is None else family_size
    if too_small(n, alpha, family_size):
        return (f"no inference at n = {int(n) if n == n else '?'} ({cutoff_phrase(alpha, family_size, family)}, the "
                f"smallest n with 80% power for any difference at its Holm level; {adjusted})")
    if decides(p_adjusted, n, alpha, family_size):
        return f"significant ({adjusted} < {alpha:g}, over {family})"
    return f"{NULL_PHRASE} at n = {int(n)} ({adjusted} over {family})"


def holm_over(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values of one family (NaN is no test)."""
    return multiplicity.holm(p_values)


# --------------------------------------------------------------------------------------------
# Trend along a numeric axis
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trend:
    slope: float  # change of the shown value per unit of the axis
    p_value: float
    n: int  # questions
    points: int
    draws: int = 0  # the permutation test's Monte Carlo draws


def _slopes(values: np.ndarray, x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Mean over groups (the other axes' settings) of the OLS slope of ``values[..., point]`` on ``x``."""
    total = np.zeros(values.shape[:-1])
    count = 0
    for g in np.unique(groups):
        mine = groups == g
        if mine.sum() < 2:
            continue
        xs = x[mine] - x[mine].mean()
        denominator = float(np.sum(xs ** 2))
        if denominator == 0:
            continue
        total = total + (values[..., mine] * xs).sum(axis=-1) / denominator
        count += 1
    return total / max(count, 1)


def trend_test(outcomes: np.ndarray, x: Sequence[float], strata: Sequence[Any] | None = None,
               groups: Sequence[Any] | None = None, *, draws: int = 4000, seed: int = 0) -> Trend:
    """Test of a trend of the shown value along a numeric axis: ``outcomes`` one row per question, one column per
    point (1 correct, 0 wrong); ``x`` the points' values; ``strata`` the questions' benchmarks (the value is the mean
    of the per-stratum accuracies, as the tables'); ``groups`` the points' settings of the other axes (the slope is
    taken within each and averaged). The p of a paired permutation test: each question's outcomes are permuted
    across the points of each group, seeded (module docstring)."""
    y = np.asarray(outcomes, dtype=float)
    xs = np.asarray(x, dtype=float)
    if y.ndim != 2 or y.shape[1] != xs.size or xs.size < 2:
        raise ValueError(f"trend test: expected one column per point ({xs.size}), found shape {y.shape}")
    labels = np.zeros(len(y), dtype=np.int64) if strata is None else np.unique(np.asarray(strata, dtype=str),
                                                                             return_inverse=True)[1].ravel()
    group = np.zeros(xs.size, dtype=np.int64) if groups is None else np.unique(np.asarray(groups, dtype=str),
                                                                             return_inverse=True)[1].ravel()
    k = int(labels.max()) + 1
    weights = np.zeros(len(y))
    for s in range(k):
        weights[labels == s] = 1.0 / (k * np.sum(labels == s))

    def shown(matrix: np.ndarray) -> np.ndarray:  # (..., questions, points) -> (..., points)
        return (np.tensordot(matrix, weights, axes=([-2], [0])) if matrix.ndim == 2
                else np.einsum("dqp,q->dp", matrix, weights))

    observed = float(_slopes(shown(y), xs, group))
    rng = np.random.default_rng(seed)
    hits = 0
    batch = 500
    done = 0
    while done < draws:
        size = min(batch, draws - done)
        permuted = np.repeat(y[None, :, :], size, axis=0)
        for g in np.unique(group):
            columns = np.flatnonzero(group == g)
            keys = rng.random((size, len(y), columns.size))
            order = np.argsort(keys, axis=-1)
            permuted[:, :, columns] = np.take_along_axis(y[None, :, columns].repeat(size, axis=0), order, axis=-1)
        slopes = _slopes(shown(permuted), xs, group)
        hits += int(np.sum(np.abs(slopes) >= abs(observed) - 1e-12))
        done += size
    return Trend(observed, (1 + hits) / (1 + draws), int(len(y)), int(xs.size), int(draws))


def trend_phrase(trend: Trend, axis: str, family: str, p_adjusted: float | None = None, alpha: float = ALPHA) -> str:
    """``slope +0.12 per unit of gamma, paired permutation p = 0.004 (Holm ...): significant`` (the rule's words)."""
    p = trend.p_value if p_adjusted is None else p_adjusted
    return (f"slope {trend.slope:+.3g} per unit of {axis} (paired permutation test over {trend.n} questions and "
            f"{trend.points} points, {fmt_p(trend.p_value, trend.draws)}): {verdict(p, trend.n, family, alpha)}")


# --------------------------------------------------------------------------------------------
# Replicates: several seeds on the same questions
# --------------------------------------------------------------------------------------------
class ClusteredMean(NamedTuple):
    """A mean over strata with its CI and SE, the questions resampled as clusters (:func:`clustered_mean_ci`)."""

    estimate: float
    ci_low: float
    ci_high: float
    se: float  # the bootstrap's standard deviation of the same estimate


def clustered_mean_ci(values: dict[str, np.ndarray], *, level: float = 0.95, n_bootstrap: int = 2000,
                      seed: int = 0) -> ClusteredMean:
    """The mean over strata of the per-stratum mean of ``values[stratum]`` (one row per question, one column per
    seed) with a CI that resamples questions within each stratum, each question with all its seeds (the questions
    are the clusters: the seeds of one question are not independent, Miller 2024 sec. 2.2), and the SE of the same
    bootstrap."""
    if not values:
        return ClusteredMean(math.nan, math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    estimate = float(np.mean([np.asarray(v, dtype=float).mean() for v in values.values()]))
    total = np.zeros(n_bootstrap)
    for matrix in values.values():
        rows = np.asarray(matrix, dtype=float).mean(axis=1)
        picks = rng.integers(0, rows.size, size=(n_bootstrap, rows.size))
        total += rows[picks].mean(axis=1)
    total /= len(values)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(total, [tail, 1.0 - tail])
    se = float(np.std(total, ddof=1)) if n_bootstrap > 1 else math.nan
    return ClusteredMean(estimate, float(low), float(high), se)


def sign_flip_p(values: dict[str, np.ndarray], *, draws: int = MONTE_CARLO_DRAWS, seed: int = 0) -> float:
    """Two-sided p of the stratified sign-flip test of ``T = mean_k mean_q d_q``, one value ``d_q`` per question
    (``values[stratum]``): under no difference the variant and the reference are exchangeable on each question, so
    each ``d_q`` is ``+d_q`` or ``-d_q`` with probability 1/2, independently. Monte Carlo over ``draws`` seeded sign
    draws, ``p = (1 + hits) / (1 + draws)`` (a valid p; its resolution is ``1 / (1 + draws)``)."""
    strata = [np.asarray(v, dtype=float).ravel() for v in values.values() if np.asarray(v).size]
    if not strata:
        return math.nan
    weights = np.concatenate([np.full(v.size, 1.0 / (len(strata) * v.size)) for v in strata])
    d = np.concatenate(strata) * weights
    observed = abs(float(d.sum()))
    if not np.any(d):
        return 1.0
    rng = np.random.default_rng(seed)
    hits, done = 0, 0
    while done < draws:
        size = min(2000, draws - done)
        signs = rng.integers(0, 2, size=(size, d.size), dtype=np.int8) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) >= observed - 1e-12))
        done += size
    return (1 + hits) / (1 + draws)


def monte_carlo_name(test: str, draws: int = MONTE_CARLO_DRAWS) -> str:
    """A Monte Carlo test's name as generated text states it, with its resolution (the smallest p it can give)."""
    return f"{test}, Monte Carlo over {draws:,} draws (p resolution {1.0 / (1 + draws):.1e})"


def pooled_paired(a: dict[str, np.ndarray], b: dict[str, np.ndarray], *, seed: int = 0, n_bootstrap: int = 2000,
                  draws: int = MONTE_CARLO_DRAWS) -> PairedEstimate:
    """A variant ``a`` against ``b`` over several seeds: per stratum (benchmark) a matrix, one row per question and
    one column per seed (the same seed in ``a`` and ``b``: common random numbers). Each question is reduced to one
    value first, its mean paired difference over the seeds (as inspect's epochs reducers do): the estimate is the
    mean over strata of the per-stratum means of those values, with a CI resampling questions
    (:func:`clustered_mean_ci`), and the test the stratified sign-flip test on the questions (:func:`sign_flip_p`):
    the seeds of one question are not independent, so the question is the unit. ``n`` counts questions;
    ``a_only`` / ``b_only`` count the questions whose mean difference is above / below 0."""
    differences = {}
    for stratum in a:
        x = np.asarray(a[stratum], dtype=float)
        y = np.asarray(b[stratum], dtype=float)
        differences[stratum] = x - y
    per_question = {k: v.mean(axis=1) for k, v in differences.items()}
    estimate, low, high, se = clustered_mean_ci(differences, seed=seed, n_bootstrap=n_bootstrap)
    seeds = next(iter(a.values())).shape[1] if a else 0
    values = np.concatenate(list(per_question.values())) if per_question else np.zeros(0)
    return PairedEstimate(estimate, low, high, sign_flip_p(per_question, draws=draws, seed=seed), int(values.size),
                          int(np.sum(values > 0)), int(np.sum(values < 0)), len(per_question),
                          monte_carlo_name(f"stratified sign-flip test on the questions' mean differences over "
                                           f"{seeds} seeds ({len(per_question)} benchmarks)", draws), se, int(draws))


def count_phrase(p_adjusted: Sequence[float], n: Sequence[float], family: str, alpha: float = ALPHA) -> str:
    """How many tests of one family the rule calls significant, the family named: ``2 of 25 significant (p_holm <
    0.05, Holm over <family>)``; tests below the family's :func:`cutoff` (at the Holm level of its m tests) are counted
    apart and, when every one is, no verdict word at all (``no inference: ... below n = 24, the cutoff of ...``)."""
    tests = [(p, m) for p, m in zip(p_adjusted, n, strict=False) if not (isinstance(p, float) and math.isnan(p))]
    stated = family_size_of(family)  # a family named with its size (a sweep's: each cell's points) is that size
    size = stated if stated > 1 else max(1, len(tests))
    phrase = cutoff_phrase(alpha, size, family if stated == size else f"{family} (a family of {size})")
    small = [t for t in tests if too_small(t[1], alpha, size)]
    if tests and len(small) == len(tests):
        return f"no inference for any of the {len(tests)} (n at most {int(max(m for _, m in tests))}, {phrase})"
    decided = sum(decides(p, m, alpha, size) for p, m in tests)
    text = (f"{decided} of {len(tests) - len(small)} significant (p_holm < {alpha:g}, {multiplicity.RULE} over "
            f"{family}), the rest {NULL_PHRASE} at their n")
    if small:
        text += f"; {len(small)} {phrase}: no inference"
    return text


# --------------------------------------------------------------------------------------------
# The check of generated text: every verdict word beside an adjusted p below alpha
# --------------------------------------------------------------------------------------------
_WORDS = r"\b(significant(?:ly)?|ranks first|wins|beats|holds significantly)\b"
_ADJUSTED = r"(?:Holm-adjusted p|adjusted p|p_holm)\s*<?=\s*([0-9.]+(?:e[-+]?[0-9]+)?)"
_CRITERION = (r"(?:(?:Holm-adjusted p|adjusted p|p_holm)(?:\s*=\s*[0-9.e+-]+(?:\s+at most,)?)?\s*<\s*|"
              r"Holm-adjusted over [^.;]*?alpha = )(0?\.[0-9]+)")


def verdict_problems(text: str, alpha: float = ALPHA) -> list[str]:
    """The verdict words of generated ``text`` that the rule does not back: each must be followed (within 200
    characters) by its adjusted p below ``alpha`` ("Holm-adjusted p = 0.003", "p_holm = 0.01"), or stand beside the
    criterion itself ("p_holm < 0.05", a count of tests decided by it), or be a table's column header beside
    ``p_holm``. "not significant" is never generated (the rule says "not distinguishable from no difference").
    A benchmark's own text (a prompt's ``<question>``) is not generated and not checked."""
    import re

    text = re.sub(r"<question>.*?</question>", "<question>...</question>", text, flags=re.DOTALL)  # benchmark data
    problems = []
    for match in re.finditer(_WORDS, text, flags=re.IGNORECASE):
        start, end = match.span()
        context = text[max(0, start - 60):end + 60].replace("\n", " ")
        if re.search(r"\bnot\s+(?:\w+\s+)?$", text[max(0, start - 12):start], flags=re.IGNORECASE):
            problems.append(f"'not {match.group(0)}' (say '{NULL_PHRASE}'): ...{context}...")
            continue
        line = text[text.rfind("\n", 0, start) + 1:(text.find("\n", end) + 1 or len(text) + 1) - 1]
        if match.group(0).lower() == "significant" and re.search(r"\bp_holm\b", line) and not re.search(r"[=<]", line):
            continue  # a table header naming the column beside p_holm
        after = text[end:end + 200]
        adjusted = re.search(_ADJUSTED, after)
        if adjusted:
            if float(adjusted.group(1).rstrip(".")) >= alpha:
                problems.append(f"'{match.group(0)}' with adjusted p = {adjusted.group(1)} >= {alpha:g}: "
                                f"...{context}...")
            continue
        window = text[max(0, start - 300):end + 300]
        criterion = re.search(_CRITERION, window)
        if criterion and float(criterion.group(1)) <= alpha:
            continue
        problems.append(f"'{match.group(0)}' without an adjusted p below {alpha:g} beside it: ...{context}...")
    return problems
