"""Times are stated once (issue 52): the README's profile table and commands, each run's banner (its profile's
``expected_runtime``, ``expected_runtime_replay`` for a replay) and the Makefile's comments say the figures of
docs/performance.md's "Stated times" table word for word, each for an idle 2-core machine with CPU seconds beside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "r2mad_lab" / "profiles"
HEADING = "## Stated times"
#: Where each step's figure is stated besides the table: (file, what the line must also hold).
WHERE = {
    "sim": [("README.md", "| `sim` (default) |"), ("sim.yaml", "expected_runtime")],
    "sim-again": [("README.md", "| `sim` (default) |")],
    "cpu-fresh": [("README.md", "| `cpu` |"), ("cpu.yaml", "expected_runtime")],
    "cpu-replay": [("README.md", "| `cpu` |"), ("cpu.yaml", "expected_runtime_replay")],
    "tiny": [("README.md", "| `tiny` |"), ("tiny.yaml", "expected_runtime")],
    "test": [("Makefile", "# `make test`")],
}


def stated_times() -> dict[str, dict[str, str]]:
    """The rows of docs/performance.md's "Stated times" table, by step."""
    text = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    assert text.count(HEADING) == 1, f"docs/performance.md: one {HEADING!r} section expected"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    table = {}
    for line in rows[2:]:
        cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=False))
        table[cells["step"].strip("`")] = cells
    return table


def _lines(name: str) -> list[str]:
    path = PROFILES / name if name.endswith(".yaml") else REPO / name
    return path.read_text(encoding="utf-8").splitlines()


def test_the_table_states_every_step_for_an_idle_2_core_machine_with_cpu_seconds() -> None:
    table = stated_times()
    assert set(table) == set(WHERE)
    for step, row in table.items():
        stated = row["stated"]
        assert re.fullmatch(r"[\d,.\- a-z]+ wall, [\d,.]+ CPU s", stated), (step, stated)
        assert re.fullmatch(r"[0-9a-f]{7}", row["commit (CPU)"]) and re.search(r"\d", row["load"]), (step, row)
        assert re.search(r"[\d,.]+", row["CPU seconds"]), (step, row)


@pytest.mark.parametrize("step", sorted(WHERE))
def test_readme_banners_and_makefile_say_the_tables_figure(step: str) -> None:
    stated = stated_times()[step]["stated"]
    for name, anchor in WHERE[step]:
        lines = [line for line in _lines(name) if anchor in line]
        assert lines, f"{name}: no line with {anchor!r}"
        if name.endswith(".yaml"):
            value = yaml.safe_load((PROFILES / name).read_text(encoding="utf-8"))[anchor]
            assert stated in value, f"{name}: {anchor} {value!r} does not say {stated!r} (docs/performance.md)"
            assert "idle 2-core machine" in value, f"{name}: {anchor} {value!r} does not name the machine"
        else:
            assert any(stated in line for line in lines), f"{name}: the {anchor!r} line does not say {stated!r}"
            if name == "Makefile":
                assert any(stated in line and "idle 2-core machine" in line for line in lines), name
    header = next(line for line in _lines("README.md") if line.startswith("| profile |"))
    assert "idle 2-core machine" in header and "CPU" in header


def test_no_other_time_is_stated_beside_them() -> None:
    """The README's profile table holds no figure the table does not state (old ranges, 'under N minutes')."""
    table = stated_times()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    for line in rows:
        rest = line
        for row in table.values():
            rest = rest.replace(row["stated"], "")
        time_cell = rest.rstrip("|").rsplit("|", 1)[-1]
        assert not re.search(r"\d+(\.\d+)? ?(s|min)\b", time_cell), f"README: a time not from the table: {line}"
    for name in ("sim.yaml", "cpu.yaml", "tiny.yaml"):
        value = yaml.safe_load((PROFILES / name).read_text(encoding="utf-8"))["expected_runtime"]
        assert "under" not in value, f"{name}: {value!r}"


def test_the_banner_names_the_replays_figure_when_it_replays() -> None:
    from r2mad_lab.experiments.profiles import load_profile
    from r2mad_lab.reproduce.command import expected_runtime

    cpu = load_profile("cpu")
    table = stated_times()
    assert table["cpu-replay"]["stated"] in expected_runtime(cpu, replaying=True)
    assert table["cpu-fresh"]["stated"] in expected_runtime(cpu, replaying=False)
    assert table["sim"]["stated"] in expected_runtime(load_profile("sim"), replaying=False)


def test_a_part_of_a_profile_states_its_own_expected_time(tmp_path) -> None:
    """Issue 61: a variant of notebook 04 printed the whole sim profile's 142 s. A run of some notebooks states their
    own time from the last recorded run (the committed run's timings.json when this folder has none); all of them,
    the profile's stated time."""
    import json
    from types import SimpleNamespace

    from r2mad_lab.experiments.profiles import load_profile
    from r2mad_lab.reproduce.command import REPOSITORY, default_notebooks_dir, discover_notebooks, expected_runtime
    from r2mad_lab.reproduce.point_cache import expected_time

    def expected_runtime_of(profile, paths, notebooks, every):  # as run_notebooks states it
        return expected_time(expected_runtime(profile), paths.executed_dir,
                             REPOSITORY / "notebooks" / "executed" / profile.folder, notebooks, every)

    sim = load_profile("sim")
    every = discover_notebooks(default_notebooks_dir())
    part = [n for n in every if n.stem == "04_ablations"]
    paths = SimpleNamespace(executed_dir=tmp_path / "variants" / "gamma=0.5")
    committed = json.loads((REPO / "notebooks" / "executed" / "sim" / "timings.json").read_text(encoding="utf-8"))
    said = expected_runtime_of(sim, paths, part, len(every))
    assert stated_times()["sim"]["stated"] not in said and "04_ablations" in said, said
    seconds = committed["04_ablations"]["seconds"]
    assert f"{int(seconds // 60)} min {seconds % 60:02.0f} s" in said or f"{seconds:.0f} s" in said, said
    paths.executed_dir.mkdir(parents=True)
    (paths.executed_dir / "timings.json").write_text(json.dumps({"04_ablations": {"seconds": 7.2}}))
    assert "about 7 s for 04_ablations" in expected_runtime_of(sim, paths, part, len(every))
    assert stated_times()["sim"]["stated"] in expected_runtime_of(sim, paths, every, len(every))
