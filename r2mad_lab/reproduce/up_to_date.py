"""Which notebooks a rerun may leave as they are: those whose inputs and outputs are as their last run left them.

``make reproduce`` run again with nothing changed would execute every notebook to write the same bytes (every cell
replayed from ``runs/``, most of a minute for the sim profile). Like ``make`` with its targets, a rerun
instead executes only the notebooks that are out of date, and says which it left and why. A notebook is up to date
when all of these are as the last successful run of this profile (or variant) in this folder recorded them:

- what every notebook runs from (:func:`environment_digest`): every file of ``r2mad_core`` (code, packaged data,
  profiles), the plugins' source, the installed distributions and their versions, the Python version, the
  ``R2MAD_*`` and BLAS environment variables, a YAML profile given by path, and the files of ``--data-dir`` (their
  sizes and times);
- what it reads and writes (:func:`outputs_digest`): every file under ``runs/<profile>/`` (its path, inode, size,
  modification and change times: the transcripts are hundreds of MB) and every figure and table of the run's
  artifacts folder (their bytes; a variant's folder apart from the profile's);
- the notebook itself (its bytes), the parameters it is given, and its executed copy (its bytes);
- and none of the notebooks it runs after (:func:`~r2mad_lab.reproduce.notebook_runner.prerequisites`) ran.

Any difference in the first two reruns every notebook; in the last two, that notebook and those after it (the report,
10, runs after all). ``--force`` reruns every notebook, ``--fresh`` and ``--only`` never skip one, and a budget-
guarded or estimated run never consults the record. The record is written only when every notebook succeeded, to
``runs/<profile>/.up_to_date/<profile or variant>.json`` (runs/ is not committed: a fresh clone runs everything).
Our choice (no source speaks to it); docs/performance.md has the timings.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from r2mad_core.files import atomic_write, file_sha256, file_stamps
from r2mad_lab import CODE_PACKAGES

#: The folder under ``runs/<profile>/`` holding the records (left out of the runs' own digest).
RECORD_DIR = ".up_to_date"
RECORD_VERSION = 1
#: Environment variables that change what a notebook does or how it computes (BLAS threads change no bytes, but
#: are cheap to include).
ENVIRONMENT_PREFIXES = ("R2MAD_",)
ENVIRONMENT_NAMES = ("OPENBLAS_NUM_THREADS",)
PACKAGE_ROOTS = tuple(Path(__file__).resolve().parents[2] / package for package in CODE_PACKAGES)
NO_RECORD = "no record of an earlier complete run in this folder"


def _files(root: Path, skip_dirs: Iterable[str] = ()) -> list[Path]:
    """Every file under ``root``, sorted, without ``__pycache__`` folders, compiled files, atomic_write's
    temporaries or the folders named in ``skip_dirs`` (at the top level)."""
    if not root.is_dir():
        return []
    skip = set(skip_dirs)
    found = []
    for folder, dirs, files in os.walk(root):
        top = Path(folder) == root
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (top and d in skip))
        for name in files:
            if name.endswith((".pyc", ".pyo")) or (name.startswith(".") and ".tmp" in name):
                continue
            found.append(Path(folder) / name)
    return sorted(found)


def content_digest(root: Path, skip_dirs: Iterable[str] = ()) -> str:
    """SHA-256 over every file's path (relative to ``root``) and bytes."""
    digest = hashlib.sha256()
    for path in _files(root, skip_dirs):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(file_sha256(path).encode())
        digest.update(b"\1")
    return digest.hexdigest()


def stat_digest(root: Path | None, skip_dirs: Iterable[str] = ()) -> str:
    """SHA-256 over every file's path and stamp (:func:`~r2mad_core.files.file_stamps`: inode, size, modification
    and change times): for folders too large to read."""
    digest = hashlib.sha256()
    if root is None:
        return digest.hexdigest()
    files = _files(root, skip_dirs)
    # None: a file went while listed
    for path, stamp in zip(files, file_stamps(files) or [None] * len(files), strict=False):
        digest.update(f"{path.relative_to(root).as_posix()}\0{stamp}\1".encode())
    return digest.hexdigest()


def installed_distributions() -> list[str]:
    """The installed distributions as their metadata folders name them (``numpy-2.1.3.dist-info``: name and
    version), on every folder of ``sys.path``: reading each one's metadata instead was slow on every call."""
    names = set()
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as found:
                names.update(e.name for e in found if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:  # a zip file, a folder that is gone
            continue
    return sorted(names)


def plugins_digest() -> str:
    """The source of every plugin module (``R2MAD_PLUGINS``, the ``r2mad.plugins`` entry points): a plugin's file,
    or its package's folder (an editable install's edits change no distribution's version)."""
    import importlib.util

    from r2mad_core.plugins import plugin_names

    digest = hashlib.sha256()
    for name in plugin_names():
        digest.update(name.encode() + b"\0")
        if name.endswith(".py") and Path(name).is_file():
            digest.update(file_sha256(name).encode())
            continue
        try:
            spec = importlib.util.find_spec(name.split(":", 1)[0])
        except (ImportError, ValueError):
            spec = None
        origin = Path(spec.origin) if spec is not None and spec.origin and spec.origin != "built-in" else None
        if origin is not None and origin.is_file():
            package = origin.parent if origin.name == "__init__.py" else None
            digest.update((content_digest(package) if package else file_digest(origin) or "").encode())
    return digest.hexdigest()


def environment_digest(profile_source: str | None, data_dir: Path | None) -> str:
    """What every notebook runs from: the package's files, the installed distributions, Python, the environment."""
    digest = hashlib.sha256()
    for root in PACKAGE_ROOTS:
        digest.update(content_digest(root).encode())
    digest.update("\n".join(installed_distributions()).encode())
    digest.update(f"{sys.version}\0{platform.machine()}".encode())
    variables = sorted((k, v) for k, v in os.environ.items()
                       if k.startswith(ENVIRONMENT_PREFIXES) or k in ENVIRONMENT_NAMES)
    digest.update(json.dumps(variables).encode())
    digest.update(plugins_digest().encode())
    if profile_source and Path(profile_source).is_file():
        path = Path(profile_source).resolve()
        # a packaged profile is in the code's digest already
        if not any(root in path.parents for root in PACKAGE_ROOTS):
            digest.update(file_sha256(path).encode())
    digest.update(stat_digest(data_dir).encode())
    return digest.hexdigest()


def outputs_digest(runs_dir: Path, artifacts_dir: Path, other_runs: Iterable[str]) -> str:
    """What the notebooks read and write: the run folders (by their files' stamps) and the figures and tables (by
    bytes), without ``other_runs``, the subfolders of the artifacts folder that belong to other runs (the points of
    an ablation: :data:`r2mad_lab.reproduce.points.POINT_FOLDERS`)."""
    digest = hashlib.sha256()
    digest.update(stat_digest(runs_dir, skip_dirs=(RECORD_DIR,)).encode())
    digest.update(content_digest(artifacts_dir, skip_dirs=other_runs).encode())
    return digest.hexdigest()


def notebook_digest(notebook: Path, parameters: Mapping[str, Any]) -> str:
    """The notebook's bytes and the parameters it is given."""
    digest = hashlib.sha256()
    digest.update(file_sha256(notebook).encode())
    digest.update(json.dumps(parameters, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def file_digest(path: Path) -> str | None:
    """:func:`~r2mad_core.files.file_sha256`, None for a missing file."""
    return file_sha256(path) if path.is_file() else None


@dataclass(frozen=True)
class Decision:
    """Which notebooks run and which are left, with why the first ones run and when the left ones last ran."""

    run: tuple[Path, ...]
    left: tuple[Path, ...]
    reason: str  # why the notebooks that start the reruns run (NO_RECORD on a first run; "" when none runs)
    ran_at: Mapping[str, str]  # each left notebook's last run, as the record says


def record_path(runs_dir: Path, name: str) -> Path:
    return runs_dir / RECORD_DIR / f"{name}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("version") == RECORD_VERSION else None


def decide(notebooks: Sequence[Path], needs: Mapping[Path, set[Path]], record: Mapping[str, Any] | None,
           environment: str, outputs: str, notebook_digests: Mapping[str, str], executed_dir: Path) -> Decision:
    """The notebooks to run: every one when there is no record or the environment or outputs differ from it;
    else those whose own digest or executed copy differ, and every notebook that runs after one of them."""
    if record is None:
        return Decision(tuple(notebooks), (), NO_RECORD, {})
    if record.get("environment") != environment:
        return Decision(tuple(notebooks), (), "the code, the installed packages, Python or the environment changed",
                        {})
    if record.get("outputs") != outputs:
        return Decision(tuple(notebooks), (), "a run folder, figure or table changed since the last run", {})
    entries = record.get("notebooks", {})
    stale: dict[Path, str] = {}
    for notebook in notebooks:  # in order: a notebook's prerequisites come before it
        entry = entries.get(notebook.stem)
        if not isinstance(entry, dict):
            stale[notebook] = "not in the last run"
        elif entry.get("inputs") != notebook_digests[notebook.stem]:
            stale[notebook] = "the notebook or its parameters changed"
        elif entry.get("executed") != file_digest(executed_dir / notebook.name):
            stale[notebook] = "its executed copy is missing or changed"
        elif needs[notebook] & stale.keys():
            stale[notebook] = "runs after one that runs"
    run = tuple(n for n in notebooks if n in stale)
    left = tuple(n for n in notebooks if n not in stale)
    reason = "; ".join(f"{n.stem}: {stale[n]}" for n in run if not needs[n] & stale.keys())
    return Decision(run, left, reason, {n.stem: str(entries[n.stem].get("ran_at", "")) for n in left})


def forget(record_file: Path) -> None:
    """Before a run that may fail half-way: no record claims the folder is as a complete run left it."""
    try:
        record_file.unlink()
    except FileNotFoundError:
        pass


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


class Check:
    """One run's use of the record: which notebooks are out of date before it, the record after it."""

    def __init__(self, notebooks: Sequence[Path], profile: Any, paths: Any,
                 parameters: Callable[[Path], Mapping[str, Any]], *, needs: Mapping[Path, set[Path]],
                 other_runs: Iterable[str]) -> None:
        """``needs``: each notebook's prerequisites (:func:`~r2mad_lab.reproduce.notebook_runner.prerequisites`);
        ``other_runs``: the artifacts folder's subfolders of other runs, not this run's outputs."""
        self.notebooks = list(notebooks)
        self.other_runs = tuple(other_runs)
        self.paths = paths
        self.profile_source = profile.source
        self.needs = dict(needs)
        self.file = record_path(paths.runs_dir, paths.variant or profile.folder)
        self.environment = environment_digest(self.profile_source, paths.data_dir)
        self.digests = {n.stem: notebook_digest(n, parameters(n)) for n in self.notebooks}
        self.ran_at: dict[str, str] = {}  # the left notebooks' last runs
        self.ran_none = False

    def out_of_date(self, echo: Callable[[str], None], run_all: bool = False) -> list[Path]:
        """The notebooks to run (``run_all``: every one, as ``--force``); those left are named in one line, with why
        the others run. The record is forgotten when any runs."""
        if run_all:
            self.forget()
            return list(self.notebooks)
        decision = decide(self.notebooks, self.needs, _read(self.file), self.environment,
                          outputs_digest(self.paths.runs_dir, self.paths.artifacts_dir, self.other_runs), self.digests,
                          self.paths.executed_dir)
        self.ran_at = dict(decision.ran_at)
        total = len(self.notebooks)
        if decision.left:
            last = max(decision.ran_at.values(), default="")
            names = "every notebook" if not decision.run else ", ".join(n.stem for n in decision.left)
            echo(f"reproduce: up to date, not run: {names} (their inputs and outputs are as their last runs left "
                 f"them, the latest ending {last or 'earlier'}; --force reruns them)")
        if decision.run:
            if decision.reason != NO_RECORD:
                echo(f"reproduce: running {len(decision.run)} of {total} notebooks ({decision.reason})")
            self.forget()
        self.ran_none = not decision.run
        return list(decision.run)

    def forget(self) -> None:
        forget(self.file)

    def record(self) -> None:
        """After a run in which every notebook ran or was up to date (unchanged when none ran); nothing is recorded
        when what the notebooks run from changed while they ran (an edit of the code half-way)."""
        if self.ran_none:
            return
        if environment_digest(self.profile_source, self.paths.data_dir) != self.environment:
            self.forget()
            return
        now = _now()
        record = {
            "version": RECORD_VERSION,
            "environment": self.environment,
            "outputs": outputs_digest(self.paths.runs_dir, self.paths.artifacts_dir, self.other_runs),
            "notebooks": {stem: {"inputs": digest,
                                 "executed": file_digest(self.paths.executed_dir / f"{stem}.ipynb"),
                                 "ran_at": self.ran_at.get(stem, now)}
                          for stem, digest in sorted(self.digests.items())},
        }
        self.file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.file, json.dumps(record, indent=2) + "\n")


def last_run(paths: Any, profile: Any) -> str:
    """When the latest recorded notebook run of ``paths``' profile (or variant) ended."""
    record = _read(record_path(paths.runs_dir, paths.variant or profile.folder)) or {}
    times = [str(entry.get("ran_at", "")) for entry in record.get("notebooks", {}).values() if isinstance(entry, dict)]
    return max(times, default="") or "earlier"
