"""A memo of math-verify's verdicts shared between processes (speed only, never a different verdict).

Every notebook of ``make reproduce`` runs in its own kernel, and each kernel used to compare the same MATH500
answers symbolically again (the simulated agents' wrong answers are checked against the gold, their votes against
each other): a fifth of a from-nothing run. :func:`r2mad_core.data.answers._verified` is a pure function of its two
cleaned strings and of math-verify's version, so its verdicts are kept in an SQLite file named by the environment
variable :data:`ENVIRONMENT` (``make reproduce`` sets it to ``<cache_dir>/answer_verdicts.sqlite`` for its kernels);
unset, nothing is read or written. A comparison that ran out of time is never stored (it may not time out next time).
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import threading

logger = logging.getLogger(__name__)

#: The environment variable naming the memo file; unset: no memo.
ENVIRONMENT = "R2MAD_ANSWER_MEMO"
#: Bumped when the checking around math-verify changes (its cleaning, its screen), so older verdicts are not read.
VERSION = "1"

#: New verdicts are written in one transaction per this many (and at exit): one commit per verdict cost more than
#: many of the comparisons it saves.
FLUSH_EVERY = 256

_lock = threading.Lock()
_state: dict[str, object] = {"path": None, "conn": None, "verdicts": {}, "pending": []}


def _scope() -> str:
    try:
        from importlib.metadata import version

        return f"{VERSION}:math-verify={version('math-verify')}"
    except Exception:  # noqa: BLE001 - no version, no sharing
        return f"{VERSION}:math-verify=?"


def _open() -> tuple[sqlite3.Connection | None, dict]:
    """The connection and the verdicts read so far, for the file the environment names now (None: no memo)."""
    path = os.environ.get(ENVIRONMENT) or None
    if path != _state["path"]:
        if _state["conn"] is not None:
            _flush()
            _state["conn"].close()  # type: ignore[union-attr]
        _state.update(path=path, conn=None, verdicts={}, pending=[])
        if path is not None:
            try:
                conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("CREATE TABLE IF NOT EXISTS verdicts (scope TEXT NOT NULL, gold TEXT NOT NULL,"
                             " predicted TEXT NOT NULL, verdict INTEGER NOT NULL, PRIMARY KEY (scope, gold, predicted))"
                             " WITHOUT ROWID")
                rows = conn.execute("SELECT gold, predicted, verdict FROM verdicts WHERE scope = ?", (_scope(),))
                _state.update(conn=conn, verdicts={(g, p): bool(v) for g, p, v in rows})
            except sqlite3.Error as exc:
                logger.warning("answer verdict memo %s unusable (%s): comparing without it", path, exc)
    return _state["conn"], _state["verdicts"]  # type: ignore[return-value]


def lookup(gold: str, predicted: str) -> bool | None:
    """The stored verdict of ``(gold, predicted)``, or None (not stored, or no memo)."""
    with _lock:
        _, verdicts = _open()
        return verdicts.get((gold, predicted))


def store(gold: str, predicted: str, verdict: bool) -> None:
    """Keep a verdict (no memo: nothing happens)."""
    with _lock:
        conn, verdicts = _open()
        if conn is None:
            return
        verdicts[(gold, predicted)] = verdict
        pending = _state["pending"]
        pending.append((gold, predicted, int(verdict)))  # type: ignore[union-attr]
        if len(pending) >= FLUSH_EVERY:  # type: ignore[arg-type]
            _flush()


def flush() -> None:
    """Write the verdicts not written yet (also run at exit)."""
    with _lock:
        _flush()


def _flush() -> None:
    conn, pending = _state["conn"], _state["pending"]
    if conn is None or not pending:
        return
    scope = _scope()
    try:
        with conn:  # one transaction
            conn.execute("BEGIN")
            conn.executemany("INSERT OR IGNORE INTO verdicts VALUES (?, ?, ?, ?)",
                             [(scope, g, p, v) for g, p, v in pending])  # type: ignore[union-attr]
    except sqlite3.Error as exc:
        logger.warning("answer verdict memo: could not store %d verdicts (%s)", len(pending), exc)  # type: ignore[arg-type]
    _state["pending"] = []


atexit.register(flush)
