"""The ``vllm`` backend: offline ``vllm.LLM`` on a GPU, the paper's setting (Section 5.1).

A debate round -- Eq. 1 for every active question x agent -- is one ``LLM.chat`` call with one
``SamplingParams`` per request (temperature, top_p, max_tokens, a seed derived from (seed, sample
index), ``logprobs=1`` when asked), so vLLM schedules the whole round with continuous batching.
Outputs map to :class:`Completion`: text (thinking blocks stripped), prompt and completion token
counts, the sampled tokens' log-probabilities, and the finish reason (``length`` when truncated).

``vllm`` is imported lazily, only when no ``llm`` object is injected: tests pass a fake ``LLM``
and a fake ``SamplingParams`` class. Qwen3's thinking switch goes to the chat template through
``chat_template_kwargs={"enable_thinking": ...}``.

Large batches can be split with ``chunk_size`` so the cache commits between chunks (a crash then
loses at most one chunk).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

from r2mad_core.engines.base import (
    Completion,
    EngineError,
    Ledger,
    Request,
    backend_seed,
    collect_in_order,
)
from r2mad_core.engines.thinking import apply_thinking

logger = logging.getLogger(__name__)


class VLLMEngine:
    """Offline vLLM.

    Args:
        model: Hugging Face model id or local folder (e.g. ``Qwen/Qwen2.5-7B-Instruct``).
        tensor_parallel_size, gpu_memory_utilization, max_model_len, dtype: passed to ``vllm.LLM``.
        enable_thinking: for Qwen3: ``True``/``False`` is sent to the chat template as
            ``chat_template_kwargs={"enable_thinking": ...}``; ``None`` sends nothing (template default).
        seed: ``vllm.LLM``'s engine seed.
        chunk_size: at most this many requests per ``LLM.chat`` call (``None``: the whole batch).
        llm_options: further keyword arguments for ``vllm.LLM`` (e.g. ``enforce_eager``).
        llm: an already built ``LLM``-like object (tests inject a fake); then vLLM is not imported.
        sampling_params_class: the ``SamplingParams`` class (default ``vllm.SamplingParams``).
        identity: backend identity in cache keys; default ``vllm:<dtype>`` plus the thinking switch.
    """

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
        llm: Any = None,
        sampling_params_class: Callable[..., Any] | None = None,
        identity: str | None = None,
    ) -> None:
        if not model:
            raise ValueError("vllm backend: model is required (a Hugging Face id or a local folder)")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"vllm backend: chunk_size must be >= 1 or None, found {chunk_size}")
        self.model = model
        self.enable_thinking = enable_thinking
        self.chunk_size = chunk_size
        self.ledger = Ledger()
        if identity is None:
            identity = f"vllm:{dtype}"
            if enable_thinking is not None:
                identity += f":enable_thinking={enable_thinking}"
        self.identity = identity
        if llm is None or sampling_params_class is None:
            try:
                import vllm
            except ImportError as exc:
                raise EngineError(
                    "vllm backend: the `vllm` package is not installed (GPU only; install the `gpu` extra "
                    "on a CUDA machine), or use the `openai` backend against a vLLM server"
                ) from exc
            if sampling_params_class is None:
                sampling_params_class = vllm.SamplingParams
            if llm is None:
                options: dict[str, Any] = {
                    "model": model,
                    "tensor_parallel_size": tensor_parallel_size,
                    "gpu_memory_utilization": gpu_memory_utilization,
                    "dtype": dtype,
                    "seed": seed,
                }
                if max_model_len is not None:
                    options["max_model_len"] = max_model_len
                options.update(llm_options or {})
                llm = vllm.LLM(**options)
        self.llm = llm
        self.sampling_params_class = sampling_params_class

    def sampling_params(self, request: Request) -> Any:
        """vLLM ``SamplingParams`` for one request."""
        params = request.params
        return self.sampling_params_class(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            seed=backend_seed(request, self.identity, self.model),
            logprobs=1 if params.logprobs else None,
        )

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        """One ``LLM.chat`` per chunk; yields the chunk's completions when it finishes."""
        requests = list(requests)
        size = self.chunk_size or max(1, len(requests))
        for start in range(0, len(requests), size):
            chunk = requests[start:start + size]
            for offset, completion in enumerate(self._run_chunk(chunk)):
                self.ledger.record(chunk[offset], completion)
                yield start + offset, completion

    def _run_chunk(self, requests: list[Request]) -> list[Completion]:
        conversations = [[{"role": m["role"], "content": m["content"]} for m in r.messages] for r in requests]
        sampling = [self.sampling_params(r) for r in requests]
        kwargs: dict[str, Any] = {"use_tqdm": False}
        if self.enable_thinking is not None:
            kwargs["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        started = time.perf_counter()
        outputs = self.llm.chat(conversations, sampling, **kwargs)
        elapsed = time.perf_counter() - started
        if len(outputs) != len(requests):
            raise EngineError(
                f"vllm backend ({self.model}): LLM.chat returned {len(outputs)} outputs for {len(requests)} conversations"
            )
        share = elapsed / len(requests)
        return [
            self.to_completion(output, request, seconds=share) for output, request in zip(outputs, requests)
        ]

    def to_completion(self, output: Any, request: Request, *, seconds: float = 0.0) -> Completion:
        """Map a vLLM ``RequestOutput`` (first candidate) to a :class:`Completion`."""
        if not getattr(output, "outputs", None):
            raise EngineError(f"vllm backend ({self.model}): a RequestOutput has no candidates (request tag {request.tag!r})")
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
            for position, (token_id, alternatives) in enumerate(zip(token_ids, candidate.logprobs)):
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
        completion = Completion(
            text=candidate.text or "",
            prompt_tokens=len(output.prompt_token_ids or []),
            completion_tokens=len(token_ids),
            logprobs=logprobs,
            finish_reason=finish,
            seconds=seconds,
        )
        return apply_thinking(completion)

    def close(self) -> None:
        """Drop the model (frees GPU memory when nothing else holds it)."""
        self.llm = None

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
