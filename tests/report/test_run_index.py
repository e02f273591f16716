"""The run index (`r2mad runs`, r2mad_lab/report/run_index.py) and the runs each artifact's manifest entry names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from r2mad_lab.cli import main
from r2mad_lab.report import inference, run_index, run_pages
from r2mad_lab.report.artifacts import (
    RUNS_FROM_NOTEBOOK,
    RUNS_FROM_TABLE,
    ReportContext,
    limits_summary,
    read_manifest,
    run_paths,
)
from r2mad_lab.report.tables import Table

N = 5


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    """runs/demo/ with a memory bank (its train debates are a run too) and R2-MAD, MAD and CoT runs; figures/demo/ with
    a table built from the R2-MAD and MAD runs (its cells known) and a figure saved with the notebook's cells (R2-MAD
    only). CoT feeds nothing."""
    root = tmp_path_factory.mktemp("index")
    runs = root / "runs" / "demo"
    cache = ["--cache-dir", str(root / "cache")]
    assert main(["build-memory", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "6",
                 "--out", str(runs / "bank"), *cache]) == 0
    methods = {"r2mad": ["--method", "r2mad", "--memory", str(runs / "bank")], "mad": ["--method", "mad"],
               "cot": ["--method", "cot"]}
    for name, options in methods.items():
        assert main(["run", "--benchmark", "truthfulqa", *options, "--engine", "simulated", "--limit", str(N),
                     "--out", str(runs / "simulated" / name), *cache]) == 0
    outcome = {name: SimpleNamespace(run_dir=runs / "simulated" / name) for name in methods}
    values = pd.DataFrame({"TruthfulQA": [0.5, 0.4]}, index=pd.Index(["R2-MAD", "MAD"], name="method"))
    table = Table(values=values, cells={("R2-MAD", "TruthfulQA"): [outcome["r2mad"]],
                                        ("MAD", "TruthfulQA"): [outcome["mad"]]})
    ctx = ReportContext(profile="demo", out_dir=root / "figures" / "demo", notebook="demo",
                        limit_cells=lambda: [{"model": "m", "benchmark": "truthfulqa", "method": "R2-MAD",
                                              "run_dir": str(outcome["r2mad"].run_dir)}])
    ctx.save_table(table, "tab_demo")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ctx.save_figure(fig, "fig_demo")
    plt.close(fig)
    return root


def index_data(profile: Path) -> dict:
    return run_pages.read_script(profile / "runs" / "demo" / "_viewer" / "index.data.js")[0]


def test_the_manifest_names_the_runs_a_table_and_a_figure_came_from(profile):
    artifacts = read_manifest(profile / "figures" / "demo")["artifacts"]
    assert artifacts["tab_demo"]["runs"] == ["runs/demo/simulated/mad", "runs/demo/simulated/r2mad"]
    assert artifacts["tab_demo"]["runs_from"] == RUNS_FROM_TABLE
    assert artifacts["fig_demo"]["runs"] == ["runs/demo/simulated/r2mad"]
    assert artifacts["fig_demo"]["runs_from"] == RUNS_FROM_NOTEBOOK
    text = (profile / "figures" / "demo" / "MANIFEST.json").read_text()
    assert str(profile) not in text  # no machine path: the runs relative to the folder holding figures/
    # the limits summary keeps the cells' names and counts, not their directories
    summary = limits_summary([{"model": "m", "benchmark": "b", "method": "MAD", "context_overflow": 1,
                               "run_dir": "/somewhere/runs/x"}])
    assert summary["hit"] == [{"model": "m", "benchmark": "b", "method": "MAD", "context_overflow": 1}]
    assert run_paths(["/elsewhere/a/b/run"], profile / "figures" / "demo") == [".../b/run"]


def test_r2mad_runs_lists_every_run_with_what_it_feeds_and_links_its_debate_page(profile, capsys):
    assert main(["runs", "demo", "--root", str(profile)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["method", "benchmark", "model"]
    assert lines[-1].startswith("4 runs (2 feeding a table or figure); index: ")
    train = [line for line in lines[2:-1] if "truthfulqa (train)" in line]  # the bank's debates: MAD on the train split
    assert len(train) == 1 and train[0].startswith("MAD") and train[0].rstrip().endswith("-")
    by_method = {line.split()[0]: line for line in lines[2:-1] if line not in train}
    assert set(by_method) == {"R2-MAD", "MAD", "CoT"}
    assert by_method["R2-MAD"].rstrip().endswith("fig_demo, tab_demo")
    assert by_method["MAD"].rstrip().endswith("tab_demo") and by_method["CoT"].rstrip().endswith("-")
    for name, line in by_method.items():
        run = {"R2-MAD": "r2mad", "MAD": "mad", "CoT": "cot"}[name]
        metrics = json.loads((profile / "runs" / "demo" / "simulated" / run / "metrics.json").read_text())
        assert f"{metrics['accuracy']:.3f} [{metrics['ci_low']:.3f}, {metrics['ci_high']:.3f}]" in line
        assert f"  {N}  " in line and "truthfulqa" in line and "paper" in line

    index = profile / "runs" / "demo" / "index.html"
    assert 'data-page="index"' in index.read_text() and '_viewer/viewer.js' in index.read_text()
    data = index_data(profile)
    rows = {r["path"]: r for r in data["runs"]}
    manifest_runs = {run for record in read_manifest(profile / "figures" / "demo")["artifacts"].values()
                     for run in record["runs"]}
    assert manifest_runs <= set(rows) and len(rows) == 4
    for run, row in rows.items():
        page = (index.parent / row["page"]).resolve()
        assert page == (profile / run / "view.html").resolve() and page.is_file()
        assert len(page.read_bytes()) < 2000  # a light page: its data in view.data.js, loaded by the viewer script
        assert (index.parent / row["data"]).resolve() == (profile / run / "view.data.js").resolve()
        run_data = run_pages.read_script(profile / run / "view.data.js")[0]
        records = [json.loads(x) for x in (profile / run / "transcripts.jsonl").read_text().splitlines()]
        assert [q["id"] for q in run_data["questions"]] == [r["sample_id"] for r in records]  # every question
        assert [q["correct"] for q in run_data["questions"]] == [r["correct"] for r in records]
        assert [q["final"] for q in run_data["questions"]] == [r["final_answer"] for r in records]
        assert all(q["text"] for q in run_data["questions"])  # the question's text from the benchmark files
        grids = [rec for k in range(run_data["chunks"])
                 for rec in run_pages.read_script(profile / run / f"view.grids-{k}.js")[2]]
        assert grids == records  # the debate grid's records, as the transcripts hold them
        assert row["name"].startswith(row["method"]) and row["settings"] in row["name"]
        artifacts = read_manifest(profile / "figures" / "demo")["artifacts"]
        assert row["feeds"] == sorted(name for name, record in artifacts.items() if run in record["runs"])
        assert row["variant"] == "demo" and row["engine"] == "simulated"


def test_question_figures_count_changes_flips_and_no_answer():
    """One hand-made record: agent 0 wrong -> right, agent 1 right -> no answer, agent 2 unchanged; a cut turn."""
    def turn(agent, answer, correct, **extra):
        return {"agent": agent, "answer": answer, "correct": correct, **extra}

    record = {"sample_id": "q1", "gold": "A", "final_answer": "A", "correct": True, "rounds": [
        {"round": 0, "agents": [turn(0, "B", False), turn(1, "A", True), turn(2, "B", False)]},
        {"round": 1, "agents": [turn(0, "A", True, retrieved={"case_ids": ["c1", "c2"], "lambda": 0.5,
                                                              "confidence": {"1": 0.8, "2": 0.4}}),
                                turn(1, None, False, truncated=True), turn(2, "B", False)]}]}
    row = run_pages.question_row(record, "What?", 0)
    assert (row["changes"], row["w2c"], row["c2w"], row["no_answer"]) == (2, 1, 1, 1)
    assert row["overflow"] and row["shared"] and row["experiences"] == 2
    assert row["lambda"] == 0.5 and abs(row["confidence"] - 0.6) < 1e-12


def test_the_pairs_p_is_the_claims_tables_mcnemar(profile):
    """The comparison's 2x2 and p: the claims table's function (report/comparison.py: check_orderings) on the
    questions both runs answered."""
    data = index_data(profile)
    paths = [r["path"] for r in data["runs"]]
    i, j = sorted((paths.index("runs/demo/simulated/r2mad"), paths.index("runs/demo/simulated/mad")))
    test = data["pairs"][f"{i}-{j}"]
    correct = [{json.loads(x)["sample_id"]: json.loads(x)["correct"]
                for x in (profile / paths[k] / "transcripts.jsonl").read_text().splitlines()} for k in (i, j)]
    common = [q for q in correct[0] if q in correct[1]]
    # the claims table's test (report/comparison.py: check_orderings -> inference.paired_estimate), one stratum
    expected = inference.paired_estimate([correct[0][q] for q in common], [correct[1][q] for q in common])
    assert run_index.MCNEMAR is inference.stratified_sign_p and expected.test == "exact McNemar"
    assert (test["n"], test["a_only"], test["b_only"], test["p"]) == (
        expected.n, expected.a_only, expected.b_only, expected.p_value)
    assert test["both"] + test["neither"] + test["a_only"] + test["b_only"] == N
    benchmarks = {r["benchmark"] for r in data["runs"]}
    assert all(data["runs"][int(a)]["benchmark"] == data["runs"][int(b)]["benchmark"]
               for a, b in (key.split("-") for key in data["pairs"])) and len(benchmarks) == 2


def test_an_unchanged_run_is_not_rendered_again_and_a_folder_of_runs_works_without_a_profile(profile, tmp_path):
    page = profile / "runs" / "demo" / "simulated" / "mad" / "view.html"
    run_index.build("demo", root=profile)
    stamp = page.stat().st_mtime_ns
    data = (page.parent / "view.data.js").stat().st_mtime_ns
    lines: list[str] = []
    run_index.build("demo", root=profile, progress=lines.append)
    assert page.stat().st_mtime_ns == stamp and (page.parent / "view.data.js").stat().st_mtime_ns == data
    assert "run pages: 0 written, 4 unchanged" in lines
    transcripts = page.parent / "transcripts.jsonl"
    transcripts.write_text(transcripts.read_text())  # touched: rendered again, alone
    lines.clear()
    run_index.build("demo", root=profile, progress=lines.append)
    assert "run pages: 1 written, 3 unchanged" in lines and (page.parent / "view.data.js").stat().st_mtime_ns != data
    entries, index = run_index.build(profile / "runs" / "demo" / "simulated", out=tmp_path / "i.html", pages=False)
    assert index == tmp_path / "i.html" and len(entries) == 3 and all(not e.feeds for e in entries)
    assert {e.path for e in entries} == {f"runs/demo/simulated/{m}" for m in ("cot", "mad", "r2mad")}  # as manifests
    assert (tmp_path / "_viewer" / "viewer.js").is_file() and (tmp_path / "compare.html").is_file()
    assert main(["runs", str(tmp_path / "nothing-here")]) == 2


def test_a_fixed_lambda_run_is_named_by_its_lambda(profile, tmp_path):
    runs = tmp_path / "runs" / "x"
    assert main(["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--memory",
                 str(profile / "runs" / "demo" / "bank"),
                 "--retrieval-policy", "fixed_lambda", "--fixed-lambda", "0.25", "-K", "2", "--engine", "simulated",
                 "--limit", "2", "--out", str(runs / "simulated" / "fixed"), "--cache-dir",
                 str(profile / "cache")]) == 0
    (entry,), _ = run_index.build(runs, pages=False)
    assert entry.name.startswith("R2-MAD (retrieval=Fixed-lambda (0.25))")
    gamma = json.loads((runs / "simulated" / "fixed" / "config.json").read_text())["method"]["options"].get("gamma")
    assert "K=2" in entry.name and "round 0 " in entry.name and "protocol " in entry.name
    assert (f"gamma={gamma}" in entry.name) if gamma is not None else ("gamma" not in entry.name)


def damaged_copy(profile: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(profile / "runs", copy / "runs", ignore=shutil.ignore_patterns("_viewer", "view.*"))
    shutil.copytree(profile / "figures", copy / "figures")
    return copy


@pytest.mark.parametrize("file, damage, expected", [
    ("config.json", lambda d: "{not json", "config.json: not valid JSON"),
    ("config.json", lambda d: json.dumps({**d, "seed": "zero"}), "config.json: seed: "),
    ("config.json", lambda d: json.dumps({k: v for k, v in d.items() if k != "benchmark"}), "config.json: benchmark: "),
    ("metrics.json", lambda d: json.dumps({**d, "accuracy": "high"}), "metrics.json: accuracy: expected a number"),
    ("metrics.json", lambda d: "[1, 2", "metrics.json: not valid JSON"),
])
def test_a_damaged_run_file_is_skipped_with_one_line_naming_it(profile, tmp_path, capsys, file, damage, expected):
    copy = damaged_copy(profile, tmp_path)
    path = copy / "runs" / "demo" / "simulated" / "mad" / file
    path.write_text(damage(json.loads(path.read_text())))
    assert main(["runs", "demo", "--root", str(copy), "--quiet"]) == 1
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "skipped" in line]
    assert len(warnings) == 1 and str(path) in warnings[0] and expected in warnings[0], captured.err
    assert "Traceback" not in captured.err
    assert captured.out.strip().splitlines()[-1].startswith("3 runs") and "1 skipped" in captured.out


@pytest.mark.parametrize("damage, expected", [
    ("{", "not valid JSON"),
    ('{"artifacts": []}', "expected an object with an 'artifacts' object"),
    ('{"artifacts": {"tab_demo": {"runs": "runs/demo/simulated/mad"}}}', "artifacts.tab_demo.runs: expected a list"),
])
def test_a_damaged_manifest_stops_with_one_line_naming_it(profile, tmp_path, capsys, damage, expected):
    copy = damaged_copy(profile, tmp_path)
    manifest = copy / "figures" / "demo" / "MANIFEST.json"
    manifest.write_text(damage)
    assert main(["runs", "demo", "--root", str(copy), "--quiet"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and str(manifest) in errors[0] and expected in errors[0], err
    assert "Traceback" not in err


def test_r2mad_view_writes_beside_the_run_page_and_never_over_it(profile, tmp_path, capsys):
    """Issue 61: `r2mad view RUN_DIR` replaced the run page `r2mad runs` wrote (both were RUN_DIR/view.html)."""
    from r2mad_lab.report import viewer

    source = profile / "runs" / "demo" / "simulated" / "mad"
    run = tmp_path / "mad"
    shutil.copytree(source, run)  # the module's runs stay as the other tests read them
    page = run / "view.html"
    before = page.read_bytes()
    assert main(["view", str(run)]) == 0
    written = run / viewer.PAGE_FILE
    assert page.read_bytes() == before and written.is_file() and written != page
    assert f"wrote {written}" in capsys.readouterr().out
