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
BOTH_MODELS = ("Qwen2.5-7B-Instruct", "Gemma-3-4B-IT")

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
    MultiIndex the best is taken among the rows that differ only in their last level (each model's
    block of methods, as in the paper). ``formats`` maps a column to a format spec (default ``.{digits}f`` for floats;
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
            # rows that differ only in their last level compete: (model, method) -> per model,
            # (model, benchmark, method) -> per model and benchmark
            keys = [tuple(label[:-1]) for label in self.values.index]
            groups = [np.array([k == key for k in keys]) for key in dict.fromkeys(keys)]
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


def tidy_to_table(
    frame: pd.DataFrame,
    rows: Sequence[str],
    column: str,
    *,
    value: str = "accuracy",
    ci: tuple[str, str] | None = ("ci_low", "ci_high"),
    column_order: Sequence[Any] | None = None,
    **table_options: Any,
) -> Table:
    """A :class:`Table` from a tidy frame: ``rows`` columns become the row labels, ``column`` the
    table columns (in order of first appearance, or ``column_order``), ``value`` the cells and
    ``ci`` their interval bounds."""
    keys = list(dict.fromkeys(tuple(r) for r in frame[list(rows)].itertuples(index=False, name=None)))
    columns = list(column_order) if column_order is not None else list(pd.unique(frame[column]))
    index: pd.Index = (pd.MultiIndex.from_tuples(keys, names=list(rows)) if len(rows) > 1
                       else pd.Index([k[0] for k in keys], name=rows[0]))

    def pivot(field_name: str) -> pd.DataFrame:
        out = pd.DataFrame(np.nan, index=index, columns=pd.Index(columns, name=column))
        for record in frame.to_dict("records"):
            key = tuple(record[r] for r in rows)
            if record[column] in columns:
                out.at[key if len(rows) > 1 else key[0], record[column]] = record[field_name]
        return out

    return Table(values=pivot(value), ci_low=pivot(ci[0]) if ci else None, ci_high=pivot(ci[1]) if ci else None,
                 **table_options)


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
    numeric = [pd.api.types.is_numeric_dtype(table.values[c]) for c in table.values.columns]
    lines.append("|" + "|".join([" --- "] * len(row_names) + [" ---: " if n else " --- " for n in numeric]) + "|")
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
    """An exclusive ``flock`` on the output folder itself (no lock file left among the artifacts)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


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
        ax.set_ylim(ylim[0], ylim[1] * 1.02)
    if title:
        ax.set_title(title)
    ax.legend(title=hue.replace("_", " "), fontsize=8, title_fontsize=9, loc="center left",
              bbox_to_anchor=(1.01, 0.5), frameon=False)
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
    (the cpu profile's SmolLM2 stands in for Qwen2.5-7B-Instruct); a ``paper_model`` column, when
    present, takes precedence. Returns one row per reproduced
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
    mapped = pd.Series([stand_ins.get(m, m) for m in frame["model"]], index=frame.index)
    frame["paper_model"] = frame["paper_model"].fillna(mapped) if "paper_model" in frame else mapped
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
    that are (or stand in for) its paper model (``(both)``: those standing for Qwen2.5-7B-Instruct
    or Gemma-3-4B-IT), pairing the
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
    mapped = pd.Series([stand_ins.get(m, m) for m in frame["model"]], index=frame.index)
    frame["paper_model"] = frame["paper_model"].fillna(mapped) if "paper_model" in frame else mapped
    frame["correct"] = frame["correct"].astype(bool)
    rows = []
    for claim in claims:
        if not claim.metric.startswith("accuracy"):
            raise ValueError(f"check_orderings: claim metric must be an accuracy, found {claim.metric!r}")
        part = frame[frame["metric"] == claim.metric]
        if claim.paper_model == BOTH_MODELS_LABEL:
            part = part[part["paper_model"].isin(BOTH_MODELS)]
        else:
            part = part[part["paper_model"] == claim.paper_model]
        if claim.benchmark != AVERAGE_LABEL:
            part = part[part["benchmark"] == claim.benchmark]
        better = part[part["method"] == claim.better]
        worse = part[part["method"] == claim.worse]
        if better.empty or worse.empty:
            continue
        keys = ["model", "paper_model", "benchmark", "sample_id"]
        paired = better[keys + ["correct"]].merge(worse[keys + ["correct"]], on=keys, suffixes=("_better", "_worse"))
        if paired.empty:
            continue
        per_benchmark = paired.groupby(["model", "paper_model", "benchmark"], sort=False)[["correct_better", "correct_worse"]].mean()
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


def slug(text: str) -> str:
    """A file-name-safe form of a label: ``R2-MAD w/o Memory`` -> ``r2-mad-w-o-memory``."""
    return re.sub(r"[^0-9a-z.]+", "-", str(text).lower()).strip("-") or "x"


def config_hash(payload: Any, length: int = 12) -> str:
    """First ``length`` hex digits of SHA-256 of the canonical JSON of ``payload``."""
    import hashlib

    blob = json.dumps(_jsonable(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


def mean_accuracy_with_ci(
    groups: Sequence[Sequence[bool]], *, level: float = 0.95, n_bootstrap: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """The paper's "Average" column: the mean of per-benchmark accuracies, with a percentile
    bootstrap CI that resamples the questions of each benchmark independently.

    Resampling n Bernoulli outcomes and averaging is a Binomial(n, p_hat)/n draw, so each
    replicate is the mean over benchmarks of one such draw per benchmark. Returns
    ``(mean, low, high)``; NaNs when a group is empty.
    """
    arrays = [np.asarray(g, dtype=bool) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    replicates = np.zeros(n_bootstrap)
    for outcomes in arrays:
        replicates += rng.binomial(outcomes.size, outcomes.mean(), size=n_bootstrap) / outcomes.size
    replicates /= len(arrays)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return (float(np.mean([a.mean() for a in arrays])), float(low), float(high))


# --------------------------------------------------------------------------------------------
# Running the paper's grid of (model, benchmark, method) cells
# --------------------------------------------------------------------------------------------

#: Retrieval policies of Table 3: profile spelling -> the paper's row name.
RETRIEVAL_POLICY_LABELS = {
    "random": "Random",
    "similarity": "Similarity-based",
    "positive_only": "Positive-only",
    "diversity_only": "Diversity-only",
    "state_aware": "Debate-State-Aware",
}


def retrieval_policy_label(spec: str) -> str:
    """``fixed_lambda:0.25`` -> ``Fixed-lambda (0.25)``; ``state_aware`` -> ``Debate-State-Aware``."""
    from r2mad_core.reproduce import parse_retrieval_policy

    name, value = parse_retrieval_policy(spec)
    if name == "fixed_lambda":
        return f"Fixed-lambda ({value:.2f})"
    return RETRIEVAL_POLICY_LABELS[name]


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
        return {"label": self.label, "engine": self.engine, "model": self.model,
                "options": options, "environment": dict(self.environment)}


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
        self._engines: dict[str, Any] = {}
        self._engine_kinds: dict[str, str] = {}
        self._samples: dict[tuple[str, str], list[Any]] = {}

    #: Notebook parameters :meth:`from_parameters` reads (the names of the profile fields).
    PARAMETERS = (
        "models", "benchmarks", "runs_dir", "cache_dir", "data_dir", "embedder", "test_limit", "train_limit",
        "seed", "num_agents", "num_rounds", "temperature", "top_p", "max_tokens", "summary_max_tokens",
        "max_experience_chars", "top_k",
        "gamma", "w_high", "w_low", "bootstrap_resamples",
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
            "runs": str(self.runs_dir),
            "response cache": str(self.cache_dir),
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
            self._samples[key] = profile_samples([benchmark], split, limit, self.data_dir)[benchmark]
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
        """``(registered method name, options)`` of a paper method name."""
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
                policy = _retrieval_spec(label)
                name, _, value = policy.partition(":")
                if name != "state_aware":
                    options["retrieval_policy"] = name
                if value:
                    options["fixed_lambda"] = float(value)
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
    def memory_config(self, spec: ModelSpec, benchmark: str) -> dict[str, Any]:
        return {
            "benchmark": benchmark, "split": "train", "limit": self.train_limit, "seed": self.seed,
            "n_agents": self.num_agents, "n_rounds": self.num_rounds, "summary_max_tokens": self.summary_max_tokens,
            "embedder": self.embedder, "model": spec.describe(), **self.sampling,
        }

    def memory_dir(self, spec: ModelSpec, benchmark: str) -> Path:
        config = self.memory_config(spec, benchmark)
        return self.runs_dir / slug(spec.label) / benchmark / f"memory-{config_hash(config)}"

    def memory(self, spec: ModelSpec | str, benchmark: str) -> Path:
        """The memory bank directory of (model, benchmark), built from the train split if missing
        (Appendix A: a forced 3-round MAD with summaries on each training question)."""
        from r2mad_core.r2mad import build_memory

        spec = self.model(spec) if isinstance(spec, str) else spec
        directory = self.memory_dir(spec, benchmark)
        if (directory / "manifest.json").exists():
            return directory
        directory.mkdir(parents=True, exist_ok=True)
        write_json = _atomic_write
        write_json(directory / "build_config.json", json.dumps(_jsonable(self.memory_config(spec, benchmark)), indent=2))
        build_memory(
            benchmark, self.engine(spec), self.embedder, directory, limit=self.train_limit, split="train",
            seed=self.seed, n_agents=self.num_agents, n_rounds=self.num_rounds,
            summary_max_tokens=self.summary_max_tokens, data_dir=self.data_dir,
            samples=self.samples(benchmark, "train"), progress=self.progress, overwrite=True, **self.sampling,
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
        from r2mad_core.experiments import load_run, run_cell
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
            data_dir=self.data_dir, progress=self.progress,
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
        outcomes = []
        for spec in specs:
            for benchmark in benchmarks or self.benchmarks:
                for method in methods:
                    outcome = self.run(spec, benchmark, method)
                    logger.info("%s / %s / %s: accuracy %.3f (n=%d, %d new)", spec.label, benchmark, method,
                                outcome.metrics["accuracy"], len(outcome.records), outcome.n_new)
                    outcomes.append(outcome)
        return GridResults(outcomes, bootstrap_resamples=self.bootstrap_resamples, seed=self.seed)


def _retrieval_spec(label: str) -> str:
    for spec, text in RETRIEVAL_POLICY_LABELS.items():
        if text == label:
            return spec
    fixed = re.fullmatch(r"Fixed-lambda \(([0-9.]+)\)", label)
    if fixed:
        return f"fixed_lambda:{float(fixed.group(1))}"
    raise ValueError(f"unknown retrieval policy {label!r}: expected one of {list(RETRIEVAL_POLICY_LABELS.values())} "
                     "or Fixed-lambda (x)")


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
            for t in range(horizon):
                right = count = 0
                for record in records:
                    agents = record["rounds"][min(t, len(record["rounds"]) - 1)]["agents"]
                    right += sum(1 for a in agents if a["correct"])
                    count += len(agents)
                rows.append({"model": o.model.label, "paper_model": o.model.paper_model,
                             "benchmark": benchmark_label(o.benchmark), "method": o.method, "round": t,
                             "agent_accuracy": right / count if count else math.nan, "answers": count})
        return pd.DataFrame(rows)

    def cost(self, methods: Sequence[str]) -> pd.DataFrame:
        """Per-query cost of each cell (Table 10): prompt/completion tokens per tag, requests,
        wall seconds per query (measured when the generations were made)."""
        rows = []
        for o in self.outcomes:
            if o.method not in methods:
                continue
            tokens = o.metrics.get("tokens_per_query", {})
            row = {"model": o.model.label, "paper_model": o.model.paper_model,
                   "benchmark": benchmark_label(o.benchmark), "method": o.method, "n": o.metrics["n"],
                   "seconds_per_query": o.metrics.get("seconds_per_query", math.nan)}
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


def pooled_average_rows(results: GridResults, methods: Sequence[str], table_label: str) -> pd.DataFrame:
    """The paper's ``(both)`` rows: for each method, the mean accuracy over every (model, benchmark)
    cell of ``results`` with a bootstrap CI (Tables 3 and 8 average two models)."""
    rows = []
    questions = results.per_question()
    for method in methods:
        mine = questions[questions["method"] == method]
        if mine.empty:
            continue
        groups = [part["correct"].to_numpy() for _, part in mine.groupby(["model", "benchmark"], sort=False)]
        mean, low, high = mean_accuracy_with_ci(groups, n_bootstrap=results.bootstrap_resamples, seed=results.seed)
        rows.append({"table": table_label, "model": ", ".join(pd.unique(mine["model"])), "paper_model": BOTH_MODELS_LABEL,
                     "method": method, "benchmark": AVERAGE_LABEL, "metric": "accuracy", "value": mean,
                     "ci_low": low, "ci_high": high, "n": len(mine)})
    return pd.DataFrame(rows)


@dataclass
class Reproduction:
    """Every reproduced number in the paper's terms (:func:`collect_reproduction`)."""

    reproduced: pd.DataFrame  # table, model, paper_model, method, benchmark, metric, value, ci_low, ci_high, n
    per_question: pd.DataFrame  # model, paper_model, benchmark, method, sample_id, correct, metric
    grids: dict[str, GridResults]


def collect_reproduction(
    exp: Experiment,
    *,
    sc_paths: Sequence[int],
    retrieval_policies: Sequence[str],
    retrieval_models: Sequence[str],
    retrieval_benchmarks: Sequence[str],
    icl_models: Sequence[str],
    icl_benchmarks: Sequence[str],
    cost_benchmark: str,
    large_models: Sequence[Mapping[str, Any]] = (),
) -> Reproduction:
    """Run (or, after notebooks 03-07, load) every cell behind the paper's tables and put each number
    in the paper's terms: same table label, method and benchmark names, metric names as in
    ``reported_results.csv``, the paper model each reproduced model stands in for."""
    grids: dict[str, GridResults] = {}
    frames: list[pd.DataFrame] = []
    grids["tab:main_results"] = exp.grid(MAIN_METHODS)
    frames.append(grids["tab:main_results"].reproduced("tab:main_results", MAIN_METHODS))
    grids["tab:ablation"] = exp.grid(ABLATION_METHODS)
    frames.append(grids["tab:ablation"].reproduced("tab:ablation", ABLATION_METHODS))
    grids["tab:sc_ablation"] = exp.grid(sc_methods(sc_paths))
    frames.append(grids["tab:sc_ablation"].reproduced("tab:sc_ablation", sc_methods(sc_paths)))
    grids["tab:mad-m2"] = exp.grid(MAD_M2_METHODS)
    frames.append(grids["tab:mad-m2"].reproduced("tab:mad-m2", MAD_M2_METHODS))
    policies = [retrieval_method_label(p) for p in retrieval_policies]
    grids["tab:retrieval_ablation"] = exp.grid(policies, models=retrieval_models, benchmarks=retrieval_benchmarks)
    frames.append(grids["tab:retrieval_ablation"].reproduced("tab:retrieval_ablation", policies, with_average=False))
    frames.append(pooled_average_rows(grids["tab:retrieval_ablation"], policies, "tab:retrieval_ablation"))
    grids["tab:icl_cot"] = exp.grid(ICL_METHODS, models=icl_models, benchmarks=icl_benchmarks)
    frames.append(grids["tab:icl_cot"].reproduced("tab:icl_cot", ICL_METHODS, with_average=False))
    frames.append(pooled_average_rows(grids["tab:icl_cot"], ICL_METHODS, "tab:icl_cot"))
    if large_models:
        specs = [ModelSpec.from_entry(entry, exp.models) for entry in large_models]
        large = GridResults([], exp.bootstrap_resamples, exp.seed)
        for spec in specs:
            large = large + exp.grid(LARGE_MODEL_METHODS, models=[spec])
        grids["tab:large_models"] = large
        frames.append(large.reproduced("tab:large_models", LARGE_MODEL_METHODS))

    subset_runs = exp.grid(sorted(set(SUBSET_METHODS) | set(TRANSITION_METHODS)))
    grids["shared_misconception"] = subset_runs
    subset = subset_runs.subset_accuracy(SUBSET_METHODS)
    frames.append(subset.assign(table="fig:combined_eval (text)", metric=SUBSET_METRIC)
                  .rename(columns={"accuracy": "value"}))
    rates = subset_runs.transition_rates(TRANSITION_METHODS)
    for column, metric, count in (("c_to_w", C_TO_W_METRIC, "n_correct_before"), ("w_to_c", W_TO_C_METRIC, "n_wrong_before")):
        part = rates.assign(metric=metric, value=rates[column], n=rates[count], ci_low=np.nan, ci_high=np.nan)
        part["table"] = np.where(part["paper_model"] == "Qwen2.5-7B-Instruct", "tab:flip_recovery", "tab:flip_recovery_extra")
        frames.append(part)

    cost_runs = exp.grid(COST_METHODS, benchmarks=[cost_benchmark])
    grids["tab:cost"] = cost_runs
    cost = cost_runs.cost(COST_METHODS)
    for column, metric in (("debate_tokens", "debate tokens per query"), ("summary_tokens", "summary tokens per query"),
                           ("seconds_per_query", "wall seconds per query")):
        part = cost.assign(metric=metric, value=cost[column], table="tab:cost", ci_low=np.nan, ci_high=np.nan)
        if column == "summary_tokens":
            part = part[part["method"] == "R2-MAD"]
        frames.append(part)

    columns = ["table", "model", "paper_model", "method", "benchmark", "metric", "value", "ci_low", "ci_high", "n"]
    reproduced = pd.concat([f[columns] for f in frames if not f.empty], ignore_index=True)
    everything = GridResults([o for g in grids.values() for o in g.outcomes], exp.bootstrap_resamples, exp.seed)
    per_question = everything.per_question().drop_duplicates(["model", "paper_model", "benchmark", "method", "sample_id"])
    per_question = pd.concat([
        per_question.assign(metric="accuracy"),
        subset_runs.subset_per_question(SUBSET_METHODS),
    ], ignore_index=True)
    return Reproduction(reproduced=reproduced, per_question=per_question, grids=grids)
