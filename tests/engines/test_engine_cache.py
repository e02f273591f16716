"""The persistent response cache (r2mad_lab.engines.cache): hits, replay, dedup, crashes, processes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from r2mad_core.engine import Completion, Ledger, Request, SamplingParams
from r2mad_lab.engines import CachedEngine, EngineError, ResponseCache

REPO = Path(__file__).resolve().parents[2]


def ask(content: str, *, sample_index: int = 0, seed: int = 0, tag: str = "debate", max_tokens: int = 64) -> Request:
    return Request(
        messages=({"role": "system", "content": "You are terse."}, {"role": "user", "content": content}),
        params=SamplingParams(seed=seed, max_tokens=max_tokens),
        sample_index=sample_index,
        tag=tag,
    )


class CountingBackend:
    """Answers '<content>#<sample_index>#<seed>#<generation number>' and counts what it was asked.

    The generation number makes every generation distinct, so a replay that wrongly regenerates
    shows up as a different text. ``fail_after`` raises after that many completions of a call.
    """

    def __init__(self, identity: str = "counting", fail_after: int | None = None, streaming: bool = True) -> None:
        self.identity = identity
        self.model = "fake-model"
        self.ledger = Ledger()
        self.calls = 0
        self.seen: list[Request] = []
        self.fail_after = fail_after
        self.closed = False
        if not streaming:
            self.generate_iter = None  # type: ignore[assignment]

    def _one(self, request: Request) -> Completion:
        self.seen.append(request)
        content = request.messages[-1]["content"]
        return Completion(
            text=f"{content}#{request.sample_index}#{request.params.seed}#{len(self.seen)}",
            prompt_tokens=len(content),
            completion_tokens=7,
            seconds=0.5,
            finish_reason="length" if "truncate" in content else "stop",
        )

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:  # type: ignore[no-redef]
        self.calls += 1
        for index, request in enumerate(requests):
            if self.fail_after is not None and index == self.fail_after:
                raise RuntimeError(f"backend crashed after {index} completions")
            yield index, self._one(request)

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.calls += 1
        return [self._one(r) for r in requests]

    def close(self) -> None:
        self.closed = True


def test_miss_then_exact_replay(tmp_path: Path) -> None:
    batch = [ask(f"q{i}") for i in range(5)]
    backend = CountingBackend()
    with CachedEngine(backend, tmp_path) as engine:
        first = engine.generate(batch)
        assert len(backend.seen) == 5
        assert [c.cached for c in first] == [False] * 5
        assert [c.text for c in first] == [f"q{i}#0#0#{i + 1}" for i in range(5)]
        second = engine.generate(batch)
        assert len(backend.seen) == 5, "a replay must not call the backend"
        assert backend.calls == 1
        assert [c.text for c in second] == [c.text for c in first]
        assert all(c.cached and c.seconds == 0.0 for c in second)
        assert [(c.prompt_tokens, c.completion_tokens) for c in second] == [(2, 7)] * 5
        assert engine.stats.requests == 10 and engine.stats.hits == 5 and engine.stats.generated == 5
    assert backend.closed


def test_replay_survives_reopening_and_only_new_requests_go_to_backend(tmp_path: Path) -> None:
    old = [ask(f"q{i}") for i in range(4)]
    with CachedEngine(CountingBackend(), tmp_path) as engine:
        first = engine.generate(old)
    backend = CountingBackend()
    with CachedEngine(backend, tmp_path) as engine:
        mixed = [old[2], ask("new-a"), old[0], ask("new-b"), old[3]]
        out = engine.generate(mixed)
    assert [r.messages[-1]["content"] for r in backend.seen] == ["new-a", "new-b"]
    assert [c.text for c in out] == [first[2].text, "new-a#0#0#1", first[0].text, "new-b#0#0#2", first[3].text]
    assert [c.cached for c in out] == [True, False, True, False, True]


def test_identical_requests_in_a_batch_share_one_generation(tmp_path: Path) -> None:
    backend = CountingBackend()
    with CachedEngine(backend, tmp_path) as engine:
        out = engine.generate([ask("a"), ask("a"), ask("b"), ask("a", tag="summary"), ask("b")])
        assert len(backend.seen) == 2
        assert [c.text for c in out] == ["a#0#0#1", "a#0#0#1", "b#0#0#2", "a#0#0#1", "b#0#0#2"]
        assert [c.cached for c in out] == [False, True, False, True, True]
        assert engine.stats.deduplicated == 3 and engine.stats.generated == 2
        assert len(engine.cache) == 2


def test_sample_index_and_seed_keep_samples_distinct(tmp_path: Path) -> None:
    backend = CountingBackend()
    with CachedEngine(backend, tmp_path) as engine:
        batch = [ask("same", sample_index=k) for k in range(3)] + [ask("same", seed=9)]
        out = engine.generate(batch)
        assert len(backend.seen) == 4
        assert len({c.text for c in out}) == 4
        assert len(engine.cache) == 4
        assert [c.text for c in engine.generate(batch)] == [c.text for c in out]
    keys = {r.key("counting", "fake-model") for r in batch}
    assert len(keys) == 4


def test_other_identity_or_params_is_a_miss(tmp_path: Path) -> None:
    with CachedEngine(CountingBackend("engine-a"), tmp_path) as engine:
        engine.generate([ask("q")])
    backend_b = CountingBackend("engine-b")
    with CachedEngine(backend_b, tmp_path) as engine:
        engine.generate([ask("q"), ask("q", max_tokens=65)])
    assert len(backend_b.seen) == 2


def test_ledger_counts_hits_with_tokens_but_no_time(tmp_path: Path) -> None:
    with CachedEngine(CountingBackend(), tmp_path) as engine:
        engine.generate([ask("q1"), ask("q2", tag="summary")])
        engine.generate([ask("q1"), ask("q2", tag="summary"), ask("q3")])
        costs = engine.ledger.as_dict()
    assert costs["debate"] == {"requests": 3, "cached": 1, "prompt_tokens": 6, "completion_tokens": 21, "seconds": 1.0}
    assert costs["summary"] == {"requests": 2, "cached": 1, "prompt_tokens": 4, "completion_tokens": 14, "seconds": 0.5}


def test_crash_in_the_middle_of_a_batch_keeps_finished_completions(tmp_path: Path) -> None:
    batch = [ask(f"q{i}") for i in range(6)]
    crashing = CountingBackend(fail_after=3)
    received: list[int] = []
    with CachedEngine(crashing, tmp_path) as engine:
        with pytest.raises(RuntimeError, match="after 3 completions"):
            for index, _ in engine.generate_iter(batch):
                received.append(index)
    assert received == [0, 1, 2]
    healthy = CountingBackend()
    with CachedEngine(healthy, tmp_path) as engine:
        assert len(engine.cache) == 3
        out = engine.generate(batch)
    assert [r.messages[-1]["content"] for r in healthy.seen] == ["q3", "q4", "q5"]
    assert [c.cached for c in out] == [True, True, True, False, False, False]
    assert [c.text for c in out[:3]] == ["q0#0#0#1", "q1#0#0#2", "q2#0#0#3"]


def test_non_streaming_backend_and_truncation_are_stored(tmp_path: Path) -> None:
    backend = CountingBackend(streaming=False)
    with CachedEngine(backend, tmp_path) as engine:
        out = engine.generate([ask("please truncate"), ask("ok")])
        again = engine.generate([ask("please truncate"), ask("ok")])
    assert backend.calls == 1
    assert [c.finish_reason for c in again] == ["length", "stop"]
    assert [c.text for c in again] == [c.text for c in out]


def test_error_completions_are_not_cached(tmp_path: Path) -> None:
    class ErrorBackend(CountingBackend):
        def _one(self, request: Request) -> Completion:
            self.seen.append(request)
            return Completion(text="", finish_reason="error")

    backend = ErrorBackend()
    with CachedEngine(backend, tmp_path) as engine:
        engine.generate([ask("q")])
        engine.generate([ask("q")])
        assert len(engine.cache) == 0
    assert len(backend.seen) == 2


def test_large_batches_use_chunked_lookups(tmp_path: Path) -> None:
    batch = [ask(f"q{i}") for i in range(1203)]
    backend = CountingBackend()
    with CachedEngine(backend, tmp_path) as engine:
        first = engine.generate(batch)
        second = engine.generate(batch)
    assert len(backend.seen) == 1203
    assert [c.text for c in second] == [c.text for c in first]
    assert all(c.cached for c in second)


def test_first_writer_wins_and_logprobs_round_trip(tmp_path: Path) -> None:
    one = ResponseCache(tmp_path)
    two = ResponseCache(tmp_path)
    first = Completion(text="first", completion_tokens=2, logprobs=[-0.5, -1.25], finish_reason="length")
    assert one.put("k", first, identity="i", model="m", tag="debate") is first
    kept = two.put("k", Completion(text="second"), identity="i", model="m", tag="debate")
    assert (kept.text, kept.logprobs, kept.finish_reason) == ("first", [-0.5, -1.25], "length")
    assert len(one) == 1 and "k" in two and "other" not in two
    one.close()
    two.close()


def test_wal_mode_and_corrupt_rows_are_reported(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    cache.put("good", Completion(text="x"), identity="i", model="m", tag="t")
    cache.close()
    conn = sqlite3.connect(tmp_path / "responses.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("INSERT INTO responses VALUES ('bad', 'i', 'm', 't', '{\"text\": 1', 0)")
    conn.commit()
    conn.close()
    cache = ResponseCache(tmp_path)
    with pytest.raises(EngineError, match=r"responses\.sqlite: row key=bad, field completion"):
        cache.get_many(["good", "bad"])
    cache.close()


def test_a_new_cache_has_16k_pages_and_an_old_4k_cache_still_works(tmp_path: Path) -> None:
    new = ResponseCache(tmp_path / "new")
    new.put("k", Completion(text="x" * 2000), identity="i" * 600, model="m", tag="t")
    new.close()
    conn = sqlite3.connect(tmp_path / "new" / "responses.sqlite")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    # a ~2.7 KB row lives in its leaf page, no overflow page: the schema, meta, meta's key index, responses, and
    # responses' key index (rows in insertion order, found by key: a random key moved no row)
    assert conn.execute("PRAGMA page_count").fetchone()[0] == 5
    assert [row[2] for row in conn.execute("PRAGMA index_list(responses)")] == [1]  # unique
    assert "WITHOUT ROWID" not in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'responses'").fetchone()[0]
    conn.close()
    (tmp_path / "old").mkdir()
    conn = sqlite3.connect(tmp_path / "old" / "responses.sqlite")
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, identity TEXT NOT NULL, model TEXT NOT NULL,"
                 " tag TEXT NOT NULL, completion TEXT NOT NULL, created_at REAL NOT NULL) WITHOUT ROWID")
    conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO responses VALUES ('old', 'i', 'm', 't', ?, 0)", (json.dumps(
        {"text": "kept", "prompt_tokens": 1, "completion_tokens": 1, "logprobs": None, "finish_reason": "stop",
         "seconds": 0.0}),))
    conn.commit()
    conn.close()
    old = ResponseCache(tmp_path / "old")
    old.put("k", Completion(text="y"), identity="i", model="m", tag="t")
    assert old.get("old").text == "kept" and old.get("k").text == "y"
    old.close()
    conn = sqlite3.connect(tmp_path / "old" / "responses.sqlite")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    conn.close()


def test_a_new_cache_opens_while_another_connection_holds_the_file(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two opens of a new cache at once (two threads, two notebooks started together): while one holds the new file's
    write lock, SQLite answers the other's switch to WAL mode SQLITE_BUSY at once, without waiting on the busy
    timeout. The open waits for the lock instead of failing (it failed in 910 of 2,000 pairs of threads opening a new
    cache together; tests/engines/test_vllm_streaming.py's engine-death test then hung)."""
    holder = sqlite3.connect(tmp_path / "responses.sqlite", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock of the new file, still in rollback mode
    switching = threading.Event()
    connect = sqlite3.connect

    def traced(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(lambda sql: switching.set() if "journal_mode" in sql else None)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    release = threading.Thread(target=lambda: (switching.wait(30), holder.execute("COMMIT")))
    release.start()
    try:
        cache = ResponseCache(tmp_path)  # its first switch to WAL meets the lock; the holder lets go after it
    finally:
        switching.set()
        release.join(30)
        holder.close()
    cache.put("k", Completion(text="x"), identity="i", model="m", tag="t")
    assert cache.get("k").text == "x"
    cache.close()
    conn = connect(tmp_path / "responses.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_file_that_is_not_sqlite_is_reported(tmp_path: Path) -> None:
    (tmp_path / "responses.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(EngineError, match="cannot open as an SQLite response cache"):
        ResponseCache(tmp_path)


READER = textwrap.dedent(
    """
    import hashlib, json, sys
    from r2mad_lab.engines import CachedEngine, Request, SamplingParams

    class MustNotGenerate:
        identity, model = "counting", "fake-model"
        from r2mad_core.engine import Ledger
        ledger = Ledger()
        def generate(self, requests):
            raise SystemExit(f"reader asked the backend for {len(requests)} generations")
        def close(self):
            pass

    cache_dir, count, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batch = [Request(messages=({"role": "system", "content": "You are terse."},
                               {"role": "user", "content": f"q{i}"}), params=SamplingParams(max_tokens=64))
             for i in range(count)]
    digests = set()
    with CachedEngine(MustNotGenerate(), cache_dir) as engine:
        for _ in range(rounds):
            texts = [c.text for c in engine.generate(batch)]
            digests.add(hashlib.sha256(json.dumps(texts).encode()).hexdigest())
    print(json.dumps(sorted(digests)))
    """
)


def test_two_processes_read_while_this_one_writes(tmp_path: Path) -> None:
    batch = [ask(f"q{i}") for i in range(200)]
    with CachedEngine(CountingBackend(), tmp_path) as engine:
        texts = [c.text for c in engine.generate(batch)]
    import hashlib

    expected = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(tmp_path), "200", "30"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    writer = CountingBackend()
    written = 0
    with CachedEngine(writer, tmp_path) as engine:
        # New keys, committed one by one, for as long as the readers read (at least 100).
        while written < 100 or any(reader.poll() is None for reader in readers):
            engine.generate([ask(f"writer-{written}-{i}") for i in range(10)])
            written += 10
            assert written < 1_000_000, "readers never finished"
    results = [reader.communicate(timeout=120) for reader in readers]
    for reader, (out, err) in zip(readers, results, strict=False):
        assert reader.returncode == 0, f"reader failed: {err[-2000:]}"
        assert json.loads(out) == [expected]
    with CachedEngine(CountingBackend(), tmp_path) as engine:
        assert len(engine.cache) == 200 + written, f"{written} rows written while the readers read"


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from r2mad_lab.engines import CachedEngine, Completion, Ledger, Request, SamplingParams

    class Slow:
        identity, model = "counting", "fake-model"
        ledger = Ledger()
        def generate_iter(self, requests):
            for i, r in enumerate(requests):
                time.sleep(0.01)
                yield i, Completion(text="slow " + r.messages[-1]["content"], completion_tokens=3)
        def close(self):
            pass

    batch = [Request(messages=({"role": "system", "content": "You are terse."},
                               {"role": "user", "content": f"q{i}"}), params=SamplingParams(max_tokens=64))
             for i in range(int(sys.argv[2]))]
    engine = CachedEngine(Slow(), sys.argv[1])
    for index, completion in engine.generate_iter(batch):
        print(index, flush=True)  # printed only after the cache committed it
    time.sleep(60)  # the parent kills us long before this
    """
)


def test_sigkill_mid_batch_keeps_every_committed_completion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path), "1000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    seen = []
    assert writer.stdout is not None
    while len(seen) < 20:
        line = writer.stdout.readline()
        assert line, f"writer died: {writer.stderr.read() if writer.stderr else ''}"
        seen.append(int(line))
    writer.kill()
    writer.wait(timeout=30)
    assert seen == list(range(20))
    conn = sqlite3.connect(tmp_path / "responses.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    backend = CountingBackend()
    with CachedEngine(backend, tmp_path) as engine:
        stored = len(engine.cache)
        assert 20 <= stored < 1000, stored
        out = engine.generate([ask(f"q{i}") for i in range(1000)])
    assert len(backend.seen) == 1000 - stored
    assert [c.text for c in out[:20]] == [f"slow q{i}" for i in range(20)]
    lost = len(seen) - sum(c.cached for c in out[: len(seen)])
    with capsys.disabled():  # shown with or without -s
        print(f"\n[cache] SIGKILLs survived: 1, completions committed before the kill: {stored}, "
              f"reported committed and lost: {lost}")
    assert lost == 0, f"{lost} of the {len(seen)} completions reported committed were lost"
    assert all(c.cached for c in out[:stored]), "a committed completion was generated again after the kill"
