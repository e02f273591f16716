"""Jobs of tests/data/test_deadline.py: module-level functions (they run in the worker process, so they must pickle),
in a module of their own that the worker imports cheaply (not the test module, which imports pytest)."""

from __future__ import annotations

import functools
import os
import re
import time

from r2mad_core.data.deadline import with_deadline


def spin() -> str:
    """A computation that never ends, in Python bytecode."""
    while True:
        pass


def long_c_call() -> int:
    """One C call of seconds that holds the GIL and runs no bytecode (no exception raised into a thread can stop it)."""
    return pow(3, 10**7).bit_length()


def catastrophic_regex() -> object:
    """A computation that never ends, inside one C call (2**40 backtracking steps)."""
    return re.match(r"(a+)+$", "a" * 40 + "b")


def executor_pid() -> int:
    return os.getpid()


def lineage() -> tuple[int, int, int]:
    """(the executor's pid, its parent's (the zygote), the zygote's parent)."""
    zygote = os.getppid()
    with open(f"/proc/{zygote}/stat") as stat:
        zygote_parent = int(stat.read().rsplit(")", 1)[1].split()[1])
    return os.getpid(), zygote, zygote_parent


def nested() -> int:
    return with_deadline(functools.partial(int, "7"), 5, -1)


def sleep_then(seconds: float, value: str) -> str:
    time.sleep(seconds)
    return value
