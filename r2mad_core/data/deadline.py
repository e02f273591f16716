"""A deadline for symbolic work that works in any thread: one long-lived verifier thread (issue 35).

math-verify's own timeouts use ``signal.alarm``, which works only in the main thread (elsewhere it raises
ValueError), so :mod:`r2mad_core.data.answers` switches them off and runs every parse and comparison through
:func:`with_deadline`: the work runs in one long-lived daemon thread (a thread per call cost ~4% of the
default run's CPU), the caller waits until the job has used ``seconds`` of CPU time and is never interrupted
itself, and a computation that overruns is abandoned with its thread, which :func:`_stop_thread` stops in the
background.

The budget is CPU time of the verifier thread (its own POSIX thread clock), not wall time (issue 52): on a loaded
machine the thread waits for a core without using its budget, so whether a comparison finishes in time, and so a
verdict, does not depend on the machine's load. A job that uses no CPU (it cannot happen in sympy, which never
blocks) is still given up after :data:`WALL_BACKSTOP_SECONDS` of wall time. Without thread clocks (not Linux/BSD/macOS)
the budget is wall time, as before.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger("r2mad_core.data.answers")  # the messages read as before
T = TypeVar("T")

#: A job that has not used its CPU budget is still given up after this much wall time (far above any load: a job
#: that never gets a core for 10 minutes). Only a job that blocks without computing can reach it.
WALL_BACKSTOP_SECONDS = 600.0


def _thread_cpu_clock(thread: threading.Thread) -> int | None:
    """The POSIX CPU-time clock of ``thread``, or None where there is none."""
    getter = getattr(time, "pthread_getcpuclockid", None)
    if getter is None or thread.ident is None:
        return None
    try:
        return getter(thread.ident)
    except (OSError, OverflowError):
        return None


def wait_cpu_seconds(done: threading.Event, worker: threading.Thread, seconds: float,
                     wall_backstop: float = WALL_BACKSTOP_SECONDS) -> bool:
    """Wait until ``done`` is set (True) or ``worker`` has used ``seconds`` of CPU time since the call (False).

    The wait is in slices of the budget left: a thread cannot use more CPU than the wall time that passed, so no
    slice can overshoot the budget. Without a thread clock the budget is wall time.
    """
    clock = _thread_cpu_clock(worker)
    if clock is None:
        return done.wait(seconds)
    try:
        start = time.clock_gettime(clock)
    except OSError:  # the thread ended already
        return done.is_set()
    give_up = time.monotonic() + max(wall_backstop, seconds)
    while True:
        try:
            used = time.clock_gettime(clock) - start
        except OSError:  # the thread ended: it set done or never will
            return done.is_set()
        left = seconds - used
        if left <= 0:
            return done.is_set()
        if done.wait(min(left, max(0.0, give_up - time.monotonic())) + 1e-3):
            return True
        if time.monotonic() >= give_up:
            return done.is_set()


class SymbolicTimeout(BaseException):
    """Raised inside a symbolic computation that ran past its deadline, to stop it (a BaseException, so
    that the ``except Exception`` blocks of sympy and math-verify do not swallow it)."""


class _Ending:
    """Whether a verifier thread has ended its work, under the lock :func:`_stop_thread` holds while it raises an
    exception in that thread. A thread's id is reused by the next thread as soon as it exits: raising by id after
    the thread ended would hit an unrelated thread (a debate's, the caller's). The thread marks itself ended under
    the lock before it exits (:func:`_end`), and nothing is raised in it after that."""

    __slots__ = ("lock", "ended")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended = False


def _raise_in(ident: int, exception: type[BaseException] | None) -> None:
    """``PyThreadState_SetAsyncExc``: raise ``exception`` in thread ``ident`` at its next bytecode (None: withdraw
    one not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                              ctypes.py_object(exception) if exception is not None else None)


def _stop_thread(worker: threading.Thread, ending: _Ending) -> None:
    """Raise :class:`SymbolicTimeout` in ``worker`` until it ends (runs in a daemon reaper thread).

    ``PyThreadState_SetAsyncExc`` makes Python raise the exception in that thread at its next
    bytecode boundary, as a signal handler would; it is repeated because an exception that lands in a
    finaliser or a bare ``except`` can be swallowed, and because long C calls delay it. It is raised only while
    ``ending`` says the thread has not ended (under its lock): never in a thread that took over the id.
    """
    while True:
        with ending.lock:
            if ending.ended or worker.ident is None or not worker.is_alive():
                return
            _raise_in(worker.ident, SymbolicTimeout)
        worker.join(0.1)


def _end(ending: _Ending) -> None:
    """The verifier thread's last step: mark it ended (no exception is raised in it after this) and withdraw one
    raised before and not yet delivered. An exception delivered here is caught and the step done again."""
    while True:
        try:
            with ending.lock:
                ending.ended = True
                _raise_in(threading.get_ident(), None)
            return
        except SymbolicTimeout:
            continue


class _Job:
    """One call handed to the verifier thread: the function, then its value or error."""

    __slots__ = ("function", "value", "error", "done")

    def __init__(self, function: Callable[[], object]) -> None:
        self.function = function
        self.value: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()


def _serve(jobs: "queue.SimpleQueue[_Job | None]", ending: _Ending) -> None:
    """The verifier thread's loop: run each job; end on ``None`` (abandoned) or when stopped."""
    try:
        while True:
            job = jobs.get()
            if job is None:
                return
            try:
                job.value = job.function()
            except SymbolicTimeout:
                return
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                job.error = error
            job.done.set()
    except SymbolicTimeout:  # landed between jobs: this thread was abandoned anyway
        return
    finally:
        _end(ending)


class _Verifier:
    """One long-lived daemon thread that runs every symbolic parse and comparison, one at a time.

    A thread per call cost ~4% of the default run's CPU (issue 35). The deadline: the caller waits until its job
    has used ``seconds`` of the verifier thread's CPU time (:func:`wait_cpu_seconds`); a job that overruns gets ``on_timeout`` and its thread is
    abandoned (renamed ``r2mad-symbolic-overrun``, stopped in the background by :func:`_stop_thread`, and
    told to end by a ``None`` job should it finish first); the next call starts a new thread.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """No thread and a free lock: at start, and in a forked child (the parent's thread and lock holder are not there)."""
        self._lock = threading.Lock()  # one job at a time: a caller's deadline starts when its job is handed over
        self._worker: threading.Thread | None = None
        self._jobs: "queue.SimpleQueue[_Job | None] | None" = None
        self._ending: _Ending | None = None  # each new worker gets its own (run)

    def run(self, function: Callable[[], T], seconds: float, on_timeout: T) -> T:
        if threading.current_thread() is self._worker:  # a job asking for another: run it here
            return function()
        with self._lock:
            if self._worker is None or not self._worker.is_alive():  # first call, after an overrun or a fork
                self._jobs, self._ending = queue.SimpleQueue(), _Ending()
                self._worker = threading.Thread(target=_serve, args=(self._jobs, self._ending), name="r2mad-verifier",
                                                daemon=True)
                self._worker.start()
            job = _Job(function)
            self._jobs.put(job)  # type: ignore[union-attr]
            if not wait_cpu_seconds(job.done, self._worker, seconds):
                worker, jobs, ending = self._worker, self._jobs, self._ending
                self._worker = self._jobs = None
                logger.warning("symbolic comparison gave up after %.1f CPU s", seconds)
                worker.name = "r2mad-symbolic-overrun"
                jobs.put(None)  # type: ignore[union-attr]
                threading.Thread(target=_stop_thread, args=(worker, ending), name="r2mad-symbolic-reaper",
                                 daemon=True).start()
                return on_timeout
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]


_VERIFIER = _Verifier()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_VERIFIER._reset)


def with_deadline(function: Callable[[], T], seconds: float, on_timeout: T) -> T:
    """``function()``, or ``on_timeout`` when it uses more than ``seconds`` of CPU time; safe in any thread.

    math-verify's own timeouts use ``signal.alarm``, which works only in the main thread (elsewhere it
    raises ValueError). Here the work runs in one long-lived daemon thread (:class:`_Verifier`); the caller
    waits until the job has used ``seconds`` of CPU time (whatever the machine's load) and is never interrupted itself. A worker that overruns is stopped by
    :func:`_stop_thread` in the background.
    """
    return _VERIFIER.run(function, seconds, on_timeout)
