"""A fresh machine (issue 15): the checkout alone, with no ``../shared`` beside it and no
``R2MAD_DATA_DIR``, reproduces the ``tiny`` profile end to end from the benchmark files shipped in
the package. The checkout's files (tracked and new, as ``git ls-files`` lists them) are copied to a
temporary folder; the notebooks' kernels import the copy (PYTHONPATH), never this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _checkout_files() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True, timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh")
    clone = root / "r2mad"
    for name in _checkout_files():
        if name.startswith(("notebooks/executed/", "figures/")):  # outputs: not needed to run
            continue
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    assert not (root / "shared").exists() and not (clone / "data").exists()
    return clone


def _environment(clone: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("R2MAD_")}
    env["PYTHONPATH"] = str(clone)
    return env


def test_the_package_data_is_found_without_shared_or_environment(fresh_clone: Path) -> None:
    code = (
        "import r2mad_core, r2mad_core.data.benchmarks as b;"
        "print(r2mad_core.__file__);"
        "print([len(b.load(n, 'test')) for n in b.BENCHMARKS]);"
        "print(b.describe_data_source())"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=fresh_clone.parent, env=_environment(fresh_clone),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    module, counts, source = result.stdout.strip().splitlines()
    assert Path(module).is_relative_to(fresh_clone)
    assert counts == "[134, 211, 242, 166]"
    assert source.startswith("the files shipped with r2mad")


def test_reproduce_tiny_from_a_fresh_clone(fresh_clone: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "r2mad_lab.reproduce", "--profile", "tiny", "--output-dir", str(output)],
        cwd=fresh_clone, env=_environment(fresh_clone), capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("reproduce: profile tiny: the agents are SIMULATED")
    assert "reproduce: all 10 notebooks ran in" in result.stdout
    figures = output / "figures" / "tiny"
    manifest = {p.name.lower(): p for p in figures.iterdir()}["manifest.json"]
    assert json.loads(manifest.read_text(encoding="utf-8"))  # reproduce exits 1 when a listed artifact is missing
    assert len(list(figures.glob("tab_*"))) >= 10 and len(list(figures.glob("fig_*.png"))) >= 5
    executed = sorted(p.name for p in (output / "notebooks" / "executed" / "tiny").glob("*.ipynb"))
    assert len(executed) == 10
