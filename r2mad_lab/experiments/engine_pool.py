"""The engine pool: one engine per model of a grid, opened on first need, closed together.

Each :class:`~r2mad_lab.experiments.model_specs.ModelSpec` gets one engine (:func:`r2mad_lab.engines.make_engine`),
behind the response cache unless its backend says a generation costs less than the cache's lookup and store. A
``vllm`` engine closes the one before it: one GPU model in memory at a time.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Sequence

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_lab import engines  # engines.make_engine looked up at call time (tests replace it)
from r2mad_lab.experiments.model_specs import ModelSpec

logger = logging.getLogger(__name__)


class EnginePool:
    """The engines of a grid's models (:meth:`engine`), cached in ``cache_dir``. The simulated agents answer the
    questions of ``benchmarks`` (train and test, from ``data_dir``) and draw from ``seed`` unless their options say
    otherwise."""

    def __init__(self, cache_dir: str | Path, *, benchmarks: Sequence[str], data_dir: str | Path | None,
                 seed: int) -> None:
        self.cache_dir = Path(cache_dir)
        self.benchmarks = list(benchmarks)
        self.data_dir = data_dir
        self.seed = seed
        self._open: dict[str, Any] = {}  # engine key -> the engine
        self._kinds: dict[str, str] = {}  # engine key -> its backend name

    def engine(self, spec: ModelSpec) -> Any:
        """The engine of a model, opened once (behind the response cache in ``cache_dir``, unless the backend's
        ``worth_caching(**options)`` says no). Opening a
        ``vllm`` engine closes the previous one: one GPU model in memory at a time. A ``vllm`` model (any backend with
        ``identity_of``) is loaded only when a request misses the cache (``lazy``), so a cell whose generations are all
        cached never loads it."""
        key = self.key(spec)
        if key not in self._open:
            if spec.engine == "vllm":
                # one GPU model at a time: the models of a profile run one after another
                for other in [k for k, kind in self._kinds.items() if kind == "vllm" and k in self._open]:
                    logger.info("closing the previous vLLM engine before opening %s", spec.label)
                    with contextlib.suppress(Exception):
                        self._open.pop(other).close()
            model, options = spec.resolved()
            if spec.engine == "simulated":
                if "samples" not in options:  # every question a debate may ask about, train and test
                    options["samples"] = [s for b in self.benchmarks for s in load_benchmark(b, "all", self.data_dir)]
                options.setdefault("seed", self.seed)
            logger.info("opening engine %s for %s", spec.engine, spec.label)
            # a backend that says a generation costs less than the cache's lookup and store (the simulated agents
            # with no modelled latency: deterministic, a function of the request) is not cached: its completions
            # are never "cached" (the cache cost more CPU than such agents' answers)
            worth_caching = getattr(engines.ENGINES[spec.engine].resolve(), "worth_caching", None)
            cache_dir = self.cache_dir if worth_caching is None or worth_caching(**options) else None
            # lazy: a backend that can name its identity unbuilt (vllm) is built on the first cache miss only
            self._open[key] = engines.make_engine(spec.engine, model=model, cache_dir=cache_dir, lazy=True, **options)
            self._kinds[key] = spec.engine
        return self._open[key]

    @staticmethod
    def key(spec: ModelSpec) -> str:
        """Which models share an engine in this process: those equal in what identifies them in run configurations
        and in every option (the speed knobs too). Never written anywhere: not a run key."""
        return json.dumps({**spec.describe(), "all_options": dict(spec.options)}, sort_keys=True, default=str)

    def opened(self) -> list[Any]:
        """The engines open now, in the order they were opened."""
        return list(self._open.values())

    def close(self) -> None:
        """Close every engine open now, each once (an error closing one does not keep the others open)."""
        for engine in self._open.values():
            with contextlib.suppress(Exception):
                engine.close()
        self._open.clear()
