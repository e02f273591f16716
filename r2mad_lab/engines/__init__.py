"""Engines: the one batched generation call behind every method (docs/design.md, "The engine boundary").

Every response z_i^(t) ~ P(. | x, Z^(t-1), phi_i) of Eq. 1 -- debate turns, summaries, judge
calls -- is produced by ``engine.generate(requests)``. :func:`make_engine` builds a backend by
name and, when ``cache_dir`` is given, puts the persistent response cache in front of it:

>>> with make_engine("local", cache_dir="cache", threads=1) as engine:  # doctest: +SKIP
...     [completion] = engine.generate([Request(messages=({"role": "user", "content": "2+2?"},))])

Backends (constructor options are passed through ``**options``):

- ``local``: :class:`~r2mad_lab.engines.local.LocalEngine` -- llama.cpp server on the CPU,
  packaged SmolLM2-135M-Instruct by default (``model`` = path of another ``.gguf``; ``requantize="Q8_0"``: the
  same weights in a faster file made once by :mod:`~r2mad_lab.engines.requantize`).
- ``openai``: :class:`~r2mad_lab.engines.openai_compat.OpenAICompatEngine` -- any
  OpenAI-compatible server(s) (``model`` = served model name; ``base_urls=...``).
- ``vllm``: :class:`~r2mad_lab.engines.vllm_backend.VLLMEngine` -- offline vLLM on a GPU
  (``model`` = Hugging Face id or folder).
Underneath: :mod:`~r2mad_core.engine` (requests, completions, the ``Engine`` protocol),
:mod:`~r2mad_lab.engines.cache` (the persistent response cache), :mod:`~r2mad_lab.engines.thinking` (the
``<think>`` part of a completion), :mod:`~r2mad_lab.engines.vllm_loop` (the vLLM engine thread),
:mod:`~r2mad_lab.engines.endpoints` (several servers of one model: least busy first, failover, adaptive limits),
:mod:`~r2mad_lab.engines.deadline` (one attempt's total deadline for the budget gateway's blocking client),
:mod:`~r2mad_lab.engines.event_loop` (the one event-loop thread the ``openai`` engine's requests run on),
:mod:`~r2mad_lab.engines.http1` (the small HTTP/1.1 client they are sent with: keep-alive connections to a server).

- ``rehearsal``: :class:`~r2mad_lab.engines.rehearsal.RehearsalEngine` -- the paper run's dress rehearsal
  (a model's context and reply lengths, every request logged; unlisted).
- ``simulated``: ``r2mad_core.theory.agents.SimulatedEngine`` -- latent-concept agents for
  tests and the theory (options forwarded as they are; it needs ``samples=...``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2mad_core.engine import (
    CUTS,
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
    classify_cut,
    option_problems,
)
from r2mad_lab.engines.cache import CachedEngine, CacheStats, LazyEngine, ResponseCache


@dataclass(frozen=True)
class EngineSpec:
    """One engine backend in :data:`ENGINES`.

    ``factory``: the backend class or a function ``(model, **options) -> Engine``, or its import path
    ``"package.module:Name"`` (resolved on first use, so an optional backend such as vLLM is imported only
    when it is asked for). ``needs_model``: ``make_engine`` refuses to build it without ``model``;
    ``model_option``: the constructor keyword that receives ``model`` (``None``: passed only when given,
    as ``model=``). ``concurrent``: ``generate`` may be called from several threads at once. ``listed``: shown
    among the choices (the CLI's ``--engine``, a profile's error); False for an engine the package builds for
    itself (the pre-flight estimate's counting engine), which a profile may still name.
    """

    name: str
    factory: Callable[..., Engine] | str
    description: str
    needs_model: bool = False
    model_option: str | None = "model"
    concurrent: bool = False
    listed: bool = True

    def resolve(self) -> Callable[..., Engine]:
        if not isinstance(self.factory, str):
            return self.factory
        module_name, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module_name), attribute)


#: The engine registry: name -> :class:`EngineSpec`. :func:`register_engine` adds one (a plugin's engine
#: reaches ``make_engine``, the CLI's ``--engine`` choices and the profiles' ``engine`` field).
ENGINES: dict[str, EngineSpec] = {}


def register_engine(spec: EngineSpec) -> EngineSpec:
    """Add ``spec`` to :data:`ENGINES`; one line naming the problem when it cannot be registered."""
    if not spec.name or not spec.name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"register_engine: engine name {spec.name!r} must be letters, digits, '-' or '_'")
    if spec.name in ENGINES and ENGINES[spec.name] != spec:
        raise ValueError(f"register_engine: an engine named {spec.name!r} is registered already")
    if not (callable(spec.factory) or (isinstance(spec.factory, str) and ":" in spec.factory)):
        raise ValueError(f"register_engine: engine {spec.name!r} needs a factory: a callable or 'module:Name', "
                         f"found {spec.factory!r}")
    ENGINES[spec.name] = spec
    return spec


for _spec in (
    EngineSpec("local", "r2mad_lab.engines.local:LocalEngine",
               "llama.cpp server on the CPU (model: a .gguf path; default the packaged SmolLM2-135M-Instruct)",
               model_option="model_path"),
    EngineSpec("openai", "r2mad_lab.engines.openai_compat:OpenAICompatEngine",
               "any OpenAI-compatible server (model: the served model name)", needs_model=True, concurrent=True),
    EngineSpec("vllm", "r2mad_lab.engines.vllm_backend:VLLMEngine",
               "offline vLLM on a GPU (model: a Hugging Face id or folder)", needs_model=True, concurrent=True),
    # The simulated agents are the latent-concept model of Section 4 made into an engine: they live with the
    # theory (r2mad_core/theory/agents.py), above the debate prompts they read; registered here by path.
    EngineSpec("simulated", "r2mad_core.theory.agents:SimulatedEngine",
               "latent-concept agents for tests, the sim profile and the theory (needs samples=...)",
               model_option=None, concurrent=True),
    EngineSpec("rehearsal", "r2mad_lab.engines.rehearsal:RehearsalEngine",
               "the dress rehearsal's stand-in: a model's context and reply lengths, no language model",
               concurrent=True, listed=False),
):
    register_engine(_spec)


def engine_names() -> tuple[str, ...]:
    """The registered engine names, built-ins first (the CLI's and the profiles' choices; unlisted ones left out)."""
    return tuple(name for name, spec in ENGINES.items() if spec.listed)


#: The built-in engine names (plugins may add more: :func:`engine_names`).
ENGINE_NAMES = engine_names()

__all__ = [
    "CUTS",
    "ENGINES",
    "ENGINE_NAMES",
    "CacheStats",
    "CachedEngine",
    "Completion",
    "Engine",
    "EngineError",
    "EngineSpec",
    "LazyEngine",
    "Ledger",
    "Message",
    "Request",
    "ResponseCache",
    "SamplingParams",
    "StreamingEngine",
    "TagCost",
    "backend_seed",
    "classify_cut",
    "engine_names",
    "make_engine",
    "register_engine",
]


def make_engine(
    name: str,
    *,
    model: str | None = None,
    cache_dir: str | Path | None = None,
    lazy: bool = False,
    **options: Any,
) -> Engine:
    """Build the registered backend ``name`` (see :data:`ENGINES`), cached when ``cache_dir`` is given.

    ``model``: ``local`` -- a ``.gguf`` path (default: the packaged SmolLM2-135M-Instruct);
    ``openai`` -- the served model name (required); ``vllm`` -- a Hugging Face id or folder
    (required); ``simulated`` -- forwarded as ``model=`` only when given.
    ``options`` go to the backend's constructor unchanged. Engines are context managers;
    closing a cached engine closes its backend. ``lazy`` (with ``cache_dir``, for a backend class with an
    ``identity_of`` classmethod, e.g. ``vllm``): the backend is built on the first request the cache cannot
    answer (:class:`~r2mad_lab.engines.cache.LazyEngine`), never for a run that is all cached.
    """
    spec = ENGINES.get(name)
    if spec is None:
        raise ValueError(f"make_engine: unknown engine name {name!r}; expected one of {engine_names()}")
    if spec.needs_model and model is None:
        raise ValueError(f"make_engine({name!r}): model is required ({spec.description})")
    recorded = options.pop("recorded_model", None)  # the model as records name it (engine.recorded_model)
    problems = option_problems(options, f"engine {name}")
    if problems:
        raise ValueError(problems[0])
    if model is not None:
        options[spec.model_option or "model"] = model
    elif spec.model_option == "model_path":
        options["model_path"] = None
    factory = spec.resolve()
    identity_of = getattr(factory, "identity_of", None)
    if lazy and cache_dir is not None and callable(identity_of):
        backend: Any = LazyEngine(lambda: factory(**options), identity=identity_of(**options),
                                  model=str(options.get(spec.model_option or "model")), concurrent=spec.concurrent)
    else:
        backend = factory(**options)
    try:
        engine = backend if cache_dir is None else CachedEngine(backend, cache_dir)
    except BaseException:
        backend.close()
        raise
    if recorded:
        engine.recorded_model = recorded
    return engine
