"""The import graph of r2mad_core: no import circles, and the report layer imports only downwards.

Every ``import`` statement of every module counts, including those inside functions (a function-level
import that closes a circle is still a circle: it only hides it from the interpreter at load time).
Circles that remain outside the report layer are listed in :data:`KNOWN_CYCLES`; that list only
shrinks (issue 13: zero circles).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = "r2mad_core"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE

#: Circles that still exist (strongly connected groups of modules): none since cli_common and
#: memory_construction (issue 13). Keep it empty: a new circle fails the test.
KNOWN_CYCLES: list[frozenset[str]] = []

#: The report layer from the bottom up: a module may import only modules listed before it here (or
#: below the layer altogether: the vote, the run metrics and their statistics, methods, ...), never one after it, nor the
#: entry points above the layer.
REPORT_LAYER = ("report.tables", "report.artifacts", "report.results", "report.comparison", "report.findings")
#: Entry points above everything: the command lines, the notebook runner and the notebooks' setup.
ENTRY_POINTS = ("reproduce", "reproduce.command", "reproduce.notebook_setup", "reproduce.grid", "cli", "cli.commands",
                "cli.common", "cli.memory", "__main__")
#: What the report layer reads of the transcripts, from below it: the vote, a run's metrics, their statistics.
READ_BY_THE_REPORT = ("debate.vote", "experiments.metrics", "experiments.statistics")
#: Upward imports from the report layer that remain (none: keep it so).
KNOWN_UPWARD: set[tuple[str, str]] = set()


#: A lazy reference to a module's attribute by string (an engine registered as "module:Name").
LAZY_REFERENCE = re.compile(rf"{PACKAGE}(\.[A-Za-z_][A-Za-z0-9_]*)+:[A-Za-z_][A-Za-z0-9_]*")
#: String references that point up the layers, with the reason they stay: the engine registry (engines, layer 3)
#: names the simulated agents of the theory (layer 6) so that ``make_engine("simulated")`` works without importing
#: the theory first; the string is resolved only when a simulated engine is made.
KNOWN_UPWARD_BY_STRING = {("engines", "theory.agents")}


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE_DIR).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts else ""


def imported_modules(path: Path, modules: set[str], source: str | None = None) -> set[str]:
    """The r2mad_core modules ``path`` (or ``source`` read as that file) imports anywhere in its body."""
    here = module_name(path)
    package_parts = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    found: set[str] = set()

    def add(dotted: str) -> None:
        # the longest prefix that is a module (``engines.make_engine`` -> ``engines``)
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                found.add(candidate)
                return

    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        # a registration by string ("r2mad_core.engines.local:LocalEngine", resolved by importlib when first used) is
        # an import too: it counts like one
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_REFERENCE.fullmatch(node.value):
            add(node.value.split(":", 1)[0][len(PACKAGE) + 1:])
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name[len(PACKAGE) + 1:])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                prefix = node.module[len(PACKAGE) + 1:]
            else:
                continue
            for alias in node.names:  # ``from r2mad_core import report`` names a module
                add(f"{prefix}.{alias.name}" if prefix else alias.name)
    found.discard(here)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the r2mad_core modules it imports: a copy of the graph read once per test session (every module
    parsed: a second each time)."""
    return {module: set(targets) for module, targets in _read_import_graph().items()}


@functools.lru_cache(maxsize=1)
def _read_import_graph() -> dict[str, frozenset[str]]:
    paths = [p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts]
    modules = {module_name(p) for p in paths} - {""}
    return {module_name(p): frozenset(imported_modules(p, modules)) for p in paths if module_name(p)}


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
        "import r2mad_core.report.tables\n"
        "def f():\n"
        "    from r2mad_core.reproduce.grid import ExperimentGrid\n"
        "    from r2mad_core.report import comparison\n"
        "    from ..engines import make_engine\n"
        "    import numpy\n"
    )
    modules = {"report", "report.tables", "reproduce.grid", "report.comparison", "engines", "debate.vote"}
    assert imported_modules(PACKAGE_DIR / "debate" / "vote.py", modules, source) == {
        "report.tables", "reproduce.grid", "report.comparison", "engines"}
    assert imported_modules(PACKAGE_DIR / "engines" / "base.py", {"engines", "engines.cache"},
                            "from .cache import X\nfrom . import cache\n") == {"engines.cache"}
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]


def test_no_import_circles_beyond_the_known_ones() -> None:
    cycles = strongly_connected(import_graph())
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"import circles among r2mad_core modules (function-level imports count): {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"known circles that no longer exist (remove them from KNOWN_CYCLES): {gone}"


def test_the_report_layer_is_in_no_circle() -> None:
    cycles = strongly_connected(import_graph())
    layer = set(REPORT_LAYER) | set(READ_BY_THE_REPORT)
    touching = [sorted(c) for c in cycles if c & layer]
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
#: never squeezed under a count.
MODULE_LINE_CAP = 1000


def _all_modules() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE_DIR).with_suffix("").parts)


def test_no_module_reaches_the_hard_cap() -> None:
    sizes = {_dotted(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _all_modules()}
    over = {name: n for name, n in sizes.items() if n > MODULE_LINE_CAP}
    assert not over, f"modules over {MODULE_LINE_CAP} lines (split each along its concepts): {over}"


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
    """Each module of the package (packages' ``__init__`` included) holds one concept, named by its docstring's first
    line: present, one line of its own (the first paragraph), not empty, and no other module's."""
    firsts = {_dotted(p): first_docstring_line(p) for p in _all_modules()}
    missing = sorted(name for name, line in firsts.items() if line is None)
    assert not missing, f"modules whose docstring does not open with one summary line naming their concept: {missing}"
    seen: dict[str, list[str]] = {}
    for name, line in firsts.items():
        seen.setdefault(line.rstrip(".").lower(), []).append(name)
    shared = {line: names for line, names in seen.items() if len(names) > 1}
    assert not shared, f"modules that name the same concept in their first docstring line: {shared}"


def _owner(module: str) -> str:
    """The unit a module belongs to in :data:`r2mad_core.ARCHITECTURE`: its sub-package, or itself at the top."""
    return module.split(".")[0]


def test_the_architecture_names_every_package_and_top_level_module_once() -> None:
    from r2mad_core import ARCHITECTURE

    units = [unit for layer in ARCHITECTURE for unit in layer]
    assert len(units) == len(set(units)), f"named twice in ARCHITECTURE: {sorted(u for u in units if units.count(u) > 1)}"
    present = {_owner(m) for m in import_graph()} | {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").exists()}
    assert set(units) == present, (f"ARCHITECTURE (r2mad_core/__init__.py) and the tree differ: "
                                   f"not in the tree {sorted(set(units) - present)}, not placed {sorted(present - set(units))}")


def test_every_import_between_packages_points_down_the_layers() -> None:
    """A module imports only from its own package (no circles: tested above) or from a lower layer."""
    from r2mad_core import ARCHITECTURE

    layer_of = {unit: index for index, layer in enumerate(ARCHITECTURE) for unit in layer}
    upward = sorted(
        (a, b) for a, targets in import_graph().items() for b in targets
        if _owner(a) != _owner(b) and layer_of[_owner(b)] >= layer_of[_owner(a)] and (a, b) not in KNOWN_UPWARD_BY_STRING
    )
    assert not upward, f"imports that do not point down the layers of r2mad_core.ARCHITECTURE (importer, imported): {upward}"


def test_r2mad_core_has_at_most_a_dozen_top_level_modules() -> None:
    top = sorted(p.stem for p in PACKAGE_DIR.glob("*.py"))
    assert len(top) <= 12, f"r2mad_core/ holds {len(top)} top-level modules (issue 21: at most 12; the rest in sub-packages): {top}"


def test_every_sub_package_says_what_it_is() -> None:
    """Each package's __init__ docstring names its concept and every module in it."""
    import importlib

    for init in sorted(PACKAGE_DIR.glob("*/__init__.py")):
        package = importlib.import_module(f"{PACKAGE}.{init.parent.name}")
        doc = package.__doc__ or ""
        assert len(doc.strip()) > 40, f"{init}: the docstring should name the package's concept"
        missing = [p.stem for p in init.parent.glob("*.py") if p.stem != "__init__" and p.stem not in doc]
        assert not missing, f"{init}: the docstring does not name the modules {missing}"


def test_r2mad_core_shows_at_most_thirteen_units() -> None:
    """Issue 30: the sub-packages and top-level modules of ARCHITECTURE, ``__main__`` (``python -m r2mad_core``, the
    package's script, not a unit of code) aside, are at most 12 plus ``export`` (issue 60: the runs in the field's
    formats, a concept of its own above ``report``); everything that runs a reproduction is one of them."""
    from r2mad_core import ARCHITECTURE

    units = [unit for layer in ARCHITECTURE for unit in layer if unit != "__main__"]
    assert len(units) <= 13, f"r2mad_core shows {len(units)} units: {units}"
    assert "reproduce" in units and not {"notebook_runner", "notebook_setup"} & set(units)


def test_an_engine_registered_by_module_and_name_is_an_import_the_layers_see() -> None:
    """Issue 30: ``EngineSpec("local", "r2mad_core.engines.local:LocalEngine")`` counts as an import of that module;
    the one that points up the layers is listed, with its reason, in :data:`KNOWN_UPWARD_BY_STRING`."""
    graph = import_graph()
    assert {"engines.local", "engines.openai_compat", "engines.vllm_backend", "theory.agents"} <= graph["engines"]
    assert imported_modules(PACKAGE_DIR / "data" / "x.py", {"memory.hook"}, 'X = "r2mad_core.memory.hook:R2MadHook"\n') == {
        "memory.hook"}
    from r2mad_core import ARCHITECTURE

    layer_of = {unit: index for index, layer in enumerate(ARCHITECTURE) for unit in layer}
    for a, b in KNOWN_UPWARD_BY_STRING:
        assert b in graph[a] and layer_of[_owner(b)] > layer_of[_owner(a)], "no longer upward: remove it from the list"
