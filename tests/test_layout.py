"""The tests' layout: tests/ mirrors the units of the core and the lab, and every test path a file names exists.

A test file lives in the folder of the unit whose behaviour it tests: ``tests/<package>/`` for a sub-package of
:data:`r2mad_core.ARCHITECTURE` or :data:`r2mad_lab.ARCHITECTURE` (``tests/memory/``, ``tests/reproduce/``; a
sub-package's own sub-package below it: ``tests/reproduce/paper/``), ``tests/test_<module>.py`` for a unit that is one
top-level module (``files``, ``records``, ``plugins``, ``engine``, ``methods``). No unit name is used by both packages.
Tests that cross units (the notebooks, the fresh clone, the documents' checks, the browser, ...) and the shared helpers
(``debate_fakes``, ``fake_openai_server``, ``conftest``, ``data/``'s files) stay in tests/ itself; every folder imports
the helpers by name (pyproject.toml's ``pythonpath = ["tests"]``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from r2mad_lab import CODE_PACKAGES, layers

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: Where a path under tests/ may be named: the documents, the build and CI files, the package (docstrings,
#: comments, profiles), the tests, the benchmarks, the engine tests and the notebooks. Generated outputs (figures/,
#: published/, notebooks/executed/, the built book) are not read: they are rebuilt from these.
NAMING_FILES = ("README.md", "Makefile", "pyproject.toml", ".ci/run")
NAMING_FOLDERS = ("docs", "deploy", *CODE_PACKAGES, "tests", "benchmarks", "engine_tests", "notebooks")
NAMING_SUFFIXES = {".md", ".py", ".ipynb", ".yaml", ".yml", ".toml", ".js", ".css", ".tex", ".slurm", ""}
#: A path under tests/ as text names it: ``tests/`` not inside another word or path (``engine_tests/``), then
#: folders and a file with its suffix.
TEST_PATH = re.compile(r"(?<![\w./-])tests/(?:[\w-]+/)*[\w-]+\.(?:py|jsonl|tex|json)\b")


def _units() -> dict[str, Path]:
    """Each unit's name (unique across the packages) and its path without suffix (``r2mad_core/memory``)."""
    qualified = [unit for layer in layers() for unit in layer if not unit.endswith(".__main__")]
    return {unit.split(".")[1]: ROOT.joinpath(*unit.split(".")) for unit in qualified}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def _package_dirs() -> dict[str, Path]:
    """Every sub-package of the code packages, in an ARCHITECTURE or not yet, by its name."""
    found = [init.parent for package in CODE_PACKAGES for init in (ROOT / package).glob("*/__init__.py")]
    names = [path.name for path in found]
    assert len(names) == len(set(names)), f"a sub-package name used by both packages: {sorted(names)}"
    return {path.name: path for path in found}


def test_every_unit_has_its_tests_folder_or_file() -> None:
    """A new sub-package without ``tests/<package>/`` (holding a test file) fails here."""
    packages = _package_dirs()
    modules = [unit for unit in _units() if unit not in packages]
    assert ({"memory", "reproduce", "report", "cli"} <= set(packages)
            and {"records", "methods", "engine"} <= set(modules))
    missing = [f"tests/{unit}/" for unit in sorted(packages) if not any((TESTS / unit).glob("test_*.py"))]
    missing += [f"tests/test_{unit}.py" for unit in modules if not (TESTS / f"test_{unit}.py").is_file()]
    assert missing == [], f"units of the ARCHITECTUREs without their tests: {missing}"


def test_every_folder_of_tests_is_a_package_of_the_code() -> None:
    """tests/<a>/<b>/test_x.py tests <package>/<a>/<b>/: a folder of tests names a package that exists."""
    folders = {p.parent.relative_to(TESTS) for p in _test_files()} - {Path(".")}
    assert Path("memory") in folders and Path("reproduce/paper") in folders
    packages = _package_dirs()
    strays = sorted(str(f) for f in folders
                    if f.parts[0] not in packages or not (packages[f.parts[0]].joinpath(*f.parts[1:])
                                                          / "__init__.py").is_file())
    assert strays == [], f"folders of tests/ that are no package of r2mad_core or r2mad_lab: {strays}"


def test_no_two_test_files_share_a_name() -> None:
    """The test files are imported by their file name (no __init__.py: pytest's default import mode), so two of one
    name in two folders would be one module: every name is used once."""
    names = Counter(p.name for p in _test_files())
    assert len(names) > 60 and [name for name, count in names.items() if count > 1] == []


def _naming_files() -> list[Path]:
    files = [ROOT / name for name in NAMING_FILES]
    for folder in NAMING_FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in NAMING_SUFFIXES and not {"__pycache__", "executed"} & set(p.parts)]
    return sorted(p for p in files if p.is_file())


def test_every_test_path_a_file_names_exists() -> None:
    """A document, docstring, comment, Makefile or CI line that names ``tests/...py`` names a file that exists (a moved
    test leaves no stale path behind)."""
    named: dict[str, list[str]] = {}
    for path in _naming_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for found in TEST_PATH.findall(text):
            named.setdefault(found, []).append(str(path.relative_to(ROOT)))
    assert "tests/conftest.py" in named and "tests/test_notebooks.py" in named  # the pattern finds the paths
    missing = {test_path: sorted(set(where)) for test_path, where in named.items() if not (ROOT / test_path).is_file()}
    assert missing == {}, f"paths under tests/ named but absent (path: files naming it): {missing}"


def test_the_path_pattern_skips_other_folders_ending_in_tests() -> None:
    text = ("engine_tests/test_1_offline_vllm.py, `tests/memory/test_memory.py::test_x`, "
            "(tests/data/paper_prompt_boxes.tex)")
    assert TEST_PATH.findall(text) == ["tests/memory/test_memory.py", "tests/data/paper_prompt_boxes.tex"]
