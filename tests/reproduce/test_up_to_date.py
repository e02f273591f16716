"""A rerun leaves the notebooks whose inputs and outputs are as their last run left them (r2mad_lab/reproduce/
up_to_date.py, issue 35): nothing when nothing changed; an edited notebook and those after it; everything when the
code, the environment, a run folder or a figure changed; everything under --force; and no record after a failure.

The notebooks run through ``run_notebooks`` with papermill's execution replaced by a stand-in that copies the
notebook and writes one table (no kernel: these tests are fast); the stand-in counts what it executed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from r2mad_lab.reproduce import command, notebook_runner, up_to_date
from r2mad_lab.reproduce.command import ReproductionPaths, load_profile, run_notebooks

NOTEBOOKS = {  # name -> the notebooks it runs after (None: every earlier one, as 10_report)
    "01_data": [],
    "02_memory": [],
    "03_main_results": ["02_memory"],
    "10_report": None,
}


def _notebook(name: str, after: list[str] | None, text: str = "") -> str:
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    if after is not None:
        metadata["r2mad"] = {"after": after}
    cells = [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {"tags": ["parameters"]},
              "outputs": [], "source": "profile = 'tiny'"},
             {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": f"# {name}{text}"}]
    return json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}, indent=1)


@pytest.fixture
def setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name, after in NOTEBOOKS.items():
        (notebooks / f"{name}.ipynb").write_text(_notebook(name, after))
    executed: list[str] = []

    def execute(notebook: Path, output: Path, parameters, kernel=None, clear=False, progress=None):
        executed.append(notebook.stem)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(notebook.read_text())
        figures = Path(parameters["figures_dir"])
        figures.mkdir(parents=True, exist_ok=True)
        (figures / f"tab_{notebook.stem}.csv").write_text("a,b\n1,2\n")
        runs = Path(parameters["runs_dir"]) / "model" / notebook.stem
        runs.mkdir(parents=True, exist_ok=True)
        if not (runs / "transcripts.jsonl").exists():  # a replayed run is not written again
            (runs / "transcripts.jsonl").write_text("{}\n")
        return None

    monkeypatch.setattr(notebook_runner, "execute", execute)
    profile = load_profile("tiny")
    paths = ReproductionPaths(tmp_path / "out", profile.folder)
    lines: list[str] = []

    def run(check: bool | None = True) -> list[str]:
        executed.clear()
        lines.clear()
        results = run_notebooks(profile, paths, notebooks_dir=notebooks, echo=lines.append, jobs=1,
                                reuse_kernels=False, up_to_date_check=check)
        assert all(r.error is None for r in results)
        return sorted(executed)  # in the order of their names (the runner starts the longest first)

    return run, notebooks, paths, lines, execute


def test_a_second_run_executes_nothing_and_says_so(setting) -> None:
    run, _, paths, lines, _ = setting
    assert run() == list(NOTEBOOKS)
    record = json.loads((paths.runs_dir / ".up_to_date" / "tiny.json").read_text())
    assert sorted(record["notebooks"]) == sorted(NOTEBOOKS)
    table = paths.artifacts_dir / "tab_01_data.csv"
    stamp = table.stat().st_mtime_ns
    assert run() == []
    assert any(line.startswith("reproduce: up to date, not run: every notebook") for line in lines), lines
    assert not any("notebooks ran in" in line for line in lines)
    assert table.stat().st_mtime_ns == stamp  # nothing written again
    assert json.loads((paths.runs_dir / ".up_to_date" / "tiny.json").read_text()) == record  # nor the record


def test_an_edited_notebook_reruns_with_the_notebooks_that_run_after_it(setting) -> None:
    run, notebooks, _, lines, _ = setting
    run()
    (notebooks / "02_memory.ipynb").write_text(_notebook("02_memory", [], " (edited)"))
    assert run() == ["02_memory", "03_main_results", "10_report"]  # 03 runs after 02; 10 after every one
    assert "reproduce: up to date, not run: 01_data (" in "\n".join(lines)
    assert any("running 3 of 4 notebooks (02_memory: the notebook or its parameters changed)" in line
               for line in lines), lines
    assert run() == []  # and recorded again


def test_a_missing_executed_copy_reruns_that_notebook(setting) -> None:
    run, _, paths, _, _ = setting
    run()
    (paths.executed_dir / "01_data.ipynb").unlink()
    assert run() == ["01_data", "10_report"]


@pytest.mark.parametrize("change", ["run folder", "figure", "code", "plugin", "environment", "parameters"])
def test_a_change_of_what_every_notebook_reads_reruns_every_one(setting, tmp_path, monkeypatch, change) -> None:
    run, _, paths, lines, _ = setting
    package = tmp_path / "package"  # a stand-in for the code packages' files
    package.mkdir()
    (package / "module.py").write_text("X = 1\n")
    monkeypatch.setattr(up_to_date, "PACKAGE_ROOTS", (package,))
    plugin = tmp_path / "lab_plugin.py"  # a plugin file named by R2MAD_PLUGINS (as an editable install: no version)
    plugin.write_text("X = 1\n")
    monkeypatch.setenv("R2MAD_PLUGINS", str(plugin))
    run()
    if change == "run folder":
        transcripts = paths.runs_dir / "model" / "01_data" / "transcripts.jsonl"
        os.utime(transcripts, ns=(transcripts.stat().st_atime_ns, transcripts.stat().st_mtime_ns + 1_000_000))
    elif change == "figure":
        (paths.artifacts_dir / "tab_02_memory.csv").write_text("a,b\n1,3\n")
    elif change == "code":
        (package / "module.py").write_text("X = 2\n")
    elif change == "plugin":
        plugin.write_text("X = 2\n")
    elif change == "environment":
        monkeypatch.setenv("R2MAD_SOMETHING", "1")
    else:
        monkeypatch.setattr(command, "notebook_parameters", lambda profile, paths: {
            **paths.as_parameters(), "profile": "tiny", "overrides": {"top_k": 2}})
    assert run() == list(NOTEBOOKS)
    reason = {"run folder": "a run folder, figure or table changed", "figure": "a run folder, figure or table changed",
              "code": "the code, the installed packages", "plugin": "the code, the installed packages",
              "environment": "the code, the installed packages",
              "parameters": "the notebook or its parameters changed"}[change]
    assert any(reason in line for line in lines), lines


def test_force_and_fresh_run_every_notebook_and_record_it(setting) -> None:
    run, _, _, _, _ = setting
    run()
    assert run(check=False) == list(NOTEBOOKS)  # --force, --fresh
    assert run() == []


def test_a_run_that_does_not_check_neither_reads_nor_writes_the_record(setting) -> None:
    run, _, paths, _, _ = setting
    assert run(check=None) == list(NOTEBOOKS)  # --only, the budget gateway, the estimate
    assert not (paths.runs_dir / ".up_to_date" / "tiny.json").exists()
    assert run() == list(NOTEBOOKS)


def test_a_failed_run_leaves_no_record_and_the_next_runs_everything(setting, monkeypatch) -> None:
    run, notebooks, paths, _, execute = setting
    run()
    (notebooks / "02_memory.ipynb").write_text(_notebook("02_memory", [], " (edited)"))

    def failing(notebook, output, parameters, kernel=None, clear=False, progress=None):
        execute(notebook, output, parameters, kernel, clear)
        return "cell 2: ValueError: no" if notebook.stem == "02_memory" else None

    monkeypatch.setattr(notebook_runner, "execute", failing)
    results = run_notebooks(load_profile("tiny"), paths, notebooks_dir=notebooks, echo=lambda line: None, jobs=1,
                            reuse_kernels=False, up_to_date_check=True)
    assert results[-1].error
    assert not (paths.runs_dir / ".up_to_date" / "tiny.json").exists()
    monkeypatch.setattr(notebook_runner, "execute", execute)
    assert run() == list(NOTEBOOKS)


def test_the_command_line_leaves_up_to_date_notebooks_unless_forced(setting, tmp_path, capsys) -> None:
    _, notebooks, _, _, _ = setting
    arguments = ["--profile", "tiny", "--output-dir", str(tmp_path / "out"), "--notebooks-dir", str(notebooks)]
    assert command.main(arguments) == 0
    capsys.readouterr()
    assert command.main(arguments) == 0
    out = capsys.readouterr().out
    assert "reproduce: up to date, not run: every notebook" in out
    assert "reproduce: nothing ran; the tables and figures in" in out
    assert command.main([*arguments, "--force"]) == 0
    assert "reproduce: all 4 notebooks ran in" in capsys.readouterr().out
    assert command.main([*arguments, "--only", "01"]) == 0
    assert "[1/1] 01_data done" in capsys.readouterr().out
