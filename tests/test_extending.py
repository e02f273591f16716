"""docs/extending.md, step by step: each walkthrough's code is run here as the page shows it.

The memory knob's walkthrough is done for real, in a temporary copy of the package: the two edits the page shows
(the declaration in memory/settings.py, its default read where it acts in memory/retrieval.py), no profile file,
then a `tiny` R2-MAD cell run with the new setting set by the profile override (``--set``)."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "extending.md"


def section_text(section: str) -> str:
    """One ``## `` section of docs/extending.md."""
    parts = re.split(r"^## ", PAGE.read_text(encoding="utf-8"), flags=re.M)
    return next(p for p in parts if p.startswith(section))


def blocks(section: str) -> list[str]:
    """The ```python blocks of a section, in order."""
    return re.findall(r"```python\n(.*?)```", section_text(section), flags=re.S)


def edits(section: str) -> list[tuple[str, str, str]]:
    """``(file, old lines, new lines)`` of a section's ```diff blocks: a ``# file: PATH`` line, ``-``/``+`` lines."""
    found = []
    for block in re.findall(r"```diff\n(.*?)```", section_text(section), flags=re.S):
        lines = block.splitlines()
        path = lines[0].removeprefix("# file: r2mad_core/").strip()
        old = "\n".join(line[1:] for line in lines[1:] if line.startswith("-"))
        new = "\n".join(line[1:] for line in lines[1:] if line.startswith("+"))
        found.append((path, old, new))
    return found


def changed_files(a: Path, b: Path) -> list[str]:
    """Files that differ between two trees (``__pycache__`` left out)."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.extend(prefix + name for name in cmp.diff_files + cmp.left_only + cmp.right_only if name != "__pycache__")
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__":
                walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(a, b), "")
    return sorted(out)


CELL = """
import json, sys
from pathlib import Path
from r2mad_core.methods import get_method, RunContext
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.reproduce.grid import ExperimentGrid
out = Path(sys.argv[1])
overrides = json.loads(sys.argv[2])
exp = ExperimentGrid.from_profile(load_profile("tiny", overrides), runs_dir=out / "runs", cache_dir=out / "cache")
model = exp.models[0]
outcome = exp.run(model, "truthfulqa", "R2-MAD")
config = json.loads((outcome.run_dir / "config.json").read_text())
name, options = exp.method_options("R2-MAD", exp.memory(model, "truthfulqa"))
hook = get_method(name, **options).make_hook(RunContext("truthfulqa", "test", exp.engine(model), seed=exp.seed))
print(json.dumps({"run_dir": outcome.run_dir.name, "n": len(outcome.records), "new": outcome.n_new, "recorded": config["method"]["options"],
                  "factor": hook.settings.retrieval.candidate_factor, "shown": exp.describe()["value"].to_dict()}))
"""


def run_cell(package_root: Path, out: Path, overrides: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    done = subprocess.run([sys.executable, "-c", CELL, str(out), json.dumps(overrides)], env=env, cwd=package_root,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_memory_knob_is_two_edits_and_reaches_a_tiny_cell(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "r2mad_core", copy / "r2mad_core", ignore=shutil.ignore_patterns("__pycache__"))
    steps = edits("Add a memory knob")
    assert len(steps) == 2, steps
    for path, old, new in steps:
        target = copy / "r2mad_core" / path
        text = target.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{path}: the page's '-' lines are not in the file once: {old!r}"
        target.write_text(text.replace(old, new), encoding="utf-8")
    touched = changed_files(ROOT / "r2mad_core", copy / "r2mad_core")
    assert touched == ["memory/retrieval.py", "memory/settings.py"]  # at most 3 Python files, no profile YAML
    assert not any(name.endswith(".yaml") for name in touched)

    # the unchanged package runs a cell; the changed one, at the new setting's default, finds that very run (same key,
    # same config.json: nothing generated again), so no finished or published run is invalidated by the new setting
    before = run_cell(ROOT, tmp_path, {})
    default = run_cell(copy, tmp_path, {})
    assert before["factor"] == default["factor"] == 3 and before["n"] == default["n"] == 4
    assert default["run_dir"] == before["run_dir"] and default["new"] == 0
    assert default["recorded"] == before["recorded"] and "candidate_factor" not in default["recorded"]

    set_it = run_cell(copy, tmp_path, {"candidate_factor": 2})  # the profile override, as --set does
    assert set_it["run_dir"] != before["run_dir"] and set_it["new"] == 4
    assert set_it["recorded"]["candidate_factor"] == 2  # config.json records it, as every option
    assert set_it["factor"] == 2  # and the hook's retrieval acts on it (2K candidates instead of 3K)
    assert set_it["shown"]["K / gamma / w_l / w_h"] == default["shown"]["K / gamma / w_l / w_h"]

    # the command line has its flag, generated from the declaration
    env = {**os.environ, "PYTHONPATH": str(copy)}
    shown = subprocess.run([sys.executable, "-m", "r2mad_lab", "run", "--help"], env=env, cwd=copy, capture_output=True,
                           text=True, timeout=300)
    assert "--candidate-factor" in shown.stdout


@pytest.mark.parametrize("section", ["Add a retrieval policy", "Add an engine", "Add a benchmark"])
def test_each_walkthrough_runs_as_the_page_shows_it(section: str, tmp_path: Path, monkeypatch) -> None:
    code = blocks(section)
    assert code, f"docs/extending.md: no python block under '## {section}'"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "walkthrough"}
    try:
        for block in code:  # Setup, Interface, Registration, Testing: each block runs after the one before
            exec(compile(block, f"docs/extending.md: {section}", "exec"), namespace)
    finally:
        cleanup = namespace.get("cleanup")
        if cleanup is not None:
            cleanup()


@pytest.mark.slow  # it runs notebook 04 in a kernel
def test_the_knobs_by_hand_command_runs_on_tiny(tmp_path: Path) -> None:
    """The page's own by-hand command (`--profile tiny --only 04 --set candidate_factor=2`) after its two edits: the
    worked state and notebook 04 read candidate_factor and K back from the run's config.json (issue 57), so the
    notebook's own check that the candidates are the run's holds, and the knob touches only the page's files."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "r2mad_core", copy / "r2mad_core", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "notebooks", copy / "notebooks", ignore=shutil.ignore_patterns("executed"))
    for path, old, new in edits("Add a memory knob"):
        target = copy / "r2mad_core" / path
        target.write_text(target.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    assert changed_files(ROOT / "r2mad_core", copy / "r2mad_core") == ["memory/retrieval.py", "memory/settings.py"]
    command = "--profile tiny --only 04 --set candidate_factor=2"
    assert command in (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "r2mad_lab.reproduce", *command.split(), "--output-dir",
                           str(tmp_path / "out"), "--notebooks-dir", str(copy / "notebooks")],
                          env={**os.environ, "PYTHONPATH": str(copy)}, cwd=copy, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "candidate_factor = 2" in done.stdout
