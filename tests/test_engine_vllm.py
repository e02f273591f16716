"""The ``vllm`` backend's mapping, against a fake ``LLM`` (vLLM itself is GPU-only and not installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from r2mad_core.engines import CachedEngine, EngineError, make_engine
from r2mad_core.engines.base import Request, SamplingParams, backend_seed
from r2mad_core.engines.vllm_backend import VLLMEngine


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def lp(value: float) -> SimpleNamespace:
    return SimpleNamespace(logprob=value, rank=1, decoded_token="t")


class FakeLLM:
    """Answers by a script keyed on the user message; records every chat call.

    Scripted outputs: (text, token_ids, finish_reason). Logprobs: the sampled token gets -0.1*id,
    an alternative token (id + 1000) gets -9.
    """

    def __init__(self, script: dict[str, tuple[str, list[int], str | None]], fail_on_call: int | None = None) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []
        self.fail_on_call = fail_on_call

    def chat(self, conversations: list[list[dict]], sampling_params: list[FakeSamplingParams], **kwargs: Any) -> list:
        self.calls.append({"conversations": conversations, "sampling": sampling_params, "kwargs": kwargs})
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("CUDA out of memory (injected)")
        outputs = []
        for conversation, sampling in zip(conversations, sampling_params):
            text, token_ids, finish = self.script[conversation[-1]["content"]]
            logprobs = None
            if sampling.kwargs["logprobs"]:
                logprobs = [{t: lp(-0.1 * t), t + 1000: lp(-9.0)} for t in token_ids]
            prompt_ids = list(range(sum(len(m["content"]) for m in conversation)))
            outputs.append(
                SimpleNamespace(
                    prompt_token_ids=prompt_ids,
                    outputs=[SimpleNamespace(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish)],
                )
            )
        return outputs


def ask(content: str, *, logprobs: bool = False, sample_index: int = 0) -> Request:
    return Request(
        messages=({"role": "system", "content": "sys"}, {"role": "user", "content": content}),
        params=SamplingParams(temperature=1.0, top_p=1.0, max_tokens=6144, seed=7, logprobs=logprobs),
        sample_index=sample_index,
    )


SCRIPT: dict[str, tuple[str, list[int], str | None]] = {
    "plain": ("The answer is ((B)).", [5, 6, 7], "stop"),
    "cut": ("The answer is", [5, 6], "length"),
    "think": ("<think>\nhmm\n</think>\n\n\\boxed{4}", [1, 2, 3, 4], "stop"),
    "think-cut": ("<think>\nstill going", [1, 2], "length"),
    "think-cut-stop": ("<think>\nstill going", [1, 2], "stop"),
    "aborted": ("partial", [9], "abort"),
}


def make(script: dict | None = None, **options: Any) -> tuple[VLLMEngine, FakeLLM]:
    llm = FakeLLM(script or SCRIPT, fail_on_call=options.pop("fail_on_call", None))
    engine = VLLMEngine("Qwen/Qwen3-8B", llm=llm, sampling_params_class=FakeSamplingParams, **options)
    return engine, llm


def test_one_chat_call_per_batch_with_per_request_sampling_params() -> None:
    engine, llm = make()
    batch = [ask("plain"), ask("plain", sample_index=1, logprobs=True), ask("cut")]
    out = engine.generate(batch)
    assert len(llm.calls) == 1
    call = llm.calls[0]
    assert call["conversations"] == [[{"role": "system", "content": "sys"}, {"role": "user", "content": c}]
                                     for c in ("plain", "plain", "cut")]
    assert call["kwargs"] == {"use_tqdm": False}
    kwargs = [s.kwargs for s in call["sampling"]]
    assert kwargs[0] == {"n": 1, "temperature": 1.0, "top_p": 1.0, "max_tokens": 6144,
                         "seed": backend_seed(batch[0], engine.identity, engine.model), "logprobs": None}
    assert kwargs[1]["logprobs"] == 1 and kwargs[1]["seed"] == backend_seed(batch[1], engine.identity, engine.model) != kwargs[0]["seed"]
    assert [c.text for c in out] == ["The answer is ((B)).", "The answer is ((B)).", "The answer is"]
    assert [c.finish_reason for c in out] == ["stop", "stop", "length"]
    assert [(c.prompt_tokens, c.completion_tokens) for c in out] == [(8, 3), (8, 3), (6, 2)]
    assert out[0].logprobs is None
    assert out[1].logprobs == pytest.approx([-0.5, -0.6, -0.7])
    assert engine.ledger.as_dict()["debate"]["completion_tokens"] == 8


def test_thinking_is_stripped_and_unclosed_means_length() -> None:
    engine, _ = make()
    think, cut, cut_stop = engine.generate([ask("think"), ask("think-cut"), ask("think-cut-stop")])
    assert (think.text, think.finish_reason, think.completion_tokens) == ("\\boxed{4}", "stop", 4)
    assert (cut.text, cut.finish_reason) == ("", "length")
    assert (cut_stop.text, cut_stop.finish_reason) == ("", "length")


def test_enable_thinking_goes_to_the_chat_template_and_identity() -> None:
    engine, llm = make(enable_thinking=False, dtype="bfloat16")
    engine.generate([ask("plain")])
    assert llm.calls[0]["kwargs"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert engine.identity == "vllm:bfloat16:enable_thinking=False"
    assert make()[0].identity == "vllm:auto"


def test_aborted_outputs_are_errors_and_not_cached(tmp_path: Path) -> None:
    engine, llm = make()
    with CachedEngine(engine, tmp_path) as cached:
        [first] = cached.generate([ask("aborted")])
        assert first.finish_reason == "error"
        cached.generate([ask("aborted")])
        assert len(cached.cache) == 0
    assert len(llm.calls) == 2


def test_chunks_are_committed_before_a_crash(tmp_path: Path) -> None:
    engine, llm = make(chunk_size=2, fail_on_call=3)
    batch = [ask("plain", sample_index=k) for k in range(6)]
    with CachedEngine(engine, tmp_path) as cached:
        with pytest.raises(RuntimeError, match="injected"):
            cached.generate(batch)
        assert len(cached.cache) == 4
    assert [len(c["conversations"]) for c in llm.calls] == [2, 2, 2]
    engine2, llm2 = make(chunk_size=2)
    with CachedEngine(engine2, tmp_path) as cached:
        out = cached.generate(batch)
    assert [len(c["conversations"]) for c in llm2.calls] == [2]
    assert [c.cached for c in out] == [True] * 4 + [False] * 2


def test_missing_sampled_token_logprob_is_an_error() -> None:
    class BrokenLLM(FakeLLM):
        def chat(self, conversations, sampling_params, **kwargs):  # type: ignore[override]
            outputs = super().chat(conversations, sampling_params, **kwargs)
            outputs[0].outputs[0].logprobs[1] = {12345: lp(-1.0)}
            return outputs

    engine = VLLMEngine("m", llm=BrokenLLM(SCRIPT), sampling_params_class=FakeSamplingParams)
    with pytest.raises(EngineError, match="position 1: sampled token 6 missing"):
        engine.generate([ask("plain", logprobs=True)])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_without_vllm_the_error_says_what_to_do() -> None:
    with pytest.raises(EngineError, match="`vllm` package is not installed"):
        make_engine("vllm", model="Qwen/Qwen2.5-7B-Instruct")
    with pytest.raises(ValueError, match="model is required"):
        make_engine("vllm")
