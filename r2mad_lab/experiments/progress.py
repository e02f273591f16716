"""Progress of long work: one line updated in place on a terminal, plain periodic lines in a log.

A :class:`ProgressBoard` holds the tasks running now (a notebook, a sweep's variant, a batch of runs), each with its
units done of a total, the work it is on, when it started and how long it is expected to take (a recorded timing).
It renders them as one line: ``04_ablations 8/18 cells; now: r2mad truthfulqa 0/1 round 2 | 2 min 10 s, about
2 min 40 s left``. Where it goes:

- **a terminal** (``stream.isatty()``): the line is redrawn in place every ``refresh`` seconds (``\\r`` and erase to
  the end of the line); :meth:`ProgressBoard.say` prints a permanent line above it.
- **anything else** (a CI log, a file): a plain line when a unit of work finished (at most one per ``min_gap``
  seconds) and, whatever happens, one every ``heartbeat`` seconds: a log is never silent for longer than that.

Use it as a context manager (a daemon thread calls :meth:`ProgressBoard.tick`), or call :meth:`~ProgressBoard.tick`
yourself; the clock is injectable (tests). ``make reproduce`` shows its notebooks on one
(:mod:`r2mad_lab.reproduce.notebook_runner`); ``r2mad runs`` and the sweeps can show theirs the same way.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

#: Seconds between plain lines when nothing finished (a log's longest silence).
HEARTBEAT_SECONDS = 20.0
#: Seconds between two plain lines for finished units (a burst of fast units is one line).
MIN_GAP_SECONDS = 5.0
#: Seconds between redraws on a terminal.
REFRESH_SECONDS = 1.0


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


@dataclass
class Task:
    """One piece of long work on the board."""

    name: str
    started: float
    expected: float | None = None  # seconds it took last time (None: unknown)
    done: int = 0
    total: int | None = None
    unit: str = "runs"
    work: str = ""  # what it is doing now
    finished_units: int = 0  # units finished since the board's last plain line

    def describe(self, now: float) -> str:
        text = self.name
        if self.total:
            text += f" {self.done}/{self.total} {self.unit}"
        if self.work:
            text += f"; now: {self.work}"
        text += f" ({duration(now - self.started)}"
        if self.expected is not None:
            left = self.expected - (now - self.started)
            text += f", about {duration(left)} left" if left > 0 else f", over last time's {duration(self.expected)}"
        return text + ")"


@dataclass
class ProgressBoard:
    """The tasks running now, shown as one line (see the module's docstring).

    ``stream``: where the line goes (default stdout, flushed: the lines printed around it stay in order); ``tty``: force
    terminal or plain output (default: ask the stream); ``clock``: seconds (``time.monotonic``); ``prefix``: the start
    of every line; ``waiting``: the seconds of work not started yet (for the overall time left), a callable read at each
    line.
    """

    stream: TextIO | None = None
    tty: bool | None = None
    clock: Callable[[], float] = time.monotonic
    prefix: str = "  progress: "
    refresh: float = REFRESH_SECONDS
    heartbeat: float = HEARTBEAT_SECONDS
    min_gap: float = MIN_GAP_SECONDS
    waiting: Callable[[], float | None] = lambda: None
    tasks: dict[str, Task] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stream = self.stream if self.stream is not None else sys.stdout
        if self.tty is None:
            self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.RLock()
        self._started = self.clock()
        self._last_line = self._started  # the board's start counts as its first line
        self._shown = False  # a terminal line is on screen
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- tasks -------------------------------------------------------------------------------------------------
    def begin(self, name: str, *, expected: float | None = None, total: int | None = None, unit: str = "runs") -> Task:
        with self._lock:
            task = self.tasks[name] = Task(name, self.clock(), expected, total=total, unit=unit)
            return task

    def update(self, name: str, *, done: int | None = None, total: int | None = None, unit: str | None = None,
               work: str | None = None) -> None:
        """Set a task's counts or current work; units finished since the last line make a line due (plain output)."""
        with self._lock:
            task = self.tasks.get(name)
            if task is None:
                return
            if done is not None:
                if done > task.done:
                    task.finished_units += done - task.done
                task.done = done
            if total is not None:
                task.total = total
            if unit is not None:
                task.unit = unit
            if work is not None:
                task.work = work

    def end(self, name: str) -> None:
        with self._lock:
            self.tasks.pop(name, None)

    # -- output ------------------------------------------------------------------------------------------------
    def line(self) -> str:
        now = self.clock()
        with self._lock:
            parts = [task.describe(now) for task in self.tasks.values()]
            text = self.prefix + (" | ".join(parts) if parts else "waiting")
            left = [max(0.0, t.expected - (now - t.started)) for t in self.tasks.values() if t.expected is not None]
            waiting = self.waiting()
            if left or waiting:
                text += f" | all: {duration(now - self._started)}, about {duration(sum(left) + (waiting or 0.0))} left"
            return text

    def tick(self) -> str | None:
        """Show the line if it is due; returns what was written (None: nothing)."""
        with self._lock:
            now = self.clock()
            finished = any(task.finished_units for task in self.tasks.values())
            since = now - self._last_line
            if self.tty:
                due = since >= self.refresh
            else:
                due = since >= self.heartbeat or (finished and since >= self.min_gap)
            if not due:
                return None
            text = self.line()
            if self.tty:
                width = shutil.get_terminal_size((120, 20)).columns - 1
                self._write("\r" + text[:width] + "\x1b[K")
                self._shown = True
            else:
                self._write(text + "\n")
            self._last_line = now
            for task in self.tasks.values():
                task.finished_units = 0
            return text

    def say(self, text: str, echo: Callable[[str], None] | None = None) -> None:
        """A permanent line (through ``echo``, default the stream), above the terminal's progress line."""
        with self._lock:
            self._clear()
            if echo is None:
                self._write(text + "\n")
            else:
                echo(text)
                self._write("")  # flushes the stream echo may share
            if not self.tty:
                self._last_line = self.clock()  # a printed line is not silence

    def _clear(self) -> None:
        if self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)  # type: ignore[union-attr]
            self.stream.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):  # a closed stream: progress is not worth failing for
            pass

    # -- the background thread ---------------------------------------------------------------------------------
    def __enter__(self) -> "ProgressBoard":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="r2mad-progress", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        period = min(self.refresh if self.tty else self.min_gap, 1.0)
        while not self._stop.wait(period):
            self.tick()

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            self._clear()


#: tqdm's default text: ``desc: 44%|####4     | 8/18 [00:10<00:12,  1.2s/cell, round 2 (3 active)]``.
_TQDM = re.compile(r"(?:^|[\r\n])(?P<desc>[^\r\n|]*?):\s*\d+%\|[^|\r\n]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
                   r"\[(?P<inside>[^\]\r\n]*)\]")


def parse_tqdm(text: str) -> tuple[str, int, int, str] | None:
    """The last tqdm bar drawn in ``text`` (a stream's output, ``\\r``-separated redraws) as
    ``(description, done, total, postfix)``, or None when it holds no bar."""
    found = None
    for found in _TQDM.finditer(text):  # noqa: B007  (the loop keeps the last match)
        pass
    if found is None:
        return None
    postfix = ", ".join(part.strip() for part in found["inside"].split(", ")[2:])  # after elapsed<left and the rate
    return found["desc"].strip(), int(found["n"]), int(found["total"]), postfix
