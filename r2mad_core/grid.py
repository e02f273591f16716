"""The experiment grid: the models of a profile, the paper's (model, benchmark, method) run cells, their results.

:class:`ModelSpec` is one model of a profile (label, engine, model, options, the paper model it
stands in for). :class:`Experiment` runs (or loads) the cells behind the paper's tables: one engine
per model behind the response cache, the memory banks built once per (model, benchmark) from the
train split (Appendix A), one run directory per cell keyed by a hash of its configuration.
:class:`GridResults` holds the finished cells (:class:`CellOutcome`) with tidy views for the tables:
accuracy with 95% bootstrap CIs, the paper's ``Average`` column (mean of the per-benchmark
accuracies, :func:`r2mad_core.scoring.mean_accuracy_with_ci`), the shared-misconception subset
(RQ4), stance transitions (Table 4), agent accuracy by round and per-query cost (Table 10).

Method names are the paper's row names (``CoT``, ``Self-Consistency (9)``, ``MAD``, ``MAD-M2 (O)``,
``R2-MAD w/o Confidence``, ``R2-MAD retrieval=Random``, ...); :meth:`Experiment.method_options` maps
each to a registered method of :mod:`r2mad_core.methods` and its options.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_core.artifacts import ReportContext, display_path, jsonable
from r2mad_core.files import atomic_write
from r2mad_core.retrieval import POLICIES, parse_retrieval_policy, policy_label, policy_spec_of_label
from r2mad_core.scoring import agents_correct_by_round, mean_accuracy_with_ci, replayed_share
from r2mad_core.tables import AVERAGE_LABEL, Best, Table, _is_missing, benchmark_label

logger = logging.getLogger(__name__)


def profile_samples(
    benchmarks: Sequence[str], split: str, limit: int | None, data_dir: str | Path | None = None,
    split_rule: str = "paper",
) -> dict[str, list[Any]]:
    """The first ``limit`` questions (None: all) of ``split`` for each benchmark, in the split's
    seeded order (:func:`r2mad_core.benchmarks.load`, ``split_rule`` paper or authors), so every notebook uses
    the same subset."""
    from r2mad_core.benchmarks import load

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit: expected a positive integer or None, found {limit!r}")
    return {name: load(name, split, data_dir, split_rule=split_rule)[:limit] for name in benchmarks}


def slug(text: str) -> str:
    """A file-name-safe form of a label: ``R2-MAD w/o Memory`` -> ``r2-mad-w-o-memory``."""
    return re.sub(r"[^0-9a-z.]+", "-", str(text).lower()).strip("-") or "x"


def config_hash(payload: Any, length: int = 12) -> str:
    """First ``length`` hex digits of SHA-256 of the canonical JSON of ``payload``."""
    blob = json.dumps(jsonable(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


def retrieval_policy_label(spec: str) -> str:
    """``fixed_lambda:0.25`` -> ``Fixed-lambda (0.25)``; ``state_aware`` -> ``Debate-State-Aware`` (the
    registry of :mod:`r2mad_core.retrieval`, so a registered policy gets its own row name)."""
    return policy_label(spec)


def retrieval_method_label(spec: str) -> str:
    """The method name the paper's retrieval ablation uses: ``R2-MAD retrieval=Random``."""
    return f"R2-MAD retrieval={retrieval_policy_label(spec)}"


def poisoned_method_label(fraction: float) -> str:
    return f"R2-MAD poisoned={fraction:g}"


#: Engine options that change how fast generations come, never what they are: they stay out of run
#: directory keys, so tuning threads or slots keeps every finished run.
SPEED_OPTIONS = frozenset({
    "threads", "parallel_slots", "context_per_slot", "max_concurrency", "startup_timeout_seconds",
    "request_timeout_seconds", "max_retries", "server_log_verbosity", "timeout_seconds", "connect_timeout_seconds",
    "initial_backoff_seconds", "max_backoff_seconds", "tensor_parallel_size", "gpu_memory_utilization", "chunk_size",
})


#: Suffix of a method name whose run draws its own round 0 (``round0="independent"``).
INDEPENDENT_ROUND0 = " (independent round 0)"
#: How a figure names the engine a model ran on (``ModelSpec.title``).
ENGINE_TITLES = {"simulated": "simulated agents", "local": "local engine, llama.cpp", "vllm": "vLLM",
                 "openai": "OpenAI-compatible API"}


@dataclass(frozen=True)
class ModelSpec:
    """One model of a profile: its label (as in the tables), engine, model name and engine options.

    ``stands_in_for``: the paper model whose numbers this model's are compared with.
    ``environment``: option name -> environment variable, resolved when the engine is opened
    (API models: ``model``, ``base_urls``).
    """

    label: str
    engine: str
    model: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    stands_in_for: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], models: Sequence["ModelSpec"] = ()) -> "ModelSpec":
        """A profile ``models`` or ``large_models`` entry; a ``stand_in`` entry becomes the named model
        standing in for the entry's label."""
        if "stand_in" in entry:
            by_label = {m.label: m for m in models}
            if entry["stand_in"] not in by_label:
                raise ValueError(f"model entry {entry['label']!r}: stand_in {entry['stand_in']!r} is not one of {list(by_label)}")
            base = by_label[entry["stand_in"]]
            return cls(base.label, base.engine, base.model, dict(base.options), entry["label"], dict(base.environment))
        environment = {}
        if entry.get("model_env"):
            environment["model"] = entry["model_env"]
        if entry.get("base_url_env"):
            environment["base_urls"] = entry["base_url_env"]
        options = dict(entry.get("options") or {})
        if entry.get("api_key_env"):
            options["api_key_env"] = entry["api_key_env"]
        return cls(
            label=str(entry["label"]), engine=str(entry["engine"]), model=entry.get("model"),
            options=options, stands_in_for=entry.get("stands_in_for"), environment=environment,
        )

    @property
    def paper_model(self) -> str:
        return self.stands_in_for or self.label

    @property
    def title(self) -> str:
        """What ran, for axis titles and legends: ``Simulated (simulated agents)``,
        ``SmolLM2-135M-Instruct (local engine)``. The paper model it stands in for goes in captions
        (:attr:`stand_in_note`), never here."""
        return f"{self.label} ({ENGINE_TITLES.get(self.engine, self.engine + ' engine')})"

    @property
    def stand_in_note(self) -> str:
        """``"Simulated (simulated agents) stands in for Qwen2.5-7B-Instruct"`` or ``""``."""
        return f"{self.title} stands in for {self.stands_in_for}" if self.stands_in_for else ""

    def resolved(self) -> tuple[str | None, dict[str, Any]]:
        """``(model, options)`` with the environment variables filled in (error naming a missing one)."""
        model, options = self.model, dict(self.options)
        for option, variable in self.environment.items():
            value = os.environ.get(variable)
            if not value:
                raise RuntimeError(
                    f"model {self.label!r}: environment variable {variable} (its {option}) is not set; "
                    f"export it before running (see the profile file)"
                )
            if option == "model":
                model = value
            else:
                options[option] = value
        return model, options

    def describe(self) -> dict[str, Any]:
        """What identifies the model in run configurations: engine, model, the options that can change
        its outputs (not the speed knobs of :data:`SPEED_OPTIONS`), environment variables by name."""
        options = {k: v for k, v in self.options.items() if k not in SPEED_OPTIONS}
        described = {"label": self.label, "engine": self.engine, "model": self.model,
                     "options": options, "environment": dict(self.environment)}
        if self.engine == "simulated":
            # the simulated agents' behaviour version: a changed simulator gets new run directories
            # (its transcripts are not the old ones); real engines are identified by model and options
            from r2mad_core.engines.simulated import MODEL_VERSION

            described["simulator"] = MODEL_VERSION
        return described


def large_model_plan(entries: Sequence[Mapping[str, Any]], models: Sequence[ModelSpec]) -> list[tuple[str, ModelSpec | None]]:
    """The paper's larger models (Table 9) of a profile: ``(paper model, spec)`` for each ``large_models``
    entry, ``spec = None`` for an entry that only names a ``stand_in`` (the profile has no such model:
    its rows say :data:`NOT_RUN` rather than repeat another model's runs under this name)."""
    plan: list[tuple[str, ModelSpec | None]] = []
    for entry in entries:
        if "stand_in" in entry:
            ModelSpec.from_entry(entry, models)  # still validates the name it points at
            plan.append((str(entry["label"]), None))
        else:
            plan.append((str(entry["label"]), ModelSpec.from_entry(entry, models)))
    return plan


@dataclass
class CellOutcome:
    """One finished (model, benchmark, method) cell."""

    model: ModelSpec
    benchmark: str
    method: str  # the paper's method name (row label)
    run_dir: Path
    records: list[dict[str, Any]]
    metrics: dict[str, Any]
    n_new: int = 0

    @property
    def correct(self) -> list[bool]:
        return [bool(r["correct"]) for r in self.records]


class Experiment:
    """Runs the paper's cells for the notebooks: one engine per model (opened on first need, cached
    in ``cache_dir``), memory banks per (model, benchmark) built once, one run directory per cell
    keyed by a hash of its configuration (``runs_dir/<model>/<benchmark>/<registered method>-<hash>``), so
    a rerun, or a rerun after changing one parameter, only generates what changed.

    Method names are the paper's row names: ``CoT``, ``Self-Consistency`` (k = agents x rounds
    paths, the paper's compute-matched setting), ``Self-Consistency (k)``, ``MAD``, ``MAD-M2``
    (= objective masking, the paper's default), ``MAD-M2 (O)``, ``MAD-M2 (S)``, ``R2-MAD``,
    ``R2-MAD w/o Confidence``, ``R2-MAD w/o Memory``, ``R2-MAD retrieval=<policy>`` (Table 3
    names), ``R2-MAD poisoned=<fraction>`` and ``ICL-CoT``.
    """

    def __init__(
        self,
        *,
        models: Sequence[Mapping[str, Any] | ModelSpec],
        benchmarks: Sequence[str],
        runs_dir: str | Path,
        cache_dir: str | Path,
        data_dir: str | Path | None = None,
        embedder: str = "hashing",
        test_limit: int | None = None,
        train_limit: int | None = None,
        seed: int = 0,
        num_agents: int = 3,
        num_rounds: int = 3,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 512,
        summary_max_tokens: int = 128,
        max_experience_chars: int | None = None,
        top_k: int = 3,
        gamma: float = 0.9,
        w_high: float = 0.55,
        w_low: float = 0.45,
        bootstrap_resamples: int = 10_000,
        progress: bool = False,
        round0: str = "shared",
        experience_reference: str = "answer",
        task_prompt: str = "paper",
        split_rule: str = "paper",
        objective_keep: str = "lowest_perplexity",
        memory_model: str | None = None,
    ) -> None:
        specs: list[ModelSpec] = []
        for entry in models:
            specs.append(entry if isinstance(entry, ModelSpec) else ModelSpec.from_entry(entry, specs))
        self.models = specs
        self.benchmarks = list(benchmarks)
        self.runs_dir = Path(runs_dir)
        self.cache_dir = Path(cache_dir)
        self.data_dir = data_dir
        self.embedder = embedder
        self.test_limit = test_limit
        self.train_limit = train_limit
        self.seed = seed
        self.num_agents = num_agents
        self.num_rounds = num_rounds
        self.sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
        self.summary_max_tokens = summary_max_tokens
        self.max_experience_chars = max_experience_chars
        self.top_k = top_k
        self.gamma = gamma
        self.w_high = w_high
        self.w_low = w_low
        self.bootstrap_resamples = bootstrap_resamples
        self.progress = progress
        # Protocol choices (README "Where the paper and the authors' code differ"); a method gets an option only
        # when the profile departs from the method's default, so a default protocol keeps its run keys.
        self.protocol = {"round0": round0, "experience_reference": experience_reference, "task_prompt": task_prompt,
                         "objective_keep": objective_keep}
        self.split_rule = split_rule
        self.memory_model = memory_model
        if memory_model is not None and memory_model not in [m.label for m in self.models]:
            raise ValueError(f"memory_model {memory_model!r}: expected null or one of the profile's model labels "
                             f"{[m.label for m in self.models]}")
        self._engines: dict[str, Any] = {}
        self._engine_kinds: dict[str, str] = {}
        self._samples: dict[tuple[str, str], list[Any]] = {}

    #: Notebook parameters :meth:`from_parameters` reads (the names of the profile fields).
    PARAMETERS = (
        "models", "benchmarks", "runs_dir", "cache_dir", "data_dir", "embedder", "test_limit", "train_limit",
        "seed", "num_agents", "num_rounds", "temperature", "top_p", "max_tokens", "summary_max_tokens",
        "max_experience_chars", "top_k",
        "gamma", "w_high", "w_low", "bootstrap_resamples",
        "round0", "experience_reference", "task_prompt", "split_rule", "objective_keep", "memory_model",
    )

    @classmethod
    def from_parameters(cls, namespace: Mapping[str, Any], **overrides: Any) -> "Experiment":
        """Build from a notebook's parameters (``Experiment.from_parameters(globals())``): the
        profile fields named in :data:`PARAMETERS` that the namespace defines, then ``overrides``."""
        options = {k: namespace[k] for k in cls.PARAMETERS if k in namespace}
        options.update(overrides)
        missing = [k for k in ("models", "benchmarks", "runs_dir", "cache_dir") if k not in options]
        if missing:
            raise ValueError(f"Experiment.from_parameters: the notebook defines no {missing}")
        return cls(**options)

    def report_context(self, profile: str, figures_dir: str | Path, notebook: str) -> ReportContext:
        """A :class:`ReportContext` whose manifest fields describe this experiment."""
        return ReportContext(
            profile=profile, out_dir=Path(figures_dir), notebook=notebook,
            models=[m.label + (f" (stands in for {m.stands_in_for})" if m.stands_in_for else "") for m in self.models],
            benchmarks=self.benchmarks, seeds=[self.seed], sample_counts=self.sample_counts(),
        )

    def describe(self) -> pd.DataFrame:
        """The settings of this experiment, one row each (for the notebooks' first cell)."""
        rows = {
            "models": ", ".join(f"{m.label} [{m.engine}]" for m in self.models),
            "stands in for": ", ".join(m.paper_model for m in self.models),
            "benchmarks": ", ".join(self.benchmarks),
            "test questions per benchmark": self.test_limit or "all",
            "train questions per benchmark (memory)": self.train_limit or "all",
            "agents x rounds": f"{self.num_agents} x {self.num_rounds}",
            "temperature / top_p / max_tokens": f"{self.sampling['temperature']} / {self.sampling['top_p']} / "
                                                f"{self.sampling['max_tokens']}",
            "K / gamma / w_l / w_h": f"{self.top_k} / {self.gamma} / {self.w_low} / {self.w_high}",
            "experience responses shown": (f"first {self.max_experience_chars} characters"
                                           if self.max_experience_chars else "in full"),
            "embedder": self.embedder,
            "seed": self.seed,
            "runs": display_path(self.runs_dir),
            "response cache": display_path(self.cache_dir),
        }
        return pd.DataFrame({"setting": list(rows), "value": [str(v) for v in rows.values()]}).set_index("setting")

    # -- context manager -----------------------------------------------------------------------
    def __enter__(self) -> "Experiment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close every engine this experiment opened."""
        for engine in self._engines.values():
            with contextlib.suppress(Exception):
                engine.close()
        self._engines.clear()

    # -- lookups ------------------------------------------------------------------------------
    def model(self, label: str) -> ModelSpec:
        for spec in self.models:
            if spec.label == label:
                return spec
        raise KeyError(f"no model {label!r} in this experiment (models: {[m.label for m in self.models]})")

    def samples(self, benchmark: str, split: str = "test") -> list[Any]:
        """The profile's questions of ``benchmark``/``split`` (first ``test_limit``/``train_limit``)."""
        key = (benchmark, split)
        if key not in self._samples:
            limit = self.test_limit if split == "test" else self.train_limit
            self._samples[key] = profile_samples([benchmark], split, limit, self.data_dir, self.split_rule)[benchmark]
        return self._samples[key]

    def sample_counts(self, benchmarks: Sequence[str] | None = None) -> dict[str, int]:
        return {b: len(self.samples(b)) for b in (benchmarks or self.benchmarks)}

    def engine(self, spec: ModelSpec) -> Any:
        """The engine of a model, opened once (behind the response cache in ``cache_dir``). Opening a
        ``vllm`` engine closes the previous one: one GPU model in memory at a time."""
        from r2mad_core.engines import make_engine

        key = config_hash({**spec.describe(), "all_options": dict(spec.options)})
        if key not in self._engines:
            if spec.engine == "vllm":
                # one GPU model at a time: the models of a profile run one after another
                for other in [k for k, kind in self._engine_kinds.items() if kind == "vllm" and k in self._engines]:
                    logger.info("closing the previous vLLM engine before opening %s", spec.label)
                    with contextlib.suppress(Exception):
                        self._engines.pop(other).close()
            model, options = spec.resolved()
            if spec.engine == "simulated":
                from r2mad_core.benchmarks import load

                if "samples" not in options:  # every question a debate may ask about, train and test
                    options["samples"] = [s for b in self.benchmarks for s in load(b, "all", self.data_dir)]
                options.setdefault("seed", self.seed)
            logger.info("opening engine %s for %s", spec.engine, spec.label)
            self._engines[key] = make_engine(spec.engine, model=model, cache_dir=self.cache_dir, **options)
            self._engine_kinds[key] = spec.engine
        return self._engines[key]

    # -- methods ------------------------------------------------------------------------------
    def _debate_options(self) -> dict[str, Any]:
        return {"n_agents": self.num_agents, "n_rounds": self.num_rounds, **self.sampling}

    def method_options(self, method: str, memory: Path | None = None) -> tuple[str, dict[str, Any]]:
        """``(registered method name, options)`` of a paper method name, with the profile's protocol choices
        (those that depart from the method's defaults and that the method declares)."""
        from r2mad_core.methods import method_options as declared

        name, options = self._method_options(method, memory)
        accepted = declared(name)
        for key, value in self.protocol.items():
            if key in accepted and key not in options and accepted[key] != value:
                options[key] = value
        return name, options

    def _method_options(self, method: str, memory: Path | None = None) -> tuple[str, dict[str, Any]]:
        """``(registered method name, options)`` of a paper method name. A trailing
        :data:`INDEPENDENT_ROUND0` (``"MAD (independent round 0)"``) sets ``round0="independent"``:
        the run draws its own round 0 instead of sharing MAD's (the paper's separate runs)."""
        if method.endswith(INDEPENDENT_ROUND0):
            name, options = self._method_options(method[: -len(INDEPENDENT_ROUND0)], memory)
            if name == "icl_cot":
                raise ValueError(f"{method!r}: ICL-CoT has no round 0 to draw independently")
            return name, {**options, "round0": "independent"}
        sc = re.fullmatch(r"Self-Consistency(?: \((\d+)\))?", method)
        if method == "CoT":
            return "cot", dict(self.sampling)
        if sc:
            paths = int(sc.group(1)) if sc.group(1) else self.num_agents * self.num_rounds
            return "self_consistency", {"k_paths": paths, **self.sampling}
        if method == "MAD":
            return "mad", self._debate_options()
        if method in ("MAD-M2", "MAD-M2 (O)", "MAD-M2 (S)"):
            masking = "subjective" if method.endswith("(S)") else "objective"
            return "mad_m2", {"masking": masking, **self._debate_options()}
        # shortened experiences only when the profile asks (small-context models); the paper shows them in full
        shown = {"max_experience_chars": self.max_experience_chars} if self.max_experience_chars else {}
        if method == "ICL-CoT":
            return "icl_cot", {"memory": str(memory), "top_k": self.top_k, **shown, **self.sampling}
        if method.startswith("R2-MAD"):
            options: dict[str, Any] = {
                "memory": str(memory), "top_k": self.top_k, "gamma": self.gamma, "w_high": self.w_high,
                "w_low": self.w_low, "summary_max_tokens": self.summary_max_tokens, **shown,
                **self._debate_options(),
            }
            rest = method[len("R2-MAD"):].strip()
            if rest == "w/o Confidence":
                options["use_confidence"] = False
            elif rest == "w/o Memory":
                options["use_memory"] = False
            elif rest.startswith("retrieval="):
                label = rest[len("retrieval="):]
                name, value = parse_retrieval_policy(policy_spec_of_label(label))
                if name != "state_aware":
                    options["retrieval_policy"] = name
                if value is not None:
                    options[POLICIES[name].parameter or "fixed_lambda"] = value
            elif rest.startswith("poisoned="):
                fraction = float(rest[len("poisoned="):])
                if fraction:
                    options["poison_fraction"] = fraction
                    options["poison_seed"] = self.seed
            elif rest:
                raise ValueError(f"unknown R2-MAD variant {method!r}")
            return "r2mad", options
        raise ValueError(
            f"unknown method {method!r}: expected CoT, Self-Consistency[ (k)], MAD, MAD-M2[ (O)| (S)], ICL-CoT, "
            "R2-MAD[ w/o Confidence| w/o Memory| retrieval=<policy>| poisoned=<fraction>]"
        )

    @staticmethod
    def needs_memory(method: str) -> bool:
        return method.startswith("R2-MAD") or method == "ICL-CoT"

    # -- memory -------------------------------------------------------------------------------
    def memory_spec(self, spec: ModelSpec) -> ModelSpec:
        """The model whose debates fill the memory banks used by ``spec``: itself (``memory_model: null``, one bank
        per evaluated model; ours, the paper does not say) or the profile's ``memory_model`` (the authors built one
        bank with Qwen3-4B-Instruct-2507 for every evaluated model)."""
        return spec if self.memory_model is None else self.model(self.memory_model)

    def memory_config(self, spec: ModelSpec, benchmark: str) -> dict[str, Any]:
        spec = self.memory_spec(spec)
        return {
            "benchmark": benchmark, "split": "train", "limit": self.train_limit, "seed": self.seed,
            "n_agents": self.num_agents, "n_rounds": self.num_rounds, "summary_max_tokens": self.summary_max_tokens,
            "embedder": self.embedder, "model": spec.describe(), **self.sampling,
        }

    def memory_dir(self, spec: ModelSpec, benchmark: str) -> Path:
        config = self.memory_config(spec, benchmark)
        builder = self.memory_spec(spec)
        return self.runs_dir / slug(builder.label) / benchmark / f"memory-{config_hash(config)}"

    def memory(self, spec: ModelSpec | str, benchmark: str) -> Path:
        """The memory bank directory of (model, benchmark), built from the train split if missing
        (Appendix A: a forced 3-round MAD with summaries on each training question)."""
        from r2mad_core.memory_construction import build_memory

        spec = self.model(spec) if isinstance(spec, str) else spec
        directory = self.memory_dir(spec, benchmark)
        if (directory / "manifest.json").exists():
            return directory
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(directory / "build_config.json", json.dumps(jsonable(self.memory_config(spec, benchmark)), indent=2))
        build_memory(
            benchmark, self.engine(self.memory_spec(spec)), self.embedder, directory, limit=self.train_limit,
            split="train",
            seed=self.seed, n_agents=self.num_agents, n_rounds=self.num_rounds,
            summary_max_tokens=self.summary_max_tokens, data_dir=self.data_dir,
            samples=self.samples(benchmark, "train"), progress=False, overwrite=True, **self.sampling,
        )
        return directory

    # -- cells --------------------------------------------------------------------------------
    def run_dir(self, spec: ModelSpec, benchmark: str, method: str, split: str = "test") -> tuple[Path, str, dict]:
        memory = self.memory_dir(spec, benchmark) if self.needs_memory(method) else None
        name, options = self.method_options(method, memory)
        config = {"method": name, "options": options, "seed": self.seed, "split": split,
                  "limit": self.test_limit if split == "test" else self.train_limit, "model": spec.describe()}
        # keyed by the registered method and its options, not the paper's row name: "R2-MAD",
        # "R2-MAD retrieval=Debate-State-Aware" and "R2-MAD poisoned=0" are one cell, one directory
        return self.runs_dir / slug(spec.label) / benchmark / f"{name}-{config_hash(config)}", name, options

    def run(self, model: ModelSpec | str, benchmark: str, method: str) -> CellOutcome:
        """Run (or load) one cell on the test split."""
        from r2mad_core.experiments import run_cell
        from r2mad_core.scoring import compute_metrics

        spec = self.model(model) if isinstance(model, str) else model
        samples = self.samples(benchmark, "test")
        run_dir, name, options = self.run_dir(spec, benchmark, method)
        done = _finished_records(run_dir, len(samples))
        if done is not None:
            metrics = compute_metrics(done, n_bootstrap=self.bootstrap_resamples)
            return CellOutcome(spec, benchmark, method, run_dir, done, metrics, n_new=0)
        if self.needs_memory(method):
            self.memory(spec, benchmark)
        result = run_cell(
            run_dir, benchmark=benchmark, split="test", engine=self.engine(spec), method=name,
            method_options=options, seed=self.seed, limit=self.test_limit, samples=samples,
            data_dir=self.data_dir, progress=False,
        )
        metrics = compute_metrics(result.records, n_bootstrap=self.bootstrap_resamples)
        return CellOutcome(spec, benchmark, method, run_dir, result.records, metrics, n_new=result.n_new)

    def grid(
        self,
        methods: Sequence[str],
        *,
        models: Sequence[ModelSpec | str] | None = None,
        benchmarks: Sequence[str] | None = None,
    ) -> "GridResults":
        """Every (model, benchmark, method) cell, model by model, benchmark by benchmark."""
        specs = [self.model(m) if isinstance(m, str) else m for m in (models or self.models)]
        cells = [(spec, benchmark, method) for spec in specs for benchmark in (benchmarks or self.benchmarks)
                 for method in methods]
        outcomes = []
        bar = None
        if self.progress:  # one bar for the whole step (a cell loaded from disk just ticks it)
            from tqdm.std import tqdm

            bar = tqdm(total=len(cells), desc=f"{len(cells)} cells", unit="cell", mininterval=2.0, file=sys.stderr)
        try:
            for spec, benchmark, method in cells:
                if bar is not None:
                    bar.set_postfix_str(f"{spec.label} / {benchmark} / {method}", refresh=False)
                outcome = self.run(spec, benchmark, method)
                logger.info("%s / %s / %s: accuracy %.3f (n=%d, %d new)", spec.label, benchmark, method,
                            outcome.metrics["accuracy"], len(outcome.records), outcome.n_new)
                outcomes.append(outcome)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.set_postfix_str("", refresh=False)
                bar.close()
        return GridResults(outcomes, bootstrap_resamples=self.bootstrap_resamples, seed=self.seed)


def _finished_records(run_dir: Path, expected: int) -> list[dict[str, Any]] | None:
    """The records of a complete run directory (all ``expected`` samples), else None."""
    from r2mad_core.experiments import CONFIG_FILE, load_run

    if not (run_dir / CONFIG_FILE).exists():
        return None
    _, records = load_run(run_dir)
    return records if len(records) == expected else None


@dataclass
class GridResults:
    """The outcomes of :meth:`Experiment.grid` with tidy views for tables and tests."""

    outcomes: list[CellOutcome]
    bootstrap_resamples: int = 10_000
    seed: int = 0

    def __add__(self, other: "GridResults") -> "GridResults":
        return GridResults(self.outcomes + other.outcomes, self.bootstrap_resamples, self.seed)

    def get(self, model: str, benchmark: str, method: str) -> CellOutcome:
        for outcome in self.outcomes:
            if (outcome.model.label, outcome.benchmark, outcome.method) == (model, benchmark, method):
                return outcome
        raise KeyError(f"no cell ({model}, {benchmark}, {method}) in these results")

    def accuracy(self) -> pd.DataFrame:
        """One row per cell: model, paper_model, benchmark (paper name), method, accuracy, CI, n, tokens."""
        rows = []
        for o in self.outcomes:
            m = o.metrics
            tokens = m.get("tokens_per_query", {})
            rows.append({
                "model": o.model.label, "paper_model": o.model.paper_model, "benchmark": benchmark_label(o.benchmark),
                "method": o.method, "accuracy": m["accuracy"], "ci_low": m["ci_low"], "ci_high": m["ci_high"],
                "n": m["n"], "debate_tokens": tokens.get("debate", {}).get("total_tokens", 0.0),
                "summary_tokens": tokens.get("summary", {}).get("total_tokens", 0.0),
                "judge_tokens": tokens.get("judge", {}).get("total_tokens", 0.0),
                "seconds_per_query": m.get("seconds_per_query", math.nan), "run_dir": str(o.run_dir),
            })
        return pd.DataFrame(rows)

    def per_question(self) -> pd.DataFrame:
        """One row per (cell, question): model, benchmark (paper name), method, sample_id, correct."""
        rows = [
            {"model": o.model.label, "paper_model": o.model.paper_model, "benchmark": benchmark_label(o.benchmark),
             "method": o.method, "sample_id": r["sample_id"], "correct": bool(r["correct"])}
            for o in self.outcomes for r in o.records
        ]
        return pd.DataFrame(rows, columns=["model", "paper_model", "benchmark", "method", "sample_id", "correct"])

    def table(
        self,
        methods: Sequence[str] | None = None,
        *,
        with_average: bool = True,
        caption: str = "",
        group_by_model: bool | None = None,
        model_column: str = "model",
    ) -> Table:
        """The paper's accuracy table: rows (model, method) or method, columns the benchmarks (+ Average),
        cells with 95% bootstrap CIs, the best of each model's block in bold.

        ``model_column``: ``"model"`` (the reproduced model's label) or ``"paper_model"`` (the paper
        model it stands in for, e.g. for the large-models table run with a stand-in).
        """
        frame = self.accuracy()
        questions = self.per_question()
        if methods is not None:
            frame = frame[frame["method"].isin(methods)]
        method_order = list(methods) if methods is not None else list(pd.unique(frame["method"]))
        models = list(pd.unique(frame[model_column]))
        benchmarks = list(pd.unique(frame["benchmark"]))
        grouped = len(models) > 1 if group_by_model is None else group_by_model
        rows = [(m, k) for m in models for k in method_order
                if ((frame[model_column] == m) & (frame.method == k)).any()]
        columns = benchmarks + ([AVERAGE_LABEL] if with_average and len(benchmarks) > 1 else [])
        index = pd.MultiIndex.from_tuples(rows, names=["model", "method"])
        values = pd.DataFrame(np.nan, index=index, columns=pd.Index(columns, name="benchmark"))
        low, high = values.copy(), values.copy()
        for model, method in rows:
            part = frame[(frame[model_column] == model) & (frame.method == method)].set_index("benchmark")
            for benchmark in benchmarks:
                if benchmark in part.index:
                    values.loc[(model, method), benchmark] = part.at[benchmark, "accuracy"]
                    low.loc[(model, method), benchmark] = part.at[benchmark, "ci_low"]
                    high.loc[(model, method), benchmark] = part.at[benchmark, "ci_high"]
            if AVERAGE_LABEL in columns and set(benchmarks) <= set(part.index):
                mine = questions[(questions[model_column] == model) & (questions.method == method)]
                groups = [mine[mine.benchmark == b]["correct"].to_numpy() for b in benchmarks]
                mean, lo, hi = mean_accuracy_with_ci(groups, n_bootstrap=self.bootstrap_resamples, seed=self.seed)
                values.loc[(model, method), AVERAGE_LABEL] = mean
                low.loc[(model, method), AVERAGE_LABEL] = lo
                high.loc[(model, method), AVERAGE_LABEL] = hi
        if not grouped:
            for frame_ in (values, low, high):
                frame_.index = frame_.index.droplevel("model")
        return Table(values=values, ci_low=low, ci_high=high, caption=caption, best="max")

    def reproduced(self, table_label: str, methods: Sequence[str] | None = None, *,
                   with_average: bool = True) -> pd.DataFrame:
        """Tidy rows for :func:`compare_with_paper`: table, model, paper_model, method, benchmark,
        metric, value, ci_low, ci_high, n (``Average`` rows: the mean of the benchmarks)."""
        rows = []
        frame = self.accuracy()
        for paper_model in pd.unique(frame["paper_model"]):
            subset = GridResults([o for o in self.outcomes if o.model.paper_model == paper_model],
                                 self.bootstrap_resamples, self.seed)
            table = subset.table(methods, with_average=with_average, group_by_model=True, model_column="paper_model")
            sizes = subset.accuracy().groupby(["method", "benchmark"])["n"].first()
            labels = {o.model.paper_model: o.model.label for o in subset.outcomes}
            for _, method in table.values.index:
                for benchmark in table.values.columns:
                    value = table.values.at[(paper_model, method), benchmark]
                    if _is_missing(value):
                        continue
                    n = int(sizes.loc[method].sum()) if benchmark == AVERAGE_LABEL else int(sizes.loc[(method, benchmark)])
                    rows.append({
                        "table": table_label, "model": labels[paper_model], "paper_model": paper_model,
                        "method": method, "benchmark": benchmark, "metric": "accuracy", "value": float(value),
                        "ci_low": float(table.ci_low.at[(paper_model, method), benchmark]),
                        "ci_high": float(table.ci_high.at[(paper_model, method), benchmark]), "n": n,
                    })
        return pd.DataFrame(rows)

    def cross_table(self, methods: Sequence[str], *, row_names: Mapping[str, str] | None = None,
                    caption: str = "", best: Best | None = "max") -> Table:
        """Rows = methods (renamed by ``row_names``), columns = every (model, benchmark) pair
        (``"<model> / <benchmark>"``) and ``Average`` over all of them: the layout of the
        retrieval ablation (Table 3)."""
        frame = self.accuracy()
        frame = frame[frame["method"].isin(methods)]
        questions = self.per_question()
        pairs = list(dict.fromkeys(zip(frame["model"], frame["benchmark"])))
        columns = [f"{m} / {b}" for m, b in pairs] + [AVERAGE_LABEL]
        index = pd.Index([(row_names or {}).get(m, m) for m in methods], name="method")
        values = pd.DataFrame(np.nan, index=index, columns=pd.Index(columns, name="cell"))
        low, high = values.copy(), values.copy()
        for method, row in zip(methods, index):
            groups = []
            for (model, benchmark), column in zip(pairs, columns):
                hit = frame[(frame.model == model) & (frame.benchmark == benchmark) & (frame.method == method)]
                if hit.empty:
                    continue
                values.at[row, column] = hit["accuracy"].iloc[0]
                low.at[row, column] = hit["ci_low"].iloc[0]
                high.at[row, column] = hit["ci_high"].iloc[0]
                mine = questions[(questions.model == model) & (questions.benchmark == benchmark)
                                 & (questions.method == method)]
                groups.append(mine["correct"].to_numpy())
            if len(groups) == len(pairs):
                mean, lo, hi = mean_accuracy_with_ci(groups, n_bootstrap=self.bootstrap_resamples, seed=self.seed)
                values.at[row, AVERAGE_LABEL], low.at[row, AVERAGE_LABEL], high.at[row, AVERAGE_LABEL] = mean, lo, hi
        return Table(values=values, ci_low=low, ci_high=high, caption=caption, best=best)

    def method_columns_table(self, methods: Sequence[str], *, caption: str = "") -> Table:
        """Rows = (model, benchmark), columns = methods, plus an ``Average`` row over all rows: the
        layout of the ICL-CoT comparison (Table 8)."""
        frame = self.accuracy()
        frame = frame[frame["method"].isin(methods)]
        questions = self.per_question()
        pairs = list(dict.fromkeys(zip(frame["model"], frame["benchmark"])))
        index = pd.MultiIndex.from_tuples([*pairs, (AVERAGE_LABEL, "")], names=["model", "benchmark"])
        values = pd.DataFrame(np.nan, index=index, columns=pd.Index(list(methods), name="method"))
        low, high = values.copy(), values.copy()
        for method in methods:
            groups = []
            for pair in pairs:
                hit = frame[(frame.model == pair[0]) & (frame.benchmark == pair[1]) & (frame.method == method)]
                if hit.empty:
                    continue
                values.at[pair, method] = hit["accuracy"].iloc[0]
                low.at[pair, method] = hit["ci_low"].iloc[0]
                high.at[pair, method] = hit["ci_high"].iloc[0]
                mine = questions[(questions.model == pair[0]) & (questions.benchmark == pair[1])
                                 & (questions.method == method)]
                groups.append(mine["correct"].to_numpy())
            if len(groups) == len(pairs):
                mean, lo, hi = mean_accuracy_with_ci(groups, n_bootstrap=self.bootstrap_resamples, seed=self.seed)
                key = (AVERAGE_LABEL, "")
                values.at[key, method], low.at[key, method], high.at[key, method] = mean, lo, hi
        return Table(values=values, ci_low=low, ci_high=high, caption=caption, best=None)

    # -- the shared-misconception subset (RQ4) and stance transitions (Table 4) ------------------
    def shared_misconception_subsets(self, reference: str = "MAD") -> dict[tuple[str, str], set[str]]:
        """(model label, benchmark id) -> the sample ids where a strict majority of the ``reference``
        method's agents is wrong at round 0 (:func:`r2mad_core.scoring.shared_misconception_subset`)."""
        from r2mad_core.scoring import shared_misconception_subset

        return {(o.model.label, o.benchmark): shared_misconception_subset(o.records)
                for o in self.outcomes if o.method == reference}

    def subset_accuracy(self, methods: Sequence[str], reference: str = "MAD") -> pd.DataFrame:
        """Accuracy of ``methods`` on the shared-misconception subset of each (model, benchmark):
        model, paper_model, benchmark, method, accuracy, ci_low, ci_high, n (subset size)."""
        from r2mad_core.scoring import accuracy_with_ci

        subsets = self.shared_misconception_subsets(reference)
        rows = []
        for o in self.outcomes:
            if o.method not in methods or (o.model.label, o.benchmark) not in subsets:
                continue
            subset = subsets[(o.model.label, o.benchmark)]
            correct = [bool(r["correct"]) for r in o.records if r["sample_id"] in subset]
            acc = accuracy_with_ci(correct, n_bootstrap=self.bootstrap_resamples, seed=self.seed)
            rows.append({"model": o.model.label, "paper_model": o.model.paper_model,
                         "benchmark": benchmark_label(o.benchmark), "method": o.method, "accuracy": acc.accuracy,
                         "ci_low": acc.low, "ci_high": acc.high, "n": acc.n})
        return pd.DataFrame(rows, columns=["model", "paper_model", "benchmark", "method", "accuracy",
                                           "ci_low", "ci_high", "n"])

    def subset_per_question(self, methods: Sequence[str], reference: str = "MAD") -> pd.DataFrame:
        """:meth:`per_question` restricted to the shared-misconception subset, with
        ``metric = "accuracy (shared-misconception subset)"`` (for :func:`check_orderings`)."""
        subsets = self.shared_misconception_subsets(reference)
        frame = self.per_question()
        frame = frame[frame["method"].isin(methods)].copy()
        ids = {(m, benchmark_label(b)): s for (m, b), s in subsets.items()}
        keep = [row.sample_id in ids.get((row.model, row.benchmark), set()) for row in frame.itertuples()]
        frame = frame[keep].copy()
        frame["metric"] = SUBSET_METRIC
        return frame

    def transition_rates(self, methods: Sequence[str], reference: str = "MAD") -> pd.DataFrame:
        """C->W and W->C stance-transition rates (Table 4) of ``methods`` on the shared-misconception
        subset: model, paper_model, benchmark, method, c_to_w, w_to_c and their counts."""
        from r2mad_core.scoring import stance_transitions

        subsets = self.shared_misconception_subsets(reference)
        rows = []
        for o in self.outcomes:
            if o.method not in methods or (o.model.label, o.benchmark) not in subsets:
                continue
            rates = stance_transitions(o.records, subsets[(o.model.label, o.benchmark)])
            rows.append({"model": o.model.label, "paper_model": o.model.paper_model,
                         "benchmark": benchmark_label(o.benchmark), "method": o.method, **rates.to_dict()})
        return pd.DataFrame(rows)

    def agent_accuracy_by_round(self, methods: Sequence[str], subset_reference: str | None = "MAD") -> pd.DataFrame:
        """Share of correct agent answers at each round t = 0 .. T-1 (on the shared-misconception
        subset when ``subset_reference`` is given): model, benchmark, method, round, agent_accuracy,
        answers. A debate that stopped early (unanimity) keeps its last answers for the rounds it
        did not run, so every round averages the same debates."""
        subsets = self.shared_misconception_subsets(subset_reference) if subset_reference else {}
        rows = []
        for o in self.outcomes:
            if o.method not in methods:
                continue
            keep = subsets.get((o.model.label, o.benchmark)) if subset_reference else None
            records = [r for r in o.records if keep is None or r["sample_id"] in keep]
            horizon = max((len(r["rounds"]) for r in o.records), default=0)
            for t, (right, count) in enumerate(agents_correct_by_round(records, horizon)):
                rows.append({"model": o.model.label, "paper_model": o.model.paper_model,
                             "benchmark": benchmark_label(o.benchmark), "method": o.method, "round": t,
                             "agent_accuracy": right / count if count else math.nan, "answers": count})
        return pd.DataFrame(rows)

    def cost(self, methods: Sequence[str]) -> pd.DataFrame:
        """Per-query cost of each cell (Table 10): prompt/completion tokens per tag, requests, and the
        wall seconds per query that the run which wrote the transcripts measured.

        ``replayed_share`` is the share of the cell's generations (debate turns and extra calls) that
        came from the response cache when the transcripts were written: those cost no time then, so
        the measured time leaves them out. ``time_measured`` is False for simulated agents (their
        wall time is the simulator's bookkeeping) and for a cell whose every generation was replayed;
        :func:`r2mad_core.tables.time_cell` turns both into the text a table shows.
        """
        rows = []
        for o in self.outcomes:
            if o.method not in methods:
                continue
            tokens = o.metrics.get("tokens_per_query", {})
            replayed = replayed_share(o.records)
            row = {"model": o.model.label, "paper_model": o.model.paper_model, "engine": o.model.engine,
                   "benchmark": benchmark_label(o.benchmark), "method": o.method, "n": o.metrics["n"],
                   "seconds_per_query": o.metrics.get("seconds_per_query", math.nan),
                   "replayed_share": replayed,
                   "time_measured": o.model.engine != "simulated" and replayed < 1.0}
            for tag in ("debate", "summary", "judge"):
                part = tokens.get(tag, {})
                row[f"{tag}_requests"] = part.get("requests", 0.0)
                row[f"{tag}_prompt_tokens"] = part.get("prompt_tokens", 0.0)
                row[f"{tag}_completion_tokens"] = part.get("completion_tokens", 0.0)
                row[f"{tag}_tokens"] = part.get("total_tokens", 0.0)
            rows.append(row)
        return pd.DataFrame(rows)


SUBSET_METRIC = "accuracy (shared-misconception subset)"
C_TO_W_METRIC = "C->W rate (shared-misconception subset)"
W_TO_C_METRIC = "W->C rate (shared-misconception subset)"

#: The methods of each paper table (the paper's row names).
MAIN_METHODS = ("CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD")
ABLATION_METHODS = ("R2-MAD", "R2-MAD w/o Confidence", "R2-MAD w/o Memory")
LARGE_MODEL_METHODS = ("CoT", "MAD", "R2-MAD")
MAD_M2_METHODS = ("MAD-M2 (S)", "MAD-M2 (O)")
ICL_METHODS = ("CoT", "ICL-CoT", "R2-MAD")
SUBSET_METHODS = ("MAD", "MAD-M2", "R2-MAD")
TRANSITION_METHODS = ("R2-MAD", "R2-MAD w/o Confidence")
COST_METHODS = ("Self-Consistency", "MAD", "R2-MAD")


def sc_methods(paths: Sequence[int]) -> list[str]:
    """``[3, 6, 9]`` -> ``["Self-Consistency (3)", ...]`` (Table 5)."""
    return [f"Self-Consistency ({k})" for k in paths]

