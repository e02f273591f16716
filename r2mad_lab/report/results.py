"""Grid results: the finished (model, benchmark, method) cells of the notebooks and their tidy views.

:class:`GridResults` holds the cells :meth:`r2mad_lab.reproduce.grid.ExperimentGrid.grid` ran or loaded
(:class:`CellOutcome`) with the views the tables need: accuracy with 95% bootstrap CIs, the paper's
``Average`` column (mean of the per-benchmark accuracies,
:func:`r2mad_lab.report.intervals.average_accuracy`), the shared-misconception subset (RQ4: questions where
MAD's agents agree on a wrong answer), stance transitions (Table 4), agent accuracy by round and per-query cost (Table
10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_core.records import TranscriptRecord
from r2mad_lab.experiments.metrics import agents_correct_by_round, limit_counts, replayed_share
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.experiments.statistics import accuracy_with_ci
from r2mad_lab.report import intervals
from r2mad_lab.report.stances import shared_misconception_subset, stance_transitions
from r2mad_lab.report.tables import AVERAGE_LABEL, Best, Table, _is_missing, benchmark_label

#: RQ4's accuracy on the shared-misconception subset, on a design that selects the subset on no arm's own outcomes
#: (shared round 0: the subset from the round 0 both arms start from; docs/statistics.md, "Subsets").
SUBSET_METRIC = "accuracy (shared-misconception subset)"
#: The same on the paper's design: the subset selected on the MAD run's own round 0 while R2-MAD draws its own. It
#: conditions on one arm's outcomes (regression to the mean pushes that arm down): shown, labelled biased, never tested.
PAPER_DESIGN_METRIC = "accuracy (shared-misconception subset, paper's design: biased)"
#: How a subset's selector relates to the two arms it compares (:func:`subset_design`).
SHARED_DESIGN = "shared round 0"
SELECTOR_DESIGN = "selector run neither arm uses"
BIASED_DESIGN = "selected on one arm's own round 0"
C_TO_W_METRIC = "C->W rate (shared-misconception subset)"
W_TO_C_METRIC = "W->C rate (shared-misconception subset)"


def _round0(records: Sequence[TranscriptRecord]) -> dict[str, tuple[str, ...]]:
    return {r.sample_id: tuple(r.rounds[0].responses) for r in records if r.rounds}


def subset_design(selector: Sequence[TranscriptRecord], a: Sequence[TranscriptRecord],
                  b: Sequence[TranscriptRecord]) -> str:
    """How a subset selected on ``selector``'s round 0 relates to the arms ``a`` and ``b`` it compares, read from the
    recorded round-0 responses: :data:`SHARED_DESIGN` (the selector's round 0 is both arms' round 0),
    :data:`SELECTOR_DESIGN` (it is neither arm's) or :data:`BIASED_DESIGN` (it is one arm's own round 0 only: the subset
    conditions on that arm's outcomes, and regression to the mean favours the other arm; docs/statistics.md)."""
    s, x, y = _round0(selector), _round0(a), _round0(b)

    def same(other: dict[str, tuple[str, ...]]) -> bool:
        common = s.keys() & other.keys()
        return bool(common) and all(s[q] == other[q] for q in common)

    in_a, in_b = same(x), same(y)
    if in_a and in_b:
        return SHARED_DESIGN
    if not in_a and not in_b:
        return SELECTOR_DESIGN
    return BIASED_DESIGN


@dataclass
class CellOutcome:
    """One finished (model, benchmark, method) cell."""

    model: ModelSpec
    benchmark: str
    method: str  # the paper's method name (row label)
    run_dir: Path
    records: list[TranscriptRecord]
    metrics: dict[str, Any]
    n_new: int = 0

    @property
    def correct(self) -> list[bool]:
        return [bool(r.correct) for r in self.records]

    def limits(self) -> dict[str, Any]:
        """The limits its completions hit, each counted apart (:data:`r2mad_lab.experiments.metrics.LIMIT_COUNTS`), and
        ``questions``: how many of its questions had at least one such completion; with the cell's names and its run
        directory (``run_dir``: the manifest names the runs an artifact came from, not the machine's path)."""
        return {"model": self.model.label, "benchmark": self.benchmark, "method": self.method,
                **cell_limits(self.records), "run_dir": str(self.run_dir)}


def cell_limits(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """:func:`r2mad_lab.experiments.metrics.limit_counts` of ``records`` plus ``questions``, the questions with any."""
    # limit_counts sums over records: count each record once, add the records' counts up (was: every record twice,
    # once for the totals and once for ``questions``)
    counts = limit_counts([])
    questions = 0
    for record in records:
        own = limit_counts([record])
        if any(own.values()):
            questions += 1
            for key, value in own.items():
                counts[key] += value
    counts["questions"] = questions
    return counts


@dataclass
class GridResults:
    """The outcomes of :meth:`ExperimentGrid.grid` with tidy views for tables and tests."""

    outcomes: list[CellOutcome]
    bootstrap_resamples: int = 10_000
    seed: int = 0

    def __add__(self, other: "GridResults") -> "GridResults":
        return GridResults(self.outcomes + other.outcomes, self.bootstrap_resamples, self.seed)

    def limits(self) -> list[dict[str, Any]]:
        """One entry per cell: the limits its completions hit (:meth:`CellOutcome.limits`); pass it as
        ``limit_cells=`` to :class:`~r2mad_lab.report.artifacts.ReportContext` saves to footnote exactly these cells."""
        return [o.limits() for o in self.outcomes]

    def get(self, model: str, benchmark: str, method: str) -> CellOutcome:
        for outcome in self.outcomes:
            if (outcome.model.label, outcome.benchmark, outcome.method) == (model, benchmark, method):
                return outcome
        raise KeyError(f"no cell ({model}, {benchmark}, {method}) in these results")

    def accuracy(self) -> pd.DataFrame:
        """One row per cell: model, paper_model, benchmark (paper name), method, accuracy, CI, SE
        (:func:`r2mad_lab.report.intervals.accuracy_se`), n, tokens."""
        rows = []
        for o in self.outcomes:
            m = o.metrics
            tokens = m.get("tokens_per_query", {})
            rows.append({
                "model": o.model.label, "paper_model": o.model.paper_model, "benchmark": benchmark_label(o.benchmark),
                "method": o.method, "accuracy": m["accuracy"], "ci_low": m["ci_low"], "ci_high": m["ci_high"],
                "se": intervals.accuracy_se([m["accuracy"]], [m["n"]]), "n": m["n"],
                "debate_tokens": tokens.get("debate", {}).get("total_tokens", 0.0),
                "summary_tokens": tokens.get("summary", {}).get("total_tokens", 0.0),
                "judge_tokens": tokens.get("judge", {}).get("total_tokens", 0.0),
                "seconds_per_query": m.get("seconds_per_query", math.nan), "run_dir": str(o.run_dir),
            })
        return pd.DataFrame(rows)

    def per_question(self) -> pd.DataFrame:
        """One row per (cell, question): model, benchmark (paper name), method, sample_id, correct."""
        rows = [
            {"model": o.model.label, "paper_model": o.model.paper_model, "benchmark": benchmark_label(o.benchmark),
             "method": o.method, "sample_id": r.sample_id, "correct": bool(r.correct)}
            for o in self.outcomes for r in o.records
        ]
        frame = pd.DataFrame(rows, columns=["model", "paper_model", "benchmark", "method", "sample_id", "correct"])
        frame.attrs["bootstrap_resamples"] = self.bootstrap_resamples  # the profile's one count, for every CI of it
        return frame

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
        low, high, errors = values.copy(), values.copy(), values.copy()
        for model, method in rows:
            part = frame[(frame[model_column] == model) & (frame.method == method)].set_index("benchmark")
            for benchmark in benchmarks:
                if benchmark in part.index:
                    values.loc[(model, method), benchmark] = part.at[benchmark, "accuracy"]
                    low.loc[(model, method), benchmark] = part.at[benchmark, "ci_low"]
                    high.loc[(model, method), benchmark] = part.at[benchmark, "ci_high"]
                    errors.loc[(model, method), benchmark] = part.at[benchmark, "se"]
            if AVERAGE_LABEL in columns and set(benchmarks) <= set(part.index):
                mine = questions[(questions[model_column] == model) & (questions.method == method)]
                groups = [mine[mine.benchmark == b]["correct"].to_numpy() for b in benchmarks]
                mean, lo, hi, se = intervals.average_accuracy(groups, n_bootstrap=self.bootstrap_resamples,
                                                              seed=self.seed)
                values.loc[(model, method), AVERAGE_LABEL] = mean
                low.loc[(model, method), AVERAGE_LABEL] = lo
                high.loc[(model, method), AVERAGE_LABEL] = hi
                errors.loc[(model, method), AVERAGE_LABEL] = se
        cells = {}
        for model, method in rows:
            mine = [o for o in self.outcomes if getattr(o.model, model_column if model_column != "model" else "label")
                    == model and o.method == method]
            row = (model, method) if grouped else method
            for benchmark in benchmarks:
                cells[(row, benchmark)] = [o for o in mine if benchmark_label(o.benchmark) == benchmark]
            if AVERAGE_LABEL in columns and len(mine) == len(benchmarks):
                cells[(row, AVERAGE_LABEL)] = mine
        if not grouped:
            for frame_ in (values, low, high, errors):
                frame_.index = frame_.index.droplevel("model")
        return Table(values=values, ci_low=low, ci_high=high, se=errors, caption=caption, best="max",
                     cells={k: v for k, v in cells.items() if v})

    def reproduced(self, table_label: str, methods: Sequence[str] | None = None, *,
                   with_average: bool = True) -> pd.DataFrame:
        """Tidy rows for :func:`compare_with_paper`: table, model, paper_model, method, benchmark,
        metric, value, ci_low, ci_high, se, n (``Average`` rows: the mean of the benchmarks)."""
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
                    n = (int(sizes.loc[method].sum()) if benchmark == AVERAGE_LABEL
                         else int(sizes.loc[(method, benchmark)]))
                    rows.append({
                        "table": table_label, "model": labels[paper_model], "paper_model": paper_model,
                        "method": method, "benchmark": benchmark, "metric": "accuracy", "value": float(value),
                        "ci_low": float(table.ci_low.at[(paper_model, method), benchmark]),
                        "ci_high": float(table.ci_high.at[(paper_model, method), benchmark]),
                        "se": float(table.se.at[(paper_model, method), benchmark]), "n": n,
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
        pairs = list(dict.fromkeys(zip(frame["model"], frame["benchmark"], strict=False)))
        columns = [f"{m} / {b}" for m, b in pairs] + [AVERAGE_LABEL]
        index = pd.Index([(row_names or {}).get(m, m) for m in methods], name="method")
        values = pd.DataFrame(np.nan, index=index, columns=pd.Index(columns, name="cell"))
        low, high, errors = values.copy(), values.copy(), values.copy()
        cells: dict[Any, list[CellOutcome]] = {}
        for method, row in zip(methods, index, strict=False):
            groups = []
            for (model, benchmark), column in zip(pairs, columns, strict=False):
                hit = frame[(frame.model == model) & (frame.benchmark == benchmark) & (frame.method == method)]
                if hit.empty:
                    continue
                values.at[row, column] = hit["accuracy"].iloc[0]
                low.at[row, column] = hit["ci_low"].iloc[0]
                high.at[row, column] = hit["ci_high"].iloc[0]
                errors.at[row, column] = hit["se"].iloc[0]
                mine = questions[(questions.model == model) & (questions.benchmark == benchmark)
                                 & (questions.method == method)]
                groups.append(mine["correct"].to_numpy())
                cells[(row, column)] = [o for o in self.outcomes if (o.model.label, benchmark_label(o.benchmark),
                                                                     o.method) == (model, benchmark, method)]
            if len(groups) == len(pairs):
                mean, lo, hi, se = intervals.average_accuracy(groups, n_bootstrap=self.bootstrap_resamples,
                                                              seed=self.seed)
                values.at[row, AVERAGE_LABEL], low.at[row, AVERAGE_LABEL], high.at[row, AVERAGE_LABEL] = mean, lo, hi
                errors.at[row, AVERAGE_LABEL] = se
                cells[(row, AVERAGE_LABEL)] = [o for c in columns[:-1] for o in cells.get((row, c), [])]
        return Table(values=values, ci_low=low, ci_high=high, se=errors, caption=caption, best=best, cells=cells)

    def method_columns_table(self, methods: Sequence[str], *, caption: str = "") -> Table:
        """Rows = (model, benchmark), columns = methods, plus an ``Average`` row over all rows: the
        layout of the ICL-CoT comparison (Table 8)."""
        frame = self.accuracy()
        frame = frame[frame["method"].isin(methods)]
        questions = self.per_question()
        pairs = list(dict.fromkeys(zip(frame["model"], frame["benchmark"], strict=False)))
        index = pd.MultiIndex.from_tuples([*pairs, (AVERAGE_LABEL, "")], names=["model", "benchmark"])
        values = pd.DataFrame(np.nan, index=index, columns=pd.Index(list(methods), name="method"))
        low, high, errors = values.copy(), values.copy(), values.copy()
        for method in methods:
            groups = []
            for pair in pairs:
                hit = frame[(frame.model == pair[0]) & (frame.benchmark == pair[1]) & (frame.method == method)]
                if hit.empty:
                    continue
                values.at[pair, method] = hit["accuracy"].iloc[0]
                low.at[pair, method] = hit["ci_low"].iloc[0]
                high.at[pair, method] = hit["ci_high"].iloc[0]
                errors.at[pair, method] = hit["se"].iloc[0]
                mine = questions[(questions.model == pair[0]) & (questions.benchmark == pair[1])
                                 & (questions.method == method)]
                groups.append(mine["correct"].to_numpy())
            if len(groups) == len(pairs):
                mean, lo, hi, se = intervals.average_accuracy(groups, n_bootstrap=self.bootstrap_resamples,
                                                              seed=self.seed)
                key = (AVERAGE_LABEL, "")
                values.at[key, method], low.at[key, method], high.at[key, method] = mean, lo, hi
                errors.at[key, method] = se
        return Table(values=values, ci_low=low, ci_high=high, se=errors, caption=caption, best=None)

    # -- the shared-misconception subset (RQ4) and stance transitions (Table 4) ------------------
    def shared_misconception_subsets(self, reference: str = "MAD") -> dict[tuple[str, str], set[str]]:
        """(model label, benchmark id) -> the sample ids where a strict majority of the ``reference``
        method's agents is wrong at round 0 (:func:`r2mad_lab.report.stances.shared_misconception_subset`)."""
        return {(o.model.label, o.benchmark): shared_misconception_subset(o.records)
                for o in self.outcomes if o.method == reference}

    def subset_accuracy(self, methods: Sequence[str], reference: str = "MAD") -> pd.DataFrame:
        """Accuracy of ``methods`` on the shared-misconception subset of each (model, benchmark):
        model, paper_model, benchmark, method, accuracy, ci_low, ci_high, se, n (subset size)."""
        subsets = self.shared_misconception_subsets(reference)
        rows = []
        for o in self.outcomes:
            if o.method not in methods or (o.model.label, o.benchmark) not in subsets:
                continue
            subset = subsets[(o.model.label, o.benchmark)]
            correct = [bool(r.correct) for r in o.records if r.sample_id in subset]
            acc = accuracy_with_ci(correct, n_bootstrap=self.bootstrap_resamples, seed=self.seed)
            rows.append({"model": o.model.label, "paper_model": o.model.paper_model,
                         "benchmark": benchmark_label(o.benchmark), "method": o.method, "accuracy": acc.accuracy,
                         "ci_low": acc.low, "ci_high": acc.high,
                         "se": intervals.accuracy_se([acc.accuracy], [acc.n]), "n": acc.n})
        return pd.DataFrame(rows, columns=["model", "paper_model", "benchmark", "method", "accuracy",
                                           "ci_low", "ci_high", "se", "n"])

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

    def subset_designs(self, a: str, b: str, reference: str = "MAD") -> dict[tuple[str, str], str]:
        """(model label, benchmark id) -> how the subset of ``reference``'s round 0 relates to the arms ``a`` and
        ``b`` (:func:`subset_design`, read from the recorded round-0 responses)."""
        cells = {(o.model.label, o.benchmark, o.method): o.records for o in self.outcomes}
        out = {}
        for (model, benchmark, method), records in cells.items():
            if method != reference or (model, benchmark, a) not in cells or (model, benchmark, b) not in cells:
                continue
            out[(model, benchmark)] = subset_design(records, cells[(model, benchmark, a)], cells[(model, benchmark, b)])
        return out

    def unbiased_subset_per_question(self, methods: Sequence[str], reference: str, suffix: str = "",
                                     metric: str = SUBSET_METRIC) -> pd.DataFrame:
        """:meth:`subset_per_question` of ``methods + suffix`` on ``reference``'s subset, the labels without
        ``suffix``, refused (ValueError naming the cell) where the subset is selected on one arm's own round 0
        (:data:`BIASED_DESIGN`): the design the claims test (docs/statistics.md, "Subsets")."""
        labels = [f"{m}{suffix}" for m in methods]
        for i, first in enumerate(labels):
            for second in labels[i + 1:]:
                for cell, design in self.subset_designs(first, second, reference).items():
                    if design == BIASED_DESIGN:
                        raise ValueError(f"subset of {reference} at {cell}: {design} ({first} vs {second}); "
                                         "a subset comparison needs a shared round 0 or a selector neither arm uses")
        frame = self.subset_per_question(labels, reference=reference)
        if suffix:
            frame["method"] = frame["method"].str.slice(0, -len(suffix))
        frame["metric"] = metric
        return frame

    def transition_rates(self, methods: Sequence[str], reference: str = "MAD") -> pd.DataFrame:
        """C->W and W->C stance-transition rates (Table 4) of ``methods`` on the shared-misconception
        subset: model, paper_model, benchmark, method, c_to_w, w_to_c and their counts."""
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
            records = [r for r in o.records if keep is None or r.sample_id in keep]
            horizon = max((len(r.rounds) for r in o.records), default=0)
            for t, (right, count) in enumerate(agents_correct_by_round(records, horizon)):
                rows.append({"model": o.model.label, "paper_model": o.model.paper_model,
                             "benchmark": benchmark_label(o.benchmark), "method": o.method, "round": t,
                             "agent_accuracy": right / count if count else math.nan, "answers": count})
        return pd.DataFrame(rows)

    def cost(self, methods: Sequence[str]) -> pd.DataFrame:
        """Per-query cost of each cell (Table 10): prompt/completion tokens per tag, requests, and the
        wall seconds per query that the run which wrote the transcripts measured.

        ``replayed_share`` is the share of the cell's generations (debate turns and extra calls) that
        came from the response cache when the transcripts were written: those cost no time then, so
        the measured time leaves them out. ``time_measured`` is False for simulated agents (their
        wall time is the simulator's bookkeeping) and for a cell whose every generation was replayed;
        :func:`r2mad_lab.report.tables.time_cell` turns both into the text a table shows.
        """
        rows = []
        for o in self.outcomes:
            if o.method not in methods:
                continue
            tokens = o.metrics.get("tokens_per_query", {})
            replayed = replayed_share(o.records)
            row = {"model": o.model.label, "paper_model": o.model.paper_model, "engine": o.model.engine,
                   "benchmark": benchmark_label(o.benchmark), "method": o.method, "n": o.metrics["n"],
                   "seconds_per_query": o.metrics.get("seconds_per_query", math.nan),
                   "replayed_share": replayed,
                   "time_measured": o.model.engine != "simulated" and replayed < 1.0}
            for tag in ("debate", "summary", "judge"):
                part = tokens.get(tag, {})
                row[f"{tag}_requests"] = part.get("requests", 0.0)
                row[f"{tag}_prompt_tokens"] = part.get("prompt_tokens", 0.0)
                row[f"{tag}_completion_tokens"] = part.get("completion_tokens", 0.0)
                row[f"{tag}_tokens"] = part.get("total_tokens", 0.0)
            rows.append(row)
        return pd.DataFrame(rows)
