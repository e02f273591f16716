"""The headline results at the end of ``make reproduce``: the paper's Table 1, this run's values beside the paper's.

As lm-eval prints a results table when it finishes: one row per method of the paper's main table (CoT,
Self-Consistency, MAD, MAD-M2, R2-MAD), one column per benchmark and the average, each cell "this run / the
paper", for each model the paper reports that this run stands in for. Read back from what ran: the comparison
notebook 10 wrote (``tab_paper_comparison.csv`` in the run's figures folder), never recomputed here; nothing
is printed unless the notebook that writes it (:data:`REPORT_NOTEBOOK`) ran this time (``--only`` without 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from r2mad_core.report.artifacts import display_path

COMPARISON_CSV = "tab_paper_comparison.csv"
REPORT_NOTEBOOK = "10_report"
HEADLINE_TABLE = "tab:main_results"
BENCHMARK_ORDER = ("MATH500", "Economics", "Engineering", "TruthfulQA", "Average")


def _value(text: object) -> str:
    """``"0.500 [0.000, 1.000]"`` -> ``"0.500"`` (the CSV holds the value with its CI)."""
    return str(text).split(" ", 1)[0] if isinstance(text, str) and text else "-"


def headline_lines(figures_dir: str | Path) -> list[str]:
    """The results table as lines of text ([] when the run wrote no comparison with the paper)."""
    figures_dir = Path(figures_dir)
    path = figures_dir / COMPARISON_CSV
    if not path.is_file():
        return []
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame = frame[(frame["table"] == HEADLINE_TABLE) & (frame["metric"] == "accuracy")]
    if frame.empty:
        return []
    lines = [f"reproduce: the paper's Table 1 (accuracy; each cell: this run / the paper; from "
             f"{display_path(path)})"]
    for (model, paper_model), block in frame.groupby(["model", "paper_model"], sort=False):
        columns = [b for b in BENCHMARK_ORDER if b in set(block["benchmark"])]
        columns += [b for b in dict.fromkeys(block["benchmark"]) if b not in columns]
        methods = list(dict.fromkeys(block["method"]))
        cells = {(r.method, r.benchmark): f"{_value(r.reproduced)} / {r.paper or '-'}" for r in block.itertuples()}
        sizes = {r.benchmark: r.n for r in block.itertuples()}
        header = ["method", *columns]
        rows = [[m, *(cells.get((m, c), "-") for c in columns)] for m in methods]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        lines.append(f"  {model} (stands in for {paper_model}); questions per column: "
                     + ", ".join(f"{c} {sizes.get(c, '?')}" for c in columns))
        lines.append("  | " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
        lines.append("  |" + "|".join("-" * (w + 2) for w in widths) + "|")
        lines += ["  | " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    claims = figures_dir / "tab_paper_claims.md"
    more = f" and the claims, tested: {display_path(claims)}" if claims.is_file() else ""
    lines.append(f"  every number against the paper: {display_path(figures_dir / 'tab_paper_comparison.md')}{more}")
    return lines


def print_headline(figures_dir: str | Path, ran: Iterable[str] | None = None, echo: Callable[[str], None] = print) -> None:
    """Print :func:`headline_lines` (``make reproduce`` calls it last) when ``ran`` (the notebooks this run executed;
    None: any) includes :data:`REPORT_NOTEBOOK`, so a table from an earlier run is never shown as this run's."""
    if ran is not None and REPORT_NOTEBOOK not in set(ran):
        return
    for line in headline_lines(figures_dir):
        echo(line)
