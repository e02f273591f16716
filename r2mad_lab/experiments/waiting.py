"""Work ordered around other processes' locks: what another process holds now goes last.

Notebooks running at once (``make reproduce`` runs two) need some of the same memory banks and cells; each is built
or run under a file lock (:func:`r2mad_core.files.locked`). :func:`least_waiting` orders a list of such work so that
an item another process holds (:func:`held_elsewhere`) waits until nothing else can go: the two notebooks then build
different banks and run different cells instead of one waiting on the other's lock. The answer only orders work; it
never decides what is built or run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from r2mad_core.files import locked


def held_elsewhere(lock_file: Path) -> bool:
    """Whether another process holds the ``flock`` of ``lock_file`` now (a missing file: nobody). A moment later it may
    not: the answer only orders work (:func:`least_waiting`), it never decides what is built or run."""
    if not lock_file.exists():
        return False
    try:
        with locked(lock_file, blocking=False):
            return False
    except BlockingIOError:
        return True


def least_waiting(items: Sequence[Any], busy: Callable[[Any], bool]) -> Iterator[Any]:
    """Yield every item of ``items`` once: in order, except that an item ``busy(item)`` says would wait now is put off
    while another can go; when every one left would wait, the first left goes (and waits)."""
    left = list(items)
    while left:
        index = next((k for k, item in enumerate(left) if not busy(item)), 0)
        yield left.pop(index)
