"""Long work shows its progress (issue 52): the progress board's lines, on an injected clock (so no verdict depends on
the machine's load), what a notebook's kernel messages make of it, and one end-to-end run of ``tiny --only 04``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tqdm import tqdm

from r2mad_lab.experiments.progress import HEARTBEAT_SECONDS, MIN_GAP_SECONDS, ProgressBoard, duration, parse_tqdm
from r2mad_lab.reproduce.notebook_runner import Display, NotebookProgress, NotebookResult

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _board(tty: bool = False) -> tuple[ProgressBoard, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    return ProgressBoard(stream=stream, tty=tty, clock=clock), stream, clock


def test_a_log_gets_a_line_every_heartbeat_when_nothing_finishes() -> None:
    board, stream, clock = _board()
    board.begin("04_ablations", expected=300.0)
    stamps = []
    for _ in range(600):  # ten minutes of a notebook that reports nothing, ticked every second
        clock.now += 1.0
        if board.tick() is not None:
            stamps.append(clock.now)
    gaps = [b - a for a, b in zip([1000.0, *stamps], stamps, strict=False)]
    assert len(stamps) == 600 // HEARTBEAT_SECONDS and max(gaps) == HEARTBEAT_SECONDS <= 30
    assert stream.getvalue().count("\n") == len(stamps) and "\r" not in stream.getvalue()


def test_a_log_gets_a_line_per_finished_run_at_most_one_per_min_gap() -> None:
    board, stream, clock = _board()
    board.begin("04_ablations", total=18, unit="runs")
    lines = []
    for run in range(1, 19):  # a run finishes every MIN_GAP_SECONDS: a line each
        clock.now += MIN_GAP_SECONDS
        board.update("04_ablations", done=run)
        lines.append(board.tick())
    assert all(lines) and lines[-1].startswith("  progress: 04_ablations 18/18 runs")
    clock.now += 1.0
    for _ in range(3):  # a burst within a second is one line, once the gap has passed
        board.update("04_ablations", done=18)  # nothing new finished
    assert board.tick() is None
    board.update("04_ablations", total=20)
    board.update("04_ablations", done=20)
    assert board.tick() is None  # 1 s after the last line
    clock.now += MIN_GAP_SECONDS
    assert "20/20 runs" in board.tick()


def test_the_line_says_the_work_elapsed_and_the_time_left_from_recorded_timings() -> None:
    board, _, clock = _board()
    board.waiting = lambda: 120.0  # notebooks not started yet took 2 min last time
    board.begin("04_ablations", expected=300.0, total=18)
    board.update("04_ablations", done=8, work="r2mad math500 0/1, round 2 (3 active)")
    clock.now += 130.0
    assert board.line() == ("  progress: 04_ablations 8/18 runs; now: r2mad math500 0/1, round 2 (3 active) "
                            "(2 min 10 s, about 2 min 50 s left) | all: 2 min 10 s, about 4 min 50 s left")
    clock.now += 400.0
    assert "over last time's 5 min 00 s" in board.line()
    assert duration(42) == "42 s" and duration(3725) == "1 h 02 min"


def test_a_terminal_gets_one_line_redrawn_in_place_and_said_lines_above_it() -> None:
    board, stream, clock = _board(tty=True)
    board.begin("02_memory")
    clock.now += 1.0
    assert board.tick() is not None
    board.say("[2/10] 02_memory done in 41.0 s")
    clock.now += 1.0
    board.tick()
    text = stream.getvalue()
    assert text.startswith("\r  progress: 02_memory") and "\x1b[K" in text
    assert "\r\x1b[K[2/10] 02_memory done in 41.0 s\n\r  progress:" in text  # cleared, said, redrawn


def test_the_background_thread_ticks_and_clears_the_line_on_exit() -> None:
    stream = io.StringIO()
    with ProgressBoard(stream=stream, tty=True, refresh=0.05) as board:
        board.begin("01_data")
        deadline = time.monotonic() + 60
        while "01_data" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "01_data" in stream.getvalue() and stream.getvalue().endswith("\r\x1b[K")


def test_tqdm_bars_are_read_from_a_kernels_stderr() -> None:
    text = io.StringIO()
    bar = tqdm(total=18, desc="18 cells", unit="cell", file=text, mininterval=0)
    bar.update(8)
    bar.set_postfix_str("round 2 (3 active)")
    assert parse_tqdm(text.getvalue()) == ("18 cells", 8, 18, "round 2 (3 active)")
    assert parse_tqdm("no bar here 3/4") is None


def _stderr(text: str) -> dict:
    return {"msg_type": "stream", "content": {"name": "stderr", "text": text}}


def test_a_notebooks_runs_add_up_over_its_grids_and_its_cell_is_the_current_work() -> None:
    board, _, _ = _board()
    board.begin("04_ablations")
    progress = NotebookProgress(board, "04_ablations")
    progress.cell_started(cell={"source": "# the ablation grid\nablation = exp.grid(METHODS)"}, cell_index=5)
    assert board.tasks["04_ablations"].work == "cell 5 (the ablation grid)"
    progress.message(_stderr("\r12 cells:   0%|          | 0/12 [00:00<?, ?cell/s]"))
    progress.message(_stderr("\r12 cells: 100%|##########| 12/12 [00:05<00:00, 2.4cell/s]"))
    progress.message({"msg_type": "stream", "content": {"name": "stdout", "text": "3/4 [ignored]"}})
    progress.message(_stderr("\r32 cells:  50%|#####     | 16/32 [00:05<00:05, 3.1cell/s]"))
    progress.message(_stderr("\rr2mad math500:   0%|          | 0/1 [00:01<?, ?q/s, round 2 (3 active)]"))
    task = board.tasks["04_ablations"]
    assert (task.done, task.total, task.unit) == (28, 44, "runs")
    assert task.work == "r2mad math500 0/1, round 2 (3 active)"
    # a finished bar (a model's weights loaded) stops being the work: the cell is shown again
    progress.message(_stderr("\rLoading weights: 100%|##########| 103/103 [00:01<00:00, 80it/s]"))
    assert task.work == "cell 5 (the ablation grid)"


def test_the_runner_says_each_notebook_and_shows_the_running_ones() -> None:
    said: list[str] = []
    board, _, clock = _board()
    notebooks = [Path("01_data.ipynb"), Path("04_ablations.ipynb")]
    display = Display({"01_data": 1, "04_ablations": 2}, notebooks, {"01_data": 10.0, "04_ablations": 300.0},
                      said.append, board=board)
    assert display.waiting() == 310.0
    display.started(notebooks[1])
    assert "04_ablations" in board.tasks and display.waiting() == 10.0
    clock.now += 60.0
    display.finished(notebooks[1], NotebookResult("04_ablations", 60.0, Path("out.ipynb")))
    assert said == ["[2/2] 04_ablations ...", "[2/2] 04_ablations done in 60.0 s"] and not board.tasks
    from r2mad_lab.reproduce.notebook_runner import duration_text

    assert duration_text(299.6) == "5 min 00 s" and duration_text(464.2) == "7 min 44 s"


@pytest.mark.slow
def test_tiny_only_04_prints_a_progress_line_at_least_every_30_seconds(tmp_path: Path) -> None:
    """End to end: the lines of ``make reproduce PROFILE=tiny ARGS='--only 04'`` as they arrive. A log gets a line
    per heartbeat (20 s) from the runner's own thread: as many lines as 30 s intervals of the notebook's run, at
    least, and no arrival gap over a bound generous for any load (the runner itself may wait for a core)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "r2mad_lab.reproduce", "--profile", "tiny", "--only", "04",
         "--output-dir", str(tmp_path)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    arrivals: list[tuple[float, str]] = []
    assert process.stdout is not None
    for line in process.stdout:
        arrivals.append((time.monotonic(), line.rstrip("\n")))
    assert process.wait(timeout=1800) == 0, "\n".join(text for _, text in arrivals)
    started = next(at for at, text in arrivals if text.startswith("[1/1] 04_ablations ..."))
    ended = next(at for at, text in arrivals if text.startswith("[1/1] 04_ablations done"))
    during = [at for at, text in arrivals if started <= at <= ended]
    progress = [text for at, text in arrivals if text.startswith("  progress: 04_ablations")]
    assert progress and any("/" in text and "runs" in text for text in progress), progress
    assert len(during) - 2 >= int((ended - started) // 30) - 1
    assert max(b - a for a, b in zip(during, during[1:], strict=False)) <= 90
