"""Running numbered notebooks with papermill: in order of what each needs, several at once, kernels kept.

What ``make reproduce`` (:mod:`r2mad_lab.reproduce`) does with the notebooks once the profile has given their
parameters (docs/design.md "Profiles"; docs/performance.md for the times):

- **What a notebook needs** (:func:`prerequisites`): the notebooks its metadata names under ``r2mad.after``,
  else every notebook before it. The notebooks that read the memory banks name ``02_memory``, except
  ``04_ablations``, the longest, which names nothing and starts at once: it builds the banks 02 is not building and
  runs the cells whose banks are ready, and waits under a bank's lock only when nothing else is left
  (:meth:`r2mad_lab.reproduce.grid.ExperimentGrid.grid`, ``.memories``; so for a run another notebook is running).
  ``01_data`` and ``08_theory`` name nothing; ``10_report`` names none, so it comes after all (it reads every other's
  manifest entry).
- **Several at once** (:func:`run_workers`): ``jobs`` workers take the notebooks whose prerequisites succeeded,
  the longest first (its time in the last run's ``timings.json``, else in the committed run of the profile). After a
  failure nothing new starts; those running finish. Notebooks running at once share runs, the response cache and the
  manifest through file locks and SQLite (:mod:`r2mad_lab.experiments.cell`, :mod:`r2mad_lab.engines.cache`), and every
  generation is a function of its request, so the tables do not depend on the order (tested: byte-identical CSVs).
- **Progress** (:class:`NotebookProgress`): the kernel's messages are read as they come: the cell that
  starts and the tqdm bars the notebook draws (a grid's ``N cells``, a cell's questions and round) go to a
  :class:`r2mad_lab.experiments.progress.ProgressBoard`, one line in place on a terminal, a plain line per finished run
  and at least every 20 s in a log, with each notebook's time left from its recorded timing.
- **Kernels kept** (``reuse_kernels``): a worker runs its next notebook in the kernel of its last one, cleared
  first (:data:`CLEAR_KERNEL`: the namespace, figures, matplotlib's settings and the execution count as in a
  fresh kernel); the libraries stay imported, which is most of what a kernel costs before a notebook's first
  result. A failed notebook's kernel is shut down, never reused.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_core.files import atomic_write
from r2mad_lab.experiments.progress import ProgressBoard, parse_tqdm

KERNEL_NAME = "python3"
#: Run by every kernel at start (kernels outlived a killed ``reproduce`` for seconds and kept writing).
KERNEL_EXITS_WITH_RUNNER = "--IPKernelApp.exec_lines=[\"__import__('r2mad_core.files').files.exit_with_parent()\"]"
#: Seconds a kernel may take to start (papermill's default is 60): on a loaded machine a start can take longer, slow not
#: broken.
KERNEL_START_TIMEOUT = 600
#: Seconds between two steps of preparing a notebook that waits for others (``run_workers``' ``prepare``) after a
#: step that found work, and the longest pause after steps that found none.
PREPARE_PERIOD = 2.0
PREPARE_PERIOD_MAX = 16.0
logger = logging.getLogger(__name__)


#: Where the kernels share math-verify's verdicts (r2mad_core/data/verdicts.py), under the profile's cache folder.
ANSWER_MEMO_FILE = "answer_verdicts.sqlite"
#: The thread-count variable of numpy's BLAS (the OpenBLAS of its wheels) set for the kernels.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS",)


def kernel_environment(cache_dir: Path) -> dict[str, str]:
    """The environment variables ``make reproduce``'s kernels are started with (a variable the user set keeps its
    value).

    - The shared verdicts (``R2MAD_ANSWER_MEMO``): each kernel would otherwise compare the same answers symbolically
      again. Speed only: a verdict is a pure function of the two answers.
    - One BLAS thread per kernel: retrieval multiplies one query by the whole bank thousands of times, and OpenBLAS's
      threads on such small products cost 5x the product on a loaded 2-core machine (benchmarks/README.md);
      the products are the same to the bit (the CSVs are byte-identical).
    """
    from r2mad_core.data.verdicts import ENVIRONMENT

    values = {ENVIRONMENT: os.environ.get(ENVIRONMENT) or str(Path(cache_dir) / ANSWER_MEMO_FILE)}
    for variable in BLAS_THREAD_VARIABLES:
        values[variable] = os.environ.get(variable) or "1"
    return values


@dataclass
class NotebookResult:
    notebook: str
    seconds: float
    output: Path
    error: str | None = None


# --------------------------------------------------------------------------------------------
# What a notebook needs
# --------------------------------------------------------------------------------------------
#: Where a notebook names the notebooks it needs first: ``metadata["r2mad"]["after"]``, a list of their names
#: (``"02_memory"``); ``[]`` for none. A notebook without it needs every notebook before it.
AFTER_METADATA = ("r2mad", "after")


def prerequisites(notebook: Path, notebooks: Sequence[Path]) -> set[Path]:
    """The notebooks among ``notebooks`` that must succeed before ``notebook`` starts: those its metadata
    names (:data:`AFTER_METADATA`, only earlier ones may be named), else every earlier one. What a notebook
    needs is what it reads that another writes: the memory banks (02), every artifact's manifest entry (10)."""
    earlier = list(notebooks[:list(notebooks).index(notebook)])
    try:
        metadata = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, json.JSONDecodeError):
        return set(earlier)  # papermill names what is wrong with the file when it runs it
    named = metadata.get(AFTER_METADATA[0], {}).get(AFTER_METADATA[1])
    if named is None:
        return set(earlier)
    if not isinstance(named, list) or not all(isinstance(name, str) for name in named):
        raise ValueError(f"{notebook}: metadata {'.'.join(AFTER_METADATA)}: expected a list of notebook names, "
                         f"found {named!r}")
    stems = {p.stem: p for p in notebooks}
    later = [name for name in named if name in stems and stems[name] not in earlier]
    if later:
        raise ValueError(f"{notebook}: metadata {'.'.join(AFTER_METADATA)} names {', '.join(later)}, which "
                         "does not come before it")
    return {stems[name] for name in named if name in stems}


def previous_seconds(executed_dir: Path) -> dict[str, float]:
    """Each notebook's wall seconds in the last run (``timings.json``), to start the longest first."""
    try:
        timings = json.loads((executed_dir / "timings.json").read_text(encoding="utf-8"))
        return {name: float(entry["seconds"]) for name, entry in timings.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


# --------------------------------------------------------------------------------------------
# Several at once
# --------------------------------------------------------------------------------------------
def run_workers(
    notebooks: Sequence[Path],
    run_one: Callable[[Path, Any, bool], NotebookResult],
    *,
    jobs: int = 1,
    reuse_kernels: bool = False,
    hints: Mapping[str, float] | None = None,
    on_start: Callable[[Path], None] = lambda notebook: None,
    on_finish: Callable[[Path, NotebookResult], None] = lambda notebook, result: None,
    prepare: Callable[[Path, Any], Any] | None = None,
) -> list[NotebookResult]:
    """Run ``notebooks`` with ``jobs`` workers: a worker takes the next notebook whose :func:`prerequisites`
    succeeded (the longest by ``hints`` first, else in order) and calls ``run_one(notebook, kernel, clear)``:
    ``kernel`` is the worker's kept kernel manager (None without ``reuse_kernels``), ``clear`` whether it ran a
    notebook before. ``on_start``/``on_finish`` are called under one lock. After a failure nothing new starts;
    the results come in the order they finished, the first failure last.

    ``prepare(notebook, kernel)``: a worker with a kept, started kernel and nothing to take, while the next notebook
    waits only for notebooks that are running (the report for the last one), keeps that notebook for itself and calls
    ``prepare`` until it can start it, in that kernel (the report's kernel reads the runs finished so far:
    :func:`r2mad_lab.reproduce.grid.load_finished_runs`): :data:`PREPARE_PERIOD` seconds after a call that returned
    something true (it found work), twice the last pause after one that did not, up to :data:`PREPARE_PERIOD_MAX`
    (a call costs the runner and the kernel CPU each). A failed ``prepare`` only ends the preparing; the
    notebook runs as it would have."""
    hints = hints or {}
    position = {notebook: index for index, notebook in enumerate(notebooks)}
    needs = {notebook: prerequisites(notebook, notebooks) for notebook in notebooks}
    lock = threading.Condition()
    pending = list(notebooks)
    running: set[Path] = set()
    succeeded: set[Path] = set()
    results: list[NotebookResult] = []
    failed: list[NotebookResult] = []
    kept_for: dict[Path, str] = {}  # a notebook being prepared -> the worker that prepares it and will run it

    def order(notebook: Path) -> tuple[float, int]:
        return -hints.get(notebook.stem, 0.0), position[notebook]

    def take(kernel: Any = None) -> Path | None:
        """The next notebook whose prerequisites succeeded (waiting for one, preparing it meanwhile when it can), or
        None when there is none left."""
        me = threading.current_thread().name
        pause = PREPARE_PERIOD / 2
        while True:
            with lock:
                if failed or not pending:
                    kept_for.pop(next((n for n, w in kept_for.items() if w == me), None), None)
                    return None
                ready = sorted((n for n in pending if needs[n] <= succeeded and kept_for.get(n, me) == me), key=order)
                if ready:
                    pending.remove(ready[0])
                    running.add(ready[0])
                    kept_for.pop(ready[0], None)
                    on_start(ready[0])
                    lock.notify_all()  # a worker waiting for a notebook kept for this one may now have none left
                    return ready[0]
                if not running:  # cannot happen: prerequisites only name earlier notebooks
                    return None
                mine = next((n for n, w in kept_for.items() if w == me), None)
                can_prepare = prepare is not None and kernel is not None and kernel.has_kernel
                if mine is None and can_prepare:
                    mine = next((n for n in sorted(pending, key=order)
                                 if n not in kept_for and needs[n] - succeeded <= running), None)
                    if mine is not None:
                        kept_for[mine] = me
                if mine is None or not can_prepare:
                    lock.wait()
                    continue
            try:
                progressed = prepare(mine, kernel)
            except Exception as exc:  # preparing only saves time: the notebook still runs, from its own start
                logger.info("preparing %s: %s: %s", mine.stem, type(exc).__name__, exc)
                kernel, progressed = None, False  # nothing more to prepare in it
            pause = PREPARE_PERIOD if progressed else min(2 * pause, PREPARE_PERIOD_MAX)
            with lock:
                if not (needs[mine] <= succeeded or failed):
                    lock.wait(pause)

    def finish(notebook: Path, result: NotebookResult) -> None:
        with lock:
            running.discard(notebook)
            results.append(result)
            if result.error:
                failed.append(result)
            else:
                succeeded.add(notebook)
            on_finish(notebook, result)
            lock.notify_all()

    def worker() -> None:
        kernel = None
        try:
            while (notebook := take(kernel)) is not None:
                clear = kernel is not None and kernel.has_kernel
                if reuse_kernels and kernel is None:
                    kernel = new_kernel_manager()
                try:
                    result = run_one(notebook, kernel, clear)
                except BaseException as exc:  # never leave the others waiting for this notebook
                    result = NotebookResult(notebook.stem, 0.0, Path(notebook.name), f"{type(exc).__name__}: {exc}")
                if result.error and kernel is not None:  # a failed notebook's kernel is not reused
                    shut_down(kernel)
                    kernel = None
                finish(notebook, result)
        finally:
            if kernel is not None:
                shut_down(kernel)

    workers = [threading.Thread(target=worker, name=f"notebook-worker-{k}", daemon=True)
               for k in range(max(1, min(jobs, len(notebooks))))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if failed:
        results.remove(failed[0])
        results.append(failed[0])
    return results


def execute(notebook: Path, output: Path, parameters: Mapping[str, Any], kernel: Any = None,
            clear: bool = False, progress: "NotebookProgress | None" = None) -> str | None:
    """Run ``notebook`` into ``output`` with papermill, in the notebook's folder; in ``kernel`` (a kept kernel
    manager, cleared first when ``clear``) or a kernel of its own; its cells and bars reported to ``progress``.
    Returns the error, or None."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    reuse: dict[str, Any] = {}
    if kernel is not None:
        reuse = {"engine_name": REUSING_ENGINE, "km": kernel, "prologue": CLEAR_KERNEL if clear else START_KERNEL}
    if progress is not None:
        register_reusing_engine()
        reuse = {"engine_name": REUSING_ENGINE, "km": kernel, "prologue": "", **reuse, "progress": progress}
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=dict(parameters), kernel_name=KERNEL_NAME,
            # the kernel's working directory, given to the kernel itself: papermill's cwd= changes this
            # process's directory for the whole run, which two notebooks running at once would race on
            resources={"metadata": {"path": str(notebook.parent)}}, progress_bar=False, log_output=False,
            start_timeout=KERNEL_START_TIMEOUT,
            # the kernel's own start-up/shutdown chatter ("running over TCP without encryption", the SIGINT
            # jupyter_client sends at shutdown) is not the notebook's output: errors still reach the notebook
            # the kernel ends the moment this process does, however it ends (r2mad_core.files.exit_with_parent)
            extra_arguments=["--IPKernelApp.log_level=CRITICAL", KERNEL_EXITS_WITH_RUNNER], **reuse,
        )
    except PapermillExecutionError as exc:
        return describe_failure(exc)
    except Exception as exc:  # kernel died, notebook unreadable, ...
        return f"{type(exc).__name__}: {exc}"
    return None


def describe_failure(exc: BaseException) -> str:
    cell = getattr(exc, "cell_index", None)
    count = getattr(exc, "exec_count", None)
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    source = getattr(exc, "source", "") or ""
    where = f"cell {cell} of the executed notebook" if cell is not None else "a cell"
    if count is not None:
        where += f" (execution count {count})"
    first_lines = "\n".join("      " + line for line in source.strip().splitlines()[:6])
    return f"{where}: {ename}: {evalue}" + (f"\n    source:\n{first_lines}" if first_lines else "")


# --------------------------------------------------------------------------------------------
# Kernels kept
# --------------------------------------------------------------------------------------------
#: Run silently in a worker's kernel before its first notebook: the figure settings a fresh kernel has once
#: pyplot is loaded (with the inline backend), kept to give every later notebook the same start.
START_KERNEL = ("import matplotlib as _m, matplotlib.pyplot as _p\n"
                "_m._r2mad_fresh_rc = dict(_m.rcParams)\n"
                "del _m, _p")
#: Run silently before each later notebook in the same kernel: the user namespace and history emptied
#: (%reset -f), figures closed, matplotlib's settings as in a fresh kernel, what they held collected once
#: (:func:`r2mad_lab.reproduce.gc_settings.reset_namespace`), the execution count back to 1.
#: Imported modules stay (that is the point: each kernel imports pandas, matplotlib, scipy and r2mad_core once).
CLEAR_KERNEL = ("__import__('r2mad_lab.reproduce.gc_settings', "
                "fromlist=['gc_settings']).reset_namespace(get_ipython())\nimport matplotlib as _m, "
                "matplotlib.pyplot as _p\n_p.close('all')\n"
                "dict.update(_m.rcParams, _m._r2mad_fresh_rc)\n"
                "del _m, _p\n"
                "__import__('gc').collect()\n"
                "get_ipython().execution_count = 1")
REUSING_ENGINE = "r2mad-reusing"
_ENGINE_LOCK = threading.Lock()


def new_kernel_manager() -> Any:
    """A kernel manager for a worker that keeps its kernel: started by nbclient on the first notebook (with its
    working directory and arguments), shut down by :func:`shut_down`. Registers :data:`REUSING_ENGINE` once."""
    from jupyter_client.manager import AsyncKernelManager

    register_reusing_engine()
    return AsyncKernelManager(kernel_name=KERNEL_NAME)


def run_in_kernel(kernel: Any, code: str, value: str | None = None,
                  timeout: float = KERNEL_START_TIMEOUT) -> str | None:
    """Run ``code`` silently in a kept kernel between two notebooks (no output, no history, the execution count as
    it was; the next notebook's prologue clears the namespace anyway); returns the repr of the expression ``value``
    evaluated after it, if given. Raises RuntimeError with the kernel's error."""
    from jupyter_core.utils import run_sync

    client = kernel.client()
    client.start_channels()
    try:
        reply = run_sync(client.execute_interactive)(code, silent=True, store_history=False, timeout=timeout,
                                                     user_expressions={"value": value} if value else None,
                                                     output_hook=lambda msg: None)
    finally:
        client.stop_channels()
    content = (reply or {}).get("content", {})
    if content.get("status") != "ok":
        raise RuntimeError(f"{content.get('ename')}: {content.get('evalue')}")
    if not value:
        return None
    result = content.get("user_expressions", {}).get("value", {})
    if result.get("status") != "ok":
        raise RuntimeError(f"{result.get('ename')}: {result.get('evalue')}")
    return result.get("data", {}).get("text/plain")


def load_runs_code(runs_dir: str, bootstrap_resamples: int, since: float = 0.0) -> str:
    """What a kept kernel runs while the notebook it runs next waits (``run_workers``' ``prepare``): the runs finished
    since ``since`` read into its memo (:func:`r2mad_lab.reproduce.grid.load_finished_runs`), ``runs_dir`` as the
    notebook gets it."""
    return (f"_r2mad_read = __import__('r2mad_lab.reproduce.grid', fromlist=['grid']).load_finished_runs("
            f"{str(runs_dir)!r}, {int(bootstrap_resamples)}, {float(since)!r})")


#: The runs :func:`load_runs_code` read, for :func:`run_in_kernel`'s ``value``.
RUNS_READ = "_r2mad_read"


def shut_down(kernel: Any) -> None:
    from jupyter_core.utils import run_sync

    try:
        if kernel.has_kernel:
            run_sync(kernel.shutdown_kernel)(now=False)
    except Exception as exc:  # a kernel that is already gone
        logger.debug("shutting a kernel down: %s", exc)


def register_reusing_engine() -> None:
    """papermill's nbclient engine, with a client that runs a silent ``prologue`` in the kernel before the
    notebook's first cell and closes its channels afterwards (the kernel, not the client, outlives the notebook),
    and reports the cells and progress bars it sees to a :class:`NotebookProgress`."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines

    with _ENGINE_LOCK:
        if REUSING_ENGINE in papermill_engines._engines:
            return

        class ReusingClient(PapermillNotebookClient):
            def __init__(self, nb_man: Any, prologue: str = "", progress: "NotebookProgress | None" = None,
                         **kwargs: Any) -> None:
                super().__init__(nb_man, **kwargs)
                self.prologue = prologue
                self.progress = progress
                if progress is not None:
                    self.on_cell_execute = progress.cell_started

            def process_message(self, msg: dict, cell: Any, cell_index: int) -> Any:
                if self.progress is not None:
                    self.progress.message(msg)
                return super().process_message(msg, cell, cell_index)

            def papermill_execute_cells(self) -> None:
                if self.prologue:
                    reply = self.wait_for_reply(self.kc.execute(self.prologue, silent=True, store_history=False))
                    content = (reply or {}).get("content", {})
                    if content.get("status") != "ok":
                        raise RuntimeError(f"preparing the kernel: {content.get('ename')}: {content.get('evalue')}")
                super().papermill_execute_cells()

            def execute(self, **kwargs: Any) -> Any:
                try:
                    return super().execute(**kwargs)
                finally:
                    if self.kc is not None:
                        self.kc.stop_channels()
                        self.kc = None

        class ReusingEngine(NBClientEngine):
            @classmethod
            def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                         stdout_file: Any = None, stderr_file: Any = None, start_timeout: int = 60,
                                         execution_timeout: Any = None, **kwargs: Any) -> Any:
                # NBClientEngine's own method, with ReusingClient in place of PapermillNotebookClient
                kwargs.pop("input_path", None)
                timeout = execution_timeout if execution_timeout else kwargs.get("timeout")
                kwargs = {k: v for k, v in kwargs.items() if k not in ("timeout", "startup_timeout")}
                save = nb_man.save
                nb_man.save = _at_most_every(SAVE_EVERY, save)
                try:
                    return ReusingClient(nb_man, **kwargs, timeout=timeout, startup_timeout=start_timeout,
                                         kernel_name=kernel_name, log=logging.getLogger("papermill"),
                                         log_output=log_output, stdout_file=stdout_file,
                                         stderr_file=stderr_file).execute()
                finally:
                    nb_man.save = save  # papermill's closing save (notebook_complete, in its finally) always writes

        papermill_engines.register(REUSING_ENGINE, ReusingEngine)


#: Seconds between two writes of a running notebook's output file (papermill writes the whole notebook, validated,
#: when each cell starts and ends: 168 of the runner's 227 busy samples in the sim profile, py-spy). The last write,
#: when the notebook ends, fails or is interrupted, is always made, so the executed notebook is the same file.
SAVE_EVERY = 15.0


def _at_most_every(seconds: float, save: Callable[..., None]) -> Callable[..., None]:
    last = [time.monotonic()]

    def throttled(**kwargs: Any) -> None:
        if time.monotonic() - last[0] >= seconds:
            save(**kwargs)
            last[0] = time.monotonic()

    return throttled


def record_timing(executed_dir: Path, notebook: str, seconds: float, succeeded: bool) -> None:
    """Record one notebook's wall time in ``executed_dir/timings.json`` (the longest-first hints read it back)."""
    path = executed_dir / "timings.json"
    try:
        timings = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except json.JSONDecodeError:
        timings = {}
    timings[notebook] = {"seconds": round(seconds, 2), "succeeded": succeeded,
                         "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write(path, json.dumps(dict(sorted(timings.items())), indent=2) + "\n")


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------
#: A grid's bar (:meth:`r2mad_lab.reproduce.grid.ExperimentGrid.grid`): its units are the notebook's runs.
_GRID_BAR = __import__("re").compile(r"^\d+ cells$")


class NotebookProgress:
    """What one running notebook shows on a :class:`~r2mad_lab.experiments.progress.ProgressBoard`: its runs done of
    those its grids announced so far (every ``N cells`` bar, added up), the cell it runs and the bar it draws now.

    Fed by the notebook client: :meth:`cell_started` (nbclient's ``on_cell_execute`` hook) and :meth:`message`
    (every kernel message; tqdm bars arrive as ``stderr`` stream text)."""

    def __init__(self, board: ProgressBoard, name: str) -> None:
        self.board = board
        self.name = name
        self._grid: tuple[str, int, int] | None = None  # the current grid bar: description, done, total
        self._runs_before = 0  # runs of the grids that finished
        self._cell = ""  # the running cell, shown again when a bar it drew has finished

    def cell_started(self, cell: Any = None, cell_index: int = 0, **_: Any) -> None:
        source = str((cell or {}).get("source", "")) if cell is not None else ""
        first = next((line.strip().lstrip("#").strip() for line in source.splitlines() if line.strip()), "")
        summary = first if len(first) <= 48 else first[:47] + "…"
        self._cell = f"cell {cell_index}" + (f" ({summary})" if summary else "")
        self.board.update(self.name, work=self._cell)

    def message(self, msg: Mapping[str, Any]) -> None:
        try:
            if msg.get("msg_type") != "stream" or msg.get("content", {}).get("name") != "stderr":
                return
            bar = parse_tqdm(str(msg["content"].get("text", "")))
        except (AttributeError, KeyError, TypeError, ValueError):
            return
        if bar is not None:
            self.bar(*bar)

    def bar(self, description: str, done: int, total: int | None, postfix: str = "") -> None:
        if _GRID_BAR.match(description) and total is not None:
            if self._grid is not None and (self._grid[0] != description or done < self._grid[1]):
                self._runs_before += self._grid[1]  # a new grid: the last one's runs are done
            self._grid = (description, done, total)
            self.board.update(self.name, done=self._runs_before + done, total=self._runs_before + total, unit="runs")
            return
        if total and done >= total:  # a finished bar (a model's weights loaded) is not what the cell does now
            self.board.update(self.name, work=self._cell)
            return
        counts = f" {done}/{total}" if total else f" {done}"
        self.board.update(self.name, work=f"{description}{counts}" + (f", {postfix}" if postfix else ""))


def duration_text(seconds: float) -> str:
    """A notebook's time as ``make reproduce`` prints it: ``42.0 s``, ``7 min 44 s``."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    whole = round(seconds)  # rounded once: 299.6 s is 5 min 00 s, not 4 min 60 s
    return f"{whole // 60} min {whole % 60:02d} s"


class Display:
    """What ``make reproduce`` prints while its notebooks run: ``[4/10] 04_ablations ...`` when one starts, ``done in``
    or ``FAILED`` when it ends (through ``echo``), and between them the
    :class:`~r2mad_lab.experiments.progress.ProgressBoard`
    of the notebooks running, each with its time left from ``hints`` (the recorded timings)."""

    def __init__(self, position: Mapping[str, int], notebooks: Sequence[Path], hints: Mapping[str, float],
                 echo: Callable[[str], None], board: ProgressBoard | None = None) -> None:
        self.position, self.total, self.hints, self.echo = position, len(position), hints, echo
        self.not_started = {notebook.stem for notebook in notebooks}
        self.prepared: set[str] = set()
        self.running: set[str] = set()
        self.board = board or ProgressBoard(waiting=self.waiting)

    def waiting(self) -> float | None:
        """The recorded seconds of the notebooks not started yet."""
        return sum(self.hints.get(name, 0.0) for name in list(self.not_started)) or None

    def progress(self, notebook: Path) -> NotebookProgress:
        return NotebookProgress(self.board, notebook.stem)

    def preparing(self, notebook: Path) -> None:
        """Said once per notebook whose kernel prepares it (``run_workers``' ``prepare``) while others finish."""
        if notebook.stem in self.prepared:
            return
        self.prepared.add(notebook.stem)
        try:
            waiting_for = sorted(self.running)
        except RuntimeError:  # a notebook started or ended just now, in another worker
            waiting_for = []
        others = f" while {', '.join(waiting_for)} finishes" if waiting_for else ""
        self.board.say(f"  {notebook.stem}: its kernel reads the finished runs{others}", self.echo)

    def started(self, notebook: Path) -> None:
        self.not_started.discard(notebook.stem)
        self.running.add(notebook.stem)
        self.board.say(f"[{self.position[notebook.stem]}/{self.total}] {notebook.stem} ...", self.echo)
        self.board.begin(notebook.stem, expected=self.hints.get(notebook.stem))

    def finished(self, notebook: Path, result: NotebookResult) -> None:
        self.running.discard(notebook.stem)
        self.board.end(notebook.stem)
        tag = f"[{self.position[notebook.stem]}/{self.total}] {notebook.stem}"
        if result.error:
            self.board.say(f"{tag} FAILED after {result.seconds:.1f} s in {result.error}", self.echo)
            self.board.say(f"  the partly executed notebook is {result.output}", self.echo)
        else:
            self.board.say(f"{tag} done in {duration_text(result.seconds)}", self.echo)
