"""A point's tables read back: the tidy CSVs it wrote, the questions behind their cells, two folders cell by cell.

Every comparison of :mod:`r2mad_lab.reproduce.compare` starts here: which tables a point's folder holds
(:func:`point_tables`), a tidy table's numbers (:func:`tidy`), per cell the per-question correctness of the runs the
manifest's ``cell_runs`` names (:func:`cell_outcomes`), what a table shows (:func:`quantity_of`), and, for a table
without run cells, two folders' numbers side by side (:func:`compare_files`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from r2mad_core.records import TranscriptError
from r2mad_lab.experiments.cell import load_run
from r2mad_lab.report.artifacts import read_manifest
from r2mad_lab.report.tables import TIDY_SE, tidy_labels

COMPARISON_SUFFIX = "_vs_profile"


def point_tables(figures_dir: Path) -> list[str]:
    """The tables (stems of ``tab_*.csv``) a point's folder holds, sorted, without its comparisons."""
    return [s for s in sorted(p.stem for p in Path(figures_dir).glob("tab_*.csv")) if not s.endswith(COMPARISON_SUFFIX)]


def tidy(path: Path) -> pd.DataFrame | None:
    """A tidy table's CSV (labels, then ``value, ci_low, ci_high`` and perhaps ``se``:
    :func:`r2mad_lab.report.tables.tidy_labels`) with its values as numbers; None when the file is missing, is not tidy
    or has no values with CIs."""
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    if tidy_labels(frame.columns) is None:
        return None
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    if TIDY_SE in frame:
        frame[TIDY_SE] = pd.to_numeric(frame[TIDY_SE], errors="coerce")
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


def quantity_of(table: str, figures_dir: Path) -> str:
    """What a table shows, for a figure's title: its caption's first phrase (``Ablation of R2-MAD``), else its name."""
    record = read_manifest(figures_dir)["artifacts"].get(table) or {}
    caption = str(record.get("caption") or "")
    phrase = re.split(r"[:(.;]", caption, maxsplit=1)[0].strip()
    return phrase or table


def compare_files(profile_csv: Path, variant_csv: Path) -> pd.DataFrame | None:
    """For a table without run cells (a plain frame or a table of other numbers): the variant's and the profile's
    numbers cell by cell (tidy tables: by their row and column labels; plain frames with the same columns and
    rows: every numeric column) and their difference; no paired test. None when they do not line up."""
    if not profile_csv.is_file():
        return None
    mine, theirs = pd.read_csv(variant_csv), pd.read_csv(profile_csv)
    if list(mine.columns) != list(theirs.columns):
        return None
    labels = tidy_labels(mine.columns)
    if labels is not None:
        merged = mine[labels + ["value"]].merge(theirs[labels + ["value"]], on=labels, how="inner",
                                                suffixes=("_variant", "_profile"))
        merged = merged.rename(columns={"value_variant": "variant", "value_profile": "profile"})
        for column in ("variant", "profile"):
            merged[column] = pd.to_numeric(merged[column], errors="coerce")
        merged["difference"] = merged["variant"] - merged["profile"]
        return merged.dropna(subset=["variant", "profile"])
    if len(mine) != len(theirs):
        return None
    def number(frame: pd.DataFrame, column: str) -> bool:  # a flag column (True/False) is text here, not a number
        return pd.api.types.is_numeric_dtype(frame[column]) and not pd.api.types.is_bool_dtype(frame[column])

    numeric = [c for c in mine.columns if number(mine, c) and number(theirs, c)]
    text = [c for c in mine.columns if c not in numeric]
    if not numeric or not mine[text].astype(str).equals(theirs[text].astype(str)):
        return None
    rows = []
    for position in range(len(mine)):
        for column in numeric:
            rows.append({**{c: mine.at[position, c] for c in text}, "column": column,
                         "variant": mine.at[position, column], "profile": theirs.at[position, column],
                         "difference": mine.at[position, column] - theirs.at[position, column]})
    return pd.DataFrame(rows)
