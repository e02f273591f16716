"""Report: the paper's tables and figures as files, a manifest, and the paper-vs-reproduced comparison.

Every table of the paper (Tables 1-10: ``tab:main_results`` ... ``tab:cost``) and every figure
(``fig:combined_eval``, ``fig:qwen3_eval``) gets a counterpart written by a notebook into
``figures/<profile>/``, named after the paper's label with ``:`` and ``-`` turned into ``_``
(``tab_main_results``, ``tab_mad_m2``):

- tables as a tidy CSV (one row per cell: the row labels, the column label, ``value``, ``ci_low``,
  ``ci_high``; :func:`read_table` rebuilds the table exactly), a Markdown pipe table and a LaTeX
  ``booktabs`` table; accuracy cells read "0.522 [0.440, 0.604]" (95% bootstrap CI) and the best
  value of each column is bold, as in the paper;
- figures as PNG and PDF.

Each artifact is recorded in ``figures/<profile>/MANIFEST.json`` with the profile, models,
benchmarks, sample counts, seeds and the git commit that produced it. The manifest is updated
atomically (a lock file, a temporary file, ``os.replace``), so notebooks that run one after
another or side by side never leave it half written.

The comparison with the paper reads every number the paper reports
(``r2mad_core/data/reported_results.csv``, transcribed from the paper's tables) and puts each
reproduced value beside it (:func:`compare_with_paper`). :func:`check_orderings` tests the
paper's claimed orderings (e.g. R2-MAD > MAD on average accuracy; full > w/o Confidence >
w/o Memory on Qwen2.5-7B-Instruct) on the reproduced per-question correctness, with an exact
McNemar test on the paired questions.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import logging
import math
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

MANIFEST_NAME = "MANIFEST.json"
REPORTED_RESULTS_RESOURCE = "reported_results.csv"

#: Benchmark ids of :mod:`r2mad_core.benchmarks` -> the column names of the paper's tables.
BENCHMARK_LABELS: dict[str, str] = {
    "math500": "MATH500",
    "mmlu_pro_economics": "Economics",
    "mmlu_pro_engineering": "Engineering",
    "truthfulqa": "TruthfulQA",
}
AVERAGE_LABEL = "Average"
#: The paper's "(both)" rows average over Qwen2.5-7B-Instruct and Gemma-3-4B-IT.
BOTH_MODELS_LABEL = "(both)"

Best = Literal["max", "min"]


def benchmark_label(benchmark: str) -> str:
    """The paper's name of a benchmark id (``mmlu_pro_economics`` -> ``Economics``); others unchanged."""
    return BENCHMARK_LABELS.get(benchmark, benchmark)


def artifact_name(paper_label: str) -> str:
    """File stem of a paper label: ``tab:mad-m2`` -> ``tab_mad_m2``."""
    return re.sub(r"[^0-9A-Za-z]+", "_", paper_label).strip("_")


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


@dataclass
class Table:
    """A paper-shaped table: rows x columns of values with optional 95% CI bounds per cell.

    ``values`` has the row labels as its index (a MultiIndex for grouped rows such as
    (model, method)) and one column per table column. ``ci_low``/``ci_high`` have the same shape
    (NaN where a cell has no interval). ``best`` marks the best value of each column in bold:
    ``"max"``/``"min"`` for every column, or a mapping column -> ``"max"``/``"min"``; with a
    MultiIndex the best is taken within each group of the first level (each model's block, as in
    the paper). ``formats`` maps a column to a format spec (default ``.{digits}f`` for floats;
    integers print as integers). ``show_index=False`` makes a flat table (a plain data frame: no
    row labels; its CSV is the frame itself rather than one row per cell).
    """

    values: pd.DataFrame
    ci_low: pd.DataFrame | None = None
    ci_high: pd.DataFrame | None = None
    caption: str = ""
    digits: int = 3
    best: Best | Mapping[str, Best] | None = None
    formats: Mapping[str, str] = field(default_factory=dict)
    show_index: bool = True
    float_spec: str | None = None

    def __post_init__(self) -> None:
        for name in ("ci_low", "ci_high"):
            frame = getattr(self, name)
            if frame is None:
                continue
            if frame.shape != self.values.shape:
                raise ValueError(
                    f"Table.{name}: expected shape {self.values.shape} like values, found {frame.shape}"
                )
            setattr(self, name, frame.reindex(index=self.values.index, columns=self.values.columns))

    # -- cell text ---------------------------------------------------------------------------
    def _spec(self, column: Any) -> str | None:
        return self.formats.get(str(column))

    def cell_text(self, row: Any, column: Any) -> str:
        """The text of one cell: ``0.522``, ``0.522 [0.440, 0.604]``, ``--`` for a missing value."""
        value = self.values.at[row, column]
        if isinstance(value, str):
            return value
        if _is_missing(value):
            return "--"
        spec = self._spec(column)
        if spec is None:
            if isinstance(value, (bool, np.bool_)) or isinstance(value, (int, np.integer)):
                return str(value)
            spec = self.float_spec or f".{self.digits}f"
        text = format(value, spec)
        if self.ci_low is not None and self.ci_high is not None:
            low, high = self.ci_low.at[row, column], self.ci_high.at[row, column]
            if not (_is_missing(low) or _is_missing(high)):
                text += f" [{format(low, spec)}, {format(high, spec)}]"
        return text

    def text_frame(self) -> pd.DataFrame:
        """Every cell as its display text (same index and columns as ``values``)."""
        return pd.DataFrame(
            [[self.cell_text(r, c) for c in self.values.columns] for r in self.values.index],
            index=self.values.index,
            columns=self.values.columns,
        )

    def best_mask(self) -> pd.DataFrame:
        """True where a cell holds its column's best value (within first-level row groups)."""
        mask = pd.DataFrame(False, index=self.values.index, columns=self.values.columns)
        if self.best is None:
            return mask
        groups: list[Any]
        if isinstance(self.values.index, pd.MultiIndex):
            level0 = self.values.index.get_level_values(0)
            groups = [level0 == key for key in pd.unique(level0)]
        else:
            groups = [np.ones(len(self.values), dtype=bool)]
        for column in self.values.columns:
            direction = self.best if isinstance(self.best, str) else self.best.get(str(column))
            if direction is None:
                continue
            if direction not in ("max", "min"):
                raise ValueError(f"Table.best[{column!r}]: expected 'max' or 'min', found {direction!r}")
            numeric = pd.to_numeric(self.values[column], errors="coerce").round(self.digits)
            for selector in groups:
                block = numeric[selector]
                if block.notna().sum() == 0:
                    continue
                target = block.max() if direction == "max" else block.min()
                hits = selector & (numeric == target).to_numpy()
                mask.loc[hits, column] = True
        return mask


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def _row_names(index: pd.Index) -> list[str]:
    names = list(index.names)
    if len(names) == 1:
        return [names[0] or "row"]
    return [name or f"level_{i}" for i, name in enumerate(names)]


def _as_tuple(label: Any) -> tuple:
    return label if isinstance(label, tuple) else (label,)


def table_to_tidy(table: Table) -> pd.DataFrame:
    """One row per cell: the row labels, ``column``, ``value``, ``ci_low``, ``ci_high`` (row-major order)."""
    row_names = _row_names(table.values.index)
    column_name = table.values.columns.name or "column"
    if column_name in row_names:
        raise ValueError(f"Table: the column axis name {column_name!r} repeats a row level name {row_names}")
    records = []
    for row in table.values.index:
        for column in table.values.columns:
            record = dict(zip(row_names, _as_tuple(row)))
            record[column_name] = column
            record["value"] = table.values.at[row, column]
            record["ci_low"] = np.nan if table.ci_low is None else table.ci_low.at[row, column]
            record["ci_high"] = np.nan if table.ci_high is None else table.ci_high.at[row, column]
            records.append(record)
    return pd.DataFrame.from_records(records, columns=[*row_names, column_name, "value", "ci_low", "ci_high"])


def table_from_tidy(tidy: pd.DataFrame, **table_options: Any) -> Table:
    """Inverse of :func:`table_to_tidy` (row and column order as they first appear)."""
    expected_tail = ["value", "ci_low", "ci_high"]
    if list(tidy.columns[-3:]) != expected_tail or tidy.shape[1] < 5:
        raise ValueError(
            f"tidy table: expected columns [<row levels>..., <column name>, {', '.join(expected_tail)}], "
            f"found {list(tidy.columns)}"
        )
    row_names = list(tidy.columns[:-4])
    column_name = tidy.columns[-4]
    rows = list(dict.fromkeys(tuple(r) for r in tidy[row_names].itertuples(index=False, name=None)))
    columns = list(pd.unique(tidy[column_name]))
    if len(row_names) == 1:
        index: pd.Index = pd.Index([r[0] for r in rows], name=row_names[0])
    else:
        index = pd.MultiIndex.from_tuples(rows, names=row_names)

    def pivot(field_name: str) -> pd.DataFrame:
        frame = pd.DataFrame(index=index, columns=pd.Index(columns, name=column_name), dtype=object)
        for record in tidy.itertuples(index=False, name=None):
            record_map = dict(zip(tidy.columns, record))
            key = tuple(record_map[n] for n in row_names)
            frame.at[key if len(row_names) > 1 else key[0], record_map[column_name]] = record_map[field_name]
        return frame.infer_objects()

    values = pivot("value")
    ci_low, ci_high = pivot("ci_low"), pivot("ci_high")
    has_ci = pd.to_numeric(tidy["ci_low"], errors="coerce").notna().any()
    return Table(
        values=values,
        ci_low=ci_low.astype(float) if has_ci else None,
        ci_high=ci_high.astype(float) if has_ci else None,
        **table_options,
    )


def render_markdown(table: Table) -> str:
    """A Markdown pipe table; best values in ``**bold**``; ``|`` inside cells escaped."""
    texts = table.text_frame()
    mask = table.best_mask()
    row_names = _row_names(table.values.index) if table.show_index else []
    header = [*row_names, *[str(c) for c in table.values.columns]]

    def esc(text: str) -> str:
        return str(text).replace("|", r"\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |"]
    lines.append("|" + "|".join([" --- "] * len(row_names) + [" ---: "] * len(table.values.columns)) + "|")
    for row in table.values.index:
        cells = [esc(v) for v in _as_tuple(row)] if table.show_index else []
        for column in table.values.columns:
            text = esc(texts.at[row, column])
            cells.append(f"**{text}**" if mask.at[row, column] else text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in str(text))


def render_latex(table: Table, *, label: str | None = None) -> str:
    """A ``booktabs`` table (needs ``\\usepackage{booktabs}``); bold best values; a ``\\midrule``
    between first-level row groups; caption and label when given."""
    texts = table.text_frame()
    mask = table.best_mask()
    row_names = _row_names(table.values.index) if table.show_index else []
    n_levels = len(row_names)
    spec = "l" * n_levels + ("|" if n_levels else "") + "c" * len(table.values.columns)
    lines = [r"\begin{table}[t]", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
    header = [latex_escape(h) for h in row_names] + [latex_escape(str(c)) for c in table.values.columns]
    lines.append(" & ".join(rf"\textbf{{{h}}}" for h in header) + r" \\")
    lines.append(r"\midrule")
    previous_group: Any = None
    for position, row in enumerate(table.values.index):
        labels = _as_tuple(row)
        if n_levels > 1 and position > 0 and labels[0] != previous_group:
            lines.append(r"\midrule")
        previous_group = labels[0]
        cells = [latex_escape(v) for v in labels] if n_levels else []
        for column in table.values.columns:
            text = latex_escape(texts.at[row, column])
            cells.append(rf"\textbf{{{text}}}" if mask.at[row, column] else text)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.caption:
        lines.append(rf"\caption{{{latex_escape(table.caption)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def parse_markdown_table(text: str) -> pd.DataFrame:
    """Read back a pipe table written by :func:`render_markdown` (cell texts, bold markers removed)."""
    rows = [line.strip() for line in text.strip().splitlines() if line.strip().startswith("|")]
    if len(rows) < 2:
        raise ValueError(f"markdown table: expected a header and a separator line, found {len(rows)} lines")

    def split(line: str) -> list[str]:
        cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        return [c.strip().replace(r"\|", "|").removeprefix("**").removesuffix("**") for c in cells]

    header = split(rows[0])
    body = [split(line) for line in rows[2:]]
    return pd.DataFrame(body, columns=header)


def parse_latex_table(text: str) -> list[list[str]]:
    """Cell texts of the body rows of a table written by :func:`render_latex` (header first)."""
    body = text.split(r"\toprule", 1)[1].split(r"\bottomrule", 1)[0]
    rows = []
    for line in body.splitlines():
        line = line.strip()
        if not line.endswith(r"\\"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)&", line[: -2])]
        cells = [re.sub(r"^\\textbf\{(.*)\}$", r"\1", c) for c in cells]
        rows.append([_latex_unescape(c) for c in cells])
    return rows


def _latex_unescape(text: str) -> str:
    for plain, escaped in sorted(_LATEX_SPECIALS.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(escaped, plain)
    return text


def read_table(path: str | Path, **table_options: Any) -> Table:
    """Rebuild a :class:`Table` from its tidy CSV (``<name>.csv`` written by :func:`save_table`)."""
    path = Path(path)
    try:
        tidy = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise ValueError(f"{path}: cannot read a table CSV: {exc}") from exc
    try:
        return table_from_tidy(tidy, **table_options)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------


def git_commit(repo_dir: str | Path | None = None) -> dict[str, Any]:
    """``{"commit": <HEAD sha or "unknown">, "dirty": bool}`` of the repository holding this package."""
    cwd = Path(repo_dir) if repo_dir else Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "r2mad_core", "notebooks"],
            cwd=cwd, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": False}
    return {"commit": head, "dirty": bool(status)}


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f".{MANIFEST_NAME}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    """Set ``artifacts[name] = record`` in ``out_dir/MANIFEST.json``, atomically (lock + replace)."""
    out_dir = Path(out_dir)
    path = out_dir / MANIFEST_NAME
    with _locked(out_dir):
        manifest = read_manifest(out_dir)
        manifest["artifacts"][name] = _jsonable(dict(record))
        manifest["artifacts"] = dict(sorted(manifest["artifacts"].items()))
        manifest["updated"] = _now()
        descriptor, temporary = tempfile.mkstemp(dir=out_dir, prefix=f".{MANIFEST_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=2, ensure_ascii=False)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
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


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


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
    DataFrame is written flat: its CSV is the frame at full precision (no index), Markdown and
    LaTeX show its cells with ``float_format`` (e.g. ``"{:.4g}"``; default 3 decimals).
    """
    if isinstance(table, pd.DataFrame):
        spec = float_format.strip("{}").lstrip(":") if float_format else None
        table = Table(values=table.reset_index(drop=True), show_index=False, float_spec=spec)
    if caption is not None:
        table.caption = caption
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.csv", out_dir / f"{name}.md", out_dir / f"{name}.tex"]
    csv_text = table_to_tidy(table).to_csv(index=False) if table.show_index else table.values.to_csv(index=False)
    _atomic_write(paths[0], csv_text)
    markdown = render_markdown(table)
    if table.caption:
        markdown = f"{markdown}\n{table.caption}\n"
    _atomic_write(paths[1], markdown)
    _atomic_write(paths[2], render_latex(table, label=paper_label or name))
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
    return the two paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    for target in paths:
        temporary = target.with_name(f".{target.stem}.tmp{target.suffix}")
        fig.savefig(temporary, dpi=dpi, bbox_inches="tight")
        os.replace(temporary, target)
    record = _record(
        name=name, kind="figure", files=[p.name for p in paths], caption=caption,
        profile=profile or out_dir.name, models=models, benchmarks=benchmarks,
        sample_counts=sample_counts or {}, seeds=seeds, notebook=notebook, paper_label=paper_label,
        notes=notes, extra=extra,
    )
    update_manifest(out_dir, name, record)
    logger.info("saved figure %s", ", ".join(str(p) for p in paths))
    return paths


def _atomic_write(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


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

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)

    def _fields(self, overrides: dict[str, Any]) -> dict[str, Any]:
        base = {
            "profile": self.profile,
            "models": self.models,
            "benchmarks": self.benchmarks,
            "seeds": self.seeds,
            "sample_counts": self.sample_counts,
            "notebook": self.notebook,
        }
        base.update(overrides)
        return base

    def save_table(self, table: Table | pd.DataFrame, name: str, **overrides: Any) -> list[Path]:
        return save_table(table, name, self.out_dir, **self._fields(overrides))

    def save_figure(self, fig: Any, name: str, **overrides: Any) -> list[Path]:
        return save_figure(fig, name, self.out_dir, **self._fields(overrides))


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def apply_style() -> None:
    """The figure style of every notebook: seaborn whitegrid, paper context, readable fonts."""
    import matplotlib as mpl
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
            for bar, height in zip(bars, heights):
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
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title)
    ax.legend(title=hue.replace("_", " "), fontsize=8, title_fontsize=9, ncols=min(len(hues), 4), loc="upper right")
    return ax


# --------------------------------------------------------------------------------------------
# The paper's numbers and the comparison
# --------------------------------------------------------------------------------------------

REPORTED_COLUMNS = ("table", "model", "method", "benchmark", "metric", "value")


def load_reported_results(path: str | Path | None = None) -> pd.DataFrame:
    """Every number the paper reports: columns table, model, method, benchmark, metric, value.

    Default: the packaged ``r2mad_core/data/reported_results.csv`` (leading ``#`` lines are its
    source note).
    """
    if path is None:
        text = resources.files("r2mad_core").joinpath("data", REPORTED_RESULTS_RESOURCE).read_text(encoding="utf-8")
        source = f"r2mad_core/data/{REPORTED_RESULTS_RESOURCE}"
    else:
        text = Path(path).read_text(encoding="utf-8")
        source = str(path)
    lines = text.splitlines()
    skip = 0
    while skip < len(lines) and lines[skip].startswith("#"):
        skip += 1
    import io

    frame = pd.read_csv(io.StringIO("\n".join(lines[skip:])))
    if tuple(frame.columns) != REPORTED_COLUMNS:
        raise ValueError(f"{source}: expected columns {list(REPORTED_COLUMNS)}, found {list(frame.columns)}")
    bad = pd.to_numeric(frame["value"], errors="coerce").isna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(
            f"{source}: row {row + skip + 2}, field 'value': expected a number, found {frame['value'].iloc[row]!r}"
        )
    frame["value"] = frame["value"].astype(float)
    return frame


def compare_with_paper(
    reproduced: pd.DataFrame,
    reported: pd.DataFrame | None = None,
    *,
    stand_ins: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Put each reproduced number beside the paper's.

    ``reproduced``: columns table (paper label, e.g. ``tab:main_results``), model, method, benchmark
    (paper name: ``MATH500``, ``Economics``, ..., ``Average``), metric, value, and optionally
    ci_low, ci_high, n. ``stand_ins`` maps a reproduced model to the paper model it stands in for
    (the cpu profile's SmolLM2 stands in for Qwen2.5-7B-Instruct). Returns one row per reproduced
    number: ..., ``paper_model``, ``reproduced``, ``paper`` (NaN when the paper has no such
    number), ``difference`` (reproduced - paper) and ``paper_within_ci``.
    """
    required = ["table", "model", "method", "benchmark", "metric", "value"]
    missing = [c for c in required if c not in reproduced.columns]
    if missing:
        raise ValueError(f"reproduced results: missing columns {missing}; found {list(reproduced.columns)}")
    reported = load_reported_results() if reported is None else reported
    stand_ins = dict(stand_ins or {})
    frame = reproduced.copy()
    for column in ("ci_low", "ci_high", "n"):
        if column not in frame:
            frame[column] = np.nan
    frame["paper_model"] = [stand_ins.get(m, m) for m in frame["model"]]
    paper = reported.rename(columns={"model": "paper_model", "value": "paper"})
    merged = frame.merge(paper, on=["table", "paper_model", "method", "benchmark", "metric"], how="left")
    merged = merged.rename(columns={"value": "reproduced"})
    merged["difference"] = merged["reproduced"] - merged["paper"]
    has_ci = merged["ci_low"].notna() & merged["ci_high"].notna() & merged["paper"].notna()
    within = (merged["paper"] >= merged["ci_low"]) & (merged["paper"] <= merged["ci_high"])
    merged["paper_within_ci"] = pd.Series(pd.NA, index=merged.index, dtype="boolean")
    merged.loc[has_ci, "paper_within_ci"] = within[has_ci]
    columns = [
        "table", "model", "paper_model", "method", "benchmark", "metric",
        "reproduced", "ci_low", "ci_high", "n", "paper", "difference", "paper_within_ci",
    ]
    return merged[columns + [c for c in merged.columns if c not in columns]]


@dataclass(frozen=True)
class OrderingClaim:
    """A claimed ordering of the paper: ``better`` beats ``worse`` on ``metric`` for ``paper_model``
    on ``benchmark`` (``Average`` = the mean of the per-benchmark values, as in the paper's tables).
    ``table`` is where the paper reports the numbers; ``text`` cites the paper."""

    table: str
    paper_model: str
    benchmark: str
    better: str
    worse: str
    metric: str = "accuracy"
    higher_is_better: bool = True
    text: str = ""


def _main_claims() -> list[OrderingClaim]:
    claims = []
    for model in ("Qwen2.5-7B-Instruct", "Qwen3-8B", "Gemma-3-4B-IT"):
        for baseline in ("CoT", "Self-Consistency", "MAD", "MAD-M2"):
            claims.append(OrderingClaim(
                "tab:main_results", model, AVERAGE_LABEL, "R2-MAD", baseline,
                text="RQ1: R2-MAD achieves the highest average accuracy on all three models.",
            ))
        claims.append(OrderingClaim(
            "tab:sc_ablation", model, AVERAGE_LABEL, "Self-Consistency (9)", "Self-Consistency (3)",
            text="App. C.2: average accuracy increases monotonically with the number of paths.",
        ))
    claims += [
        OrderingClaim("tab:ablation", "Qwen2.5-7B-Instruct", AVERAGE_LABEL, "R2-MAD", "R2-MAD w/o Confidence",
                      text="RQ2: removing confidence weighting drops 0.607 to 0.585."),
        OrderingClaim("tab:ablation", "Qwen2.5-7B-Instruct", AVERAGE_LABEL, "R2-MAD w/o Confidence",
                      "R2-MAD w/o Memory", text="RQ2: removing memory retrieval further drops it to 0.576."),
    ]
    for policy in ("Random", "Similarity-based", "Positive-only", "Diversity-only",
                   "Fixed-lambda (0.25)", "Fixed-lambda (0.50)", "Fixed-lambda (0.75)"):
        claims.append(OrderingClaim(
            "tab:retrieval_ablation", BOTH_MODELS_LABEL, AVERAGE_LABEL,
            "R2-MAD retrieval=Debate-State-Aware", f"R2-MAD retrieval={policy}",
            text="RQ3: the debate-state-aware policy attains the highest average accuracy (0.663).",
        ))
    for benchmark in ("Economics", "Engineering"):
        claims.append(OrderingClaim(
            "fig:combined_eval (text)", "Qwen2.5-7B-Instruct", benchmark, "R2-MAD", "MAD",
            metric="accuracy (shared-misconception subset)",
            text="RQ4: on the shared-misconception subset R2-MAD outperforms MAD.",
        ))
    claims += [
        OrderingClaim("tab:icl_cot", BOTH_MODELS_LABEL, AVERAGE_LABEL, "R2-MAD", "ICL-CoT",
                      text="App. C.5: R2-MAD matches or exceeds ICL-CoT."),
    ]
    for model in ("Llama-3.3-70B-Instruct", "GPT-4o-mini"):
        claims.append(OrderingClaim(
            "tab:large_models", model, AVERAGE_LABEL, "R2-MAD", "MAD",
            text="App. C.6: R2-MAD attains the best average accuracy on both larger models.",
        ))
    return claims


#: The orderings the paper claims in its text, checked by :func:`check_orderings`.
PAPER_ORDERING_CLAIMS: tuple[OrderingClaim, ...] = tuple(_main_claims())


def _paper_value(reported: pd.DataFrame, claim: OrderingClaim, method: str) -> float:
    base = reported[
        (reported["model"] == claim.paper_model)
        & (reported["method"] == method)
        & (reported["benchmark"] == claim.benchmark)
        & (reported["metric"] == claim.metric)
    ]
    in_table = base[base["table"] == claim.table]
    chosen = in_table if len(in_table) else base
    return float(chosen["value"].iloc[0]) if len(chosen) else float("nan")


def check_orderings(
    per_question: pd.DataFrame,
    claims: Sequence[OrderingClaim] = PAPER_ORDERING_CLAIMS,
    *,
    reported: pd.DataFrame | None = None,
    stand_ins: Mapping[str, str] | None = None,
    alpha: float = 0.05,
    n_bootstrap: int = 1000,
) -> pd.DataFrame:
    """Test the paper's claimed orderings on the reproduced per-question correctness.

    ``per_question``: one row per (model, method, benchmark, sample_id) with a boolean
    ``correct``; ``benchmark`` uses the paper's names; an optional ``metric`` column (default
    ``accuracy``) lets the shared-misconception subset be passed as
    ``accuracy (shared-misconception subset)`` rows. A claim is checked on the reproduced models
    that are (or stand in for) its paper model (``(both)``: every reproduced model), pairing the
    two methods on the questions both answered. The reproduced values are the mean of the
    per-benchmark accuracies for ``Average`` (as in the paper) and the accuracy otherwise; the
    exact McNemar test (:func:`r2mad_core.scoring.paired_test`) uses the paired questions pooled
    over benchmarks (and models, for ``(both)``).

    Returns one row per claim that could be checked: claim fields, ``paper_better``,
    ``paper_worse``, ``holds_in_paper``, ``reproduced_better``, ``reproduced_worse``,
    ``holds_here``, ``n_pairs``, ``better_only``, ``worse_only``, ``p_value``, ``significant``
    (holds here and p < alpha).
    """
    required = ["model", "method", "benchmark", "sample_id", "correct"]
    missing = [c for c in required if c not in per_question.columns]
    if missing:
        raise ValueError(f"per-question results: missing columns {missing}; found {list(per_question.columns)}")
    from r2mad_core.scoring import paired_test

    reported = load_reported_results() if reported is None else reported
    stand_ins = dict(stand_ins or {})
    frame = per_question.copy()
    if "metric" not in frame:
        frame["metric"] = "accuracy"
    frame["paper_model"] = [stand_ins.get(m, m) for m in frame["model"]]
    frame["correct"] = frame["correct"].astype(bool)
    rows = []
    for claim in claims:
        if not claim.metric.startswith("accuracy"):
            raise ValueError(f"check_orderings: claim metric must be an accuracy, found {claim.metric!r}")
        part = frame[frame["metric"] == claim.metric]
        if claim.paper_model != BOTH_MODELS_LABEL:
            part = part[part["paper_model"] == claim.paper_model]
        if claim.benchmark != AVERAGE_LABEL:
            part = part[part["benchmark"] == claim.benchmark]
        better = part[part["method"] == claim.better]
        worse = part[part["method"] == claim.worse]
        if better.empty or worse.empty:
            continue
        keys = ["model", "benchmark", "sample_id"]
        paired = better[keys + ["correct"]].merge(worse[keys + ["correct"]], on=keys, suffixes=("_better", "_worse"))
        if paired.empty:
            continue
        per_benchmark = paired.groupby(["model", "benchmark"], sort=False)[["correct_better", "correct_worse"]].mean()
        reproduced_better = float(per_benchmark["correct_better"].mean())
        reproduced_worse = float(per_benchmark["correct_worse"].mean())
        test = paired_test(
            paired["correct_better"].to_numpy(), paired["correct_worse"].to_numpy(), n_bootstrap=n_bootstrap
        )
        better_only, worse_only, p_value = test.only_a_correct, test.only_b_correct, test.p_value
        paper_better = _paper_value(reported, claim, claim.better)
        paper_worse = _paper_value(reported, claim, claim.worse)
        sign = 1.0 if claim.higher_is_better else -1.0
        holds_in_paper = (
            bool(sign * (paper_better - paper_worse) > 0)
            if not (math.isnan(paper_better) or math.isnan(paper_worse)) else pd.NA
        )
        holds_here = bool(sign * (reproduced_better - reproduced_worse) > 0)
        rows.append({
            "table": claim.table, "paper_model": claim.paper_model, "benchmark": claim.benchmark,
            "metric": claim.metric, "better": claim.better, "worse": claim.worse,
            "paper_better": paper_better, "paper_worse": paper_worse, "holds_in_paper": holds_in_paper,
            "reproduced_better": reproduced_better, "reproduced_worse": reproduced_worse,
            "holds_here": holds_here, "n_pairs": len(paired), "better_only": better_only,
            "worse_only": worse_only, "p_value": p_value, "significant": bool(holds_here and p_value < alpha),
            "claim": claim.text,
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# Helpers the notebooks share
# --------------------------------------------------------------------------------------------


def profile_samples(
    benchmarks: Sequence[str], split: str, limit: int | None, data_dir: str | Path | None = None
) -> dict[str, list[Any]]:
    """The first ``limit`` questions (None: all) of ``split`` for each benchmark, in the split's
    seeded order (:func:`r2mad_core.benchmarks.load`), so every notebook uses the same subset."""
    from r2mad_core.benchmarks import load

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit: expected a positive integer or None, found {limit!r}")
    return {name: load(name, split, data_dir)[:limit] for name in benchmarks}
