"""A variant against its profile: every table it shares compared cell by cell on the same questions.

Every table a variant shares with its profile is compared cell by cell with the profile's: the difference, a paired
test on the same questions (:func:`r2mad_lab.report.inference.paired_estimate`: exact McNemar per benchmark, the
stratified exact sign test of the shown mean of per-benchmark differences for an Average, as the sweeps'), Holm over
the table's cells (:mod:`r2mad_lab.report.multiplicity`) and a generated sentence of "What this shows", saved as
``<table>_vs_profile`` (:func:`compare_table`, in the kernel :class:`TableComparer`). The variant's overrides are also
read back from the run configurations its tables came from (:func:`record_executed`), so a variant that changed
nothing that ran says so (:func:`changes_nothing`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from r2mad_lab.experiments.protocol import BY_NAME
from r2mad_lab.experiments.run_reader import finished_records
from r2mad_lab.report import inference, multiplicity
from r2mad_lab.report.artifacts import jsonable, read_manifest, update_manifest
from r2mad_lab.report.tables import Table
from r2mad_lab.reproduce.compare.tables import COMPARISON_SUFFIX, compare_files
from r2mad_lab.reproduce.points import Variant, same_value, show_value

#: The columns of a ``_vs_profile`` table that are not the cell's labels.
COMPARISON_COLUMNS = ("variant", "profile", "difference", "ci_low", "ci_high", "se", "p_mcnemar", "p_holm", "pairs",
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
        records = finished_records(run_dir, len(outcome.records))
        if records is None:
            return None
        same = same and Path(run_dir).resolve() == Path(outcome.run_dir).resolve()
        for r in outcome.records:
            mine[(outcome.model.label, outcome.benchmark, r.sample_id)] = bool(r.correct)
        for r in records:
            theirs[(outcome.model.label, outcome.benchmark, r.sample_id)] = bool(r.correct)
        accuracies.append(sum(bool(r.correct) for r in records) / len(records))
        sharing = [a + b for a, b in zip(sharing, round0_sharing(outcome.records, records), strict=False)]
    return mine, theirs, accuracies, same, (sharing[0], sharing[1], sharing[2])


def compare_table(table: Any, variant: Variant, baseline: Any, *, bootstrap_resamples: int = 1000,
                  seed: int = 0) -> pd.DataFrame:
    """One row per cell of a table built from run cells (``table.cells``): the variant's value, the profile's
    (its same cells, loaded from the shared runs), the difference, its paired 95% CI, its SE and the exact McNemar p on
    the same questions with its standard error, the number of pairs, and whether the cell is the very same run
    (unchanged by the overrides). A cell the profile has not run has no profile value."""
    cells = (table.cells if isinstance(table, Table) else None) or {}  # a DataFrame's "cells" would be a column
    row_names = [n or "row" for n in table.values.index.names]
    column_name = table.values.columns.name or "column"
    rows = []
    for row in table.values.index:
        for column in table.values.columns:
            outcomes = cells.get((row, column))
            if not outcomes:
                continue
            labels = dict(zip(row_names, row if isinstance(row, tuple) else (row,), strict=False))
            value = table.values.at[row, column]
            entry = {**labels, column_name: column, "variant": float(value), "profile": math.nan,
                     "difference": math.nan, "ci_low": math.nan, "ci_high": math.nan, "se": math.nan,
                     "p_mcnemar": math.nan, "p_holm": math.nan, "pairs": 0, "same_run": False, "round0_unchanged": 0,
                     "round0_shared": 0}
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
                             ci_low=test.ci_low, ci_high=test.ci_high, se=test.se, p_mcnemar=test.p_value,
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
    from r2mad_lab.report.inference import count_phrase  # the one rule: no verdict word below its n

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


def comparison_lines(figures_dir: Path) -> list[str]:
    """The "What this shows" sentences of every ``*_vs_profile`` table of a variant folder."""
    manifest = read_manifest(figures_dir)["artifacts"]
    return [record.get("notes", "") for name, record in manifest.items()
            if name.endswith(COMPARISON_SUFFIX) and record.get("notes")]


@dataclass
class TableComparer:
    """``ReportContext.after_table`` of a variant: compares every table it saves with the profile's copy
    (``baseline_dir``) and saves ``<table>_vs_profile`` with a sentence of "What this shows" (also shown in the
    notebook). ``baseline`` is the :class:`~r2mad_lab.reproduce.grid.ExperimentGrid` of the profile's own values
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
                   + (" with its paired 95% CI, its SE and the exact McNemar p on the same questions (p_holm: "
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
