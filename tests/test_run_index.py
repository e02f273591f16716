"""The run index (`r2mad runs`, r2mad_core/report/run_index.py) and the runs each artifact's manifest entry names."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from r2mad_core.cli import main
from r2mad_core.report import run_index
from r2mad_core.report.artifacts import (
    RUNS_FROM_NOTEBOOK,
    RUNS_FROM_TABLE,
    ReportContext,
    limits_summary,
    read_manifest,
    run_paths,
)
from r2mad_core.report.tables import Table

N = 5


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    """runs/demo/ with a memory bank (its train debates are a run too) and R2-MAD, MAD and CoT runs; figures/demo/ with a table built from the R2-MAD
    and MAD runs (its cells known) and a figure saved with the notebook's cells (R2-MAD only). CoT feeds nothing."""
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
    table = Table(values=values, cells={("R2-MAD", "TruthfulQA"): [outcome["r2mad"]], ("MAD", "TruthfulQA"): [outcome["mad"]]})
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


class Rows(HTMLParser):
    """The index page's rows: (data-run, the link of its method cell)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and "data-run" in attrs:
            self.rows.append([attrs["data-run"], None])
        if tag == "a" and self.rows and self.rows[-1][1] is None:
            self.rows[-1][1] = attrs.get("href")


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
    parser = Rows()
    parser.feed(index.read_text())
    rows = dict(parser.rows)
    manifest_runs = {run for record in read_manifest(profile / "figures" / "demo")["artifacts"].values()
                     for run in record["runs"]}
    assert manifest_runs <= set(rows) and len(rows) == 4
    for run, href in rows.items():
        page = (index.parent / href).resolve()
        assert page == (profile / run / "view.html").resolve() and page.is_file()
        sections = re.findall(r'<section class="q"[^>]*data-q="([^"]+)"', page.read_text())
        records = [json.loads(x)["sample_id"] for x in (profile / run / "transcripts.jsonl").read_text().splitlines()]
        assert sections == records  # the debate page of that run, every question


def test_a_page_newer_than_its_run_is_kept_and_a_folder_of_runs_works_without_a_profile(profile, tmp_path):
    page = profile / "runs" / "demo" / "simulated" / "mad" / "view.html"
    entries, _ = run_index.build("demo", root=profile)
    stamp = page.stat().st_mtime_ns
    assert run_index.write_pages(entries) == 0 and page.stat().st_mtime_ns == stamp
    entries, index = run_index.build(profile / "runs" / "demo" / "simulated", out=tmp_path / "i.html", pages=False)
    assert index == tmp_path / "i.html" and len(entries) == 3 and all(not e.feeds for e in entries)
    assert {e.path for e in entries} == {f"runs/demo/simulated/{m}" for m in ("cot", "mad", "r2mad")}  # as manifests
    assert main(["runs", str(tmp_path / "nothing-here")]) == 2
