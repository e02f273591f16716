"""Multiple comparisons: Holm's step-down adjustment of the p-values of tests run at once.

A variant's comparison with its profile (:mod:`~r2mad_lab.reproduce.compare`) tests every cell of a table at once, and
the report tests every claimed ordering of the paper at once (:mod:`r2mad_lab.report.comparison`). A cell or claim is
called significant only when its Holm-adjusted p is below alpha, which holds the family-wise error rate (the chance of
calling *any* true null significant) at alpha whatever the dependence between the tests (Holm 1979, "A simple
sequentially rejective multiple test procedure", Scand. J. Statist. 6:65-70):

    p_(i)^adj = max_{j <= i} min(1, (m - j + 1) p_(j)),   p_(1) <= ... <= p_(m) the sorted p-values, m the tests.

NaN p-values (a cell not compared) are not tests: they stay NaN and do not count in m.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

#: The rule's name as generated text states it.
RULE = "Holm"
ALPHA = 0.05


def holm(p_values: Iterable[float]) -> list[float]:
    """Holm-adjusted p-values, in the input's order (NaN stays NaN and is not counted among the tests)."""
    values = [float(p) for p in p_values]
    tested = [i for i, p in enumerate(values) if not math.isnan(p)]
    m = len(tested)
    adjusted = [math.nan] * len(values)
    running = 0.0
    for rank, index in enumerate(sorted(tested, key=lambda i: values[i])):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted


def holm_array(p_values: np.ndarray, axis: int = -1) -> np.ndarray:
    """:func:`holm` along ``axis`` of an array: each slice along it is one family of tests."""
    return np.apply_along_axis(lambda family: np.asarray(holm(family), dtype=float), axis,
                               np.asarray(p_values, dtype=float))


def describe(m: int, alpha: float = ALPHA) -> str:
    """The sentence fragment generated text uses to state the adjustment."""
    return f"Holm-adjusted over the {m} cells tested at once, alpha = {alpha:g}"
