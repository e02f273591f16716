"""reproduce/ is organised by trade, not as a tower: its import graph read from the code (ast).

Three rules, each computed here from every module of ``r2mad_lab/reproduce/`` (``grid.py``, ``paper/`` and
``compare/`` included; imports inside functions count, a lazy import is still a floor):

- **floors**: the longest chain of imports among reproduce/'s own modules has at most :data:`MAX_FLOORS` modules;
- **no private name crosses a module**: no module imports (or reads as ``module._name``) another's ``_name``;
- **no module imported only for a constant**: every module one of them imports gives it at least one name that is
  not an ALL_CAPS constant (a folder name is the importer's to receive, or the owner's to hand over in a function).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = "r2mad_lab.reproduce"
ROOT = Path(__file__).resolve().parents[2] / "r2mad_lab" / "reproduce"
MAX_FLOORS = 6


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, relative imports resolved against ``importer``."""
    if not node.level:
        return node.module or ""
    is_package = modules()[importer].name == "__init__.py"
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


@lru_cache(maxsize=None)
def constants(module: str) -> frozenset[str]:
    """The module's constants: ALL_CAPS names bound at its top level to a literal value (a folder name, a number, a
    tuple of them; ``VARIANTS_DIR = "variants"``), not to a table of objects (``GPUS = {"H100": GPU(...)}``)."""
    found = set()
    for node in ast.parse(modules()[module].read_text(encoding="utf-8")).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets, value = (node.targets if isinstance(node, ast.Assign) else [node.target]), node.value
        if isinstance(value, (ast.Constant, ast.JoinedStr, ast.Tuple, ast.Name)):
            found.update(t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper())
    return frozenset(found)


@lru_cache(maxsize=1)
def imports() -> dict[tuple[str, str], set[str]]:
    """``(importer, imported module) -> the names the importer takes from it`` (a module bound by name counts the
    attributes read on it), for every pair of reproduce/ modules."""
    known = modules()
    found: dict[tuple[str, str], set[str]] = {}
    for importer, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # local name -> a reproduce module bound to it
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(importer, node)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in known:  # ``from r2mad_lab.reproduce import up_to_date``
                        bound[alias.asname or alias.name] = submodule
                        found.setdefault((importer, submodule), set())
                    elif source in known:
                        found.setdefault((importer, source), set()).add(alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.asname:
                        bound[alias.asname] = alias.name
                        found.setdefault((importer, alias.name), set())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                found[(importer, bound[node.value.id])].add(node.attr)
    return {edge: names for edge, names in found.items() if edge[0] != edge[1]}


def longest_chain() -> list[str]:
    """The longest chain of imports among reproduce/'s modules (a cycle is an error)."""
    edges: dict[str, list[str]] = {}
    for importer, imported in imports():
        edges.setdefault(importer, []).append(imported)
    best: dict[str, list[str]] = {}

    def chain(module: str, seen: tuple[str, ...]) -> list[str]:
        if module in seen:
            raise AssertionError(f"an import cycle in reproduce/: {' -> '.join(seen + (module,))}")
        if module not in best:
            below = [chain(m, seen + (module,)) for m in sorted(edges.get(module, []))]
            best[module] = [module] + max(below, key=len, default=[])
        return best[module]

    return max((chain(m, ()) for m in sorted(modules())), key=len)


def test_reproduce_has_at_most_six_floors() -> None:
    chain = longest_chain()
    shown = " -> ".join(m.removeprefix(PACKAGE + ".") for m in chain)
    assert len(chain) <= MAX_FLOORS, f"{len(chain)} floors (at most {MAX_FLOORS}): {shown}"


def test_no_private_name_crosses_a_module() -> None:
    crossing = sorted(f"{importer} takes {imported}.{name}" for (importer, imported), names in imports().items()
                      for name in names if name.startswith("_") and not name.startswith("__"))
    assert not crossing, "\n".join(crossing)


def test_no_module_is_imported_only_for_a_constant() -> None:
    only = sorted(f"{importer} imports {imported} only for {', '.join(sorted(names))}"
                  for (importer, imported), names in imports().items() if names and names <= constants(imported))
    assert not only, "\n".join(only)


@pytest.mark.parametrize("source, expected", [
    ("from r2mad_lab.reproduce.points import VARIANTS_DIR\n", "only for VARIANTS_DIR"),
    ("from r2mad_lab.reproduce.compare.tables import _hidden\n", "takes r2mad_lab.reproduce.compare.tables._hidden"),
    ("from r2mad_lab.reproduce import points\nx = points._UNSAFE\n", "takes r2mad_lab.reproduce.points._UNSAFE"),
])
def test_the_rules_see_a_constant_floor_and_a_private_crossing(tmp_path, monkeypatch, source, expected) -> None:
    """The three rules read real code: a module written to break one is caught, by name."""
    copy = tmp_path / "r2mad_lab" / "reproduce"
    for path in ROOT.rglob("*.py"):
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (copy / "zz_probe.py").write_text(source, encoding="utf-8")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", copy)
    for cached in (modules, imports, constants):
        cached.cache_clear()
    try:
        with pytest.raises(AssertionError, match=expected.replace(".", r"\.")):
            test_no_private_name_crosses_a_module()
            test_no_module_is_imported_only_for_a_constant()
    finally:
        for cached in (modules, imports, constants):
            cached.cache_clear()


def test_the_chain_counts_lazy_imports_and_relative_ones() -> None:
    edges = imports()
    assert ("r2mad_lab.reproduce.paper.command", "r2mad_lab.reproduce.paper.estimate") in edges  # relative
    assert ("r2mad_lab.reproduce.paper.rehearsal", "r2mad_lab.reproduce.points") in edges  # inside a function
    assert ("r2mad_lab.reproduce.__main__", "r2mad_lab.reproduce.command") in edges
