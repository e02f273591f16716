"""Engines: the one batched generation call behind every method (DESIGN.md, "The engine boundary").

Every response z_i^(t) ~ P(. | x, Z^(t-1), phi_i) of Eq. 1 -- debate turns, summaries, judge
calls -- is produced by ``engine.generate(requests)``. :func:`make_engine` builds a backend by
name and, when ``cache_dir`` is given, puts the persistent response cache in front of it:

>>> with make_engine("local", cache_dir="cache", threads=1) as engine:  # doctest: +SKIP
...     [completion] = engine.generate([Request(messages=({"role": "user", "content": "2+2?"},))])

Backends (constructor options are passed through ``**options``):

- ``local``: :class:`~r2mad_core.engines.local.LocalEngine` -- llama.cpp server on the CPU,
  packaged SmolLM2-135M-Instruct by default (``model`` = path of another ``.gguf``).
- ``openai``: :class:`~r2mad_core.engines.openai_compat.OpenAICompatEngine` -- any
  OpenAI-compatible server(s) (``model`` = served model name; ``base_urls=...``).
- ``vllm``: :class:`~r2mad_core.engines.vllm_backend.VLLMEngine` -- offline vLLM on a GPU
  (``model`` = Hugging Face id or folder).
- ``simulated``: ``r2mad_core.engines.simulated.SimulatedEngine`` -- latent-concept agents for
  tests and the theory (options forwarded as they are; it needs ``samples=...``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r2mad_core.engines.base import (
    Completion,
    Engine,
    EngineError,
    Ledger,
    Message,
    Request,
    SamplingParams,
    StreamingEngine,
    TagCost,
    backend_seed,
)
from r2mad_core.engines.cache import CachedEngine, CacheStats, ResponseCache

ENGINE_NAMES = ("local", "openai", "vllm", "simulated")

__all__ = [
    "ENGINE_NAMES",
    "CacheStats",
    "CachedEngine",
    "Completion",
    "Engine",
    "EngineError",
    "Ledger",
    "Message",
    "Request",
    "ResponseCache",
    "SamplingParams",
    "StreamingEngine",
    "TagCost",
    "backend_seed",
    "make_engine",
]


def make_engine(
    name: str,
    *,
    model: str | None = None,
    cache_dir: str | Path | None = None,
    **options: Any,
) -> Engine:
    """Build the backend ``name`` (one of :data:`ENGINE_NAMES`), cached when ``cache_dir`` is given.

    ``model``: ``local`` -- a ``.gguf`` path (default: the packaged SmolLM2-135M-Instruct);
    ``openai`` -- the served model name (required); ``vllm`` -- a Hugging Face id or folder
    (required); ``simulated`` -- forwarded as ``model=`` only when given.
    ``options`` go to the backend's constructor unchanged. Engines are context managers;
    closing a cached engine closes its backend.
    """
    backend: Any
    if name == "local":
        from r2mad_core.engines.local import LocalEngine

        backend = LocalEngine(model_path=model, **options)
    elif name == "openai":
        from r2mad_core.engines.openai_compat import OpenAICompatEngine

        if model is None:
            raise ValueError("make_engine('openai'): model is required (the model name the server serves)")
        backend = OpenAICompatEngine(model=model, **options)
    elif name == "vllm":
        from r2mad_core.engines.vllm_backend import VLLMEngine

        if model is None:
            raise ValueError("make_engine('vllm'): model is required (a Hugging Face id or a local folder)")
        backend = VLLMEngine(model=model, **options)
    elif name == "simulated":
        from r2mad_core.engines.simulated import SimulatedEngine

        if model is not None:
            options["model"] = model
        backend = SimulatedEngine(**options)
    else:
        raise ValueError(f"make_engine: unknown engine name {name!r}; expected one of {ENGINE_NAMES}")
    if cache_dir is None:
        return backend
    try:
        return CachedEngine(backend, cache_dir)
    except BaseException:
        backend.close()
        raise
