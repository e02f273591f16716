"""Statistics of accuracy: a run's accuracy with its CI (Clopper and Pearson 1934 below the small-sample n).

Accuracy CI: percentile bootstrap over samples. Resampling n Bernoulli outcomes with replacement
and averaging is exactly a Binomial(n, p_hat) / n draw, so the B bootstrap replicates are drawn
as one vectorised ``rng.binomial`` call (seeded). Below :data:`EXACT_INTERVAL_BELOW` questions the
interval is the exact Clopper-Pearson one (:func:`clopper_pearson`, the one owner of that interval: the report's exact
intervals in :mod:`r2mad_lab.report.intervals` build on it).

These are the estimators below the report: a run's ``metrics.json`` (:mod:`r2mad_lab.experiments.metrics`) needs
the accuracy CI, so they live low enough for the run cell; the Average column's CI
(:func:`r2mad_lab.report.intervals.average_accuracy`), every paired test (McNemar per benchmark, the stratified
sign test of an Average) and the rule that turns estimates into verdicts (Holm families, verdict words) is
:mod:`r2mad_lab.report.inference`, its one owner.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class Accuracy:
    accuracy: float
    low: float
    high: float
    n: int
    level: float
    n_bootstrap: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        pct = round(self.level * 100)
        return f"{self.accuracy:.3f} [{pct}% CI {self.low:.3f}, {self.high:.3f}] (n={self.n})"


#: Below this many questions an accuracy's CI is the exact Clopper-Pearson interval, not the percentile bootstrap (the
#: rule's small-sample n at alpha = 0.05, r2mad_lab.report.inference.minimum_n; docs/statistics.md rule 6).
EXACT_INTERVAL_BELOW = 15


@functools.lru_cache(maxsize=4096)
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of the proportion ``k / n``; [0, 1] when ``n`` is 0 (cached: a pure
    function of small integers, which the stratified interval asks for once per stratum)."""
    if n <= 0:
        return 0.0, 1.0
    from scipy.stats import beta  # lazy: scipy.stats takes seconds to import

    tail = (1.0 - level) / 2.0
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1.0 - tail, k + 1, n - k))
    return low, high


def accuracy_with_ci(
    correct: Sequence[bool] | np.ndarray, *, level: float = 0.95, n_bootstrap: int = 10_000, seed: int = 0
) -> Accuracy:
    """Accuracy with a percentile bootstrap CI (seeded; see the module docstring), the exact Clopper-Pearson interval
    below :data:`EXACT_INTERVAL_BELOW` questions (``n_bootstrap`` recorded as 0). Empty -> NaN."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"accuracy_with_ci: level must be in (0, 1), found {level}")
    if n_bootstrap < 1:
        raise ValueError(f"accuracy_with_ci: n_bootstrap must be >= 1, found {n_bootstrap}")
    x = np.asarray(correct, dtype=bool)
    n = int(x.size)
    if n == 0:
        return Accuracy(math.nan, math.nan, math.nan, 0, level, n_bootstrap)
    p = float(x.mean())
    alpha = (1.0 - level) / 2.0
    if n < EXACT_INTERVAL_BELOW:
        # the percentile bootstrap collapses at small n ("0.000 [0.000, 0.000]" at n = 1): the exact
        # (Clopper-Pearson) interval instead, which covers at least `level` at every n
        low, high = clopper_pearson(int(x.sum()), n, level)
        return Accuracy(p, low, high, n, level, 0)
    rng = np.random.default_rng(seed)
    replicates = rng.binomial(n, p, size=n_bootstrap) / n
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return Accuracy(p, float(low), float(high), n, level, n_bootstrap)
