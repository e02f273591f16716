"""The ``vllm`` backend's engine thread (issue 17): concurrent ``generate`` calls share one engine loop.

The fake here extends ``tests/engines/test_engine_vllm.py``'s fake ``LLM`` (vLLM 0.32's ``LLMEngine`` API) into a
continuous-batching engine: each ``step()`` decodes one token for every running request, and a request
finishes after as many steps as its script entry has tokens. It asserts that only one thread ever calls into
the engine (vLLM's ``LLMEngine`` is not thread-safe). Five tests fail on the old backend, whose every
``generate`` call drove ``add_request``/``step`` from its own thread and which the scheduler ran as ``rounds``;
the two about one call failing alone or stopping early passed there too and guard guarantees the loop keeps.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import test_engine_vllm as base
from debate_fakes import mc_sample
from test_engine_vllm import no_full_collection_on_close  # noqa: F401 (an autouse fixture)

from r2mad_core.records import without_seconds
from r2mad_lab.engines import CachedEngine, EngineError
from r2mad_lab.engines.vllm_backend import VLLMEngine


class BatchingLLMEngine(base.FakeLLMEngine):
    """One token per running request per ``step()``; requests finish when their tokens are out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.progress: dict[str, int] = {}
        self.threads: set[int] = set()
        self.batch_sizes: list[int] = []
        self.callers_per_step: list[int] = []
        self.owner: dict[str, str] = {}  # request id -> the caller's thread name (recorded at submission)
        # while it is not set, step() makes no progress (tests hold the engine)
        self.gate: threading.Event | None = None

    def _touch(self) -> None:
        self.threads.add(threading.get_ident())

    def add_request(self, request_id: str, prompt: dict, params: Any) -> str:
        self._touch()
        out = super().add_request(request_id, prompt, params)
        self.progress[request_id] = 0
        return out

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        self._touch()
        super().abort_request(request_ids, internal)

    def has_unfinished_requests(self) -> bool:
        self._touch()
        return bool(self.queue)

    def step(self) -> list:
        self._touch()
        if self.gate is not None and not self.gate.is_set():  # held: an engine iteration that produces nothing
            time.sleep(0.001)
            return []
        if self.llm.die_after is not None and self.llm.finished >= self.llm.die_after:
            raise base.EngineDeadError()
        self.batch_sizes.append(len(self.queue))
        outputs = []
        for request_id, ids, params in list(self.queue):
            self.progress[request_id] += 1
            text, token_ids, finish = self.llm.script[self.llm.last_user[tuple(ids)]]
            if self.progress[request_id] < len(token_ids):
                continue
            self.queue.remove((request_id, ids, params))
            self.llm.finished += 1
            logprobs = [{t: base.lp(-0.1 * t)} for t in token_ids] if params.kwargs["logprobs"] else None
            outputs.append(base.SimpleNamespace(
                request_id=request_id, finished=True, prompt_token_ids=ids,
                outputs=[base.SimpleNamespace(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish)],
            ))
        return outputs


class BatchingLLM(base.FakeLLM):
    def __init__(self, script: dict, **kwargs: Any) -> None:
        super().__init__(script, **kwargs)
        self.llm_engine = BatchingLLMEngine(self, kwargs.get("max_model_len", 4096), "cuda", True)


def words(n: int, tag: str) -> tuple[str, list[int], str]:
    return (f"{tag} " * n).strip(), list(range(1, n + 1)), "stop"


SCRIPT = {f"q{k}": words(2 + 3 * k, f"answer{k}") for k in range(6)}


def make(script: dict | None = None, **options: Any) -> tuple[VLLMEngine, BatchingLLM]:
    llm = BatchingLLM(script or SCRIPT, **{k: options.pop(k) for k in ("die_after",) if k in options})
    return VLLMEngine("Qwen/Qwen3-8B", llm=llm, sampling_params_class=base.FakeSamplingParams, **options), llm


def run_threads(targets: list) -> list[BaseException]:
    errors: list[BaseException] = []

    def guard(target: Any) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertions
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a generate() call hung"
    return errors


def test_concurrent_calls_share_one_engine_loop_and_each_gets_its_own_completions() -> None:
    engine, llm = make()
    core = llm.llm_engine
    core.gate = threading.Event()
    results: dict[int, list] = {}
    submitted = threading.Barrier(7)

    def caller(k: int) -> Any:
        def run() -> None:
            submitted.wait(10)
            results[k] = engine.generate([base.ask(f"q{k}"), base.ask(f"q{k}", sample_index=1)])
        return run

    opener = threading.Thread(target=lambda: (submitted.wait(10), _open_gate_when(core, lambda: len(core.queue) == 12)))
    opener.start()
    errors = run_threads([caller(k) for k in range(6)])
    opener.join(10)
    assert errors == []
    # each caller got its own two completions, in its own order
    for k in range(6):
        assert [c.text for c in results[k]] == [SCRIPT[f"q{k}"][0]] * 2
        assert [c.completion_tokens for c in results[k]] == [2 + 3 * k] * 2
    # one thread drove the engine; every caller's requests were in one running batch
    assert len(core.threads) == 1 and threading.get_ident() not in core.threads
    loop = engine.engine_loop()
    assert core.batch_sizes[0] == 12 and loop.max_calls == 6 and loop.max_unfinished == 12
    # requests left the batch as they finished: 2 fewer every 3 steps, 17 steps in all (the longest has 17 tokens)
    assert core.batch_sizes == [12, 12, 10, 10, 10, 8, 8, 8, 6, 6, 6, 4, 4, 4, 2, 2, 2]
    assert engine.ledger.as_dict()["debate"]["requests"] == 12


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.001)


def _open_gate_when(core: BatchingLLMEngine, predicate: Any) -> None:
    """Let the held engine run once ``predicate`` holds, or after the wait failed: a caller that failed before it
    submitted (e.g. its cache did not open) then fails the test's assertions on what the callers saw, instead of
    leaving the others waiting on an engine that never steps ("a generate() call hung" 30 s later)."""
    try:
        _wait_for(predicate)
    finally:
        core.gate.set()


def test_a_late_call_joins_the_running_batch() -> None:
    """Continuous batching: a call submitted while another runs is added before the engine's next step."""
    engine, llm = make()
    core = llm.llm_engine
    go = threading.Event()
    original_step = core.step

    def step() -> list:
        if len(core.batch_sizes) == 2:  # the third step: let the late call in and hold until it is queued
            go.set()
            _wait_for(lambda: engine._loop is not None and engine._loop._incoming)
        return original_step()

    core.step = step  # type: ignore[method-assign]
    first: list = []
    late: list = []
    errors = run_threads([
        lambda: first.extend(engine.generate([base.ask("q5")])),  # 17 tokens
        lambda: (go.wait(10), late.extend(engine.generate([base.ask("q0")]))),  # 2 tokens
    ])
    assert errors == []
    assert [c.text for c in first] == [SCRIPT["q5"][0]] and [c.text for c in late] == [SCRIPT["q0"][0]]
    # the late request ran beside the long one from the fourth step on, and left after its 2 tokens
    assert core.batch_sizes == [1, 1, 1, 2, 2] + [1] * 12


def test_one_call_rejected_by_vllm_fails_alone() -> None:
    """A VLLMValidationError from add_request fails only its own call; the other call finishes."""
    engine, llm = make({"ok": words(3, "fine"), "bad": words(1, "never")})
    core = llm.llm_engine
    original_add = core.add_request

    def add_request(request_id: str, prompt: dict, params: Any) -> str:
        if llm.last_user[tuple(prompt["prompt_token_ids"])] == "bad":
            raise base.VLLMValidationError(
                "The decoder prompt (length 9) is longer than the maximum model length of 5.")
        return original_add(request_id, prompt, params)

    core.add_request = add_request  # type: ignore[method-assign]
    good: list = []
    errors = run_threads([lambda: good.extend(engine.generate([base.ask("ok")] * 1)),
                          lambda: engine.generate([base.ask("ok", sample_index=3), base.ask("bad")])])
    assert len(errors) == 1 and isinstance(errors[0], EngineError)
    assert "vLLM rejected a request" in str(errors[0]) and "0 of 2 completions of this batch" in str(errors[0])
    assert [c.text for c in good] == ["fine fine fine"]
    # the rejected call's request that was already added was aborted, nothing of it is left running
    assert len(core.aborted) == 1 and core.queue == []


def test_engine_death_fails_every_waiting_call_with_its_own_count(tmp_path: Path) -> None:
    engine, llm = make(die_after=2)
    core = llm.llm_engine
    core.gate = threading.Event()
    messages: list[str] = []

    def caller(keys: list[str]) -> Any:
        def run() -> None:
            with pytest.raises(EngineError) as info:
                with CachedEngine(engine, tmp_path, close_backend=False) as cached:
                    cached.generate([base.ask(k) for k in keys])
            messages.append(str(info.value))
        return run

    opener = threading.Thread(target=_open_gate_when, args=(core, lambda: len(core.queue) == 5))
    opener.start()
    errors = run_threads([caller(["q0", "q3", "q4"]), caller(["q1", "q5"])])
    opener.join(10)
    assert errors == []
    # q0 (2 tokens) and q1 (5 tokens) finished before the engine died; everything else was aborted
    assert sorted(messages) == sorted([
        m for m in messages if "\n" not in m and "the engine core died mid-batch (EngineDeadError)" in m])
    assert any("1 of 3 completions of this batch finished and were kept" in m for m in messages)
    assert any("1 of 2 completions of this batch finished and were kept" in m for m in messages)
    assert len(core.aborted) == 3 and core.queue == []
    with CachedEngine(make()[0], tmp_path) as cached:
        assert len(cached.cache) == 2


def test_a_caller_that_stops_early_aborts_only_its_own_requests() -> None:
    engine, llm = make()
    core = llm.llm_engine
    release = threading.Event()
    original_step = core.step

    def step() -> list:
        if len(core.batch_sizes) >= 2 and not release.is_set():  # q0 is out: hold q5 where it is
            time.sleep(0.001)
            return []
        return original_step()

    core.step = step  # type: ignore[method-assign]
    stream = engine.generate_iter([base.ask("q0"), base.ask("q5")])
    index, first = next(stream)  # q0 (2 tokens) finishes first
    other: list = []
    worker = threading.Thread(target=lambda: other.extend(engine.generate([base.ask("q4")])))
    worker.start()
    _wait_for(lambda: len(core.queue) == 2)  # q5 and the other caller's q4 are in the engine
    stream.close()  # the caller gives up on q5 (an error elsewhere, an interrupt)
    _wait_for(lambda: core.aborted)
    release.set()
    worker.join(30)
    assert (index, first.text) == (0, SCRIPT["q0"][0])
    assert [c.text for c in other] == [SCRIPT["q4"][0]]
    assert len(core.aborted) == 1 and core.aborted[0].endswith("-1")  # q5, index 1 of its call


def test_close_ends_the_engine_thread_and_fails_waiting_calls() -> None:
    engine, llm = make()
    core = llm.llm_engine
    core.gate = threading.Event()
    errors: list[BaseException] = []
    worker = threading.Thread(target=lambda: errors.extend(run_threads([lambda: engine.generate([base.ask("q1")])])))
    worker.start()
    _wait_for(lambda: len(core.queue) == 1)
    loop = engine.engine_loop()
    closer = threading.Thread(target=engine.close)
    closer.start()
    core.gate.set()
    closer.join(30)
    worker.join(30)
    assert not loop.alive and core.engine_core.shutdowns == 1
    assert len(errors) == 1 and isinstance(errors[0], EngineError)
    assert "closed with 1 of 1 requests unfinished" in str(errors[0]) or "used after close" in str(errors[0])
    with pytest.raises(EngineError, match="used after close"):
        engine.generate([base.ask("q0")])


def test_the_scheduler_runs_questions_on_the_vllm_engine_without_falling_back(tmp_path: Path, caplog: Any) -> None:
    """schedule 'questions' on the vllm engine: no fallback warning, several questions in the engine at once,
    and the transcripts equal those of 'rounds' (the fake's outputs depend on the prompt only)."""
    from r2mad_lab.experiments.cell import run_cell

    script = {}
    for answer in "ABCD":
        script_text = f"The answer is (({answer}))."
        script[answer] = (script_text, [1, 2, 3], "stop")

    class Scripted(BatchingLLM):
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            ids = super().encode(text, add_special_tokens)
            self.last_user[tuple(ids)] = "ABCD"[len(text) % 4]  # a deterministic answer per prompt
            return ids

    def engine() -> tuple[VLLMEngine, BatchingLLM]:
        llm = Scripted(script)
        return VLLMEngine("Qwen/Qwen3-8B", llm=llm, sampling_params_class=base.FakeSamplingParams), llm

    samples = [mc_sample(f"q{i:03d}") for i in range(6)]
    records = {}
    loops = {}
    for schedule in ("rounds", "questions"):
        vllm, llm = engine()
        with caplog.at_level(logging.WARNING, logger="r2mad_core.debate.scheduling"):
            result = run_cell(tmp_path / schedule, benchmark="truthfulqa", split="test", engine=vllm, method="mad",
                              samples=samples, chunk_size=6, window=6, schedule=schedule, progress=False)
        loops[schedule] = vllm.engine_loop()
        records[schedule] = [without_seconds(r) for r in result.records]
        vllm.close()
    assert not [r for r in caplog.records if "running schedule 'rounds' instead" in r.getMessage()]
    from r2mad_core.debate import scheduling

    assert scheduling.accepts_concurrent_calls(CachedEngine(engine()[0], tmp_path / "cache"))
    assert records["questions"] == records["rounds"] and len(records["rounds"]) == 6
    assert loops["rounds"].max_calls == 1  # rounds: one call per phase
    assert loops["questions"].max_calls > 1  # questions: several questions' calls in the engine at once


