"""Issue 24's speed paths keep behaviour: the response cache's batch commit and the shared math-verify verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

from r2mad_core.data import answers, verdicts
from r2mad_core.engine import Completion, Ledger, Request, SamplingParams
from r2mad_lab.engines import CachedEngine, ResponseCache


def ask(content: str) -> Request:
    return Request(messages=({"role": "user", "content": content},), params=SamplingParams(max_tokens=16))


class BatchBackend:
    """A non-streaming backend (no ``generate_iter``): the whole batch comes back at once."""

    identity = "batch"
    model = "fake"

    def __init__(self) -> None:
        self.ledger = Ledger()
        self.asked = 0

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.asked += len(requests)
        return [Completion(text=f"{r.messages[-1]['content']}!", completion_tokens=1,
                           finish_reason="error" if "fail" in r.messages[-1]["content"] else "stop") for r in requests]

    def close(self) -> None:
        pass


def test_a_non_streaming_batch_is_committed_in_one_transaction(tmp_path: Path) -> None:
    backend = BatchBackend()
    statements: list[str] = []
    with CachedEngine(backend, tmp_path) as engine:
        engine.cache._conn.set_trace_callback(statements.append)
        out = engine.generate([ask("a"), ask("b"), ask("fail"), ask("c"), ask("a")])
        engine.cache._conn.set_trace_callback(None)
        assert [c.text for c in out] == ["a!", "b!", "fail!", "c!", "a!"]
        assert [c.cached for c in out] == [False, False, False, False, True]  # the duplicate copies the first
        assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
        assert sum(s.startswith("INSERT OR IGNORE INTO responses") for s in statements) == 3  # the error is not stored
        again = engine.generate([ask("a"), ask("b"), ask("c"), ask("fail")])
    assert [c.cached for c in again] == [True, True, True, False]
    assert backend.asked == 4 + 1  # four distinct, then only the error again


def test_put_many_keeps_what_another_writer_stored_first(tmp_path: Path) -> None:
    one, two = ResponseCache(tmp_path), ResponseCache(tmp_path)
    one.put("k2", Completion(text="earlier", completion_tokens=3), identity="i", model="m", tag="debate")
    fresh = [Completion(text=t, seconds=0.25) for t in ("one", "two", "three")]
    kept = two.put_many([("k1", fresh[0], "debate"), ("k2", fresh[1], "summary"), ("k3", fresh[2], "debate")],
                        identity="i", model="m")
    assert kept[0] is fresh[0] and kept[2] is fresh[2]
    assert (kept[1].text, kept[1].completion_tokens, kept[1].seconds) == ("earlier", 3, 0.25)
    assert len(one) == 3 and one.get("k3").text == "three"
    one.close()
    two.close()


def test_verdicts_are_shared_through_the_file_the_environment_names(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(verdicts.ENVIRONMENT, raising=False)
    answers.clear_caches()
    assert answers.is_correct("0.5", r"\frac{1}{2}", "math500")  # no memo: nothing is written anywhere
    assert verdicts.lookup(r"\frac{1}{2}", "0.5") is None

    memo = tmp_path / "verdicts.sqlite"
    monkeypatch.setenv(verdicts.ENVIRONMENT, str(memo))
    answers.clear_caches()
    assert answers.is_correct("0.5", r"\frac{1}{2}", "math500")
    assert not answers.is_correct("3", r"\frac{1}{2}", "math500")
    assert verdicts.lookup(r"\frac{1}{2}", "0.5") is True and verdicts.lookup(r"\frac{1}{2}", "3") is False

    # Another process (here: the same one with its memo tables emptied) reads them instead of comparing again.
    # math-verify runs in the deadline's worker process (r2mad_core.data.deadline): refuse the one road to it
    def refuse(*args: object, **kwargs: object) -> bool:
        raise AssertionError("math-verify asked again for a remembered verdict")

    monkeypatch.setattr(answers, "_with_deadline", refuse)
    answers.clear_caches()
    verdicts.flush()  # what a process's exit does
    verdicts._state.update(path=None, conn=None, verdicts={}, pending=[])  # as a fresh process finds it
    assert answers.is_correct("0.5", r"\frac{1}{2}", "math500")
    assert not answers.is_correct("3", r"\frac{1}{2}", "math500")
    monkeypatch.delenv(verdicts.ENVIRONMENT)
    answers.clear_caches()
    assert verdicts.lookup(r"\frac{1}{2}", "0.5") is None  # the variable unset: no memo again


def test_a_comparison_that_ran_out_of_time_is_not_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(verdicts.ENVIRONMENT, str(tmp_path / "verdicts.sqlite"))
    answers.clear_caches()
    monkeypatch.setattr(answers, "_with_deadline", lambda function, seconds, on_timeout: on_timeout)
    assert not answers.is_correct("0.5", r"\frac{1}{2}", "math500")  # timed out: counted as different
    verdicts.flush()
    assert verdicts.lookup(r"\frac{1}{2}", "0.5") is None
    answers.clear_caches()
    monkeypatch.delenv(verdicts.ENVIRONMENT)
    verdicts.lookup("x", "y")  # close the memo of the test's file
