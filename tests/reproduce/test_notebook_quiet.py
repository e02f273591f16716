"""Notebooks stay quiet: tqdm's 'IProgress not found' warning (no ipywidgets) never reaches a notebook's output."""

from __future__ import annotations

import warnings

from r2mad_lab.reproduce.notebook_setup import quiet_logging


def test_the_iprogress_warning_is_not_shown() -> None:
    from tqdm import TqdmWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_logging()
        warnings.warn("IProgress not found. Please update jupyter and ipywidgets.", TqdmWarning, stacklevel=1)
        warnings.warn("another warning that matters", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another warning that matters"]
