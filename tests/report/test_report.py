"""report: table rendering round trips, the manifest, the paper's numbers and the comparison."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from r2mad_lab.experiments.metrics import replayed_share
from r2mad_lab.report import (
    artifacts,
    tables,  # noqa: E402
)
from r2mad_lab.report import comparison as report
from r2mad_lab.report.artifacts import (  # noqa: E402
    ReportContext,
    missing_artifacts,
    read_manifest,
    round_floats,
    save_figure,
    save_table,
    update_manifest,
)
from r2mad_lab.report.comparison import (  # noqa: E402
    OrderingClaim,
    check_orderings,
    compare_with_paper,
    load_reported_results,
)
from r2mad_lab.report.tables import (  # noqa: E402
    Table,
    parse_latex_table,
    parse_markdown_table,
    read_table,
    render_latex,
    render_markdown,
)
from r2mad_lab.reproduce import grid


def grouped_table() -> Table:
    index = pd.MultiIndex.from_tuples(
        [("Qwen", "CoT"), ("Qwen", "R2-MAD"), ("Gemma", "CoT"), ("Gemma", "R2-MAD")], names=["model", "method"]
    )
    columns = pd.Index(["MATH500", "Econ_%&"], name="benchmark")
    values = pd.DataFrame([[0.1 + 0.2, 0.6], [0.55, 0.6], [0.3, np.nan], [0.4, 0.2]], index=index, columns=columns)
    return Table(values=values, ci_low=values - 0.1, ci_high=values + 0.125, caption="A & B: 95% CI", best="max")


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def test_tidy_csv_round_trip_is_exact(tmp_path: Path) -> None:
    table = grouped_table()
    paths = save_table(table, "tab_demo", tmp_path, profile="tiny")
    assert [p.name for p in paths] == ["tab_demo.csv", "tab_demo.md", "tab_demo.tex"]
    tidy = pd.read_csv(paths[0])
    assert list(tidy.columns) == ["model", "method", "benchmark", "value", "ci_low", "ci_high"]
    assert len(tidy) == 8  # one row per cell
    back = read_table(paths[0])
    # floats carry TABLE_SIGNIFICANT_DIGITS (6) significant digits: 0.1 + 0.2 (0.30000000000000004) is written 0.3,
    # the same on every machine; at those digits the round trip is exact
    assert back.values.loc[("Qwen", "CoT"), "MATH500"] == 0.3 != 0.1 + 0.2
    assert "0.30000000000000004" not in paths[0].read_text()
    pd.testing.assert_frame_equal(back.values.astype(float), round_floats(table.values.astype(float)), check_names=True)
    pd.testing.assert_frame_equal(back.ci_low, round_floats(table.ci_low.astype(float)))
    pd.testing.assert_frame_equal(back.ci_high, round_floats(table.ci_high.astype(float)))
    assert list(back.values.index) == list(table.values.index)  # order of first appearance kept


def test_cell_text_formats_ci_and_missing_values() -> None:
    table = grouped_table()
    assert table.cell_text(("Qwen", "CoT"), "MATH500") == "0.300 [0.200, 0.425]"
    assert table.cell_text(("Gemma", "CoT"), "Econ_%&") == "--"
    flat = Table(values=pd.DataFrame({"tokens": [5750, 14670], "share": [0.5, 0.25]}), show_index=False)
    assert flat.cell_text(0, "tokens") == "5750"  # integers stay integers
    assert flat.cell_text(1, "share") == "0.250"
    custom = Table(values=pd.DataFrame({"tokens": [5750.0]}), formats={"tokens": ",.0f"})
    assert custom.cell_text(0, "tokens") == "5,750"


def _cell(model: str, benchmark: str, correct: list[int]):
    from types import SimpleNamespace

    records = [SimpleNamespace(sample_id=f"q{i}", correct=bool(c)) for i, c in enumerate(correct)]
    return [SimpleNamespace(model=SimpleNamespace(label=model), benchmark=benchmark, records=records)]


def _tested_table(n: int = 40, best_row: list[int] | None = None) -> Table:
    """One column, three rows on the same n questions: a is right on all, b and c on half (a beats both, p tiny)."""
    rows = {"a": best_row or [1] * n, "b": [i % 2 for i in range(n)], "c": [(i + 1) % 2 for i in range(n)]}
    values = pd.DataFrame({"acc": [sum(v) / n for v in rows.values()]}, index=pd.Index(list(rows), name="m"))
    cells = {(name, "acc"): _cell("M", "bench", v) for name, v in rows.items()}
    return Table(values=values, best="max", cells=cells)


def test_bold_only_where_a_row_beats_every_other_row_after_holm() -> None:
    # no per-question cells: no test, nothing bold, whatever the values
    assert not grouped_table().best_mask().to_numpy().any()
    assert "**" not in render_markdown(grouped_table())
    assert _tested_table().best_mask()["acc"].tolist() == [True, False, False]
    # the best value by a difference the test does not back: not bold (a right on 25 of 40, b on 20, c on 20)
    weak = _tested_table()
    weak.cells[("a", "acc")] = _cell("M", "bench", [1 if i < 25 else 0 for i in range(40)])
    weak.values.loc["a", "acc"] = 25 / 40
    assert not weak.best_mask()["acc"].any()
    # below the small-sample n in the benchmark cell: never bold
    assert not _tested_table(n=10).best_mask()["acc"].any()
    # equal by construction: never ranked
    equal = _tested_table()
    equal.equal_rows = [("a", "b")]
    assert not equal.best_mask()["acc"].any()
    # a tie at the shown precision is bold nowhere, tested or not
    shown = Table(values=pd.DataFrame({"acc": [0.0001, 0.0002, 0.0]}, index=pd.Index(["a", "b", "c"], name="m")),
                  best="max")
    assert not shown.best_mask()["acc"].any()


def test_markdown_round_trip_and_bold() -> None:
    table = grouped_table()
    text = render_markdown(table)
    lines = text.splitlines()
    assert lines[0] == "| model | method | MATH500 | Econ_%& |"
    assert "**" not in text  # no per-question cells: no test, no bold
    assert "| a | **1.000** |" in render_markdown(_tested_table())
    parsed = parse_markdown_table(text)
    expected = table.text_frame().reset_index()
    expected.columns = ["model", "method", "MATH500", "Econ_%&"]
    pd.testing.assert_frame_equal(parsed, expected.astype(str))


def test_markdown_escapes_pipes() -> None:
    table = Table(values=pd.DataFrame({"a|b": ["x|y"]}, index=pd.Index(["r|1"], name="row")))
    text = render_markdown(table)
    assert r"x\|y" in text and r"r\|1" in text
    parsed = parse_markdown_table(text)
    assert parsed.iloc[0].tolist() == ["r|1", "x|y"]
    assert list(parsed.columns) == ["row", "a|b"]


def test_latex_escapes_specials_groups_and_round_trips() -> None:
    table = grouped_table()
    text = render_latex(table, label="tab:main_results")
    assert r"\begin{tabular}{ll|cc}" in text
    assert r"\textbf{Econ\_\%\&}" in text
    assert r"\caption{A \& B: 95\% CI}" in text and r"\label{tab:main_results}" in text
    assert text.count(r"\midrule") == 2  # after the header and between the two model blocks
    assert r"\textbf{0.550" not in text and r"\textbf{1.000}" in render_latex(_tested_table())  # bold only when tested
    rows = parse_latex_table(text)
    assert rows[0] == ["model", "method", "MATH500", "Econ_%&"]
    assert rows[1:] == [[m, k, *table.text_frame().loc[(m, k)].tolist()] for m, k in table.values.index]


def test_plain_dataframe_is_saved_flat_as_the_theory_notebook_expects(tmp_path: Path) -> None:
    frame = pd.DataFrame({"alpha": [1.0, 0.25], "slope": [0.123456789, 2.5], "n": [3, 4]})
    paths = save_table(frame, "table_theory", tmp_path, float_format="{:.4g}")
    pd.testing.assert_frame_equal(pd.read_csv(paths[0]), frame)  # full precision, no index column
    md = paths[1].read_text()
    assert md.splitlines()[0] == "| alpha | slope | n |"
    assert "| 0.25 | 2.5 | 4 |" in md and "0.1235" in md
    assert parse_latex_table(paths[2].read_text())[1] == ["1", "0.1235", "3"]


def test_table_validation_names_the_problem() -> None:
    values = pd.DataFrame({"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"Table.ci_low: expected shape \(2, 1\).*found \(1, 1\)"):
        Table(values=values, ci_low=pd.DataFrame({"a": [1.0]}))
    with pytest.raises(ValueError, match="expected 'max' or 'min', found 'biggest'"):
        Table(values=values, best={"a": "biggest"}).best_mask()
    with pytest.raises(ValueError, match="expected columns"):
        tables.table_from_tidy(pd.DataFrame({"x": [1], "value": [1]}))


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------


def test_manifest_records_provenance_and_detects_missing_files(tmp_path: Path) -> None:
    ctx = ReportContext(
        profile="tiny", out_dir=tmp_path, notebook="03_main_results", models=["Simulated"],
        benchmarks=["math500"], seeds=[0], sample_counts={"math500": 4},
    )
    ctx.save_table(grouped_table(), "tab_main_results", paper_label="tab:main_results", notes="stand-in")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ctx.save_figure(fig, "fig_shared_misconception", caption="subset", paper_label="fig:combined_eval")
    plt.close(fig)
    manifest = read_manifest(tmp_path)
    table_record = manifest["artifacts"]["tab_main_results"]
    assert table_record["files"] == ["tab_main_results.csv", "tab_main_results.md", "tab_main_results.tex"]
    assert table_record["profile"] == "tiny" and table_record["models"] == ["Simulated"]
    assert table_record["sample_counts"] == {"math500": 4} and table_record["seeds"] == [0]
    assert table_record["notebook"] == "03_main_results" and table_record["notes"] == "stand-in"
    # 4 questions per benchmark: below the rule's n (docs/statistics.md), so the caption says it
    # cannot support inference
    assert table_record["caption"].startswith("A & B: 95% CI Small sample: n = 4 test questions per benchmark is below")
    assert "cannot support inference" in manifest["artifacts"]["fig_shared_misconception"]["caption"]
    assert table_record["paper_label"] == "tab:main_results"
    assert len(table_record["git"]["commit"]) in (40, len("unknown"))
    figure_record = manifest["artifacts"]["fig_shared_misconception"]
    assert figure_record["kind"] == "figure" and figure_record["files"] == [
        "fig_shared_misconception.png", "fig_shared_misconception.pdf"]
    assert (tmp_path / "fig_shared_misconception.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "fig_shared_misconception.pdf").read_bytes()[:4] == b"%PDF"
    assert missing_artifacts(tmp_path) == []
    (tmp_path / "tab_main_results.tex").unlink()
    assert missing_artifacts(tmp_path) == ["tab_main_results: tab_main_results.tex"]
    assert not list(tmp_path.glob(".*.tmp*"))  # no temporary files left behind


def _write_many(args: tuple[str, int]) -> None:
    out_dir, worker = args
    for i in range(15):
        update_manifest(out_dir, f"artifact_{worker}_{i}", {"files": [], "worker": worker, "i": i})


def test_concurrent_manifest_updates_lose_nothing(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_write_many, [(str(tmp_path), w) for w in range(4)])
    artifacts = read_manifest(tmp_path)["artifacts"]
    assert len(artifacts) == 60
    assert artifacts["artifact_3_14"] == {"files": [], "worker": 3, "i": 14}
    json.loads((tmp_path / "MANIFEST.json").read_text())  # valid JSON after the race


def test_broken_manifest_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "MANIFEST.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"MANIFEST.json: not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / "MANIFEST.json").write_text("[]")
    with pytest.raises(ValueError, match="expected an object with an 'artifacts' object"):
        read_manifest(tmp_path)


# --------------------------------------------------------------------------------------------
# The paper's numbers
# --------------------------------------------------------------------------------------------


def test_reported_results_hold_the_papers_tables() -> None:
    reported = load_reported_results()
    assert len(reported) == 353
    assert list(reported.columns) == ["table", "model", "method", "benchmark", "metric", "value"]

    def value(table: str, model: str, method: str, benchmark: str, metric: str = "accuracy") -> float:
        row = reported[(reported.table == table) & (reported.model == model) & (reported.method == method)
                       & (reported.benchmark == benchmark) & (reported.metric == metric)]
        assert len(row) == 1
        return float(row.value.iloc[0])

    assert value("tab:main_results", "Qwen2.5-7B-Instruct", "R2-MAD", "Average") == 0.607
    assert value("tab:ablation", "Qwen2.5-7B-Instruct", "R2-MAD w/o Memory", "Average") == 0.576
    assert value("tab:retrieval_ablation", "(both)", "R2-MAD retrieval=Debate-State-Aware", "Average") == 0.663
    assert value("tab:cost", "Qwen3-8B", "Self-Consistency", "Economics", "debate tokens per query") == 14670
    assert value("fig:combined_eval (text)", "Qwen2.5-7B-Instruct", "MAD", "Economics",
                 "accuracy (shared-misconception subset)") == 0.1765
    counts = reported.groupby("table").size().to_dict()
    assert counts["tab:main_results"] == 75 and counts["tab:sc_ablation"] == 45 and counts["tab:cost"] == 21


def test_reported_results_errors_name_row_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "# note\ntable,model,method,benchmark,metric,value\ntab:x,m,k,b,accuracy,0.5\ntab:x,m,k,b,accuracy,abc\n")
    with pytest.raises(ValueError, match=r"bad.csv: row 4, field 'value': expected a number, found 'abc'"):
        load_reported_results(path)
    path.write_text("table,model,value\n")
    with pytest.raises(ValueError, match="expected columns"):
        load_reported_results(path)


# --------------------------------------------------------------------------------------------
# Paper vs reproduced
# --------------------------------------------------------------------------------------------


def test_compare_with_paper_on_a_hand_made_frame() -> None:
    reproduced = pd.DataFrame([
        # SmolLM2 stands in for Qwen2.5: R2-MAD on MATH500, paper 0.522 inside [0.40, 0.60]
        ("tab:main_results", "SmolLM2", "R2-MAD", "MATH500", "accuracy", 0.5, 0.40, 0.60, 40),
        # paper 0.701 outside [0.1, 0.3]
        ("tab:main_results", "SmolLM2", "R2-MAD", "Economics", "accuracy", 0.2, 0.10, 0.30, 40),
        # a number the paper does not have
        ("tab:main_results", "SmolLM2", "Made-up", "MATH500", "accuracy", 0.9, np.nan, np.nan, 10),
        # a model that is itself a paper model
        ("tab:mad-m2", "Gemma-3-4B-IT", "MAD-M2 (S)", "TruthfulQA", "accuracy", 0.5, np.nan, np.nan, 3),
    ], columns=["table", "model", "method", "benchmark", "metric", "value", "ci_low", "ci_high", "n"])
    out = compare_with_paper(reproduced, stand_ins={"SmolLM2": "Qwen2.5-7B-Instruct"})
    assert len(out) == 4
    assert out.paper_model.tolist()[:3] == ["Qwen2.5-7B-Instruct"] * 3
    assert out.paper.iloc[0] == 0.522 and out.difference.iloc[0] == pytest.approx(0.5 - 0.522)
    # two independent samples of known sizes (the paper's test split): not the paper's number inside the reproduced CI
    assert bool(out.consistent_with_paper.iloc[0]) is True
    assert bool(out.consistent_with_paper.iloc[1]) is False and out.paper.iloc[1] == 0.701
    assert np.isnan(out.paper.iloc[2]) and pd.isna(out.consistent_with_paper.iloc[2])
    # n = 3: a wide interval, and no verdict either way below the small-sample n
    assert out.paper.iloc[3] == 0.428 and pd.isna(out.consistent_with_paper.iloc[3])
    assert out.difference_low.iloc[3] < -0.3 and out.difference_high.iloc[3] > 0.3
    with pytest.raises(ValueError, match=r"missing columns \['metric'\]"):
        compare_with_paper(reproduced.drop(columns=["metric"]))


def _per_question(rows: list[tuple[str, str, str, list[int]]]) -> pd.DataFrame:
    records = []
    for model, method, benchmark, outcomes in rows:
        for i, correct in enumerate(outcomes):
            records.append({"model": model, "method": method, "benchmark": benchmark,
                            "sample_id": f"{benchmark}-{i}", "correct": bool(correct)})
    return pd.DataFrame(records)


def test_check_orderings_hand_computed() -> None:
    # MATH500: R2-MAD right on 8 questions MAD gets wrong, MAD right on 1 R2-MAD gets wrong, 1 both right.
    r2 = [1] * 8 + [0] + [1]
    mad = [0] * 8 + [1] + [1]
    # Economics: identical outcomes (no discordant pairs), 2 of 4 right.
    same = [1, 0, 1, 0]
    frame = _per_question([
        ("Smol", "R2-MAD", "MATH500", r2), ("Smol", "MAD", "MATH500", mad),
        ("Smol", "R2-MAD", "Economics", same), ("Smol", "MAD", "Economics", same),
    ])
    claim = OrderingClaim("tab:main_results", "Qwen2.5-7B-Instruct", "Average", "R2-MAD", "MAD")
    out = check_orderings(frame, [claim], stand_ins={"Smol": "Qwen2.5-7B-Instruct"})
    assert len(out) == 1
    row = out.iloc[0]
    assert row.paper_better == 0.607 and row.paper_worse == 0.571 and bool(row.holds_in_paper)
    # Average = mean of the per-benchmark accuracies: R2-MAD (0.9 + 0.5) / 2, MAD (0.2 + 0.5) / 2
    assert row.reproduced_better == pytest.approx(0.7) and row.reproduced_worse == pytest.approx(0.35)
    assert bool(row.holds_here)
    assert (row.n_pairs, row.better_only, row.worse_only) == (14, 8, 1)
    # the stratified exact sign test of the mean of per-benchmark differences; Economics has no discordant pair, so it
    # is McNemar's on MATH500: 2 * P(X <= 1), X ~ Bin(9, 1/2) = 2 * 10 / 512
    assert row.p_value == pytest.approx(20 / 512) and row.difference == pytest.approx(0.35)
    assert row.test.startswith("stratified exact sign test over 2 strata")
    # 14 pairs are below the rule's n (docs/statistics.md): no verdict however small p is
    assert not bool(row.significant)
    doubled = _per_question([
        ("Smol", "R2-MAD", "MATH500", r2 * 2), ("Smol", "MAD", "MATH500", mad * 2),
        ("Smol", "R2-MAD", "Economics", same * 2), ("Smol", "MAD", "Economics", same * 2),
    ])
    row = check_orderings(doubled, [claim], stand_ins={"Smol": "Qwen2.5-7B-Instruct"}).iloc[0]
    assert row.n_pairs == 28 and row.p_value < 0.05 and row.p_holm == row.p_value
    # 8 questions in its smallest benchmark cell: below the cutoff (15), which applies per cell, so no verdict
    assert row.n_cell == 8 and not bool(row.significant)

    benchmark_claim = OrderingClaim("tab:main_results", "Qwen2.5-7B-Instruct", "Economics", "R2-MAD", "MAD")
    row = check_orderings(frame, [benchmark_claim], stand_ins={"Smol": "Qwen2.5-7B-Instruct"}).iloc[0]
    assert row.p_value == 1.0 and not bool(row.holds_here) and not bool(row.significant)
    assert row.paper_better == 0.701 and row.paper_worse == 0.645


def test_check_orderings_skips_claims_it_cannot_check_and_handles_lower_is_better() -> None:
    frame = _per_question([("Smol", "R2-MAD", "MATH500", [1, 0]), ("Smol", "MAD", "MATH500", [0, 0])])
    # no reproduced model stands in for Gemma, and CoT was not run: nothing to check
    claims = [OrderingClaim("tab:main_results", "Gemma-3-4B-IT", "Average", "R2-MAD", "MAD"),
              OrderingClaim("tab:main_results", "Smol", "Average", "R2-MAD", "CoT")]
    assert check_orderings(frame, claims).empty
    # the paper's default claim list runs on a partial reproduction and checks what it can
    out = check_orderings(frame, stand_ins={"Smol": "Qwen2.5-7B-Instruct"})
    assert set(out.better + " > " + out.worse) == {"R2-MAD > MAD"}
    flipped = OrderingClaim("tab:main_results", "Smol", "Average", "MAD", "R2-MAD", higher_is_better=False)
    row = check_orderings(frame, [flipped]).iloc[0]
    assert bool(row.holds_here)  # MAD's accuracy is lower, and lower was declared better
    with pytest.raises(ValueError, match=r"missing columns \['correct'\]"):
        check_orderings(frame.drop(columns=["correct"]))


def test_paper_claims_refer_to_numbers_the_paper_has() -> None:
    reported = load_reported_results()
    for claim in report.PAPER_ORDERING_CLAIMS:
        for method in (claim.better, claim.worse):
            assert not np.isnan(report._paper_value(reported, claim, method)), (claim, method)


def test_artifact_names_follow_the_paper_labels() -> None:
    assert artifacts.artifact_name("tab:mad-m2") == "tab_mad_m2"
    assert artifacts.artifact_name("fig:combined_eval") == "fig_combined_eval"
    assert tables.benchmark_label("mmlu_pro_engineering") == "Engineering"
    assert tables.benchmark_label("Average") == "Average"


# --------------------------------------------------------------------------------------------
# The grid: method names, run directories, tables from hand-made cells
# --------------------------------------------------------------------------------------------

from hand_transcripts import transcript  # noqa: E402

from r2mad_core.methods import get_method  # noqa: E402
from r2mad_core.records import TranscriptRecord, as_transcript  # noqa: E402
from r2mad_lab.experiments.model_specs import ModelSpec  # noqa: E402
from r2mad_lab.report.results import CellOutcome, GridResults  # noqa: E402
from r2mad_lab.report.tables import tidy_to_table  # noqa: E402
from r2mad_lab.reproduce.grid import ExperimentGrid  # noqa: E402

SIMULATED = {"label": "Sim", "engine": "simulated", "model": None, "stands_in_for": "Qwen2.5-7B-Instruct",
             "options": {}}


def _experiment(tmp_path: Path, **changes) -> ExperimentGrid:
    options = dict(models=[SIMULATED], benchmarks=["truthfulqa"], runs_dir=tmp_path / "runs",
                   cache_dir=tmp_path / "cache", test_limit=2, train_limit=3, max_tokens=64)
    options.update(changes)
    return ExperimentGrid(**options)


ALL_LABELS = [*grid.MAIN_METHODS, *grid.ABLATION_METHODS, *grid.sc_methods([3, 6, 9]), *grid.MAD_M2_METHODS,
              "ICL-CoT", *[grid.retrieval_method_label(p) for p in (
                  "random", "similarity", "positive_only", "diversity_only", "fixed_lambda:0.25", "state_aware")],
              grid.poisoned_method_label(0.5)]


@pytest.fixture(scope="module")
def bank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny) memory bank folder: the R2-MAD builders read its manifest."""
    from r2mad_core.memory.banks import build_bank_set
    from r2mad_core.memory.cases import DebateRecord, DebateRound
    from r2mad_core.memory.embeddings import HashingEmbedder

    rounds = tuple(DebateRound(responses=(f"r{t}a ((A))", f"r{t}b ((B))", f"r{t}c ((A))"), answers=("A", "B", "A"),
                               correct=(True, False, True), summary=f"summary {t}", consensus_ratio=2 / 3)
                   for t in range(3))
    record = DebateRecord("truthfulqa:1", "Q?\nA. yes\nB. no", "A", rounds, "A", True, num_options=2)
    directory = tmp_path_factory.mktemp("bank")
    build_bank_set([record], HashingEmbedder(dim=64), "truthfulqa").save(directory, overwrite=True)
    return directory


@pytest.mark.parametrize("label", ALL_LABELS)
def test_every_paper_method_name_builds_a_registered_method(tmp_path: Path, bank_dir: Path, label: str) -> None:
    exp = _experiment(tmp_path)
    name, options = exp.method_options(label, memory=bank_dir)
    method = get_method(name, **options)  # raises on an unknown option or a bad value
    assert method.debate.max_tokens == 64


def test_method_names_mean_what_the_paper_says(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, n_agents=3, n_rounds=3, top_k=5, gamma=0.5)
    # the paper preset draws round 0 per method (the authors' separate runs): an option, as it departs from the
    # method's default (shared)
    assert exp.method_options("Self-Consistency") == ("self_consistency", {"k_paths": 9, "temperature": 1.0,
                                                                            "top_p": 1.0, "max_tokens": 64,
                                                                            "round0": "independent"})
    assert exp.method_options("Self-Consistency (3)")[1]["k_paths"] == 3
    assert exp.method_options("MAD-M2")[1]["masking"] == "objective"
    assert exp.method_options("MAD-M2 (S)")[1]["masking"] == "subjective"
    name, r2 = exp.method_options("R2-MAD", memory=Path("/bank"))
    assert name == "r2mad" and r2["memory"] == "/bank" and (r2["top_k"], r2["gamma"]) == (5, 0.5)
    assert "use_memory" not in r2 and "retrieval_policy" not in r2
    assert exp.method_options("R2-MAD w/o Memory", memory=Path("/bank"))[1]["use_memory"] is False
    assert exp.method_options("R2-MAD w/o Confidence", memory=Path("/bank"))[1]["use_confidence"] is False
    fixed = exp.method_options("R2-MAD retrieval=Fixed-lambda (0.25)", memory=Path("/bank"))[1]
    assert (fixed["retrieval_policy"], fixed["fixed_lambda"]) == ("fixed_lambda", 0.25)
    assert exp.method_options("R2-MAD poisoned=0.5", memory=Path("/bank"))[1]["poison_fraction"] == 0.5
    with pytest.raises(ValueError, match="unknown method 'Debate'"):
        exp.method_options("Debate")
    with pytest.raises(ValueError, match="unknown retrieval policy label 'Smart'"):
        exp.method_options("R2-MAD retrieval=Smart", memory=Path("/bank"))


def test_run_directories_share_identical_cells_and_split_on_any_change(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    spec = exp.models[0]
    r2 = exp.run_dir(spec, "truthfulqa", "R2-MAD")[0]
    assert exp.run_dir(spec, "truthfulqa", "R2-MAD retrieval=Debate-State-Aware")[0] == r2
    assert exp.run_dir(spec, "truthfulqa", "R2-MAD poisoned=0")[0] == r2
    assert (exp.run_dir(spec, "truthfulqa", "Self-Consistency (9)")[0]
            == exp.run_dir(spec, "truthfulqa", "Self-Consistency")[0])
    assert r2.parent == tmp_path / "runs" / "sim" / "truthfulqa" and r2.name.startswith("r2mad-")
    assert exp.run_dir(spec, "truthfulqa", "R2-MAD w/o Memory")[0] != r2
    changed = _experiment(tmp_path, top_k=5)
    assert changed.run_dir(changed.models[0], "truthfulqa", "R2-MAD")[0] != r2
    # K does not enter MAD's cell; the memory it would read does not exist for MAD
    assert changed.run_dir(changed.models[0], "truthfulqa", "MAD")[0] == exp.run_dir(spec, "truthfulqa", "MAD")[0]
    # the memory bank depends on the train questions, not on K
    assert changed.memory_dir(changed.models[0], "truthfulqa") == exp.memory_dir(spec, "truthfulqa")
    assert _experiment(tmp_path, train_limit=4).memory_dir(spec, "truthfulqa") != exp.memory_dir(spec, "truthfulqa")


def test_model_specs_stand_ins_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    base = ModelSpec.from_entry(SIMULATED)
    stand_in = ModelSpec.from_entry({"label": "GPT-4o-mini", "stand_in": "Sim"}, [base])
    assert (stand_in.label, stand_in.paper_model, stand_in.describe()) == ("Sim", "GPT-4o-mini", base.describe())
    api = ModelSpec.from_entry({"label": "GPT-4o-mini", "engine": "openai", "model_env": "R2MAD_TEST_MODEL",
                                "base_url_env": "R2MAD_TEST_URL", "api_key_env": "OPENAI_API_KEY"})
    monkeypatch.delenv("R2MAD_TEST_MODEL", raising=False)
    with pytest.raises(RuntimeError, match="environment variable R2MAD_TEST_MODEL .its model. is not set"):
        api.resolved()
    monkeypatch.setenv("R2MAD_TEST_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("R2MAD_TEST_URL", "https://api.example/v1")
    assert api.resolved() == ("gpt-4o-mini", {"api_key_env": "OPENAI_API_KEY", "base_urls": "https://api.example/v1",
                                              "recorded_model": "${R2MAD_TEST_MODEL}"})  # records: the name (issue 51)
    assert "gpt-4o-mini" not in json.dumps(api.describe())  # run keys name the variables, not their values


def test_mean_accuracy_ci_matches_the_single_benchmark_bootstrap() -> None:
    from r2mad_lab.experiments.statistics import accuracy_with_ci
    from r2mad_lab.report.intervals import average_accuracy

    outcomes = [True, False, True, True, False, True, True] * 3
    single = accuracy_with_ci(outcomes, n_bootstrap=2000, seed=3)
    mean, low, high, _ = average_accuracy([outcomes], n_bootstrap=2000, seed=3)
    assert (mean, low, high) == pytest.approx((single.accuracy, single.low, single.high))
    mean, low, high, _ = average_accuracy([[True, True], [False, False, False, True]], n_bootstrap=500)
    assert mean == pytest.approx((1.0 + 0.25) / 2) and 0.0 <= low <= mean <= high <= 1.0
    assert all(np.isnan(v) for v in average_accuracy([[True], []]))


def _record(sample_id: str, rounds: list[list[bool]], correct: bool) -> TranscriptRecord:
    return as_transcript(transcript(sample_id, [{"round": t, "agents": [{"correct": c} for c in agents]}
                                                for t, agents in enumerate(rounds)], correct=correct))


def _outcome(method: str, benchmark: str, records: list[TranscriptRecord]) -> CellOutcome:
    spec = ModelSpec.from_entry(SIMULATED)
    n = len(records)
    accuracy = sum(r.correct for r in records) / n
    metrics = {"accuracy": accuracy, "ci_low": accuracy - 0.1, "ci_high": accuracy + 0.1, "n": n}
    return CellOutcome(spec, benchmark, method, Path("/runs") / method, records, metrics)


def test_grid_tables_subsets_and_transitions_by_hand() -> None:
    mad = [
        _record("q1", [[False, False, True], [False, True, True], [True, True, True]], True),   # majority wrong at t=0
        _record("q2", [[True, True, False]], True),                                              # stopped early
        _record("q3", [[False, False, False], [False, False, False], [False, False, False]], False),
    ]
    r2 = [
        _record("q1", [[False, False, True], [True, True, True]], True),  # unanimous at round 1
        _record("q2", [[True, True, False], [True, True, True]], True),
        _record("q3", [[False, False, False], [True, False, False], [True, True, False]], True),
    ]
    other = [_record("q9", [[True, True, True]], True), _record("q8", [[False, False, True]], False)]
    results = GridResults([_outcome("MAD", "truthfulqa", mad), _outcome("R2-MAD", "truthfulqa", r2),
                           _outcome("MAD", "math500", other), _outcome("R2-MAD", "math500", other)],
                          bootstrap_resamples=200)
    table = results.table(["MAD", "R2-MAD"])
    assert list(table.values.columns) == ["TruthfulQA", "MATH500", "Average"]
    assert table.values.at["MAD", "TruthfulQA"] == pytest.approx(2 / 3)
    assert table.values.at["R2-MAD", "Average"] == pytest.approx((1.0 + 0.5) / 2)
    assert not table.best_mask().any().any()  # 2-10 questions per cell: below the small-sample n, nothing is ranked
    assert (results.shared_misconception_subsets("MAD") == {("Sim", "truthfulqa"): {"q1", "q3"},
                                                            ("Sim", "math500"): {"q8"}})
    subset = results.subset_accuracy(["MAD", "R2-MAD"]).set_index(["benchmark", "method"])
    assert (subset.at[("TruthfulQA", "MAD"), "accuracy"] == 0.5
            and subset.at[("TruthfulQA", "R2-MAD"), "accuracy"] == 1.0)
    assert subset.at[("TruthfulQA", "R2-MAD"), "n"] == 2
    rates = results.transition_rates(["R2-MAD"]).set_index("benchmark")
    # R2-MAD on {q1, q3}: q1 0->1: F->T, F->T, T->T; q3 0->1: F->T, F->F, F->F; 1->2: T->T, F->T, F->F
    assert rates.at["TruthfulQA", "n_correct_before"] == 2 and rates.at["TruthfulQA", "n_c_to_w"] == 0
    assert rates.at["TruthfulQA", "n_wrong_before"] == 7 and rates.at["TruthfulQA", "n_w_to_c"] == 4
    curve = results.agent_accuracy_by_round(["MAD"]).query("benchmark == 'TruthfulQA'")
    # q1 and q3 ran 3 rounds: (1 + 0) / 6, (2 + 0) / 6, (3 + 0) / 6
    assert curve["agent_accuracy"].tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6])
    carried = results.agent_accuracy_by_round(["R2-MAD"]).query("benchmark == 'TruthfulQA'")
    # q1 stopped after round 1: its round-1 answers (3 right) stand in for round 2
    assert carried["agent_accuracy"].tolist() == pytest.approx([1 / 6, 4 / 6, 5 / 6])
    rows = results.reproduced("tab:main_results", ["MAD", "R2-MAD"])
    average = rows[(rows.method == "R2-MAD") & (rows.benchmark == "Average")].iloc[0]
    assert (average.paper_model, average.value, average.n) == ("Qwen2.5-7B-Instruct", pytest.approx(0.75), 5)


def test_tidy_to_table_keeps_the_order_of_appearance() -> None:
    frame = pd.DataFrame({"model": ["m", "m", "m", "m"], "benchmark": ["Zeta", "Zeta", "Alpha", "Alpha"],
                          "method": ["B", "A", "B", "A"], "accuracy": [0.1, 0.2, 0.3, 0.4],
                          "ci_low": [0.0] * 4, "ci_high": [1.0] * 4})
    table = tidy_to_table(frame, ["model", "benchmark"], "method")
    assert list(table.values.index) == [("m", "Zeta"), ("m", "Alpha")]
    assert list(table.values.columns) == ["B", "A"] and table.values.at[("m", "Alpha"), "A"] == 0.4


def test_one_vllm_model_in_memory_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import r2mad_lab.engines as engines

    opened: list[str] = []
    closed: list[str] = []

    class FakeEngine:
        def __init__(self, name: str, model: str) -> None:
            self.name, self.model = name, model

        def close(self) -> None:
            closed.append(self.model)

    def fake_make_engine(name: str, *, model: str | None = None, cache_dir: Path | None = None, **options: object):
        opened.append(model)
        return FakeEngine(name, model)

    monkeypatch.setattr(engines, "make_engine", fake_make_engine)
    models = [{"label": "A", "engine": "vllm", "model": "org/a", "options": {}},
              {"label": "B", "engine": "vllm", "model": "org/b", "options": {}},
              {"label": "S", "engine": "simulated", "model": None, "options": {"samples": []}}]
    exp = _experiment(tmp_path, models=models)
    first = exp.engine(exp.model("A"))
    assert exp.engine(exp.model("A")) is first and opened == ["org/a"]  # opened once
    exp.engine(exp.model("S"))
    exp.engine(exp.model("B"))
    assert closed == ["org/a"]  # the GPU model A made room for B; the simulated engine stays
    exp.close()
    assert sorted(map(str, closed)) == ["None", "org/a", "org/b"]


def test_speed_knobs_keep_the_run_directories(tmp_path: Path) -> None:
    local = {"label": "Smol", "engine": "local", "model": None, "options": {"threads": 2, "parallel_slots": 8}}
    exp = _experiment(tmp_path, models=[local])
    tuned = _experiment(tmp_path, models=[dict(local, options={"threads": 1, "context_per_slot": 8192})])
    assert tuned.run_dir(tuned.models[0], "truthfulqa", "MAD")[0] == exp.run_dir(exp.models[0], "truthfulqa", "MAD")[0]
    assert tuned.memory_dir(tuned.models[0], "truthfulqa") == exp.memory_dir(exp.models[0], "truthfulqa")
    other = _experiment(tmp_path, models=[dict(local, options={"chat_template": "{{ x }}"})])
    assert other.run_dir(other.models[0], "truthfulqa", "MAD")[0] != exp.run_dir(exp.models[0], "truthfulqa", "MAD")[0]


# --------------------------------------------------------------------------------------------
# Issue 14: what ran, counted once, strict holds, not-run rows, measured time
# --------------------------------------------------------------------------------------------

from r2mad_lab.report.comparison import claims_summary, one_point_per_run  # noqa: E402
from r2mad_lab.report.tables import NOT_RUN, time_cell, with_not_run_rows  # noqa: E402


def test_a_comparison_read_twice_is_counted_once_and_a_tie_does_not_hold() -> None:
    # the same stand-in runs labelled as two paper models (what the large-models rows used to do)
    rows = [("Smol", "R2-MAD", "MATH500", [1, 1, 0, 0]), ("Smol", "MAD", "MATH500", [1, 0, 0, 0])]
    frame = pd.concat([_per_question(rows).assign(paper_model=name)
                       for name in ("Llama-3.3-70B-Instruct", "GPT-4o-mini")])
    claims = [OrderingClaim("tab:large_models", name, "Average", "R2-MAD", "MAD")
              for name in ("Llama-3.3-70B-Instruct", "GPT-4o-mini")]
    out = check_orderings(frame, claims)
    assert list(out["outcome"]) == ["as claimed", "as claimed"]
    assert pd.isna(out["duplicate_of"].iloc[0]) and out["duplicate_of"].iloc[1] == 0
    summary = claims_summary(out)
    assert (summary.checked, summary.holds, summary.significant, summary.repeated) == (1, 1, 0, 1)
    sentence = summary.sentence()
    assert sentence.startswith("Of the 1 distinct claims") and "1 go the claimed way here" in sentence
    assert "none is tested: Small sample: n = 4 paired questions" in sentence and "1 further claim" in sentence
    # a tie (0.5 vs 0.5) is not "holds", and a significant row always holds
    tie = _per_question([("Smol", "R2-MAD", "MATH500", [1, 0]), ("Smol", "MAD", "MATH500", [0, 1])])
    row = check_orderings(tie, [OrderingClaim("tab:main_results", "Smol", "Average", "R2-MAD", "MAD")]).iloc[0]
    assert row.outcome == "tie" and not row.holds_here and not row.significant
    reversed_ = check_orderings(tie, [OrderingClaim("tab:main_results", "Smol", "MATH500", "R2-MAD", "MAD")])
    assert claims_summary(reversed_).ties == 1


def test_the_paper_vs_reproduced_points_show_each_run_once() -> None:
    comparison = pd.DataFrame({
        "table": ["tab:main_results", "tab:ablation", "tab:main_results"],
        "model": ["Sim", "Sim", "Sim"], "method": ["R2-MAD", "R2-MAD", "MAD"],
        "benchmark": ["MATH500"] * 3, "metric": ["accuracy"] * 3, "reproduced": [0.7, 0.7, 0.5],
    })
    assert list(one_point_per_run(comparison)["table"]) == ["tab:main_results", "tab:main_results"]


def test_not_run_rows_never_carry_numbers() -> None:
    table = with_not_run_rows(None, ["Llama-3.3-70B-Instruct"], ["CoT", "MAD"], ["MATH500", "Average"], caption="c")
    assert list(table.values.index) == [("Llama-3.3-70B-Instruct", "CoT"), ("Llama-3.3-70B-Instruct", "MAD")]
    assert (table.values == NOT_RUN).all().all() and not table.best_mask().any().any()
    ran = grouped_table()
    merged = with_not_run_rows(ran, ["GPT-4o-mini"], ["CoT"], list(ran.values.columns))
    assert merged.values.loc[("GPT-4o-mini", "CoT")].tolist() == [NOT_RUN, NOT_RUN]
    assert merged.cell_text(("Qwen", "R2-MAD"), "MATH500") == ran.cell_text(("Qwen", "R2-MAD"), "MATH500")
    assert f"| GPT-4o-mini | CoT | {NOT_RUN} | {NOT_RUN} |" in render_markdown(merged)


def test_large_models_named_only_by_a_stand_in_are_not_run() -> None:
    models = [ModelSpec.from_entry(SIMULATED)]
    plan = grid.large_model_plan([{"label": "Llama-3.3-70B-Instruct", "stand_in": "Sim"},
                                  {"label": "GPT-4o-mini", "engine": "openai", "model": "gpt-4o-mini",
                                   "base_url_env": "URL"}], models)
    assert plan[0] == ("Llama-3.3-70B-Instruct", None)
    assert plan[1][0] == "GPT-4o-mini" and plan[1][1].engine == "openai"
    with pytest.raises(ValueError, match="stand_in 'Nope'"):
        grid.large_model_plan([{"label": "X", "stand_in": "Nope"}], models)


def test_cost_time_is_what_generation_measured_or_says_why_not() -> None:
    def record(cached: list[bool]) -> TranscriptRecord:
        summary = {"tag": "summary", "prompt_tokens": 0, "completion_tokens": 0, "finish_reason": "stop",
                   "cached": False, "seconds": 0.0}
        return as_transcript(transcript("q", [{"agents": [{"cached": c} for c in cached], "extra_calls": [summary]}],
                                        correct=True))

    assert replayed_share([record([True, True, True])]) == pytest.approx(3 / 4)
    assert replayed_share([record([False, False])]) == 0.0
    local = {"engine": "local", "seconds_per_query": 72.04, "replayed_share": 0.0}
    assert time_cell(local) == pytest.approx(72.04)
    assert time_cell({**local, "replayed_share": 1.0}) == "replayed"  # was 0.00 s in the cpu table
    assert time_cell({**local, "replayed_share": 0.25}) == "72.04 (25% replayed)"
    assert time_cell({**local, "engine": "simulated"}) == "not timed (simulated)"
    # a CoT cell whose every generation was replayed: the cost() view marks it not measured
    outcome = _outcome("MAD", "math500", [record([True, True])])
    outcome.metrics["seconds_per_query"] = 0.0
    outcome.model = ModelSpec("Smol", "local", None)
    cost = GridResults([outcome]).cost(["MAD"]).iloc[0]
    assert cost["replayed_share"] == pytest.approx(2 / 3) and bool(cost["time_measured"])
    outcome.records = [record([True])]
    outcome.records[0].rounds[0].extra_calls = []
    assert not bool(GridResults([outcome]).cost(["MAD"]).iloc[0]["time_measured"])


def test_model_titles_name_what_ran_and_captions_the_paper_model() -> None:
    spec = ModelSpec.from_entry(SIMULATED)
    assert spec.title == "Sim (simulated agents)" and "Qwen" not in spec.title
    assert spec.stand_in_note == "Sim (simulated agents) stands in for Qwen2.5-7B-Instruct"
    assert ModelSpec("SmolLM2-135M-Instruct", "local").title == "SmolLM2-135M-Instruct (local engine, llama.cpp)"
    assert ModelSpec("Qwen2.5-7B-Instruct", "vllm").stand_in_note == ""


def test_saved_figures_record_every_text_they_show(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    ax.bar(["a", "b"], [1, 2], label="bars")
    ax.set_title("Sim (simulated agents)")
    ax.set_xlabel("benchmark")
    ax.text(0.5, 0.5, NOT_RUN)
    ax.legend(title="method")
    fig.suptitle("Suptitle")
    save_figure(fig, "fig_x", tmp_path, caption="c")
    plt.close(fig)
    labels = read_manifest(tmp_path)["artifacts"]["fig_x"]["labels"]
    assert labels["titles"] == ["Suptitle", "Sim (simulated agents)"]
    assert "benchmark" in labels["axes"] and {"a", "b"} <= set(labels["ticks"])
    assert labels["legends"] == ["method", "bars"] and labels["annotations"] == [NOT_RUN]


def test_display_paths_are_never_machine_paths(tmp_path: Path) -> None:
    root = Path(artifacts.__file__).resolve().parents[2]
    assert artifacts.display_path(root / "runs" / "sim") == "runs/sim"
    assert artifacts.display_path(tmp_path / "a" / "b") == ".../a/b"
    assert artifacts.display_path("../runs/tiny") == "../runs/tiny"


def test_a_changed_simulator_gets_new_run_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Transcripts of an older simulator version are never shown as the current one's (the run key holds
    the simulator's version; the response cache keys on the engine identity, which holds it too)."""
    from r2mad_core.theory import agents as simulated

    exp = _experiment(tmp_path)
    spec = exp.models[0]
    before = exp.run_dir(spec, "truthfulqa", "MAD")[0], exp.memory_dir(spec, "truthfulqa")
    monkeypatch.setattr(simulated, "MODEL_VERSION", "v-next")
    after = exp.run_dir(spec, "truthfulqa", "MAD")[0], exp.memory_dir(spec, "truthfulqa")
    assert before[0] != after[0] and before[1] != after[1]
    assert ModelSpec("Real", "local").describe() == {"label": "Real", "engine": "local", "model": None,
                                                     "options": {}, "environment": {}}


def test_the_report_context_appends_what_ran_to_a_caption_that_does_not_say_it(tmp_path: Path) -> None:
    ctx = artifacts.ReportContext(profile="tiny", out_dir=tmp_path, engine_titles=["Simulated (simulated agents)"])
    assert ctx.with_engine_note("Memory audit.") == "Memory audit. Produced by: Simulated (simulated agents)."
    assert ctx.with_engine_note("Accuracy. Simulated (simulated agents) stands in for Qwen.") == (
        "Accuracy. Simulated (simulated agents) stands in for Qwen.")
    assert ctx.with_engine_note(None) == "Produced by: Simulated (simulated agents)."
    ctx.save_table(pd.DataFrame({"a": [1]}), "tab_x", caption="A table.")
    assert artifacts.read_manifest(tmp_path)["artifacts"]["tab_x"]["caption"] == (
        "A table. Produced by: Simulated (simulated agents).")
    assert (tmp_path / "tab_x.md").read_text().endswith("A table. Produced by: Simulated (simulated agents).\n")
    assert artifacts.ReportContext(profile="tiny", out_dir=tmp_path).with_engine_note("Data.") == "Data."
