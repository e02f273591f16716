"""The garbage collector of the notebooks' kernels and of the test workers (r2mad_lab/reproduce/gc_settings.py)."""

from __future__ import annotations

import gc
from pathlib import Path

from r2mad_lab.reproduce import gc_settings


def _walked(objects: list[list[int]]) -> int:
    """How many of ``objects`` (and their list) a collection would walk now: frozen ones are not among them."""
    walked = {id(o) for o in gc.get_objects()}
    return sum(id(o) in walked for o in [objects, *objects])


def test_a_notebooks_setup_freezes_what_is_alive_and_collects_less_often(tmp_path: Path) -> None:
    """Every notebook calls ``setup`` once its imports are done: afterwards what was alive (here 1,000 lists made
    before the call) is out of the collector's walks, and a young collection waits for 50,000 new containers, not
    CPython's 700."""
    from r2mad_lab.reproduce import notebook_setup

    gc.set_threshold(700, 10, 10)
    alive = [[k] for k in range(1000)]
    assert _walked(alive) == 1001
    try:
        notebook_setup.setup({"profile": "tiny", "figures_dir": str(tmp_path / "figures")}, "08_theory",
                             experiment=False, benchmarks=False)
        assert gc.get_threshold() == gc_settings.THRESHOLDS == (50_000, 20, 10)
        assert _walked(alive) == 0
    finally:
        gc_settings.tune()


def test_settle_tunes_then_freezes_and_returns_the_frozen_count() -> None:
    gc.set_threshold(700, 10, 10)
    made = [[k] for k in range(1000)]
    assert _walked(made) == 1001
    try:
        count = gc_settings.settle()  # gc's count right after the freeze (frozen objects freed since leave it)
        assert count > len(made) and gc.get_threshold() == gc_settings.THRESHOLDS and _walked(made) == 0
        gc_settings.tune()  # idempotent
        assert gc.get_threshold() == gc_settings.THRESHOLDS
    finally:
        gc_settings.tune()


def test_the_test_workers_run_with_the_kernels_collector() -> None:
    """tests/conftest.py tunes the collector before the test modules load and freezes them once collected, so the
    tests run under the settings the notebooks run under."""
    assert gc.get_threshold() == gc_settings.THRESHOLDS
    assert gc.get_freeze_count() > 10_000
