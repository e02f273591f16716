"""``--gpus N``: the grid's cells of every served model at once, one worker thread per model, before the notebooks.

The notebooks run one at a time and each runs its grid model by model, so on servers planned for M models at once
(:func:`~r2mad_lab.reproduce.paper.serve.plan`) only one model's servers would get requests. This phase runs the
notebooks' full grids first (:data:`NOTEBOOK_GRIDS`, in the notebooks' order), each model's cells in its own thread
on its own :meth:`~r2mad_lab.reproduce.grid.ExperimentGrid.from_profile` grid: every model's servers have work. It
adds no running logic: each cell is the grid's (its run cache and lock make it run once), so the notebooks then find
these cells finished and run only the rest (the parameterised grids: retrieval, ICL, SC paths, cost, poison).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from r2mad_lab.experiments.method_labels import (
    ABLATION_METHODS,
    MAD_M2_METHODS,
    MAIN_METHODS,
    SUBSET_METHODS,
    TRANSITION_METHODS,
)

#: The notebooks' grids over every model and benchmark, in the order the notebooks run them (03, 04, 05, 06).
NOTEBOOK_GRIDS: tuple[Sequence[str], ...] = (MAIN_METHODS, ABLATION_METHODS, MAD_M2_METHODS,
                                             sorted(set(SUBSET_METHODS) | set(TRANSITION_METHODS)))


def methods_in_order(grids: Sequence[Sequence[str]] = NOTEBOOK_GRIDS) -> list[str]:
    """Every method of ``grids`` once, where it first appears."""
    return list(dict.fromkeys(method for grid in grids for method in grid))


def run_side_by_side(profile: Any, labels: Sequence[str], *, runs_dir: Path, cache_dir: Path,
                     data_dir: Path | None = None, methods: Sequence[str] | None = None,
                     echo: Callable[[str], None] = print) -> dict[str, BaseException | None]:
    """Run ``methods`` (default :func:`methods_in_order`) for each model of ``labels`` in its own thread; label ->
    the error its thread stopped on (None: every cell done). An error is reported, not raised: the notebooks that
    follow run (or fail on) the same cells and say so where the run is read."""
    from r2mad_lab.reproduce.grid import ExperimentGrid

    wanted = list(methods or methods_in_order())
    errors: dict[str, BaseException | None] = {}

    def work(label: str) -> None:
        try:
            with ExperimentGrid.from_profile(profile, runs_dir=runs_dir, cache_dir=cache_dir,
                                             data_dir=data_dir) as exp:
                exp.grid(wanted, models=[label])
            errors[label] = None
        except BaseException as exc:  # reported below, the notebooks run after it
            errors[label] = exc

    echo(f"serve: {len(labels)} models side by side ({', '.join(labels)}): {len(wanted)} methods of the "
         "notebooks' grids, one thread per model")
    threads = [threading.Thread(target=work, args=(label,), name=f"side-by-side {label}") for label in labels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for label in labels:
        if errors.get(label) is not None:
            echo(f"serve: side by side, {label} stopped: {type(errors[label]).__name__}: {errors[label]}; "
                 "the notebooks run its remaining cells")
    return errors
