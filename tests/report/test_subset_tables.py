"""report.subset_tables: notebook 06's tables (the subset's accuracy, Tables 4 and 7, round 0) from hand-made frames."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from r2mad_lab.report import subset_tables, tables

RATES = ["model", "benchmark", "method", "c_to_w", "w_to_c"]


def model(label: str, paper_model: str, stands_in_for: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(label=label, paper_model=paper_model, stands_in_for=stands_in_for,
                           stand_in_note=f"{label} stands in for {stands_in_for}" if stands_in_for else "")


def rates(*rows: tuple[str, str, str, float, float]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=RATES)


def test_subset_accuracy_table_names_each_benchmark_with_its_subset_size() -> None:
    frame = pd.DataFrame([{"model": "m", "benchmark": "GSM", "method": "MAD", "accuracy": 0.5, "ci_low": 0.2,
                           "ci_high": 0.8, "n": 4},
                          {"model": "m", "benchmark": "GSM", "method": "R2-MAD", "accuracy": 0.75, "ci_low": 0.3,
                           "ci_high": 1.0, "n": 4}])
    table = subset_tables.subset_accuracy_table(frame, "cap")
    assert list(table.values.index) == [("m", "GSM (n=4)")]
    assert table.values.loc[("m", "GSM (n=4)"), "R2-MAD"] == 0.75 and table.caption == "cap"


def test_transition_table_marks_the_best_rate_and_adds_the_paper_models_that_did_not_run() -> None:
    frame = rates(("m", "GSM", "R2-MAD", 0.1, 0.6), ("m", "GSM", "R2-MAD w/o Confidence", 0.3, 0.4))
    table = subset_tables.transition_table(frame, "cap")
    c_to_w, w_to_c = subset_tables.RATE_NAMES["c_to_w"], subset_tables.RATE_NAMES["w_to_c"]
    assert table.values.loc[("m", "GSM", "R2-MAD"), c_to_w] == 0.1
    assert table.best == {c_to_w: "min", w_to_c: "max"}
    with_missing = subset_tables.transition_table(frame, "cap", not_run=["Qwen3-8B"])
    assert len(with_missing.values) == 4 and with_missing.best == table.best
    not_run = with_missing.values[with_missing.values.index.get_level_values("model") == "Qwen3-8B"]
    assert len(not_run) == 2 and (not_run == tables.NOT_RUN).all().all()
    only_missing = subset_tables.transition_table(rates(), "cap", not_run=["Qwen3-8B"])
    assert list(only_missing.values.index.get_level_values("method")) == ["R2-MAD", "R2-MAD w/o Confidence"]
    assert subset_tables.transition_table(rates(), "cap") is None


def test_flip_recovery_tables_split_table_4_from_table_7_by_paper_model() -> None:
    models = [model("qwen", "Qwen2.5-7B-Instruct"), model("gemma-sim", "Gemma-3-4B-IT", stands_in_for="Gemma-3-4B-IT")]
    frame = rates(("qwen", "GSM", "R2-MAD", 0.1, 0.6), ("gemma-sim", "GSM", "R2-MAD", 0.2, 0.5))
    flip, main, extra_table, extra = subset_tables.flip_recovery_tables(frame, models)
    assert main == ["qwen"] and extra == ["gemma-sim", f"Qwen3-8B ({tables.NOT_RUN})"]
    assert set(flip.values.index.get_level_values("model")) == {"qwen"}
    assert set(extra_table.values.index.get_level_values("model")) == {"gemma-sim", "Qwen3-8B"}
    assert flip.caption == subset_tables.TRANSITION_CAPTION
    assert "gemma-sim stands in for Gemma-3-4B-IT." in extra_table.caption
    assert extra_table.caption.endswith(f"Qwen3-8B: {tables.NOT_RUN}.")


def test_round0_table_puts_paired_and_independent_runs_side_by_side_without_their_suffixes() -> None:
    def runs(suffix: str, accuracy: float) -> SimpleNamespace:
        def subset_accuracy(methods, reference):
            assert reference == f"MAD{suffix}" and methods == [f"MAD{suffix}", f"R2-MAD{suffix}"]
            return pd.DataFrame([{"model": "m", "benchmark": "GSM", "method": name, "accuracy": accuracy,
                                  "ci_low": math.nan, "ci_high": math.nan, "n": 3} for name in methods])
        return SimpleNamespace(subset_accuracy=subset_accuracy)

    table = subset_tables.round0_table(runs("", 0.5), runs(" (independent round 0)", 0.25), "",
                                       " (independent round 0)", "")
    assert list(table.values.columns) == ["MAD (paired: shared round 0)", "R2-MAD (paired: shared round 0)",
                                          "MAD (independent round 0)", "R2-MAD (independent round 0)"]
    assert table.values.loc[("m", "GSM"), "MAD (independent round 0)"] == 0.25
    assert table.caption.endswith("95% bootstrap CIs. ")
