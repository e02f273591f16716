"""Volatile facts (issue 36): a rerun whose results are unchanged leaves the tracked files' bytes as they were.

Fast checks of each piece here; the whole profile run twice, byte for byte: tests/test_notebooks.py
(test_a_rerun_from_nothing_writes_the_same_bytes)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from r2mad_lab.report.artifacts import ReportContext, read_manifest
from r2mad_lab.report.headline import headline_lines, print_headline
from r2mad_lab.report.volatile import (
    LAST_TIMINGS_NAME,
    ExecutedSnapshot,
    is_progress,
    normalized_notebook,
    same_but_volatile,
)


def _executed(path: Path, *, seconds: str, result: str, bar: str) -> None:
    """An executed notebook as papermill writes one: clock fields, a random id on the injected cell, a progress bar."""
    import nbformat  # where used, not at the top: every `make test` worker collects this module (~0.2 s to import)

    nb = nbformat.v4.new_notebook()
    injected = nbformat.v4.new_code_cell("x = 1")
    injected.metadata.update(tags=["injected-parameters"], papermill={"duration": float(seconds), "start_time": seconds,
                                                                      "end_time": seconds, "status": "completed"})
    cell = nbformat.v4.new_code_cell("print(x)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=f"\r3 cells: 100%|##########| 3/3 [{bar}]\n"),
                    nbformat.v4.new_output("stream", name="stdout", text=result)]
    nb.cells = [injected, cell]
    nb.metadata["papermill"] = {"duration": float(seconds), "start_time": seconds, "end_time": seconds,
                                "parameters": {"x": 1}}
    nbformat.write(nb, path)


def test_an_executed_notebook_whose_results_are_unchanged_gets_its_bytes_back(tmp_path: Path) -> None:
    _executed(tmp_path / "01_a.ipynb", seconds="1.5", result="0.62", bar="00:01<00:00, 2.1cell/s")
    _executed(tmp_path / "02_b.ipynb", seconds="1.5", result="0.40", bar="00:01<00:00, 2.1cell/s")
    (tmp_path / "timings.json").write_text(json.dumps({"01_a": {"seconds": 1.5, "succeeded": True},
                                                       "02_b": {"seconds": 1.5, "succeeded": True}}))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    snapshot = ExecutedSnapshot(tmp_path)
    # the rerun: other times, another injected id, another progress bar; the same results
    for name in ("01_a", "02_b"):
        _executed(tmp_path / f"{name}.ipynb", seconds="9.0", result="0.62" if name == "01_a" else "0.40",
                  bar="00:07<00:00, 0.4cell/s")
    (tmp_path / "timings.json").write_text(json.dumps({"01_a": {"seconds": 9.0, "succeeded": True},
                                                       "02_b": {"seconds": 8.0, "succeeded": True}}))
    assert (tmp_path / "01_a.ipynb").read_bytes() != before["01_a.ipynb"]
    assert snapshot.settle() == {"kept": ["01_a", "02_b"], "changed": []}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != LAST_TIMINGS_NAME} == before
    # this run's times, untracked
    assert json.loads((tmp_path / LAST_TIMINGS_NAME).read_text())["01_a"]["seconds"] == 9.0

    # a result that changed keeps the new notebook, and the new times
    snapshot = ExecutedSnapshot(tmp_path)
    _executed(tmp_path / "02_b.ipynb", seconds="3.0", result="0.41", bar="00:03<00:00, 1.0cell/s")
    (tmp_path / "timings.json").write_text(json.dumps({"01_a": {"seconds": 2.0, "succeeded": True},
                                                       "02_b": {"seconds": 3.0, "succeeded": True}}))
    assert snapshot.settle() == {"kept": ["01_a"], "changed": ["02_b"]}
    assert "0.41" in (tmp_path / "02_b.ipynb").read_text()
    assert json.loads((tmp_path / "timings.json").read_text())["02_b"]["seconds"] == 3.0


def test_normalization_drops_clocks_ids_and_progress_only() -> None:
    assert is_progress({"output_type": "stream", "name": "stderr",
                        "text": "\r\x1b[A12 cells:  50%|#####     | 6/12 [00:02<00:02]"})
    assert not is_progress({"output_type": "stream", "name": "stderr", "text": "UserWarning: something real\n"})
    assert not is_progress({"output_type": "stream", "name": "stdout", "text": "50%|#| 1/2 [00:01<00:01]"})
    text = json.dumps({"cells": [{"id": "a1", "cell_type": "code", "metadata": {"papermill": {"duration": 1.0}},
                                  "outputs": [{"output_type": "stream", "name": "stdout", "text": "1"}]}],
                       "metadata": {"papermill": {"start_time": "x", "parameters": {"k": 1}}}})
    assert normalized_notebook(text) == {"cells": [{"cell_type": "code", "metadata": {"papermill": {}},
                                                    "outputs": [
                                                        {"output_type": "stream", "name": "stdout", "text": "1"}]}],
                                         "metadata": {"papermill": {"parameters": {"k": 1}}}}


def test_a_manifest_entry_written_again_unchanged_keeps_the_file_and_a_changed_one_is_recorded(tmp_path: Path) -> None:
    ctx = ReportContext(profile="demo", out_dir=tmp_path / "figures" / "demo", notebook="demo")
    frame = pd.DataFrame({"a": [1.0, 2.0]})
    ctx.save_table(frame, "tab_x")
    manifest = tmp_path / "figures" / "demo" / "MANIFEST.json"
    first = manifest.read_bytes()
    entry = read_manifest(manifest.parent)["artifacts"]["tab_x"]
    assert set(entry["sha256"]) == {"tab_x.csv", "tab_x.md", "tab_x.tex"}
    ctx.save_table(frame, "tab_x")  # the same table again, later: the manifest keeps its bytes
    assert manifest.read_bytes() == first
    ctx.save_table(pd.DataFrame({"a": [1.0, 3.0]}), "tab_x")  # another result: recorded, with its files' digests
    changed = read_manifest(manifest.parent)["artifacts"]["tab_x"]
    assert changed["sha256"]["tab_x.csv"] != entry["sha256"]["tab_x.csv"]
    same = {"name": "t", "files": ["t.csv"], "created": "x", "git": {"commit": "unknown-a", "dirty": False}}
    assert same_but_volatile(same, {**same, "created": "y"})
    assert not same_but_volatile(same, {**same, "git": {"commit": "unknown-b", "dirty": False}})  # other code
    assert not same_but_volatile(same, {**same, "caption": "another"})


def test_the_headline_is_the_papers_table_1_with_this_runs_values(tmp_path: Path, capsys) -> None:
    rows = [("CoT", "MATH500", "0.500 [0.000, 1.000]", "4", "0.530"),
            ("CoT", "Average", "0.562 [0.375, 0.752]", "16", "0.565"),
            ("R2-MAD", "MATH500", "0.250 [0.000, 0.750]", "4", "0.522"),
            ("R2-MAD", "Average", "0.500 [0.375, 0.625]", "16", "0.607")]
    frame = pd.DataFrame([{"table": "tab:main_results", "model": "Simulated", "paper_model": "Qwen2.5-7B-Instruct",
                           "method": m, "benchmark": b, "metric": "accuracy", "reproduced": r, "n": n, "paper": p,
                           "difference": "", "within_ci": "yes"} for m, b, r, n, p in rows]
                         + [{"table": "tab:ablation", "model": "Simulated", "paper_model": "Qwen2.5-7B-Instruct",
                             "method": "R2-MAD w/o Memory", "benchmark": "Average", "metric": "accuracy",
                             "reproduced": "0.1", "n": "16", "paper": "0.6", "difference": "", "within_ci": "no"}])
    frame.to_csv(tmp_path / "tab_paper_comparison.csv", index=False)
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"artifacts": {"tab_paper_claims": {
        "verdict": "Claims: 3 of 5 orderings go the claimed way, 1 of them with p_holm < 0.05 (Holm over the 5 "
                   "comparisons), 2 reversed, 0 tied."}}}), encoding="utf-8")
    lines = headline_lines(tmp_path)
    assert "Table 1" in lines[0] and "this run [95% CI] / the paper" in lines[0] and "same benchmarks" in lines[0]
    assert "Simulated (stands in for Qwen2.5-7B-Instruct)" in lines[1] and "MATH500 4" in lines[1]
    table = [line for line in lines if line.startswith("  | ")]
    assert [c.strip() for c in table[0].split("|")[1:-1]] == ["method", "MATH500", "Average"]
    # like with like: the paper's Average over the benchmarks this run has (MATH500 only), not its 4-benchmark mean
    assert [c.strip() for c in table[1].split("|")[1:-1]] == ["CoT", "0.500 [0.000, 1.000] / 0.530",
                                                              "0.562 [0.375, 0.752] / 0.530"]
    assert [c.strip() for c in table[2].split("|")[1:-1]] == ["R2-MAD", "0.250 [0.000, 0.750] / 0.522",
                                                              "0.500 [0.375, 0.625] / 0.522"]
    assert not any("w/o Memory" in line for line in lines)  # Table 1 only
    assert lines[-1].startswith("  Claims: 3 of 5 orderings go the claimed way, 1 of them with p_holm < 0.05")
    print_headline(tmp_path, ran=["03_main_results"])  # the comparison was not written by this run: nothing
    assert capsys.readouterr().out == ""
    print_headline(tmp_path, ran=["10_report"])
    assert capsys.readouterr().out.splitlines() == lines
    print_headline(tmp_path, ran=None)  # a rerun that found everything up to date: the recorded table, said so
    again = capsys.readouterr().out.splitlines()
    assert "up to date, nothing re-executed" in again[0] and again[1:] == lines[1:]
    assert headline_lines(tmp_path / "nothing") == []


def test_what_a_new_machine_writes_to_stderr_is_not_a_change() -> None:
    """matplotlib's font-cache line (a new machine, when building the cache takes over 5 s) comes and goes with the
    machine: a rerun that only adds it keeps the committed notebook. A line that merely contains those words, or a
    real warning beside it, is a change."""
    line = "Matplotlib is building the font cache; this may take a moment.\n"
    assert is_progress({"output_type": "stream", "name": "stderr", "text": line})
    assert is_progress({"output_type": "stream", "name": "stderr",
                        "text": ["\r12 cells:  8%|8         | 1/12 [00:05<00:55,  5.02s/cell]\n", line]})
    assert not is_progress({"output_type": "stream", "name": "stderr", "text": line + "UserWarning: something real\n"})
    assert not is_progress({"output_type": "stream", "name": "stderr", "text": "so " + line})
    committed = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [
        {"output_type": "stream", "name": "stdout", "text": "0.637\n"}]}], "metadata": {}}
    new_machine = json.loads(json.dumps(committed))
    new_machine["cells"][0]["outputs"].insert(0, {"output_type": "stream", "name": "stderr", "text": line})
    assert normalized_notebook(json.dumps(new_machine)) == normalized_notebook(json.dumps(committed))


def test_a_commit_that_changes_only_the_lab_is_new_code(tmp_path, monkeypatch) -> None:
    """An entry's commit is rewritten when the lab changed, not only the core (both are the code a run is made of:
    r2mad_lab.CODE_PACKAGES); a commit of the docs alone is the same code."""
    import subprocess

    from r2mad_lab.report import volatile as module

    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for folder in ("r2mad_core", "r2mad_lab", "docs"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text("x = 1\n")
    subprocess.run(git + ["init", "-q"], cwd=tmp_path, check=True)

    def commit(folder: str, text: str) -> str:
        (tmp_path / folder / "m.py").write_text(text)
        subprocess.run(git + ["add", "."], cwd=tmp_path, check=True)
        subprocess.run(git + ["commit", "-qm", folder], cwd=tmp_path, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout.strip()

    first = commit("docs", "x = 1\n")
    docs_only = commit("docs", "x = 2\n")
    lab_only = commit("r2mad_lab", "x = 2\n")
    monkeypatch.setattr(module, "REPOSITORY", tmp_path)
    module.code_tree.cache_clear()
    try:
        assert module.same_code(first, docs_only) and not module.same_code(docs_only, lab_only)
        assert module.code_tree("0" * 40) is None
    finally:
        module.code_tree.cache_clear()
