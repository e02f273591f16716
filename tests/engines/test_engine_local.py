"""The ``local`` backend: a real llama.cpp server (xllamacpp) with the packaged SmolLM2-135M-Instruct."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from r2mad_core.engine import Request, SamplingParams
from r2mad_lab.engines import CachedEngine, EngineError, make_engine
from r2mad_lab.engines.local import LocalEngine, packaged_model_path

# SmolLM2's own template is ChatML; this is an equivalent Jinja text given explicitly.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def ask(content: str, *, seed: int = 0, logprobs: bool = False) -> Request:
    return Request(
        messages=({"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": content}),
        params=SamplingParams(temperature=1.0, top_p=1.0, max_tokens=8, seed=seed, logprobs=logprobs),
    )


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    with LocalEngine(threads=1, parallel_slots=2, context_per_slot=512) as local:
        yield local


@pytest.mark.slow
def test_generates_real_completions_with_logprobs(engine: LocalEngine) -> None:
    out = engine.generate([ask("What is 2+2?", logprobs=True), ask("Name a colour.", seed=1, logprobs=True)])
    assert len(out) == 2
    for completion in out:
        assert completion.prompt_tokens > 10
        assert 1 <= completion.completion_tokens <= 8
        assert completion.finish_reason in ("stop", "length")
        assert completion.logprobs is not None and len(completion.logprobs) == completion.completion_tokens
        assert all(value <= 0.0 for value in completion.logprobs)
        assert not completion.cached
    assert engine.identity == f"local:SmolLM2-135M-Instruct.Q4_1.gguf:{packaged_model_path().stat().st_size}"
    assert engine.model == "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.slow
def test_same_seed_same_text(engine: LocalEngine) -> None:
    [first] = engine.generate([ask("Say something about rivers.", seed=5)])
    [second] = engine.generate([ask("Say something about rivers.", seed=5)])
    assert first.text == second.text


@pytest.mark.slow
def test_cached_local_engine_replays_without_the_server(engine: LocalEngine, tmp_path: Path) -> None:
    cached = CachedEngine(engine, tmp_path, close_backend=False)
    before = engine.ledger.as_dict().get("debate", {}).get("requests", 0)
    first = cached.generate([ask("Name a fruit.")])
    second = cached.generate([ask("Name a fruit.")])
    after = engine.ledger.as_dict()["debate"]["requests"]
    cached.close()
    assert after - before == 1
    assert second[0].text == first[0].text and second[0].cached
    assert engine.running


@pytest.mark.slow
def test_custom_template_and_shutdown(tmp_path: Path) -> None:
    with make_engine("local", threads=1, parallel_slots=1, context_per_slot=256, chat_template=CHATML) as local:
        assert ":template-" in local.identity
        [completion] = local.generate([ask("Hello!")])
        assert 1 <= completion.completion_tokens <= 8
        url = local.base_url
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    assert not local.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
    with pytest.raises(EngineError, match="used after close"):
        local.generate([ask("again")])


def test_bad_model_file_is_reported(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf")
    with pytest.raises(EngineError, match=r"server failed to start with .*bogus\.gguf"):
        LocalEngine(bogus, threads=1, parallel_slots=1, context_per_slot=256)
    with pytest.raises(EngineError, match="is not a file"):
        LocalEngine(tmp_path / "missing.gguf")


@pytest.mark.slow
def test_a_prompt_longer_than_the_slot_context_is_recorded_not_fatal(engine: LocalEngine) -> None:
    # The module's server has 512 tokens per slot; this prompt needs ~1,500. llama.cpp answers HTTP 400,
    # which the backend records as an empty truncated completion so a long run goes on.
    long_prompt = "Repeat after me: " + "the quick brown fox jumps over the lazy dog. " * 150
    short, too_long = engine.generate([ask("Name a planet."), ask(long_prompt)])
    assert short.finish_reason in ("stop", "length") and short.completion_tokens >= 1
    assert (too_long.text, too_long.finish_reason, too_long.completion_tokens) == ("", "length", 0)
    assert too_long.prompt_tokens > 512
