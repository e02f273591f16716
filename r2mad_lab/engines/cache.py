"""The persistent response cache in front of every backend (docs/design.md, "The engine boundary").

Every generation z_i^(t) ~ P(. | x, Z^(t-1), phi_i) (Eq. 1) is stored under a hash of
(backend identity, model, messages, sampling parameters, sample index) -- ``Request.key``. A rerun
of a run cell replays its generations exactly; a crashed run resumes where it stopped, because
each finished completion is committed the moment the backend hands it over: a streaming backend's
(``generate_iter``) one by one, a non-streaming backend's batch (the simulated engine) in one transaction.

Storage: one SQLite file per cache directory, ``<cache_dir>/responses.sqlite``, in WAL mode, so
any number of readers (threads or processes) run alongside one writer at a time; writers wait on
``busy_timeout``. A key written by another process first wins: the cache then returns the stored
completion, so the current run agrees with every later replay.

Cached hits keep their token counts (the cost tables count them) but cost no time: they come
back with ``cached=True`` and ``seconds=0.0``. Identical requests inside one batch share one
generation; the copies are returned as cached.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from r2mad_core.engine import (
    Completion,
    Engine,
    EngineError,
    Ledger,
    Request,
    collect_in_order,
)

logger = logging.getLogger(__name__)

CACHE_FILENAME = "responses.sqlite"
SCHEMA_VERSION = "1"
#: The page size of a new cache file (SQLite's default, 4096, puts a row over its B-tree page's local limit).
PAGE_SIZE = 16384
# Stay well under SQLite's limit on host parameters per statement.
_LOOKUP_CHUNK = 500
_STORED_FIELDS = ("text", "prompt_tokens", "completion_tokens", "logprobs", "finish_reason", "seconds")
# Stored only when set (a row written before they existed reads as the default): which limit cut a completion,
# and the reasoning of an unclosed <think> block.
_OPTIONAL_FIELDS = {"cut": None, "unclosed_thinking": False, "thinking_partial": ""}


#: The columns of the ``responses`` table (a file whose ``responses`` table has others is not a response cache).
COLUMNS = ("key", "identity", "model", "tag", "completion", "created_at")


def cache_failure(path: Path, exc: sqlite3.Error, doing: str) -> EngineError:
    """One line for an SQLite error on the cache file ``path``: what failed, why, and what to do."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc)
    if name.startswith("SQLITE_READONLY") or name in ("SQLITE_CANTOPEN", "SQLITE_PERM") or "readonly" in text:
        advice = ("cannot write the file or its folder: make both writable, or point the cache at another folder "
                  "(--cache-dir or R2MAD_CACHE_DIR)")
    elif name == "SQLITE_FULL" or "full" in text:
        advice = ("the disk is full: free space on it, or point the cache at another disk (--cache-dir or "
                  "R2MAD_CACHE_DIR); completions stored so far are kept")
    elif name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text:
        advice = ("the file is damaged: move it away (a new cache is made and the generations are requested "
                  "again), or restore it from a copy")
    elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        advice = "another process holds the file locked: wait for it to finish, or use another cache folder"
    elif name.startswith("SQLITE_IOERR"):
        advice = "the disk failed to read or write it: check the disk, or point the cache at another folder"
    else:
        advice = "move the file away or point the cache at another folder (--cache-dir or R2MAD_CACHE_DIR)"
    return EngineError(f"cache {path}: {doing} ({name or type(exc).__name__}: {text}); {advice}")


def _switch_to_wal(conn: sqlite3.Connection, timeout_seconds: float) -> str:
    """``PRAGMA journal_mode = WAL``, tried again while another connection holds the file, up to the busy timeout.

    Two connections opening a new file at the same moment (two threads, or two notebooks started together) both
    read it in rollback mode, then each tries to upgrade its read lock to the write lock the switch needs: SQLite
    answers one of them SQLITE_BUSY at once, without waiting on ``busy_timeout``, and the cache failed to open
    (often, when threads open a new cache at once). The first switch wins; the other then
    finds WAL mode.
    """
    deadline = time.monotonic() + timeout_seconds
    delay = 0.001
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if not str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_BUSY") or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


class ResponseCache:
    """Key -> completion store in ``<cache_dir>/responses.sqlite`` (WAL, one transaction per put or batch).

    Safe to share between threads (one connection guarded by a lock) and between processes (each
    opens its own connection; SQLite's WAL locking does the rest).
    """

    def __init__(self, cache_dir: str | Path, *, busy_timeout_seconds: float = 60.0) -> None:
        self.cache_dir = Path(cache_dir)
        self.path = self.cache_dir / CACHE_FILENAME
        self._lock = threading.Lock()
        try:  # an unwritable folder, a file where the folder should be: one line naming it
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EngineError(
                f"cache folder {self.cache_dir}: cannot be made ({exc.strerror or type(exc).__name__}); make it "
                "writable, or point the cache at another folder (--cache-dir or R2MAD_CACHE_DIR)") from None
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise cache_failure(self.path, exc, "cannot open as an SQLite response cache") from None
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
            # another program's database that happens to hold a responses table is left as it is (no WAL switch, no
            # meta table written into it)
            columns = tuple(row[1] for row in self._conn.execute("PRAGMA table_info(responses)"))
            if columns and columns != COLUMNS:
                raise EngineError(
                    f"cache {self.path}: not an r2mad response cache (its responses table has columns "
                    f"{list(columns)}, expected {list(COLUMNS)}); point the cache at another folder "
                    "(--cache-dir or R2MAD_CACHE_DIR) or move the file away"
                )
            # A new file gets 16 KiB pages (before WAL mode fixes the size; an existing file keeps its own): a row
            # (~1.3 KB, the backend identity included) then fits in its B-tree page, where a 4 KiB page spilled
            # each into an overflow page of its own: the file is a third the size and inserts take ~30% less CPU
            # (benchmarks/README.md, "Where the time went").
            self._conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            mode = _switch_to_wal(self._conn, busy_timeout_seconds)
            if str(mode).lower() != "wal":
                raise EngineError(f"cache {self.path}: could not switch SQLite to WAL mode (got {mode!r})")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            # A new file's rows are appended in insertion order and found through a unique index on the key (a
            # 64-character entry): inserting a random key into a WITHOUT ROWID table kept by the key moved ~1.3 KB
            # rows around its B-tree pages, three times the insert time (benchmarks/README.md, "Where the time
            # went"). The same columns and the same one-row-per-key rule, so the statements below serve both kinds:
            # a file made before keeps its table.
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT NOT NULL UNIQUE, identity TEXT NOT NULL, model TEXT NOT NULL, tag TEXT NOT NULL,"
                " completion TEXT NOT NULL, created_at REAL NOT NULL)"
            )
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            found = self._conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0]
        except sqlite3.Error as exc:
            self._conn.close()
            raise cache_failure(self.path, exc, "cannot open as an SQLite response cache") from None
        except EngineError:
            self._conn.close()
            raise
        if found != SCHEMA_VERSION:
            self._conn.close()
            raise EngineError(
                f"cache {self.path}: schema_version expected {SCHEMA_VERSION!r}, found {found!r}"
            )

    # -- reads -------------------------------------------------------------------------------------

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        """Stored completions for the given keys (missing keys are absent), one query per 500 keys."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, Completion] = {}
        with self._lock:
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[start:start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                try:
                    rows = self._conn.execute(
                        f"SELECT key, completion FROM responses WHERE key IN ({marks})", chunk
                    ).fetchall()
                except sqlite3.Error as exc:
                    raise cache_failure(self.path, exc, "cannot read stored completions") from None
                for key, blob in rows:
                    found[key] = self._decode(key, blob)
        return found

    def get(self, key: str) -> Completion | None:
        return self.get_many([key]).get(key)

    def __len__(self) -> int:
        with self._lock:
            try:
                return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
            except sqlite3.Error as exc:
                raise cache_failure(self.path, exc, "cannot count stored completions") from None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    # -- writes ------------------------------------------------------------------------------------

    def put(self, key: str, completion: Completion, *, identity: str, model: str, tag: str) -> Completion:
        """Store one completion in its own transaction; return what the cache now holds for ``key``.

        If another writer stored ``key`` first, its completion is kept and returned.
        """
        return self.put_many([(key, completion, tag)], identity=identity, model=model)[0]

    def put_many(
        self, items: Sequence[tuple[str, Completion, str]], *, identity: str, model: str
    ) -> list[Completion]:
        """Store ``(key, completion, tag)`` items in ONE transaction; return what the cache now holds for each.

        For completions a backend hands over together (a non-streaming backend's batch): one commit instead of
        one per completion (the simulated engine's runs spent a tenth of their time in per-row commits). A key
        another writer stored first keeps that writer's completion, as in :meth:`put`.
        """
        rows = []
        for key, completion, tag in items:
            stored = {f: getattr(completion, f) for f in _STORED_FIELDS}
            stored.update({f: getattr(completion, f) for f, unset in _OPTIONAL_FIELDS.items()
                           if getattr(completion, f) != unset})
            rows.append((key, identity, model, tag, json.dumps(stored, ensure_ascii=False)))
        existing: dict[int, str] = {}
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                now = time.time()
                for position, (key, identity_, model_, tag, blob) in enumerate(rows):
                    cursor = self._conn.execute(
                        "INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                        (key, identity_, model_, tag, blob, now),
                    )
                    if cursor.rowcount != 1:
                        existing[position] = self._conn.execute(
                            "SELECT completion FROM responses WHERE key = ?", (key,)
                        ).fetchone()[0]
                self._conn.execute("COMMIT")
            except BaseException as exc:
                try:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the error below says what went wrong; SQLite rolls back what it could not finish
                if isinstance(exc, sqlite3.Error):
                    raise cache_failure(self.path, exc, f"cannot store {len(rows)} completion(s)") from None
                raise
        out = []
        for position, (key, completion, _) in enumerate(items):
            if position not in existing:
                out.append(completion)
                continue
            logger.info("cache %s: key %s was stored by another writer first; using the stored completion",
                        self.path, key)
            out.append(replace(self._decode(key, existing[position]), cached=completion.cached,
                               seconds=completion.seconds))
        return out

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _decode(self, key: str, blob: str) -> Completion:
        try:
            data = json.loads(blob)
            return Completion(**{f: data[f] for f in _STORED_FIELDS},
                              **{f: data.get(f, unset) for f, unset in _OPTIONAL_FIELDS.items()})
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineError(
                f"cache {self.path}: row key={key}, field completion: expected a JSON object with "
                f"fields {_STORED_FIELDS}, found {blob[:120]!r} ({exc})"
            ) from exc


@dataclass
class CacheStats:
    """What a :class:`CachedEngine` did since it was opened."""

    requests: int = 0
    hits: int = 0
    deduplicated: int = 0
    generated: int = 0


class CachedEngine:
    """An :class:`Engine` that answers from the cache and sends only misses to ``backend``.

    ``identity`` and ``model`` are the backend's. ``ledger`` records every request served (cached
    ones with ``cached=True`` and zero seconds); ``stats`` counts hits, in-batch duplicates and
    generations. Closing it closes the backend too unless ``close_backend=False``.
    """

    def __init__(self, backend: Engine, cache_dir: str | Path, *, close_backend: bool = True) -> None:
        self.backend = backend
        self.identity: str = backend.identity
        self.model: str = backend.model
        self.ledger = Ledger()
        self.cache = ResponseCache(cache_dir)
        self.stats = CacheStats()
        self._close_backend = close_backend
        self._stats_lock = threading.Lock()

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        """Yield ``(index, completion)``: hits first, then each miss as soon as it is stored."""
        requests = list(requests)
        keys = [r.key(self.identity, self.model) for r in requests]
        stored = self.cache.get_many(keys)
        # Misses, deduplicated: the first request with a key is generated; the others copy it.
        first_of_key: dict[str, int] = {}
        copies: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            if key in stored:
                continue
            if key in first_of_key:
                copies[first_of_key[key]].append(index)
            else:
                first_of_key[key] = index
                copies[index] = []
        hits = len(requests) - len(first_of_key) - sum(len(c) for c in copies.values())
        with self._stats_lock:
            self.stats.requests += len(requests)
            self.stats.hits += hits
        for index, key in enumerate(keys):
            if key in stored:
                completion = replace(stored[key], cached=True, seconds=0.0)
                self.ledger.record(requests[index], completion)
                yield index, completion
        if not first_of_key:
            return
        miss_indices = list(first_of_key.values())
        miss_requests = [requests[i] for i in miss_indices]
        for sub_index, completion in self._stored_pairs(miss_requests, [keys[i] for i in miss_indices]):
            index = miss_indices[sub_index]
            request = requests[index]
            completion = replace(completion, cached=False)
            self.ledger.record(request, completion)
            with self._stats_lock:
                self.stats.generated += 1
                self.stats.deduplicated += len(copies[index])
            yield index, completion
            for copy_index in copies[index]:
                duplicate = replace(completion, cached=True, seconds=0.0)
                self.ledger.record(requests[copy_index], duplicate)
                yield copy_index, duplicate

    def _stored_pairs(self, requests: list[Request], keys: list[str]) -> Iterator[tuple[int, Completion]]:
        """The backend's ``(index, completion)`` pairs, each stored before it is yielded (errors are not stored).

        A streaming backend's completions are committed one by one as they arrive (a crash keeps every finished
        one); a non-streaming backend hands its batch over at once, and the batch is committed in one transaction.
        """
        def storable(index: int, completion: Completion) -> bool:
            if completion.finish_reason == "error":
                logger.warning("not caching an error completion for request %d (tag %s)", index, requests[index].tag)
                return False
            return True

        if getattr(self.backend, "generate_iter", None) is not None:
            for index, completion in self._backend_pairs(requests):
                if storable(index, completion):
                    completion = self.cache.put(keys[index], completion, identity=self.identity, model=self.model,
                                                tag=requests[index].tag)
                yield index, completion
            return
        pairs = list(self._backend_pairs(requests))
        batch = [(position, index) for position, (index, completion) in enumerate(pairs) if storable(index, completion)]
        stored = self.cache.put_many([(keys[index], pairs[position][1], requests[index].tag)
                                      for position, index in batch],
                                     identity=self.identity, model=self.model)
        for (position, index), completion in zip(batch, stored, strict=False):
            pairs[position] = (index, completion)
        yield from pairs

    def _backend_pairs(self, requests: list[Request]) -> Iterator[tuple[int, Completion]]:
        stream = getattr(self.backend, "generate_iter", None)
        if stream is not None:
            yield from stream(requests)
            return
        completions = self.backend.generate(requests)
        if len(completions) != len(requests):
            raise EngineError(
                f"backend {self.identity}: generate returned {len(completions)} completions for "
                f"{len(requests)} requests"
            )
        yield from enumerate(completions)

    def close(self) -> None:
        # the backend first: it stops what is in flight (Ctrl-C), while a completion that came back can still be stored
        try:
            if self._close_backend:
                self.backend.close()
        finally:
            self.cache.close()

    def __enter__(self) -> "CachedEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class LazyEngine:
    """A backend built on its first generation: behind a :class:`CachedEngine`, a run whose requests are all
    cached never builds it (a vLLM model takes minutes to load). ``identity`` and ``model`` are known before
    (the backend class's ``identity_of``), so cache keys are the built backend's.
    """

    def __init__(self, build: Any, *, identity: str, model: str, concurrent: bool = False) -> None:
        self._build = build
        self.identity = identity
        self.model = model
        self.ledger = Ledger()
        self.concurrent_generate = concurrent
        self._backend: Any = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._backend is not None

    def backend_instance(self) -> Any:
        with self._lock:
            if self._backend is None:
                logger.info("loading %s (%s): a request is not in the cache", self.model, self.identity)
                backend = self._build()
                if backend.identity != self.identity:
                    backend.close()
                    raise EngineError(
                        f"lazy engine {self.model}: the built backend's identity {backend.identity!r} differs from "
                        f"the one its cache keys were computed with {self.identity!r}"
                    )
                self._backend = backend
            return self._backend

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        backend = self.backend_instance()
        stream = getattr(backend, "generate_iter", None)
        if stream is not None:
            yield from stream(requests)
        else:
            yield from enumerate(backend.generate(list(requests)))

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def close(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

