"""Artifacts: the files a notebook writes into ``figures/<profile>/``, their manifest, the figure style.

Tables (:mod:`r2mad_lab.report.tables`) are written as ``<name>.csv``, ``<name>.md`` and ``<name>.tex``,
figures as ``<name>.png`` and ``<name>.pdf``; names follow the paper's labels with ``:`` and ``-``
turned into ``_`` (``tab:mad-m2`` -> ``tab_mad_m2``, :func:`artifact_name`).

Each artifact is recorded in ``figures/<profile>/MANIFEST.json`` with the profile, models,
benchmarks, sample counts, seeds and the git commit that produced it. Every file is written by the
package's one helper :func:`r2mad_core.files.atomic_write` (a temporary file beside the target, fsync,
``os.replace``), and the manifest is updated under its one lock :func:`r2mad_core.files.locked` (an
exclusive ``flock`` on the output folder itself), so notebooks that run one after another or side by
side never leave a file half written.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_core.files import atomic_write, locked
from r2mad_lab import CODE_PACKAGES
from r2mad_lab.report import inference, overlap
from r2mad_lab.report.tables import Table, render_latex, render_markdown, table_to_tidy
from r2mad_lab.report.volatile import same_but_volatile

logger = logging.getLogger(__name__)

MANIFEST_NAME = "MANIFEST.json"

#: Significant digits of every float in a table's CSV (for byte-identical artifacts across machines). What the
#: numbers support: accuracies are counts over at most a few thousand questions and the theory's figures Monte Carlo
#: or grid estimates; none is known to better than 1e-4 relative, and 6 digits still tell every k/n with n <= 1000
#: apart. The 16th-17th digits (``0.06877534159323767`` vs ``...768``) are the machine's floating point, not data.
TABLE_SIGNIFICANT_DIGITS = 6

#: ``savefig`` metadata per format: no creation time and no software version inside a PNG or PDF, so the same figure
#: saved twice, or on two machines with the same libraries, gives the same bytes.
SAVEFIG_METADATA = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
}


def artifact_name(paper_label: str) -> str:
    """File stem of a paper label: ``tab:mad-m2`` -> ``tab_mad_m2``."""
    return re.sub(r"[^0-9A-Za-z]+", "_", paper_label).strip("_")


# --------------------------------------------------------------------------------------------
# Writing files (the package's one atomic write and one lock: r2mad_core.files)
# --------------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """``value`` with paths, numpy scalars and NaN turned into plain JSON values (NaN -> null)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def display_path(path: str | Path) -> str:
    """A path as artifacts and notebook outputs show it: relative to the repository when inside it
    (``runs/sim``), else ``.../<last two parts>``: no machine paths in committed outputs."""
    path = Path(path)
    resolved = path.resolve()
    root = Path(__file__).resolve().parents[2]
    try:
        return resolved.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix() if not path.is_absolute() else ".../" + "/".join(resolved.parts[-2:])


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------


def git_commit(repo_dir: str | Path | None = None) -> dict[str, Any]:
    """``{"commit": <HEAD sha or "unknown">, "dirty": bool}`` of the repository holding this package."""
    cwd = Path(repo_dir) if repo_dir else Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            # the code and the notebooks' sources; the executed notebooks are outputs (written during the run)
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PACKAGES, "notebooks",
             ":(exclude)notebooks/executed"],
            cwd=cwd, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": False}
    return {"commit": head, "dirty": bool(status)}



def read_manifest(out_dir: str | Path) -> dict[str, Any]:
    """The manifest of ``out_dir`` (``{"artifacts": {}}`` when there is none yet)."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return {"artifacts": {}}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("artifacts"), dict):
        raise ValueError(f"{path}: expected an object with an 'artifacts' object, found {type(manifest).__name__}")
    return manifest



def update_manifest(out_dir: str | Path, name: str, record: Mapping[str, Any]) -> Path:
    """Set ``artifacts[name] = record`` in ``out_dir/MANIFEST.json``, atomically (lock + replace). The entry
    records the sha256 of each of its files (``sha256``); an entry whose files and fields are those of the one it
    replaces but for when and at which commit it was written (:data:`r2mad_lab.report.volatile.MANIFEST_VOLATILE`)
    is kept as it was, and the file is not rewritten: a rerun that changes no result leaves the manifest's bytes
    (and so the tree) clean. ``created`` and ``git`` are thus those of the run that last changed the artifact."""
    out_dir = Path(out_dir)
    path = out_dir / MANIFEST_NAME
    entry = jsonable(dict(record))
    digests = {f: hashlib.sha256((out_dir / f).read_bytes()).hexdigest()
               for f in entry.get("files", []) if (out_dir / f).is_file()}
    if digests:
        entry["sha256"] = digests
    with locked(out_dir):
        manifest = read_manifest(out_dir)
        old = manifest["artifacts"].get(name)
        if old is not None and path.exists() and same_but_volatile(old, entry):
            return path
        manifest["artifacts"][name] = entry
        manifest["artifacts"] = dict(sorted(manifest["artifacts"].items()))
        manifest["updated"] = _now()
        atomic_write(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return path


def missing_artifacts(out_dir: str | Path) -> list[str]:
    """Files listed in the manifest of ``out_dir`` that do not exist (``name: file``)."""
    out_dir = Path(out_dir)
    missing = []
    for name, record in read_manifest(out_dir)["artifacts"].items():
        for file_name in record.get("files", []):
            if not (out_dir / file_name).is_file():
                missing.append(f"{name}: {file_name}")
    return missing


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")



def _record(
    *,
    name: str,
    kind: str,
    files: Sequence[str],
    caption: str,
    profile: str,
    models: Sequence[str],
    benchmarks: Sequence[str],
    sample_counts: Mapping[str, Any],
    seeds: Sequence[int],
    notebook: str,
    paper_label: str | None,
    notes: str,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "paper_label": paper_label,
        "files": list(files),
        "caption": caption,
        "profile": profile,
        "models": list(models),
        "benchmarks": list(benchmarks),
        "sample_counts": dict(sample_counts),
        "seeds": list(seeds),
        "notebook": notebook,
        "git": git_commit(),
        "created": _now(),
        "notes": notes,
        **dict(extra),
    }


#: Below this magnitude a float is float noise (a difference of equal sums, 1.85e-17): written and shown as 0.
FLOAT_NOISE = 1e-12


def round_float(value: float, digits: int = TABLE_SIGNIFICANT_DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits, float noise (|x| < :data:`FLOAT_NOISE`) as 0 (NaN and
    infinities unchanged)."""
    if not math.isfinite(value):
        return value
    return 0.0 if abs(value) < FLOAT_NOISE else float(f"{value:.{digits}g}")


def round_floats(frame: pd.DataFrame, digits: int = TABLE_SIGNIFICANT_DIGITS) -> pd.DataFrame:
    """A copy of ``frame`` whose floats (float columns and floats inside object columns) carry ``digits``
    significant digits (:data:`TABLE_SIGNIFICANT_DIGITS`); other cells unchanged."""
    out = frame.copy()
    for column in range(out.shape[1]):
        series = out.iloc[:, column]
        if pd.api.types.is_float_dtype(series.dtype):
            out.iloc[:, column] = series.map(lambda v: round_float(float(v), digits))
        elif series.dtype == object:
            out.iloc[:, column] = series.map(
                lambda v: round_float(float(v), digits) if isinstance(v, (float, np.floating)) else v)
    return out


def save_table(
    table: Table | pd.DataFrame,
    name: str,
    out_dir: str | Path,
    *,
    caption: str | None = None,
    paper_label: str | None = None,
    profile: str | None = None,
    models: Sequence[str] = (),
    benchmarks: Sequence[str] = (),
    sample_counts: Mapping[str, Any] | None = None,
    seeds: Sequence[int] = (),
    notebook: str = "",
    notes: str = "",
    float_format: str | None = None,
    **extra: Any,
) -> list[Path]:
    """Write ``<name>.csv``, ``<name>.md`` and ``<name>.tex`` into ``out_dir`` and record them in
    its manifest; return the three paths.

    A :class:`Table` gets a tidy CSV (one row per cell, :func:`read_table` rebuilds it). A plain
    DataFrame is written flat (no index). CSV floats carry :data:`TABLE_SIGNIFICANT_DIGITS` significant digits;
    Markdown and LaTeX show the cells with ``float_format`` (e.g. ``"{:.4g}"``; default 3 decimals).
    """
    if isinstance(table, pd.DataFrame):
        spec = float_format.strip("{}").lstrip(":") if float_format else None
        table = Table(values=table.reset_index(drop=True), show_index=False, float_spec=spec)
    if caption is not None:
        table.caption = caption
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.csv", out_dir / f"{name}.md", out_dir / f"{name}.tex"]
    frame = table_to_tidy(table) if table.show_index else table.values
    csv_text = round_floats(frame).to_csv(index=False)
    atomic_write(paths[0], csv_text)
    markdown = render_markdown(table)
    if table.caption:
        markdown = f"{markdown}\n{table.caption}\n"
    atomic_write(paths[1], markdown)
    atomic_write(paths[2], render_latex(table, label=paper_label or name))
    record = _record(
        name=name, kind="table", files=[p.name for p in paths], caption=table.caption,
        profile=profile or out_dir.name, models=models, benchmarks=benchmarks,
        sample_counts=sample_counts or {}, seeds=seeds, notebook=notebook, paper_label=paper_label,
        notes=notes, extra=extra,
    )
    update_manifest(out_dir, name, record)
    logger.info("saved table %s", ", ".join(str(p) for p in paths))
    return paths


def save_figure(
    fig: Any,
    name: str,
    out_dir: str | Path,
    dpi: int = 150,
    *,
    caption: str = "",
    paper_label: str | None = None,
    profile: str | None = None,
    models: Sequence[str] = (),
    benchmarks: Sequence[str] = (),
    sample_counts: Mapping[str, Any] | None = None,
    seeds: Sequence[int] = (),
    notebook: str = "",
    notes: str = "",
    **extra: Any,
) -> list[Path]:
    """Write a matplotlib figure as ``<name>.png`` and ``<name>.pdf``, record it in the manifest,
    return the two paths. The manifest entry keeps every text the figure shows (``labels``: titles,
    axis labels, tick labels, legend entries, annotations), so what a figure names can be checked
    without looking at it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    for target in paths:
        kind = target.suffix.lstrip(".")
        atomic_write(target, lambda temporary, kind=kind: fig.savefig(
            temporary, format=kind, dpi=dpi, bbox_inches="tight", metadata=SAVEFIG_METADATA[kind]))
    extra = {"labels": figure_texts(fig), **extra}
    record = _record(
        name=name, kind="figure", files=[p.name for p in paths], caption=caption,
        profile=profile or out_dir.name, models=models, benchmarks=benchmarks,
        sample_counts=sample_counts or {}, seeds=seeds, notebook=notebook, paper_label=paper_label,
        notes=notes, extra=extra,
    )
    update_manifest(out_dir, name, record)
    logger.info("saved figure %s", ", ".join(str(p) for p in paths))
    return paths



def figure_texts(fig: Any) -> dict[str, list[str]]:
    """Every visible text of a matplotlib figure, by kind: ``titles`` (figure and axes titles),
    ``axes`` (axis labels), ``ticks``, ``legends`` (entries and titles), ``annotations``."""
    texts: dict[str, list[str]] = {"titles": [], "axes": [], "ticks": [], "legends": [], "annotations": []}

    def add(kind: str, artist: Any) -> None:
        text = artist.get_text() if hasattr(artist, "get_text") else str(artist)
        if text and (not hasattr(artist, "get_visible") or artist.get_visible()):
            texts[kind].append(text)

    if getattr(fig, "_suptitle", None) is not None:
        add("titles", fig._suptitle)
    for legend in getattr(fig, "legends", []):
        add("legends", legend.get_title())
        for entry in legend.get_texts():
            add("legends", entry)
    for artist in fig.texts:
        if artist is not getattr(fig, "_suptitle", None):
            add("annotations", artist)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for title in (ax.title, ax._left_title, ax._right_title):
            add("titles", title)
        add("axes", ax.xaxis.label)
        add("axes", ax.yaxis.label)
        for tick in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
            add("ticks", tick)
        legend = ax.get_legend()
        if legend is not None:
            add("legends", legend.get_title())
            for entry in legend.get_texts():
                add("legends", entry)
        for artist in ax.texts:
            add("annotations", artist)
    return texts


#: How a caption footnote names each limit (:data:`r2mad_lab.experiments.metrics.LIMIT_COUNTS`), in this order.
LIMIT_PHRASES = {
    "context_overflow": ("prompt did not fit the model's context", "prompts did not fit the model's context"),
    "context_capped": ("output was capped by the context", "outputs were capped by the context"),
    "max_tokens_cut": ("output was cut at max_tokens", "outputs were cut at max_tokens"),
    "unclosed_thinking": ("output stopped inside <think>", "outputs stopped inside <think>"),
    "trimmed_prompts": ("prompt fit only with experiences left out", "prompts fit only with experiences left out"),
}


def limits_summary(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals of the per-cell limit counts (``GridResults.limits()`` entries) for a manifest: every count,
    ``cells`` (how many), ``questions`` (questions with any limit) and ``hit``, the cells with any."""
    cells = [{k: v for k, v in dict(c).items() if k != "run_dir"} for c in cells]  # the runs: run_paths
    totals = {key: sum(int(c.get(key, 0)) for c in cells) for key in [*LIMIT_PHRASES, "questions"]}
    hit = [c for c in cells if any(int(c.get(key, 0)) for key in LIMIT_PHRASES)]
    return {"cells": len(cells), **totals, "cells_hit": len(hit), "hit": hit}


def limits_footnote(summary: Mapping[str, Any]) -> str:
    """The caption footnote of :func:`limits_summary`: ``""`` when no completion hit a limit, else e.g.
    "Limits: in 2 of 12 cells (5 questions), 3 prompts did not fit the model's context and 1 output was cut at
    max_tokens (counted apart; see the manifest)."."""
    parts = []
    for key, (one, many) in LIMIT_PHRASES.items():
        n = int(summary.get(key, 0))
        if n:
            parts.append(f"{n:,} {one if n == 1 else many}")
    if not parts:
        return ""
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    questions = int(summary.get("questions", 0))
    return (f"Limits: in {summary.get('cells_hit', 0)} of {summary.get('cells', 0)} cells "
            f"({questions:,} question{'' if questions == 1 else 's'}), {listed} (counted apart; see the manifest).")


#: What a manifest entry's ``runs`` lists (``runs_from``): the cells of the table itself, or, for a figure or a table
#: no grid built, every cell the notebook had run or loaded when it was saved (a superset of what it shows).
RUNS_FROM_TABLE = "the table's cells"
RUNS_FROM_NOTEBOOK = "every cell the notebook had run or loaded when this was saved"


def run_paths(run_dirs: Any, out_dir: str | Path) -> list[str]:
    """The run directories an artifact came from, as its manifest entry names them (``runs``): relative to the folder
    that holds ``figures/`` (``runs/sim/simulated/truthfulqa/<hash>``), sorted, each once; a run elsewhere is
    shown as :func:`display_path` does (no machine paths)."""
    out_dir = Path(out_dir).resolve()
    root = next((parent.parent for parent in [out_dir, *out_dir.parents] if parent.name == "figures"), None)
    paths = set()
    for run_dir in run_dirs:
        resolved = Path(run_dir).resolve()
        if root is not None and resolved.is_relative_to(root):
            paths.add(resolved.relative_to(root).as_posix())
        else:
            paths.add(display_path(run_dir))
    return sorted(paths)


def table_run_dirs(table: Any) -> list[Path] | None:
    """The run directories of the cells a grid built ``table`` from (:attr:`Table.cells`), or None (no cells known)."""
    cells = table.cells if isinstance(table, Table) else None  # a DataFrame's .cells would be a column
    if not cells:
        return None
    return [Path(outcome.run_dir) for outcomes in cells.values()
            for outcome in (outcomes if isinstance(outcomes, (list, tuple)) else [outcomes])
            if getattr(outcome, "run_dir", None) is not None]


def table_cell_runs(table: Any, out_dir: str | Path) -> list[dict[str, Any]] | None:
    """Per cell of a table built from run cells: its labels as the tidy CSV writes them (row levels, then the column)
    and its runs, each ``[stratum, run path]`` (stratum: ``model / benchmark``): what a sweep or replicate table
    reads to pair the same cell's questions across runs (:func:`r2mad_lab.reproduce.compare.tables.cell_outcomes`)."""
    cells = table.cells if isinstance(table, Table) else None
    if not cells:
        return None
    out = []
    for (row, column), outcomes in cells.items():
        outcomes = outcomes if isinstance(outcomes, (list, tuple)) else [outcomes]
        runs = [[f"{o.model.label} / {o.benchmark}", run_paths([o.run_dir], out_dir)[0]] for o in outcomes
                if getattr(o, "run_dir", None) is not None and getattr(o, "model", None) is not None]
        if runs:
            out.append({"cell": [str(v) for v in (row if isinstance(row, tuple) else (row,))] + [str(column)],
                        "runs": runs})
    return out


@dataclass
class ReportContext:
    """What every artifact of one notebook run shares: profile, output folder and provenance.

    ``ctx.save_table(table, "tab_main_results", paper_label="tab:main_results")`` writes the files
    and fills the manifest fields from the context (override any of them per call).
    """

    profile: str
    out_dir: Path
    notebook: str = ""
    models: Sequence[str] = ()
    benchmarks: Sequence[str] = ()
    seeds: Sequence[int] = ()
    sample_counts: Mapping[str, Any] = field(default_factory=dict)
    #: What ran, by engine and model (``ModelSpec.title``: "Simulated (simulated agents)"); every caption that does
    #: not already name each of them gets "Produced by: ..." appended, so no artifact hides what made it.
    engine_titles: Sequence[str] = ()
    #: The cells the artifacts are built from, for the limits footnote and the manifest's ``limits``: a callable
    #: returning ``GridResults.limits()``-style entries (the grid: every cell it ran or loaded so far). A save may
    #: pass ``limit_cells=`` (entries or a GridResults) to name its own cells; ``None`` here: no limits recorded.
    limit_cells: Any = None
    #: A variant of the profile (:class:`r2mad_lab.reproduce.points.Variant`): every caption ends with its note
    #: ("gamma = 0.5 (profile tiny: 0.9)"), every figure shows it, every manifest entry records it, and
    #: ``after_table(table, name)`` compares each table with the profile's (in ``baseline_dir``).
    variant: Any = None
    baseline_dir: Path | None = None
    after_table: Callable[[Any, str], None] | None = None

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)

    def with_limits(self, caption: str | None, overrides: dict[str, Any]) -> str | None:
        """``caption`` plus the limits footnote of the artifact's cells; their summary goes into ``overrides``
        (the manifest's ``limits``)."""
        cells = overrides.pop("limit_cells", None)
        if cells is None and self.limit_cells is not None:
            cells = self.limit_cells() if callable(self.limit_cells) else self.limit_cells
        if cells is None:
            return caption
        if hasattr(cells, "limits"):
            cells = cells.limits()
        if "runs" not in overrides:
            overrides["runs"] = run_paths([c["run_dir"] for c in cells if c.get("run_dir")], self.out_dir)
            overrides["runs_from"] = RUNS_FROM_NOTEBOOK
        summary = limits_summary(cells)
        overrides["limits"] = summary
        note = limits_footnote(summary)
        if not note:
            return caption
        return f"{caption.rstrip()} {note}" if caption and caption.strip() else note

    def with_engine_note(self, caption: str | None) -> str | None:
        """``caption`` plus "Produced by: <engine titles>." unless it names each of them already, plus the
        variant's note (its overrides with the profile's values) for a variant."""
        missing = [t for t in self.engine_titles if t not in (caption or "")]
        if missing:
            note = f"Produced by: {', '.join(self.engine_titles)}."
            caption = f"{caption.rstrip()} {note}" if caption and caption.strip() else note
        if self.variant is not None and self.variant.note() not in (caption or ""):
            caption = (f"{caption.rstrip()} {self.variant.note()}" if caption and caption.strip()
                       else self.variant.note())
        return caption

    def _fields(self, overrides: dict[str, Any]) -> dict[str, Any]:
        base = {
            "profile": self.profile,
            "models": self.models,
            "benchmarks": self.benchmarks,
            "seeds": self.seeds,
            "sample_counts": self.sample_counts,
            "notebook": self.notebook,
        }
        if self.variant is not None:
            base["variant"] = self.variant.record(self.baseline_dir)
        base.update(overrides)
        return base

    def with_sample_note(self, caption: str | None, overrides: Mapping[str, Any]) -> str | None:
        """``caption`` plus the small-sample line (:func:`r2mad_lab.report.inference.small_sample_line`) when a
        benchmark of the artifact has fewer questions than the smallest n with 80% power for any difference (before
        :meth:`with_engine_note`, so that a variant's note stays the caption's last sentence)."""
        counts = [c for c in (overrides.get("sample_counts") or self.sample_counts or {}).values()
                  if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if not counts or not inference.too_small(min(counts)):
            return caption
        line = inference.small_sample_line(min(counts), what="test questions per benchmark")
        if caption and line in caption:
            return caption
        return f"{caption.rstrip()} {line}" if caption and caption.strip() else line

    def save_table(self, table: Table | pd.DataFrame, name: str, **overrides: Any) -> list[Path]:
        own = table.caption if isinstance(table, Table) else None
        caption = overrides.get("caption", own)
        if isinstance(table, Table) and table.cells:  # rows that retrieved the same cases almost always are named
            caption = overlap.with_note(caption, [overlap.near_identical_note(table)])
        caption = self.with_engine_note(self.with_sample_note(caption, overrides))
        own_runs = table_run_dirs(table)
        if own_runs is not None and "runs" not in overrides:
            overrides["runs"], overrides["runs_from"] = run_paths(own_runs, self.out_dir), RUNS_FROM_TABLE
        cell_runs = table_cell_runs(table, self.out_dir)
        if cell_runs and "cell_runs" not in overrides:
            overrides["cell_runs"] = cell_runs
        overrides["caption"] = self.with_limits(caption, overrides)
        paths = save_table(table, name, self.out_dir, **self._fields(overrides))
        if self.after_table is not None:
            self.after_table(table, name)
        return paths

    def save_figure(self, fig: Any, name: str, **overrides: Any) -> list[Path]:
        caption = self.with_engine_note(self.with_sample_note(overrides.get("caption", ""), overrides))
        overrides["caption"] = self.with_limits(caption, overrides)
        if self.variant is not None and not any(self.variant.note() == t.get_text() for t in fig.texts):
            # the picture itself says which variant it is (a figure travels without its caption)
            fig.text(0.0, 1.0, self.variant.note(), ha="left", va="bottom", fontsize=8, color="tab:red",
                     wrap=True, transform=fig.transFigure)
        return save_figure(fig, name, self.out_dir, **self._fields(overrides))


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def apply_style() -> None:
    """The figure style of every notebook: seaborn whitegrid, paper context, readable fonts."""
    import matplotlib as mpl  # lazy: matplotlib/seaborn (notebooks extra) only for figures, not for the CLI
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper", font_scale=1.2)
    mpl.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold"})


def plot_grouped_bars(
    frame: pd.DataFrame,
    *,
    x: str,
    hue: str,
    value: str = "value",
    ci_low: str | None = "ci_low",
    ci_high: str | None = "ci_high",
    ax: Any = None,
    ylabel: str = "accuracy",
    title: str = "",
    ylim: tuple[float, float] | None = (0.0, 1.0),
    annotate: bool = True,
) -> Any:
    """Grouped bars (one group per ``x``, one bar per ``hue``) with 95% CI error bars.

    ``frame`` is tidy: one row per (x, hue) with ``value`` and optional CI columns. Groups and bars
    keep their order of first appearance. Returns the axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    groups = list(pd.unique(frame[x]))
    hues = list(pd.unique(frame[hue]))
    width = 0.8 / max(len(hues), 1)
    palette = plt.get_cmap("tab10")
    for position, hue_value in enumerate(hues):
        part = frame[frame[hue] == hue_value].set_index(x).reindex(groups)
        centers = np.arange(len(groups)) + (position - (len(hues) - 1) / 2) * width
        heights = part[value].astype(float).to_numpy()
        errors = None
        if ci_low and ci_high and ci_low in part and ci_high in part:
            low = part[ci_low].astype(float).to_numpy()
            high = part[ci_high].astype(float).to_numpy()
            errors = np.vstack([np.clip(heights - low, 0, None), np.clip(high - heights, 0, None)])
            errors = np.nan_to_num(errors)
        bars = ax.bar(
            centers, np.nan_to_num(heights), width=width * 0.95, label=str(hue_value),
            color=palette(position % 10), yerr=errors, capsize=3, error_kw={"elinewidth": 1},
        )
        if annotate:
            for bar, height in zip(bars, heights, strict=False):
                if not np.isnan(height):
                    ax.annotate(
                        f"{height:.2f}", (bar.get_x() + bar.get_width() / 2, 0.01 if ylim else 0),
                        ha="center", va="bottom", fontsize=7, color="white" if height > 0.08 else "black",
                    )
    ax.set_xticks(np.arange(len(groups)))
    ax.set_xticklabels([str(g) for g in groups])
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(ylim[0], ylim[1] * 1.02)
    if title:
        ax.set_title(title)
    ax.legend(title=hue.replace("_", " "), fontsize=8, title_fontsize=9, loc="center left",
              bbox_to_anchor=(1.01, 0.5), frameon=False)
    return ax
