"""Collecting a reproduction: every cell behind the paper's tables, run (or loaded), each number in the paper's terms.

:func:`collect_reproduction` asks the notebooks' :class:`~r2mad_lab.reproduce.grid.ExperimentGrid` for the cells of
Tables 1-7 and the shared-misconception figure (notebook 10's one step) and returns them as a :class:`Reproduction`:
the rows :func:`r2mad_lab.report.comparison.compare_with_paper` and ``check_orderings`` compare with the paper.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from tqdm.std import tqdm

from r2mad_lab.experiments.method_labels import (
    ABLATION_METHODS,
    COST_METHODS,
    ICL_METHODS,
    LARGE_MODEL_METHODS,
    MAD_M2_METHODS,
    MAIN_METHODS,
    SHARED_ROUND0,
    SUBSET_METHODS,
    TRANSITION_METHODS,
    retrieval_method_label,
    sc_methods,
)
from r2mad_lab.experiments.model_specs import large_model_plan
from r2mad_lab.export.table import write_profile_table
from r2mad_lab.report.comparison import pooled_average_rows
from r2mad_lab.report.results import C_TO_W_METRIC, PAPER_DESIGN_METRIC, SUBSET_METRIC, W_TO_C_METRIC, GridResults
from r2mad_lab.reproduce.grid import ExperimentGrid


@dataclass
class Reproduction:
    """Every reproduced number in the paper's terms (:func:`collect_reproduction`)."""

    reproduced: pd.DataFrame  # table, model, paper_model, method, benchmark, metric, value, ci_low, ci_high, se, n
    per_question: pd.DataFrame  # model, paper_model, benchmark, method, sample_id, correct, metric
    grids: dict[str, GridResults]


class _OneBar:
    """An :class:`~r2mad_lab.reproduce.grid.ExperimentGrid` whose ``grid`` calls share one progress bar (each grid's
    own bar off): :func:`collect_reproduction` is one step of notebook 10."""

    def __init__(self, exp: ExperimentGrid, total: int) -> None:
        self._exp = exp
        self._bar = None
        if exp.progress:
            self._bar = tqdm(total=total, desc="collecting the paper's tables", unit="grid", mininterval=2.0,
                             file=sys.stderr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exp, name)

    def grid(self, *args: Any, **kwargs: Any) -> GridResults:
        shown, self._exp.progress = self._exp.progress, False
        try:
            return self._exp.grid(*args, **kwargs)
        finally:
            self._exp.progress = shown
            if self._bar is not None:
                self._bar.update(1)

    def close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()


def collect_reproduction(
    exp: ExperimentGrid,
    *,
    sc_paths: Sequence[int],
    retrieval_policies: Sequence[str],
    retrieval_models: Sequence[str],
    retrieval_benchmarks: Sequence[str],
    icl_models: Sequence[str],
    icl_benchmarks: Sequence[str],
    cost_benchmark: str,
    large_models: Sequence[Mapping[str, Any]] = (),
    samples_dir: str | Path | None = None,
) -> Reproduction:
    """Run (or, after notebooks 03-07, load) every cell behind the paper's tables and put each number
    in the paper's terms: same table label, method and benchmark names, metric names as in
    ``reported_results.csv``, the paper model each reproduced model stands in for. ``samples_dir`` (the profile's
    figures folder, a variant's for a variant): every cell's questions there as ``samples.parquet``
    (:func:`r2mad_lab.export.table.write_profile_table`)."""
    grids: dict[str, GridResults] = {}
    frames: list[pd.DataFrame] = []
    # one bar for the whole step
    exp = _OneBar(exp, total=8 + (exp.choices["round0"] != "shared") + sum("stand_in" not in e for e in large_models))
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
    # a large model the profile only names a stand-in for is not run: no number in its name
    specs = [spec for _, spec in large_model_plan(large_models, exp.models) if spec is not None]
    if specs:
        large = GridResults([], exp.bootstrap_resamples, exp.seed)
        for spec in specs:
            large = large + exp.grid(LARGE_MODEL_METHODS, models=[spec])
        grids["tab:large_models"] = large
        frames.append(large.reproduced("tab:large_models", LARGE_MODEL_METHODS))

    subset_runs = exp.grid(sorted(set(SUBSET_METHODS) | set(TRANSITION_METHODS)))
    grids["shared_misconception"] = subset_runs
    # RQ4 on a design that selects on no arm's outcomes: both arms replay one round 0 and the subset is taken from it
    # (docs/statistics.md, "Subsets"); with round0: independent the shared-round-0 pair is run (notebook 06 runs it)
    rq4 = ("MAD", "R2-MAD")
    if exp.choices["round0"] == "shared":
        subset_pair, subset_suffix = subset_runs, ""
    else:
        subset_pair, subset_suffix = exp.grid([m + SHARED_ROUND0 for m in rq4]), str(SHARED_ROUND0)
        grids["shared_misconception_shared_round0"] = subset_pair
    subset = subset_pair.subset_accuracy([m + subset_suffix for m in rq4], reference="MAD" + subset_suffix)
    subset["method"] = [m[:len(m) - len(subset_suffix)] for m in subset["method"]]
    frames.append(subset.assign(table="fig:combined_eval (text)", metric=SUBSET_METRIC)
                  .rename(columns={"accuracy": "value"}))
    rates = subset_runs.transition_rates(TRANSITION_METHODS)
    for column, metric, count in (("c_to_w", C_TO_W_METRIC, "n_correct_before"),
                                  ("w_to_c", W_TO_C_METRIC, "n_wrong_before")):
        part = rates.assign(metric=metric, value=rates[column], n=rates[count], ci_low=np.nan, ci_high=np.nan,
                            se=np.nan)
        part["table"] = np.where(part["paper_model"] == "Qwen2.5-7B-Instruct", "tab:flip_recovery",
                                 "tab:flip_recovery_extra")
        frames.append(part)

    cost_runs = exp.grid(COST_METHODS, benchmarks=[cost_benchmark])
    grids["tab:cost"] = cost_runs
    cost = cost_runs.cost(COST_METHODS)
    for column, metric in (("debate_tokens", "debate tokens per query"), ("summary_tokens", "summary tokens per query"),
                           ("seconds_per_query", "wall seconds per query")):
        part = cost.assign(metric=metric, value=cost[column], table="tab:cost", ci_low=np.nan, ci_high=np.nan,
                           se=np.nan)
        if column == "summary_tokens":
            part = part[part["method"] == "R2-MAD"]
        if column == "seconds_per_query":
            # only times measured when every generation was made (not simulated, nothing replayed)
            part = part[part["time_measured"] & (part["replayed_share"] == 0.0)]
        frames.append(part)

    columns = ["table", "model", "paper_model", "method", "benchmark", "metric", "value", "ci_low", "ci_high", "se",
               "n"]
    reproduced = pd.concat([f[columns] for f in frames if not f.empty], ignore_index=True)
    everything = GridResults([o for g in grids.values() for o in g.outcomes], exp.bootstrap_resamples, exp.seed)
    per_question = everything.per_question().drop_duplicates(["model", "paper_model", "benchmark", "method",
                                                              "sample_id"])
    per_question = pd.concat([
        per_question.assign(metric="accuracy"),
        subset_pair.unbiased_subset_per_question(rq4, reference="MAD" + subset_suffix, suffix=subset_suffix),
    ] + ([] if not subset_suffix else [  # the paper's design, shown beside it, labelled biased and never tested
        subset_runs.subset_per_question(rq4).assign(metric=PAPER_DESIGN_METRIC)]), ignore_index=True)
    exp.close_bar()
    if samples_dir is not None:
        variant = getattr(exp, "variant", None)
        write_profile_table(everything.outcomes, samples_dir, getattr(variant, "name", "") or "")
    return Reproduction(reproduced=reproduced, per_question=per_question, grids=grids)
