"""Notebook 06's tables: accuracy on the shared-misconception subset, stance transitions (Tables 4 and 7), round 0.

Each function takes the frames :class:`r2mad_lab.report.results.GridResults` gives (``subset_accuracy``,
``transition_rates``) and returns the :class:`~r2mad_lab.report.tables.Table` the notebook saves and shows; the
notebook keeps its parameters, its calls, its plots and its narrative.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from r2mad_lab.experiments.method_labels import TRANSITION_METHODS
from r2mad_lab.report import tables

#: The two stance-transition rates (:class:`r2mad_lab.report.stances.TransitionRates`) as the tables name them.
RATE_NAMES = {"c_to_w": "C->W (lower is better)", "w_to_c": "W->C (higher is better)"}
#: The paper models of Table 7 (the extra models); Table 4 is every other model (the paper's Qwen2.5-7B-Instruct).
EXTRA_PAPER_MODELS = ("Qwen3-8B", "Gemma-3-4B-IT")
TRANSITION_CAPTION = ("Stance-transition rates on the shared-misconception subset: C->W = correct agents "
                      "switching to a wrong answer, W->C = wrong agents recovering, over agent-round transitions.")


def subset_accuracy_table(subset_accuracy: pd.DataFrame, caption: str) -> tables.Table:
    """Final accuracy on the subset, one row per (model, benchmark) with its subset size beside the benchmark."""
    sizes = " (n=" + subset_accuracy["n"].astype(str) + ")"
    labelled = subset_accuracy.assign(benchmark=subset_accuracy["benchmark"] + sizes)
    return tables.tidy_to_table(labelled, ["model", "benchmark"], "method", caption=caption)


def transition_table(frame: pd.DataFrame, caption: str, not_run: Sequence[str] = (),
                     methods: Sequence[str] = TRANSITION_METHODS) -> tables.Table | None:
    """C->W and W->C of ``frame`` (rows of ``transition_rates``), the best rate of each column marked; a paper model
    in ``not_run`` gets a row per method saying it did not run. None when there is neither."""
    tidy = frame.melt(id_vars=["model", "benchmark", "method"], value_vars=["c_to_w", "w_to_c"], var_name="rate")
    tidy["rate"] = tidy["rate"].map(RATE_NAMES)
    table = None
    if not tidy.empty:
        table = tables.tidy_to_table(tidy, ["model", "benchmark", "method"], "rate", value="value", ci=None,
                                     caption=caption, best={RATE_NAMES["c_to_w"]: "min", RATE_NAMES["w_to_c"]: "max"})
    if not not_run:
        return table
    missing = tables.Table(values=pd.DataFrame(
        tables.NOT_RUN, index=pd.MultiIndex.from_tuples([(m, "all", k) for m in not_run for k in methods],
                                                      names=["model", "benchmark", "method"]),
        columns=pd.Index(list(RATE_NAMES.values()), name="rate"), dtype=object), caption=caption)
    if table is None:
        return missing
    merged = pd.concat([table.values.astype(object), missing.values])
    return tables.Table(values=merged, caption=caption, best=table.best)


def flip_recovery_tables(rates: pd.DataFrame, models: Sequence[Any]
                         ) -> tuple[tables.Table | None, list[str], tables.Table | None, list[str]]:
    """Table 4 (the models that ran for every paper model but :data:`EXTRA_PAPER_MODELS`) and Table 7 (those that ran
    for them; a paper model with none gets a "not run" row), each with the model names its manifest records."""
    main = [m for m in models if m.paper_model not in EXTRA_PAPER_MODELS]
    extra = [m for m in models if m.paper_model in EXTRA_PAPER_MODELS]
    extra_missing = [p for p in EXTRA_PAPER_MODELS if not any(m.paper_model == p for m in extra)]
    main_note = "; ".join(m.stand_in_note for m in main if m.stands_in_for)
    flip = transition_table(rates[rates["model"].isin([m.label for m in main])],
                            TRANSITION_CAPTION + (f" {main_note}." if main_note else ""))
    extra_note = "; ".join(m.stand_in_note for m in extra if m.stands_in_for)
    flip_extra = transition_table(rates[rates["model"].isin([m.label for m in extra])],
                                  TRANSITION_CAPTION + (f" {extra_note}." if extra_note else "")
                                  + (f" {', '.join(extra_missing)}: {tables.NOT_RUN}." if extra_missing else ""),
                                  not_run=extra_missing)
    return (flip, [m.label for m in main], flip_extra,
            [m.label for m in extra] + [f"{p} ({tables.NOT_RUN})" for p in extra_missing])


def round0_table(paired_runs: Any, independent_runs: Any, paired_suffix: str, independent_suffix: str,
                 stand_in_note: str) -> tables.Table:
    """MAD and R2-MAD on the subset with a shared round 0 (paired; the subset from that MAD run) beside independent
    round-0 draws (the subset from the independent MAD run); each grid's methods carry its round-0 suffix."""
    def rows(runs: Any, suffix: str, label: str) -> pd.DataFrame:
        return runs.subset_accuracy([f"MAD{suffix}", f"R2-MAD{suffix}"], reference=f"MAD{suffix}").assign(
            run=lambda f: f["method"].str.replace(suffix, "", regex=False) + label)

    both = pd.concat([rows(paired_runs, paired_suffix, " (paired: shared round 0)"),
                      rows(independent_runs, independent_suffix, " (independent round 0)")], ignore_index=True)
    caption = ("Final accuracy on the shared-misconception subset with a shared round 0 (paired: MAD and R2-MAD start "
               "from the same generations; the subset from that MAD run) and with independent round-0 draws "
               "(the subset from the independent MAD run), 95% bootstrap CIs. "
               + (stand_in_note + "." if stand_in_note else ""))
    return tables.tidy_to_table(both, ["model", "benchmark"], "run", caption=caption)
