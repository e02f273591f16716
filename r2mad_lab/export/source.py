"""One run folder read for export: its config, records and metrics through the package's readers, checked whole.

:func:`read_run` reads ``config.json`` (:func:`r2mad_lab.report.run_index.read_config`, the
:class:`r2mad_core.records.RunConfig` schema), the transcripts (:func:`r2mad_lab.experiments.cell.load_run`, each
line a :class:`r2mad_core.records.TranscriptRecord`) and ``metrics.json``
(:func:`r2mad_lab.report.run_index.read_metrics`), and refuses, in one :class:`ExportError` line naming the file and the
field, a folder that is damaged (a line or a field that does not fit), incomplete (fewer finished questions than
``n_samples``), from another version (``format``, ``r2mad_version``) or whose metrics.json disagrees with its
transcripts. Nothing is written by an export until every folder it was given has been read this way.

No machine path leaves it: the run is named by its path relative to the folder holding ``runs/`` (as the manifests
name it, :func:`r2mad_lab.report.artifacts.run_paths`), and every absolute path in the settings (an R2-MAD run's
``memory`` bank) by the same rule (:func:`portable`). Secrets are never in a run folder (an engine records the name
of its key's environment variable, never the key), and an export reads nothing else.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from r2mad_core import __version__
from r2mad_core.records import RunConfig, TranscriptError, check_records
from r2mad_lab.experiments.cell import CONFIG_FILE, FORMAT_VERSION, TRANSCRIPTS_FILE, load_run
from r2mad_lab.report import run_index

#: The config keys that differ between the replicates (run seeds) of one cell: left out of :attr:`ExportRun.cell_key`.
REPLICATE_KEYS = ("seed", "sample_ids_sha256", "inputs")


class ExportError(ValueError):
    """A run folder an export cannot take (one line naming the file and the field)."""


@dataclass(frozen=True)
class ExportRun:
    """One run folder as read for export."""

    path: str  # relative to the folder holding runs/ (runs/sim/simulated/math500/r2mad-...), never a machine path
    config: RunConfig
    records: list[Any]  # TranscriptRecord, in file order
    metrics: dict[str, Any]
    entry: run_index.RunEntry  # the run index's row: method label, variant, engine, settings, protocol
    started: _dt.datetime  # config.json written (the run's start), UTC
    finished: _dt.datetime  # transcripts.jsonl last written (its last question), UTC

    @property
    def seed(self) -> int:
        return int(self.config.seed)

    @property
    def method_options(self) -> dict[str, Any]:
        """The method's options as recorded, machine paths made relative (:func:`portable`)."""
        return portable(self.config.method.get("options", {}))

    @property
    def cell_key(self) -> str:
        """What makes a cell apart from its replicates: the config without the run seed (and the seed-dependent
        inputs), the variant folder without a ``seed=`` replicate suffix; a SHA-256 prefix."""
        data = self.config.model_dump()
        for key in REPLICATE_KEYS:
            data.pop(key, None)
        method = dict(data.get("method", {}))
        method["debate"] = {k: v for k, v in method.get("debate", {}).items() if k != "seed"}
        options = {k: v for k, v in method.get("options", {}).items() if k not in ("memory", "poison_seed")}
        method["options"] = options
        data["method"] = method
        payload = json.dumps({"config": data, "variant": replicate_free(self.entry.variant)}, sort_keys=True,
                             default=str)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]


def replicate_free(variant: str) -> str:
    """A variant folder without its replicate part (``sim/variants/seed=1`` -> ``sim``; ``.../gamma=0.5,seed=2`` ->
    ``.../gamma=0.5``)."""
    parts = []
    for part in variant.split("/"):
        kept = ",".join(p for p in part.split(",") if not p.startswith("seed="))
        if kept:
            parts.append(kept)
    if parts and parts[-1] == "variants":
        parts.pop()
    return "/".join(parts)


def root_of(run_dir: Path) -> Path:
    """The folder holding ``runs/`` above ``run_dir`` (else its parent): run paths are relative to it."""
    return next((p.parent for p in [run_dir, *run_dir.parents] if p.name == "runs"), run_dir.parent)


def portable(value: Any) -> Any:
    """``value`` (a JSON value) with every absolute path replaced: relative to the folder holding ``runs/`` when
    it is under one (``runs/demo/bank``), else its last two parts behind ``.../``."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, str) and value.startswith(("/", "~")) and len(value) > 1 and "\n" not in value:
        path = Path(value)
        if any(p.name == "runs" for p in path.parents):
            return path.relative_to(root_of(path)).as_posix()
        return ".../" + "/".join(path.parts[-2:])
    return value


def _utc(timestamp: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(timestamp, tz=_dt.timezone.utc).replace(microsecond=0)


def read_run(run_dir: str | Path) -> ExportRun:
    """One run folder, checked whole (module docstring); :class:`ExportError` naming the file and the field."""
    run_dir = Path(run_dir).resolve()
    config_path = run_dir / CONFIG_FILE
    transcripts = run_dir / TRANSCRIPTS_FILE
    if not run_dir.is_dir():
        raise ExportError(f"{run_dir}: not a folder")
    for path in (config_path, transcripts):
        if not path.is_file():
            raise ExportError(f"{path}: missing (not a finished run folder)")
    try:
        config = run_index.read_config(run_dir)
    except run_index.RunIndexError as exc:
        raise ExportError(str(exc)) from None
    if config.format != FORMAT_VERSION:
        raise ExportError(f"{config_path}: format: {config.format!r}, this version of r2mad reads format "
                          f"{FORMAT_VERSION} (a run folder from another version)")
    if config.r2mad_version != __version__:
        raise ExportError(f"{config_path}: r2mad_version: {config.r2mad_version!r}, this is r2mad {__version__} "
                          "(export it with the version that wrote it)")
    try:
        _, records = load_run(run_dir)
        check_records(transcripts, records, [r.sample_id for r in records], method=config.method["name"],
                      seed=config.seed, split=config.split, benchmark=config.benchmark)
    except (TranscriptError, ValueError) as exc:
        raise ExportError(" ".join(str(exc).split())) from None
    ids = [r.sample_id for r in records]
    if len(set(ids)) != len(ids):
        raise ExportError(f"{transcripts}: sample_id: a question appears twice")
    if len(records) != config.n_samples:
        raise ExportError(f"{transcripts}: {len(records)} finished questions, config.json's n_samples is "
                          f"{config.n_samples} (an incomplete run: finish it with the same command first)")
    try:
        metrics = run_index.read_metrics(run_dir)
        entry = run_index.read_entry(run_dir, root_of(run_dir), correct=False)
    except run_index.RunIndexError as exc:
        raise ExportError(str(exc)) from None
    correct = sum(bool(r.correct) for r in records)
    if int(metrics["n"]) != len(records) or abs(float(metrics["accuracy"]) - correct / max(1, len(records))) > 1e-9:
        raise ExportError(f"{run_dir / run_index.METRICS_FILE}: accuracy: {metrics['accuracy']!r} of n = "
                          f"{metrics['n']!r}, the transcripts give {correct} of {len(records)} (rescore: r2mad score)")
    return ExportRun(path=entry.path, config=config, records=records, metrics=metrics, entry=entry,
                     started=_utc(os.stat(config_path).st_mtime), finished=_utc(os.stat(transcripts).st_mtime))


def read_runs(run_dirs: Sequence[str | Path]) -> list[ExportRun]:
    """Every run folder in ``run_dirs``; a folder holding run folders (``runs/sim``) stands for every run under it
    (:func:`r2mad_lab.report.run_index.find_runs`). The first that cannot be exported stops it
    (:class:`ExportError`)."""
    found: list[Path] = []
    for given in run_dirs:
        path = Path(given)
        if path.is_dir() and not (path / CONFIG_FILE).exists():
            inside = run_index.find_runs(path)
            if not inside:
                raise ExportError(f"{path}: no run folder in it (a config.json beside a transcripts.jsonl)")
            found += inside
        else:
            found.append(path)
    seen: set[Path] = set()
    runs = []
    for path in found:
        if path.resolve() not in seen:
            seen.add(path.resolve())
            runs.append(read_run(path))
    return runs
