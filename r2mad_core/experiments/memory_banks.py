"""A grid's memory banks (Appendix A "Memory Construction"): one bank set per (model, benchmark), its folder, built once.

:class:`MemoryBanks` names each bank set by the model that builds it (the evaluated model itself, or the profile's
``memory_model``), its build configuration and the folder that configuration hashes to
(:mod:`r2mad_core.experiments.run_keys`), and builds a missing one from the train split
(:func:`~r2mad_core.experiments.build_memory.build_memory`) under a lock, so notebooks running at once build each
bank once and build different ones first (:mod:`r2mad_core.experiments.waiting`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

from tqdm.std import tqdm

from r2mad_core.experiments.build_memory import build_memory
from r2mad_core.experiments.model_specs import ModelSpec
from r2mad_core.experiments.run_keys import config_hash, slug
from r2mad_core.experiments.waiting import held_elsewhere, least_waiting
from r2mad_core.files import atomic_write, locked
from r2mad_core.report.artifacts import jsonable


class MemoryBanks:
    """The banks of ``exp`` (an :class:`~r2mad_core.reproduce.grid.ExperimentGrid`), read from it when asked: its
    run settings, models (``models``, ``memory_models``, ``memory_model``, ``model(label)``), ``runs_dir``,
    ``data_dir``, train questions (``samples``), engines (``engines``) and ``progress``."""

    def __init__(self, exp: Any) -> None:
        self.exp = exp

    def memory_spec(self, spec: ModelSpec) -> ModelSpec:
        """The model whose debates fill the memory banks used by ``spec``: itself (``memory_model: null``, one bank
        per evaluated model; ours, the paper does not say) or the profile's ``memory_model`` (the authors built one
        bank with Qwen3-4B-Instruct-2507 for every evaluated model)."""
        exp = self.exp
        if exp.memory_model is None:
            return spec
        return next((m for m in exp.memory_models if m.label == exp.memory_model), None) or exp.model(exp.memory_model)

    def memory_options(self) -> dict[str, Any]:
        """How the banks are built under this protocol (:func:`r2mad_core.experiments.protocol.memory_options`)."""
        return self.exp.run_settings.memory_options()

    def memory_config(self, spec: ModelSpec, benchmark: str) -> dict[str, Any]:
        """What builds the bank set of (``spec``, ``benchmark``): its folder's key and its ``build_config.json``."""
        spec = self.memory_spec(spec)
        settings = self.exp.run_settings
        return {
            "benchmark": benchmark, "split": "train", "limit": settings.train_limit, "seed": settings.seed,
            **settings.debate.values(("n_agents", "n_rounds", "summary_max_tokens")),
            "embedder": settings.embedder, "model": spec.describe(), **self.exp.sampling, **self.memory_options(),
        }

    def memory_dir(self, spec: ModelSpec, benchmark: str) -> Path:
        """The folder of the bank set of (``spec``, ``benchmark``), under the model that builds it."""
        config = self.memory_config(spec, benchmark)
        builder = self.memory_spec(spec)
        return self.exp.runs_dir / slug(builder.label) / benchmark / f"memory-{config_hash(config)}"

    def memory(self, spec: ModelSpec | str, benchmark: str) -> Path:
        """The memory bank directory of (model, benchmark), built from the train split if missing
        (Appendix A: a forced 3-round MAD with summaries on each training question)."""
        exp = self.exp
        spec = exp.model(spec) if isinstance(spec, str) else spec
        directory = self.memory_dir(spec, benchmark)
        if (directory / "manifest.json").exists():
            return directory
        directory.parent.mkdir(parents=True, exist_ok=True)
        # one builder at a time: a notebook running beside another that builds this bank waits, then loads it
        with locked(directory.parent / f".{directory.name}.lock"):
            if (directory / "manifest.json").exists():
                return directory
            directory.mkdir(parents=True, exist_ok=True)
            atomic_write(directory / "build_config.json",
                         json.dumps(jsonable(self.memory_config(spec, benchmark)), indent=2))
            settings = exp.run_settings
            build_memory(
                benchmark, exp.engines.engine(self.memory_spec(spec)), settings.embedder, directory,
                limit=settings.train_limit, split="train", seed=settings.seed, settings=settings.debate,
                data_dir=exp.data_dir, samples=exp.samples(benchmark, "train"), progress=False, overwrite=True,
                **self.memory_options(),
            )
        return directory

    def memories(self, pairs: Sequence[tuple[ModelSpec | str, str]]) -> dict[tuple[str, str], Path]:
        """The memory bank of every (model, benchmark) of ``pairs``, built where missing, by ``(label, benchmark)``:
        the banks no other process is building first, those another is building last (:func:`held_elsewhere`), so
        two notebooks that need banks build different ones at once instead of one waiting for the other."""
        specs = [(self.exp.model(m) if isinstance(m, str) else m, benchmark) for m, benchmark in pairs]
        bar = None
        if self.exp.progress:
            bar = tqdm(total=len(specs), desc=f"{len(specs)} memory bank sets", unit="set", mininterval=2.0,
                       file=sys.stderr)
        try:
            built = {}
            for spec, benchmark in least_waiting(specs, lambda item: self.busy(*item)):
                built[(spec.label, benchmark)] = self.memory(spec, benchmark)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return {(spec.label, benchmark): built[(spec.label, benchmark)] for spec, benchmark in specs}

    def busy(self, spec: ModelSpec, benchmark: str) -> bool:
        """Whether asking for this bank now would wait: missing, and another process holds its lock (building it)."""
        directory = self.memory_dir(spec, benchmark)
        return not (directory / "manifest.json").exists() and held_elsewhere(directory.parent / f".{directory.name}.lock")
