"""Sweeps: ``reproduce --sweep KEY=V1,V2,...`` (several flags: their Cartesian product), each point a variant.

A sweep runs every point as a variant of the profile (:mod:`r2mad_core.reproduce.variants`) and draws each table's
metric against the first swept axis with its 95% CIs, one panel per column (e.g. per benchmark), one line per row and
value of the other axes (:func:`sweep_artifacts`), beside a table of the same numbers, one column per point.
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

from r2mad_core.report.artifacts import apply_style, read_manifest, save_figure, save_table, update_manifest
from r2mad_core.report.tables import Table
from r2mad_core.reproduce.variants import COMPARISON_SUFFIX, Variant, same_value, show_value


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


def sweep_points(axes: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """The Cartesian product of the swept axes (``[("gamma", [0, 0.9]), ("top_k", [1, 3])]`` -> 4 settings), first
    axis outermost. A key swept twice is a one-line ValueError."""
    keys = [key for key, _ in axes]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"--sweep {repeated[0]} is given twice; give its values once: --sweep {repeated[0]}=V1,V2,...")
    return [dict(zip(keys, values)) for values in itertools.product(*(list(v) for _, v in axes))]


def _tidy(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    if list(frame.columns[-3:]) != ["value", "ci_low", "ci_high"]:
        return None
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    return frame if frame["value"].notna().any() and frame["ci_low"].notna().any() else None


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
    for table in tables:
        frame = sweep_frame(points, table)
        if frame is None:
            continue
        quantity = quantity_of(table, points[0].figures_dir)
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
                   + f").{fixed_note} {engine_note}").strip()
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
        if len(sentences) > before:
            for name in (f"tab_sweep_{table}", stem):
                record = read_manifest(out_dir)["artifacts"][name]
                update_manifest(out_dir, name, {**record, "notes": sentences[-1]})
    return sentences
