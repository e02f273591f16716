"""Variants: a profile plus overrides, its own artifacts beside the profile's, compared with the profile's.

An ablation is a change of one parameter (K of Eq. 5, gamma of Eq. 6, the thresholds w_l/w_h of Eq. 7, the
retrieval policy of Table 3, n_agents, n_rounds, train_limit, ...). A run whose parameters differ from its profile
(``reproduce --set``, papermill ``-p``, an edited parameters cell) is a *variant*:

- its name comes from the overrides, sorted and filesystem-safe (``gamma=0.5``, ``gamma=0.5,top_k=5``;
  :func:`variant_name`) or from ``--variant NAME``;
- its figures and tables go to ``figures/<profile>/variants/<name>/`` and its executed notebooks to
  ``notebooks/executed/<profile>/variants/<name>/`` (:func:`variant_dir`); the profile's own artifacts are never
  written; runs and the response cache stay shared, so every generation the change does not affect replays;
- every artifact says so: captions name each override with the profile's value (``gamma = 0.5 (profile tiny:
  0.9)``, :meth:`Variant.note`), figures carry the same line, the settings table marks the rows, the manifest
  records the overrides (:meth:`Variant.record`);
- every table it shares with the profile is compared cell by cell with the profile's: the difference, a paired
  test on the same questions (:func:`r2mad_core.report.inference.paired_estimate`: exact McNemar per benchmark, the
  stratified exact sign test of the shown mean of per-benchmark differences for an Average, as the sweeps') and a generated
  sentence of "What this shows", saved as ``<table>_vs_profile`` (:func:`compare_table`);
- a sweep (``--sweep gamma=0,0.3,0.6,0.9``, :mod:`r2mad_core.reproduce.sweeps`) runs each value as a variant and draws each table's metric against
  the parameter with its 95% CIs, per benchmark column (:func:`sweep_artifacts`).

An override equal to the profile's value is no override (no variant); overrides of a variant run again with
more changes make a variant of the profile with every change in its name (a variant is always relative to its
profile, never nested).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
import hashlib

import pandas as pd
import numpy as np
import yaml

from r2mad_core.experiments.protocol import BY_NAME, PROFILE_CHOICES
from r2mad_core.report import inference
from r2mad_core.experiments.profiles import load_profile
from r2mad_core.report.artifacts import apply_style, display_path, jsonable, read_manifest, save_figure, save_table, update_manifest
from r2mad_core.experiments.run_reader import finished_records as _finished_records
from r2mad_core.report import multiplicity
from r2mad_core.report.tables import Table

VARIANTS_DIR = "variants"
SWEEPS_DIR = "sweeps"
#: The environment variable ``reproduce`` passes the overrides and the chosen name through to the kernels
#: (fields a notebook does not declare are still part of its variant).
ENVIRONMENT = "R2MAD_VARIANT"
#: Parameters that never make a variant: the profile's name and where things go.
NOT_OVERRIDES = frozenset({"profile", "data_dir", "figures_dir", "runs_dir", "cache_dir", "variant"})
COMPARISON_SUFFIX = "_vs_profile"
MAX_NAME = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


def same_value(a: Any, b: Any) -> bool:
    """Whether an override equals the profile's value (``1`` and ``1.0`` are equal; lists and mappings by item)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def show_value(value: Any) -> str:
    """A value as a name and a caption show it: YAML-like and compact (``0.5``, ``[3, 6]``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump"):
        value = value.model_dump(exclude_defaults=True)
    return json.dumps(value, separators=(", ", ": "), default=str) if isinstance(value, (list, tuple, dict)) else str(value)


def variant_name(overrides: Mapping[str, Any]) -> str:
    """The stable, filesystem-safe name of a set of overrides: ``key=value`` sorted by key, joined by ``,``;
    characters other than letters, digits and ``._=,+-`` become ``_`` (``fixed_lambda:0.5`` ->
    ``fixed_lambda_0.5``); a name over 80 characters keeps its start and a hash of the whole."""
    if not overrides:
        raise ValueError("variant_name: no overrides (the profile itself is not a variant)")
    text = ",".join(f"{key}={_name_value(_value(overrides[key]))}" for key in sorted(overrides))
    name = _UNSAFE.sub("_", text).strip("._") or "variant"
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 13] + "-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return name


def _name_value(value: Any) -> str:
    """A value inside a name: list items joined by ``+`` (``0.0+0.5``), anything else as shown, without spaces."""
    if isinstance(value, (list, tuple)):
        return "+".join(_name_value(v) for v in value) if value else "empty"
    return show_value(value).replace(" ", "")


def check_name(name: str) -> str:
    """``--variant NAME``: a single folder name of safe characters, else a one-line ValueError."""
    if not name or _UNSAFE.search(name) or name in (".", "..") or name.startswith("."):
        raise ValueError(f"--variant {name!r}: expected a folder name of letters, digits and ._=,+- "
                         f"(e.g. --variant low-gamma)")
    return name


def _value(entry: Any) -> Any:
    """An override is stored as ``(value, profile value)``; a bare value is the value."""
    return entry[0] if isinstance(entry, tuple) and len(entry) == 2 else entry


@dataclass(frozen=True)
class Variant:
    """A profile plus overrides: ``overrides[field] = (value, profile's value)``, sorted by field."""

    profile: str
    overrides: Mapping[str, tuple[Any, Any]]
    name: str = ""
    notebook_declares: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", dict(sorted(self.overrides.items())))
        if not self.name:
            object.__setattr__(self, "name", variant_name(self.overrides))

    def describe_one(self, key: str) -> str:
        """``gamma = 0.5 (profile tiny: 0.9)``."""
        value, base = self.overrides[key]
        return f"{key} = {show_value(value)} (profile {self.profile}: {show_value(base)})"

    def describe(self) -> str:
        """``gamma = 0.5 (profile tiny: 0.9); top_k = 5 (profile tiny: 3)``."""
        return "; ".join(self.describe_one(key) for key in self.overrides)

    def note(self) -> str:
        """The sentence every caption of the variant ends with."""
        return f"Variant {self.name} of profile {self.profile}: {self.describe()}."

    def record(self, baseline_dir: str | Path | None = None) -> dict[str, Any]:
        """The manifest's ``variant`` entry."""
        return {"name": self.name, "profile": self.profile,
                "overrides": {k: {"value": jsonable(v), "profile_value": jsonable(b)} for k, (v, b) in self.overrides.items()},
                "baseline": display_path(baseline_dir) if baseline_dir else None}

    def command(self, only: str | None = None) -> str:
        """The one command that runs the profile itself (the baseline) for ``only``."""
        return f"python -m r2mad_core.reproduce --profile {self.profile}" + (f" --only {only}" if only else "")


def differences(values: Mapping[str, Any], profile_values: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``field -> (value, profile's value)`` for every parameter in ``values`` that differs from the profile's
    (paths and the profile's name never count; a name the profile does not have is an override of nothing: kept
    with profile value None; a protocol choice given as None is the preset's value, the profile's own)."""
    found = {}
    for key, value in values.items():
        if key in NOT_OVERRIDES or key.startswith("_") or value is Ellipsis:
            continue
        if value is None and key in PROFILE_CHOICES:  # a protocol choice left to the preset: the profile's own
            continue
        base = profile_values.get(key)
        if key not in profile_values or not same_value(value, base):
            found[key] = (value, base)
    return found


def inert_notes(overrides: Mapping[str, Any], profile_values: Mapping[str, Any]) -> list[str]:
    """One line per override that cannot act where the run would spend its time, said before it runs: gamma (and a
    fixed lambda) act only through lambda_t of the MMR pick (Eqs. 5-6), which at K = 1 cannot change the pick (the
    first pick is the most relevant candidate whatever lambda_t; memory/retrieval.py), so at the profile's K = 1 a
    gamma change reaches only the rows that set their own K (notebook 04's "(K=3)" retrieval ablation)."""
    values = {**profile_values, **overrides}
    notes = []
    for key in ("gamma",):
        if key in overrides and int(values.get("top_k") or 1) == 1:
            notes.append(f"reproduce: note: {key} acts only through lambda_t, which at K = 1 cannot change the pick "
                         f"(Eqs. 5-6): with top_k = 1 it reaches only rows that set their own K (notebook 04's "
                         f"retrieval ablation at K = 3); every other cell is the profile's run. To see it act: "
                         f"--set top_k=3 --sweep {key}=...")
    return notes


def profile_values(profile: Any) -> dict[str, Any]:
    """Every notebook parameter of a profile (a :class:`~r2mad_core.experiments.profiles.Profile`, or a name or path
    to load): the fields, ``extra_parameters`` spread out, optional defaults, each protocol choice the profile leaves
    to its preset at the preset's value (``top_k`` of the paper preset: 1)."""
    loaded = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    values = loaded.parameters({})
    for name, value in loaded.spec.choices.items():
        if values.get(name) is None:
            values[name] = value
    return values


def shown_path(path: str | Path) -> str:
    """A path as a variant's labels show it: relative to the repository when inside it, else from its ``figures``
    (or ``notebooks``) part on (``.../figures/tiny/variants/gamma=0.5``): no machine paths in outputs."""
    shown = display_path(path)
    if not shown.startswith(".../"):
        return shown
    parts = Path(path).resolve().parts
    for anchor in ("figures", "notebooks"):
        if anchor in parts:
            return ".../" + "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor):])
    return shown


def variant_dir(profile_dir: str | Path, name: str) -> Path:
    """``<profile_dir>/variants/<name>``."""
    return Path(profile_dir) / VARIANTS_DIR / name


def profile_dir_of(directory: str | Path) -> Path:
    """The profile's own folder of ``directory``: itself, or two levels up for ``.../variants/<name>``."""
    directory = Path(directory)
    return directory.parent.parent if directory.parent.name == VARIANTS_DIR else directory


def to_environment(overrides: Mapping[str, Any], name: str | None) -> str:
    return json.dumps({"name": name, "overrides": jsonable({k: _value(v) for k, v in overrides.items()})})


def from_environment() -> tuple[dict[str, Any], str | None]:
    """The overrides and name ``reproduce`` passed to this kernel (``({}, None)`` when run otherwise)."""
    text = os.environ.get(ENVIRONMENT, "").strip()
    if not text:
        return {}, None
    data = json.loads(text)
    return dict(data.get("overrides") or {}), data.get("name")


def detect(loaded: Any, base: Any, name: str | None = None) -> Variant | None:
    """The variant a notebook runs: every resolved value of ``loaded`` (the profile with the notebook's overrides)
    that differs from ``base`` (the profile itself), compared after the protocol preset is resolved, so an override
    that equals what the profile resolves to is no variant. The name: ``name``, else the one ``reproduce`` passed
    (:data:`ENVIRONMENT`), else from the overrides. None when nothing differs."""
    found = differences(profile_values(loaded), profile_values(base))
    if not found:
        return None
    name = name or from_environment()[1]
    return Variant(base.name, found, check_name(str(name)) if name else "")


# --------------------------------------------------------------------------------------------
# Comparison with the profile's run
# --------------------------------------------------------------------------------------------

#: The columns of a ``_vs_profile`` table that are not the cell's labels.
COMPARISON_COLUMNS = ("variant", "profile", "difference", "ci_low", "ci_high", "p_mcnemar", "p_holm", "pairs",
                      "same_run", "round0_unchanged", "round0_shared")


def _round0(record: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A debate's round-0 requests (their prompt ids) and generations."""
    turns = record.rounds[0].turns if record.rounds else []
    return tuple(t.prompt_id for t in turns), tuple(t.response for t in turns)


def round0_sharing(mine: Sequence[Any], theirs: Sequence[Any]) -> tuple[int, int, int]:
    """(debates compared, debates whose round-0 requests are unchanged, debates whose round-0 generations are the
    same) between a variant's records and the profile's, matched by question: under common random numbers
    (docs/ablations.md) the last two are equal."""
    by_id = {r.sample_id: r for r in theirs}
    compared = unchanged = shared = 0
    for record in mine:
        other = by_id.get(record.sample_id)
        if other is None:
            continue
        compared += 1
        (requests, responses), (their_requests, their_responses) = _round0(record), _round0(other)
        if requests == their_requests:
            unchanged += 1
            shared += responses == their_responses
    return compared, unchanged, shared


def _pairs(outcomes: Sequence[Any], baseline: Any) -> tuple[dict[tuple, bool], dict[tuple, bool], list[float], bool,
                                                            tuple[int, int, int]] | None:
    """Per-question correctness of the variant's cells and the profile's same cells (keyed (model, benchmark,
    sample)),
    the profile's per-cell accuracies, whether every cell is the very same run, and the round-0 sharing counts
    (:func:`round0_sharing`); None when the profile has not run one of them."""
    mine: dict[tuple, bool] = {}
    theirs: dict[tuple, bool] = {}
    accuracies: list[float] = []
    same = True
    sharing = [0, 0, 0]
    for outcome in outcomes:
        try:
            spec = baseline.model(outcome.model.label)
        except KeyError:
            return None
        run_dir = baseline.run_dir(spec, outcome.benchmark, outcome.method)[0]
        records = _finished_records(run_dir, len(outcome.records))
        if records is None:
            return None
        same = same and Path(run_dir).resolve() == Path(outcome.run_dir).resolve()
        for r in outcome.records:
            mine[(outcome.model.label, outcome.benchmark, r.sample_id)] = bool(r.correct)
        for r in records:
            theirs[(outcome.model.label, outcome.benchmark, r.sample_id)] = bool(r.correct)
        accuracies.append(sum(bool(r.correct) for r in records) / len(records))
        sharing = [a + b for a, b in zip(sharing, round0_sharing(outcome.records, records))]
    return mine, theirs, accuracies, same, (sharing[0], sharing[1], sharing[2])


def compare_table(table: Any, variant: Variant, baseline: Any, *, bootstrap_resamples: int = 1000,
                  seed: int = 0) -> pd.DataFrame:
    """One row per cell of a table built from run cells (``table.cells``): the variant's value, the profile's
    (its same cells, loaded from the shared runs), the difference, its paired 95% CI and the exact McNemar p on
    the same questions, the number of pairs, and whether the cell is the very same run (unchanged by the
    overrides). A cell the profile has not run has no profile value."""
    cells = (table.cells if isinstance(table, Table) else None) or {}  # a DataFrame's "cells" would be a column
    row_names = [n or "row" for n in table.values.index.names]
    column_name = table.values.columns.name or "column"
    rows = []
    for row in table.values.index:
        for column in table.values.columns:
            outcomes = cells.get((row, column))
            if not outcomes:
                continue
            labels = dict(zip(row_names, row if isinstance(row, tuple) else (row,)))
            value = table.values.at[row, column]
            entry = {**labels, column_name: column, "variant": float(value), "profile": math.nan,
                     "difference": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_mcnemar": math.nan,
                     "p_holm": math.nan, "pairs": 0, "same_run": False, "round0_unchanged": 0, "round0_shared": 0}
            paired = _pairs(outcomes, baseline) if baseline is not None else None
            if paired is not None:
                mine, theirs, accuracies, same, (_, unchanged, shared) = paired
                if set(mine) != set(theirs):
                    raise ValueError(f"variant {variant.name}: cell {row} / {column} covers other questions than the "
                                     f"profile's ({len(set(mine) ^ set(theirs))} differ)")
                keys = sorted(mine)
                # the quantity shown: for an Average the mean of per-benchmark differences, tested by the stratified
                # exact sign test with its stratified CI (the sweeps' estimate: the same pair, the same p)
                test = inference.paired_estimate([mine[k] for k in keys], [theirs[k] for k in keys],
                                                 [f"{k[0]} / {k[1]}" for k in keys], n_bootstrap=bootstrap_resamples,
                                                 seed=seed)
                profile_value = sum(accuracies) / len(accuracies)  # a mean of cells, as the tables' Average
                entry.update(profile=profile_value, difference=float(value) - profile_value,
                             ci_low=test.ci_low, ci_high=test.ci_high, p_mcnemar=test.p_value,
                             pairs=test.n, same_run=same, round0_unchanged=unchanged, round0_shared=shared)
            rows.append(entry)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        # Every cell is tested at once: a cell is significant only by its Holm-adjusted p (report/multiplicity.py).
        # A cell that is the very same run is no test (its difference is 0 by construction) and does not count.
        tested = frame["p_mcnemar"].where(~frame["same_run"].astype(bool))
        frame["p_holm"] = multiplicity.holm(tested)
    return frame


def comparison_sentences(frame: pd.DataFrame, variant: Variant, table_name: str) -> list[str]:
    """The "What this shows" sentences of one comparison, from its numbers."""
    if frame.empty:
        return []
    compared = frame.dropna(subset=["profile"])
    missing = len(frame) - len(compared)
    if compared.empty:
        return [f"{table_name}: the profile {variant.profile} has not run these cells yet, so nothing is compared; "
                f"run `{variant.command()}` first (it shares this variant's runs and cache)."]
    labels = [c for c in frame.columns if c not in COMPARISON_COLUMNS]
    changed = compared[compared["difference"].abs() > 1e-12]
    from r2mad_core.report.inference import count_phrase  # the one rule: no verdict word below its n

    same = int(compared["same_run"].sum())
    tests = int(compared["p_holm"].notna().sum())
    verdict = count_phrase(list(compared["p_holm"]), list(compared["pairs"]), f"the {tests} cells tested at once")
    text = (f"{table_name}, {variant.describe()}: {len(changed)} of {len(compared)} cells differ from the profile's "
            f"({same} are the very same runs, unchanged by the override); {verdict} (exact McNemar per benchmark, the "
            f"stratified exact sign test for an Average, on the same questions, {multiplicity.describe(tests)}).")
    if "round0_unchanged" in compared:
        unchanged, shared = int(compared["round0_unchanged"].sum()), int(compared["round0_shared"].sum())
        text += (f" Round 0: {shared} of the {unchanged} debates whose round-0 requests the change leaves unchanged "
                 f"drew the very same generations (common random numbers).")
    if not changed.empty:
        top = changed.loc[changed["difference"].abs().idxmax()]
        where = " / ".join(str(top[c]) for c in labels)
        text += (f" The largest change is {where}: {top['profile']:.3f} -> {top['variant']:.3f} "
                 f"({top['difference']:+.3f}, 95% CI [{top['ci_low']:+.3f}, {top['ci_high']:+.3f}], "
                 f"p = {top['p_mcnemar']:.2g} unadjusted, {top['p_holm']:.2g} {multiplicity.RULE}-adjusted, "
                 f"{int(top['pairs'])} paired questions).")
    if missing:
        text += f" {missing} cells have no profile value yet (run `{variant.command()}`)."
    return [text]


# --------------------------------------------------------------------------------------------
# In the kernel: each table a variant saves, compared with the profile's
# --------------------------------------------------------------------------------------------


def compare_files(profile_csv: Path, variant_csv: Path) -> pd.DataFrame | None:
    """For a table without run cells (a plain frame or a table of other numbers): the variant's and the profile's
    numbers cell by cell (tidy tables: by their row and column labels; plain frames with the same columns and
    rows: every numeric column) and their difference; no paired test. None when they do not line up."""
    if not profile_csv.is_file():
        return None
    mine, theirs = pd.read_csv(variant_csv), pd.read_csv(profile_csv)
    if list(mine.columns) != list(theirs.columns):
        return None
    if list(mine.columns[-3:]) == ["value", "ci_low", "ci_high"]:
        labels = list(mine.columns[:-3])
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


@dataclass
class TableComparer:
    """``ReportContext.after_table`` of a variant: compares every table it saves with the profile's copy
    (``baseline_dir``) and saves ``<table>_vs_profile`` with a sentence of "What this shows" (also shown in the
    notebook). ``baseline`` is the :class:`~r2mad_core.reproduce.grid.ExperimentGrid` of the profile's own values
    (same runs and cache), used only to find the profile's run cells."""

    ctx: Any
    variant: Variant
    baseline: Any = None
    notebook_number: str | None = None
    bootstrap_resamples: int = 1000
    seed: int = 0
    show: bool = True
    sentences: list[str] = field(default_factory=list)

    def __call__(self, table: Any, name: str) -> None:
        if name.endswith(COMPARISON_SUFFIX):
            return
        baseline_dir = Path(self.ctx.baseline_dir)
        if name not in read_manifest(baseline_dir)["artifacts"]:
            self._say([f"{name}: the profile {self.variant.profile} has not written this table yet, so it is not "
                       f"compared; `{self.variant.command(self.notebook_number)}` runs the baseline (it shares this "
                       f"variant's runs and cache)."])
            return
        frame = compare_table(table, self.variant, self.baseline, bootstrap_resamples=self.bootstrap_resamples,
                              seed=self.seed) if isinstance(table, Table) and table.cells else pd.DataFrame()
        tested = not frame.empty
        if not tested:
            frame = compare_files(baseline_dir / f"{name}.csv", Path(self.ctx.out_dir) / f"{name}.csv")
            if frame is None or frame.empty:
                return
        sentences = comparison_sentences(frame, self.variant, name) if tested else [
            f"{name}, {self.variant.describe()}: {int((frame['difference'].abs() > 1e-12).sum())} of {len(frame)} "
            f"numbers differ from the profile's (largest change {frame['difference'].abs().max():.3g}; these numbers "
            f"are not per-question outcomes, so no paired test)."]
        caption = (f"{name} of variant {self.variant.name} against profile {self.variant.profile}: each cell's value, "
                   f"the profile's, the difference"
                   + (" with its paired 95% bootstrap CI and the exact McNemar p on the same questions (p_holm: "
                      "Holm-adjusted over the table's cells, the p that decides significance); same_run: the "
                      "override does not change the cell (the profile's run, replayed); round0_unchanged / "
                      "round0_shared: debates whose round-0 requests are unchanged / whose round-0 generations are "
                      "the very same" if tested else "")
                   + ". " + " ".join(sentences))
        self.ctx.save_table(frame, name + COMPARISON_SUFFIX, caption=caption, float_format="{:.3g}",
                            compared_with=name, notes=" ".join(sentences))
        self._say(sentences, frame)

    def _say(self, sentences: list[str], frame: pd.DataFrame | None = None) -> None:
        self.sentences.extend(sentences)
        if not self.show:
            return
        try:
            from IPython.display import Markdown, display  # lazy: IPython only inside a notebook kernel
        except ImportError:  # outside a kernel
            print("\n".join(sentences))
            return
        text = "**Compared with the profile.** " + " ".join(sentences)
        display(Markdown(text))


def mark_variant(executed: Path, profile: Any, name: str | None, artifacts_dir: Path, figures_dir: Path) -> None:
    """A variant's executed notebook says at its top which variant it is and where its outputs went."""
    import nbformat  # lazy: the notebooks extra

    from r2mad_core.files import atomic_write

    if not executed.is_file():
        return
    found = differences(profile_values(profile), profile_values(profile.reloaded()))
    variant = Variant(profile.name, found or {"?": (None, None)}, name or "")
    notebook = nbformat.read(executed, as_version=4)
    cell = nbformat.v4.new_markdown_cell(
        f"**Variant `{variant.name}` of profile {profile.name}**: {variant.describe()}. Its figures and tables are in "
        f"`{shown_path(artifacts_dir)}/`, each compared with the profile's (`*_vs_profile`); the profile's "
        f"own artifacts are in `{shown_path(figures_dir)}/`.")
    cell.metadata["tags"] = ["variant"]
    notebook.cells.insert(0, cell)
    atomic_write(executed, nbformat.writes(notebook) + "\n")


# --------------------------------------------------------------------------------------------
# As executed: the variant's overrides read back from the run configurations its tables came from
# --------------------------------------------------------------------------------------------

#: Profile fields a run directory's ``config.json`` records under another name.
RECORDED_AS = {"test_limit": "limit"}


def recorded_value(config: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """``(True, value)`` when a run's ``config.json`` records ``key`` (the method's options, the cell, the debate
    settings), else ``(False, None)``."""
    key = RECORDED_AS.get(key) or (BY_NAME[key].method_option if key in BY_NAME else key)  # icl_match: ``match``
    method = config.get("method") or {}
    for where in (method.get("options") or {}, config, method.get("debate") or {}):
        if isinstance(where, Mapping) and key in where:
            return True, where[key]
    return False, None


def as_executed(run_dirs: Sequence[str | Path], overrides: Mapping[str, tuple[Any, Any]]) -> dict[str, dict[str, Any]]:
    """For each override: how many of the runs' ``config.json`` record the key (``recorded_by``) and how many
    record the override's value (``with_value``), of ``cells`` runs; read back from what executed, not the request."""
    configs = []
    for run_dir in dict.fromkeys(str(d) for d in run_dirs):
        path = Path(run_dir) / "config.json"
        if path.is_file():
            configs.append(json.loads(path.read_text(encoding="utf-8")))
    found = {}
    for key, (value, _) in overrides.items():
        values = [v for ok, v in (recorded_value(c, key) for c in configs) if ok]
        found[key] = {"value": jsonable(value), "cells": len(configs), "recorded_by": len(values),
                      "with_value": sum(same_value(v, value) for v in values)}
    return found


def executed_sentence(name: str, executed: Mapping[str, Mapping[str, Any]]) -> str:
    """``tab_x as executed (read back from its 25 run configs): round0 = shared in 25 of 25.``"""
    cells = max((e["cells"] for e in executed.values()), default=0)
    parts = []
    for key, e in executed.items():
        shown = f"{key} = {show_value(e['value'])}"
        if not e["recorded_by"]:
            parts.append(f"{shown}: recorded by no run (it chooses which cells run, or changes nothing here)")
        elif not e["with_value"]:
            parts.append(f"{shown}: in none of the {e['recorded_by']} runs that record {key} (the override changes "
                         f"nothing this table ran)")
        else:
            parts.append(f"{shown} in {e['with_value']} of {e['recorded_by']} runs that record it")
    return f"{name} as executed (read back from its {cells} run configs): " + "; ".join(parts) + "."


def record_executed(ctx: Any, table: Any, name: str, variant: Variant) -> str | None:
    """After a variant's table is saved: its overrides as its cells' run configs recorded them, in the manifest entry
    (``variant_as_executed``) and shown; None for a table without run cells."""
    cells = (table.cells if isinstance(table, Table) else None) or {}
    run_dirs = [o.run_dir for outcomes in cells.values() for o in outcomes]
    if not run_dirs or name.endswith(COMPARISON_SUFFIX):
        return None
    executed = as_executed(run_dirs, variant.overrides)
    sentence = executed_sentence(name, executed)
    record = read_manifest(ctx.out_dir)["artifacts"].get(name)
    if record is not None:
        update_manifest(ctx.out_dir, name, {**record, "variant_as_executed": executed})
    try:
        from IPython.display import Markdown, display  # lazy: IPython only inside a notebook kernel

        display(Markdown(f"**As executed.** {sentence}"))
    except ImportError:
        print(sentence)
    return sentence


def changes_nothing(figures_dir: str | Path) -> bool:
    """Whether a variant's tables show that its overrides changed nothing that ran: every table with run cells
    records, for every override that any run records, the override's value in none of them."""
    records = [r.get("variant_as_executed") for r in read_manifest(figures_dir)["artifacts"].values()]
    records = [r for r in records if r]
    recorded = [e for r in records for e in r.values() if e["recorded_by"]]
    return bool(recorded) and not any(e["with_value"] for e in recorded)
