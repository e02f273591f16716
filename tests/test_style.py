"""Style kept by tools: ruff over the packages, tests, benchmarks and notebooks (pyproject.toml's ``[tool.ruff]``,
``make lint``); here, what its configuration leaves to a test.

The notebooks' F821 (undefined name) is ignored in pyproject.toml because a notebook's setup cell puts the profile's
parameters into the notebook's namespace (``setup(globals(), NOTEBOOK)``): this test holds every name ruff finds
undefined in a notebook to those parameters, so a misspelt or stale name still fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.reproduce.notebook_setup import PATH_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (the dev extra installs it)")
    return found


def _undefined_in_notebooks(paths: list[str]) -> dict[str, set[str]]:
    out = subprocess.run([_ruff(), "check", "--isolated", "--select", "F821", "--output-format", "json", "--no-cache",
                          *paths],
                         capture_output=True, text=True, cwd=ROOT, check=False).stdout
    names: dict[str, set[str]] = {}
    for finding in json.loads(out or "[]"):
        name = finding["message"].split("`")[1]
        names.setdefault(Path(finding["filename"]).name, set()).add(name)
    return names


def test_a_notebooks_undefined_names_are_the_profiles_parameters() -> None:
    parameters = set(load_profile("tiny").parameters(dict.fromkeys(PATH_DEFAULTS)))
    undefined = _undefined_in_notebooks(["notebooks"])
    assert undefined, "ruff finds the parameters the setup cell defines (the check would pass vacuously)"
    strays = {notebook: sorted(names - parameters) for notebook, names in undefined.items() if names - parameters}
    assert strays == {}, f"names used in a notebook that neither it nor its profile defines: {strays}"


def test_the_check_catches_a_name_no_profile_defines(tmp_path: Path) -> None:
    notebook = json.loads((ROOT / "notebooks" / "03_main_results.ipynb").read_text(encoding="utf-8"))
    notebook["cells"].append({"cell_type": "code", "execution_count": None, "id": "probe", "metadata": {},
                              "outputs": [], "source": ["print(benchmarks, no_such_parameter)\n"]})
    probe = tmp_path / "probe.ipynb"
    probe.write_text(json.dumps(notebook), encoding="utf-8")
    parameters = set(load_profile("tiny").parameters(dict.fromkeys(PATH_DEFAULTS)))
    names = _undefined_in_notebooks([str(probe)])["probe.ipynb"]
    assert "no_such_parameter" in names and "no_such_parameter" not in parameters and "benchmarks" in parameters
