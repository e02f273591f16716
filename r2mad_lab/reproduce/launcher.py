"""Running the points of an ablation that are not up to date: here one by one, side by side, or as cluster jobs.

The points (:mod:`r2mad_lab.reproduce.points`) that a sweep or ``--replicates`` must execute are independent: each
is the chosen notebooks of one variant, writing its own folders, sharing runs and the response cache through the
locks and SQLite the notebooks already share when they run at once (:mod:`r2mad_lab.reproduce.notebook_runner`).
:func:`execute` leaves the points that are up to date (one line each) and runs the others:

- ``--launcher local`` with ``--jobs 1`` (or a single point): in this process, one after another, as before;
- ``--launcher local`` with ``--jobs N``: ``N`` at a time, each in its own process (``python -m
  r2mad_lab.reproduce --set ...`` of that point, its notebooks one at a time), its output in a log file whose last
  line is relayed to the terminal every :data:`RELAY_SECONDS` (one line per running point);
- ``--launcher slurm``: each point a job of submitit (the library Hydra's SLURM launcher uses;
  ``submitit.AutoExecutor``: SLURM where ``sbatch`` exists, else submitit's local executor, a subprocess per job),
  with ``--slurm KEY=VALUE`` passed to the executor (``slurm_partition=gpu``, ``gpus_per_node=1``,
  ``timeout_min=600``; docs/ablations.md).

Every finished point prints one line. Each point records itself when it finishes (its :class:`~.point_cache.PointCache`
record), so the driver collects them by their records into the same tables as a run one by one. A point whose process
or job fails or is killed is named with where its log is; its folder stays ``INCOMPLETE``, the ablation writes no
table without it, and the jobs' ledger (``runs/<profile>/.up_to_date/launcher/jobs.json``) lets the next invocation
say which job did not finish before it runs that point again. Our choice (Hydra's multirun launchers are the model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from r2mad_core.files import atomic_write
from r2mad_lab.reproduce.point_cache import PointCache, duration
from r2mad_lab.reproduce.points import Point

LAUNCHERS = ("local", "slurm")
#: The points' records folder (:meth:`~r2mad_lab.reproduce.point_cache.PointCache.records`) of the points' logs,
#: submitit's folder and the jobs' ledger.
LAUNCHER_DIR = "launcher"
LEDGER = "jobs.json"
#: A job's time limit unless ``--slurm timeout_min=N`` sets one (submitit's local executor's own default, 2 minutes,
#: stopped a tiny point half-way).
DEFAULT_TIMEOUT_MINUTES = 24 * 60
#: Seconds between two looks at the cluster jobs' states.
POLL_SECONDS = 2.0
#: Seconds between two lines relaying a side-by-side point's progress (the last line of its log) to the terminal.
RELAY_SECONDS = 30.0


def point_arguments(point: Point) -> list[str]:
    """``--set KEY=VALUE`` for every value a point runs with (JSON, which YAML reads back as the same value)."""
    arguments = []
    for key, value in point.values.items():
        arguments += ["--set", f"{key}={json.dumps(value)}"]
    return arguments


def parse_slurm_options(texts: Sequence[str]) -> dict[str, Any]:
    """``["slurm_partition=gpu", "gpus_per_node=1"]`` -> the executor's parameters (YAML values)."""
    found = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--slurm {text!r}: expected KEY=VALUE, e.g. --slurm slurm_partition=gpu")
        found[key.strip()] = yaml.safe_load(value)
    return found


@dataclass
class PointJob:
    """What a cluster job runs: ``python -m r2mad_lab.reproduce ARGUMENTS`` of one point, in the job's process
    (picklable: submitit sends it to the job). A non-zero exit raises, so the job counts as failed."""

    arguments: list[str]
    name: str

    def __call__(self) -> int:
        import runpy

        sys.argv = ["python -m r2mad_lab.reproduce", *self.arguments]
        try:
            runpy.run_module("r2mad_lab.reproduce", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code != 0:
            raise RuntimeError(f"point {self.name}: reproduce exited with {code}")
        return code


class Ledger:
    """The jobs submitted and not yet finished: ``name -> {"label", "launcher", "job", "log", "state"}``."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LEDGER
        self.lock = threading.Lock()

    def read(self) -> dict[str, dict[str, Any]]:
        try:
            found = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def set(self, name: str, entry: Mapping[str, Any] | None) -> None:
        with self.lock:
            entries = self.read()
            if entry is None:
                entries.pop(name, None)
            else:
                entries[name] = dict(entry)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")


def execute(points: Sequence[Point], run: Callable[..., Path | None], cache: PointCache | None,
            only: Sequence[str] | None, *, profile_dir: Path, child_arguments: Sequence[str] = (), jobs: int = 1,
            launcher: str = "local", cluster: str | None = None, slurm: Mapping[str, Any] | None = None,
            echo: Callable[[str], None] = print) -> dict[int, Path] | None:
    """The figures folder of every point (by position), running those that are not up to date; None when one
    failed (each failure named). ``run``: the in-process runner (with ``cache``, wrapped by
    :meth:`~.point_cache.PointCache.wrap`: it records each point it runs); ``child_arguments``: the reproduce arguments
    every point's own process gets besides its ``--set`` values. Without ``cache`` (a test's runner): in this
    process, one by one, nothing left as up to date."""
    folders: dict[int, Path] = {}
    pending: list[int] = []
    seen: dict[str, int] = {}
    for position, point in enumerate(points):
        if point.variant is None:
            folders[position] = profile_dir  # the profile itself: its baseline ran first
            continue
        hit = None if cache is None or cache.force else cache.lookup(point.values, only)
        if hit is not None:
            echo(cache.up_to_date_line(point.variant, hit, point.label()))
            folders[position] = hit.folder
        elif point.variant.name not in seen:  # the same variant twice: run once
            seen[point.variant.name] = position
            pending.append(position)
    ledger = Ledger(cache.records(LAUNCHER_DIR)) if cache is not None else None
    unfinished = ledger.read() if ledger is not None else {}
    for position, point in enumerate(points):  # finished after all (a job whose process outlived its controller)
        if (ledger is not None and position in folders and point.variant is not None
                and point.variant.name in unfinished):
            ledger.set(point.variant.name, None)
    if pending:
        for position in pending:
            entry = unfinished.get(points[position].variant.name)
            if entry:
                echo(f"reproduce: point {points[position].label()} (variant {points[position].variant.name}) did not "
                     f"finish in an earlier invocation ({entry.get('launcher')} job {entry.get('job')}, "
                     f"{entry.get('state', 'killed, or still running')}; log {entry.get('log')}): running it again")
        total = len(pending)
        if cache is None or (launcher == "local" and (jobs <= 1 or total == 1)):
            made = _one_by_one(points, pending, run, only, echo)
            ok = {p: folder is not None for p, folder in made.items()}
        elif launcher == "local":
            ok = _side_by_side(points, pending, child_arguments, jobs, ledger.path.parent, ledger, echo)
        else:
            ok = _cluster(points, pending, child_arguments, ledger.path.parent, ledger, cluster, slurm or {}, echo)
        failed = [points[p] for p in pending if not ok.get(p)]
        for position in pending:
            if not ok.get(position):
                continue
            if cache is None:
                folders[position] = made[position]
                continue
            hit = cache.lookup(points[position].values, only)
            if hit is None:
                echo(f"reproduce: point {points[position].label()} (variant {points[position].variant.name}) "
                     f"finished but left no record of a complete run (its folder is INCOMPLETE or an executed "
                     f"notebook is missing)")
                failed.append(points[position])
            else:
                folders[position] = hit.folder
        if failed:
            echo(f"reproduce: {len(failed)} of {total} points did not finish: "
                 + "; ".join(f"{p.label()} (variant {p.variant.name})" for p in failed)
                 + ". No sweep or replicate table is written without them; run the same command again to run them "
                   "(every finished point and cell is kept)")
            return None
    for position, point in enumerate(points):  # a repeated variant: the folder of its first
        if position not in folders and point.variant is not None and point.variant.name in seen:
            folders[position] = folders[seen[point.variant.name]]
    return folders


def _one_by_one(points: Sequence[Point], pending: Sequence[int], run: Callable[..., Path | None],
                only: Sequence[str] | None, echo: Callable[[str], None]) -> dict[int, Path | None]:
    made: dict[int, Path | None] = {}
    for number, position in enumerate(pending, start=1):
        point = points[position]
        echo(f"reproduce: point {point.label()} (variant {point.variant.name}) [{number}/{len(pending)}] ...")
        start = time.perf_counter()
        made[position] = run(dict(point.values), point.variant, only)
        echo(f"reproduce: [{number}/{len(pending)}] point {point.label()} "
             f"{'finished' if made[position] is not None else 'FAILED'} in {duration(time.perf_counter() - start)}")
        if made[position] is None:
            break
    return made


def _log_name(point: Point) -> str:
    return f"{point.variant.name}.log"


def last_line(log: Path) -> str:
    """The last non-empty line of ``log`` (a progress bar's last state: lines end in ``\\r`` too), '' when none."""
    try:
        with open(log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.replace("\r", "\n").split("\n") if line.strip()]
    return lines[-1] if lines else ""


def wait_relaying(process: subprocess.Popen, log: Path, what: str, echo: Callable[[str], None],
                  every: float | None = None) -> int:
    """Wait for ``process``; every ``every`` seconds (:data:`RELAY_SECONDS`) one line with the last line of its log,
    so a ``--jobs N`` run is never silent while its points run in their own processes."""
    start = time.perf_counter()
    while True:
        try:
            return process.wait(timeout=RELAY_SECONDS if every is None else every)
        except subprocess.TimeoutExpired:
            line = last_line(log)
            echo(f"reproduce: {what} running for {duration(time.perf_counter() - start)}"
                 + (f": {line[:200]}" if line else ""))


def _side_by_side(points: Sequence[Point], pending: Sequence[int], child_arguments: Sequence[str], jobs: int,
                  folder: Path, ledger: Ledger, echo: Callable[[str], None]) -> dict[int, bool]:
    """``jobs`` points at a time, each ``python -m r2mad_lab.reproduce`` in its own process."""
    folder.mkdir(parents=True, exist_ok=True)
    total, done, lock = len(pending), [0], threading.Lock()
    echo(f"reproduce: {total} points to run, {min(jobs, total)} at a time, each in its own process "
         f"(logs in {folder})")

    def one(position: int) -> bool:
        point = points[position]
        log = folder / _log_name(point)
        command = [sys.executable, "-m", "r2mad_lab.reproduce", *child_arguments, *point_arguments(point)]
        start = time.perf_counter()
        with open(log, "w", encoding="utf-8") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            ledger.set(point.variant.name, {"label": point.label(), "launcher": "local", "job": process.pid,
                                            "log": str(log)})
            code = wait_relaying(process, log, f"point {point.label()}", echo)
        ledger.set(point.variant.name, None if code == 0 else {
            "label": point.label(), "launcher": "local", "job": process.pid, "log": str(log),
            "state": f"exit code {code}"})
        with lock:
            done[0] += 1
            state = "finished" if code == 0 else f"FAILED (exit code {code}; log {log})"
            echo(f"reproduce: [{done[0]}/{total}] point {point.label()} (variant {point.variant.name}) {state} "
                 f"in {duration(time.perf_counter() - start)}")
        return code == 0

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, total))) as pool:
        results = list(pool.map(one, pending))
    return dict(zip(pending, results, strict=False))


def _cluster(points: Sequence[Point], pending: Sequence[int], child_arguments: Sequence[str], folder: Path,
             ledger: Ledger, cluster: str | None, parameters: Mapping[str, Any],
             echo: Callable[[str], None]) -> dict[int, bool]:
    """Each point a submitit job; waits for them all, one line per finished job."""
    try:
        import submitit  # lazy: the cluster extra
    except ImportError:
        raise ValueError("--launcher slurm needs submitit: pip install 'r2mad[cluster]'") from None
    jobs_folder = folder / "submitit"
    executor = submitit.AutoExecutor(folder=str(jobs_folder), cluster=cluster)
    try:
        executor.update_parameters(**{"timeout_min": DEFAULT_TIMEOUT_MINUTES, **dict(parameters)})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--slurm: {str(exc).splitlines()[0]}") from None
    kind = executor.cluster
    echo(f"reproduce: {len(pending)} points as {kind} jobs of submitit"
         + (" (no SLURM here: submitit's local executor, a subprocess per job)" if kind == "local" else "")
         + f"; their logs in {jobs_folder}")
    submitted = {}
    for position in pending:
        point = points[position]
        executor.update_parameters(name=f"r2mad-{point.variant.name}")
        job = executor.submit(PointJob([*child_arguments, *point_arguments(point)], point.variant.name))
        submitted[position] = job
        ledger.set(point.variant.name, {"label": point.label(), "launcher": kind, "job": str(job.job_id),
                                        "log": str(job.paths.stdout)})
        echo(f"reproduce: point {point.label()} (variant {point.variant.name}): {kind} job {job.job_id}")
    ok, total, start = {}, len(submitted), time.perf_counter()
    while len(ok) < total:
        for position, job in submitted.items():
            if position in ok or not job.done():
                continue
            point = points[position]
            try:
                job.result()
                ok[position] = True
                ledger.set(point.variant.name, None)
                state = "finished"
            except Exception as exc:  # noqa: BLE001 - submitit's Failed/UncompletedJobError, a killed job
                ok[position] = False
                reason = (f"killed, or ended without a result (state {job.state})"
                          if type(exc).__name__ == "UncompletedJobError" else
                          str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__)
                ledger.set(point.variant.name, {"label": point.label(), "launcher": kind, "job": str(job.job_id),
                                                "log": str(job.paths.stdout), "state": f"failed: {reason}"})
                state = f"FAILED ({kind} job {job.job_id}: {reason[:200]}; log {job.paths.stdout})"
            echo(f"reproduce: [{len(ok)}/{total}] point {point.label()} (variant {point.variant.name}) {state} "
                 f"after {duration(time.perf_counter() - start)}")
        if len(ok) < total:
            time.sleep(POLL_SECONDS)
    return ok


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return value


def settings(args: Any, only: Sequence[str] | None, profile: Any, chosen: int, every: int,
             committed_root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The launch keywords of :func:`execute` and the dry run's (points at once, where the profile's committed
    timings are, the profile's expected minutes for the ``chosen`` of ``every`` notebooks)."""
    jobs = args.jobs or default_point_jobs()
    launch = {"jobs": jobs, "launcher": args.launcher, "slurm": parse_slurm_options(args.slurm),
              "child_arguments": point_process_arguments(args, only)}
    minutes = profile.fields.get("expected_runtime_minutes")
    context = {"jobs": jobs if args.launcher == "local" else 10**6, "committed_root": committed_root,
               "expected_minutes": float(minutes) * chosen / every if minutes else None}
    return launch, context


def add_arguments(parser: Any) -> None:
    """The flags of the ablation points."""
    group = parser.add_argument_group(
        "ablation points (--set, --sweep, --replicates; docs/ablations.md)",
        "A point whose executed configuration equals one already made is up to date and not run again (--force "
        "runs it); with --sweep or --replicates, --jobs N runs N points at once, each in its own process "
        "(default: one per core).")
    group.add_argument("--dry-run", action="store_true",
                              help="print every point (the product of the sweeps and the seeds), what it runs with, "
                              "which are up to date and the expected time; execute nothing")
    group.add_argument("--show-config", type=_positive, nargs="?", const=1, default=None, metavar="N",
                              help="print every resolved setting of point N of the dry run (default 1); execute "
                                   "nothing")
    group.add_argument("--launcher", choices=LAUNCHERS, default="local",
                              help="where the points run: local (this machine, --jobs at once) or slurm (each point "
                              "a submitit job: SLURM where sbatch exists, else submitit's local executor)")
    group.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                              help="a submitit executor parameter for --launcher slurm, e.g. --slurm "
                              "slurm_partition=gpu --slurm gpus_per_node=1 --slurm timeout_min=600")


def point_process_arguments(args: Any, only: Sequence[str] | None) -> list[str]:
    """The reproduce arguments a point's own process (``--jobs N``, ``--launcher slurm``) is given besides its
    ``--set`` values: the same profile, notebooks and folders; one notebook at a time beside the other points."""
    profile = str(Path(args.profile).resolve()) if Path(args.profile).is_file() else args.profile
    found = ["--profile", profile, "--output-dir", str(Path(args.output_dir).resolve())]
    if only:
        found += ["--only", ",".join(only)]
    if args.data_dir:
        found += ["--data-dir", str(Path(args.data_dir).resolve())]
    if args.notebooks_dir:
        found += ["--notebooks-dir", str(Path(args.notebooks_dir).resolve())]
    if args.launcher == "local":
        found += ["--jobs", "1"]
    found += [flag for flag, on in (("--force", args.force), ("--fresh", args.fresh),
                                    ("--fresh-kernels", args.fresh_kernels)) if on]
    return found


def default_point_jobs() -> int:
    """One point per core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
