"""The CPU-time deadline of the symbolic work (r2mad_core.data.deadline, issue 58): a worker process the kernel ends at
the deadline, no exception raised into any thread; overruns, forks and many threads at once, beside busy loops.

The jobs are in tests/data/deadline_jobs.py (they run in the worker process, so they must pickle)."""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from deadline_jobs import catastrophic_regex, executor_pid, lineage, long_c_call, nested, sleep_then, spin

from r2mad_core.data import answers, deadline
from r2mad_core.data.deadline import with_deadline

MATH = "math500"
#: (gold, predicted, math-verify's verdict) of the stress test: what the answer tests say of them. Numbers only: a
#: new executor (after each planted overrun) parses them again in milliseconds, where the first tuple or symbol of an
#: executor costs 0.2 CPU s of sympy's lazy imports (test_answers.py::test_equivalence_from_worker_threads has those).
PAIRS = [(r"\frac{1}{2}", "0.5", True), (r"\frac{3}{4}", "0.7", False), ("1.5", r"\frac{3}{2}", True),
         (r"\frac{1}{3}", "0.5", False), (r"\frac{2}{4}", "0.5", True)]
#: Warnings of pytest's unraisable-exception and thread-exception hooks: errors here (a stray exception anywhere).
STRAY_EXCEPTIONS_ARE_ERRORS = pytest.mark.filterwarnings(
    "error::pytest.PytestUnraisableExceptionWarning", "error::pytest.PytestUnhandledThreadExceptionWarning")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture()
def busy_loops():
    """Two busy-loop processes, one per core of a 2-core machine, for the test's duration (as CI's busy-loop step)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_the_work_runs_in_one_worker_process_for_every_thread() -> None:
    """Not in the caller's process, and not in a thread of it: one executor process serves every call, from any
    thread."""
    threads = set(threading.enumerate())
    pids = [with_deadline(executor_pid, 5, None) for _ in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        pids += list(pool.map(lambda _: with_deadline(executor_pid, 5, None), range(6)))
    assert len(set(pids)) == 1 and pids[0] != os.getpid()
    assert not set(threading.enumerate()) - threads  # the worker started no thread here (others' may end meanwhile)
    assert with_deadline(nested, 5, -2) == 7  # a job that asks for another runs it in place


def test_results_and_errors_pass_through() -> None:
    assert with_deadline(functools.partial(divmod, 7, 2), 5, None) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        with_deadline(functools.partial(divmod, 1, 0), 5, None)
    with pytest.raises(TypeError, match="must pickle"):
        with_deadline(lambda: 1, 5, None)


@STRAY_EXCEPTIONS_ARE_ERRORS
@pytest.mark.parametrize("never_ends", [spin, catastrophic_regex], ids=["bytecode", "one-C-call"])
def test_an_overrun_returns_on_timeout_ends_the_computation_and_the_next_call_works(never_ends) -> None:
    """A comparison that never ends: the caller (main thread or another) gets on_timeout after the budget, the process
    that computed is gone (nothing keeps spinning on a core), and the next comparison works in a new one."""
    threads = set(threading.enumerate())
    before = with_deadline(executor_pid, 5, None)
    assert with_deadline(never_ends, 0.2, "gave up") == "gave up"
    assert not _alive(before)
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(with_deadline, never_ends, 0.2, "gave up").result() == "gave up"
    after = with_deadline(executor_pid, 5, None)
    assert after not in (before, os.getpid())
    answers.clear_caches()
    assert answers.is_correct("0.25", r"\frac{1}{4}", MATH)  # the next comparison works
    assert not set(threading.enumerate()) - threads  # none started and left (another test's may end meanwhile)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("r2mad-symbolic")]  # the old reaper's


def test_a_long_c_call_is_stopped_at_the_deadline() -> None:
    """Seconds inside one C call (no bytecode runs: an exception raised into a thread would wait for its end, and the
    caller with it, the GIL held): the kernel ends it at 0.2 CPU s."""
    assert with_deadline(long_c_call, 0.2, "gave up") == "gave up"
    assert with_deadline(functools.partial(pow, 3, 100), 5, None) == 3**100


def test_the_deadline_counts_the_workers_cpu_time_not_wall_time() -> None:
    """Issue 52: a verdict must not depend on the machine's load. A job that waits 0.6 s without computing (as a
    comparison waits for a core on a loaded machine) uses almost no CPU: a 0.2 s budget lets it finish."""
    assert with_deadline(functools.partial(sleep_then, 0.6, "finished"), 0.2, "gave up") == "finished"
    assert answers.SYMBOLIC_TIMEOUT_SECONDS >= 5.0  # the product's budget: 5 CPU seconds of one comparison


def test_the_deadline_never_fires_after_the_job() -> None:
    assert with_deadline(functools.partial(sleep_then, 0.0, "done"), 0.2, "gave up") == "done"
    assert with_deadline(executor_pid, 0.2, None) is not None  # the same executor, its timer disarmed after each job
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # nothing is raised here, in short sleeps or between them
        time.sleep(0.01)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_gets_a_fresh_worker_and_the_parent_keeps_its_own() -> None:
    """After os.fork the child process must not write to its parent's worker (their jobs and answers would mix): its
    first call starts its own zygote, a child of its own, and the parent's worker keeps serving the parent."""
    parent_executor = with_deadline(executor_pid, 5, None)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report, then leave without running the parent's exit handlers
        status = 1
        try:
            os.close(read)
            executor, zygote, zygote_parent = with_deadline(lineage, 5, None)
            answers.clear_caches()
            correct = answers.is_correct("0.125", r"\frac{1}{8}", MATH)
            os.write(write, repr((executor, zygote_parent, correct)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, reported
    executor, zygote_parent, correct = eval(reported)  # noqa: S307 - our own repr of ints and a bool
    assert zygote_parent == child and executor not in (parent_executor, child) and correct
    assert with_deadline(executor_pid, 5, None) == parent_executor  # the parent's worker is untouched


@STRAY_EXCEPTIONS_ARE_ERRORS
def test_stress_many_threads_with_overruns_beside_busy_loops(busy_loops) -> None:
    """200 calls from 8 threads, 8 of them planted overruns and 8 asking where they run, two busy loops beside: every
    verdict as on an idle machine, every overrun on_timeout, no stray exception anywhere (pytest's hooks as errors)."""
    rng = random.Random(58)
    jobs = [("overrun", None) if i % 25 == 7 else ("where", None) if i % 25 == 19 else ("compare", rng.choice(PAIRS))
            for i in range(200)]

    def run(job: tuple[str, tuple[str, str, bool] | None]) -> bool:
        kind, pair = job
        if kind == "overrun":
            return with_deadline(spin, 0.05, "gave up") == "gave up"
        if kind == "where":  # in the worker process, never in this one
            return with_deadline(executor_pid, 5, None) != os.getpid()
        gold, predicted, expected = pair  # type: ignore[misc]
        job_function = functools.partial(answers._verify_in_worker, gold, predicted)  # every one to the worker
        return with_deadline(job_function, answers.SYMBOLIC_TIMEOUT_SECONDS, None) is expected

    threads = set(threading.enumerate())
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, jobs))
    assert all(results), [job for job, ok in zip(jobs, results, strict=False) if not ok]
    assert all(loop.poll() is None for loop in busy_loops)  # the load was there throughout
    assert not set(threading.enumerate()) - threads  # none started and left (another test's may end meanwhile)


def test_no_exception_is_raised_into_threads_anywhere() -> None:
    root = os.path.dirname(deadline.__file__)
    assert "PyThreadState_SetAsyncExc" not in open(os.path.join(root, "deadline.py")).read()
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)  # the caller's process arms no timer


def test_an_interrupted_wait_leaves_no_answer_for_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in a notebook while a job runs: the executor is ended, so the next call does not read that job's
    answer."""
    from multiprocessing.connection import Connection

    real = Connection.poll

    def interrupted(self: Connection, timeout: float = 0.0) -> bool:
        monkeypatch.setattr(Connection, "poll", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(Connection, "poll", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with_deadline(functools.partial(sleep_then, 0.5, "late"), 5, None)
    assert with_deadline(functools.partial(sleep_then, 0.0, "next"), 5, None) == "next"
