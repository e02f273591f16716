"""The one setup every notebook runs: parameters from the profile, quiet logging, the experiment.

A notebook's ``parameters`` cell names its parameters with ``...`` as the value (and ``profile``
with the profile's name, ``tiny`` by default); ``make reproduce`` injects the chosen profile's values
after that cell (papermill). :func:`setup` then fills every parameter still ``...`` from the profile
named by ``profile`` (``r2mad_core/profiles/<profile>.yaml``, through
:func:`r2mad_core.reproduce.load_profile`), so the defaults live in one place: the profile files.
Paths default to ``../figures/<profile>``, ``../runs/<profile>`` and ``../cache/<profile>``
(notebooks run from ``notebooks/``).

Logging inside a notebook is quiet: ``r2mad_core`` logs only errors (what a notebook needs to say
it prints or tabulates from the numbers), chatty libraries only warnings; long steps show one
progress bar each (:meth:`r2mad_core.reproduce.grid.ExperimentGrid.grid`).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, MutableMapping, Sequence

import pandas as pd

from r2mad_core.reproduce import variants
from r2mad_core.report.artifacts import ReportContext, apply_style
from r2mad_core.reproduce.grid import ExperimentGrid
from r2mad_core.plugins import load_plugins
from r2mad_core.experiments.model_specs import ModelSpec
from r2mad_core.report.findings import as_markdown
from r2mad_core.reproduce import load_profile

#: Libraries whose INFO lines would fill a notebook.
CHATTY_LOGGERS = ("httpx", "httpcore", "urllib3", "filelock", "huggingface_hub", "sentence_transformers",
                  "matplotlib", "PIL", "numba")
PATH_DEFAULTS = {"figures_dir": "../figures/{profile}", "runs_dir": "../runs/{profile}", "cache_dir": "../cache/{profile}"}


def quiet_logging() -> None:
    """``r2mad_core`` logs errors only; chatty libraries warnings only; no root handler is added. tqdm's
    "IProgress not found" warning (no ipywidgets: the progress bars fall back to text) is not shown."""
    warnings.filterwarnings("ignore", message="IProgress not found")
    logging.getLogger("r2mad_core").setLevel(logging.ERROR)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def fill_parameters(namespace: MutableMapping[str, Any], profile: str | None = None) -> dict[str, Any]:
    """Replace every ``...`` value in ``namespace`` by the profile's field of that name (or its
    ``extra_parameters`` entry, or the default path); return the names filled and their values.

    An unknown name is an error naming the notebook parameter and the profile file."""
    name = str(profile or namespace.get("profile") or "tiny")
    pending = [key for key, value in namespace.items() if value is Ellipsis and not key.startswith("_")]
    if not pending:
        return {}
    loaded = load_profile(name)
    values = loaded.parameters({"data_dir": None, **{k: v.format(profile=loaded.name) for k, v in PATH_DEFAULTS.items()}})
    filled = {}
    for key in pending:
        if key not in values:
            raise KeyError(f"notebook parameter {key!r} = ...: {loaded.source} has no field {key!r} to fill it from")
        namespace[key] = filled[key] = values[key]
    return filled


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
          progress: bool = True) -> Session:
    """Fill the ``...`` parameters from the profile, quiet the logs, set the figure and display style,
    build the :class:`~r2mad_core.reproduce.grid.ExperimentGrid` (``experiment=True``) and the artifact context."""
    load_plugins()  # a plugin's benchmarks, policies and methods (R2MAD_PLUGINS), as in the runner and the CLI
    filled = fill_parameters(namespace)
    quiet_logging()
    apply_style()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.max_colwidth", None)
    profile = str(namespace.get("profile") or "tiny")
    figures_dir = Path(namespace.get("figures_dir") or PATH_DEFAULTS["figures_dir"].format(profile=profile))
    # A value that differs from the profile's (reproduce --set, papermill -p, an edited parameters cell) makes
    # this run a variant: its artifacts go beside the profile's, never over them (r2mad_core.reproduce.variants).
    variant = variants.detect(namespace, profile)
    baseline_dir = variants.profile_dir_of(figures_dir)
    if variant is not None:
        figures_dir = variants.variant_dir(baseline_dir, variant.name)
        namespace["figures_dir"] = str(figures_dir)
        announce_variant(variant, figures_dir, baseline_dir)
    if experiment:
        exp = ExperimentGrid.from_parameters(namespace, progress=progress)
        ctx = exp.report_context(profile, figures_dir, notebook=notebook)
    else:
        exp = None
        benchmarks = list(namespace.get("benchmarks") or [])
        ctx = ReportContext(profile=profile, out_dir=figures_dir, notebook=notebook, benchmarks=benchmarks,
                            seeds=[namespace["seed"]] if "seed" in namespace else [])
    if variant is not None:
        ctx.variant, ctx.baseline_dir = variant, baseline_dir
        baseline = None
        if exp is not None:
            exp.variant = variant
            reverted = {**namespace, **{k: b for k, (_, b) in variant.overrides.items() if k in namespace}}
            baseline = ExperimentGrid.from_parameters(reverted)
        ctx.after_table = variants.TableComparer(
            ctx, variant, baseline, notebook_number=notebook.split("_", 1)[0],
            bootstrap_resamples=int(namespace.get("bootstrap_resamples") or 1000), seed=int(namespace.get("seed") or 0))
    return Session(profile=profile, notebook=notebook, ctx=ctx, exp=exp, filled=filled, variant=variant)


def announce_variant(variant: "variants.Variant", figures_dir: Path, baseline_dir: Path) -> None:
    """The notebook's first output of a variant run: which variant, what it changes, where its outputs go."""
    display_path = variants.shown_path
    text = (f"**Variant `{variant.name}` of profile {variant.profile}**: {variant.describe()}.  \n"
            f"Figures and tables go to `{display_path(figures_dir)}/`; the profile's own artifacts in "
            f"`{display_path(baseline_dir)}/` are not touched. Runs and the response cache are shared: every "
            f"generation the change does not affect is replayed. Each table is compared with the profile's "
            f"(`<table>{variants.COMPARISON_SUFFIX}`).")
    try:
        from IPython.display import Markdown, display  # lazy: IPython only inside a notebook kernel

        display(Markdown(text))
    except ImportError:
        print(text)
