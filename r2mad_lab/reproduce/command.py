"""``make reproduce``: run the numbered notebooks in order with papermill, fed by one profile.

A profile (``r2mad_lab/profiles/<name>.yaml``) holds every parameter of a reproduction: the models
and their engines, the embedder, the benchmarks and how many of their questions to use, the
debate hyperparameters of the paper (3 agents, 3 rounds, temperature 1.0, top_p 1.0, max_tokens,
K, gamma, the thresholds w_l/w_h of Eq. 7's annotations) and which variants each table needs.
Every notebook receives the same few papermill parameters (:func:`notebook_parameters`): ``profile`` (the
packaged name, or the YAML file's absolute path), ``overrides`` (``--set``, a sweep's value) and the paths
``data_dir``, ``figures_dir`` (``<output>/figures/<profile>``), ``runs_dir`` (``<output>/runs/<profile>``) and
``cache_dir`` (``<output>/cache/<profile>``), ``<profile>`` being the profile's name as a folder name. Each kernel
loads the typed profile with the overrides and builds its grid with
:meth:`~r2mad_lab.reproduce.grid.ExperimentGrid.from_profile`, as ``--estimate-only`` does, so no field is dropped
on the way. Every ``--set``/``--sweep`` key and value is checked before anything runs: a key that is not a profile
field, a protocol choice nor an extra parameter (of the profile, or declared by a notebook: the theory notebook's
grid sizes) is one line naming the nearest valid keys.

    python -m r2mad_lab.reproduce [--profile sim] [--only 03,04] [--data-dir DIR] [--output-dir DIR]
                                   [--set top_k=5 --set gamma=0.5]

The default profile is ``sim``: simulated agents (no language model) on the full splits, every table
and figure in minutes; the first printed lines say so and how to run a real model (``cpu``: SmolLM2 on
llama.cpp; ``api``: any OpenAI-compatible endpoint; ``paper``: vLLM on a GPU).

Strings of the form ``${NAME}`` in a profile are replaced by the environment variable ``NAME`` when
the profile is loaded (the ``api`` profile takes its model name from ``$R2MAD_API_MODEL`` this way, so
tables and run keys carry the real model's name). A profile with ``api_budget: true`` is guarded by
:mod:`r2mad_lab.reproduce.api_budget`: before anything is sent, the notebooks run once against an estimating
gateway and the requests, tokens and (with prices) money are printed per notebook and in total; then
the real run goes through a forwarding gateway with the budget cap (``--max-requests``,
``--max-cost`` or ``$R2MAD_API_MAX_REQUESTS``, ``$R2MAD_API_MAX_COST``), which stops cleanly and
resumably.

Executed notebooks go to ``<output>/notebooks/executed/<profile>/`` with ``timings.json`` (wall
seconds per notebook). The run stops at the first failing notebook and names it and the failing
cell. Runs are resumable: generations are cached under ``cache/<profile>`` and run directories
are keyed by a hash of their configuration, so a second run, or a rerun after editing one
parameter, only generates what changed.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_core.data.verdicts import ENVIRONMENT as ANSWER_MEMO_ENVIRONMENT  # noqa: F401  (re-exported)
from r2mad_core.files import atomic_write
from r2mad_lab.experiments.profile_schema import (  # noqa: F401  (re-exported: reproduce is where users meet profiles)
    OPTIONAL_FIELDS,
    PATH_PARAMETERS,
    PROTOCOL_FIELDS,
    TOP_LEVEL_FIELDS,
    validate_profile,
)
from r2mad_lab.experiments.profiles import (  # noqa: F401  (re-exported: reproduce is where users meet profiles)
    Profile,
    ProfileError,
    load_profile,
    parse_override,
    profile_names,
)
from r2mad_lab.experiments.protocol import PROTOCOLS
from r2mad_lab.experiments.protocol import help_text as protocol_help
from r2mad_lab.report.artifacts import missing_artifacts
from r2mad_lab.report.headline import print_headline
from r2mad_lab.report.volatile import ExecutedSnapshot
from r2mad_lab.reproduce import launcher, notebook_runner, published, up_to_date
from r2mad_lab.reproduce.ablations import run_ablation
from r2mad_lab.reproduce.api_budget import budget_main, guarded_endpoints, temporary_environment
from r2mad_lab.reproduce.notebook_runner import (  # noqa: F401  (re-exported: the runner's names as reproduce had them)  # noqa: F401  (re-exported)
    AFTER_METADATA,
    ANSWER_MEMO_FILE,
    BLAS_THREAD_VARIABLES,
    KERNEL_NAME,
    NotebookResult,
    prerequisites,
)
from r2mad_lab.reproduce.notebook_runner import (
    duration_text as _duration,
)
from r2mad_lab.reproduce.paper import command as paper_run
from r2mad_lab.reproduce.point_cache import PointCache, expected_time
from r2mad_lab.reproduce.points import ENVIRONMENT as VARIANT_ENVIRONMENT
from r2mad_lab.reproduce.points import (
    POINT_FOLDERS,
    VARIANTS_DIR,
    mark_variant,
    parse_sweep,
    shown_path,
    to_environment,
)

NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"


# --------------------------------------------------------------------------------------------
# Running the notebooks
# --------------------------------------------------------------------------------------------


def default_notebooks_dir() -> Path:
    """``notebooks/`` of the repository this package lives in (else of the working directory)."""
    beside = Path(__file__).resolve().parents[2] / "notebooks"
    return beside if beside.is_dir() else Path.cwd() / "notebooks"


def discover_notebooks(notebooks_dir: Path, only: Sequence[str] | None = None) -> list[Path]:
    """The numbered notebooks in order; ``only`` keeps those whose number (``"03"``) or name is listed."""
    found = sorted(notebooks_dir.glob(NOTEBOOK_GLOB))
    if not found:
        raise FileNotFoundError(f"no notebooks matching {NOTEBOOK_GLOB} in {notebooks_dir}")
    if not only:
        return found
    selected = []
    for token in only:
        token = token.strip()
        matches = [p for p in found if p.stem.split("_", 1)[0] == token.zfill(2) or p.stem == token or p.name == token]
        if not matches:
            raise FileNotFoundError(
                f"--only {token!r}: no such notebook in {notebooks_dir} (have {', '.join(p.stem for p in found)})"
            )
        selected.extend(m for m in matches if m not in selected)
    return sorted(selected)


@dataclass
class ReproductionPaths:
    output_dir: Path
    profile: str
    data_dir: Path | None = None
    #: A variant's name (:mod:`r2mad_lab.reproduce.points`): its executed notebooks and artifacts go to
    #: ``.../variants/<name>/``; the kernels get the profile's ``figures_dir`` and put the variant's beside it.
    variant: str | None = None
    figures_dir: Path = field(init=False)
    runs_dir: Path = field(init=False)
    cache_dir: Path = field(init=False)
    executed_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir).resolve()
        self.figures_dir = self.output_dir / "figures" / self.profile
        self.runs_dir = self.output_dir / "runs" / self.profile
        self.cache_dir = self.output_dir / "cache" / self.profile
        self.executed_dir = self.output_dir / "notebooks" / "executed" / self.profile
        if self.variant:
            self.executed_dir = self.executed_dir / VARIANTS_DIR / self.variant

    @property
    def artifacts_dir(self) -> Path:
        """Where this run's figures and tables land: the profile's folder, or its variant's."""
        return self.figures_dir / VARIANTS_DIR / self.variant if self.variant else self.figures_dir

    def as_parameters(self) -> dict[str, str | None]:
        return {
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "figures_dir": str(self.figures_dir),
            "runs_dir": str(self.runs_dir),
            "cache_dir": str(self.cache_dir),
        }


#: Notebook parameters that are paths: passed relative to the notebook's folder (its working directory) when they
#: lie inside the repository, so committed executed notebooks hold no machine paths.
#: Path parameters passed relative to the notebooks' folder when they lie inside the repository.
PORTABLE_PATH_PARAMETERS = frozenset({"data_dir", "figures_dir", "runs_dir", "cache_dir"})
REPOSITORY = Path(__file__).resolve().parents[2]


def _portable(value: Any, notebook_dir: Path) -> Any:
    """``value`` relative to ``notebook_dir`` when it is a path inside the repository, else unchanged."""
    if not value:
        return value
    path = Path(value).resolve()
    if not path.is_relative_to(REPOSITORY) or not notebook_dir.resolve().is_relative_to(REPOSITORY):
        return value
    return os.path.relpath(path, notebook_dir.resolve())


def _strip_machine_paths(executed: Path) -> None:
    """papermill records the input and output paths in the executed notebook's metadata: keep them relative to
    the repository (no machine paths in committed outputs)."""
    # lazy: the notebooks extra (papermill, nbformat) is optional; --help and the estimate work without it
    import nbformat

    if not executed.is_file():
        return
    notebook = nbformat.read(executed, as_version=4)
    metadata = notebook.metadata.get("papermill", {})
    changed = False
    for key in ("input_path", "output_path"):
        value = metadata.get(key)
        if value and Path(value).is_absolute() and Path(value).resolve().is_relative_to(REPOSITORY):
            metadata[key] = Path(value).resolve().relative_to(REPOSITORY).as_posix()
            changed = True
    if changed:
        atomic_write(executed, nbformat.writes(notebook) + "\n")


def declared_parameters(notebook: Path) -> set[str]:
    """Names assigned in the notebook's ``parameters`` cell (read as papermill reads it: the cell tagged
    ``parameters``); no papermill needed, so ``--estimate-only`` checks overrides without the notebooks extra."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
    for cell in cells:
        if "parameters" in (cell.get("metadata") or {}).get("tags", []):
            source = "".join(cell.get("source") or [])
            return {target.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}
    return set()


def extra_keys(notebooks: Sequence[Path]) -> set[str]:
    """The extra parameters the notebooks declare (the theory notebook's grid sizes): valid ``--set``/``--sweep``
    keys besides the profile's fields and its own ``extra_parameters``."""
    found: set[str] = set()
    for notebook in notebooks:
        found |= declared_parameters(notebook)
    return found - set(PATH_PARAMETERS) - {"overrides"}


def notebook_parameters(profile: Profile, paths: "ReproductionPaths") -> dict[str, Any]:
    """What every notebook is given: the profile (its packaged name, or the YAML file's absolute path), the
    overrides it was loaded with, and where things go. Nothing else: each notebook builds its grid from these
    (:func:`r2mad_lab.reproduce.notebook_setup.setup`), so no field can be dropped on the way."""
    return {"profile": profile.location or profile.name, "overrides": dict(profile.overrides), **paths.as_parameters()}


def run_notebooks(
    profile: Profile,
    paths: ReproductionPaths,
    *,
    notebooks_dir: Path | None = None,
    only: Sequence[str] | None = None,
    echo: Callable[[str], None] = print,
    after_notebook: Callable[[NotebookResult], None] | None = None,
    show_banner: bool = True,
    jobs: int | None = None,
    reuse_kernels: bool | None = None,
    up_to_date_check: bool | None = None,
) -> list[NotebookResult]:
    """Execute the notebooks with papermill, ``jobs`` at a time (default :func:`default_jobs`), each after the
    notebooks it needs (:func:`prerequisites`); stop at the first failure (returned last, with ``error`` set).
    Writes the executed notebooks and ``timings.json`` into ``executed_dir``. ``after_notebook`` is called with
    each notebook's result (the cost estimate counts per notebook). ``reuse_kernels`` (default: as for ``jobs``,
    when the agents are simulated) runs a worker's notebooks one after another in one kernel, cleared in between:
    each kernel imports the libraries once instead of once per notebook. ``up_to_date_check``: True leaves the notebooks
    that are up to date (:mod:`.up_to_date`), False runs every one; both record a complete run (None: neither)."""
    notebooks = discover_notebooks(notebooks_dir or default_notebooks_dir(), only)
    for folder in (paths.figures_dir, paths.runs_dir, paths.cache_dir, paths.executed_dir):
        folder.mkdir(parents=True, exist_ok=True)
    if paths.data_dir:
        os.environ["R2MAD_DATA_DIR"] = str(paths.data_dir)
    parameters = notebook_parameters(profile, paths)
    executed_before = ExecutedSnapshot(paths.executed_dir)  # a notebook whose results are unchanged keeps its bytes
    total_start, started = time.perf_counter(), time.time()
    for line in banner(profile) if show_banner else ():
        echo(line)
    jobs = default_jobs(profile) if jobs is None else max(1, jobs)
    reuse_kernels = _simulated_only(profile) if reuse_kernels is None else reuse_kernels
    at_once = f", {jobs} at a time" if jobs > 1 and len(notebooks) > 1 else ""
    replaying = (Path(paths.cache_dir) / published.SEEDED_MARKER).is_file()  # a cache seeded from published/
    expected = expected_time(expected_runtime(profile, replaying), Path(paths.executed_dir),
                             REPOSITORY / "notebooks" / "executed" / profile.folder, notebooks,
                             len(discover_notebooks(notebooks_dir or default_notebooks_dir())))
    echo(f"reproduce: profile {profile.name} ({profile.source}); {len(notebooks)} notebooks{at_once}; expected "
         f"runtime: {expected}")
    echo(f"  figures -> {paths.artifacts_dir}\n  executed notebooks -> {paths.executed_dir}")
    kernels_get = notebook_runner.kernel_environment(paths.cache_dir)  # the shared verdicts, one BLAS thread
    total = len(notebooks)
    position = {notebook.stem: index for index, notebook in enumerate(notebooks, start=1)}

    def passed_to(notebook: Path) -> dict[str, Any]:
        return {k: _portable(v, notebook.parent) if k in PORTABLE_PATH_PARAMETERS else v for k, v in parameters.items()}

    check = None
    if up_to_date_check is not None:
        needs = {n: prerequisites(n, notebooks) for n in notebooks}
        check = up_to_date.Check(notebooks, profile, paths, passed_to, needs=needs, other_runs=POINT_FOLDERS)
    notebooks = check.out_of_date(echo, run_all=not up_to_date_check) if check is not None else notebooks

    def run_one(notebook: Path, kernel: Any, clear: bool) -> NotebookResult:
        output, start = paths.executed_dir / notebook.name, time.perf_counter()
        error = notebook_runner.execute(notebook, output, passed_to(notebook), kernel, clear,
                                        progress=display.progress(notebook))
        _strip_machine_paths(output)
        if paths.variant:
            mark_variant(output, profile, paths.variant, paths.artifacts_dir, paths.figures_dir)
        return NotebookResult(notebook.stem, time.perf_counter() - start, output, error)

    def prepare(notebook: Path, kernel: Any) -> bool:  # the report's kernel reads the runs finished so far
        display.preparing(notebook)
        return notebook_runner.run_in_kernel(kernel, notebook_runner.load_runs_code(
            passed_to(notebook)["runs_dir"], profile.spec.bootstrap_resamples, started),
            notebook_runner.RUNS_READ) != "0"

    def finish(notebook: Path, result: NotebookResult) -> None:  # under the runner's lock
        notebook_runner.record_timing(paths.executed_dir, notebook.stem, result.seconds, result.error is None)
        if after_notebook is not None:
            after_notebook(result)
        display.finished(notebook, result)

    # the longest first (also the time left): a run generating anew by the published run's generation; else by this
    # folder's last run, else by the committed run of the profile
    hints = (published.generation_hints(profile, paths.cache_dir)
             or notebook_runner.previous_seconds(paths.executed_dir)
             or notebook_runner.previous_seconds(REPOSITORY / "notebooks" / "executed" / profile.folder))
    display = notebook_runner.Display(position, notebooks, hints, echo)
    with temporary_environment(kernels_get), display.board:
        results = [] if not notebooks else notebook_runner.run_workers(
            notebooks, run_one, jobs=jobs, reuse_kernels=reuse_kernels, hints=hints, on_start=display.started,
            on_finish=finish, prepare=prepare if reuse_kernels else None)
    executed_before.settle()
    if not (results and results[-1].error):
        if check is not None:
            check.record()  # every notebook ran or was up to date: the next run may leave them
        took, ran = _duration(time.perf_counter() - total_start), len(notebooks)
        if ran:
            echo(f"reproduce: all {total} notebooks ran in {took}" if ran == total else
                 f"reproduce: {ran} of {total} notebooks ran in {took}; {total - ran} up to date")
    return results


def default_jobs(profile: Profile) -> int:
    """How many notebooks run at once by default: up to :data:`MAX_DEFAULT_JOBS` (one per core) when every agent
    is simulated, else 1. A real engine holds a model per kernel (a llama.cpp server using every core, a GPU's
    memory) and a budget-guarded profile counts its cost notebook by notebook."""
    if not _simulated_only(profile):
        return 1
    return max(1, min(MAX_DEFAULT_JOBS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


def _simulated_only(profile: Profile) -> bool:
    """Whether every agent of ``profile`` is simulated (a stand-in runs on one of the models) and no budget counts."""
    models = [m for m in [*profile["models"], *(profile.fields.get("large_models") or [])] if not m.get("stand_in")]
    return not profile.fields.get("api_budget") and all(m.get("engine") == "simulated" for m in models)


#: The most notebooks a simulated profile runs at once by default (``--jobs`` sets any number).
MAX_DEFAULT_JOBS = 4


REAL_MODEL_HINT = (
    "Real models: make reproduce PROFILE=cpu (SmolLM2-135M on llama.cpp, on this CPU), "
    "PROFILE=api (any OpenAI-compatible endpoint: export R2MAD_API_MODEL, R2MAD_API_BASE_URL, R2MAD_API_KEY), "
    "PROFILE=paper (vLLM on a GPU); see README.md."
)


def expected_runtime(profile: Profile, replaying: bool = False) -> str:
    """The time the banner states for the step it starts: the profile's ``expected_runtime``, or its
    ``expected_runtime_replay`` when the run replays published generations (figures: docs/performance.md, "Stated
    times", which tests/test_stated_times.py ties them to)."""
    replay = profile.fields.get("expected_runtime_replay")
    return str(replay if replaying and replay else profile["expected_runtime"])


def banner(profile: Profile) -> list[str]:
    """The first printed lines: what the agents are, what the run shows, how to run a real model."""
    models = list(profile["models"])
    if models and all(m.get("engine") == "simulated" for m in models):
        return [
            f"reproduce: profile {profile.name}: the agents are SIMULATED (r2mad_core.theory.agents: "
            "latent-concept agents with shared misconceptions, no language model).",
            "  This shows the method's mechanics (memory, retrieval, confidence weighting, every table and "
            "figure) on the benchmarks' splits, not any LLM's accuracy.",
            "  " + REAL_MODEL_HINT,
        ]
    described = []
    for m in models:
        model = (m.get("model") or "the packaged default model") + (
            f", re-quantized to {m['options']['requantize']}" if (m.get("options") or {}).get("requantize") else "")
        stands = f", stands in for {m['stands_in_for']}" if m.get("stands_in_for") else ""
        described.append(f"{m['label']} ({m['engine']} engine, model {model}{stands})")
    return [f"reproduce: profile {profile.name}: agents = " + "; ".join(described)]


def caption_note(lines: Sequence[str]) -> str:
    """A console banner line as a caption's sentence: no ``reproduce: profile NAME:`` prefix, no shouting."""
    text = " ".join(lines)
    text = re.sub(r"^reproduce: (profile [^:]+: )?", "", text).replace("SIMULATED", "simulated")
    return text[:1].upper() + text[1:]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m r2mad_lab.reproduce", description="Run the numbered notebooks "
                                     "in order with papermill, fed by one profile; writes every table and figure into "
                                     "figures/<profile>/.")
    parser.add_argument("--profile", default="sim",
                        help=f"a packaged profile ({', '.join(profile_names())}) or a YAML path (default: sim, "
                        "simulated agents; cpu/api/paper run real models)")
    parser.add_argument("--only", default=None, help="comma-separated notebook numbers or names, e.g. 03,04")
    parser.add_argument("--data-dir", type=Path, default=None, help="benchmark files (default: $R2MAD_DATA_DIR)")
    parser.add_argument("--output-dir", type=Path, default=Path.cwd(),
                        help="where figures/, runs/, cache/ and notebooks/executed/ go (default: the working "
                             "directory)")
    parser.add_argument("--notebooks-dir", type=Path, default=None,
                        help="the notebooks to run (default: the repository's)")
    parser.add_argument("--jobs", type=_at_least(int, 1), default=None, metavar="N",
                        help="notebooks run at once, each after those it needs (default: one per core up to "
                        f"{MAX_DEFAULT_JOBS} when the agents are simulated, else 1: a real model holds every "
                        "core or the GPU); with --sweep or --replicates: points run at once, each in its own process")
    parser.add_argument("--force", action="store_true", help="execute every notebook, also those whose inputs and "
                        "outputs are as their last run left them (a rerun leaves those: reproduce/up_to_date.py)")
    parser.add_argument("--fresh-kernels", action="store_true",
                        help="start a new kernel for every notebook (default with simulated agents: each worker "
                        "clears its kernel and runs its next notebook in it, importing the libraries once)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default=None,
                        help="the protocol preset, as --set protocol=NAME (default: the profile's): "
                        + protocol_help().replace("%", "%%"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a profile field (YAML value), e.g. --set top_k=5: the run is a variant, written "
                        "to figures/<profile>/variants/<name>/ and compared with the profile's own run "
                        "(docs/ablations.md)")
    parser.add_argument("--variant", default=None, metavar="NAME",
                        help="the variant's folder name (default: from the overrides, e.g. gamma=0.5)")
    parser.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="run each value as a variant and draw the tables' numbers against it, "
                        "e.g. --sweep gamma=0,0.3,0.6,0.9 --only 04; several --sweep flags run their Cartesian "
                        "product (--sweep gamma=0,0.9 --sweep top_k=1,3: 4 points on one figure)")
    parser.add_argument("--replicates", type=_at_least(int, 1), default=1, metavar="N",
                        help="run the profile (and the variant of --set, or every --sweep point) under N run seeds "
                        "(seed, seed+1, ...) and report each table's mean and spread across seeds beside the "
                        "single-seed CI (figures/<profile>/replicates/)")
    launcher.add_arguments(parser)  # --dry-run, --show-config, --launcher, --slurm (r2mad_lab/reproduce/launcher.py)
    budget = parser.add_argument_group("API cost (profiles with api_budget: true, e.g. api)")
    budget.add_argument("--max-requests", type=_at_least(int), default=None,
                        help="stop before sending more requests than this (default: $R2MAD_API_MAX_REQUESTS, "
                             "else no cap)")
    budget.add_argument("--max-cost", type=_at_least(float), default=None,
                        help="stop before the money spent could pass this (needs both prices; default: "
                             "$R2MAD_API_MAX_COST)")
    budget.add_argument("--price-prompt", type=_at_least(float), default=None,
                        help="price per million prompt tokens (default: $R2MAD_API_PRICE_PROMPT)")
    budget.add_argument("--price-completion", type=_at_least(float), default=None,
                        help="price per million completion tokens (default: $R2MAD_API_PRICE_COMPLETION)")
    budget.add_argument("--estimate-only", action="store_true", help="print the cost estimate and send nothing")
    budget.add_argument("--no-estimate", action="store_true", help="skip the estimate (the cap still applies)")
    published.add_arguments(parser)  # --fresh: no replay of published/<profile>/ (r2mad_lab/reproduce/published.py)
    # --rehearse, --gpus, --calibrate, --preflight (r2mad_lab/reproduce/paper/command.py)
    paper_run.add_arguments(parser)
    return parser


def _at_least(kind: type, minimum: int = 0) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)``, finite and at least ``minimum``."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, found {text!r}") from None
        if not value >= minimum or (isinstance(value, float) and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected a finite number >= {minimum}, found {text}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.notebooks_dir = args.notebooks_dir or default_notebooks_dir()
    only = [t for t in args.only.split(",") if t.strip()] if args.only else None
    try:
        overrides = dict(parse_override(text) for text in args.overrides)
        if args.protocol is not None:
            overrides.setdefault("protocol", args.protocol)
        # every key and value checked before anything runs: a profile field, a protocol choice or an extra parameter
        # of the profile or of the notebooks chosen, within its bounds (one line naming the nearest keys)
        keys = extra_keys(discover_notebooks(args.notebooks_dir))
        profile = load_profile(args.profile, overrides, extra_keys=keys)
        for sweep in args.sweep:  # every value of every swept axis
            key, values = parse_sweep(sweep)
            for value in values:
                try:
                    profile.with_overrides({key: value}, extra_keys=keys)
                except (ProfileError, ValueError) as exc:
                    raise ValueError(f"{exc} (--sweep {sweep})" if "--sweep" not in str(exc) else str(exc)) from None
    except (FileNotFoundError, ProfileError, ValueError) as exc:
        print(f"reproduce: {exc}", file=sys.stderr)
        return 2
    if args.show_config is not None:  # the executed configuration, nothing run: no pre-flight, no GPU needed
        beside = [f for f in ("rehearse", "calibrate", "preflight", "estimate_only", "dry_run") if getattr(args, f)]
        if beside:  # never silently ignored beside another mode, nor ignoring it
            print("reproduce: --show-config runs nothing; it does not combine with "
                  f"{', '.join('--' + f.replace('_', '-') for f in beside)} (run them apart)", file=sys.stderr)
            return 2
        return _ablation_main(args, overrides, only)
    if paper_run.wanted(args) or (args.estimate_only and paper_run.gpu_models(profile)):  # rehearsal, estimate, ...
        return paper_run.main(args, profile, only, run_notebooks, ReproductionPaths, discover_notebooks, run=_run_main)
    if not args.estimate_only and paper_run.gpu_models(profile) and paper_run.preflight_failed(profile, args):
        return 1  # a GPU profile: the node, gated access, disk, memory checked before any GPU work (one line each)
    if overrides or args.sweep or args.variant or args.replicates > 1 or args.dry_run:
        return _ablation_main(args, overrides, only)
    return _run_main(args, profile, only)


def _ablation_main(args: argparse.Namespace, overrides: Mapping[str, Any], only: Sequence[str] | None) -> int:
    """``--set``/``--variant``/``--sweep``/``--replicates``/``--dry-run``: each point a variant beside the profile's
    (r2mad_lab.reproduce.ablations), up to date when its executed configuration was made before
    (r2mad_lab.reproduce.points), the others run by the launcher (r2mad_lab.reproduce.launcher)."""
    keys = extra_keys(discover_notebooks(notebooks_dir := args.notebooks_dir))  # set by main
    base = load_profile(args.profile)
    paths = ReproductionPaths(args.output_dir, base.folder, _data_dir(args))
    def run(values: Mapping[str, Any], variant: Any, chosen: Sequence[str] | None) -> Path | None:
        profile = base.with_overrides(values, extra_keys=keys)
        name = variant.name if variant is not None else None
        environment = {VARIANT_ENVIRONMENT: to_environment(values, name)} if variant is not None else {}
        with temporary_environment(environment):
            code = _run_main(args, profile, chosen, variant=name, show_banner=False)
        return ReproductionPaths(args.output_dir, profile.folder, variant=name).artifacts_dir if code == 0 else None

    try:
        if not args.sweep:
            base.with_overrides(overrides, extra_keys=keys)  # a bad override: one line, before anything runs
        chosen = discover_notebooks(notebooks_dir, only)
        notebooks = [p.stem for p in chosen]
        for line in banner(base) if args.show_config is None else ():
            print(line)
        cache = PointCache(args.profile, paths.runs_dir, paths.figures_dir, paths.executed_dir,
                           lambda picked: discover_notebooks(notebooks_dir, picked), keys, base.source, paths.data_dir,
                           force=args.force or args.fresh)
        launch, context = launcher.settings(args, only, base, len(chosen), len(discover_notebooks(notebooks_dir)),
                                            REPOSITORY / "notebooks" / "executed" / base.folder)
        # the baseline runs first only where it costs nothing but this machine's time (simulated agents)
        engines = {m.get("engine") for m in [*base["models"], *(base.fields.get("large_models") or [])]
                   if not m.get("stand_in")}  # a stand-in runs on one of the models
        return run_ablation(run, base, paths.figures_dir, notebooks, overrides, name=args.variant,
                            sweep=args.sweep, only=only, engine_note=caption_note(banner(base)[:1]),
                            baseline_first=engines <= {"simulated"} and not args.estimate_only,
                            replicates=args.replicates, cache=cache, launch=launch, dry_run=args.dry_run,
                            show_config=args.show_config, dry_run_context=context)
    except (FileNotFoundError, ProfileError, ValueError) as exc:
        print(f"reproduce: {exc}", file=sys.stderr)
        return 2


def _data_dir(args: argparse.Namespace) -> Path | None:
    found = args.data_dir or (Path(os.environ["R2MAD_DATA_DIR"]) if os.environ.get("R2MAD_DATA_DIR") else None)
    return found.resolve() if found else None


def _run_main(args: argparse.Namespace, profile: Profile, only: Sequence[str] | None, *, variant: str | None = None,
              show_banner: bool = True) -> int:
    paths = ReproductionPaths(args.output_dir, profile.folder, _data_dir(args), variant=variant)
    try:
        replay = published.before_run(profile, paths, fresh=args.fresh)  # seeds cache/<profile>/ from published/
        endpoints = guarded_endpoints(profile)
        if endpoints:
            outcome = budget_main(args, profile, paths, endpoints, only, run_notebooks, banner(profile))
            if isinstance(outcome, int):
                return outcome
            results = outcome
        elif args.estimate_only:
            return paper_run.estimate_main(args, profile, only, run_notebooks, ReproductionPaths, discover_notebooks)
        else:
            results = run_notebooks(profile, paths, notebooks_dir=args.notebooks_dir, only=only,
                                    show_banner=show_banner,
                                    jobs=args.jobs, reuse_kernels=False if args.fresh_kernels else None,
                                    up_to_date_check=None if only else not (args.force or args.fresh))
    except (FileNotFoundError, ProfileError) as exc:
        print(f"reproduce: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("reproduce: interrupted; finished generations are cached and finished questions kept in "
              f"{paths.runs_dir}; rerun the same command to resume", file=sys.stderr)
        return 130
    if results and results[-1].error:
        return 1

    missing = missing_artifacts(paths.artifacts_dir)
    if missing:
        print("reproduce: artifacts listed in the manifest are missing:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    if not results:
        print(f"reproduce: nothing ran; the tables and figures in {shown_path(paths.artifacts_dir)} are those of the "
              f"runs recorded as up to date (the latest ended {up_to_date.last_run(paths, profile)})")
    print_headline(paths.artifacts_dir, ran=[r.notebook for r in results] if results else None)  # none: up to date
    replay.after_run(paths.artifacts_dir)  # --fresh or just seeded: which committed tables moved, by how much
    return 0


if __name__ == "__main__":
    sys.exit(main())
