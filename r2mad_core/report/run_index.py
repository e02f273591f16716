"""The run index: every run of a profile (``runs/<profile>/...``) as one page and one terminal table (``r2mad runs``).

``runs/sim/simulated/<benchmark>/`` holds hundreds of folders named by hashes; this says what each is: the method
(as the debate viewer names it), benchmark, model, protocol (the preset its options match, and any choice set
apart from it), its settings (agents x rounds; K, gamma and the retrieval policy for R2-MAD), the number of
questions, the accuracy with its 95% CI, the tokens per question, and the tables and figures it feeds: the
artifacts whose manifest entry (``figures/<profile>/MANIFEST.json``, and every variant's and sweep's beside it)
lists it under ``runs`` (:func:`r2mad_core.report.artifacts.run_paths`). Each row links to the run's debate page
(:mod:`r2mad_core.report.viewer`, ``view.html`` in the run directory, written when missing or older than the run).

:func:`collect` reads the runs; :func:`write_index` writes the page (``index.html`` in the runs folder);
:func:`format_table` is the same as text. Everything it writes is beside the runs (``runs/`` is not tracked).
"""

from __future__ import annotations

import html
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from r2mad_core.debate.scoring import compute_metrics
from r2mad_core.experiments.cell import CONFIG_FILE, TRANSCRIPTS_FILE, load_run
from r2mad_core.experiments.protocol import CHOICES, PROTOCOLS
from r2mad_core.records import RunConfig
from r2mad_core.report.artifacts import MANIFEST_NAME, read_manifest
from r2mad_core.report.viewer import RunView, ViewerError, write_page

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
INDEX_NAME = "index.html"
PAGE_NAME = "view.html"


@dataclass
class RunEntry:
    """One run directory as the index shows it."""

    path: str  # relative to the folder holding runs/ (runs/sim/simulated/truthfulqa/r2mad-...), as manifests name it
    run_dir: Path
    method: str
    benchmark: str
    model: str
    protocol: str
    settings: str
    n: int
    accuracy: float
    ci_low: float
    ci_high: float
    tokens_per_question: float
    feeds: list[str] = field(default_factory=list)  # artifact names ("tab_main_results", "gamma=0.5: tab_ablation")
    page: Path | None = None  # the debate page, once written

    @property
    def accuracy_text(self) -> str:
        if self.n == 0 or math.isnan(self.accuracy):
            return "-"
        return f"{self.accuracy:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]"


def find_runs(runs_root: str | Path) -> list[Path]:
    """Every run directory under ``runs_root`` (a ``config.json`` beside a ``transcripts.jsonl``), sorted."""
    root = Path(runs_root)
    return sorted(p.parent for p in root.rglob(CONFIG_FILE) if (p.parent / TRANSCRIPTS_FILE).is_file())


def manifest_feeds(figures_dir: str | Path) -> dict[str, list[str]]:
    """Run path (as manifests name it) -> the artifacts listing it: the profile's own by name, a variant's or a
    sweep's as ``<folder>: <name>`` (``gamma=0.5: tab_ablation``)."""
    figures_dir = Path(figures_dir)
    feeds: dict[str, list[str]] = {}
    manifests = sorted(figures_dir.rglob(MANIFEST_NAME)) if figures_dir.is_dir() else []
    for manifest in manifests:
        folder = manifest.parent
        prefix = "" if folder == figures_dir else f"{folder.relative_to(figures_dir).as_posix().split('/', 1)[-1]}: "
        for name, record in read_manifest(folder)["artifacts"].items():
            for run in record.get("runs", []):
                feeds.setdefault(run, []).append(prefix + name)
    return feeds


def protocol_of(options: dict[str, Any]) -> str:
    """The protocol preset a run's method options match best, with every choice it sets apart from it
    (``paper``, ``authors; round0=independent``)."""
    choices = [c for c in CHOICES if c.level == "method" and c.method_option in options]
    best = None
    for protocol in PROTOCOLS:
        apart = [f"{c.method_option}={options[c.method_option]}" for c in choices
                 if options[c.method_option] != c.value(protocol)]
        if best is None or len(apart) < len(best[1]):
            best = (protocol, apart)
    if best is None or not choices:
        return "-"
    return best[0] + "".join(f"; {a}" for a in best[1])


def settings_of(config: RunConfig) -> str:
    """The settings that tell runs of one method apart: agents x rounds, and K, gamma, the retrieval policy, the
    memory or confidence switched off and a poisoned share for R2-MAD."""
    options = config.method.get("options", {})
    parts = []
    if "n_agents" in options:
        parts.append(f"{options['n_agents']}x{options.get('n_rounds', '?')}")
    if "k_paths" in options:
        parts.append(f"{options['k_paths']} paths")
    if config.method.get("name") == "r2mad":
        parts.append(f"K={options.get('top_k')}")
        parts.append(f"gamma={options.get('gamma')}")
        if options.get("retrieval_policy") not in (None, "state_aware"):
            parts.append(str(options["retrieval_policy"]))
    return " ".join(parts)


def _metrics(run_dir: Path) -> dict[str, Any]:
    """The run's metrics.json (written with it), else computed from its transcripts."""
    try:
        return json.loads((run_dir / METRICS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        _, records = load_run(run_dir)
        return compute_metrics(records)


def _tokens(metrics: dict[str, Any]) -> float:
    return float(sum(tag.get("total_tokens", 0.0) for tag in metrics.get("tokens_per_query", {}).values()))


def collect(runs_root: str | Path, figures_dir: str | Path | None = None) -> list[RunEntry]:
    """Every run under ``runs_root`` with what it feeds (the manifests under ``figures_dir``, when given)."""
    runs_root = Path(runs_root).resolve()
    # run paths as manifests name them: relative to the folder holding runs/ (else to the folder's parent)
    root = next((p.parent for p in [runs_root, *runs_root.parents] if p.name == "runs"), runs_root.parent)
    feeds = manifest_feeds(figures_dir) if figures_dir is not None else {}
    entries = []
    for run_dir in find_runs(runs_root):
        config = RunConfig.model_validate(json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8")))
        view = RunView(run_dir, config, {})  # for its label only: the records and the bank are the page's
        metrics = _metrics(run_dir)
        path = run_dir.relative_to(root).as_posix()
        entries.append(RunEntry(
            path=path, run_dir=run_dir, method=view.label,
            benchmark=config.benchmark + ("" if config.split == "test" else f" ({config.split})"),
            model=str(config.engine.get("model", "?")), protocol=protocol_of(config.method.get("options", {})),
            settings=settings_of(config), n=int(metrics.get("n", 0)),
            accuracy=float(metrics.get("accuracy", math.nan)), ci_low=float(metrics.get("ci_low", math.nan)),
            ci_high=float(metrics.get("ci_high", math.nan)), tokens_per_question=_tokens(metrics),
            feeds=sorted(feeds.get(path, [])),
        ))
    return entries


def write_pages(entries: Iterable[RunEntry]) -> int:
    """Write each run's debate page (``view.html`` in its directory) unless it is newer than the run; returns how
    many were written. A run the viewer cannot show (no finished question) gets no page, and a warning."""
    written = 0
    for entry in entries:
        page = entry.run_dir / PAGE_NAME
        newest = max((entry.run_dir / name).stat().st_mtime for name in (CONFIG_FILE, TRANSCRIPTS_FILE))
        if not page.is_file() or page.stat().st_mtime < newest:
            try:
                write_page([entry.run_dir], page)
            except ViewerError as exc:
                logger.warning("%s: no debate page (%s)", entry.path, exc)
                continue
            written += 1
        entry.page = page
    return written


COLUMNS = ("method", "benchmark", "model", "protocol", "settings", "n", "accuracy [95% CI]", "tokens/question",
           "feeds")


def _row(entry: RunEntry) -> list[str]:
    tokens = f"{entry.tokens_per_question:,.0f}" if entry.tokens_per_question else "-"
    return [entry.method, entry.benchmark, entry.model, entry.protocol, entry.settings, str(entry.n),
            entry.accuracy_text, tokens, ", ".join(entry.feeds) or "-"]


def format_table(entries: Sequence[RunEntry], *, max_width: int = 60) -> str:
    """The runs as a plain-text table (one line each, the columns of the page; long cells cut with "...")."""
    rows = [[c if len(c) <= max_width else c[:max_width - 3] + "..." for c in _row(e)] for e in entries]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(COLUMNS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


STYLE = """body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;font-size:13px;margin:16px;color:#1d1d1f}
table{border-collapse:collapse}th,td{padding:3px 8px;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}
th{background:#eef1f5;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.path{font-family:monospace;font-size:11px;color:#555}.what{color:#444;max-width:1100px}"""


def render_index(entries: Sequence[RunEntry], index: Path, title: str) -> str:
    """The index page (links relative to ``index``)."""
    def e(value: Any) -> str:
        return html.escape(str(value), quote=True)

    rows = []
    for entry in entries:
        link = (f'<a href="{e(Path(_relative(entry.page, index.parent)).as_posix())}">{e(entry.method)}</a>'
                if entry.page is not None else e(entry.method))
        tokens = f"{entry.tokens_per_question:,.0f}" if entry.tokens_per_question else "-"
        rows.append(
            f'<tr data-run="{e(entry.path)}"><td>{link}<div class="path">{e(entry.path)}</div></td>'
            f"<td>{e(entry.benchmark)}</td><td>{e(entry.model)}</td><td>{e(entry.protocol)}</td>"
            f'<td>{e(entry.settings)}</td><td class="num">{entry.n}</td><td class="num">{e(entry.accuracy_text)}</td>'
            f'<td class="num">{tokens}</td><td>{e(", ".join(entry.feeds)) or "-"}</td></tr>')
    fed = sum(1 for entry in entries if entry.feeds)
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title><style>{STYLE}</style></head><body><h1>{e(title)}</h1>"
            f'<p class="what">{len(entries)} runs, {fed} of them feeding a table or figure (their manifest entries '
            "name them under <code>runs</code>). Each method links to the run's debates (r2mad view). Accuracy with "
            "its 95% bootstrap CI over the run's questions; tokens per question: prompt and completion, debate and "
            f"summaries.</p><table><tr>{head}</tr>{''.join(rows)}</table></body></html>\n")


def _relative(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)


def write_index(entries: Sequence[RunEntry], out: str | Path, title: str = "r2mad runs") -> Path:
    """Write the index page to ``out``; returns it."""
    out = Path(out)
    out.write_text(render_index(entries, out, title), encoding="utf-8")
    return out


def resolve_target(target: str | Path, root: str | Path = ".") -> tuple[Path, Path | None, str]:
    """(runs folder, figures folder or None, title) of ``target``: a profile name (``runs/<profile>`` and
    ``figures/<profile>`` under ``root``) or a folder of runs (the figures of its profile when it is
    ``runs/<profile>``)."""
    root = Path(root)
    folder = Path(target)
    if not folder.is_dir() and (root / "runs" / str(target)).is_dir():
        folder = root / "runs" / str(target)
    if not folder.is_dir():
        raise FileNotFoundError(f"{target}: neither a folder of runs nor a profile with runs under {root / 'runs'}")
    folder = folder.resolve()
    figures = None
    if folder.parent.name == "runs":
        candidate = folder.parent.parent / "figures" / folder.name
        figures = candidate if candidate.is_dir() else None
    return folder, figures, f"r2mad runs: {folder.name}"


def build(target: str | Path, *, root: str | Path = ".", out: str | Path | None = None,
          figures: str | Path | None = None, pages: bool = True) -> tuple[list[RunEntry], Path]:
    """Collect the runs of ``target``, write their debate pages (``pages``) and the index; returns both."""
    folder, found_figures, title = resolve_target(target, root)
    entries = collect(folder, figures if figures is not None else found_figures)
    if pages:
        write_pages(entries)
    index = write_index(entries, Path(out) if out is not None else folder / INDEX_NAME, title)
    return entries, index
