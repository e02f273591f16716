"""The import graph of the core and the lab: the core never imports the lab, no import circles, every import points
down the layers, and the report layer imports only downwards.

Every ``import`` statement of every module counts, including those inside functions (a function-level
import that closes a circle is still a circle: it only hides it from the interpreter at load time).
Modules are named in full (``r2mad_core.debate.loop``, ``r2mad_lab.report.tables``); a unit is a sub-package or a
top-level module of a package (``r2mad_core.debate``, ``r2mad_core.files``), placed in the layers of
:func:`r2mad_lab.layers` (the core's, then the lab's).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from r2mad_lab import CODE_PACKAGES, layers

ROOT = Path(__file__).resolve().parent.parent
CORE, LAB = CODE_PACKAGES

#: Circles that still exist (strongly connected groups of modules): none. Keep it empty: a new circle fails the test.
KNOWN_CYCLES: list[frozenset[str]] = []

#: The report layer from the bottom up: a module may import only modules listed before it here (or
#: below the layer altogether: the core, experiments, ...), never one after it, nor the entry points above the layer.
REPORT_LAYER = tuple(f"{LAB}.report.{name}" for name in ("tables", "artifacts", "results", "comparison", "findings"))
#: Entry points above everything: the command lines, the notebook runner and the notebooks' setup.
ENTRY_POINTS = tuple(f"{LAB}.{name}" for name in (
    "reproduce", "reproduce.command", "reproduce.notebook_setup", "reproduce.grid", "cli", "cli.commands", "cli.common",
    "cli.memory", "__main__"))
#: What the report layer reads of the transcripts, from below it: the vote, a run's metrics, their statistics.
READ_BY_THE_REPORT = (f"{CORE}.debate.vote", f"{LAB}.experiments.metrics", f"{LAB}.experiments.statistics")
#: Upward imports from the report layer that remain (none: keep it so).
KNOWN_UPWARD: set[tuple[str, str]] = set()

#: A lazy reference to a module's attribute by string (an engine registered as "module:Name").
LAZY_REFERENCE = re.compile(rf"(?:{CORE}|{LAB})(\.[A-Za-z_][A-Za-z0-9_]*)+:[A-Za-z_][A-Za-z0-9_]*")
#: String references that point up the layers, with the reason they stay: none since the engine registry moved to
#: the lab, above the theory's simulated agents it names.
KNOWN_UPWARD_BY_STRING: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    """``r2mad_core/debate/loop.py`` -> ``r2mad_core.debate.loop``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(path: Path, modules: set[str], source: str | None = None) -> set[str]:
    """The modules of the code packages ``path`` (or ``source`` read as that file) imports anywhere in its body."""
    here = module_name(path)
    package_parts = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    found: set[str] = set()

    def add(dotted: str) -> None:
        # the longest prefix that is a module (``r2mad_lab.engines.make_engine`` -> ``r2mad_lab.engines``)
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                found.add(candidate)
                return

    def ours(name: str | None) -> bool:
        return bool(name) and name.split(".")[0] in CODE_PACKAGES

    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        # a registration by string ("r2mad_lab.engines.local:LocalEngine", resolved by importlib when first used) is
        # an import too: it counts like one
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_REFERENCE.fullmatch(node.value):
            add(node.value.split(":", 1)[0])
        if isinstance(node, ast.Import):
            for alias in node.names:
                if ours(alias.name):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            elif ours(node.module):
                prefix = node.module
            else:
                continue
            for alias in node.names:  # ``from r2mad_lab import report`` names a module
                add(f"{prefix}.{alias.name}")
    found.discard(here)
    return found


def _code_files() -> list[Path]:
    return sorted(p for package in CODE_PACKAGES for p in (ROOT / package).rglob("*.py")
                  if "__pycache__" not in p.parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the code packages it imports: a copy of the graph read once per test session."""
    return {module: set(targets) for module, targets in _read_import_graph().items()}


@functools.lru_cache(maxsize=1)
def _read_import_graph() -> dict[str, frozenset[str]]:
    paths = _code_files()
    modules = {module_name(p) for p in paths}
    return {module_name(p): frozenset(imported_modules(p, modules)) for p in paths}


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm: the groups of modules that import each other (size > 1 = a circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            groups.append(frozenset(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [g for g in groups if len(g) > 1]


def test_the_walker_sees_function_level_and_relative_imports() -> None:
    source = (
        "from __future__ import annotations\n"
        "import r2mad_lab.report.tables\n"
        "def f():\n"
        "    from r2mad_lab.reproduce.grid import ExperimentGrid\n"
        "    from r2mad_lab.report import comparison\n"
        "    from ..engines import make_engine\n"
        "    import numpy\n"
    )
    modules = {"r2mad_lab.report", "r2mad_lab.report.tables", "r2mad_lab.reproduce.grid", "r2mad_lab.report.comparison",
               "r2mad_lab.engines", "r2mad_lab.experiments.cell"}
    assert imported_modules(ROOT / LAB / "experiments" / "cell.py", modules, source) == {
        "r2mad_lab.report.tables", "r2mad_lab.reproduce.grid", "r2mad_lab.report.comparison", "r2mad_lab.engines"}
    assert imported_modules(ROOT / LAB / "engines" / "local.py", {"r2mad_lab.engines", "r2mad_lab.engines.cache"},
                            "from .cache import X\nfrom . import cache\n") == {"r2mad_lab.engines.cache"}
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]


def test_the_core_never_imports_the_lab() -> None:
    """The method reads without the machinery: no module of r2mad_core imports r2mad_lab, at any level, by any
    means the walker sees (function-level imports and "module:Name" strings included)."""
    graph = import_graph()
    assert {"r2mad_core.debate.loop", "r2mad_core.memory.retrieval", "r2mad_core.methods"} <= set(graph)
    crossing = sorted((a, b) for a, targets in graph.items() if a.startswith(f"{CORE}.") or a == CORE
                      for b in targets if b.split(".")[0] == LAB)
    assert crossing == [], f"the core imports the lab (importer, imported): {crossing}"
    planted = imported_modules(ROOT / CORE / "memory" / "x.py", {"r2mad_lab.report.tables"},
                               "def f():\n    from r2mad_lab.report import tables\n")
    assert planted == {"r2mad_lab.report.tables"}  # the walker would see such an import


def test_the_core_imports_without_the_lab_in_a_fresh_interpreter() -> None:
    """Importing the core's face and running its modules' imports loads no module of the lab."""
    import subprocess
    import sys

    code = ("import sys, r2mad_core\n"
            "from r2mad_core import run_debate, retrieve, peer_confidence, get_method, Request, load_benchmark\n"
            "import r2mad_core.theory.checks, r2mad_core.memory.hook\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'r2mad_lab'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_an_old_import_of_a_moved_unit_names_its_new_home() -> None:
    import importlib

    with pytest.raises(ModuleNotFoundError, match=r"r2mad_core\.reproduce moved: import r2mad_lab\.reproduce "):
        importlib.import_module("r2mad_core.reproduce.grid")
    with pytest.raises(ModuleNotFoundError,
                       match=r"r2mad_core\.experiments moved: .*experiments\.methods: r2mad_core\.methods"):
        importlib.import_module("r2mad_core.experiments.methods")


def test_no_import_circles_beyond_the_known_ones() -> None:
    cycles = strongly_connected(import_graph())
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"import circles among the code's modules (function-level imports count): {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"known circles that no longer exist (remove them from KNOWN_CYCLES): {gone}"


def test_the_report_layer_is_in_no_circle() -> None:
    cycles = strongly_connected(import_graph())
    touching = [sorted(c) for c in cycles if c & (set(REPORT_LAYER) | set(READ_BY_THE_REPORT))]
    assert not touching, f"the report layer is in an import circle: {touching}"


def test_the_report_layer_imports_only_downwards() -> None:
    graph = import_graph()
    upward = []
    for position, module in enumerate(REPORT_LAYER):
        if module not in graph:
            continue
        above = set(REPORT_LAYER[position + 1:]) | set(ENTRY_POINTS)
        upward += [(module, target) for target in sorted(graph[module] & above) if (module, target) not in KNOWN_UPWARD]
    # the vote, a run's metrics and their statistics sit below the whole layer: they read transcripts, never tables,
    # grids or reports
    upward += [(low, t) for low in READ_BY_THE_REPORT
               for t in sorted(graph.get(low, set()) & (set(REPORT_LAYER) | set(ENTRY_POINTS)))]
    assert not upward, f"imports that run back up the report layer (module -> imported): {upward}"


#: A hard cap on a module's length, far above any module's size: a module is split along its concepts (its docstring's
#: first line names the one it holds, :func:`test_every_module_names_its_one_concept_in_its_first_docstring_line`),
#: never squeezed under a count; none may come within :data:`CAP_MARGIN` lines of it.
MODULE_LINE_CAP = 1000
CAP_MARGIN = 20


def _all_modules() -> list[Path]:
    return _code_files()


def test_no_module_comes_near_the_hard_cap() -> None:
    sizes = {module_name(p) or p.stem: len(p.read_text(encoding="utf-8").splitlines()) for p in _all_modules()}
    near = {name: n for name, n in sizes.items() if n > MODULE_LINE_CAP - CAP_MARGIN}
    assert not near, (f"modules within {CAP_MARGIN} lines of the {MODULE_LINE_CAP}-line cap "
                      f"(split each along its concepts): {near}")


def first_docstring_line(path: Path) -> str | None:
    """The first line of a module's docstring when it is a summary of its own (the docstring's first paragraph is
    that one line); None when the module has no docstring or its first sentence wraps onto a second line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)), clean=True)
    if not doc or not doc.strip():
        return None
    lines = doc.splitlines()
    if not lines[0].strip() or (len(lines) > 1 and lines[1].strip()):
        return None
    return lines[0].strip()


def test_first_docstring_line_reads_one_summary_line(tmp_path: Path) -> None:
    def first(text: str) -> str | None:
        path = tmp_path / "probe.py"
        path.write_text(text, encoding="utf-8")
        return first_docstring_line(path)

    assert first('"""The vote of Appendix A.\n\nMore text.\n"""\n') == "The vote of Appendix A."
    assert first('"""The vote of Appendix A."""\n') == "The vote of Appendix A."
    assert first('"""The vote of Appendix A, wrapped\nonto a second line."""\n') is None
    assert first('"""   """\n') is None
    assert first("X = 1\n") is None


def test_every_module_names_its_one_concept_in_its_first_docstring_line() -> None:
    """Each module of the code (packages' ``__init__`` included) holds one concept, named by its docstring's first
    line: present, one line of its own (the first paragraph), not empty, and no other module's."""
    firsts = {str(p.relative_to(ROOT)): first_docstring_line(p) for p in _all_modules()}
    missing = sorted(name for name, line in firsts.items() if line is None)
    assert not missing, f"modules whose docstring does not open with one summary line naming their concept: {missing}"
    seen: dict[str, list[str]] = {}
    for name, line in firsts.items():
        seen.setdefault(line.rstrip(".").lower(), []).append(name)
    shared = {line: names for line, names in seen.items() if len(names) > 1}
    assert not shared, f"modules that name the same concept in their first docstring line: {shared}"


def _owner(module: str) -> str:
    """The unit a module belongs to in :func:`r2mad_lab.layers`: its package and sub-package, or top-level module."""
    return ".".join(module.split(".")[:2])


def _units_present() -> set[str]:
    present = {_owner(m) for m in import_graph() if "." in m}
    return present | {f"{package}.{p.name}" for package in CODE_PACKAGES for p in (ROOT / package).iterdir()
                      if (p / "__init__.py").exists()}


def test_the_architecture_names_every_package_and_top_level_module_once() -> None:
    units = [unit for layer in layers() for unit in layer]
    assert len(units) == len(set(
        units)), f"named twice in the ARCHITECTUREs: {sorted(u for u in units if units.count(u) > 1)}"
    present = _units_present()
    assert set(units) == present, (f"the ARCHITECTUREs (r2mad_core/__init__.py, r2mad_lab/__init__.py) and the tree "
                                   f"differ: not in the tree {sorted(set(units) - present)}, not placed "
                                   f"{sorted(present - set(units))}")


def test_every_import_between_units_points_down_the_layers() -> None:
    """A module imports only from its own unit (no circles: tested above) or from a lower layer; a package's
    ``__init__`` (the face) may name its own units."""
    layer_of = {unit: index for index, layer in enumerate(layers()) for unit in layer}
    upward = sorted(
        (a, b) for a, targets in import_graph().items() if a not in CODE_PACKAGES for b in targets
        if b not in CODE_PACKAGES and _owner(a) != _owner(b) and layer_of[_owner(b)] >= layer_of[_owner(a)]
        and (a, b) not in KNOWN_UPWARD_BY_STRING
    )
    assert not upward, f"imports that do not point down the layers (importer, imported): {upward}"


@pytest.mark.parametrize("package", CODE_PACKAGES)
def test_each_package_has_at_most_a_dozen_top_level_modules(package: str) -> None:
    top = sorted(p.stem for p in (ROOT / package).glob("*.py"))
    assert len(
        top) <= 12, f"{package}/ holds {len(top)} top-level modules (at most 12; the rest in sub-packages): {top}"


def test_every_sub_package_says_what_it_is() -> None:
    """Each package's __init__ docstring names its concept and every module in it."""
    import importlib

    for package in CODE_PACKAGES:
        for init in sorted((ROOT / package).glob("*/__init__.py")):
            module = importlib.import_module(f"{package}.{init.parent.name}")
            doc = module.__doc__ or ""
            assert len(doc.strip()) > 40, f"{init}: the docstring should name the package's concept"
            missing = [p.stem for p in init.parent.glob("*.py") if p.stem != "__init__" and p.stem not in doc]
            assert not missing, f"{init}: the docstring does not name the modules {missing}"


def test_the_core_and_the_lab_show_few_units() -> None:
    """The core is the method in at most 9 units; the lab, ``__main__`` (``python -m r2mad_lab``, the package's
    script, not a unit of code) aside, at most 6; everything that runs a reproduction is one of them."""
    from r2mad_core import ARCHITECTURE as CORE_UNITS
    from r2mad_lab import ARCHITECTURE as LAB_UNITS

    core = [unit for layer in CORE_UNITS for unit in layer]
    lab = [unit for layer in LAB_UNITS for unit in layer if unit != "__main__"]
    assert len(core) <= 9 and len(lab) <= 6, (core, lab)
    assert "reproduce" in lab and not {"notebook_runner", "notebook_setup"} & set(lab)


def test_an_engine_registered_by_module_and_name_is_an_import_the_layers_see() -> None:
    """``EngineSpec("local", "r2mad_lab.engines.local:LocalEngine")`` counts as an import of that module."""
    graph = import_graph()
    assert {"r2mad_lab.engines.local", "r2mad_lab.engines.openai_compat", "r2mad_lab.engines.vllm_backend",
            "r2mad_core.theory.agents"} <= graph["r2mad_lab.engines"]
    assert imported_modules(ROOT / CORE / "data" / "x.py", {"r2mad_core.memory.hook"},
                            'X = "r2mad_core.memory.hook:R2MadHook"\n') == {"r2mad_core.memory.hook"}


def test_the_core_face_hands_out_each_name_from_its_owning_module() -> None:
    """``r2mad_core.__all__``: every name resolves, to the very object its owning module defines (no copy), and the
    docs' extension walkthroughs (docs/extending.md) import what they need of the method from it."""
    import importlib

    import r2mad_core

    assert 30 <= len(r2mad_core.__all__) <= 40 and len(set(r2mad_core.__all__)) == len(r2mad_core.__all__)
    for name in r2mad_core.__all__:
        if name in ("ARCHITECTURE", "__version__"):
            continue
        where = r2mad_core._FACE[name]
        module, attribute = (where, name) if isinstance(where, str) else where
        assert getattr(r2mad_core, name) is getattr(importlib.import_module(module), attribute), name
    names = set(dir(r2mad_core))
    assert {"run_debate", "retrieve", "mmr_tradeoff", "peer_confidence", "get_method", "Request"} <= names
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        r2mad_core.no_such_name  # noqa: B018
    page = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    assert "from r2mad_core import BenchmarkSpec, Sample, format_question, register_benchmark" in page
    assert "from r2mad_core import PolicySpec, register_policy" in page
