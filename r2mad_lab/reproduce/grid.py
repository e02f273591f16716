"""The experiment grid: the paper's (model, benchmark, method) run cells of a profile, run or loaded.

:class:`ExperimentGrid` (``exp`` in the notebooks) runs (or loads) the cells behind the paper's tables. It holds what
a profile runs (its models, benchmarks, folders and :class:`~r2mad_lab.experiments.run_settings.RunSettings`) and is
composed of one part per trade:

- ``exp.engines``: one engine per model behind the response cache
  (:class:`~r2mad_lab.experiments.engine_pool.EnginePool`);
- ``exp.banks``: the memory banks, built once per (model, benchmark) from the train split (Appendix A;
  :class:`MemoryBanks`: here beside the cells, since both are named by this module's run keys, :func:`config_hash`);
- ``exp.cells``: one run directory per cell keyed by a hash of its configuration, run or read back
  (:class:`GridCells`; finished runs are read once per process: :mod:`r2mad_lab.experiments.run_reader`);
- ``exp.notes``: the settings table and the captions' notes (:class:`~r2mad_lab.report.grid_notes.GridNotes`).

The names the notebooks call on ``exp`` (``exp.grid``, ``exp.describe``, ``exp.memories``, ...) are those parts'
methods, bound in :meth:`ExperimentGrid.__init__`; its results are a :class:`~r2mad_lab.report.results.GridResults`.

Method names are the paper's row names (``CoT``, ``Self-Consistency (9)``, ``MAD``, ``MAD-M2 (O)``,
``R2-MAD w/o Confidence``, ``R2-MAD retrieval=Random``, ...) or a registered method's label;
:mod:`r2mad_lab.experiments.method_labels` maps each to a registered method of :mod:`r2mad_core.methods`
and its options.
The names the notebooks use from the modules this one builds on (the table rows, label builders, ModelSpec,
GridResults) are importable from here too (:data:`__all__`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.std import tqdm

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_core.debate.overflow import check_overflow_policy
from r2mad_core.debate.settings import SAMPLING, DebateSettings
from r2mad_core.files import atomic_write, locked
from r2mad_core.methods import get_method
from r2mad_lab.experiments import method_labels
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import LOCK_FILE, RunDirectoryBusy, preflight, run_cell
from r2mad_lab.experiments.engine_pool import EnginePool
from r2mad_lab.experiments.method_labels import (
    ABLATION_METHODS,
    COST_METHODS,
    ICL_METHODS,
    INDEPENDENT_ROUND0,
    LARGE_MODEL_METHODS,
    MAD_M2_METHODS,
    MAIN_METHODS,
    SHARED_ROUND0,
    SUBSET_METHODS,
    TRANSITION_METHODS,
    Row,
    poisoned_method_label,
    retrieval_method_label,
    retrieval_policy_label,
    sc_methods,
    with_k,
)
from r2mad_lab.experiments.model_specs import ENGINE_TITLES, SPEED_OPTIONS, ModelSpec, large_model_plan
from r2mad_lab.experiments.run_reader import finished_metrics, finished_records, load_finished_runs, remember_finished
from r2mad_lab.experiments.run_settings import RunSettings
from r2mad_lab.experiments.waiting import held_elsewhere, least_waiting
from r2mad_lab.report.artifacts import jsonable
from r2mad_lab.report.grid_notes import GridNotes
from r2mad_lab.report.results import C_TO_W_METRIC, SUBSET_METRIC, W_TO_C_METRIC, CellOutcome, GridResults

#: This module's face for the notebooks: the grid, its questions and run keys, and the names it builds on (the
#: table rows and label builders, the model specs, the results) so that ``from r2mad_lab.reproduce import grid``
#: is the one import a notebook needs.
__all__ = [
    "ExperimentGrid", "GridCells", "MemoryBanks", "RunSettingsFace", "STREAMING_ENGINES", "STREAMING_WINDOW",
    "profile_samples", "slug", "config_hash", "load_finished_runs",
    "ABLATION_METHODS", "COST_METHODS", "ICL_METHODS", "INDEPENDENT_ROUND0", "LARGE_MODEL_METHODS", "MAD_M2_METHODS",
    "MAIN_METHODS", "SHARED_ROUND0", "SUBSET_METHODS", "TRANSITION_METHODS", "Row", "poisoned_method_label",
    "retrieval_method_label", "retrieval_policy_label", "sc_methods", "with_k",
    "ENGINE_TITLES", "SPEED_OPTIONS", "ModelSpec", "large_model_plan",
    "C_TO_W_METRIC", "SUBSET_METRIC", "W_TO_C_METRIC", "CellOutcome", "GridResults",
]

logger = logging.getLogger(__name__)

#: Engines that stream completions as they finish and take concurrent calls: the grid runs their cells question by
#: question (``schedule="questions"``), keeping a continuous batch full (benchmarks/README.md: 1.66x the rounds
#: schedule's throughput at the paper's settings).
STREAMING_ENGINES = frozenset({"vllm", "openai"})
#: Questions in flight per cell on a streaming engine: 64 x 3 agents = 192 requests, within vLLM's default batch
#: of 256 sequences (``max_num_seqs``) on a GPU; the window the benchmark measured (benchmarks/README.md).
STREAMING_WINDOW = 64


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
    """First ``length`` hex digits of SHA-256 of the canonical JSON of ``payload``: a run cell's and a bank's folder
    name end in it (published caches replay only while these names stay as they are)."""
    blob = json.dumps(jsonable(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


class MemoryBanks:
    """The banks of ``exp`` (an :class:`~r2mad_lab.reproduce.grid.ExperimentGrid`), read from it when asked: its
    run settings, models (``models``, ``memory_models``, ``memory_model``, ``model(label)``), ``runs_dir``,
    ``data_dir``, train questions (``samples``), engines (``engines``) and ``progress``."""

    def __init__(self, exp: "ExperimentGrid") -> None:
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
        """How the banks are built under this protocol (:func:`r2mad_lab.experiments.protocol.memory_options`)."""
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
        lock = directory.parent / f".{directory.name}.lock"
        return not (directory / "manifest.json").exists() and held_elsewhere(lock)

class RunSettingsFace:
    """The run settings read by name on a grid (``exp.n_agents``, ``exp.top_k``, ``exp.choices``): each a read of
    ``run_settings``, the one holder of its value (what R2-MAD adds besides K: ``exp.run_settings.memory``)."""

    run_settings: RunSettings

    @property
    def debate(self) -> DebateSettings:
        """The debate settings."""
        return self.run_settings.debate

    @property
    def n_agents(self) -> int:
        return self.run_settings.debate.n_agents

    @property
    def n_rounds(self) -> int:
        return self.run_settings.debate.n_rounds

    @property
    def sampling(self) -> dict[str, Any]:
        """``temperature``, ``top_p``, ``max_tokens``."""
        return self.run_settings.debate.values(SAMPLING)

    @property
    def top_k(self) -> int:
        """K, the cases retrieved per agent and round (Eq. 5)."""
        return self.run_settings.memory.top_k

    @property
    def embedder(self) -> str:
        return self.run_settings.embedder

    @property
    def test_limit(self) -> int | None:
        return self.run_settings.test_limit

    @property
    def train_limit(self) -> int | None:
        return self.run_settings.train_limit

    @property
    def seed(self) -> int:
        return self.run_settings.seed

    @property
    def bootstrap_resamples(self) -> int:
        return self.run_settings.bootstrap_resamples

    @property
    def protocol_name(self) -> str:
        """The protocol preset's name."""
        return self.run_settings.protocol

    @property
    def choices(self) -> dict[str, Any]:
        """Every protocol choice, resolved."""
        return dict(self.run_settings.choices)

    @property
    def protocol(self) -> dict[str, Any]:
        """The protocol's method-level choices by option name."""
        return self.run_settings.method_choices

    @property
    def split_rule(self) -> str:
        return self.run_settings.choices["split_rule"]

    @property
    def overflow_policy(self) -> str:
        """What a prompt that does not fit the context gives (:mod:`r2mad_core.debate.overflow`)."""
        return self.run_settings.choices["overflow_policy"]


class GridCells:
    """The run cells of ``exp`` (an :class:`ExperimentGrid`): one run directory per (model, benchmark, method)
    keyed by a hash of its configuration (``runs_dir/<model>/<benchmark>/<registered method>-<hash>``), so a rerun,
    or a rerun after changing one parameter, only generates what changed; a finished one is read back
    (:mod:`r2mad_lab.experiments.run_reader`). :meth:`limits`: every cell run or loaded so far."""

    def __init__(self, exp: "ExperimentGrid") -> None:
        self.exp = exp
        self._limits: dict[tuple[str, str, str], dict[str, Any]] = {}  # every cell run or loaded: its limits

    def run_dir(self, spec: ModelSpec, benchmark: str, method: str, split: str = "test") -> tuple[Path, str, dict]:
        """``(run directory, registered method, its options)`` of a cell."""
        exp = self.exp
        memory = exp.banks.memory_dir(spec, benchmark) if exp.needs_memory(method) else None
        name, options = exp.method_options(method, memory)
        config = {"method": name, "options": options, "seed": exp.seed, "split": split,
                  "limit": exp.test_limit if split == "test" else exp.train_limit, "model": spec.describe()}
        if exp.overflow_policy != "empty":  # the default keeps the run keys it had before the policy existed
            config["overflow_policy"] = exp.overflow_policy
        # keyed by the registered method and its options, not the paper's row name: "R2-MAD",
        # "R2-MAD retrieval=Debate-State-Aware" and "R2-MAD poisoned=0" are one cell, one directory
        return exp.runs_dir / slug(spec.label) / benchmark / f"{name}-{config_hash(config)}", name, options

    def run(self, model: ModelSpec | str, benchmark: str, method: str) -> CellOutcome:
        """Run (or load) one cell on the test split."""
        exp = self.exp
        spec = exp.model(model) if isinstance(model, str) else model
        samples = exp.samples(benchmark, "test")
        run_dir, name, options = self.run_dir(spec, benchmark, method)
        done = finished_records(run_dir, len(samples))
        if done is not None:
            # a finished directory is reused only if it holds this very cell (the method as the code derives it
            # today: options, file digests, sampling stream); otherwise RunConfigMismatch names the difference
            method_obj = get_method(name, **options).with_seed(exp.seed)
            preflight(run_dir, benchmark=benchmark, split="test", method=method_obj, seed=exp.seed,
                      limit=exp.test_limit, sample_ids=[s.id for s in samples])
            metrics = finished_metrics(run_dir, done, exp.bootstrap_resamples)
            return self._seen(CellOutcome(spec, benchmark, method, run_dir, done, metrics, n_new=0))
        if exp.needs_memory(method):
            exp.banks.memory(spec, benchmark)
        try:
            result = run_cell(
                run_dir, benchmark=benchmark, split="test", engine=exp.engines.engine(spec), method=name,
                method_options=options, seed=exp.seed, limit=exp.test_limit, samples=samples,
                data_dir=exp.data_dir, progress=False, overflow_policy=exp.overflow_policy, **self.schedule(spec),
            )
        except RunDirectoryBusy:
            # another notebook (make reproduce runs two at once) is running this very cell: wait for it, then
            # load what it wrote (or go on where it stopped)
            logger.info("%s: another process is running this cell; waiting for it", run_dir)
            with locked(run_dir / LOCK_FILE):
                pass
            return self.run(spec, benchmark, method)
        if len(result.records) == len(samples):
            remember_finished(run_dir, result.records)
        metrics = finished_metrics(run_dir, result.records, exp.bootstrap_resamples)
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
        filled = -(-int(spec.options.get("max_concurrency") or 0) // max(1, self.exp.n_agents))
        return {"schedule": "questions", "window": self.exp.window or max(STREAMING_WINDOW, filled)}

    def busy(self, spec: ModelSpec, benchmark: str, method: str) -> bool:
        """Whether running this cell now would wait: another process runs it, or builds the bank it needs."""
        if self.exp.needs_memory(method) and self.exp.banks.busy(spec, benchmark):
            return True
        run_dir = self.run_dir(spec, benchmark, method)[0]
        return run_dir.is_dir() and held_elsewhere(run_dir / LOCK_FILE)

    def limits(self) -> list[dict[str, Any]]:
        """Every cell this grid ran or loaded so far, with the limits its completions hit
        (:meth:`~r2mad_lab.report.results.CellOutcome.limits`): the default cells of the artifacts' limits footnote."""
        return list(self._limits.values())

    def _seen(self, outcome: CellOutcome) -> CellOutcome:
        self._limits[(outcome.model.label, outcome.benchmark, outcome.method)] = outcome.limits()
        return outcome

    def grid(
        self,
        methods: Sequence[str],
        *,
        models: Sequence[ModelSpec | str] | None = None,
        benchmarks: Sequence[str] | None = None,
    ) -> GridResults:
        """Every (model, benchmark, method) cell, model by model, benchmark by benchmark (the results' order). They
        run in that order too, except that a cell another process is running, or whose bank it is building, waits
        until no other cell can run without waiting (:func:`~r2mad_lab.experiments.waiting.least_waiting`):
        notebooks running at once then build different banks and run different cells instead of one waiting on the
        other's lock. Every cell is a function of its configuration, so the order changes no result."""
        exp = self.exp
        specs = [exp.model(m) if isinstance(m, str) else m for m in (models or exp.models)]
        cells = [(spec, benchmark, method) for spec in specs for benchmark in (benchmarks or exp.benchmarks)
                 for method in methods]
        by_cell: dict[tuple[str, str, str], CellOutcome] = {}
        bar = None
        if exp.progress:  # one bar for the whole step (a cell loaded from disk just ticks it)
            bar = tqdm(total=len(cells), desc=f"{len(cells)} cells", unit="cell", mininterval=2.0, file=sys.stderr)
        try:
            for spec, benchmark, method in least_waiting(cells, lambda cell: self.busy(*cell)):
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
        return GridResults(outcomes, bootstrap_resamples=exp.bootstrap_resamples, seed=exp.seed)


class ExperimentGrid(RunSettingsFace):
    """Runs the paper's cells for the notebooks (``exp``): what a profile runs (models, benchmarks, folders, run
    settings, read by name through :class:`RunSettingsFace`), composed of its engine pool (``engines``: one engine
    per model, opened on first need, cached in ``cache_dir``), its memory banks (``banks``: per (model, benchmark),
    built once), its cells (``cells``: one run directory per cell keyed by a hash of its configuration, so a rerun,
    or a rerun after changing one parameter, only generates what changed) and its notes (``notes``: the settings
    table, the captions' notes, the artifacts' context).

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
        :meth:`RunSettings.replace <r2mad_lab.experiments.run_settings.RunSettings.replace>`."""
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
        self.memory_models: list[ModelSpec] = []
        for entry in memory_models:
            self.memory_models.append(entry if isinstance(entry, ModelSpec)
                                      else ModelSpec.from_entry(entry, self.memory_models))
        known = [m.label for m in self.models] + [m.label for m in self.memory_models]
        if memory_model is not None and memory_model not in known:
            raise ValueError(f"memory_model {memory_model!r}: expected null or one of the profile's model labels "
                             f"(models or memory_models) {known}")
        #: The variant these settings make (:mod:`r2mad_lab.reproduce.points`), set by the notebook setup; None: the
        #: profile.
        self.variant: Any = None
        self._samples: dict[tuple[str, str], list[Any]] = {}
        # the parts, one per trade, each reading this grid's settings when asked
        self.engines = EnginePool(self.cache_dir, benchmarks=self.benchmarks, data_dir=data_dir,
                                  seed=self.run_settings.seed)
        self.banks = MemoryBanks(self)
        self.cells = GridCells(self)
        self.notes = GridNotes(self)
        # what the notebooks call on the grid: the methods of the part that does it
        self.engine = self.engines.engine
        self.memory_spec, self.memory_options = self.banks.memory_spec, self.banks.memory_options
        self.memory_config, self.memory_dir = self.banks.memory_config, self.banks.memory_dir
        self.memory, self.memories = self.banks.memory, self.banks.memories
        self.run_dir, self.run, self.schedule = self.cells.run_dir, self.cells.run, self.cells.schedule
        self.grid, self.limits = self.cells.grid, self.cells.limits
        self.describe, self.report_context = self.notes.describe, self.notes.report_context
        self.questions_note, self.benchmarks_note = self.notes.questions_note, self.notes.benchmarks_note

    @classmethod
    def from_profile(cls, profile: Any, overrides: Mapping[str, Any] | None = None, *, runs_dir: str | Path,
                     cache_dir: str | Path, data_dir: str | Path | None = None, progress: bool = False,
                     **replace: Any) -> "ExperimentGrid":
        """THE constructor: the grid a typed profile (:class:`~r2mad_lab.experiments.profiles.Profile`,
        its overrides applied when it was loaded) runs, with ``overrides`` applied on top
        (:meth:`~r2mad_lab.experiments.profiles.Profile.with_overrides`: a run setting by one
        :meth:`RunSettings.replace <r2mad_lab.experiments.run_settings.RunSettings.replace>`). The models and the
        memory-only models and ``memory_model`` are read from ``profile.spec``; every other field that shapes a run
        cell is in the profile's :class:`~r2mad_lab.experiments.run_settings.RunSettings`, held whole. The notebooks
        (:func:`r2mad_lab.reproduce.notebook_setup.setup`), the pre-flight estimate, the variants' baseline and the
        report all build their grid here. ``replace`` replaces constructor arguments after the profile's (the
        estimate: its stand-in engines and sampled sizes; a flat setting lands in the run settings)."""
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

    # -- context manager -----------------------------------------------------------------------
    def __enter__(self) -> "ExperimentGrid":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close every engine this experiment opened."""
        self.engines.close()

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

    def method_options(self, method: str, memory: Path | str | None = None) -> tuple[str, dict[str, Any]]:
        """``(registered method name, options)`` of a method label or :class:`Row`
        (:func:`r2mad_lab.experiments.method_labels.resolve`: the run settings flattened, once, into the options)."""
        return method_labels.resolve(method, self.run_settings, memory)

    @staticmethod
    def needs_memory(method: str) -> bool:
        return method_labels.needs_memory(method)
