"""The run index: every run of a profile (``runs/<profile>/...``) as one page and one terminal table (``r2mad runs``).

``runs/sim/simulated/<benchmark>/`` holds hundreds of folders named by hashes; this says what each is, read back from
the run's recorded ``config.json`` (what executed, not what was asked): its name (the method as the debate viewer
names it, with the retrieval policy and its lambda, and the settings: agents x rounds, K, gamma, round 0), benchmark,
model, engine, protocol (the preset its options match, and any choice set apart from it), variant / profile (the
folders between ``runs/`` and the engine's), the number of questions, the accuracy with its 95% CI, the tokens per
question, and the tables and figures it feeds: the artifacts whose manifest entry (``figures/<profile>/MANIFEST.json``,
and every variant's and sweep's beside it) lists it under ``runs`` (:func:`r2mad_lab.report.artifacts.run_paths`).

The page (``index.html`` in the runs folder, :mod:`r2mad_lab.report.run_pages`) sorts, filters and searches them,
links each to its run page, and compares two runs of one benchmark: their 2x2 table of correct / incorrect and the
exact McNemar p of :data:`MCNEMAR`, the function the claims table's p comes from, so the two agree for the same pair.

Incremental: ``_viewer/cache.json`` keeps each run's row and per-question correctness with the stamp (size and
mtime) of its files; a run whose stamp is unchanged is not read or rendered again, nor a pair's test.
:func:`collect` reads the runs; :func:`build` writes the pages; :func:`format_table` is the same as text.
Everything it writes is beside the runs (``runs/`` is not tracked).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import ValidationError

from r2mad_core.records import RunConfig, problems
from r2mad_lab.experiments.cell import CONFIG_FILE, TRANSCRIPTS_FILE, load_run
from r2mad_lab.experiments.metrics import compute_metrics
from r2mad_lab.experiments.protocol import CHOICES, PROTOCOLS
from r2mad_lab.experiments.run_settings import RecordedSettings, read_settings
from r2mad_lab.report import inference, run_pages
from r2mad_lab.report.artifacts import MANIFEST_NAME, read_manifest
from r2mad_lab.report.viewer import RunView

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
INDEX_NAME = "index.html"
PAGE_NAME = run_pages.PAGE_FILE
CACHE_NAME = "cache.json"
#: Bumped when a row's or a run page's format changes: every run is rendered again.
FORMAT = 3
#: The exact McNemar test of the claims table (r2mad_lab/report/comparison.py: check_orderings calls it on the
#: paired questions); the comparison page's p comes from it, so a pair's p is the claims table's for that pair.
MCNEMAR = inference.stratified_sign_p  # one stratum: the exact McNemar p (docs/statistics.md)
MCNEMAR_RULE = "two-sided exact McNemar (binomial test on the discordant questions), as the claims table"

Progress = Callable[[str], None]


class RunIndexError(ValueError):
    """A file the index cannot read (one line naming the file and the field)."""


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
    name: str = ""  # the method with every setting that tells it apart: what the pages call the run
    variant: str = ""  # the folders between runs/ and the engine's (the profile, a variant's or a sweep's folder)
    engine: str = ""
    feeds: list[str] = field(default_factory=list)  # artifact names ("tab_main_results", "gamma=0.5: tab_ablation")
    page: Path | None = None  # the run page, once written
    correct: dict[str, bool] = field(default_factory=dict)  # question -> final answer right

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
    sweep's as ``<folder>: <name>`` (``gamma=0.5: tab_ablation``). A damaged manifest: :class:`RunIndexError`."""
    figures_dir = Path(figures_dir)
    feeds: dict[str, list[str]] = {}
    manifests = sorted(figures_dir.rglob(MANIFEST_NAME)) if figures_dir.is_dir() else []
    for manifest in manifests:
        folder = manifest.parent
        prefix = "" if folder == figures_dir else f"{folder.relative_to(figures_dir).as_posix().split('/', 1)[-1]}: "
        try:
            artifacts = read_manifest(folder)["artifacts"]
        except (ValueError, OSError) as exc:
            raise RunIndexError(str(exc).splitlines()[0]) from None
        for name, record in artifacts.items():
            runs = record.get("runs", []) if isinstance(record, dict) else None
            if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
                raise RunIndexError(f"{manifest}: artifacts.{name}.runs: expected a list of run paths, "
                                    f"found {json.dumps(runs if isinstance(record, dict) else record)[:80]}")
            for run in runs:
                feeds.setdefault(run, []).append(prefix + name)
    return feeds


def protocol_of(options: dict[str, Any] | RecordedSettings) -> str:
    """The protocol preset a run's settings match best, with every choice it sets apart from it
    (``paper``, ``authors; round0=independent``): the method-level choices the run recorded."""
    settings = options if isinstance(options, RecordedSettings) else read_settings({"options": dict(options)})
    choices = [c for c in CHOICES if c.level == "method" and settings.recorded(c.method_option)]
    best = None
    for protocol in PROTOCOLS:
        apart = [f"{c.method_option}={settings.choices[c.name]}" for c in choices
                 if settings.choices[c.name] != c.value(protocol)]
        if best is None or len(apart) < len(best[1]):
            best = (protocol, apart)
    if best is None or not choices:
        return "-"
    return best[0] + "".join(f"; {a}" for a in best[1])


def settings_of(config: RunConfig) -> str:
    """The settings that tell runs of one method apart, as executed: agents x rounds, paths, and for R2-MAD K, gamma,
    the retrieval policy with its lambda, the memory or confidence switched off and a poisoned share; round 0. Read
    back by the one reader of a run's settings (:func:`~r2mad_lab.experiments.run_settings.read_settings`)."""
    settings = read_settings(config.method)
    options = settings.options  # the method's own row options (k_paths, use_memory, ...): as recorded
    parts = []
    if settings.recorded("n_agents"):
        rounds = settings.debate.n_rounds if settings.recorded("n_rounds") else "?"
        parts.append(f"{settings.debate.n_agents} agents x {rounds} rounds")
    if "k_paths" in options:
        parts.append(f"{options['k_paths']} paths")
    if settings.method == "r2mad":
        parts.append(f"K={settings.memory.top_k}")
        if settings.recorded("gamma"):  # not recorded under a policy that does not use it (Fixed-lambda, Random)
            parts.append(f"gamma={settings.memory.gamma}")
        from r2mad_lab.report.viewer import retrieval_label

        parts.append(f"retrieval {retrieval_label(settings)}")
        if options.get("use_memory") is False:
            parts.append("memory off")
        if options.get("use_confidence") is False:
            parts.append("confidence off")
        if options.get("poison_fraction"):
            parts.append(f"poisoned {options['poison_fraction']:g}")
    if settings.recorded("round0"):
        parts.append(f"round 0 {settings.debate.round0}")
    return ", ".join(parts)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunIndexError(f"{path}: cannot be read ({exc})") from None
    except ValueError as exc:
        raise RunIndexError(f"{path}: not valid JSON ({exc})") from None


def read_config(run_dir: Path) -> RunConfig:
    """The run's ``config.json``, or :class:`RunIndexError` naming the file and the first field that does not fit."""
    path = run_dir / CONFIG_FILE
    data = _read_json(path)
    try:
        config = RunConfig.model_validate(data)
    except ValidationError:
        found = problems(RunConfig, data)
        raise RunIndexError(f"{path}: {found[0] if found else 'not a run config'}") from None
    if not isinstance(config.method.get("name"), str) or not isinstance(config.method.get("options", {}), dict):
        raise RunIndexError(f"{path}: method: expected a name (a string) and options (an object), "
                            f"found {json.dumps(config.method)[:80]}")
    return config


def read_metrics(run_dir: Path) -> dict[str, Any]:
    """The run's metrics.json (written with it; computed from its transcripts when there is none), its numbers checked
    (:class:`RunIndexError` naming the file and the field)."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        _, records = load_run(run_dir)
        return compute_metrics(records)
    metrics = _read_json(path)
    if not isinstance(metrics, dict):
        raise RunIndexError(f"{path}: expected an object, found {type(metrics).__name__}")
    for key in ("n", "accuracy", "ci_low", "ci_high"):
        value = metrics.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RunIndexError(f"{path}: {key}: expected a number, found {json.dumps(value)[:40]}")
    tokens = metrics.get("tokens_per_query", {})
    if not isinstance(tokens, dict) or not all(isinstance(t, dict) for t in tokens.values()):
        raise RunIndexError(f"{path}: tokens_per_query: expected an object of objects")
    return metrics


def _tokens(metrics: dict[str, Any]) -> float:
    return float(sum(tag.get("total_tokens", 0.0) for tag in metrics.get("tokens_per_query", {}).values()))


def _stamp(run_dir: Path) -> list[Any]:
    stamp: list[Any] = [FORMAT]
    for name in (CONFIG_FILE, TRANSCRIPTS_FILE, METRICS_FILE):
        path = run_dir / name
        stamp += [path.stat().st_size, path.stat().st_mtime_ns] if path.exists() else [None, None]
    return stamp


def _correct(run_dir: Path) -> dict[str, bool]:
    """Question -> final answer right, from the transcripts (the field ``correct`` of each record)."""
    out = {}
    path = run_dir / TRANSCRIPTS_FILE
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    record = json.loads(line)
                    out[record["sample_id"]] = bool(record["correct"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise RunIndexError(
                        f"{path}:{number}: not a transcript record ({type(exc).__name__}: {exc})") from None
    return out


def read_entry(run_dir: Path, root: Path, *, correct: bool = True) -> RunEntry:
    """One run directory's row (:class:`RunIndexError` for a damaged config.json, metrics.json or transcript); with
    ``correct``, the final correctness of each question (else left to :func:`write_pages`, which reads the
    transcripts anyway)."""
    config = read_config(run_dir)
    metrics = read_metrics(run_dir)
    label = RunView(run_dir, config, {}).label  # the viewer's name of the method; the records are the page's
    settings = settings_of(config)
    protocol = protocol_of(read_settings(config.method))
    parts = run_dir.relative_to(root).parts  # runs/<profile>/.../<engine>/<benchmark>/<run>
    engine = str(config.engine.get("identity", "?")).split(":", 1)[0]
    variant = "/".join(parts[1:parts.index(engine)] if engine in parts[1:] else parts[1:2])
    benchmark = config.benchmark + ("" if config.split == "test" else f" ({config.split})")
    return RunEntry(
        path=run_dir.relative_to(root).as_posix(), run_dir=run_dir, method=label, benchmark=benchmark,
        model=str(config.engine.get("model", "?")), protocol=protocol, settings=settings, n=int(metrics.get("n", 0)),
        accuracy=float(metrics.get("accuracy", math.nan)), ci_low=float(metrics.get("ci_low", math.nan)),
        ci_high=float(metrics.get("ci_high", math.nan)), tokens_per_question=_tokens(metrics),
        name=f"{label} · {settings} · protocol {protocol}" if settings else f"{label} · protocol {protocol}",
        variant=variant, engine=engine, correct=_correct(run_dir) if correct else {})


_CACHED = [f.name for f in fields(RunEntry) if f.name not in ("run_dir", "feeds", "page")]


def _load_cache(path: Path) -> dict[str, Any]:
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
        return cache if isinstance(cache, dict) and cache.get("format") == FORMAT else {}
    except (OSError, ValueError):
        return {}


def collect(runs_root: str | Path, figures_dir: str | Path | None = None, *, cache: dict[str, Any] | None = None,
            progress: Progress | None = None, skipped: list[str] | None = None, pages: bool = False) -> list[RunEntry]:
    """Every run under ``runs_root`` with what it feeds (the manifests under ``figures_dir``, when given). A run
    whose config.json, metrics.json or transcripts cannot be read is left out with a warning naming the file and
    field (the line appended to ``skipped`` when given, else logged). ``cache`` (``_viewer/cache.json``'s runs): rows of
    unchanged runs are taken from it, and it is updated. ``pages``: the run pages will be written (and read each
    question's correctness on the way)."""
    runs_root = Path(runs_root).resolve()
    # run paths as manifests name them: relative to the folder holding runs/ (else to the folder's parent)
    root = next((p.parent for p in [runs_root, *runs_root.parents] if p.name == "runs"), runs_root.parent)
    feeds = manifest_feeds(figures_dir) if figures_dir is not None else {}
    cache = {} if cache is None else cache
    entries = []
    found = find_runs(runs_root)
    for number, run_dir in enumerate(found, start=1):
        key = run_dir.relative_to(root).as_posix()
        stamp = _stamp(run_dir)
        kept = cache.get(key)
        if kept is not None and kept.get("stamp") == stamp:
            entry = RunEntry(run_dir=run_dir, **kept["row"])
        else:
            try:
                entry = read_entry(run_dir, root, correct=not pages)
            except RunIndexError as exc:
                cache.pop(key, None)
                if skipped is not None:
                    skipped.append(f"skipped {key}: {exc}")
                else:
                    logger.warning("skipped %s: %s", key, exc)
                continue
            cache[key] = {"stamp": stamp, "row": {name: getattr(entry, name) for name in _CACHED}, "page": None}
        entry.feeds = sorted(feeds.get(key, []))
        entries.append(entry)
        if progress is not None:
            progress(f"read {number}/{len(found)} runs")
    return entries


def write_pages(entries: Sequence[RunEntry], assets_folder: Path, cache: dict[str, Any] | None = None,
                progress: Progress | None = None) -> int:
    """Write each run's page and data files (:func:`r2mad_lab.report.run_pages.write_run`) unless ``cache`` says they
    were written from the run as it is; returns how many were written. A run whose transcripts cannot be read gets
    no page, and a warning."""
    cache = {} if cache is None else cache
    sources = run_pages.Sources()
    written = 0
    for number, entry in enumerate(entries, start=1):
        page = entry.run_dir / PAGE_NAME
        kept = cache.get(entry.path) or {}
        if kept.get("page") == kept.get("stamp") and kept.get("page") is not None and page.is_file() \
                and (entry.run_dir / run_pages.DATA_FILE).is_file():
            entry.page = page
            continue
        config = read_config(entry.run_dir)
        describe = (f"{entry.benchmark}, {entry.n} questions, accuracy {entry.accuracy_text}; model {entry.model} "
                    f"(engine {entry.engine}), seed {config.seed}, r2mad {config.r2mad_version}; protocol "
                    f"{entry.protocol}; run directory {entry.path}")
        try:
            entry.page, rows = run_pages.write_run(entry.run_dir, entry.path, entry.name, describe,
                                                   config.method.get("options", {}), config.benchmark, assets_folder,
                                                   sources)
        except (run_pages.PageError, OSError) as exc:
            logger.warning("%s: no run page (%s)", entry.path, exc)
            continue
        entry.correct = {q["id"]: q["correct"] for q in rows}
        if entry.path in cache:
            cache[entry.path]["page"] = cache[entry.path]["stamp"]
            cache[entry.path]["row"]["correct"] = entry.correct
        written += 1
        if progress is not None:
            progress(f"wrote the page of {number}/{len(entries)} runs ({written} rendered, the others unchanged)")
    return written


def pair_tests(entries: Sequence[RunEntry], stamps: dict[str, Any] | None = None, kept: dict[str, Any] | None = None,
               progress: Progress | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``"i-j"`` (i < j, positions in ``entries``) -> the 2x2 table and :data:`MCNEMAR`'s p of runs i and j, for every
    two runs of one benchmark (and split) with questions in common: the questions both answered, as the claims table
    pairs them. ``kept`` (the previous build's, by run paths) gives a pair's test while neither run's stamp
    (``stamps``) changed; returns the tests and what to keep for the next build."""
    stamps, kept = stamps or {}, kept or {}
    fresh: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    by_benchmark: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        by_benchmark.setdefault(entry.benchmark, []).append(i)
    total = sum(len(v) * (len(v) - 1) // 2 for v in by_benchmark.values())
    done = 0
    for positions in by_benchmark.values():
        for x, i in enumerate(positions):
            for j in positions[x + 1:]:
                a, b = entries[i], entries[j]
                name = f"{a.path}|{b.path}"
                both_stamps = [stamps.get(a.path), stamps.get(b.path)]
                done += 1
                if name in kept and kept[name]["stamps"] == both_stamps and None not in both_stamps:
                    test = kept[name]["test"]
                else:
                    common = [q for q in a.correct if q in b.correct]
                    if not common:
                        continue
                    x, y = [a.correct[q] for q in common], [b.correct[q] for q in common]
                    [(n, a_only, b_only)] = inference.stratum_counts(x, y).tolist()
                    p_value = MCNEMAR(np.array([[n, a_only, b_only]]))
                    both = sum(1 for u, v in zip(x, y, strict=False) if u and v)
                    test = {"n": n, "both": both, "a_only": a_only, "b_only": b_only,
                            "neither": n - both - a_only - b_only,
                            "p": p_value, "p_text": f"{p_value:.3g}", "rule": MCNEMAR_RULE,
                            "accuracy_a": sum(x) / n, "accuracy_b": sum(y) / n}
                    if progress is not None:
                        progress(f"tested {done}/{total} pairs of runs")
                fresh[name] = {"stamps": both_stamps, "test": test}
                out[f"{i}-{j}"] = test
    return out, fresh


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
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths, strict=False)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)


def index_data(entries: Sequence[RunEntry], folder: Path, title: str, pairs: dict[str, Any]) -> dict[str, Any]:
    """What the index and the comparison pages read (``_viewer/index.data.js``): links relative to ``folder``."""
    def relative(path: Path | None) -> str | None:
        return None if path is None else Path(os.path.relpath(path, folder)).as_posix()

    fed = sum(1 for e in entries if e.feeds)
    runs = []
    for e in entries:
        row = {k: v for k, v in asdict(e).items() if k not in ("run_dir", "page", "correct")}
        row.update(accuracy_text=e.accuracy_text, tokens=e.tokens_per_question, page=relative(e.page),
                   data=relative(e.page.with_name(run_pages.DATA_FILE)) if e.page else None)
        runs.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    what = (f"{len(entries)} runs, {fed} of them feeding a table or figure (their manifest entries name them under "
            "runs). Each name is the run's executed configuration (its config.json) and links to its questions and "
            "debates. Accuracy with its 95% bootstrap CI over the run's questions; tokens per question: prompt and "
            "completion, debate and summaries. Click a header to sort; pick two runs of one benchmark to compare them.")
    return {"title": title, "what": what, "runs": runs, "pairs": pairs, "compare": run_pages.COMPARE_PAGE}


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
          figures: str | Path | None = None, pages: bool = True, progress: Progress | None = None,
          skipped: list[str] | None = None) -> tuple[list[RunEntry], Path]:
    """Collect the runs of ``target``, write their pages (``pages``), the pairs' tests and the index; returns both.
    ``progress`` is called with a line now and then (the CLI prints them)."""
    folder, found_figures, title = resolve_target(target, root)
    index = Path(out).resolve() if out is not None else folder / INDEX_NAME
    site = index.parent
    cache_path = site / run_pages.ASSET_DIR / CACHE_NAME
    cache = _load_cache(cache_path)
    runs_cache = cache.setdefault("runs", {})
    entries = collect(folder, figures if figures is not None else found_figures, cache=runs_cache, progress=progress,
                      skipped=skipped, pages=pages)
    if pages:
        written = write_pages(entries, site / run_pages.ASSET_DIR, runs_cache, progress)
        if progress is not None:
            progress(f"run pages: {written} written, {len(entries) - written} unchanged")
    stamps = {path: kept["stamp"] for path, kept in runs_cache.items()}
    pairs, cache["pairs"] = pair_tests(entries, stamps, cache.get("pairs"), progress)
    index = run_pages.write_site(site, index.name, title, index_data(entries, site, title, pairs))
    cache["format"] = FORMAT
    cache_path.write_text(json.dumps(cache), encoding="utf-8")
    return entries, index
