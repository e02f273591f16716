"""The ablation loop (issue 47): a point (a ``--set`` variant, a sweep point, a replicate) whose executed configuration
was made before is up to date and not executed again; the dry run lists the points and creates nothing.

The notebooks run through ``reproduce``'s own command line (``command.main``) with papermill's execution replaced by a
stand-in (no kernel: these tests are fast) that writes what a notebook writes: the executed copy with papermill's
parameters in its metadata, and one table with CIs whose numbers come from the configuration. The stand-in counts
the notebooks it executed: "not re-executed" is that count, never a time."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from r2mad_lab.reproduce import command, notebook_runner
from r2mad_lab.reproduce.point_cache import canonical, executed_configuration
from r2mad_lab.reproduce.points import from_environment, plan_points, profile_values


def _notebook(name: str) -> str:
    cells = [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {"tags": ["parameters"]},
              "outputs": [], "source": "profile = 'tiny'\noverrides = {}"},
             {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": f"# {name}"}]
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    return json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}, indent=1)


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    from r2mad_lab.report.artifacts import save_table

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "04_toy.ipynb").write_text(_notebook("04_toy"))
    executed: list[tuple[str, dict]] = []

    def execute(notebook: Path, output: Path, parameters, kernel=None, clear=False, progress=None):
        overrides, name = from_environment()
        executed.append((notebook.stem, dict(parameters["overrides"])))
        copy = json.loads(notebook.read_text())
        copy["metadata"]["papermill"] = {"parameters": {"profile": parameters["profile"],
                                                        "overrides": parameters["overrides"]}}
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(copy))
        figures = Path(parameters["figures_dir"]) / ("variants/" + name if name else "")
        value = float(overrides.get("gamma", 0.9)) + float(overrides.get("top_k", 1)) + float(overrides.get("seed", 0))
        frame = pd.DataFrame({"row": ["R2-MAD"], "benchmark": ["truthfulqa"], "value": [value],
                              "ci_low": [value - 0.1], "ci_high": [value + 0.1]})
        save_table(frame, "tab_toy", figures, profile="tiny", notebook=notebook.stem)
        return None

    monkeypatch.setattr(notebook_runner, "execute", execute)
    out = tmp_path / "out"

    def reproduce(*arguments: str) -> tuple[int, list[str], list]:
        executed.clear()
        capsys.readouterr()
        code = command.main(["--profile", "tiny", "--notebooks-dir", str(notebooks), "--output-dir", str(out),
                             "--jobs", "1", *arguments])
        captured = capsys.readouterr()
        return code, (captured.out + captured.err).splitlines(), list(executed)

    return reproduce, out


def test_set_and_the_sweep_point_that_equals_it_are_one_configuration() -> None:
    base = profile_values(command.load_profile("tiny"))
    assert base["gamma"] == 0.9 and base["top_k"] == 1  # the paper preset's K
    assert executed_configuration("tiny", {"top_k": 3}) == executed_configuration("tiny", {"top_k": 3, "gamma": 0.9})
    assert executed_configuration("tiny", {"gamma": 1}) == executed_configuration("tiny", {"gamma": 1.0})
    assert executed_configuration("tiny", {"top_k": 3}) != executed_configuration("tiny", {"top_k": 2})
    assert canonical([1, 2.0, {"b": 1, "a": True}]) == [1.0, 2.0, {"a": True, "b": 1.0}]
    points = plan_points(base, "tiny", {}, [("gamma", [0, 0.45, 0.9]), ("top_k", [1, 3])], [0, 1])
    assert len(points) == 12  # 3 x 2 settings x 2 seeds, the first axis outermost, seeds innermost
    assert [p.label() for p in points[:3]] == ["gamma=0, top_k=1", "gamma=0, top_k=1, seed=1", "gamma=0, top_k=3"]
    assert points[8].variant is None  # gamma 0.9, K 1: the profile itself
    assert points[9].variant.name == "seed=1" and points[10].variant.name == "top_k=3"


def test_a_variant_run_twice_is_up_to_date_the_second_time_and_force_reruns_it(loop) -> None:
    reproduce, out = loop
    code, lines, ran = reproduce("--only", "04", "--set", "top_k=3")
    assert code == 0 and ran == [("04_toy", {}), ("04_toy", {"top_k": 3})]  # the baseline first, then the variant
    records = list((out / "runs" / "tiny" / ".up_to_date" / "points").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["name"] == "top_k=3"
    code, lines, ran = reproduce("--only", "04", "--set", "top_k=3")
    assert code == 0 and ran == []  # no notebook executed
    assert any(line.startswith("reproduce: up to date, not run: variant top_k=3 (a run with the same executed "
                               "configuration finished") for line in lines), lines
    code, lines, ran = reproduce("--only", "04", "--set", "top_k=3", "--force")
    assert code == 0 and ran == [("04_toy", {"top_k": 3})]


def test_an_incomplete_or_changed_point_is_not_up_to_date(loop) -> None:
    reproduce, out = loop
    reproduce("--only", "04", "--set", "gamma=0.5")
    folder = out / "figures" / "tiny" / "variants" / "gamma=0.5"
    (folder / "INCOMPLETE").write_text("killed\n")
    assert reproduce("--only", "04", "--set", "gamma=0.5")[2] == [("04_toy", {"gamma": 0.5})]
    assert not (folder / "INCOMPLETE").exists()
    assert reproduce("--only", "04", "--set", "gamma=0.5")[2] == []
    (folder / "tab_toy.csv").write_text("row,benchmark,value,ci_low,ci_high\nR2-MAD,truthfulqa,9,8,10\n")
    assert reproduce("--only", "04", "--set", "gamma=0.5")[2] == [("04_toy", {"gamma": 0.5})]  # an edited table


def test_a_sweep_does_not_execute_the_point_it_shares_with_a_set_variant(loop) -> None:
    reproduce, out = loop
    reproduce("--only", "04", "--set", "top_k=3")
    code, lines, ran = reproduce("--only", "04", "--sweep", "gamma=0,0.9", "--set", "top_k=3")
    assert code == 0
    assert ran == [("04_toy", {"top_k": 3, "gamma": 0})]  # only gamma = 0; gamma = 0.9 is the --set variant
    assert any("up to date, not run: point gamma=0.9, variant top_k=3" in line for line in lines), lines
    table = pd.read_csv(out / "figures" / "tiny" / "sweeps" / "gamma__top_k=3" / "tab_sweep_tab_toy.csv")
    assert len(table) == 2  # both points in the table, the shared one from the --set variant's folder
    code, lines, ran = reproduce("--only", "04", "--sweep", "gamma=0,0.9", "--set", "top_k=3")
    assert code == 0 and ran == []


def test_replicates_of_a_sweep_run_every_point_under_every_seed(loop) -> None:
    reproduce, out = loop
    # w_high, not gamma: gamma is inert at K = 1, and its sweep is refused (r2mad_core.memory.inert)
    code, lines, ran = reproduce("--only", "04", "--sweep", "w_high=0.5,0.55", "--replicates", "2")
    assert code == 0
    assert sorted(json.dumps(o, sort_keys=True) for _, o in ran) == sorted(json.dumps(o, sort_keys=True) for o in [
        {}, {"w_high": 0.5}, {"w_high": 0.5, "seed": 1}, {"seed": 1}])  # the baseline, then 3 points (0.55, seed 0: it)
    summary = pd.read_csv(out / "figures" / "tiny" / "replicates" / "w_high=0.5__seeds=0-1"
                          / "tab_replicates_tab_toy.csv")
    assert list(summary["seed=0"]) == [1.9] and list(summary["seed=1"]) == [2.9]  # the toy: gamma + top_k + seed
    assert (out / "figures" / "tiny" / "replicates" / "seeds=0-1" / "tab_replicates_tab_toy.csv").is_file()


def test_the_dry_run_lists_every_point_and_creates_nothing(loop, tmp_path) -> None:
    reproduce, out = loop
    code, lines, ran = reproduce("--only", "04", "--dry-run", "--sweep", "gamma=0,0.45,0.9", "--sweep", "top_k=1,3",
                                 "--replicates", "2")
    assert code == 0 and ran == [] and not out.exists()  # no run folder, nothing at all
    listed = [line for line in lines if line.startswith("  [")]
    assert len(listed) == 12
    assert listed[3].startswith("  [ 4] gamma=0, top_k=3, seed=1: gamma = 0 (profile tiny: 0.9); seed = 1")
    assert "to run" in listed[0] and "the profile itself has not run 04_toy" in listed[8]
    assert any(line.startswith("reproduce: dry run: 12 points of notebooks 04_toy") for line in lines)
    reproduce("--only", "04", "--set", "top_k=3")  # now the profile and one point are made
    code, lines, ran = reproduce("--only", "04", "--dry-run", "--sweep", "gamma=0,0.45,0.9", "--sweep", "top_k=1,3",
                                 "--replicates", "2")
    assert ran == []
    listed = [line for line in lines if line.startswith("  [")]
    assert "up to date" in listed[10] and "up to date (the profile's own run)" in listed[8]
    assert any("2 of 12 up to date, 10 to run: expected about" in line for line in lines), lines
    code, lines, ran = reproduce("--only", "04", "--show-config", "4", "--sweep", "gamma=0,0.45,0.9", "--sweep",
                                 "top_k=1,3", "--replicates", "2")
    text = "\n".join(lines)
    assert code == 0 and ran == [] and "# point 4 of 12: gamma=0, top_k=3, seed=1" in text
    assert "\ngamma: 0\n" in text and "\ntop_k: 3\n" in text and "\nseed: 1\n" in text and "\nn_agents: 3\n" in text
