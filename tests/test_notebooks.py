"""The notebooks: their parameters cells, and ALL of them executed in order through papermill with the
``tiny`` profile (simulated agents, hashing embedder, a handful of questions), then the artifacts the
manifest lists, the paper-table counterparts, and a rerun that generates nothing new."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest

from r2mad_core import reproduce
from r2mad_core.artifacts import read_manifest
from r2mad_core.tables import read_table
from r2mad_core.reproduce import PATH_PARAMETERS, TOP_LEVEL_FIELDS, load_profile

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
#: The theory notebook belongs to the theory work; its grid parameters are its own.
OWN_PARAMETERS_ONLY_EXEMPT = {"08_theory"}

#: The counterpart of every table and figure of the paper (issue 7, item 2).
PAPER_ARTIFACTS = {
    "tab_main_results": "tab:main_results",
    "tab_ablation": "tab:ablation",
    "tab_retrieval_ablation": "tab:retrieval_ablation",
    "tab_flip_recovery": "tab:flip_recovery",
    "tab_flip_recovery_extra": "tab:flip_recovery_extra",
    "tab_mad_m2": "tab:mad-m2",
    "tab_sc_ablation": "tab:sc_ablation",
    "tab_large_models": "tab:large_models",
    "tab_icl_cot": "tab:icl_cot",
    "tab_cost": "tab:cost",
    "fig_shared_misconception": "fig:combined_eval",
    "fig_qwen3_eval": "fig:qwen3_eval",
}


def _data_dir() -> Path | None:
    candidates = [Path(os.environ["R2MAD_DATA_DIR"])] if os.environ.get("R2MAD_DATA_DIR") else []
    candidates += [REPO.parent / "shared" / "data", REPO / "data"]
    for directory in candidates:
        if (directory / "truthfulqa" / "raw" / "mc_task.json").is_file():
            return directory
    return None


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob(reproduce.NOTEBOOK_GLOB))


def _parameters_cell(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: expected one cell tagged 'parameters', found {len(cells)}"
    assert cells[0].cell_type == "code"
    return cells[0]


def test_the_ten_notebooks_are_there_in_order() -> None:
    numbers = [p.name[:2] for p in _notebooks()]
    assert numbers == [f"{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_papermill_reads_every_parameter(path: Path) -> None:
    """A parameter papermill cannot parse is silently not injected (e.g. '=' inside a string)."""
    cell = _parameters_cell(path)
    assigned = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    declared = set(papermill.inspect_notebook(str(path)))
    assert declared == assigned, f"{path.name}: papermill does not see {sorted(assigned - declared)}"


@pytest.mark.parametrize("path", [p for p in _notebooks() if p.stem not in OWN_PARAMETERS_ONLY_EXEMPT],
                         ids=lambda p: p.stem)
def test_parameters_come_from_the_profile_and_default_to_tiny(path: Path) -> None:
    """Every parameter is a profile field or a path (so a profile fully determines a run), and the
    defaults are the tiny profile's (so running a notebook by hand is the quick CI run)."""
    tiny = load_profile("tiny")
    cell = _parameters_cell(path)
    for node in ast.parse(cell.source).body:
        if not isinstance(node, ast.Assign):
            continue
        name = node.targets[0].id  # type: ignore[attr-defined]
        assert name in TOP_LEVEL_FIELDS or name in PATH_PARAMETERS, f"{path.name}: {name} is not a profile field"
        if name in TOP_LEVEL_FIELDS:
            assert ast.literal_eval(node.value) == tiny[name], f"{path.name}: default of {name} differs from tiny.yaml"
    assert "profile" in {n.targets[0].id for n in ast.parse(cell.source).body if isinstance(n, ast.Assign)}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = _data_dir()
    if data_dir is None:
        pytest.skip("benchmark data not found (set R2MAD_DATA_DIR to the shared data folder)")
    out = tmp_path_factory.mktemp("reproduce")
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(out), "--data-dir", str(data_dir)])
    assert code == 0, "make reproduce PROFILE=tiny failed (see the output above)"
    return out


def test_all_notebooks_run_and_write_every_artifact_of_the_manifest(tiny_run: Path) -> None:
    figures = tiny_run / "figures" / "tiny"
    manifest = read_manifest(figures)["artifacts"]
    for name, record in manifest.items():
        for file_name in record["files"]:
            path = figures / file_name
            assert path.is_file() and path.stat().st_size > 0, f"{name}: {file_name} missing or empty"
        assert record["profile"] == "tiny", name
        assert record["git"]["commit"], name
    for name, label in PAPER_ARTIFACTS.items():
        assert name in manifest, f"no counterpart of {label}"
        assert manifest[name]["paper_label"] == label
    # every executed notebook is saved, with no error output
    executed = tiny_run / "notebooks" / "executed" / "tiny"
    for path in _notebooks():
        nb = nbformat.read(executed / path.name, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
        assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    timings = json.loads((executed / "timings.json").read_text())
    assert set(timings) == {p.stem for p in _notebooks()} and all(t["succeeded"] for t in timings.values())


def test_paper_tables_have_the_papers_shape(tiny_run: Path) -> None:
    figures = tiny_run / "figures" / "tiny"
    profile = load_profile("tiny")
    main = read_table(figures / "tab_main_results.csv")
    assert list(main.values.index) == ["CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD"]
    assert list(main.values.columns) == ["MATH500", "Economics", "Engineering", "TruthfulQA", "Average"]
    values = main.values.astype(float)
    assert ((values >= 0) & (values <= 1)).all().all()
    assert (main.ci_low.astype(float) <= values + 1e-12).all().all() and (values <= main.ci_high.astype(float) + 1e-12).all().all()
    # Average is the mean of the four benchmarks
    assert values["Average"].tolist() == pytest.approx(values.iloc[:, :4].mean(axis=1).tolist())
    ablation = read_table(figures / "tab_ablation.csv")
    assert list(ablation.values.index) == ["R2-MAD", "R2-MAD w/o Confidence", "R2-MAD w/o Memory"]
    sc = read_table(figures / "tab_sc_ablation.csv")
    assert list(sc.values.index) == [f"Self-Consistency ({k})" for k in profile["sc_paths"]]
    retrieval = read_table(figures / "tab_retrieval_ablation.csv")
    assert len(retrieval.values) == len(profile["retrieval_policies"]) and "Debate-State-Aware" in retrieval.values.index
    large = read_table(figures / "tab_large_models.csv")
    assert sorted(set(large.values.index.get_level_values("model"))) == ["GPT-4o-mini", "Llama-3.3-70B-Instruct"]
    # a stand-in run says so
    manifest = read_manifest(figures)["artifacts"]
    assert "stands in for Llama-3.3-70B-Instruct" in manifest["tab_large_models"]["caption"]
    cost = pd.read_csv(figures / "tab_cost.csv")
    assert set(cost["method"]) == {"Self-Consistency", "MAD", "R2-MAD"}
    comparison = pd.read_csv(figures / "tab_paper_comparison.csv")
    main_rows = comparison[comparison["table"] == "tab:main_results"]
    assert len(main_rows) == 25 and (main_rows["paper"] != "--").all()  # 5 methods x (4 benchmarks + Average)
    claims = pd.read_csv(figures / "tab_paper_claims.csv")
    assert "R2-MAD > MAD" in set(claims["claim"]) and claims["holds_in_paper"].all()


def test_a_second_run_generates_nothing_new(tiny_run: Path) -> None:
    cache = tiny_run / "cache" / "tiny" / "responses.sqlite"
    runs = tiny_run / "runs" / "tiny"

    def state() -> tuple[int, int]:
        with sqlite3.connect(cache) as connection:
            rows = connection.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return rows, sum(1 for _ in runs.rglob("config.json"))

    before = state()
    assert before[0] > 0 and before[1] > 0
    data_dir = _data_dir()
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), "--data-dir", str(data_dir),
                           "--only", "03,06"])
    assert code == 0
    assert state() == before
