"""The CPU seconds of a running command's whole process tree, logged every 10 s (issue 52's cpu runs side by side).

    .venv/bin/python benchmarks/process_tree_cpu.py PID CACHE_SQLITE LOG

Each line of ``LOG``: seconds since the start, the 1-minute load average, the CPU seconds (user + system) of ``PID``
and every live descendant plus the children they reaped (``/proc/<pid>/stat`` fields 14-17), and how many generations
``CACHE_SQLITE`` (the run's ``cache/<profile>/responses.sqlite``, read-only) holds (-1 before it exists). It ends when
``PID`` does. Two runs of ``make reproduce PROFILE=cpu ARGS=--fresh`` started together, each watched by one of these,
give their CPU at the points both reached (docs/engines.md, "Side by side from nothing"); ``/usr/bin/time -v`` gives
each run's total.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its descendants (each with the children it reaped)."""
    children: dict[int, list[int]] = {}
    own: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after the command name, which may hold spaces
        children.setdefault(int(fields[1]), []).append(int(entry))
        own[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += own.get(pid, 0)
        todo += children.get(pid, [])
    return total / TICKS


def generations(path: str) -> int:
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return connection.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        finally:
            connection.close()
    except sqlite3.Error:
        return -1


def main() -> None:
    root, cache, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    start = time.time()
    with open(log, "a", encoding="utf-8") as handle:
        while os.path.exists(f"/proc/{root}"):
            handle.write(f"{time.time() - start:.0f} {os.getloadavg()[0]:.2f} {tree_cpu(root):.1f} "
                         f"{generations(cache)}\n")
            handle.flush()
            time.sleep(10)


if __name__ == "__main__":
    main()
