"""Sweeps: ``reproduce --sweep KEY=V1,V2,...`` (several flags: their Cartesian product), each point a variant.

A sweep runs every point as a variant of the profile (:mod:`r2mad_core.reproduce.variants`) and draws each table's
metric against the first swept axis with its 95% CIs, one panel per column (e.g. per benchmark), one line per row and
value of the other axes (:func:`sweep_artifacts`), beside a table of the same numbers, one column per point, and a
table of the tests (``tab_sweep_<table>_paired``, the one rule of docs/statistics.md, :mod:`r2mad_core.report.inference`):
each point's paired difference from the profile's point on the same questions (95% CI, exact McNemar / the
stratified sign test, Holm over the cell's points) and, along each numeric axis, a trend test (the slope of the shown
value, a paired permutation test with the question as its own stratum, Holm over the table's cells).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from r2mad_core.experiments.cell import load_run
from r2mad_core.memory.inert import inert_sweep_problem
from r2mad_core.records import TranscriptError
from r2mad_core.report import inference
from r2mad_core.report.artifacts import apply_style, read_manifest, save_figure, save_table, update_manifest
from r2mad_core.report.tables import Table
from r2mad_core.reproduce.variants import COMPARISON_SUFFIX, Variant, profile_dir_of, same_value, show_value


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``"gamma=0,0.3,0.6"`` -> ``("gamma", [0, 0.3, 0.6])``; values are YAML, split at top-level commas
    (``"top_k=[1, 2],[3]"`` is two lists). A one-line ValueError for anything else."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key or not rest.strip():
        raise ValueError(f"--sweep {text!r}: expected KEY=V1,V2,..., e.g. --sweep gamma=0,0.3,0.6,0.9")
    parts, depth, current = [], 0, ""
    for char in rest:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    try:
        values = [yaml.safe_load(p) for p in parts if p.strip()]
    except yaml.YAMLError as exc:
        raise ValueError(f"--sweep {text!r}: a value is not valid YAML: {exc}") from None
    if len(values) < 2:
        raise ValueError(f"--sweep {text!r}: expected at least two values, e.g. --sweep {key}=0,0.5")
    if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
        raise ValueError(f"--sweep {text!r}: a value repeats")
    return key, values


@dataclass
class SweepPoint:
    """One point of a sweep: its value on every swept axis (``setting``, in the order the axes were given) and where
    its artifacts are (the profile's own folder when every value is the profile's)."""

    setting: dict[str, Any]
    figures_dir: Path
    is_profile: bool

    @property
    def value(self) -> Any:
        """The value on the first axis (the figures' x axis)."""
        return next(iter(self.setting.values()))

    def label(self, keys: Sequence[str] | None = None) -> str:
        keys = list(self.setting) if keys is None else keys
        return ", ".join(f"{k}={show_value(self.setting[k])}" for k in keys)


def caption_note(lines: Sequence[str]) -> str:
    """A console banner line as a caption's sentence: no ``reproduce: profile NAME:`` prefix, no shouting."""
    text = " ".join(lines)
    text = re.sub(r"^reproduce: (profile [^:]+: )?", "", text).replace("SIMULATED", "simulated")
    return text[:1].upper() + text[1:]


#: The line styles that tell the values of the second and later sweep axes apart.
LINE_STYLES = ("-", "--", ":", "-.")


def sweep_points(axes: Sequence[tuple[str, Sequence[Any]]], settings: Mapping[str, Any] | None = None
                 ) -> list[dict[str, Any]]:
    """The Cartesian product of the swept axes (``[("gamma", [0, 0.9]), ("top_k", [1, 3])]`` -> 4 settings), first
    axis outermost. A key swept twice, or an axis inert given ``settings`` (r2mad_core.memory.inert), is a one-line
    ValueError."""
    keys = [key for key, _ in axes]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"--sweep {repeated[0]} is given twice; give its values once: --sweep {repeated[0]}=V1,V2,...")
    if settings is not None and (inert := inert_sweep_problem(axes, settings)):
        raise ValueError(inert)
    return [dict(zip(keys, values)) for values in itertools.product(*(list(v) for _, v in axes))]


def _tidy(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    if list(frame.columns[-3:]) != ["value", "ci_low", "ci_high"]:
        return None
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    return frame if frame["value"].notna().any() and frame["ci_low"].notna().any() else None


def cell_outcomes(figures_dir: Path, table: str, cache: dict[str, dict[str, bool]] | None = None
                  ) -> dict[tuple[str, ...], dict[str, dict[str, bool]]] | None:
    """Per cell of ``table`` in ``figures_dir`` (its labels as the tidy CSV writes them): per stratum
    (``model / benchmark``) the questions' correctness, read from the runs the manifest's ``cell_runs`` names;
    None when the table records no cells or a run cannot be read."""
    record = read_manifest(figures_dir)["artifacts"].get(table) or {}
    entries = record.get("cell_runs")
    if not entries:
        return None
    resolved = Path(figures_dir).resolve()
    root = next((p.parent for p in [resolved, *resolved.parents] if p.name == "figures"), None)
    cache = {} if cache is None else cache
    out: dict[tuple[str, ...], dict[str, dict[str, bool]]] = {}
    for entry in entries:
        strata = {}
        for stratum, path in entry["runs"]:
            run = Path(path) if Path(path).is_absolute() or root is None else root / path
            if str(run) not in cache:
                try:
                    cache[str(run)] = {r.sample_id: bool(r.correct) for r in load_run(run)[1]}
                except (FileNotFoundError, TranscriptError, OSError, ValueError):
                    return None
            strata[stratum] = cache[str(run)]
        out[tuple(entry["cell"])] = strata
    return out


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


def sweep_tests(points: Sequence[SweepPoint], reference: SweepPoint, table: str, keys: Sequence[str], *,
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
            common = [(s, q) for s in mine for q in mine[s] if all(s in c[cell] and q in c[cell][s] for c in point_cells)]
            if not common:
                continue
            matrix = np.array([[c[cell][s][q] for c in point_cells] for s, q in common], dtype=float)
            others = [json.dumps({k: p.setting[k] for k in keys if k != axis}, sort_keys=True, default=str) for p in points]
            trends[(cell, axis)] = inference.trend_test(matrix, [float(p.setting[axis]) for p in points],
                                                        [s for s, _ in common], others, seed=seed)
        start = len(rows)
        for point, cells in zip(points, point_cells):
            if point.figures_dir.resolve() == reference.figures_dir.resolve():
                continue
            xs, ys, strata = _paired(cells[cell], mine)
            if not xs:
                continue
            estimate = inference.paired_estimate(xs, ys, strata, seed=seed)
            rows.append({"cell": label(cell), "setting": point.label(keys), "difference": estimate.difference,
                         "ci_low": estimate.ci_low, "ci_high": estimate.ci_high, "n": estimate.n,
                         "test": estimate.test, "p": estimate.p_value, "p_holm": math.nan, "verdict": ""})
        family = rows[start:]
        for row, adjusted in zip(family, inference.holm_over([r["p"] for r in family])):
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
        adjusted = dict(zip(mine, inference.holm_over([t.p_value for t in mine.values()])))
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


def sweep_frame(points: Sequence[SweepPoint], table: str) -> pd.DataFrame | None:
    """The table's cells at every sweep value, one row per (value, cell): labels, value, ci_low, ci_high."""
    frames = []
    for position, point in enumerate(points):
        tidy = _tidy(point.figures_dir / f"{table}.csv")
        if tidy is None:
            return None
        tidy = tidy.dropna(subset=["value"]).copy()
        tidy.insert(0, "_position", position)
        frames.append(tidy)
    return pd.concat(frames, ignore_index=True)


def quantity_of(table: str, figures_dir: Path) -> str:
    """What a table shows, for a figure's title: its caption's first phrase (``Ablation of R2-MAD``), else its name."""
    record = read_manifest(figures_dir)["artifacts"].get(table) or {}
    caption = str(record.get("caption") or "")
    phrase = re.split(r"[:(.;]", caption, maxsplit=1)[0].strip()
    return phrase or table


def sweep_artifacts(points: Sequence[SweepPoint], key: str | Sequence[str], profile: str, profile_value: Any,
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
    profile_values_ = dict(profile_value) if isinstance(profile_value, Mapping) else {keys[0]: profile_value}
    x_key, other_keys = keys[0], keys[1:]
    labels = [p.label(keys) + (f" (profile {profile})" if p.is_profile else "") for p in points]
    tables = sorted({p.stem for p in points[0].figures_dir.glob("tab_*.csv")} - {""})
    tables = [t for t in tables if not t.endswith(COMPARISON_SUFFIX)]
    x_values = list(dict.fromkeys(json.dumps(p.setting[x_key], sort_keys=True, default=str) for p in points))
    x_of = {v: json.loads(v) for v in x_values}
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x_of.values())
    xs = {v: (float(x_of[v]) if numeric else float(i)) for i, v in enumerate(x_values)}
    point_x = [xs[json.dumps(p.setting[x_key], sort_keys=True, default=str)] for p in points]
    series_of = [", ".join(f"{k}={show_value(p.setting[k])}" for k in other_keys) for p in points]
    fixed_note = f" Every point also has {fixed.describe()}." if fixed else ""
    axes_text = " and ".join(keys)
    sweep_record = {"parameters": keys, "parameter": x_key, "points": [p.setting for p in points],
                    "values": [p.value for p in points], "profile_value": profile_values_.get(x_key),
                    "profile_values": {k: profile_values_.get(k) for k in keys}}
    sentences = []
    at_profile = [p for p in points if all(k in profile_values_ and same_value(p.setting[k], profile_values_[k])
                                           for k in keys)]
    reference = at_profile[0] if at_profile else SweepPoint(dict(profile_values_),
                                                             profile_dir_of(points[0].figures_dir), True)
    for table in tables:
        frame = sweep_frame(points, table)
        if frame is None:
            continue
        quantity = quantity_of(table, points[0].figures_dir)
        tests, tests_sentence = sweep_tests(points, reference, table, keys)
        label_columns = [c for c in frame.columns if c not in ("_position", "value", "ci_low", "ci_high")]
        row_columns, panel_column = label_columns[:-1], label_columns[-1]
        frame["_row"] = frame[row_columns].astype(str).agg(" / ".join, axis=1) if row_columns else quantity
        frame["_series"] = [series_of[i] for i in frame["_position"]]
        frame["_line"] = [f"{r} ({s})" if s else r for r, s in zip(frame["_row"], frame["_series"])]
        panels = list(pd.unique(frame[panel_column]))
        lines = list(pd.unique(frame["_line"]))
        rows, series = list(pd.unique(frame["_row"])), list(pd.unique(frame["_series"]))
        width = min(len(panels), 4)
        height = math.ceil(len(panels) / width)
        fig, axes = plt.subplots(height, width, figsize=(4.2 * width, 3.4 * height), squeeze=False, sharey=True,
                                 sharex=True)
        span = (max(point_x) - min(point_x)) or 1.0
        for ax, panel in zip(axes.flat, panels):
            part = frame[frame[panel_column] == panel]
            step = span * 0.012  # lines side by side, so their CIs stay readable
            for offset, line_name in enumerate(lines):
                line = part[part["_line"] == line_name].sort_values("_position")
                if line.empty:
                    continue
                x = [point_x[i] + (offset - (len(lines) - 1) / 2) * step for i in line["_position"]]
                y = line["value"].to_numpy(float)
                err = np.vstack([np.clip(y - line["ci_low"].to_numpy(float), 0, None),
                                 np.clip(line["ci_high"].to_numpy(float) - y, 0, None)])
                # one colour per table row, one line style per value of the other axes
                row_index = rows.index(line["_row"].iloc[0])
                style = LINE_STYLES[series.index(line["_series"].iloc[0]) % len(LINE_STYLES)]
                ax.errorbar(x, y, yerr=np.nan_to_num(err), marker="o", capsize=3, linestyle=style,
                            color=f"C{row_index % 10}", label=str(line_name))
            if x_key in profile_values_:
                at_profile = [xs[v] for v in x_values if same_value(x_of[v], profile_values_[x_key])]
                if at_profile:
                    ax.axvline(at_profile[0], color="grey", linestyle=":", linewidth=1)
            ax.set_title(str(panel), fontsize=10)
            if not numeric:
                ax.set_xticks([xs[v] for v in x_values])
                ax.set_xticklabels([show_value(x_of[v]) for v in x_values], rotation=30, ha="right")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        fig.supxlabel(x_key)
        fig.supylabel("value" if "accuracy" in table else "accuracy")
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
        at = "; ".join(f"{k} = {show_value(profile_values_[k])}" for k in keys if k in profile_values_)
        fig.suptitle(f"{quantity} against {axes_text} (profile {profile}: {at}"
                     + ("; dotted line)" if x_key in profile_values_ else ")"), fontsize=11)
        fig.tight_layout()
        stem = f"fig_sweep_{table}"
        caption = (f"{table if quantity == table else f'{quantity} ({table})'} of profile {profile} with {axes_text} swept over {'; '.join(labels)} (each "
                   f"point a variant of the profile; 95% bootstrap CIs; one panel per {panel_column}"
                   + (f"; one line per row and value of {', '.join(other_keys)}" if other_keys else "")
                   + f").{fixed_note} {tests_sentence} {engine_note}").strip()
        save_figure(fig, stem, out_dir, caption=caption, profile=profile, notebook="reproduce --sweep",
                    sweep=sweep_record)
        plt.close(fig)
        # the same numbers as a table: rows = (row, panel), columns = the points
        keys_ = list(dict.fromkeys(zip(frame["_row"], frame[panel_column])))
        index = pd.MultiIndex.from_tuples(keys_, names=["row", panel_column])
        columns = pd.Index(labels, name="setting")
        values = pd.DataFrame(np.nan, index=index, columns=columns)
        low, high = values.copy(), values.copy()
        for record in frame.to_dict("records"):
            cell, column = (record["_row"], record[panel_column]), columns[record["_position"]]
            values.at[cell, column] = record["value"]
            low.at[cell, column] = record["ci_low"]
            high.at[cell, column] = record["ci_high"]
        sweep_table = Table(values=values, ci_low=low, ci_high=high, caption=caption, best=None)
        save_table(sweep_table, f"tab_sweep_{table}", out_dir, profile=profile, notebook="reproduce --sweep",
                   sweep=sweep_record)
        if tests is not None:
            save_table(tests, f"tab_sweep_{table}_paired", out_dir, profile=profile, notebook="reproduce --sweep",
                       sweep=sweep_record, float_format="{:.3g}", notes=tests_sentence, caption=(
                           f"{quantity} ({table}) swept over {axes_text}: each point's paired difference from the "
                           f"profile's point ({reference.label(keys)}) on the same questions, its 95% CI (stratified "
                           f"bootstrap), n paired questions, the test and p, p_holm ({inference.multiplicity.RULE} over the "
                           "cell's points) and the verdict of docs/statistics.md; trend columns: the slope of the "
                           "shown value along each numeric axis, its paired permutation p and p_holm (over the "
                           f"table's cells). {tests_sentence}"))
        spread = values.max(axis=1) - values.min(axis=1)
        widest = spread.idxmax() if spread.notna().any() else None
        before = len(sentences)
        over = (f"{x_key} = {', '.join(show_value(p.value) for p in points)}" if not other_keys
                else "; ".join(p.label(keys) for p in points))
        named = table if quantity == table else f"{quantity} ({table})"
        if widest is not None and spread[widest] == 0:
            sentences.append(f"{named}: no cell changes over {over} "
                             f"(all {len(values)} cells are the same at every point).")
        elif widest is not None:
            series = values.loc[widest]
            sentences.append(
                f"{named}: over {over}, the cell that moves most is "
                f"{' / '.join(map(str, widest))} ({', '.join(f'{v:.3f}' for v in series)}; range {spread[widest]:.3f}); "
                f"the median range over the {len(values)} cells is {spread.median():.3f}.")
        if tests_sentence and len(sentences) > before:
            sentences[-1] += " " + tests_sentence
        if len(sentences) > before:
            for name in (f"tab_sweep_{table}", stem):
                record = read_manifest(out_dir)["artifacts"][name]
                update_manifest(out_dir, name, {**record, "notes": sentences[-1]})
    return sentences
