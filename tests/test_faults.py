"""Fault probes (issue 33): failing endpoints under the budget cap, a trickling or hanging server, a usage of the
wrong type, Ctrl-C during generation. Every probe asserts the one-line message and that nothing was lost or sent
over the cap. The endpoint is tests/fake_openai_server.py in one of its fault modes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from r2mad_core.engines import EngineError, Request, SamplingParams, make_engine
from r2mad_core.experiments.budget import BudgetCap, ForwardingGateway

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

#: Every way an endpoint can fail for good that the engine retries (and so could be sent too often).
FAILING_MODES = ["500", "usage_string", "usage_nested", "trickle", "hang", "reset", "malformed", "drop"]


def _request(text: str, max_tokens: int = 10) -> Request:
    return Request(messages=({"role": "user", "content": text},), params=SamplingParams(max_tokens=max_tokens))


def _engine(base_url: str, cache_dir: Path | None = None, **options: object) -> object:
    settings = dict(model="m", base_urls=base_url, api_key_env=None, timeout_seconds=1.0, max_retries=5,
                    initial_backoff_seconds=0.01, max_backoff_seconds=0.02, neutral_sampling=False)
    settings.update(options)
    return make_engine("openai", cache_dir=cache_dir, **settings)


@pytest.mark.parametrize("mode", FAILING_MODES)
def test_a_failing_endpoint_sees_no_more_requests_than_the_cap_and_the_count_is_what_it_saw(
        mode: str, tmp_path: Path) -> None:
    """--max-requests 5 against an endpoint that fails every request in ``mode``: the engine's retries (6 attempts
    per request, 3 requests at once) reach it at most 5 times, the cap's count of requests sent is exactly what the
    endpoint saw, and the failure is one line."""
    with FakeOpenAIServer(mode=mode, trickle_interval=0.2, hang_seconds=20) as server:
        cap = BudgetCap(max_requests=5)
        with ForwardingGateway([server.base_url], cap) as gateway:
            engine = _engine(gateway.base_url, tmp_path / "cache", max_concurrency=3)
            with pytest.raises(EngineError) as caught:
                engine.generate([_request(f"question {i}") for i in range(4)])
            engine.close()
            seen = server.requests_served
        assert seen <= 5
        assert cap.spent.requests == seen
        assert "\n" not in str(caught.value)
        assert "HTTP 402" in str(caught.value) or "failed after" in str(caught.value)


def test_requests_that_never_reach_the_endpoint_are_not_counted() -> None:
    cap = BudgetCap(max_requests=5)
    with ForwardingGateway(["http://127.0.0.1:9/v1"], cap) as gateway:
        engine = _engine(gateway.base_url, max_retries=2)
        with pytest.raises(EngineError, match="unreachable"):
            engine.generate([_request("q")])
        engine.close()
    assert cap.spent.requests == 0 and cap.refused == 0


def test_a_trickling_server_is_cut_off_at_the_attempts_total_deadline() -> None:
    """One byte every 0.2 s never trips a 1 s timeout on each read; the whole answer would take ~60 s. The attempt
    ends at its 1 s deadline (retried once, then one line); a generous 30 s bound stands for "not the trickle's 60 s"."""
    with FakeOpenAIServer(mode="trickle", trickle_interval=0.2, trickle_seconds=60) as server:
        engine = _engine(server.base_url, max_retries=1)
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"failed after 2 attempts .*ReadTimeout: no answer within the "
                                              r"attempt's deadline \(timeout_seconds\)") as caught:
            engine.generate([_request("q")])
        ended = time.monotonic() - started
        engine.close()
        assert server.requests_served == 2 and server.completed == 0
    assert "\n" not in str(caught.value)
    assert ended < 30


@pytest.mark.parametrize("mode, field", [("usage_string", "field usage: expected an object"),
                                         ("usage_nested", "field usage.prompt_tokens: expected a whole number")])
def test_a_usage_of_the_wrong_type_is_retried_then_one_line(mode: str, field: str, tmp_path: Path) -> None:
    with FakeOpenAIServer(mode=mode) as server:
        engine = _engine(server.base_url, tmp_path / "cache", max_retries=2)
        with pytest.raises(EngineError, match=f"failed after 3 attempts .*{field}") as caught:
            engine.generate([_request("q")])
        engine.close()
        assert server.requests_served == 3
    assert "\n" not in str(caught.value)


def test_ctrl_c_during_openai_generation_exits_at_once_and_keeps_every_finished_completion(tmp_path: Path) -> None:
    """``r2mad run`` on 6 questions, all sent at once: the server answers 3 and leaves the others hanging (60 s).
    Ctrl-C: exit 130 with one line, long before the hanging requests would end (a generous 30 s bound), and the
    response cache holds every completion the server finished."""
    import os
    import signal
    import subprocess

    from r2mad_core.engines.cache import ResponseCache

    with FakeOpenAIServer(hang_after=3, hang_seconds=60) as server:
        command = [sys.executable, "-m", "r2mad_core", "run", "--method", "cot", "--benchmark", "truthfulqa",
                   "--split", "test", "--limit", "6", "--engine", "openai", "--model", "m",
                   "--engine-option", f"base_urls=[{server.base_url}]", "--engine-option", "max_concurrency=6",
                   "--engine-option", "neutral_sampling=false", "--cache-dir", str(tmp_path / "cache"),
                   "--out", str(tmp_path / "run"), "--no-progress"]
        environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=environment)
        try:
            deadline = time.monotonic() + 60
            while not (server.completed >= 3 and server.requests_served >= 6) and process.poll() is None:
                assert time.monotonic() < deadline, "the run never sent its batch"
                time.sleep(0.05)
            time.sleep(0.3)  # the 3 answers reach the engine and the cache
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        completed = server.completed
    assert process.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("r2mad run: interrupted: 0 of 6 questions are kept in ")
    assert "Traceback" not in stderr
    cache = ResponseCache(tmp_path / "cache")
    assert completed == 3 and len(cache) == 3
    cache.close()
