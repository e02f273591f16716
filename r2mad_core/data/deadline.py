"""A CPU-time deadline for symbolic work, in a worker process that is stopped without its cooperation.

math-verify's own timeouts use ``signal.alarm``, which works only in the main thread (elsewhere it raises
ValueError) and counts wall time, so :mod:`r2mad_core.data.answers` switches them off and runs every parse and
comparison through :func:`with_deadline`. The work runs in another process, never in the caller's: an exception
raised into a thread (by its id, as an earlier version did) lands at any bytecode, including inside the
code meant to withdraw it, and cannot stop C code at all; a process can be ended by the kernel at any instruction,
and nothing of it is left in the caller.

Two processes per process that needs them, started lazily (a forked child starts its own: :func:`os.getpid` is
checked on every call, and :func:`os.register_at_fork` forgets the parent's):

- the *zygote*: ``python -c`` with the caller's ``sys.path``; it imports :data:`PRELOAD` (math-verify, sympy: 2.5 CPU
  s, once; a preloaded module's ``warm_worker()`` runs there too), then only forks executors and reaps them, on request
  over a socket. It is single-threaded, so a fork of it is safe, and takes milliseconds: an overrun costs no new import.
  A dead executor stays a zombie until the caller asks the zygote to reap it, so its pid is never reused under the
  caller's feet.
- the *executor*: a fork of the zygote fed by a socket (:class:`multiprocessing.connection.Connection`), one job at
  a time. Before a job it arms ``ITIMER_PROF`` for the budget: the timer counts the process's own CPU time (user and
  system), and at its expiry the kernel sends ``SIGPROF``, whose default action ends the process. No Python code of
  ours runs at the deadline, no exception is raised anywhere, and the budget does not run while the executor waits
  for a core: on an idle and on a loaded machine the same jobs finish. The caller sees the end of the
  socket, asks the zygote how the executor ended (``SIGPROF``: an overrun, ``on_timeout``), and the next call forks
  a new executor.

One executor serves every thread of the caller, one job at a time (a lock): the symbolic work is CPU-bound and ran one
job at a time under the GIL before too; a job's budget starts when the executor takes it. A job that uses no CPU
(none of sympy's blocks) is still given up after :data:`WALL_BACKSTOP_SECONDS` of wall time. Without ``ITIMER_PROF``
or ``fork`` (not POSIX) the work runs in the caller's thread with no deadline.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

logger = logging.getLogger("r2mad_core.data.answers")  # the messages read as before
T = TypeVar("T")

#: A job that has not used its CPU budget is still given up after this much wall time (far above any load: a job
#: that never gets a core for 10 minutes). Only a job that blocks without computing can reach it.
WALL_BACKSTOP_SECONDS = 600.0
#: What the zygote imports once, before it forks any executor (a module missing here is imported by the job that needs
#: it, and its ImportError reaches the caller as it would have in its own process).
PRELOAD = ("r2mad_core.data.answers", "math_verify", "sympy")
#: Whether this platform can run the worker (POSIX: fork and a CPU-time interval timer).
SUPPORTED = hasattr(os, "fork") and hasattr(signal, "ITIMER_PROF") and hasattr(socket, "send_fds")

_MESSAGE = struct.Struct("=cq")  # a request to the zygote: F(ork) / R(eap) / K(ill and reap), and a pid
_ANSWER = struct.Struct("=q")  # its answer: the new pid, or the wait status
#: Inside an executor: the budget of the job running now (None: not in an executor).
_job_seconds: float | None = None


class SymbolicWorkerError(RuntimeError):
    """The symbolic worker could not start, or an executor ended otherwise than by its deadline (a crash)."""


def renew_deadline() -> None:
    """Inside a job of several steps (parse, parse, compare): give the next step a budget of its own, the job's
    ``seconds`` again. A no-op outside an executor."""
    if _job_seconds is not None:
        signal.setitimer(signal.ITIMER_PROF, _job_seconds)


def in_worker() -> bool:
    """Whether this code runs in an executor (a job's own calls to :func:`with_deadline` run in place there)."""
    return _job_seconds is not None


# ----------------------------------------------------------------------------------------------------
# The child processes
# ----------------------------------------------------------------------------------------------------


def _zygote_main(control_fd: int, preload: list[str]) -> None:
    """The zygote's loop (``python -c``): import ``preload``, then fork, kill and reap executors on request."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's; this process ends when the caller does
    control = socket.socket(fileno=control_fd)
    for name in preload:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        warm = getattr(module, "warm_worker", None)
        if callable(warm):  # what loads lazily at the first call (math-verify's LaTeX grammar): once, here
            try:
                warm()
            except Exception:  # noqa: BLE001 - speed only: the first job does it then
                pass
    gc.freeze()  # what is loaded stays shared with the executors (no copy-on-write from the collector)
    children: set[int] = set()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, _MESSAGE.size, 1)
        except OSError:
            break
        if len(message) != _MESSAGE.size:  # end of the socket: the caller closed it or ended
            break
        command, pid = _MESSAGE.unpack(message)
        if command == b"F":
            child = os.fork()
            if child == 0:
                try:
                    control.close()
                    _executor_main(fds[0])
                finally:
                    os._exit(1)
            for fd in fds:
                os.close(fd)
            children.add(child)
            answer = child
        else:
            if command == b"K" and pid in children:
                os.kill(pid, signal.SIGKILL)
            answer = os.waitpid(pid, 0)[1] if pid in children else -1
            children.discard(pid)
        try:
            control.send(_ANSWER.pack(answer))
        except OSError:
            break
    for pid in children:  # reaped, so that their CPU time is counted in this process's children, and so the caller's
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    os._exit(0)


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - an exception that does not cross processes: its text does
        return SymbolicWorkerError(f"{type(error).__name__}: {error}")


def _executor_main(fd: int) -> None:
    """An executor's loop: run each job under ``ITIMER_PROF``; end at the end of the socket (os._exit: never
    returns)."""
    global _job_seconds
    connection = Connection(fd)
    while True:
        try:
            function, seconds = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        _job_seconds = float(seconds)
        signal.setitimer(signal.ITIMER_PROF, _job_seconds)
        try:
            reply: tuple[bool, Any] = (True, function())
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            reply = (False, error)
        signal.setitimer(signal.ITIMER_PROF, 0)
        _job_seconds = None
        try:
            connection.send(reply)
        except (EOFError, OSError):
            os._exit(0)
        except Exception as error:  # noqa: BLE001 - a value or an error that does not pickle
            connection.send((False, _picklable(error) if reply[0] else _picklable(reply[1])))


# ----------------------------------------------------------------------------------------------------
# The caller's side
# ----------------------------------------------------------------------------------------------------


def _describe(status: int) -> str:
    if status < 0:
        return "unknown"
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"status {status}"


#: Objects of a parent's worker found in a forked child: kept, never finalised or used there (a finaliser could warn).
_INHERITED: list[object] = []


class _Worker:
    """The caller's handle on its zygote and executor (one per process; see the module's docstring)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()  # one job at a time: a caller's budget starts when the executor takes its job
        self._zygote: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._executor: int | None = None
        self._connection: Connection | None = None

    def forget_parent(self) -> None:
        """In a forked child: the parent's processes are the parent's; this process starts its own when it needs them.
        Its copies of the sockets are closed here (the parent's are untouched)."""
        for handle in (self._connection, self._control):
            if handle is not None:
                try:
                    handle.close()
                except OSError:
                    pass
        _INHERITED.append((self._zygote, self._connection, self._control))
        self._reset()

    # -- processes --

    def _start_zygote(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = ("import sys, json; sys.path[:] = json.loads(sys.argv[2]); from r2mad_core.data import deadline; "
                "deadline._zygote_main(int(sys.argv[1]), json.loads(sys.argv[3]))")
        flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined] - -W, -X: as multiprocessing
        try:
            self._zygote = subprocess.Popen(
                [sys.executable, *flags, "-c", code, str(theirs.fileno()), json.dumps(sys.path), json.dumps(PRELOAD)],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except OSError as error:
            ours.close()
            raise SymbolicWorkerError(f"the symbolic worker could not start ({sys.executable}: {error})") from error
        finally:
            theirs.close()
        self._control = ours

    def _ask(self, command: bytes, pid: int = 0, fds: tuple[int, ...] = ()) -> int:
        """One request to the zygote and its answer; SymbolicWorkerError when the zygote is gone."""
        assert self._control is not None
        try:
            socket.send_fds(self._control, [_MESSAGE.pack(command, pid)], list(fds))
            answer = self._control.recv(_ANSWER.size)
        except OSError:
            answer = b""
        if len(answer) != _ANSWER.size:
            self._stop_zygote()
            raise SymbolicWorkerError("the symbolic worker's zygote ended (see its error above)")
        return _ANSWER.unpack(answer)[0]

    def _stop_zygote(self) -> None:
        zygote, control = self._zygote, self._control
        self._zygote = self._control = self._executor = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if control is not None:
            control.close()  # it ends at the end of its socket
        if zygote is not None:
            try:
                zygote.wait(30)  # it ends at once at the end of its socket, after reaping its executor
            except subprocess.TimeoutExpired:
                zygote.kill()
                zygote.wait()

    def _fork_executor(self) -> Connection:
        for attempt in (1, 2):  # a zygote that ended (killed from outside) is replaced once
            if self._zygote is None:
                self._start_zygote()
            ours, theirs = socket.socketpair()
            try:
                self._executor = self._ask(b"F", fds=(theirs.fileno(),))
            except SymbolicWorkerError:
                ours.close()
                if attempt == 2:
                    raise
                continue
            finally:
                theirs.close()
            self._connection = Connection(ours.detach())
            return self._connection
        raise AssertionError("unreachable")

    def _end_executor(self, kill: bool) -> int:
        """Reap the executor (killed first if ``kill``): its wait status (-1: unknown)."""
        pid, connection = self._executor, self._connection
        self._executor = self._connection = None
        if connection is not None:
            connection.close()
        if pid is None or self._control is None:
            return -1
        try:
            return self._ask(b"K" if kill else b"R", pid)
        except SymbolicWorkerError:
            return -1

    # -- jobs --

    def run(self, function: Callable[[], T], seconds: float, on_timeout: T) -> T:
        if _job_seconds is not None:  # a job asking for another: run it here, under the job's own deadline
            return function()
        if not SUPPORTED:
            return function()
        if self._pid != os.getpid():  # a fork that did not run the at-fork hook
            self.forget_parent()
        try:
            job = pickle.dumps((function, float(seconds)), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # noqa: BLE001 - one line instead of pickle's
            raise TypeError(f"with_deadline runs {function!r} in a worker process: it must pickle (a module-level "
                            f"function, or functools.partial of one, with picklable arguments): {error}") from error
        with self._lock:
            connection = self._connection or self._fork_executor()
            try:
                connection.send_bytes(job)
            except OSError:  # the executor was killed from outside between two jobs: a new one takes the job
                self._end_executor(kill=True)
                connection = self._fork_executor()
                connection.send_bytes(job)
            try:
                answered = connection.poll(max(WALL_BACKSTOP_SECONDS, seconds))
            except BaseException:  # KeyboardInterrupt in the wait: the job's answer would be read by the next call
                self._end_executor(kill=True)
                raise
            if not answered:
                self._end_executor(kill=True)
                logger.warning("symbolic comparison gave up after %.0f s of wall time without finishing",
                               max(WALL_BACKSTOP_SECONDS, seconds))
                return on_timeout
            try:
                ok, value = connection.recv()
            except EOFError:
                status = self._end_executor(kill=False)
                if status >= 0 and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGPROF:
                    logger.warning("symbolic comparison gave up after %.1f CPU s", seconds)
                    return on_timeout
                raise SymbolicWorkerError(f"the symbolic worker ended during {function!r} ({_describe(status)})") \
                    from None
        if ok:
            return value
        raise value

    def close(self) -> None:
        """End this process's worker and wait for it (at exit: its CPU time is then counted in this process's children,
        as a benchmark's ``os.wait4`` on a run reads it). The next call would start a new one."""
        if self._pid == os.getpid() and self._zygote is not None:
            self._stop_zygote()

    def processes(self) -> tuple[int | None, int | None]:
        """``(zygote pid, executor pid)`` of this process's worker (None: not started); for tests and benchmarks."""
        return (self._zygote.pid if self._zygote is not None else None), self._executor


_WORKER = _Worker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WORKER.forget_parent)
atexit.register(_WORKER.close)


def with_deadline(function: Callable[[], T], seconds: float, on_timeout: T) -> T:
    """``function()``, or ``on_timeout`` when it uses more than ``seconds`` of CPU time; safe in any thread.

    ``function`` runs in this process's executor (see the module's docstring), so it must pickle: a module-level
    function, or a ``functools.partial`` of one; so must its value. Its exceptions reach the caller. The caller is
    never interrupted; an overrunning job's process is ended by the kernel (``SIGPROF``) and replaced.
    """
    return _WORKER.run(function, seconds, on_timeout)
