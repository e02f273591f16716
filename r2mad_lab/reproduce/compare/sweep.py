"""Comparing a sweep's points: their tests, their table and their figure against the swept axes.

A sweep runs every point as a variant of the profile (:mod:`r2mad_lab.reproduce.points`) and draws each table's
metric against the first swept axis with its 95% CIs, one panel per column (e.g. per benchmark), one line per row and
value of the other axes (:func:`draw_sweep`), beside a table of the same numbers, one column per point, and a
table of the tests (``tab_sweep_<table>_paired``, the one rule of docs/statistics.md,
:mod:`r2mad_lab.report.inference`): each point's paired difference from the profile's point on the same questions (95%
CI, exact McNemar / the stratified sign test, Holm over the cell's points) and, along each numeric axis, a trend test
(the slope of the shown value, a paired permutation test with the question as its own stratum, Holm over the table's
cells).
:func:`sweep_artifacts` writes the three for every table the points share: the tests (:func:`sweep_tests`), the
frame (:func:`sweep_frame`, laid out as the table by :func:`sweep_values`) and the drawing (:func:`draw_sweep`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_lab.report import inference
from r2mad_lab.report.artifacts import apply_style, read_manifest, save_figure, save_table, update_manifest
from r2mad_lab.report.tables import TIDY_SE, TIDY_VALUES, Table
from r2mad_lab.reproduce.compare.tables import cell_outcomes, point_tables, quantity_of, tidy
from r2mad_lab.reproduce.points import Point, Variant, profile_dir_of, same_value, show_value


def _paired(a: dict[str, dict[str, bool]], b: dict[str, dict[str, bool]]) -> tuple[list[bool], list[bool], list[str]]:
    """The two runs' outcomes on the questions both answered, with their strata."""
    xs, ys, strata = [], [], []
    for stratum in a:
        if stratum not in b:
            continue
        for sample in sorted(set(a[stratum]) & set(b[stratum])):
            xs.append(a[stratum][sample])
            ys.append(b[stratum][sample])
            strata.append(stratum)
    return xs, ys, strata


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def sweep_tests(points: Sequence[Point], reference: Point, table: str, keys: Sequence[str], *,
                seed: int = 0) -> tuple[pd.DataFrame | None, str]:
    """The tests of one swept table: per cell and point (the reference, the profile's point, left out) the paired
    difference from the reference on the same questions with its 95% CI and test, p_holm over the cell's points;
    per cell and numeric axis the trend slope and its paired permutation p, p_holm over the table's cells. Returns
    the frame (None: the runs' outcomes are not readable) and the sentence for the captions."""
    cache: dict[str, dict[str, bool]] = {}
    reference_cells = cell_outcomes(reference.figures_dir, table, cache)
    point_cells = [cell_outcomes(p.figures_dir, table, cache) for p in points]
    if reference_cells is None or any(c is None for c in point_cells):
        return None, ""
    label = " / ".join
    rows = []
    axes = [k for k in keys if _numeric([p.setting[k] for p in points])
            and len({json.dumps(p.setting[k]) for p in points}) > 1]
    trends: dict[tuple[tuple[str, ...], str], inference.Trend] = {}
    for cell, mine in reference_cells.items():
        if not all(cell in c for c in point_cells):
            continue
        for axis in axes:  # questions every point answered, one column per point
            common = [(s, q) for s in mine for q in mine[s]
                      if all(s in c[cell] and q in c[cell][s] for c in point_cells)]
            if not common:
                continue
            matrix = np.array([[c[cell][s][q] for c in point_cells] for s, q in common], dtype=float)
            others = [json.dumps({k: p.setting[k] for k in keys if k != axis}, sort_keys=True, default=str)
                      for p in points]
            trends[(cell, axis)] = inference.trend_test(matrix, [float(p.setting[axis]) for p in points],
                                                        [s for s, _ in common], others, seed=seed)
        start = len(rows)
        for point, cells in zip(points, point_cells, strict=False):
            if point.figures_dir.resolve() == reference.figures_dir.resolve():
                continue
            xs, ys, strata = _paired(cells[cell], mine)
            if not xs:
                continue
            estimate = inference.paired_estimate(xs, ys, strata, seed=seed)
            rows.append({"cell": label(cell), "setting": point.label(keys), "difference": estimate.difference,
                         "ci_low": estimate.ci_low, "ci_high": estimate.ci_high, "se": estimate.se, "n": estimate.n,
                         "test": estimate.test, "p": estimate.p_value, "p_holm": math.nan, "verdict": ""})
        family = rows[start:]
        for row, adjusted in zip(family, inference.holm_over([r["p"] for r in family]), strict=False):
            row["p_holm"] = adjusted
            row["verdict"] = inference.verdict(adjusted, row["n"], f"the {len(family)} points of this cell")
    if not rows:
        return None, ""
    frame = pd.DataFrame(rows)
    sentence_parts = []
    others = len(points) - (1 if any(p.figures_dir.resolve() == reference.figures_dir.resolve() for p in points) else 0)
    sentence_parts.append(
        f"Each point's paired difference from the profile's point ({reference.label(keys)}) on the same questions "
        f"(exact McNemar per benchmark, the stratified exact sign test for an Average): "
        + inference.count_phrase(frame["p_holm"].tolist(), frame["n"].tolist(), f"each cell's {others} points") + ".")
    for axis in axes:
        mine = {cell: t for (cell, a), t in trends.items() if a == axis}
        adjusted = dict(zip(mine, inference.holm_over([t.p_value for t in mine.values()]), strict=False))
        slope, p_trend, p_holm = {}, {}, {}
        for cell, trend in mine.items():
            slope[label(cell)], p_trend[label(cell)], p_holm[label(cell)] = trend.slope, trend.p_value, adjusted[cell]
        frame[f"trend {axis} slope"] = frame["cell"].map(slope)
        frame[f"trend {axis} p"] = frame["cell"].map(p_trend)
        frame[f"trend {axis} p_holm"] = frame["cell"].map(p_holm)
        significant = [c for c, t in mine.items() if inference.decides(adjusted[c], t.n)]
        sentence_parts.append(
            f"Trend along {axis} (the slope of the shown value, paired permutation test, questions permuted across the "
            f"points): " + inference.count_phrase([adjusted[c] for c in mine], [t.n for t in mine.values()],
                                                 f"the {len(mine)} cells")
            + (f"; e.g. {label(significant[0])}: slope {mine[significant[0]].slope:+.3g} per unit, p_holm = "
               f"{adjusted[significant[0]]:.3g}" if significant else "") + ".")
    if int(frame["n"].min()) < inference.minimum_n():
        sentence_parts.append(inference.small_sample_line(int(frame["n"].min())))
    return frame, " ".join(sentence_parts)


def sweep_frame(points: Sequence[Point], table: str) -> pd.DataFrame | None:
    """The table's cells at every sweep value, one row per (value, cell): labels, value, ci_low, ci_high and the
    points' SEs (NaN for a point whose table has none)."""
    frames = []
    for position, point in enumerate(points):
        read = tidy(point.figures_dir / f"{table}.csv")
        if read is None:
            return None
        read = read.dropna(subset=["value"]).copy()
        read.insert(0, "_position", position)
        if TIDY_SE not in read:
            read[TIDY_SE] = np.nan
        frames.append(read)
    return pd.concat(frames, ignore_index=True)

# --------------------------------------------------------------------------------------------
# The drawing and the table: where each point sits, one panel per column, one line per row
# --------------------------------------------------------------------------------------------

#: The line styles that tell the values of the second and later sweep axes apart.
LINE_STYLES = ("-", "--", ":", "-.")


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@dataclass
class SweepLayout:
    """Where a sweep's points sit: the swept axes (the first is the x axis), the profile's value on each, every
    point's label, x position and series (its values on the other axes)."""

    keys: list[str]
    profile: str
    profile_values: dict[str, Any]
    points: Sequence[Point]

    def __post_init__(self) -> None:
        self.x_key, self.other_keys = self.keys[0], self.keys[1:]
        self.labels = [p.label(self.keys) + (f" (profile {self.profile})" if p.is_profile else "") for p in self.points]
        self.x_values = list(dict.fromkeys(_key(p.setting[self.x_key]) for p in self.points))
        self.x_of = {v: json.loads(v) for v in self.x_values}
        self.numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.x_of.values())
        self.xs = {v: (float(self.x_of[v]) if self.numeric else float(i)) for i, v in enumerate(self.x_values)}
        self.point_x = [self.xs[_key(p.setting[self.x_key])] for p in self.points]
        self.series_of = [", ".join(f"{k}={show_value(p.setting[k])}" for k in self.other_keys) for p in self.points]

    def record(self) -> dict[str, Any]:
        """The manifest's ``sweep`` entry of every artifact the sweep writes."""
        return {"parameters": self.keys, "parameter": self.x_key, "points": [p.setting for p in self.points],
                "values": [p.value for p in self.points], "profile_value": self.profile_values.get(self.x_key),
                "profile_values": {k: self.profile_values.get(k) for k in self.keys}}

    def reference(self) -> Point:
        """The profile's point: the point at the profile's value of every axis, else the profile's own folder."""
        at = self.profile_values
        at_profile = [p for p in self.points if all(k in at and same_value(p.setting[k], at[k]) for k in self.keys)]
        return at_profile[0] if at_profile else Point(dict(self.profile_values),
                                                      figures_dir=profile_dir_of(self.points[0].figures_dir))

    def label_lines(self, frame: pd.DataFrame, quantity: str) -> str:
        """Adds each row's table row, series and line to ``frame`` (:func:`sweep_frame`); returns the panel column."""
        label_columns = [c for c in frame.columns if c not in ("_position", *TIDY_VALUES, TIDY_SE)]
        row_columns, panel_column = label_columns[:-1], label_columns[-1]
        frame["_row"] = frame[row_columns].astype(str).agg(" / ".join, axis=1) if row_columns else quantity
        frame["_series"] = [self.series_of[i] for i in frame["_position"]]
        frame["_line"] = [f"{r} ({s})" if s else r for r, s in zip(frame["_row"], frame["_series"], strict=False)]
        return panel_column


def draw_sweep(frame: pd.DataFrame, layout: SweepLayout, panel_column: str, table: str, quantity: str) -> Any:
    """The figure of one table: one panel per ``panel_column`` value, one line per row and series with its 95% CIs,
    the profile's value dotted."""
    import matplotlib.pyplot as plt  # lazy: matplotlib (notebooks extra) only when a sweep draws its figure

    panels = list(pd.unique(frame[panel_column]))
    lines = list(pd.unique(frame["_line"]))
    rows, series = list(pd.unique(frame["_row"])), list(pd.unique(frame["_series"]))
    width = min(len(panels), 4)
    height = math.ceil(len(panels) / width)
    fig, axes = plt.subplots(height, width, figsize=(4.2 * width, 3.4 * height), squeeze=False, sharey=True,
                             sharex=True)
    span = (max(layout.point_x) - min(layout.point_x)) or 1.0
    for ax, panel in zip(axes.flat, panels, strict=False):
        part = frame[frame[panel_column] == panel]
        step = span * 0.012  # lines side by side, so their CIs stay readable
        for offset, line_name in enumerate(lines):
            line = part[part["_line"] == line_name].sort_values("_position")
            if line.empty:
                continue
            x = [layout.point_x[i] + (offset - (len(lines) - 1) / 2) * step for i in line["_position"]]
            y = line["value"].to_numpy(float)
            err = np.vstack([np.clip(y - line["ci_low"].to_numpy(float), 0, None),
                             np.clip(line["ci_high"].to_numpy(float) - y, 0, None)])
            # one colour per table row, one line style per value of the other axes
            row_index = rows.index(line["_row"].iloc[0])
            style = LINE_STYLES[series.index(line["_series"].iloc[0]) % len(LINE_STYLES)]
            ax.errorbar(x, y, yerr=np.nan_to_num(err), marker="o", capsize=3, linestyle=style,
                        color=f"C{row_index % 10}", label=str(line_name))
        _mark_profile(ax, layout)
        ax.set_title(str(panel), fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.supxlabel(layout.x_key)
    fig.supylabel("value" if "accuracy" in table else "accuracy")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    at = "; ".join(f"{k} = {show_value(layout.profile_values[k])}" for k in layout.keys if k in layout.profile_values)
    fig.suptitle(f"{quantity} against {' and '.join(layout.keys)} (profile {layout.profile}: {at}"
                 + ("; dotted line)" if layout.x_key in layout.profile_values else ")"), fontsize=11)
    fig.tight_layout()
    return fig


def _mark_profile(ax: Any, layout: SweepLayout) -> None:
    """One panel's dotted line at the profile's value, and the x ticks of a non-numeric axis."""
    if layout.x_key in layout.profile_values:
        at_profile = [layout.xs[v] for v in layout.x_values
                      if same_value(layout.x_of[v], layout.profile_values[layout.x_key])]
        if at_profile:
            ax.axvline(at_profile[0], color="grey", linestyle=":", linewidth=1)
    if not layout.numeric:
        ax.set_xticks([layout.xs[v] for v in layout.x_values])
        ax.set_xticklabels([show_value(layout.x_of[v]) for v in layout.x_values], rotation=30, ha="right")


def sweep_values(frame: pd.DataFrame, layout: SweepLayout, panel_column: str
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The figure's numbers as a table: rows = (row, panel), columns = the points; the values, their CIs and SEs."""
    keys_ = list(dict.fromkeys(zip(frame["_row"], frame[panel_column], strict=False)))
    index = pd.MultiIndex.from_tuples(keys_, names=["row", panel_column])
    columns = pd.Index(layout.labels, name="setting")
    values = pd.DataFrame(np.nan, index=index, columns=columns)
    low, high, errors = values.copy(), values.copy(), values.copy()
    for record in frame.to_dict("records"):
        cell, column = (record["_row"], record[panel_column]), columns[record["_position"]]
        values.at[cell, column] = record["value"]
        low.at[cell, column] = record["ci_low"]
        high.at[cell, column] = record["ci_high"]
        errors.at[cell, column] = record[TIDY_SE]
    return values, low, high, errors


def sweep_sentence(named: str, values: pd.DataFrame, layout: SweepLayout) -> str | None:
    """What a swept table shows: the cell that moves most over the points, or that none moves (None: no values)."""
    spread = values.max(axis=1) - values.min(axis=1)
    widest = spread.idxmax() if spread.notna().any() else None
    points, keys = layout.points, layout.keys
    over = (f"{layout.x_key} = {', '.join(show_value(p.value) for p in points)}" if not layout.other_keys
            else "; ".join(p.label(keys) for p in points))
    if widest is None:
        return None
    if spread[widest] == 0:
        return f"{named}: no cell changes over {over} (all {len(values)} cells are the same at every point)."
    series = values.loc[widest]
    return (f"{named}: over {over}, the cell that moves most is "
            f"{' / '.join(map(str, widest))} ({', '.join(f'{v:.3f}' for v in series)}; range {spread[widest]:.3f}); "
            f"the median range over the {len(values)} cells is {spread.median():.3f}.")


# --------------------------------------------------------------------------------------------
# A sweep's artifacts: for every table, its tests, its table and its figure
# --------------------------------------------------------------------------------------------


def sweep_artifacts(points: Sequence[Point], key: str | Sequence[str], profile: str, profile_value: Any,
                    out_dir: Path, *, fixed: Variant | None = None, engine_note: str = "") -> list[str]:
    """For every table with CIs that each point wrote: a figure of the metric against the first swept axis (one
    panel per column, e.g. per benchmark; one line per row and value of the other axes, with 95% CIs; the panels share
    the legend and the axis labels) and a table of the same numbers with one column per point, into ``out_dir``
    (``figures/<profile>/sweeps/<axes>/``). ``key``: the swept axes (one name, or several: their Cartesian product);
    ``profile_value``: the profile's value of the first axis, or a mapping axis -> profile value. Returns the "What
    this shows" sentences."""
    import matplotlib  # lazy: matplotlib (notebooks extra) only when a sweep draws its figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apply_style()
    keys = [key] if isinstance(key, str) else list(key)
    profile_values = dict(profile_value) if isinstance(profile_value, Mapping) else {keys[0]: profile_value}
    layout = SweepLayout(keys, profile, profile_values, points)
    record, reference, sentences = layout.record(), layout.reference(), []
    for table in point_tables(points[0].figures_dir):
        frame = sweep_frame(points, table)
        if frame is None:
            continue
        quantity = quantity_of(table, points[0].figures_dir)
        tests, tests_sentence = sweep_tests(points, reference, table, keys)
        panel_column = layout.label_lines(frame, quantity)
        fig = draw_sweep(frame, layout, panel_column, table, quantity)
        stem = f"fig_sweep_{table}"
        caption = _caption(table, quantity, layout, panel_column, fixed, tests_sentence, engine_note)
        save_figure(fig, stem, out_dir, caption=caption, profile=profile, notebook="reproduce --sweep", sweep=record)
        plt.close(fig)
        values, low, high, errors = sweep_values(frame, layout, panel_column)
        save_table(Table(values=values, ci_low=low, ci_high=high, se=errors, caption=caption, best=None),
                   f"tab_sweep_{table}",
                   out_dir, profile=profile, notebook="reproduce --sweep", sweep=record)
        if tests is not None:
            save_table(tests, f"tab_sweep_{table}_paired", out_dir, profile=profile, notebook="reproduce --sweep",
                       sweep=record, float_format="{:.3g}", notes=tests_sentence,
                       caption=_tests_caption(table, quantity, layout, reference, tests_sentence))
        sentence = sweep_sentence(table if quantity == table else f"{quantity} ({table})", values, layout)
        if sentence is not None:
            sentences.append(sentence + (" " + tests_sentence if tests_sentence else ""))
            for name in (f"tab_sweep_{table}", stem):
                entry = read_manifest(out_dir)["artifacts"][name]
                update_manifest(out_dir, name, {**entry, "notes": sentences[-1]})
    return sentences


def _caption(table: str, quantity: str, layout: SweepLayout, panel_column: str, fixed: Variant | None,
             tests_sentence: str, engine_note: str) -> str:
    fixed_note = f" Every point also has {fixed.describe()}." if fixed else ""
    return (f"{table if quantity == table else f'{quantity} ({table})'} of profile {layout.profile} with "
            f"{' and '.join(layout.keys)} swept over {'; '.join(layout.labels)} (each "
            f"point a variant of the profile; 95% bootstrap CIs; one panel per {panel_column}"
            + (f"; one line per row and value of {', '.join(layout.other_keys)}" if layout.other_keys else "")
            + f").{fixed_note} {tests_sentence} {engine_note}").strip()


def _tests_caption(table: str, quantity: str, layout: SweepLayout, reference: Point, tests_sentence: str) -> str:
    return (f"{quantity} ({table}) swept over {' and '.join(layout.keys)}: each point's paired difference from the "
            f"profile's point ({reference.label(layout.keys)}) on the same questions, its 95% CI (stratified "
            f"bootstrap), n paired questions, the test and p, p_holm ({inference.multiplicity.RULE} over the "
            "cell's points) and the verdict of docs/statistics.md; trend columns: the slope of the "
            "shown value along each numeric axis, its paired permutation p and p_holm (over the "
            f"table's cells). {tests_sentence}")
