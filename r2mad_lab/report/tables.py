"""Tables: the paper-shaped :class:`Table` and its three renderings (CSV, Markdown, LaTeX).

Every table of the paper (Tables 1-10) has a counterpart made of a :class:`Table`: rows x columns of
values with optional 95% bootstrap CI bounds per cell. It renders as

- a tidy CSV (one row per cell: the row labels, the column label, ``value``, ``ci_low``,
  ``ci_high`` and, for a table with standard errors, ``se``: :data:`TIDY_VALUES`, the one owner of that layout, which
  every reader splits with :func:`tidy_labels`; :func:`read_table` rebuilds the table exactly),
- a Markdown pipe table (:func:`render_markdown`) and
- a LaTeX ``booktabs`` table (:func:`render_latex`);

accuracy cells read "0.522 [0.440, 0.604]". A value is bold only where the rule of docs/statistics.md ranks it: its row
beats every other row of its column block in a paired test on the same questions, Holm-adjusted over those comparisons
(the column's family), on at least the small-sample n per benchmark cell, and is not one of a group of rows equal by
construction (:meth:`Table.best_mask`); a table without per-question cells bolds nothing. Writing the files and
recording them in the manifest is :mod:`r2mad_lab.report.artifacts`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_core.data.benchmarks import display_name

#: The paper's four benchmarks -> the column names of its tables (the benchmark registry's display names).
PAPER_BENCHMARKS = ("math500", "mmlu_pro_economics", "mmlu_pro_engineering", "truthfulqa")
BENCHMARK_LABELS: dict[str, str] = {name: display_name(name) for name in PAPER_BENCHMARKS}
AVERAGE_LABEL = "Average"

Best = Literal["max", "min"]
#: The text of a table cell, row or panel for a model the profile did not run.
NOT_RUN = "not run in this profile"
#: The last columns of a tidy table's CSV, after its labels: the cell's value and its 95% CI, then (a table with
#: standard errors) :data:`TIDY_SE`.
TIDY_VALUES = ("value", "ci_low", "ci_high")
TIDY_SE = "se"


def tidy_labels(columns: Sequence[Any]) -> list[str] | None:
    """The label columns (row levels, then the column name) of a tidy CSV's header ``columns``: everything before
    :data:`TIDY_VALUES` and an optional trailing :data:`TIDY_SE`; None when the header is not a tidy table's."""
    names = [str(c) for c in columns]
    if names and names[-1] == TIDY_SE:
        names = names[:-1]
    if len(names) < len(TIDY_VALUES) + 1 or tuple(names[-len(TIDY_VALUES):]) != TIDY_VALUES:
        return None
    return names[:-len(TIDY_VALUES)]


def benchmark_label(benchmark: str) -> str:
    """The table name of a benchmark id from the benchmark registry (``mmlu_pro_economics`` ->
    ``Economics``; a registered toy benchmark -> its ``display_name``); anything else unchanged."""
    return display_name(benchmark)



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
    #: The standard error of each cell's estimate, the same estimate its CI is of (the field's convention: an SE
    #: beside every CI); shown after the interval (``0.637 [0.600, 0.670] SE 0.018``) in the Markdown and LaTeX.
    se: pd.DataFrame | None = None
    digits: int = 3
    best: Best | Mapping[str, Best] | None = None
    formats: Mapping[str, str] = field(default_factory=dict)
    show_index: bool = True
    float_spec: str | None = None
    #: (row, column) -> the run cells (``CellOutcome``) a value was computed from, when a grid built the table:
    #: a variant compares these cells with the profile's on the same questions (:mod:`r2mad_lab.reproduce.compare`).
    cells: Mapping[Any, Any] | None = field(default=None, repr=False, compare=False)
    #: Groups of row labels the recorded configuration makes the same computation: never bold (never ranked).
    equal_rows: Sequence[Sequence[Any]] = ()

    def __post_init__(self) -> None:
        for name in ("ci_low", "ci_high", "se"):
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
        with_ci = self.ci_low is not None and self.ci_high is not None
        return self._text(self.values.at[row, column], column, self.ci_low.at[row, column] if with_ci else None,
                          self.ci_high.at[row, column] if with_ci else None,
                          None if self.se is None else self.se.at[row, column])

    def _text(self, value: Any, column: Any, low: Any, high: Any, se: Any = None) -> str:
        if isinstance(value, str):
            return value
        if _is_missing(value):
            return "--"
        spec = self._spec(column)
        if isinstance(value, (float, np.floating)) and abs(float(value)) < 1e-12:
            value = 0.0  # float noise (a difference of equal sums) is 0, never "1.85e-17"
        if isinstance(value, np.generic):
            value = value.item()  # a numpy scalar prints as the number it is, never "np.int64(3)"
        if spec is None:
            if isinstance(value, bool) or isinstance(value, int):
                return str(value)
            spec = self.float_spec or f".{self.digits}f"
        text = format(value, spec)
        if low is not None and high is not None and not (_is_missing(low) or _is_missing(high)):
            text += f" [{format(low, spec)}, {format(high, spec)}]"
            if se is not None and not _is_missing(se):
                text += f" SE {format(se, spec)}"
        return text

    def text_frame(self) -> pd.DataFrame:
        """Every cell as its display text (same index and columns as ``values``), column by column (a cell at a
        time through ``.at`` was a large part of a rerun's table making)."""
        with_ci = self.ci_low is not None and self.ci_high is not None
        none = [None] * len(self.values)
        columns = []
        for position, column in enumerate(self.values.columns):
            values = self.values.iloc[:, position].tolist()
            lows = self.ci_low.iloc[:, position].tolist() if with_ci else none
            highs = self.ci_high.iloc[:, position].tolist() if with_ci else none
            errors = self.se.iloc[:, position].tolist() if self.se is not None else none
            columns.append([self._text(v, column, lo, hi, e)
                            for v, lo, hi, e in zip(values, lows, highs, errors, strict=False)])
        return pd.DataFrame(list(zip(*columns, strict=False)) if columns else [[] for _ in self.values.index],
                            index=self.values.index, columns=self.values.columns)

    def best_mask(self) -> pd.DataFrame:
        """True where a cell's row beats every other row of its column block (first-level row groups) by the rule:
        it holds the block's strictly best shown value (a tie is no win), and its paired tests against each other
        row on the same questions (:func:`r2mad_lab.report.inference.paired_estimate`: exact McNemar per benchmark,
        the stratified sign test for an Average), Holm-adjusted over those comparisons, are all below alpha in the
        better direction, with every benchmark cell at least :func:`~r2mad_lab.report.inference.minimum_n` questions.
        Never a row of an :attr:`equal_rows` group; nothing without the per-question :attr:`cells` (no test)."""
        mask = pd.DataFrame(False, index=self.values.index, columns=self.values.columns)
        if self.best is None:
            return mask
        for column in self.values.columns:
            direction = self.best if isinstance(self.best, str) else self.best.get(str(column))
            if direction not in (None, "max", "min"):
                raise ValueError(f"Table.best[{column!r}]: expected 'max' or 'min', found {direction!r}")
        if not self.cells:
            return mask
        groups: list[Any]
        if isinstance(self.values.index, pd.MultiIndex):
            # rows that differ only in their last level compete: (model, method) -> per model,
            # (model, benchmark, method) -> per model and benchmark
            keys = [tuple(label[:-1]) for label in self.values.index]
            groups = [np.array([k == key for k in keys]) for key in dict.fromkeys(keys)]
        else:
            groups = [np.ones(len(self.values), dtype=bool)]
        labels = list(self.values.index)
        equal = [set(map(_as_tuple, g)) for g in self.equal_rows]
        for column in self.values.columns:
            direction = self.best if isinstance(self.best, str) else self.best.get(str(column))
            if direction is None:
                continue
            if direction not in ("max", "min"):
                raise ValueError(f"Table.best[{column!r}]: expected 'max' or 'min', found {direction!r}")
            numeric = pd.to_numeric(self.values[column], errors="coerce").round(self.digits)
            for selector in groups:
                block = numeric[selector]
                if block.notna().sum() < 2:
                    continue  # a lone value is best of nothing
                target = block.max() if direction == "max" else block.min()
                hits = selector & (numeric == target).to_numpy()
                if hits.sum() != 1:  # a tie at the shown precision is bold nowhere
                    continue
                best = int(np.flatnonzero(hits)[0])
                if any(_as_tuple(labels[best]) in g and len(g) > 1 for g in equal):
                    continue  # equal by construction: never ranked
                others = [i for i in np.flatnonzero(selector & numeric.notna().to_numpy()) if i != best]
                if self._beats(labels[best], [labels[i] for i in others], column, direction):
                    mask.iloc[best, list(self.values.columns).index(column)] = True
        return mask

    def _beats(self, row: Any, others: Sequence[Any], column: Any, direction: str) -> bool:
        """Whether ``row`` beats each of ``others`` in ``column`` by the rule (:meth:`best_mask`)."""
        from r2mad_lab.report import inference, multiplicity

        mine = _per_question(self.cells.get((row, column)))
        if mine is None:
            return False
        sign = 1.0 if direction == "max" else -1.0
        tests = []
        for other in others:
            theirs = _per_question(self.cells.get((other, column)))
            if theirs is None:
                return False
            common = sorted(mine.keys() & theirs.keys())
            if not common:
                return False
            strata = [key[:2] for key in common]
            per_cell = pd.Series(strata).value_counts()
            if inference.too_small(int(per_cell.min()), inference.ALPHA, len(others)):
                return False  # below the small-sample n in some benchmark cell: no ranking
            a = [mine[k] for k in common]
            b = [theirs[k] for k in common]
            test = inference.paired_estimate(a, b, [f"{m} / {bm}" for m, bm in strata], n_bootstrap=2)
            if sign * test.difference <= 0:
                return False
            tests.append(test.p_value)
        return bool(tests) and all(p < inference.ALPHA for p in multiplicity.holm(tests))


def _per_question(outcomes: Any) -> dict[tuple, bool] | None:
    """(model, benchmark, sample_id) -> correct of a cell's run outcomes (None: no per-question record)."""
    if not outcomes:
        return None
    out = {}
    for o in outcomes if isinstance(outcomes, (list, tuple)) else [outcomes]:
        records = getattr(o, "records", None)
        if records is None:
            return None
        for r in records:
            out[(o.model.label, o.benchmark, r.sample_id)] = bool(r.correct)
    return out


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
    se: str | None = TIDY_SE,
    column_order: Sequence[Any] | None = None,
    **table_options: Any,
) -> Table:
    """A :class:`Table` from a tidy frame: ``rows`` columns become the row labels, ``column`` the
    table columns (in order of first appearance, or ``column_order``), ``value`` the cells,
    ``ci`` their interval bounds and ``se`` (when the frame has that column and ``ci`` is given) their standard
    errors."""
    keys = list(dict.fromkeys(tuple(r) for r in frame[list(rows)].itertuples(index=False, name=None)))
    columns = list(column_order) if column_order is not None else list(pd.unique(frame[column]))
    index: pd.Index = (pd.MultiIndex.from_tuples(keys, names=list(rows)) if len(rows) > 1
                       else pd.Index([k[0] for k in keys], name=rows[0]))

    def pivot(field_name: str) -> pd.DataFrame:
        text = frame[field_name].map(lambda v: isinstance(v, str)).any()  # e.g. "not run in this profile"
        out = pd.DataFrame(np.nan, index=index, columns=pd.Index(columns, name=column), dtype=object if text else float)
        for record in frame.to_dict("records"):
            key = tuple(record[r] for r in rows)
            if record[column] in columns:
                out.at[key if len(rows) > 1 else key[0], record[column]] = record[field_name]
        return out

    errors = pivot(se).astype(float) if ci and se and se in frame.columns else None
    return Table(values=pivot(value), ci_low=pivot(ci[0]) if ci else None, ci_high=pivot(ci[1]) if ci else None,
                 se=errors, **table_options)


def table_to_tidy(table: Table) -> pd.DataFrame:
    """One row per cell: the row labels, ``column``, ``value``, ``ci_low``, ``ci_high`` (row-major order) and, when the
    table has standard errors, the cells' ``se`` last (:data:`TIDY_VALUES`, :data:`TIDY_SE`)."""
    row_names = _row_names(table.values.index)
    column_name = table.values.columns.name or "column"
    if column_name in row_names:
        raise ValueError(f"Table: the column axis name {column_name!r} repeats a row level name {row_names}")
    records = []
    for row in table.values.index:
        for column in table.values.columns:
            record = dict(zip(row_names, _as_tuple(row), strict=False))
            record[column_name] = column
            record["value"] = table.values.at[row, column]
            record["ci_low"] = np.nan if table.ci_low is None else table.ci_low.at[row, column]
            record["ci_high"] = np.nan if table.ci_high is None else table.ci_high.at[row, column]
            if table.se is not None:
                record[TIDY_SE] = table.se.at[row, column]
            records.append(record)
    tail = [*TIDY_VALUES] + ([TIDY_SE] if table.se is not None else [])
    return pd.DataFrame.from_records(records, columns=[*row_names, column_name, *tail])


def table_from_tidy(tidy: pd.DataFrame, **table_options: Any) -> Table:
    """Inverse of :func:`table_to_tidy` (row and column order as they first appear; a trailing ``se`` column is the
    cells' standard errors)."""
    labels = tidy_labels(tidy.columns)
    if labels is None or len(labels) < 2:
        raise ValueError(
            f"tidy table: expected columns [<row levels>..., <column name>, {', '.join(TIDY_VALUES)}"
            f"[, {TIDY_SE}]], found {list(tidy.columns)}"
        )
    se_column = tidy.columns[-1] == TIDY_SE
    errors = tidy[TIDY_SE] if se_column else None
    tidy = tidy.drop(columns=[TIDY_SE]) if se_column else tidy
    row_names = labels[:-1]
    column_name = labels[-1]
    rows = list(dict.fromkeys(tuple(r) for r in tidy[row_names].itertuples(index=False, name=None)))
    columns = list(pd.unique(tidy[column_name]))
    if len(row_names) == 1:
        index: pd.Index = pd.Index([r[0] for r in rows], name=row_names[0])
    else:
        index = pd.MultiIndex.from_tuples(rows, names=row_names)

    def pivot(field_name: str) -> pd.DataFrame:
        frame = pd.DataFrame(index=index, columns=pd.Index(columns, name=column_name), dtype=object)
        for record in tidy.itertuples(index=False, name=None):
            record_map = dict(zip(tidy.columns, record, strict=False))
            key = tuple(record_map[n] for n in row_names)
            frame.at[key if len(row_names) > 1 else key[0], record_map[column_name]] = record_map[field_name]
        return frame.infer_objects()

    values = pivot("value")
    ci_low, ci_high = pivot("ci_low"), pivot("ci_high")
    has_ci = pd.to_numeric(tidy["ci_low"], errors="coerce").notna().any()
    se = None
    if errors is not None:
        tidy = tidy.assign(se=errors)
        se = pivot("se").astype(float)
    return Table(
        values=values,
        ci_low=ci_low.astype(float) if has_ci else None,
        ci_high=ci_high.astype(float) if has_ci else None,
        se=se,
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
    for row, row_texts, row_best in zip(table.values.index, texts.to_numpy(dtype=object).tolist(),
                                        mask.to_numpy(dtype=bool).tolist(), strict=False):
        cells = [esc(v) for v in _as_tuple(row)] if table.show_index else []
        for text, best in zip(row_texts, row_best, strict=False):
            text = esc(text)
            cells.append(f"**{text}**" if best else text)
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
    rows = zip(table.values.index, texts.to_numpy(dtype=object).tolist(), mask.to_numpy(dtype=bool).tolist(),
               strict=False)
    for position, (row, row_texts, row_best) in enumerate(rows):
        labels = _as_tuple(row)
        if n_levels > 1 and position > 0 and labels[0] != previous_group:
            lines.append(r"\midrule")
        previous_group = labels[0]
        cells = [latex_escape(v) for v in labels] if n_levels else []
        for text, best in zip(row_texts, row_best, strict=False):
            text = latex_escape(text)
            cells.append(rf"\textbf{{{text}}}" if best else text)
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


def with_not_run_rows(table: Table | None, models: Sequence[str], methods: Sequence[str],
                      columns: Sequence[str], *, caption: str = "") -> Table:
    """``table`` (rows (model, method)) with one row per (model, method) for each model of ``models``
    that the profile did not run, every cell :data:`NOT_RUN`; a new table when ``table`` is None.
    The rows name the paper's model, and nothing else stands under that name."""
    rows = [(model, method) for model in models for method in methods]
    if table is None:
        index = pd.MultiIndex.from_tuples(rows, names=["model", "method"])
        values = pd.DataFrame(NOT_RUN, index=index, columns=pd.Index(list(columns), name="benchmark"), dtype=object)
        return Table(values=values, caption=caption, best=None)
    if not rows:
        return table
    extra = pd.DataFrame(NOT_RUN, index=pd.MultiIndex.from_tuples(rows, names=table.values.index.names),
                         columns=table.values.columns, dtype=object)
    values = pd.concat([table.values.astype(object), extra])
    empty = pd.DataFrame(np.nan, index=extra.index, columns=table.values.columns)
    low = None if table.ci_low is None else pd.concat([table.ci_low, empty])
    high = None if table.ci_high is None else pd.concat([table.ci_high, empty])
    se = None if table.se is None else pd.concat([table.se, empty])
    return Table(values=values, ci_low=low, ci_high=high, se=se, caption=caption or table.caption, digits=table.digits,
                 best=table.best, formats=table.formats)


def time_cell(row: Mapping[str, Any], digits: int = 2) -> Any:
    """What a cost table shows for a cell's time per query: the seconds measured when its generations
    were made; ``"replayed"`` when every generation came from the cache (nothing was timed);
    ``"<s> (<p>% replayed)"`` when part did (the replayed part cost no time, so the number is a lower
    bound); ``"not timed (simulated)"`` for simulated agents, whose wall time is bookkeeping."""
    if row.get("engine") == "simulated":
        return "not timed (simulated)"
    share = row.get("replayed_share", 0.0)
    seconds = row.get("seconds_per_query", math.nan)
    if share is None or (isinstance(share, float) and math.isnan(share)):
        share = 0.0
    if share >= 1.0:
        return "replayed"
    if share > 0.0:
        return f"{seconds:.{digits}f} ({share:.0%} replayed)"
    return float(seconds)
