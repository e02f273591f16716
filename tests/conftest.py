"""The ``slow`` marker, applied here (issues 24, 35): ``make test`` runs ``-m "not slow"`` on both cores (under 50 s of
test time on a quiet 2-core machine), ``make test-slow`` runs the rest, and CI (``.ci/run``) runs both, so no test is
dropped.

A test is slow for a good reason when it runs every notebook through papermill, clones the repository, drives a
browser, starts the local llama.cpp model or runs a profile end to end through the budget gateway (measured
2026-11-24 on the shared 2-core machine: the plugin through every notebook 199 s, the fresh clone 100 s, the budget
end to end 65 s, the book in Chromium 38 s, of a 572 s suite), and any test that starts a Jupyter kernel (papermill or
jupyter_client), however small its notebook: a kernel's start costs seconds of CPU and its time swings with the
machine's load (issue 35: tests/reproduce/test_reproduce.py's six, 24 s of a 134 s fast suite). Some files mark
their own tests (``@pytest.mark.slow``); the others are listed here, by module, by test function (every
parametrisation) or by fixture (every test using it), so that no test file needs editing to move a test. A listed name
that no longer exists is an error at collection time, not a silently fast suite. Modules are named by their path under
tests/ (a test file lives in the folder of the r2mad_core unit it tests, or in tests/ itself when it crosses units).
"""

from __future__ import annotations

import atexit
import os
import re
import sys
from pathlib import Path

import pytest

from r2mad_lab.reproduce import gc_settings

# One OpenBLAS thread, as make reproduce's kernels get (r2mad_lab/reproduce.py, BLAS_THREAD_VARIABLES): the tests'
# small products are slower threaded on a shared 2-core machine, and give the same bytes. Set before numpy loads;
# the notebook kernels the tests start inherit it. A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# As r2mad_lab/reproduce/__init__.py: nbformat's jsonschema would compile rfc3987_syntax's 38 grammars (3.2 s) in each
# test process; no notebook schema uses the formats they check.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

HERE = Path(__file__).resolve().parent

# The garbage collector as the notebooks' kernels have it (r2mad_lab/reproduce/gc_settings.py), from before the test
# modules are imported; frozen once they are (pytest_collection_finish). Measured with `make test` on 2 cores: the
# collector took 3.3-4.6 s of each worker's CPU with CPython's defaults, 0.6-0.9 s with these (docs/performance.md).
gc_settings.tune()


def _end_worker_now() -> None:
    """Leave at once: flush what is buffered, skip the teardown of the interpreter."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


# A pytest-xdist worker (`make test` runs two) ends without Python's teardown of the interpreter, which frees the
# session's objects one by one while pytest waits for the worker: 1-2 s of `make test`'s time (issue 35). It runs at
# exit after every atexit handler registered after this one (all but logging's, called here, and execnet's, which
# has nothing to stop in a worker), so only the freeing is skipped. Without workers (`make test-slow`,
# TEST_WORKERS=0) pytest ends as usual.
if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_end_worker_now)

#: Whole modules: every test in them is slow.
SLOW_MODULES = {
    "test_fresh_clone.py": "clones the repository and runs the tiny profile in the clone",
    "test_reader_browser.py": "drives headless Chromium over the viewer and the book",
    "test_book_browser.py": "builds the book and opens every page of it in headless Chromium",
}

#: Test functions (every parametrisation), by module.
SLOW_TESTS = {
    "test_plugins.py": {
        "test_a_toy_benchmark_method_policy_and_engine_run_through_every_notebook_of_the_tiny_profile":
            "a plugin through every notebook of the tiny profile",
    },
    "reproduce/test_reproduce.py": {
        name: "starts a Jupyter kernel" for name in (
            "test_runner_passes_the_profile_its_overrides_and_paths_and_stops_at_the_first_failure",
            "test_notebooks_run_two_at_a_time_each_after_the_notebooks_it_names",
            "test_after_a_failure_nothing_new_starts_and_the_failure_is_returned_last",
            "test_a_worker_reuses_its_kernel_cleared_and_shuts_it_down_at_the_end",
            "test_the_kernel_says_nothing_of_its_own",
            "test_executed_notebooks_inside_the_repository_hold_no_machine_paths",
        )
    },
    "experiments/test_budget.py": {
        "test_api_profile_estimates_then_stops_at_the_cap_and_resumes":
            "the api profile's notebooks three times through the estimating and forwarding gateways",
    },
}

#: Fixtures that run notebooks: every test using one is slow.
SLOW_FIXTURES = {
    "tiny_run": "tests/test_notebooks.py: every notebook of the tiny profile through papermill",
    "tiny_variant": "tests/test_notebooks.py: the notebooks of a variant of the tiny profile",
}


def _check_names() -> None:
    """Every listed module, function and fixture exists (a renamed test must not leave the list stale)."""
    problems = []
    for module in [*SLOW_MODULES, *SLOW_TESTS]:
        if not (HERE / module).is_file():
            problems.append(f"module {module} (no such file)")
    for module, tests in SLOW_TESTS.items():
        path = HERE / module
        source = path.read_text(encoding="utf-8") if path.is_file() else ""
        problems += [f"{module}::{name}" for name in tests if not re.search(rf"^(async )?def {name}\(", source, re.M)]
    sources = "\n".join(p.read_text(encoding="utf-8") for p in HERE.rglob("test_*.py"))
    problems += [f"fixture {name}" for name in SLOW_FIXTURES if not re.search(rf"^def {name}\(", sources, re.M)]
    if problems:
        raise pytest.UsageError("tests/conftest.py lists slow tests that do not exist: " + ", ".join(problems))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_names()
    for item in items:
        path = item.path.resolve()  # HERE is resolved too
        module = path.relative_to(HERE).as_posix() if path.is_relative_to(HERE) else path.name
        name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
        if (module in SLOW_MODULES or name in SLOW_TESTS.get(module, {})
                or any(f in SLOW_FIXTURES for f in getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The tests collected (every module imported), what is alive leaves the garbage collector's walks
    (r2mad_lab/reproduce/gc_settings.py; the thresholds were set when this file was imported)."""
    gc_settings.freeze()


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium, for the reader's-eye tests (tests/test_reader_browser.py, tests/test_book_browser.py)."""
    import shutil

    from test_reader_browser import need

    path = shutil.which("chromium") or shutil.which("chromium-browser")
    need(path is not None, "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)")
    return path
