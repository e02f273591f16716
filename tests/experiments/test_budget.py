"""The api profile's cost estimate and budget cap (r2mad_lab.experiments.budget), against the fake OpenAI server:
exact request counts, refusals before sending, nothing lost, and a capped run that resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from r2mad_lab.engines import EngineError, Request, SamplingParams, make_engine
from r2mad_lab.experiments.budget import (
    BudgetCap,
    BudgetExceeded,
    EstimatingGateway,
    ForwardingGateway,
    Prices,
    Usage,
    estimate_tokens,
    format_estimate,
)
from r2mad_lab.reproduce import command as reproduce

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fake_openai_server import FakeOpenAIServer  # noqa: E402


def _request(text: str, max_tokens: int = 10) -> Request:
    return Request(messages=({"role": "user", "content": text},), params=SamplingParams(max_tokens=max_tokens))


def test_estimate_tokens_is_characters_over_four_plus_four_per_message() -> None:
    assert estimate_tokens([{"role": "user", "content": "x" * 8}]) == 2 + 4
    assert (estimate_tokens([{"role": "system", "content": "abc"}, {"role": "user", "content": "x" * 9}])
            == (1 + 4) + (3 + 4))
    assert estimate_tokens([{"role": "user", "content": ""}]) == 4


def test_prices_and_usage_lines() -> None:
    prices = Prices(0.15, 0.60)
    assert prices.cost(1_000_000, 500_000) == pytest.approx(0.45)
    assert Prices().cost(10, 10) is None
    lines = format_estimate({"03_main": Usage(10, 2000, 5000), "08_theory": Usage()}, prices)
    assert lines == [
        "  03_main: 10 requests, ~2,000 prompt tokens, <= 5,000 completion tokens, <= 0.0033 (money at the given "
        "prices)",
        "  08_theory: no requests",
        "  total: 10 requests, ~2,000 prompt tokens, <= 5,000 completion tokens, <= 0.0033 (money at the given prices)",
    ]
    assert "R2MAD_API_PRICE_PROMPT" in format_estimate({}, Prices())[-1]


def test_cap_reserves_the_worst_case_and_refuses_request_n_plus_1() -> None:
    cap = BudgetCap(max_requests=2)
    first, second = cap.reserve(100, 10), cap.reserve(100, 10)
    with pytest.raises(BudgetExceeded, match=r"max_requests 2 reached \(2 sent, 2 of them in flight\)"):
        cap.reserve(100, 10)  # two in flight already count as sent
    cap.settle(first, 90, 5)
    cap.release(second)  # never left the process (no connection): nothing sent, the slot is free again
    assert (cap.spent.requests, cap.spent.prompt_tokens, cap.spent.completion_tokens, cap.refused) == (1, 90, 5, 1)
    cap.settle(cap.reserve(1, 1), 1, 1)
    with pytest.raises(BudgetExceeded):
        cap.reserve(1, 1)

    money = BudgetCap(max_cost=1.0, prices=Prices(1.0, 1.0))  # 1 per million tokens
    reserved = money.reserve(400_000, 500_000)  # worst case 0.9
    with pytest.raises(BudgetExceeded, match="max_cost 1 reached"):
        money.reserve(100_000, 100_000)  # 0.9 reserved + 0.2 > 1
    money.settle(reserved, 400_000, 100_000)  # it actually cost 0.5
    money.settle(money.reserve(100_000, 100_000), 100_000, 100_000)  # 0.5 + 0.2 <= 1
    assert money.spent_cost == pytest.approx(0.7)
    with pytest.raises(ValueError, match="needs both prices"):
        BudgetCap(max_cost=1.0)


def test_estimating_gateway_answers_max_tokens_of_filler_without_an_answer() -> None:
    from r2mad_core.data.answers import extract_answer

    with EstimatingGateway() as gateway:
        engine = make_engine("openai", model="any", base_urls=gateway.base_url, api_key_env=None)
        try:
            requests = [_request("What is 2+2?\n\nA. 4\nB. 5", max_tokens=12), _request("x" * 40, max_tokens=7)]
            completions = engine.generate(requests)
            logprob_request = Request(messages=requests[0].messages, params=SamplingParams(max_tokens=3, logprobs=True))
            [with_logprobs] = engine.generate([logprob_request])
        finally:
            engine.close()
        usage = gateway.snapshot()
    assert [c.completion_tokens for c in completions] == [12, 7]
    assert [c.truncated for c in completions] == [True, True]
    assert extract_answer(completions[0].text, "mmlu_pro_economics", num_options=2) is None
    assert extract_answer(completions[0].text, "math500") is None
    assert with_logprobs.logprobs == [-1.0, -1.0, -1.0]
    prompt = estimate_tokens(requests[0].messages)
    assert (usage.requests, usage.prompt_tokens, usage.completion_tokens) == (3, 2 * prompt + (10 + 4), 12 + 7 + 3)


def test_forwarding_gateway_stops_before_request_n_plus_1_and_keeps_everything_so_far(tmp_path: Path) -> None:
    """10 requests, cap 6, through the real openai engine and the response cache: the endpoint sees
    exactly 6, the engine raises after collecting them, the cache holds 6; a rerun with a larger cap
    sends only the 4 others."""
    with FakeOpenAIServer() as server:
        requests = [_request(f"question {i}") for i in range(10)]
        cap = BudgetCap(max_requests=6)
        with ForwardingGateway([server.base_url], cap) as gateway:
            engine = make_engine("openai", model="m", base_urls=gateway.base_url, api_key_env=None,
                                 cache_dir=tmp_path / "cache", max_concurrency=1)
            with pytest.raises(EngineError, match=r"HTTP 402 .*r2mad budget cap: max_requests 6 reached"):
                engine.generate(requests)
            engine.close()
        assert server.requests_served == 6 and cap.spent.requests == 6 and cap.refused >= 1
        with ForwardingGateway([server.base_url], BudgetCap(max_requests=4)) as gateway:
            engine = make_engine("openai", model="m", base_urls=gateway.base_url, api_key_env=None,
                                 cache_dir=tmp_path / "cache", max_concurrency=1)
            completions = engine.generate(requests)
            engine.close()
        assert server.requests_served == 10  # 4 more: the first 6 came from the cache
        assert [c.text.endswith(f"to: question {i}") for i, c in enumerate(completions)] == [True] * 10


def test_forwarding_gateway_passes_the_key_and_spreads_over_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_TEST_KEY", "sk-test")
    with FakeOpenAIServer() as one, FakeOpenAIServer() as two:
        with ForwardingGateway([one.base_url, two.base_url], BudgetCap()) as gateway:
            engine = make_engine("openai", model="m", base_urls=gateway.base_url, api_key_env="R2MAD_TEST_KEY")
            engine.generate([_request(f"q{i}") for i in range(6)])
            engine.close()
        assert one.requests_served + two.requests_served == 6 and one.requests_served >= 1 and two.requests_served >= 1
        keys = [{k.lower(): v for k, v in h.items()}.get("authorization") for h in one.headers + two.headers]
        assert keys == ["Bearer sk-test"] * 6


def test_forwarding_gateway_unreachable_endpoint_is_a_retryable_502() -> None:
    cap = BudgetCap(max_requests=5)
    with ForwardingGateway(["http://127.0.0.1:9/v1"], cap) as gateway:
        response = httpx.post(gateway.base_url + "/chat/completions", json={"messages": [], "max_tokens": 1})
    assert response.status_code == 502 and "unreachable" in response.json()["error"]["message"]
    assert cap.spent.requests == 0  # a failed request spends nothing and frees its reservation
    cap.settle(cap.reserve(1, 1), 1, 1)


# ----------------------------------------------------------------------------------------------
# The api profile end to end (notebook 03 on one TruthfulQA question) against the fake server
# ----------------------------------------------------------------------------------------------
SMALL = ["test_limit=1", "train_limit=2", "benchmarks=[truthfulqa]", "retrieval_benchmarks=[truthfulqa]",
         "icl_benchmarks=[truthfulqa]", "poison_benchmarks=[truthfulqa]", "cost_benchmark=truthfulqa",
         "max_tokens=64", "summary_max_tokens=32", "embedder=hashing", "bootstrap_resamples=100"]


def _reproduce(out: Path, *extra: str) -> list[str]:
    # a smaller run is a variant of the api profile (named small); its baseline is not run first (a paid engine)
    argv = ["--profile", "api", "--only", "03", "--output-dir", str(out), "--variant", "small"]
    for item in SMALL:
        argv += ["--set", item]
    return argv + list(extra)


def test_api_profile_estimates_then_stops_at_the_cap_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("R2MAD_API_MODEL", "fake-model")
        monkeypatch.setenv("R2MAD_API_BASE_URL", server.base_url)
        monkeypatch.setenv("R2MAD_API_PRICE_PROMPT", "1.0")
        monkeypatch.setenv("R2MAD_API_PRICE_COMPLETION", "2.0")
        out = tmp_path / "out"

        code = reproduce.main(_reproduce(out, "--estimate-only"))
        printed = capsys.readouterr().out
        assert code == 0 and server.requests_served == 0  # nothing sent
        assert printed.splitlines()[0] == (
            "reproduce: profile api: agents = API-model (openai engine, model ${R2MAD_API_MODEL})")
        [line] = [ln for ln in printed.splitlines() if ln.startswith("  03_main_results: ")]
        requests = int(line.split(": ", 1)[1].split(" requests")[0])
        assert line.endswith("(money at the given prices)")
        assert f"  total: {requests} requests" in printed and "--estimate-only: nothing sent" in printed
        assert not (out / "runs").exists()  # the estimate ran in a scratch folder

        cap = requests // 3
        code = reproduce.main(_reproduce(out, "--max-requests", str(cap)))
        err = capsys.readouterr().err
        assert code == 1 and server.requests_served == cap
        assert f"reproduce: stopped by the budget cap (max_requests {cap}): {cap} requests" in err
        assert "rerun with a higher cap to resume (cached requests are not sent again)" in err

        code = reproduce.main(_reproduce(out, "--no-estimate"))
        assert code == 0, capsys.readouterr().err
        resumed = server.requests_served - cap
        assert f"sent through the budget gateway: {resumed} requests" in capsys.readouterr().out

    # the same cell from nothing sends exactly what the two runs sent together (none lost, none twice)
    with FakeOpenAIServer() as fresh:
        monkeypatch.setenv("R2MAD_API_BASE_URL", fresh.base_url)
        assert reproduce.main(_reproduce(tmp_path / "fresh", "--no-estimate")) == 0
        assert fresh.requests_served == cap + resumed
        # the estimate is an upper bound: no early stop, every debate runs all rounds
        assert fresh.requests_served <= requests
    assert not (tmp_path / "fresh" / "figures" / "api" / "MANIFEST.json").exists()  # nothing of the profile's own
    manifest = json.loads((tmp_path / "fresh" / "figures" / "api" / "variants" / "small" / "MANIFEST.json").read_text())
    # the model by its label, its name by the variable's name only (issue 51: the value is in no artifact)
    assert any("API-model" in json.dumps(record) for record in manifest.values())
    assert "fake-model" not in json.dumps(manifest)
