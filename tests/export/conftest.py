"""Simulated runs to export (tests/export/): a small profile made from the packaged data, as the sim profile's.

``runs/demo/`` holds an R2-MAD run (with its memory bank, whose train debates are a run too), a MAD and a CoT run on
MATH500, and a replicate of the MAD run under seed 1 (``runs/demo/variants/seed=1/``: a replicate is the variant
``seed=<s>``). The simulated engine answers from the packaged questions in seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from r2mad_lab.cli import main

N = 5


def make_runs(root: Path) -> Path:
    runs = root / "runs" / "demo"
    cache = ["--cache-dir", str(root / "cache")]
    assert main(["build-memory", "--benchmark", "math500", "--engine", "simulated", "--limit", "6",
                 "--out", str(runs / "bank"), *cache]) == 0
    cells = {runs / "simulated" / "math500" / "r2mad": ["--method", "r2mad", "--memory", str(runs / "bank"), "--top-k",
                                                        "3"],
             runs / "simulated" / "math500" / "mad": ["--method", "mad"],
             runs / "simulated" / "math500" / "cot": ["--method", "cot"],
             runs / "variants" / "seed=1" / "simulated" / "math500" / "mad": ["--method", "mad", "--seed", "1"]}
    for out, options in cells.items():
        assert main(["run", "--benchmark", "math500", *options, "--engine", "simulated", "--limit", str(N),
                     "--out", str(out), *cache]) == 0
    return root


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory) -> Path:
    """The folder holding ``runs/demo/`` (module docstring)."""
    return make_runs(tmp_path_factory.mktemp("export"))
