"""The headline results at the end of ``make reproduce``: the paper's Table 1, this run's values beside the paper's.

As lm-eval prints a results table when it finishes: one row per method of the paper's main table (CoT,
Self-Consistency, MAD, MAD-M2, R2-MAD), one column per benchmark and the average, each cell "this run [95% CI] /
the paper", for each model the paper reports that this run stands in for. Like is compared with like: the paper's
*Average* beside this run's is the mean of the paper's numbers over the benchmarks this run has (the cpu profile's
MATH500 + TruthfulQA: 0.603 for CoT, not the paper's four-benchmark 0.565). The table ends with the claims table's
one-line verdict (``verdict`` of ``tab_paper_claims`` in the manifest, :meth:`ClaimsSummary.verdict_line
<r2mad_lab.report.comparison.ClaimsSummary.verdict_line>`: counts decided by the one rule of docs/statistics.md).

Read back from what ran: the comparison notebook 10 wrote (``tab_paper_comparison.csv`` in the run's figures folder)
and its manifest entry, never recomputed from runs here. It is printed when notebook 10 (:data:`REPORT_NOTEBOOK`) ran
this time, and again on a rerun that found every notebook up to date (nothing re-executed); not after ``--only``
without 10, whose table would be an earlier run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from r2mad_lab.report import inference
from r2mad_lab.report.artifacts import display_path, read_manifest

COMPARISON_CSV = "tab_paper_comparison.csv"
CLAIMS_TABLE = "tab_paper_claims"
REPORT_NOTEBOOK = "10_report"
HEADLINE_TABLE = "tab:main_results"
AVERAGE = "Average"
BENCHMARK_ORDER = ("MATH500", "Economics", "Engineering", "TruthfulQA", AVERAGE)


def _number(text: object) -> float | None:
    try:
        return float(str(text).split(" ", 1)[0])
    except ValueError:
        return None


def _paper_over_same_benchmarks(block: pd.DataFrame) -> dict[str, str]:
    """Per method: the mean of the paper's per-benchmark numbers over the benchmarks this run has ("-" when the
    paper lacks one of them)."""
    out = {}
    for method, rows in block[block["benchmark"] != AVERAGE].groupby("method", sort=False):
        values = [_number(v) for v in rows["paper"]]
        out[method] = "-" if not values or any(v is None for v in values) else f"{sum(values) / len(values):.3f}"
    return out


def headline_lines(figures_dir: str | Path, *, rerun: bool = False) -> list[str]:
    """The results table as lines of text ([] when the run wrote no comparison with the paper); ``rerun``: said to
    be the recorded table of an up-to-date run (nothing re-executed)."""
    figures_dir = Path(figures_dir)
    path = figures_dir / COMPARISON_CSV
    if not path.is_file():
        return []
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame = frame[(frame["table"] == HEADLINE_TABLE) & (frame["metric"] == "accuracy")]
    if frame.empty:
        return []
    artifacts = read_manifest(figures_dir)["artifacts"]
    written = (artifacts.get("tab_paper_comparison") or {}).get("created", "")
    when = f"; recorded {written}, up to date, nothing re-executed" if rerun else ""
    lines = [f"reproduce: the paper's Table 1 (accuracy; each cell: this run [95% CI] / the paper; the paper's "
             f"Average is its mean over the same benchmarks as this run's; from {display_path(path)}{when})"]
    for (model, paper_model), block in frame.groupby(["model", "paper_model"], sort=False):
        columns = [b for b in BENCHMARK_ORDER if b in set(block["benchmark"])]
        columns += [b for b in dict.fromkeys(block["benchmark"]) if b not in columns]
        methods = list(dict.fromkeys(block["method"]))
        same = _paper_over_same_benchmarks(block)
        cells = {}
        for r in block.itertuples():
            paper = same.get(r.method, "-") if r.benchmark == AVERAGE else (r.paper or "-")
            cells[(r.method, r.benchmark)] = f"{r.reproduced or '-'} / {paper}"
        sizes = {r.benchmark: r.n for r in block.itertuples()}
        header = ["method", *columns]
        rows = [[m, *(cells.get((m, c), "-") for c in columns)] for m in methods]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        benchmarks = [c for c in columns if c != AVERAGE]
        lines.append(f"  {model} (stands in for {paper_model}); questions (n) per column: "
                     + ", ".join(f"{c} {sizes.get(c, '?')}" for c in columns)
                     + (f" (the Average: the mean over {', '.join(benchmarks)})" if AVERAGE in columns else ""))
        lines.append("  | " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + " |")
        lines.append("  |" + "|".join("-" * (w + 2) for w in widths) + "|")
        lines += ["  | " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |" for r in rows]
    claims = figures_dir / f"{CLAIMS_TABLE}.md"
    more = f" and the claims, tested: {display_path(claims)}" if claims.is_file() else ""
    lines.append(f"  every number against the paper: {display_path(figures_dir / 'tab_paper_comparison.md')}{more}")
    sizes = [_number(n) for n in frame.loc[frame["benchmark"] != AVERAGE, "n"]]
    sizes = [n for n in sizes if n is not None]
    if sizes and inference.too_small(min(sizes)):
        lines.append("  " + inference.small_sample_line(min(sizes), what="questions per benchmark"))
    verdict = (artifacts.get(CLAIMS_TABLE) or {}).get("verdict")
    if verdict:
        lines.append(f"  {verdict} (docs/statistics.md)")
    return lines


def print_headline(figures_dir: str | Path, ran: Iterable[str] | None = None,
                   echo: Callable[[str], None] = print) -> None:
    """Print :func:`headline_lines` (``make reproduce`` calls it last) when ``ran`` (the notebooks this run executed)
    includes :data:`REPORT_NOTEBOOK`; ``ran`` None: a rerun that found every notebook up to date (the recorded
    table is the current one, printed as such). After ``--only`` without 10 nothing is printed, so a table from an
    earlier run is never shown as this run's."""
    if ran is not None and REPORT_NOTEBOOK not in set(ran):
        return
    for line in headline_lines(figures_dir, rerun=ran is None):
        echo(line)
