"""Python's cyclic garbage collector, set for long batch work: the notebooks' kernels and the test workers.

Nothing here changes what runs or what it computes, only how often CPython walks its objects looking for reference
cycles: every table and figure of the sim profile came out byte-identical with and without it (100 files, ``cmp``).

With CPython's defaults (a young collection after 700 new containers, a full one after 10 x 10 of them, subject to
the 25% rule), the two kernels of ``make reproduce`` (sim, from nothing) spent about a sixth of their CPU in
the collector: each full collection walks every object alive, the ~170,000 that numpy, pandas, scipy,
matplotlib and r2mad_core leave behind at import included, and the notebooks keep hundreds of thousands more
(transcripts, banks, the simulator's memos). Measured by ``gc.callbacks`` in both kernels (docs/performance.md,
2026-11-26): :func:`freeze` at each notebook's setup
halved the collector's time, and :data:`THRESHOLDS` halved it again.

What is left is mostly IPython's own ``%reset`` between two notebooks in one kernel and the young collections. The
reset collected twice (``%reset`` and its display hook each call ``gc.collect()``), before the figures were closed;
:func:`reset_namespace` resets without them and the kernel collects once after closing the figures
(``notebook_runner.CLEAR_KERNEL``): half the walks, and the figures' cycles freed before the next setup freezes what
is alive (py-spy showed the two walks as a visible share of the CPU of the kernel that ran eight notebooks).

- :func:`freeze` (``gc.freeze``): every object alive now leaves the collector's walks for good. Frozen objects are
  still freed by reference counting when nothing refers to them; only a reference cycle among them stays until the
  process ends. Called where what is alive is what stays: after a notebook's imports (each notebook's setup, after
  the previous notebook in the kernel was cleared) and after the tests are collected.
- :func:`tune` (``gc.set_threshold(*THRESHOLDS)``): a young collection after 50,000 new containers instead of 700;
  the older generations as CPython counts them, 20 and 10 young and middle collections apart. The garbage that
  waits for a collection is at most some 50,000 objects (a few MB).

Our choice, for speed alone: no source speaks to it.
"""

from __future__ import annotations

import gc

#: ``gc.set_threshold`` arguments: new containers before a young collection, young collections before a middle one,
#: middle ones before a full one (CPython's defaults: 700, 10, 10).
THRESHOLDS = (50_000, 20, 10)


def tune() -> None:
    """Collect less often: ``gc.set_threshold(*THRESHOLDS)`` (idempotent)."""
    gc.set_threshold(*THRESHOLDS)


def freeze() -> int:
    """Take every object alive now out of the collector's walks (``gc.freeze``); returns how many are frozen."""
    gc.freeze()
    return gc.get_freeze_count()


def settle() -> int:
    """:func:`tune` then :func:`freeze`: for a process whose imports are done and whose work begins."""
    tune()
    return freeze()


def reset_namespace(shell: object) -> None:
    """IPython's ``%reset -f`` (the user namespace and history emptied) without the two full collections it makes;
    the caller collects once when everything it frees is released (the figures closed)."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0  # type: ignore[assignment]
    try:
        shell.run_line_magic("reset", "-f")  # type: ignore[attr-defined]
    finally:
        gc.collect = collect  # type: ignore[assignment]
