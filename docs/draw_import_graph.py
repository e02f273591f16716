"""Draw docs/import-graph.png: the core's and the lab's layers (``r2mad_lab.layers()``) and the imports between units.

Usage:
    .venv/bin/python docs/draw_import_graph.py [--output docs/import-graph.png]

The imports are read the way tests/test_architecture.py reads them (every ``import`` of every module, those inside
functions included; the test's own functions are used), then grouped by unit (``debate.loop`` -> ``debate``). One
row per layer, bottom layer at the bottom; a box per unit, its width growing with its lines of code; an arrow
(drawn under the boxes it passes) from a unit to each unit it imports, labelled with the number of module-to-module
imports. An arrow that runs up or sideways between two layers would be drawn red: the test fails on it, so a correct
tree has none. Nothing is run but this reading of the source.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def architecture_test():
    """tests/test_architecture.py as a module (its ``import_graph``, ``module_name`` and ``_code_files``)."""
    spec = importlib.util.spec_from_file_location("test_architecture", ROOT / "tests" / "test_architecture.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def unit_of(module: str, units: set[str]) -> str:
    """``r2mad_core.debate.loop`` -> ``r2mad_core.debate``; a package's own ``__init__`` (its face) -> itself."""
    head = ".".join(module.split(".")[:2])
    return head if head in units else module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "import-graph.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    from r2mad_lab import CODE_PACKAGES, layers

    ARCHITECTURE = layers()
    test = architecture_test()
    graph = {m: t for m, t in test.import_graph().items() if m not in CODE_PACKAGES}  # the faces: lazy, not drawn
    units = {unit for layer in ARCHITECTURE for unit in layer}
    layer_of = {unit: index for index, layer in enumerate(ARCHITECTURE) for unit in layer}
    lines: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    for path in test._code_files():
        name = test.module_name(path)
        if name in CODE_PACKAGES:
            continue
        unit = unit_of(name, units)
        lines[unit] += len(path.read_text(encoding="utf-8").splitlines())
        modules[unit] += 1
    edges: Counter[tuple[str, str]] = Counter()
    for source, targets in graph.items():
        for target in targets:
            a, b = unit_of(source, units), unit_of(target, units)
            if a != b and a in units and b in units:
                edges[(a, b)] += 1

    width, row_height, box_height = 16.0, 1.0, 0.55
    fig, ax = plt.subplots(figsize=(width, row_height * len(ARCHITECTURE) + 1.2))
    centre: dict[str, tuple[float, float]] = {}
    half_width: dict[str, float] = {}
    scale = (width - 1.0) / max(sum(max(lines[u], 1) ** 0.5 for u in layer) for layer in ARCHITECTURE) * 0.8
    for index, layer in enumerate(ARCHITECTURE):
        y = index * row_height
        sizes = [max(max(lines[u], 1) ** 0.5 * scale, 1.8) for u in layer]
        gap = (width - sum(sizes)) / (len(layer) + 1)
        x = gap
        for unit, size in zip(layer, sizes, strict=False):
            core = unit.startswith(f"{CODE_PACKAGES[0]}.")
            ax.add_patch(FancyBboxPatch((x, y - box_height / 2), size, box_height, boxstyle="round,pad=0.02",
                                        facecolor="#f3e3c3" if core else "#dbe7f3", edgecolor="#4a6b8a", zorder=3))
            ax.text(x + size / 2, y + 0.07, unit.split(".", 1)[1], ha="center", va="center", fontsize=10,
                    weight="bold", zorder=4)
            ax.text(x + size / 2, y - 0.15, f"{modules[unit]} module{'s' if modules[unit] != 1 else ''}, "
                    f"{lines[unit]:,} lines", ha="center", va="center", fontsize=7.5, color="#333333", zorder=4)
            centre[unit] = (x + size / 2, y)
            half_width[unit] = size / 2
            x += size + gap
        ax.text(0.05, y, f"layer {index + 1}\n{layer[0].split('.')[0]}", ha="left", va="center", fontsize=8,
                color="#777777")
    # each box's arrows leave from (and arrive at) points spread along its edge, in the order of the other ends
    extent = {unit: (centre[unit][0] - half, centre[unit][0] + half) for unit, half in half_width.items()}
    outgoing = {u: sorted((b for a, b in edges if a == u), key=lambda v: (centre[v][0], layer_of[v])) for u in units}
    incoming = {u: sorted((a for a, b in edges if b == u), key=lambda v: (centre[v][0], -layer_of[v])) for u in units}

    def spot(unit: str, others: list[str], other: str) -> float:
        left, right = extent[unit]
        return left + (right - left) * (others.index(other) + 1) / (len(others) + 1)

    upward = 0
    for (a, b), count in sorted(edges.items()):
        down = layer_of[b] < layer_of[a]
        upward += not down
        x0, y0 = spot(a, outgoing[a], b), centre[a][1] - box_height / 2
        x1, y1 = spot(b, incoming[b], a), centre[b][1] + box_height / 2
        colour = "#5b7290" if down else "#c0392b"
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", color=colour, lw=0.6 + 0.3 * count ** 0.5, alpha=0.6,
                                    shrinkA=0, shrinkB=0), zorder=1)
        f = min(0.12 / max(y0 - y1, 1e-9), 0.5)  # just below the source box, in the gap between two rows
        ax.text(x0 + f * (x1 - x0), y0 + f * (y1 - y0), str(count), fontsize=6.5, color=colour, ha="center",
                va="center", bbox=dict(boxstyle="round,pad=0.08", facecolor="white", edgecolor="none", alpha=0.85),
                zorder=2)
    ax.set_xlim(0, width)
    ax.set_ylim(-0.7, (len(ARCHITECTURE) - 1) * row_height + 0.7)
    ax.axis("off")
    ax.set_title(f"r2mad_core (the method, sand) and r2mad_lab (the machinery, blue): {len(ARCHITECTURE)} layers, "
                 f"{len(units)} units, {sum(modules.values())} modules, "
                 f"{len(edges)} unit-to-unit arrows ({sum(edges.values())} module imports), "
                 f"{upward} running up or sideways", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110, metadata={"Software": None})
    print(f"{args.output}: {len(ARCHITECTURE)} layers, {len(edges)} arrows, {upward} upward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
