"""The experiment grid: the paper's (model, benchmark, method) run cells of a profile, run or loaded.

:class:`ExperimentGrid` runs (or loads) the cells behind the paper's tables: one engine per model
(:class:`~r2mad_core.experiments.model_specs.ModelSpec`) behind the response cache, the memory banks built once per
(model, benchmark) from the train split (Appendix A), one run directory per cell keyed by a hash of its
configuration. Its results are a :class:`~r2mad_core.report.results.GridResults`.

Method names are the paper's row names (``CoT``, ``Self-Consistency (9)``, ``MAD``, ``MAD-M2 (O)``,
``R2-MAD w/o Confidence``, ``R2-MAD retrieval=Random``, ...) or a registered method's label;
:mod:`r2mad_core.experiments.method_labels` maps each to a registered method of :mod:`r2mad_core.experiments.methods` and its options.
The names the notebooks use from the modules this one builds on (the table rows, label builders, ModelSpec,
GridResults) are importable from here too.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import re
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from tqdm.std import tqdm

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_core.debate.overflow import check_overflow_policy
from r2mad_core.experiments.metrics import compute_metrics
from r2mad_core.debate.settings import SAMPLING, DebateSettings
from r2mad_core.memory.settings import DESCRIBED as MEMORY_DESCRIBED, SPECS as MEMORY_SPECS
from r2mad_core import engines  # engines.make_engine looked up at call time (tests replace it)
from r2mad_core.experiments import method_labels
from r2mad_core.experiments.build_memory import build_memory
from r2mad_core.experiments.cell import (CONFIG_FILE, LOCK_FILE, METRICS_FILE, TRANSCRIPTS_FILE, RunDirectoryBusy,
                                         load_run, preflight, run_cell)
from r2mad_core.experiments.methods import get_method
from r2mad_core.experiments.methods import method_options as declared_options
from r2mad_core.experiments import protocol as protocol_presets
from r2mad_core.experiments.run_settings import RunSettings
from r2mad_core.report.artifacts import ReportContext, display_path, jsonable
from r2mad_core.files import atomic_write, file_stamps, locked
from r2mad_core.records import TranscriptRecord
from r2mad_core.report.tables import benchmark_label
from r2mad_core.report.results import (  # noqa: F401  (re-exported for the notebooks)
    C_TO_W_METRIC,
    SUBSET_METRIC,
    W_TO_C_METRIC,
    CellOutcome,
    GridResults,
)
from r2mad_core.experiments.method_labels import (  # noqa: F401  (re-exported for the notebooks)
    ABLATION_METHODS,
    COST_METHODS,
    ICL_METHODS,
    INDEPENDENT_ROUND0,
    SHARED_ROUND0,
    LARGE_MODEL_METHODS,
    MAD_M2_METHODS,
    MAIN_METHODS,
    SUBSET_METHODS,
    TRANSITION_METHODS,
    Row,
    poisoned_method_label,
    retrieval_method_label,
    retrieval_policy_label,
    sc_methods,
    with_k,
)
from r2mad_core.experiments.model_specs import ENGINE_TITLES, SPEED_OPTIONS, ModelSpec, large_model_plan  # noqa: F401

logger = logging.getLogger(__name__)

#: Engines that stream completions as they finish and take concurrent calls: the grid runs their cells question by
#: question (``schedule="questions"``), keeping a continuous batch full (benchmarks/README.md: 1.66x the rounds
#: schedule's throughput at the paper's settings).
STREAMING_ENGINES = frozenset({"vllm", "openai"})
#: Questions in flight per cell on a streaming engine: 64 x 3 agents = 192 requests, within vLLM's default batch
#: of 256 sequences (``max_num_seqs``) on a GPU; the window the benchmark measured (benchmarks/README.md).
STREAMING_WINDOW = 64


#: The profile fields behind each row of :meth:`ExperimentGrid.describe` (a variant marks the rows it changes).
SETTING_FIELDS = {
    "models": ("models",), "benchmarks": ("benchmarks",), "test questions per benchmark": ("test_limit",),
    "train questions per benchmark (memory)": ("train_limit",), "agents x rounds": ("n_agents", "n_rounds"),
    "temperature / top_p / max_tokens": ("temperature", "top_p", "max_tokens"),
    **{row: tuple(names) for row, names in MEMORY_DESCRIBED.items()},
    "experience responses shown": ("max_experience_chars",), "embedder": ("embedder",), "seed": ("seed",),
}


def profile_samples(
    benchmarks: Sequence[str], split: str, limit: int | None, data_dir: str | Path | None = None,
    split_rule: str = "paper",
) -> dict[str, list[Any]]:
    """The first ``limit`` questions (None: all) of ``split`` for each benchmark, in the split's
    seeded order (:func:`r2mad_core.data.benchmarks.load`, ``split_rule`` paper or authors), so every notebook uses
    the same subset."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit: expected a positive integer or None, found {limit!r}")
    return {name: load_benchmark(name, split, data_dir, split_rule=split_rule)[:limit] for name in benchmarks}


def slug(text: str) -> str:
    """A file-name-safe form of a label: ``R2-MAD w/o Memory`` -> ``r2-mad-w-o-memory``."""
    return re.sub(r"[^0-9a-z.]+", "-", str(text).lower()).strip("-") or "x"


def config_hash(payload: Any, length: int = 12) -> str:
    """First ``length`` hex digits of SHA-256 of the canonical JSON of ``payload``."""
    blob = json.dumps(jsonable(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]



class ExperimentGrid:
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
        run_settings: RunSettings | None = None,
        memory_models: Sequence[Mapping[str, Any] | ModelSpec] = (),
        memory_model: str | None = None,
        window: int | None = None,
        progress: bool = False,
        **changes: Any,
    ) -> None:
        """``run_settings``: every setting of the runs, whole (:meth:`from_profile` builds it from a profile);
        ``changes``: flat settings on top (``top_k=5``, ``n_rounds=2``, ``test_limit=4``, ``debate=...``), by one
        :meth:`RunSettings.replace <r2mad_core.experiments.run_settings.RunSettings.replace>`."""
        specs: list[ModelSpec] = []
        for entry in models:
            specs.append(entry if isinstance(entry, ModelSpec) else ModelSpec.from_entry(entry, specs))
        self.models = specs
        self.benchmarks = list(benchmarks)
        self.runs_dir = Path(runs_dir)
        self.cache_dir = Path(cache_dir)
        self.data_dir = data_dir
        try:
            base = run_settings if run_settings is not None else RunSettings(  # a preset fills what is unset: here
                protocol=changes.pop("protocol", RunSettings.protocol))
            self.run_settings = base.replace(**changes)
        except TypeError as exc:
            raise TypeError(f"ExperimentGrid: {exc}") from None
        self.progress = progress
        self.memory_model = memory_model
        # What a prompt that does not fit the context gives (r2mad_core.debate.overflow; default: the authors' code)
        check_overflow_policy(self.overflow_policy)
        # Questions in flight on a streaming engine (the question-level schedule): None, STREAMING_WINDOW
        self.window = window
        self._limits: dict[tuple[str, str, str], dict[str, Any]] = {}  # every cell run or loaded: its limits
        self.memory_models: list[ModelSpec] = []
        for entry in memory_models:
            self.memory_models.append(entry if isinstance(entry, ModelSpec) else ModelSpec.from_entry(entry, self.memory_models))
        known = [m.label for m in self.models] + [m.label for m in self.memory_models]
        if memory_model is not None and memory_model not in known:
            raise ValueError(f"memory_model {memory_model!r}: expected null or one of the profile's model labels "
                             f"(models or memory_models) {known}")
        #: The variant these settings make (:mod:`r2mad_core.reproduce.variants`), set by the notebook setup; None: the profile.
        self.variant: Any = None
        self._engines: dict[str, Any] = {}
        self._engine_kinds: dict[str, str] = {}
        self._samples: dict[tuple[str, str], list[Any]] = {}

    # -- the settings, read-only by name (the notebooks read ``exp.n_agents``, ``exp.top_k``, ``exp.choices``) --------
    debate = property(lambda self: self.run_settings.debate, doc="The debate settings (DebateSettings).")
    embedder = property(lambda self: self.run_settings.embedder)
    test_limit = property(lambda self: self.run_settings.test_limit)
    train_limit = property(lambda self: self.run_settings.train_limit)
    seed = property(lambda self: self.run_settings.seed)
    bootstrap_resamples = property(lambda self: self.run_settings.bootstrap_resamples)
    protocol_name = property(lambda self: self.run_settings.protocol, doc="The protocol preset's name.")
    choices = property(lambda self: dict(self.run_settings.choices), doc="Every protocol choice, resolved.")
    protocol = property(lambda self: self.run_settings.method_choices,
                        doc="The protocol's method-level choices by option name.")
    split_rule = property(lambda self: self.run_settings.choices["split_rule"])
    overflow_policy = property(lambda self: self.run_settings.choices["overflow_policy"])

    def __getattr__(self, name: str) -> Any:
        """What R2-MAD adds, by name (``exp.top_k``, ``exp.max_experience_chars``: MemorySettings' fields)."""
        if name in MEMORY_SPECS and "run_settings" in self.__dict__:
            return getattr(self.run_settings.memory, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def n_agents(self) -> int:
        return self.debate.n_agents

    @property
    def n_rounds(self) -> int:
        return self.debate.n_rounds

    @property
    def sampling(self) -> dict[str, Any]:
        """``temperature``, ``top_p``, ``max_tokens``."""
        return self.debate.values(SAMPLING)

    @classmethod
    def from_profile(cls, profile: Any, overrides: Mapping[str, Any] | None = None, *, runs_dir: str | Path,
                     cache_dir: str | Path, data_dir: str | Path | None = None, progress: bool = False,
                     **replace: Any) -> "ExperimentGrid":
        """THE constructor (issue 30): the grid a typed profile (:class:`~r2mad_core.experiments.profiles.Profile`,
        its overrides applied when it was loaded) runs, with ``overrides`` applied on top
        (:meth:`~r2mad_core.experiments.profiles.Profile.with_overrides`: a run setting by one
        :meth:`RunSettings.replace <r2mad_core.experiments.run_settings.RunSettings.replace>`). The models and the
        memory-only models and ``memory_model`` are read from ``profile.spec``; every other field that shapes a run
        cell is in the profile's :class:`~r2mad_core.experiments.run_settings.RunSettings`, held whole. The notebooks
        (:func:`r2mad_core.reproduce.notebook_setup.setup`), the pre-flight estimate, the variants' baseline and the report all build their grid here. ``replace`` replaces
        constructor arguments after the profile's (the estimate: its stand-in engines and sampled sizes; a flat
        setting lands in the run settings)."""
        profile = profile.with_overrides(overrides)
        spec = profile.spec
        options: dict[str, Any] = dict(
            models=[m.model_dump() for m in spec.models],
            memory_models=[m.model_dump() for m in spec.memory_models],
            benchmarks=list(spec.benchmarks), runs_dir=runs_dir, cache_dir=cache_dir, data_dir=data_dir,
            run_settings=profile.run_settings, progress=progress, memory_model=spec.memory_model,
        )
        options.update(replace)
        return cls(**options)

    def settings(self) -> dict[str, Any]:
        """What this grid runs, as plain values: each evaluated model with the model that builds its memory, the
        questions, the debate settings, what R2-MAD adds, every protocol choice resolved. Two grids with equal
        settings run the same cells (the test that the notebooks' grid is the estimate's)."""
        return {
            "models": [{**m.describe(), "memory_built_by": self.memory_spec(m).label} for m in self.models],
            "memory_models": [m.describe() for m in self.memory_models],
            "benchmarks": list(self.benchmarks), "test_limit": self.test_limit, "train_limit": self.train_limit,
            "seed": self.seed, "embedder": self.embedder, "debate": self.debate.values(),
            "memory": self.run_settings.memory.values(),
            "protocol": self.protocol_name, "choices": dict(self.choices), "memory_model": self.memory_model,
            "overflow_policy": self.overflow_policy, "bootstrap_resamples": self.bootstrap_resamples,
        }

    def report_context(self, profile: str, figures_dir: str | Path, notebook: str) -> ReportContext:
        """A :class:`ReportContext` whose manifest fields describe this experiment."""
        return ReportContext(
            profile=profile, out_dir=Path(figures_dir), notebook=notebook,
            models=[m.label + (f" (stands in for {m.stands_in_for})" if m.stands_in_for else "") for m in self.models],
            benchmarks=self.benchmarks, seeds=[self.seed], sample_counts=self.sample_counts(),
            engine_titles=[m.title for m in self.models], limit_cells=self.limits,
        )

    def limits(self) -> list[dict[str, Any]]:
        """Every cell this grid ran or loaded so far, with the limits its completions hit
        (:meth:`~r2mad_core.report.results.CellOutcome.limits`): the default cells of the artifacts' limits footnote."""
        return list(self._limits.values())

    def describe(self) -> pd.DataFrame:
        """The settings of this experiment, one row each (for the notebooks' first cell)."""
        rows = {
            "models": ", ".join(f"{m.label} [{m.engine}]" for m in self.models),
            "stands in for": ", ".join(m.paper_model for m in self.models),
            "benchmarks": ", ".join(self.benchmarks),
            "test questions per benchmark": self.test_limit or "all",
            "train questions per benchmark (memory)": self.train_limit or "all",
            "agents x rounds": f"{self.n_agents} x {self.n_rounds}",
            "temperature / top_p / max_tokens": f"{self.sampling['temperature']} / {self.sampling['top_p']} / "
                                                f"{self.sampling['max_tokens']}",
            "protocol": self.protocol_name + "".join(
                f"; {k}={v}" for k, v in self.choices.items() if v != protocol_presets.BY_NAME[k].value(self.protocol_name)),
            **{row: " / ".join(str(getattr(self.run_settings.memory, n)) for n in names)
               for row, names in MEMORY_DESCRIBED.items()},
            "memory built by": self.memory_model or "each evaluated model (its own bank)",
            "experience responses shown": (f"first {self.max_experience_chars} characters"
                                           if self.max_experience_chars else "in full"),
            "embedder": self.embedder,
            "seed": self.seed,
            "runs": display_path(self.runs_dir),
            "response cache": display_path(self.cache_dir),
        }
        rows = {k: str(v) for k, v in rows.items()}
        if self.variant is not None:  # a variant marks every setting it changes, with the profile's value
            overrides = self.variant.overrides
            for setting, fields in SETTING_FIELDS.items():
                changed = [self.variant.describe_one(f) for f in overrides if f in fields]
                if changed:
                    rows[setting] += "  <- VARIANT: " + "; ".join(changed)
            rows = {"VARIANT " + self.variant.name: self.variant.describe(), **rows}
        return pd.DataFrame({"setting": list(rows), "value": list(rows.values())}).set_index("setting")

    # -- context manager -----------------------------------------------------------------------
    def __enter__(self) -> "ExperimentGrid":
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

    def questions_note(self, benchmarks: Sequence[str] | None = None) -> str:
        """How many test questions each cell has, for captions: ``"4 test questions per benchmark"``,
        ``"211-500 test questions per benchmark (the full test splits)"``, ``"2 test questions"`` (one benchmark)."""
        counts = self.sample_counts(benchmarks)
        low, high = min(counts.values()), max(counts.values())
        number = str(low) if low == high else f"{low}-{high}"
        note = f"{number} test questions" + (" per benchmark" if len(counts) > 1 else "")
        return note + (" (the full test splits)" if self.test_limit is None else "")

    def benchmarks_note(self, benchmarks: Sequence[str] | None = None) -> str:
        """The benchmarks by their table names, for captions: ``"MATH500, Economics, Engineering and TruthfulQA"``."""
        names = [benchmark_label(b) for b in (benchmarks or self.benchmarks)]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    def engine(self, spec: ModelSpec) -> Any:
        """The engine of a model, opened once (behind the response cache in ``cache_dir``, unless the backend's
        ``worth_caching(**options)`` says no). Opening a
        ``vllm`` engine closes the previous one: one GPU model in memory at a time. A ``vllm`` model (any backend with
        ``identity_of``) is loaded only when a request misses the cache (``lazy``), so a cell whose generations are all
        cached never loads it."""
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
                if "samples" not in options:  # every question a debate may ask about, train and test
                    options["samples"] = [s for b in self.benchmarks for s in load_benchmark(b, "all", self.data_dir)]
                options.setdefault("seed", self.seed)
            logger.info("opening engine %s for %s", spec.engine, spec.label)
            # a backend that says a generation costs less than the cache's lookup and store (the simulated agents
            # with no modelled latency: deterministic, a function of the request) is not cached: its completions
            # are never "cached" (issue 35: the cache was 9% of the default run's CPU)
            worth_caching = getattr(engines.ENGINES[spec.engine].resolve(), "worth_caching", None)
            cache_dir = self.cache_dir if worth_caching is None or worth_caching(**options) else None
            # lazy: a backend that can name its identity unbuilt (vllm) is built on the first cache miss only
            self._engines[key] = engines.make_engine(spec.engine, model=model, cache_dir=cache_dir, lazy=True, **options)
            self._engine_kinds[key] = spec.engine
        return self._engines[key]

    # -- methods ------------------------------------------------------------------------------
    def method_options(self, method: str, memory: Path | str | None = None) -> tuple[str, dict[str, Any]]:
        """``(registered method name, options)`` of a method label or :class:`Row`
        (:func:`r2mad_core.experiments.method_labels.resolve`: the run settings flattened, once, into the options)."""
        return method_labels.resolve(method, self.run_settings, memory)

    @staticmethod
    def needs_memory(method: str) -> bool:
        return method_labels.needs_memory(method)

    # -- memory -------------------------------------------------------------------------------
    def memory_spec(self, spec: ModelSpec) -> ModelSpec:
        """The model whose debates fill the memory banks used by ``spec``: itself (``memory_model: null``, one bank
        per evaluated model; ours, the paper does not say) or the profile's ``memory_model`` (the authors built one
        bank with Qwen3-4B-Instruct-2507 for every evaluated model)."""
        if self.memory_model is None:
            return spec
        return next((m for m in self.memory_models if m.label == self.memory_model), None) or self.model(self.memory_model)

    def memory_options(self) -> dict[str, Any]:
        """How the banks are built under this protocol (:func:`r2mad_core.experiments.protocol.memory_options`)."""
        return self.run_settings.memory_options()

    def memory_config(self, spec: ModelSpec, benchmark: str) -> dict[str, Any]:
        spec = self.memory_spec(spec)
        return {
            "benchmark": benchmark, "split": "train", "limit": self.train_limit, "seed": self.seed,
            **self.debate.values(("n_agents", "n_rounds", "summary_max_tokens")),
            "embedder": self.embedder, "model": spec.describe(), **self.sampling, **self.memory_options(),
        }

    def memory_dir(self, spec: ModelSpec, benchmark: str) -> Path:
        config = self.memory_config(spec, benchmark)
        builder = self.memory_spec(spec)
        return self.runs_dir / slug(builder.label) / benchmark / f"memory-{config_hash(config)}"

    def memories(self, pairs: Sequence[tuple[ModelSpec | str, str]]) -> dict[tuple[str, str], Path]:
        """The memory bank of every (model, benchmark) of ``pairs``, built where missing, by ``(label, benchmark)``:
        the banks no other process is building first, those another is building last (:func:`_held_elsewhere`), so
        two notebooks that need banks build different ones at once instead of one waiting for the other (issue 35)."""
        specs = [(self.model(m) if isinstance(m, str) else m, benchmark) for m, benchmark in pairs]
        bar = None
        if self.progress:
            bar = tqdm(total=len(specs), desc=f"{len(specs)} memory bank sets", unit="set", mininterval=2.0,
                       file=sys.stderr)
        try:
            built = {}
            for spec, benchmark in _least_waiting(specs, lambda item: self._bank_busy(*item)):
                built[(spec.label, benchmark)] = self.memory(spec, benchmark)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return {(spec.label, benchmark): built[(spec.label, benchmark)] for spec, benchmark in specs}

    def _bank_busy(self, spec: ModelSpec, benchmark: str) -> bool:
        """Whether asking for this bank now would wait: missing, and another process holds its lock (building it)."""
        directory = self.memory_dir(spec, benchmark)
        return not (directory / "manifest.json").exists() and _held_elsewhere(directory.parent / f".{directory.name}.lock")

    def _cell_busy(self, spec: ModelSpec, benchmark: str, method: str) -> bool:
        """Whether running this cell now would wait: another process runs it, or builds the bank it needs."""
        if self.needs_memory(method) and self._bank_busy(spec, benchmark):
            return True
        run_dir = self.run_dir(spec, benchmark, method)[0]
        return run_dir.is_dir() and _held_elsewhere(run_dir / LOCK_FILE)

    def memory(self, spec: ModelSpec | str, benchmark: str) -> Path:
        """The memory bank directory of (model, benchmark), built from the train split if missing
        (Appendix A: a forced 3-round MAD with summaries on each training question)."""
        spec = self.model(spec) if isinstance(spec, str) else spec
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
            build_memory(
                benchmark, self.engine(self.memory_spec(spec)), self.embedder, directory, limit=self.train_limit,
                split="train", seed=self.seed, settings=self.debate, data_dir=self.data_dir,
                samples=self.samples(benchmark, "train"), progress=False, overwrite=True, **self.memory_options(),
            )
        return directory

    # -- cells --------------------------------------------------------------------------------
    def run_dir(self, spec: ModelSpec, benchmark: str, method: str, split: str = "test") -> tuple[Path, str, dict]:
        memory = self.memory_dir(spec, benchmark) if self.needs_memory(method) else None
        name, options = self.method_options(method, memory)
        config = {"method": name, "options": options, "seed": self.seed, "split": split,
                  "limit": self.test_limit if split == "test" else self.train_limit, "model": spec.describe()}
        if self.overflow_policy != "empty":  # the default keeps the run keys it had before the policy existed
            config["overflow_policy"] = self.overflow_policy
        # keyed by the registered method and its options, not the paper's row name: "R2-MAD",
        # "R2-MAD retrieval=Debate-State-Aware" and "R2-MAD poisoned=0" are one cell, one directory
        return self.runs_dir / slug(spec.label) / benchmark / f"{name}-{config_hash(config)}", name, options

    def run(self, model: ModelSpec | str, benchmark: str, method: str) -> CellOutcome:
        """Run (or load) one cell on the test split."""
        spec = self.model(model) if isinstance(model, str) else model
        samples = self.samples(benchmark, "test")
        run_dir, name, options = self.run_dir(spec, benchmark, method)
        done = _finished_records(run_dir, len(samples))
        if done is not None:
            # a finished directory is reused only if it holds this very cell (the method as the code derives it
            # today: options, file digests, sampling stream); otherwise RunConfigMismatch names the difference
            method_obj = get_method(name, **options).with_seed(self.seed)
            preflight(run_dir, benchmark=benchmark, split="test", method=method_obj, seed=self.seed,
                      limit=self.test_limit, sample_ids=[s.id for s in samples])
            metrics = _finished_metrics(run_dir, done, self.bootstrap_resamples)
            return self._seen(CellOutcome(spec, benchmark, method, run_dir, done, metrics, n_new=0))
        if self.needs_memory(method):
            self.memory(spec, benchmark)
        try:
            result = run_cell(
                run_dir, benchmark=benchmark, split="test", engine=self.engine(spec), method=name,
                method_options=options, seed=self.seed, limit=self.test_limit, samples=samples,
                data_dir=self.data_dir, progress=False, overflow_policy=self.overflow_policy, **self.schedule(spec),
            )
        except RunDirectoryBusy:
            # another notebook (make reproduce runs two at once) is running this very cell: wait for it, then
            # load what it wrote (or go on where it stopped)
            logger.info("%s: another process is running this cell; waiting for it", run_dir)
            with locked(run_dir / LOCK_FILE):
                pass
            return self.run(spec, benchmark, method)
        if len(result.records) == len(samples):
            _remember_finished(run_dir, result.records)
        metrics = _finished_metrics(run_dir, result.records, self.bootstrap_resamples)
        return self._seen(CellOutcome(spec, benchmark, method, run_dir, result.records, metrics, n_new=result.n_new))

    def schedule(self, spec: ModelSpec) -> dict[str, Any]:
        """How a cell's questions share the engine: question by question (:mod:`r2mad_core.debate.scheduling`) on the
        engines that stream (:data:`STREAMING_ENGINES`), ``window`` questions' worth of requests in flight (default
        :data:`STREAMING_WINDOW`); round by round elsewhere. Transcripts are the same under both (replayed from the
        cache exactly), so the schedule is not part of a cell's key."""
        if spec.engine not in STREAMING_ENGINES:
            return {}
        # several replicas behind one model (base URLs, vllm serve --data-parallel-size N): its max_concurrency
        # requests in flight fill them all, so at least that many questions' worth (docs/paper-run.md)
        filled = -(-int(spec.options.get("max_concurrency") or 0) // max(1, self.n_agents))
        return {"schedule": "questions", "window": self.window or max(STREAMING_WINDOW, filled)}

    def _seen(self, outcome: CellOutcome) -> CellOutcome:
        self._limits[(outcome.model.label, outcome.benchmark, outcome.method)] = outcome.limits()
        return outcome

    def grid(
        self,
        methods: Sequence[str],
        *,
        models: Sequence[ModelSpec | str] | None = None,
        benchmarks: Sequence[str] | None = None,
    ) -> "GridResults":
        """Every (model, benchmark, method) cell, model by model, benchmark by benchmark (the results' order). They
        run in that order too, except that a cell another process is running, or whose bank it is building, waits
        until no other cell can run without waiting (:func:`_least_waiting`; issue 35): notebooks running at once
        then build different banks and run different cells instead of one waiting on the other's lock. Every cell
        is a function of its configuration, so the order changes no result."""
        specs = [self.model(m) if isinstance(m, str) else m for m in (models or self.models)]
        cells = [(spec, benchmark, method) for spec in specs for benchmark in (benchmarks or self.benchmarks)
                 for method in methods]
        by_cell: dict[tuple[str, str, str], CellOutcome] = {}
        bar = None
        if self.progress:  # one bar for the whole step (a cell loaded from disk just ticks it)
            bar = tqdm(total=len(cells), desc=f"{len(cells)} cells", unit="cell", mininterval=2.0, file=sys.stderr)
        try:
            for spec, benchmark, method in _least_waiting(cells, lambda cell: self._cell_busy(*cell)):
                if bar is not None:
                    bar.set_postfix_str(f"{spec.label} / {benchmark} / {method}", refresh=False)
                outcome = self.run(spec, benchmark, method)
                logger.info("%s / %s / %s: accuracy %.3f (n=%d, %d new)", spec.label, benchmark, method,
                            outcome.metrics["accuracy"], len(outcome.records), outcome.n_new)
                by_cell[(spec.label, benchmark, method)] = outcome
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.set_postfix_str("", refresh=False)
                bar.close()
        outcomes = [by_cell[(spec.label, benchmark, method)] for spec, benchmark, method in cells]
        return GridResults(outcomes, bootstrap_resamples=self.bootstrap_resamples, seed=self.seed)


def _held_elsewhere(lock_file: Path) -> bool:
    """Whether another process holds the ``flock`` of ``lock_file`` now (a missing file: nobody). A moment later it may
    not: the answer only orders work (:func:`_least_waiting`), it never decides what is built or run."""
    if not lock_file.exists():
        return False
    try:
        with locked(lock_file, blocking=False):
            return False
    except BlockingIOError:
        return True


def _least_waiting(items: Sequence[Any], busy: Any) -> Any:
    """Yield every item of ``items`` once: in order, except that an item ``busy(item)`` says would wait now is put off
    while another can go; when every one left would wait, the first left goes (and waits)."""
    left = list(items)
    while left:
        index = next((k for k, item in enumerate(left) if not busy(item)), 0)
        yield left.pop(index)


def _finished_records(run_dir: Path, expected: int) -> list[TranscriptRecord] | None:
    """The records of a complete run directory (all ``expected`` samples), else None. A directory this process
    read or wrote before and that is unchanged since (:func:`_stamp`) is not read again (:data:`_FINISHED`)."""
    if not (run_dir / CONFIG_FILE).exists():
        return None
    stamp = _stamp(run_dir)
    remembered = _FINISHED.get(str(run_dir))
    if stamp is not None and remembered is not None and remembered[0] == stamp:
        _FINISHED.move_to_end(str(run_dir))
        records = list(remembered[1])
    else:
        _, records = load_run(run_dir)
        if len(records) == expected:
            _remember_finished(run_dir, records, stamp)
    return records if len(records) == expected else None


#: Finished run directories this process read or wrote: path -> (stamp, records, {bootstrap resamples: metrics}).
#: The report notebook asks for 93 cells of 56 directories, and a reused kernel (make reproduce) for cells an
#: earlier notebook ran; the oldest are dropped beyond :data:`_FINISHED_MAX_RECORDS` records.
_FINISHED: "OrderedDict[str, tuple[tuple, list[TranscriptRecord], dict[int, dict]]]" = OrderedDict()
_FINISHED_MAX_RECORDS = 100_000


def load_finished_runs(runs_dir: str | Path, bootstrap_resamples: int, since: float = 0.0) -> int:
    """Read every run directory under ``runs_dir`` (``<model>/<benchmark>/<run>``) finished since ``since`` (its
    ``metrics.json`` written then, as many records as its configuration's ``n_samples``) that this process does not
    remember as it is now into :data:`_FINISHED`, with its metrics for ``bootstrap_resamples``; returns how many it
    read. What the report's kernel does while the last notebook finishes (``make reproduce``:
    ``notebook_runner.run_workers``' ``prepare``, ``since`` the run's start: the runs of other variants and sweeps
    that share ``runs_dir`` are left): the same reads and the same metrics the report's cells would make, earlier.
    ``runs_dir`` as the notebook is given it: the memo is keyed by the path the grid builds from it."""
    read = 0
    for config_path in sorted(Path(runs_dir).glob(f"*/*/*/{CONFIG_FILE}")):
        run_dir = config_path.parent
        stamp = _stamp(run_dir)
        remembered = _FINISHED.get(str(run_dir))
        try:
            finished = (run_dir / METRICS_FILE).stat().st_mtime >= since
        except OSError:  # not finished
            continue
        if stamp is None or not finished or (remembered and remembered[0] == stamp):
            continue
        try:
            config, records = load_run(run_dir)
        except (OSError, ValueError):  # half written, or not a run: the report's own read says what is wrong
            continue
        if len(records) == config.get("n_samples") and _stamp(run_dir) == stamp:
            _remember_finished(run_dir, records, stamp)
            _finished_metrics(run_dir, records, bootstrap_resamples)
            read += 1
    return read


def _stamp(run_dir: Path) -> tuple | None:
    """The :func:`~r2mad_core.files.file_stamps` of the run's configuration and transcripts."""
    return file_stamps(run_dir / name for name in (CONFIG_FILE, TRANSCRIPTS_FILE))


def _remember_finished(run_dir: Path, records: list[TranscriptRecord], stamp: tuple | None = None) -> None:
    stamp = stamp if stamp is not None else _stamp(run_dir)
    if stamp is None:
        return
    _FINISHED[str(run_dir)] = (stamp, list(records), {})
    _FINISHED.move_to_end(str(run_dir))
    while sum(len(entry[1]) for entry in _FINISHED.values()) > _FINISHED_MAX_RECORDS and len(_FINISHED) > 1:
        _FINISHED.popitem(last=False)


def _finished_metrics(run_dir: Path, records: list[TranscriptRecord], bootstrap_resamples: int) -> dict[str, Any]:
    """``compute_metrics(records, n_bootstrap=bootstrap_resamples)``, computed once per remembered directory (a
    copy is handed out: the metrics are a pure function of the records and the resamples)."""
    remembered = _FINISHED.get(str(run_dir))
    if remembered is None or len(remembered[1]) != len(records) or any(
            a is not b for a, b in zip(remembered[1], records)):
        return compute_metrics(records, n_bootstrap=bootstrap_resamples)
    metrics = remembered[2].get(bootstrap_resamples)
    if metrics is None:
        metrics = remembered[2][bootstrap_resamples] = compute_metrics(records, n_bootstrap=bootstrap_resamples)
    return copy.deepcopy(metrics)
