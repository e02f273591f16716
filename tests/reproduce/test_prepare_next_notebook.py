"""The report's kernel prepares while the last notebook finishes (issue 52): ``run_workers``' ``prepare`` and what the
report's kernel runs then, :func:`r2mad_lab.reproduce.grid.load_finished_runs`."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from r2mad_lab.experiments import run_reader
from r2mad_lab.reproduce import grid, notebook_runner
from r2mad_lab.reproduce.notebook_runner import NotebookResult, run_workers


class FakeKernel:
    """A kept kernel as ``run_workers`` sees one: started, shut down at the end."""

    has_kernel = True

    def __init__(self) -> None:
        self.shut = False


def _notebook(path: Path, after: list[str]) -> Path:
    path.write_text(json.dumps({"cells": [], "metadata": {"r2mad": {"after": after}}, "nbformat": 4,
                                "nbformat_minor": 5}), encoding="utf-8")
    return path


@pytest.fixture()
def fake_kernels(monkeypatch: pytest.MonkeyPatch) -> list[FakeKernel]:
    made: list[FakeKernel] = []

    def new() -> FakeKernel:
        made.append(FakeKernel())
        return made[-1]

    monkeypatch.setattr(notebook_runner, "new_kernel_manager", new)
    monkeypatch.setattr(notebook_runner, "shut_down", lambda kernel: setattr(kernel, "shut", True))
    monkeypatch.setattr(notebook_runner, "PREPARE_PERIOD", 0.01)
    monkeypatch.setattr(notebook_runner, "PREPARE_PERIOD_MAX", 0.04)
    return made


def _three(tmp_path: Path) -> list[Path]:
    return [_notebook(tmp_path / "01_long.ipynb", []), _notebook(tmp_path / "02_short.ipynb", []),
            _notebook(tmp_path / "03_report.ipynb", ["01_long", "02_short"])]


def test_the_idle_worker_prepares_the_report_in_its_kernel_and_runs_it_there(tmp_path: Path,
                                                                            fake_kernels: list[FakeKernel]) -> None:
    """01 runs long; 02's worker, with nothing to take, prepares 03 (which waits only for 01, running) again and again
    in its own kernel until 01 finishes, then runs 03 in that kernel, cleared; 01's worker takes nothing more."""
    notebooks = _three(tmp_path)
    long_may_end = threading.Event()
    ran: dict[str, tuple[Any, bool, str]] = {}
    prepared: list[tuple[str, Any, bool]] = []

    def run_one(notebook: Path, kernel: Any, clear: bool) -> NotebookResult:
        ran[notebook.stem] = (kernel, clear, threading.current_thread().name)
        if notebook.stem == "01_long":
            assert long_may_end.wait(60)
        return NotebookResult(notebook.stem, 0.0, notebook)

    def prepare(notebook: Path, kernel: Any) -> None:
        prepared.append((notebook.stem, kernel, "01_long" in ran and "03_report" not in ran))
        if len(prepared) == 3:  # prepared more than once while 01 runs: now let it end
            long_may_end.set()

    results = run_workers(notebooks, run_one, jobs=2, reuse_kernels=True, hints={"01_long": 9.0}, prepare=prepare)
    assert [r.notebook for r in results][-1] == "03_report" and not any(r.error for r in results)
    assert len(prepared) >= 3 and {name for name, _, _ in prepared} == {"03_report"}
    assert all(while_01_ran for _, _, while_01_ran in prepared)  # never once 03 had started
    report_kernel, cleared, report_worker = ran["03_report"]
    assert cleared and report_kernel is ran["02_short"][0] and report_worker == ran["02_short"][2]
    assert all(kernel is report_kernel for _, kernel, _ in prepared)
    assert ran["01_long"][0] is not report_kernel
    assert all(kernel.shut for kernel in fake_kernels)


def test_no_preparing_without_kept_kernels_and_a_failed_prepare_changes_nothing(tmp_path: Path,
                                                                               fake_kernels: list[FakeKernel]) -> None:
    notebooks = _three(tmp_path)
    calls: list[str] = []

    def run_one(notebook: Path, kernel: Any, clear: bool) -> NotebookResult:
        if notebook.stem == "01_long":
            deadline = threading.Event()
            deadline.wait(0.3)  # long enough for the other worker to look for work more than once
        return NotebookResult(notebook.stem, 0.0, notebook)

    def prepare(notebook: Path, kernel: Any) -> None:
        calls.append(notebook.stem)
        raise RuntimeError("the kernel said no")

    results = run_workers(notebooks, run_one, jobs=2, reuse_kernels=False, hints={"01_long": 9.0}, prepare=prepare)
    assert calls == [] and sorted(r.notebook for r in results) == ["01_long", "02_short", "03_report"]
    results = run_workers(notebooks, run_one, jobs=2, reuse_kernels=True, hints={"01_long": 9.0}, prepare=prepare)
    assert calls == ["03_report"]  # tried once, then the worker only waits
    assert [r.notebook for r in results][-1] == "03_report" and not any(r.error for r in results)


def test_a_failure_while_preparing_stops_the_run_as_before(tmp_path: Path, fake_kernels: list[FakeKernel]) -> None:
    notebooks = _three(tmp_path)
    prepared = threading.Event()

    def run_one(notebook: Path, kernel: Any, clear: bool) -> NotebookResult:
        if notebook.stem == "01_long":
            assert prepared.wait(60)
            return NotebookResult(notebook.stem, 0.0, notebook, "RuntimeError: broken")
        return NotebookResult(notebook.stem, 0.0, notebook)

    results = run_workers(notebooks, run_one, jobs=2, reuse_kernels=True, hints={"01_long": 9.0},
                          prepare=lambda notebook, kernel: prepared.set())
    assert [r.notebook for r in results] == ["02_short", "01_long"]  # 03 never started; the failure last


def test_the_finished_runs_are_read_once_with_their_metrics_and_a_run_not_finished_is_left(tmp_path: Path) -> None:
    """Two cells of a real grid (simulated agents, 3 questions): read into the memo by ``load_finished_runs`` as the
    report's kernel would, the grid then hands out the same records and metrics without reading the transcripts; a
    directory without its metrics (not finished) is not read, nor one read before and unchanged."""
    from r2mad_lab.reproduce.grid import ExperimentGrid

    options = dict(models=[{"label": "Sim", "engine": "simulated", "model": None, "options": {}}],
                   benchmarks=["mmlu_pro_economics"], runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache",
                   test_limit=3, train_limit=2, max_tokens=64, progress=False)
    exp = ExperimentGrid(**options)
    made = exp.grid(["MAD", "CoT"])
    run_reader.FINISHED.clear()
    run_dirs = [outcome.run_dir for outcome in made.outcomes]
    unfinished = run_dirs[0].parent / "mad-000000000000"
    unfinished.mkdir()
    (unfinished / "config.json").write_text((run_dirs[0] / "config.json").read_text())
    (unfinished / "transcripts.jsonl").write_text((run_dirs[0] / "transcripts.jsonl").read_text())

    import time

    assert grid.load_finished_runs(str(tmp_path / "runs"), exp.bootstrap_resamples, since=time.time() + 60) == 0
    assert grid.load_finished_runs(str(tmp_path / "runs"), exp.bootstrap_resamples) == 2
    assert sorted(run_reader.FINISHED) == sorted(str(d) for d in run_dirs)
    assert grid.load_finished_runs(str(tmp_path / "runs"), exp.bootstrap_resamples) == 0  # unchanged: not again

    def no_reading(run_dir: Any) -> Any:
        raise AssertionError(f"read again: {run_dir}")

    original = run_reader.load_run
    run_reader.load_run = no_reading
    try:
        again = ExperimentGrid(**options).grid(["MAD", "CoT"])
    finally:
        run_reader.load_run = original
    for before, after in zip(made.outcomes, again.outcomes, strict=False):
        assert [r.model_dump() for r in after.records] == [r.model_dump() for r in before.records]
        assert json.dumps(after.metrics, sort_keys=True, default=str) == json.dumps(before.metrics, sort_keys=True,
                                                                                    default=str)
    run_reader.FINISHED.clear()


def test_code_runs_silently_in_a_kept_kernel_and_its_error_is_raised(tmp_path: Path) -> None:
    """``run_in_kernel`` in a real kernel: the code runs there (its process id written), the execution count is as it
    was, and an error in it is a RuntimeError naming it; the CLEAR_KERNEL prologue runs there too."""
    import os

    from jupyter_core.utils import run_sync

    kernel = notebook_runner.new_kernel_manager()
    run_sync(kernel.start_kernel)(extra_arguments=[notebook_runner.KERNEL_EXITS_WITH_RUNNER])
    try:
        target = tmp_path / "pid"
        notebook_runner.run_in_kernel(kernel, notebook_runner.START_KERNEL)
        notebook_runner.run_in_kernel(kernel,
                                      f"import os\nopen({str(target)!r}, 'w').write(str(os.getpid()))\nkept = 1")
        pid = int(target.read_text())
        assert pid != os.getpid()
        notebook_runner.run_in_kernel(kernel, notebook_runner.CLEAR_KERNEL)
        with pytest.raises(RuntimeError, match="NameError: name 'kept' is not defined"):  # the namespace was emptied
            notebook_runner.run_in_kernel(kernel, "kept")
        notebook_runner.run_in_kernel(kernel, f"import os\nopen({str(target)!r}, 'w').write("
                                              "str((os.getpid(), get_ipython().execution_count)))")
        assert target.read_text() == str((pid, 1))  # the same kernel; silent code counts no execution
        assert notebook_runner.load_runs_code("../runs/sim", 1000, 5.0) == ("_r2mad_read = __import__('r2mad_lab."
                                                                            "reproduce.grid', fromlist=['grid'])."
                                                                            "load_finished_runs('../runs/sim', 1000, "
                                                                            "5.0)")
        assert notebook_runner.run_in_kernel(kernel, notebook_runner.load_runs_code(str(tmp_path / "no-runs"), 1000),
                                             notebook_runner.RUNS_READ) == "0"
        with pytest.raises(RuntimeError, match="NameError"):
            notebook_runner.run_in_kernel(kernel, "", "not_a_name")
    finally:
        notebook_runner.shut_down(kernel)


def test_a_running_notebook_is_written_at_most_every_few_seconds_and_completely_at_its_end(tmp_path: Path) -> None:
    """papermill writes the whole notebook when each cell starts and ends; the runner's engine lets one write through
    every ``SAVE_EVERY`` seconds, and papermill's own last write (the notebook ended) always goes through: the executed
    file has every cell's output."""
    import nbformat

    calls: list[int] = []
    throttled = notebook_runner._at_most_every(3600.0, lambda **kwargs: calls.append(1))
    for _ in range(5):
        throttled()
    assert calls == []
    every = notebook_runner._at_most_every(0.0, lambda **kwargs: calls.append(1))
    every()
    every()
    assert calls == [1, 1]

    notebook = tmp_path / "01_cells.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"print({k} * 7)") for k in range(4)]
    nbformat.write(nb, notebook)
    import io

    board = notebook_runner.ProgressBoard(stream=io.StringIO())
    output = tmp_path / "out.ipynb"
    assert notebook_runner.execute(notebook, output, {}, progress=notebook_runner.NotebookProgress(board, "01")) is None
    executed = nbformat.read(output, as_version=4)
    assert [cell.outputs[0]["text"] for cell in executed.cells] == [f"{k * 7}\n" for k in range(4)]


def test_a_kept_kernels_reset_walks_the_objects_once_after_the_figures_are_closed() -> None:
    """IPython's ``%reset -f`` calls ``gc.collect()`` twice (itself and its display hook): ``reset_namespace`` runs it
    with the collector's walk switched off and puts ``gc.collect`` back, even when the reset fails; the kernel's
    prologue collects once, after closing the figures."""
    import gc

    from r2mad_lab.reproduce import gc_settings

    real = gc.collect
    seen: list[object] = []

    class Shell:
        def run_line_magic(self, name: str, line: str) -> None:
            seen.append((name, line, gc.collect(), gc.collect is real))

    gc_settings.reset_namespace(Shell())
    assert seen == [("reset", "-f", 0, False)] and gc.collect is real

    class Failing:
        def run_line_magic(self, name: str, line: str) -> None:
            raise KeyError(name)

    with pytest.raises(KeyError):
        gc_settings.reset_namespace(Failing())
    assert gc.collect is real
    prologue = notebook_runner.CLEAR_KERNEL.splitlines()
    assert "reset_namespace(get_ipython())" in prologue[0] and "'reset'" not in notebook_runner.CLEAR_KERNEL
    assert prologue.index("__import__('gc').collect()") > prologue.index("_p.close('all')")
