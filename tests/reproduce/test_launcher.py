"""Points side by side and as cluster jobs (r2mad_lab/reproduce/launcher.py, issue 47): ``--jobs 2`` writes the same
tables byte for byte as ``--jobs 1``; ``--launcher slurm`` (submitit's local executor here: a real subprocess per job)
runs each point as a job and writes the same tables as the local launcher; a job killed mid-run is named, no table is
written without it, and the next invocation says so and runs it again.

The slow tests run real kernels on a toy notebook (a table with CIs whose numbers come from the overrides), through
``reproduce``'s own command line; the fast one submits a job that fails at once. No verdict depends on a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r2mad_lab.reproduce import command
from r2mad_lab.reproduce.launcher import LAUNCHER_DIR, LEDGER, Ledger, _cluster, parse_slurm_options, point_arguments
from r2mad_lab.reproduce.points import plan_points, profile_values
from r2mad_lab.reproduce.up_to_date import RECORD_DIR

TOY = [
    "import os, signal\n"
    "from pathlib import Path\n"
    "import pandas as pd\n"
    "from r2mad_lab.report.artifacts import save_table\n"
    "from r2mad_lab.reproduce.points import from_environment\n"
    "values, name = from_environment()\n"
    "kill = Path(figures_dir).parent.parent / (str(values.get('gamma')) + '.kill')\n"
    "if name and kill.exists():  # killed mid-run: the point's own process, once\n"
    "    kill.unlink()\n"
    "    os.kill(os.getppid(), signal.SIGKILL)\n"
    "value = float(values.get('gamma', 0.9)) + float(values.get('top_k', 1))\n"
    "frame = pd.DataFrame({'row': ['R2-MAD', 'MAD'], 'benchmark': ['truthfulqa'] * 2, 'value': [value, value / 2],\n"
    "                      'ci_low': [value - 0.1, value / 2 - 0.1], 'ci_high': [value + 0.1, value / 2 + 0.1]})\n"
    "save_table(frame, 'tab_toy', Path(figures_dir) / ('variants/' + name if name else ''), profile='tiny',\n"
    "           notebook='04_toy')\n"
]


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    import nbformat

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("profile = 'tiny'\noverrides = {}\nfigures_dir = None\nruns_dir = None\n"
                                     "cache_dir = None\ndata_dir = None")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, *[nbformat.v4.new_code_cell(s) for s in TOY]]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, notebooks / "04_toy.ipynb")
    def reproduce(out: Path, *arguments: str) -> tuple[int, str]:
        capsys.readouterr()
        code = command.main(["--profile", "tiny", "--notebooks-dir", str(notebooks), "--output-dir", str(out),
                             "--only", "04", *arguments])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return reproduce, tmp_path


def _tables(out: Path) -> dict[str, bytes]:
    sweeps = out / "figures" / "tiny" / "sweeps"
    return {p.relative_to(sweeps).as_posix(): p.read_bytes() for p in sorted(sweeps.rglob("tab_*"))}


@pytest.mark.slow
def test_points_side_by_side_write_the_same_tables_byte_for_byte(toy) -> None:
    reproduce, tmp_path = toy
    sweep = ["--sweep", "gamma=0,0.5", "--sweep", "top_k=2,3"]
    code, one = reproduce(tmp_path / "one", *sweep, "--jobs", "1")
    assert code == 0, one
    code, two = reproduce(tmp_path / "two", *sweep, "--jobs", "2")
    assert code == 0, two
    assert "4 points to run, 2 at a time, each in its own process" in two
    assert sum(f"[{n}/4] point " in two for n in range(1, 5)) == 4  # a line per finished point
    assert _tables(tmp_path / "one") and _tables(tmp_path / "one") == _tables(tmp_path / "two")
    logs = list((tmp_path / "two" / "runs" / "tiny" / RECORD_DIR / LAUNCHER_DIR).glob("*.log"))
    assert len(logs) == 4  # one process per point, each with its log
    code, again = reproduce(tmp_path / "two", *sweep, "--jobs", "2")
    assert code == 0 and again.count("up to date, not run: point") == 4 and "points to run" not in again


@pytest.mark.slow
def test_the_slurm_launcher_runs_each_point_as_a_job_and_reruns_a_killed_one(toy) -> None:
    reproduce, tmp_path = toy
    sweep = ["--sweep", "gamma=1,0.5"]  # gamma = 1 lets lambda_t reach 0: not an inert sweep at K = 1 (memory.inert)
    code, local = reproduce(tmp_path / "local", *sweep, "--jobs", "1")
    assert code == 0, local
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "0.5.kill").write_text("")  # the gamma = 0.5 job kills itself mid-run, once
    code, first = reproduce(tmp_path / "slurm", *sweep, "--launcher", "slurm")
    assert code == 1
    assert "2 points as local jobs of submitit" in first
    assert "point gamma=0.5 (variant gamma=0.5) FAILED (local job" in first
    assert "1 of 2 points did not finish: gamma=0.5 (variant gamma=0.5)" in first
    assert not (tmp_path / "slurm" / "figures" / "tiny" / "sweeps").exists()  # no table without it
    assert (tmp_path / "slurm" / "figures" / "tiny" / "variants" / "gamma=0.5" / "INCOMPLETE").exists()
    code, second = reproduce(tmp_path / "slurm", *sweep, "--launcher", "slurm")
    assert code == 0, second
    assert "up to date, not run: variant gamma=1 (" in second  # the finished job is kept
    assert "point gamma=0.5 (variant gamma=0.5) did not finish in an earlier invocation (local job" in second
    assert "[1/1] point gamma=0.5 (variant gamma=0.5) finished" in second
    assert _tables(tmp_path / "slurm") and _tables(tmp_path / "slurm") == _tables(tmp_path / "local")
    ledger = tmp_path / "slurm" / "runs" / "tiny" / RECORD_DIR / LAUNCHER_DIR / LEDGER
    assert json.loads(ledger.read_text()) == {}


def test_a_failed_job_is_named_and_left_in_the_ledger(tmp_path: Path) -> None:
    base = profile_values(command.load_profile("tiny"))
    points = plan_points(base, "tiny", {}, [("gamma", [0.25])], [0])
    assert point_arguments(points[0]) == ["--set", "gamma=0.25"]
    lines: list[str] = []
    ledger = Ledger(tmp_path / "launcher")
    ok = _cluster(points, [0], ["--profile", "no-such-profile"], tmp_path / "launcher", ledger, "local", {},
                  lines.append)  # a real job (submitit's local executor) whose reproduce exits 2 at once
    assert ok == {0: False}
    assert any("[1/1] point gamma=0.25 (variant gamma=0.25) FAILED (local job" in line for line in lines), lines
    entry = ledger.read()["gamma=0.25"]
    assert entry["state"].startswith("failed:") and entry["launcher"] == "local" and Path(entry["log"]).parent.is_dir()
    assert parse_slurm_options(["slurm_partition=gpu", "gpus_per_node=1"]) == {"slurm_partition": "gpu",
                                                                              "gpus_per_node": 1}
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_slurm_options(["gpus"])
