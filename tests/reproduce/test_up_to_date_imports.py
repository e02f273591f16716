"""The default profile's up-to-date rerun loads neither scipy nor httpx (issue 62: the rerun's CPU is mostly imports).

``python -m r2mad_lab.reproduce`` is run twice in child processes, with papermill's execution replaced by a stand-in
that copies the notebook and writes one table (no kernel), as tests/reproduce/test_up_to_date.py does: the first run
executes every notebook and records them, the second finds every one up to date. The second's ``sys.modules`` is
what the up-to-date path imports. pandas is still among them (the tables' modules import it at their top: reproduce/
grid.py, variants.py, sweeps.py, report/tables.py, ...), so it is not asserted absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAND_IN = r'''
import json, sys
from pathlib import Path
from r2mad_lab.reproduce import command, notebook_runner
out, notebooks, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

def execute(notebook, output, parameters, kernel=None, clear=False, progress=None):
    if mode == "again":
        raise SystemExit(f"{notebook.name} ran again: it was not found up to date")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(notebook.read_text())
    figures = Path(parameters["figures_dir"])
    figures.mkdir(parents=True, exist_ok=True)
    (figures / f"tab_{notebook.stem}.csv").write_text("a,b\n1,2\n")

notebook_runner.execute = execute
code = command.main(["--profile", "sim", "--output-dir", str(out), "--notebooks-dir", str(notebooks)])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
'''

#: Loaded by no step of an up-to-date rerun: scipy (theory/checks.py needs it only to compute a check, not for the
#: grid bounds the profiles read), httpx (the budget gateway's client, made only when a run forwards requests).
NOT_LOADED = ("scipy", "scipy.stats", "scipy.special", "httpx", "httpcore")


def _run(tmp_path: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", STAND_IN, str(tmp_path / "out"), str(ROOT / "notebooks"), mode],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_up_to_date_rerun_of_the_default_profile_loads_neither_scipy_nor_httpx(tmp_path: Path) -> None:
    first = _run(tmp_path, "first")
    assert first["code"] == 0
    again = _run(tmp_path, "again")
    assert again["code"] == 0
    loaded = set(again["modules"])
    assert "r2mad_lab.reproduce.up_to_date" in loaded  # the path that decided "up to date" ran in this process
    assert not loaded & set(NOT_LOADED), sorted(loaded & set(NOT_LOADED))
