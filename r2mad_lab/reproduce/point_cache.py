"""The points' cache: each point of an ablation up to date when its executed configuration ran; the dry run.

The points (:mod:`r2mad_lab.reproduce.points`: a ``--set`` variant, a value of a sweep, one seed of
``--replicates``, or a sweep point under one of its seeds) are cached here and run by
:mod:`r2mad_lab.reproduce.launcher`.

**Cached by what it executes.** A point is up to date when a point with the very same *executed configuration* has
finished before (:class:`PointCache`, our choice in the spirit of :mod:`r2mad_lab.reproduce.up_to_date`). The
configuration is every parameter the notebooks are given, resolved as the kernels resolve it: the profile loaded with
the overrides, with the protocol preset's choices filled in (:func:`executed_configuration`; ``1`` and ``1.0`` the
same). So ``--set top_k=3`` and the ``top_k=3`` point of ``--sweep gamma=0,0.9 --set top_k=3`` (gamma 0.9 being the
profile's) are one point. A finished point's record is keyed by the configuration *read back from its executed
notebooks* (the profile and overrides papermill recorded in each), not by the command line, together with what the
profile's own up-to-date check digests of the code and the environment (:func:`~.up_to_date.environment_digest`) and
the notebooks' bytes. The record (``runs/<profile>/.up_to_date/points/<key>.json``) holds the digests of the executed
notebooks, of the point's artifacts and of the profile's artifacts it was compared with; a point whose folder is
marked ``INCOMPLETE``, or whose executed copies, artifacts or baseline changed since, is not up to date. ``--force``
re-executes.

**The dry run** (:func:`dry_run`): every point with the overrides it runs with, whether it is up to date, and the
expected time from the profile's recorded timings (``timings.json`` of its last run here, else of its committed
run); nothing runs and no folder is made. :func:`show_config` prints one point's every resolved setting.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from r2mad_core.files import atomic_write, file_sha256
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.report.artifacts import jsonable, read_manifest
from r2mad_lab.reproduce import up_to_date
from r2mad_lab.reproduce.notebook_runner import previous_seconds
from r2mad_lab.reproduce.points import INCOMPLETE_MARKER, VARIANTS_DIR, Point, Variant, profile_values, shown_path

#: Where the point records go, in the records' folder (:meth:`PointCache.records`).
POINTS_DIR = "points"
POINT_RECORD_VERSION = 1


# --------------------------------------------------------------------------------------------
# What a point executes, and its key
# --------------------------------------------------------------------------------------------


def canonical(value: Any) -> Any:
    """A value as the key compares it: numbers as floats (``1`` and ``1.0`` are one setting), lists and mappings by
    item, mappings sorted."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        number = float(value)
        return "nan" if math.isnan(number) else number
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return canonical(jsonable(value))


def executed_configuration(profile: Any, overrides: Mapping[str, Any],
                           extra_keys: set[str] | None = None) -> dict[str, Any]:
    """Every parameter the notebooks run with: the profile (a loaded one, or its name or path) with the overrides as a
    kernel applies them (:meth:`~r2mad_lab.experiments.profiles.Profile.with_overrides`), each protocol choice at its
    preset's value (:func:`~.points.profile_values`), as :func:`canonical` compares them."""
    base = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    loaded = base.with_overrides(dict(overrides), extra_keys=extra_keys or ())
    values = profile_values(loaded)
    values.update({k: v for k, v in overrides.items() if k not in values})  # a notebook's own extra parameter
    return canonical({k: v for k, v in values.items() if not k.startswith("_")})


def point_key(configuration: Mapping[str, Any], notebooks: Sequence[Path], environment: str) -> str:
    """The key of a point: its executed configuration, the notebooks (names and bytes) and what they run from."""
    digest = hashlib.sha256()
    digest.update(json.dumps(configuration, sort_keys=True, default=str).encode())
    for notebook in sorted(notebooks):
        digest.update(f"\0{notebook.stem}\0{file_sha256(notebook)}".encode())
    digest.update(f"\1{environment}".encode())
    return digest.hexdigest()[:32]


def artifacts_digest(folder: Path, stems: Sequence[str]) -> str:
    """The manifest entries the notebooks ``stems`` wrote into ``folder`` and their files' bytes."""
    digest = hashlib.sha256()
    for name, record in sorted(read_manifest(folder)["artifacts"].items()):
        if record.get("notebook") not in stems:
            continue
        digest.update(name.encode() + b"\0" + json.dumps(record, sort_keys=True, default=str).encode())
        for file in record.get("files") or []:
            digest.update(f"\0{file}\0{up_to_date.file_digest(folder / file)}".encode())
    return digest.hexdigest()


def read_back(executed: Path) -> tuple[str, dict[str, Any]] | None:
    """The profile and the overrides papermill recorded in an executed notebook (None: no such notebook)."""
    try:
        metadata = json.loads(executed.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return None
    parameters = (metadata.get("papermill") or {}).get("parameters") or {}
    if "profile" not in parameters:
        return None
    return str(parameters["profile"]), dict(parameters.get("overrides") or {})


@dataclass
class Hit:
    """An up-to-date point: where its artifacts are and when it ran."""

    folder: Path
    name: str
    ran_at: str


@dataclass
class PointCache:
    """The records of finished points of one profile (``runs/<profile>/.up_to_date/points/``)."""

    profile: str  # what load_profile takes: the packaged name or the YAML path
    runs_dir: Path
    figures_dir: Path
    executed_root: Path  # notebooks/executed/<profile>/
    notebooks: Callable[[Sequence[str] | None], list[Path]]
    extra_keys: set[str] | None = None
    profile_source: str | None = None
    data_dir: Path | None = None
    force: bool = False
    echo: Callable[[str], None] = print
    _environment: str | None = field(default=None, init=False, repr=False)
    _base: Any = field(default=None, init=False, repr=False)

    @property
    def base(self) -> Any:
        """The profile itself, loaded and validated once: every point's overrides land on it."""
        if self._base is None:
            self._base = load_profile(self.profile)
        return self._base

    @property
    def environment(self) -> str:
        if self._environment is None:
            self._environment = up_to_date.environment_digest(self.profile_source, self.data_dir)
        return self._environment

    def key(self, values: Mapping[str, Any], only: Sequence[str] | None) -> str:
        return point_key(executed_configuration(self.base, values, self.extra_keys), self.notebooks(only),
                         self.environment)

    def records(self, kind: str) -> Path:
        """A folder of the points' records under ``runs/<profile>/`` (``points``, the launcher's ``launcher``):
        inside the up-to-date records' folder, which the profile's own up-to-date digest of ``runs/`` leaves out."""
        return self.runs_dir / up_to_date.RECORD_DIR / kind

    def record_file(self, key: str) -> Path:
        return self.records(POINTS_DIR) / f"{key}.json"

    def lookup(self, values: Mapping[str, Any], only: Sequence[str] | None) -> Hit | None:
        """The finished point with this executed configuration, when everything it made is as it left it."""
        try:
            record = json.loads(self.record_file(self.key(values, only)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("version") != POINT_RECORD_VERSION:
            return None
        folder, executed = self.figures_dir / record["folder"], self.executed_root / record["executed"]
        stems = list(record.get("notebooks") or {})
        if (folder / INCOMPLETE_MARKER).exists() or not stems:
            return None
        if any(up_to_date.file_digest(executed / f"{stem}.ipynb") != digest
               for stem, digest in record["notebooks"].items()):
            return None
        if artifacts_digest(folder, stems) != record.get("artifacts"):
            return None
        if artifacts_digest(self.figures_dir, stems) != record.get("baseline"):
            return None
        return Hit(folder, str(record.get("name") or folder.name), str(record.get("ran_at") or "earlier"))

    def record(self, variant: Variant, only: Sequence[str] | None) -> str | None:
        """After a point ran: its record, keyed by the configuration read back from its executed notebooks (None:
        they disagree, or one is missing: nothing is recorded)."""
        folder = self.figures_dir / VARIANTS_DIR / variant.name
        executed = self.executed_root / VARIANTS_DIR / variant.name
        notebooks = self.notebooks(only)
        keys = set()
        for notebook in notebooks:
            found = read_back(executed / notebook.name)
            if found is None:
                return None
            keys.add(point_key(executed_configuration(found[0], found[1], self.extra_keys), notebooks,
                               self.environment))
        if len(keys) != 1 or (folder / INCOMPLETE_MARKER).exists():
            return None
        key = keys.pop()
        stems = [n.stem for n in notebooks]
        record = {"version": POINT_RECORD_VERSION, "name": variant.name,
                  "overrides": {k: jsonable(v) for k, (v, _) in variant.overrides.items()},
                  "folder": folder.relative_to(self.figures_dir).as_posix(),
                  "executed": executed.relative_to(self.executed_root).as_posix(),
                  "notebooks": {s: up_to_date.file_digest(executed / f"{s}.ipynb") for s in stems},
                  "artifacts": artifacts_digest(folder, stems), "baseline": artifacts_digest(self.figures_dir, stems),
                  "ran_at": time.strftime("%Y-%m-%d %H:%M:%S %Z").strip()}
        path = self.record_file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record, indent=2) + "\n")
        return key

    def up_to_date_line(self, variant: Variant, hit: Hit, label: str = "") -> str:
        where = "" if hit.name == variant.name else f", made as variant {hit.name}"
        point = f"point {label}, " if label and label != variant.name else ""
        return (f"reproduce: up to date, not run: {point}variant {variant.name} (a run with the same executed "
                f"configuration finished {hit.ran_at}{where}; its tables are in {up_to_date_path(hit.folder)}; "
                "--force reruns it)")

    def wrap(self, run: Callable[..., Path | None]) -> Callable[..., Path | None]:
        """``run`` that leaves a point that is up to date (one line says so) and records each point it runs."""
        def cached(values: Mapping[str, Any], variant: Variant | None, only: Sequence[str] | None) -> Path | None:
            if variant is None:
                return run(values, variant, only)
            hit = None if self.force else self.lookup(values, only)
            if hit is not None:
                self.echo(self.up_to_date_line(variant, hit))
                return hit.folder
            folder = run(values, variant, only)
            if folder is not None:
                self.record(variant, only)
            return folder

        return cached


def up_to_date_path(folder: Path) -> str:
    return shown_path(folder)


# --------------------------------------------------------------------------------------------
# The dry run
# --------------------------------------------------------------------------------------------


def recorded_seconds(executed_root: Path, committed_root: Path, stems: Sequence[str]) -> tuple[dict[str, float], str]:
    """Each notebook's wall seconds in the profile's last run here (``timings.json``), else in its committed run;
    with where they were read."""
    for root in (executed_root, committed_root):
        found = previous_seconds(root)
        if found and all(stem in found for stem in stems):
            return {stem: found[stem] for stem in stems}, up_to_date_path(root / "timings.json")
    return {}, ""


def expected_time(whole: str, executed_root: Path, committed_root: Path, notebooks: Sequence[Path], every: int) -> str:
    """The expected time of the notebooks a run executes: ``whole`` (the profile's stated time) when it runs all
    ``every`` notebooks; for a part (``--only``, a variant's or a sweep point's notebooks) their own wall seconds in
    the last recorded run (:func:`recorded_seconds`), never the whole profile's (a variant of notebook 04
    once stated the time of all ten)."""
    if len(notebooks) >= every:
        return whole
    stems = [notebook.stem for notebook in notebooks]
    seconds, source = recorded_seconds(executed_root, committed_root, stems)
    if not seconds:
        return f"less than the whole profile's {whole} (no recorded time of {', '.join(stems)} alone)"
    return f"about {duration(sum(seconds.values()))} for {', '.join(stems)} (their last recorded run, {source})"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def dry_run(points: Sequence[Point], cache: PointCache, only: Sequence[str] | None, *, jobs: int,
            baseline_missing: Sequence[str], committed_root: Path, expected_minutes: float | None,
            echo: Callable[[str], None] = print) -> int:
    """Print every point, what it runs with, whether it is up to date, and the expected time; execute nothing."""
    stems = [n.stem for n in cache.notebooks(only)]
    seconds, source = recorded_seconds(cache.executed_root, committed_root, stems)
    per_point = sum(seconds.values()) if seconds else None
    if per_point is None and expected_minutes:
        per_point, source = float(expected_minutes) * 60, "the profile's expected_runtime_minutes (no recorded timings)"
    echo(f"reproduce: dry run: {len(points)} point{'s' if len(points) != 1 else ''} of notebooks {', '.join(stems)}; "
         f"nothing is executed")
    to_run = []
    width = len(str(len(points)))
    for number, point in enumerate(points, start=1):
        if point.variant is None:
            state = ("to run (the profile itself has not run " + ", ".join(baseline_missing) + ")"
                     if baseline_missing else "up to date (the profile's own run)")
            if baseline_missing:
                to_run.append(point)
            settings = "the profile's own values"
        else:
            hit = None if cache.force else cache.lookup(point.values, only)
            state = (f"up to date ({up_to_date_path(hit.folder)}, ran {hit.ran_at})" if hit is not None else "to run")
            if hit is None:
                to_run.append(point)
            settings = point.variant.describe()
        echo(f"  [{number:>{width}}] {point.label()}: {settings}; {state}")
    if per_point is not None and to_run:
        serial = per_point * len(to_run)
        at_once = max(1, min(jobs, len(to_run)))
        echo(f"reproduce: {len(points) - len(to_run)} of {len(points)} up to date, {len(to_run)} to run: expected "
             f"about {duration(serial / at_once)} at {at_once} at a time ({duration(per_point)} a point, "
             f"{duration(serial)} one by one; from {source})")
    else:
        echo(f"reproduce: {len(points) - len(to_run)} of {len(points)} up to date, {len(to_run)} to run"
             + ("" if per_point is not None or not to_run else " (no recorded timings to estimate the time from)"))
    echo("reproduce: --show-config N prints every setting point N runs with")
    return 0


def show_config(points: Sequence[Point], number: int, cache: PointCache, echo: Callable[[str], None] = print) -> int:
    """Every resolved setting of point ``number`` (1-based), as YAML."""
    if not 1 <= number <= len(points):
        raise ValueError(f"--show-config {number}: there are {len(points)} points (1 to {len(points)})")
    point = points[number - 1]
    configuration = profile_values(cache.base.with_overrides(point.values, extra_keys=cache.extra_keys or ()))
    echo(f"# point {number} of {len(points)}: {point.label()} ({point.name}); nothing is executed")
    echo(yaml.safe_dump(jsonable(configuration), sort_keys=True, default_flow_style=None).rstrip())
    return 0
