"""The run reader: finished run directories read back once per process, with their metrics (a memo beside ``load_run``).

:func:`finished_records` is :func:`~r2mad_lab.experiments.cell.load_run` for a cell that is done: the records of a
complete run directory, read from disk only when this process has not read or written that directory as it is now
(:func:`stamp`: the configuration's and the transcripts' file stamps). :func:`finished_metrics` computes a remembered
directory's metrics (:func:`~r2mad_lab.experiments.metrics.compute_metrics`) once per bootstrap resample count.
:func:`load_finished_runs` fills the memo ahead of need (the report's kernel, while the last notebook finishes).
The report notebook asks for 93 cells of 56 directories, and a reused kernel (make reproduce) for cells an earlier
notebook ran: each is read once.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from pathlib import Path
from typing import Any

from r2mad_core.files import file_stamps
from r2mad_core.records import TranscriptRecord
from r2mad_lab.experiments.cell import CONFIG_FILE, METRICS_FILE, TRANSCRIPTS_FILE, load_run
from r2mad_lab.experiments.metrics import compute_metrics

#: Finished run directories this process read or wrote: path -> (stamp, records, {bootstrap resamples: metrics});
#: the oldest are dropped beyond :data:`MAX_RECORDS` records.
FINISHED: "OrderedDict[str, tuple[tuple, list[TranscriptRecord], dict[int, dict]]]" = OrderedDict()
MAX_RECORDS = 100_000


def stamp(run_dir: Path) -> tuple | None:
    """The :func:`~r2mad_core.files.file_stamps` of the run's configuration and transcripts."""
    return file_stamps(run_dir / name for name in (CONFIG_FILE, TRANSCRIPTS_FILE))


def finished_records(run_dir: Path, expected: int) -> list[TranscriptRecord] | None:
    """The records of a complete run directory (all ``expected`` samples), else None. A directory this process
    read or wrote before and that is unchanged since (:func:`stamp`) is not read again (:data:`FINISHED`)."""
    if not (run_dir / CONFIG_FILE).exists():
        return None
    now = stamp(run_dir)
    remembered = FINISHED.get(str(run_dir))
    if now is not None and remembered is not None and remembered[0] == now:
        FINISHED.move_to_end(str(run_dir))
        records = list(remembered[1])
    else:
        _, records = load_run(run_dir)
        if len(records) == expected:
            remember_finished(run_dir, records, now)
    return records if len(records) == expected else None


def load_finished_runs(runs_dir: str | Path, bootstrap_resamples: int, since: float = 0.0) -> int:
    """Read every run directory under ``runs_dir`` (``<model>/<benchmark>/<run>``) finished since ``since`` (its
    ``metrics.json`` written then, as many records as its configuration's ``n_samples``) that this process does not
    remember as it is now into :data:`FINISHED`, with its metrics for ``bootstrap_resamples``; returns how many it
    read. What the report's kernel does while the last notebook finishes (``make reproduce``:
    ``notebook_runner.run_workers``' ``prepare``, ``since`` the run's start: the runs of other variants and sweeps
    that share ``runs_dir`` are left): the same reads and the same metrics the report's cells would make, earlier.
    ``runs_dir`` as the notebook is given it: the memo is keyed by the path the grid builds from it."""
    read = 0
    for config_path in sorted(Path(runs_dir).glob(f"*/*/*/{CONFIG_FILE}")):
        run_dir = config_path.parent
        now = stamp(run_dir)
        remembered = FINISHED.get(str(run_dir))
        try:
            finished = (run_dir / METRICS_FILE).stat().st_mtime >= since
        except OSError:  # not finished
            continue
        if now is None or not finished or (remembered and remembered[0] == now):
            continue
        try:
            config, records = load_run(run_dir)
        except (OSError, ValueError):  # half written, or not a run: the report's own read says what is wrong
            continue
        if len(records) == config.get("n_samples") and stamp(run_dir) == now:
            remember_finished(run_dir, records, now)
            finished_metrics(run_dir, records, bootstrap_resamples)
            read += 1
    return read


def remember_finished(run_dir: Path, records: list[TranscriptRecord], stamped: tuple | None = None) -> None:
    """Remember ``records`` as the finished run of ``run_dir`` as it is now (``stamped``: its :func:`stamp`, if
    known); nothing when its files are missing."""
    stamped = stamped if stamped is not None else stamp(run_dir)
    if stamped is None:
        return
    FINISHED[str(run_dir)] = (stamped, list(records), {})
    FINISHED.move_to_end(str(run_dir))
    while sum(len(entry[1]) for entry in FINISHED.values()) > MAX_RECORDS and len(FINISHED) > 1:
        FINISHED.popitem(last=False)


def finished_metrics(run_dir: Path, records: list[TranscriptRecord], bootstrap_resamples: int) -> dict[str, Any]:
    """``compute_metrics(records, n_bootstrap=bootstrap_resamples)``, computed once per remembered directory (a
    copy is handed out: the metrics are a pure function of the records and the resamples)."""
    remembered = FINISHED.get(str(run_dir))
    if remembered is None or len(remembered[1]) != len(records) or any(
            a is not b for a, b in zip(remembered[1], records, strict=False)):
        return compute_metrics(records, n_bootstrap=bootstrap_resamples)
    metrics = remembered[2].get(bootstrap_resamples)
    if metrics is None:
        metrics = remembered[2][bootstrap_resamples] = compute_metrics(records, n_bootstrap=bootstrap_resamples)
    return copy.deepcopy(metrics)
