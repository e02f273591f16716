"""The one setup every notebook runs: the profile and its overrides -> the experiment grid, quiet logging.

A notebook's ``parameters`` cell declares only what a reader would edit: ``profile`` (a packaged profile's name,
``tiny`` by default, or a path to a YAML profile), ``overrides`` (a mapping of profile fields, protocol choices or
declared extra parameters to change: the run is then a variant) and where things go (``data_dir``, ``figures_dir``,
``runs_dir``, ``cache_dir``; None: ``../figures/<profile>``, ``../runs/<profile>``, ``../cache/<profile>``, as the
notebooks run from ``notebooks/``). ``make reproduce`` passes the same names (papermill). A profile field assigned in
the notebook before :func:`setup` (papermill ``-p top_k 5``, or a line added to the parameters cell) is an override too.

:func:`setup` loads the typed profile (:func:`r2mad_lab.experiments.profiles.load_profile`) and applies the
overrides on it (:meth:`~r2mad_lab.experiments.profiles.Profile.with_overrides`: a run setting lands in the profile's
``RunSettings`` by one ``replace``; an unknown key or a value out of bounds is one line naming it), builds the grid from
it (:meth:`r2mad_lab.reproduce.grid.ExperimentGrid.from_profile`, the one constructor the estimate, the variants and
the report use too) and puts the profile's values into the notebook's namespace (``benchmarks``, ``sc_paths``,
...) for the cells that follow.

Logging inside a notebook is quiet: ``r2mad_core`` and ``r2mad_lab`` log only errors (what a notebook needs to say
it prints or tabulates from the numbers), chatty libraries only warnings; long steps show one
progress bar each (:meth:`r2mad_lab.reproduce.grid.ExperimentGrid.grid`).
"""

from __future__ import annotations

import ast
import difflib
import logging
import warnings
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping, MutableMapping, Sequence

import pandas as pd

from r2mad_core.plugins import load_plugins
from r2mad_lab import CODE_PACKAGES
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.experiments.profile_schema import ProfileSpec
from r2mad_lab.experiments.profiles import Profile, load_profile
from r2mad_lab.report.artifacts import ReportContext, apply_style
from r2mad_lab.report.findings import as_markdown
from r2mad_lab.reproduce import gc_settings, points
from r2mad_lab.reproduce.compare import variant as comparison
from r2mad_lab.reproduce.grid import ExperimentGrid

#: Libraries whose INFO lines would fill a notebook.
CHATTY_LOGGERS = ("httpx", "httpcore", "urllib3", "filelock", "huggingface_hub", "sentence_transformers",
                  "matplotlib", "PIL", "numba")
PATH_DEFAULTS = {"figures_dir": "../figures/{profile}", "runs_dir": "../runs/{profile}",
                 "cache_dir": "../cache/{profile}"}


def quiet_logging() -> None:
    """The core and the lab log errors only; chatty libraries warnings only; no root handler is added. tqdm's
    "IProgress not found" warning (no ipywidgets: the progress bars fall back to text) is not shown."""
    warnings.filterwarnings("ignore", message="IProgress not found")
    for package in CODE_PACKAGES:
        logging.getLogger(package).setLevel(logging.ERROR)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


#: The parameters a notebook's parameters cell declares (everything else comes from the profile).
NOTEBOOK_PARAMETERS = ("profile", "overrides", "data_dir", "figures_dir", "runs_dir", "cache_dir")
#: Where setup remembers the values it put into a namespace (a rerun of the setup cell does not read them back as
#: overrides).
WRITTEN = "_r2mad_written"


class NotebookParameterError(ValueError):
    """A notebook parameter of the wrong type, or an unknown one (one line: its name and what to write instead)."""


#: The header of the cell papermill injects with the ``-p``/``-y`` parameters (its Python translator's).
PAPERMILL_HEADER = "# Parameters"


def _papermill_example(overrides: str) -> tuple[str, str]:
    """What to write instead of ``-p overrides TEXT``: ``(-y 'overrides: TEXT', -p KEY VALUE ...)``."""
    import yaml

    try:
        parsed = yaml.safe_load(overrides)
    except yaml.YAMLError:
        parsed = None
    pairs = parsed if isinstance(parsed, dict) and parsed else {"top_k": 3}
    text = overrides.strip() if isinstance(parsed, dict) and parsed else "{top_k: 3}"
    return f"-y 'overrides: {text}'", " ".join(f"-p {key} {value}" for key, value in pairs.items())


def check_parameters(namespace: Mapping[str, Any]) -> None:
    """Refuse, in one line naming it, a notebook parameter of the wrong type (papermill's ``-p`` passes a mapping as a
    string: ``-p overrides '{top_k: 3}'``) and a name papermill injected that is neither a notebook parameter, a
    profile field nor one of the notebook's own parameters (a typo: ``-p topk 3``)."""
    overrides = namespace.get("overrides")
    if overrides is not None and not isinstance(overrides, Mapping):
        if isinstance(overrides, str):
            yaml_form, p_form = _papermill_example(overrides)
            raise NotebookParameterError(
                f"notebook parameter 'overrides' is the string {overrides!r} (papermill's -p passes a string), not a "
                f"mapping of profile fields: write {yaml_form} or {p_form}")
        raise NotebookParameterError(f"notebook parameter 'overrides' must be a mapping of profile fields, not "
                                     f"{type(overrides).__name__} {overrides!r}: write -y 'overrides: {{top_k: 3}}'")
    profile = namespace.get("profile")
    if profile is not None and not isinstance(profile, (str, PathLike)):
        raise NotebookParameterError(f"notebook parameter 'profile' must be a profile's name or a YAML file's path, "
                                     f"not {type(profile).__name__} {profile!r}: write -p profile sim")
    for key in (*PATH_DEFAULTS, "data_dir"):
        value = namespace.get(key)
        if value is not None and not isinstance(value, (str, PathLike)):
            raise NotebookParameterError(f"notebook parameter {key!r} must be a folder's path, not "
                                         f"{type(value).__name__} {value!r}: write -p {key} PATH")
    injected, own = _papermill_cells(namespace)
    known = {*NOTEBOOK_PARAMETERS, *ProfileSpec.model_fields, *own}
    for name in injected:
        if name not in known and not name.startswith("PAPERMILL_"):
            close = difflib.get_close_matches(name, sorted(known), n=2)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise NotebookParameterError(
                f"unknown notebook parameter {name!r} (papermill -p): {hint}a parameter is a profile field "
                f"(-p top_k 3), overrides (-y 'overrides: {{top_k: 3}}') or one of {', '.join(NOTEBOOK_PARAMETERS)}")


def _papermill_cells(namespace: Mapping[str, Any]) -> tuple[list[str], set[str]]:
    """``(the names of papermill's injected cell, the names the notebook's parameters cell before it assigns)``, read
    from IPython's input history (``In``); nothing outside a kernel or without papermill."""
    history = namespace.get("In")
    if not isinstance(history, list):
        return [], set()
    for index in range(len(history) - 1, 0, -1):
        source = history[index]
        if isinstance(source, str) and source.startswith(PAPERMILL_HEADER + "\n"):
            previous = history[index - 1] if isinstance(history[index - 1], str) else ""
            return _assigned(source), set(_assigned(previous))
    return [], set()


def _assigned(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)]


def requested_overrides(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides a notebook asks for: its ``overrides`` mapping, plus every profile field assigned in its
    namespace (papermill ``-p``, an edited parameters cell) that :func:`setup` did not put there itself."""
    check_parameters(namespace)
    written = namespace.get(WRITTEN) or {}
    found = dict(namespace.get("overrides") or {})
    for key in ProfileSpec.model_fields:
        if key in namespace and key not in found and namespace[key] is not Ellipsis:
            if not (key in written and written[key] is namespace[key]):
                found[key] = namespace[key]
    return found


def resolve_profile(namespace: Mapping[str, Any]) -> tuple[Profile, Profile]:
    """``(the profile with the notebook's overrides, the profile itself)``: the profile loaded and validated once, the
    overrides applied on it (:meth:`~r2mad_lab.experiments.profiles.Profile.with_overrides`: a run setting by one
    ``RunSettings.replace``); the notebook's own parameters (the theory notebook's grid sizes) are valid extra keys."""
    name = str(namespace.get("profile") or "tiny")
    requested = requested_overrides(namespace)
    own = [k for k, v in namespace.items() if not k.startswith("_") and not callable(v)
           and not isinstance(v, ModuleType) and k not in NOTEBOOK_PARAMETERS]
    base = load_profile(name)
    return base.with_overrides(requested, extra_keys=own), base


@dataclass
class Session:
    """What a notebook works with after :func:`setup`: the experiment (None for notebooks without
    one), the artifact context, the profile name."""

    profile: str
    notebook: str
    ctx: ReportContext
    exp: ExperimentGrid | None = None
    filled: dict[str, Any] = field(default_factory=dict)
    #: The variant this run is (its overrides of the profile), or None for the profile itself.
    variant: Any = None
    #: The typed profile this notebook ran, its overrides applied.
    loaded: Profile | None = None

    @property
    def models(self) -> Sequence[ModelSpec]:
        return self.exp.models if self.exp is not None else ()

    def close(self) -> None:
        if self.exp is not None:
            self.exp.close()

    def what_this_shows(self, sentences: Iterable[str], title: str = "What this shows") -> None:
        """Display the closing "What this shows" section (sentences built from the numbers)."""
        from IPython.display import Markdown, display  # lazy: IPython only inside a notebook kernel

        display(Markdown(as_markdown(list(sentences), title=title)))


def setup(namespace: MutableMapping[str, Any], notebook: str, *, experiment: bool = True,
          progress: bool = True, benchmarks: bool = True) -> Session:
    """Load the profile with the notebook's overrides, quiet the logs, set the figure and display style, build the
    :class:`~r2mad_lab.reproduce.grid.ExperimentGrid` from the profile (``experiment=True``) and the artifact
    context; the profile's values go into ``namespace`` for the cells that follow. ``benchmarks=False``: a notebook
    without an experiment that reads no benchmark (the theory) lists none in its manifest. Last, what is alive (the
    imports, the profile, the grid) is frozen and the garbage collector set for batch work
    (:func:`r2mad_lab.reproduce.gc_settings.settle`)."""
    load_plugins()  # a plugin's benchmarks, policies and methods (R2MAD_PLUGINS), as in the runner and the CLI
    loaded, base = resolve_profile(namespace)
    quiet_logging()
    apply_style()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.max_colwidth", None)
    paths = {key: namespace.get(key) or PATH_DEFAULTS[key].format(profile=loaded.folder) for key in PATH_DEFAULTS}
    paths["data_dir"] = namespace.get("data_dir") or None
    values = loaded.parameters(paths)
    values.pop("profile", None)
    namespace.update(values)
    namespace[WRITTEN] = {key: namespace[key] for key in values}
    profile = loaded.name
    figures_dir = Path(paths["figures_dir"])
    # An override that changes what runs (reproduce --set, papermill -p, an edited parameters cell) makes this run a
    # variant: its artifacts go beside the profile's, never over them (r2mad_lab.reproduce.points).
    variant = points.detect(loaded, base)
    baseline_dir = points.profile_dir_of(figures_dir)
    if variant is not None:
        figures_dir = points.variant_dir(baseline_dir, variant.name)
        namespace["figures_dir"] = str(figures_dir)
        announce_variant(variant, figures_dir, baseline_dir)
    grid_paths = {"runs_dir": paths["runs_dir"], "cache_dir": paths["cache_dir"], "data_dir": paths["data_dir"]}
    if experiment:
        exp = ExperimentGrid.from_profile(loaded, progress=progress, **grid_paths)
        ctx = exp.report_context(profile, figures_dir, notebook=notebook)
    else:
        exp = None
        ctx = ReportContext(profile=profile, out_dir=figures_dir, notebook=notebook,
                            benchmarks=list(loaded.spec.benchmarks) if benchmarks else [], seeds=[loaded.spec.seed])
    if variant is not None:
        ctx.variant, ctx.baseline_dir = variant, baseline_dir
        baseline = None
        if exp is not None:
            exp.variant = variant
            baseline = ExperimentGrid.from_profile(base, **grid_paths)
        compare = comparison.TableComparer(
            ctx, variant, baseline, notebook_number=notebook.split("_", 1)[0],
            bootstrap_resamples=int(loaded.spec.bootstrap_resamples), seed=int(loaded.spec.seed))

        def after_table(table: Any, name: str) -> None:
            compare(table, name)
            # the label read back from what ran: each override as the table's cells' config.json recorded it
            comparison.record_executed(ctx, table, name, variant)

        ctx.after_table = after_table
    gc_settings.settle()  # the imports (matplotlib's by apply_style too), the profile and the grid stay: frozen
    return Session(profile=profile, notebook=notebook, ctx=ctx, exp=exp, filled=values, variant=variant,
                   loaded=loaded)


def announce_variant(variant: "points.Variant", figures_dir: Path, baseline_dir: Path) -> None:
    """The notebook's first output of a variant run: which variant, what it changes, where its outputs go."""
    display_path = points.shown_path
    text = (f"**Variant `{variant.name}` of profile {variant.profile}**: {variant.describe()}.  \n"
            f"Figures and tables go to `{display_path(figures_dir)}/`; the profile's own artifacts in "
            f"`{display_path(baseline_dir)}/` are not touched. Runs and the response cache are shared: every "
            f"generation the change does not affect is replayed. Each table is compared with the profile's "
            f"(`<table>{comparison.COMPARISON_SUFFIX}`).")
    try:
        from IPython.display import Markdown, display  # lazy: IPython only inside a notebook kernel

        display(Markdown(text))
    except ImportError:
        print(text)
