"""Published runs replay: a real-engine profile's committed tables ship with the generations that made them.

A batching engine's completions depend on what else is in the batch (its floating-point reductions change with the
batch; per-request seeds do not make completions batch-invariant), so a fresh run of a real model differs from the
committed one. The fix is to ship the generations: ``published/<profile>/responses.sqlite`` (a compacted copy of the
run's response cache, :mod:`r2mad_lab.engines.cache`) and ``published/<profile>/manifest.json`` (profile, commit,
rows, sha256, each local model file's sha256 and quantization) at the repository's root, beside ``figures/<profile>/``
and ``notebooks/executed/<profile>/``, the other committed outputs of the same run. There a fresh clone and CI's
copy find it (both hold every tracked file); the wheel does not carry it (it has no figures to replay either).

- :func:`before_run` (``make reproduce``): when ``cache/<profile>/`` holds no response cache yet and the profile has a
  published one, copy it there (the published file is never opened for writing) and say so in one line. ``--fresh``
  skips it.
- :func:`compare_tables` (after ``--fresh``, or a run that was just seeded): which committed table CSVs moved and by
  how much, one line per table.
- :func:`publish` (``make publish PROFILE=cpu``): the maintainer's step after regenerating a profile. The manifest
  keeps the notebooks' wall seconds in the run that made the generations (``generation_seconds``, from that run's
  ``timings.json``): :func:`generation_hints` gives them to a run that generates anew, whose progress line would
  otherwise estimate the time left from a replay's timings (minutes for what takes an hour).

Which profiles publish is a convention: those with a real engine (any agent not simulated). Simulated agents are
deterministic, so ``sim`` and ``tiny`` have nothing to publish and behave as before. docs/engines.md, "Published runs".
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import hashlib
import io
import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_lab.engines.cache import CACHE_FILENAME, COLUMNS
from r2mad_lab.experiments.profiles import Profile, ProfileError, load_profile

REPOSITORY = Path(__file__).resolve().parents[2]
#: Where published caches live: ``<repository>/published/<profile folder>/``.
PUBLISHED_DIR = REPOSITORY / "published"
MANIFEST_NAME = "manifest.json"
#: Written beside a seeded cache (``cache/<profile>/``, git-ignored): which published file it came from.
SEEDED_MARKER = "published.json"
#: How many of a table's largest changes one line names.
LARGEST = 3


class PublishedError(ProfileError):
    """A published cache that cannot be used or made: one line, reported as a profile error is (exit 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fresh", "--no-replay", dest="fresh", action="store_true",
                        help="generate anew: do not seed cache/<profile>/ from the published generations "
                        "(published/<profile>/); at the end, say which committed table CSVs moved and by how much")


def publishes(profile: Profile) -> bool:
    """Whether ``profile`` publishes its generations: some agent runs a real engine (simulated ones are
    deterministic)."""
    models = [m for m in [*profile["models"], *(profile.fields.get("large_models") or [])] if not m.get("stand_in")]
    return any(m.get("engine") != "simulated" for m in models)


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    for base in (Path.cwd().resolve(), REPOSITORY):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return str(path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def has_cache(cache_dir: Path) -> bool:
    """Whether ``cache_dir`` already holds a response cache (its file or a left-over write-ahead log)."""
    return any((Path(cache_dir) / f"{CACHE_FILENAME}{suffix}").exists() for suffix in ("", "-wal"))


def read_manifest(folder: Path) -> dict[str, Any]:
    """A published ``manifest.json``, validated: one line naming the file and the field when it is missing, damaged
    or of the wrong shape (``[]``, a sha256 that is not 64 hex digits, a negative row count)."""
    path = Path(folder) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PublishedError(f"{_shown(path)} is missing: a published cache comes with its manifest "
                             f"(make publish PROFILE=...), or run with --fresh") from None
    except (OSError, ValueError) as exc:
        raise PublishedError(f"{_shown(path)}: unreadable ({exc}); restore it from git or run with --fresh") from None
    restore = "restore it from git or run with --fresh"
    if not isinstance(manifest, dict):
        raise PublishedError(f"{_shown(path)}: expected a JSON object with sha256, rows, commit, found "
                             f"{type(manifest).__name__} {json.dumps(manifest)[:40]}; {restore}")
    checks = {
        "sha256": (lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None,
                   "64 hexadecimal digits"),
        "rows": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0"),
        "commit": (lambda v: v is None or isinstance(v, str), "a commit hash or null"),
    }
    for name, (valid, expected) in checks.items():
        if name not in manifest and name != "commit":
            raise PublishedError(f"{_shown(path)}: field {name!r} is missing; {restore}")
        if not valid(manifest.get(name)):
            raise PublishedError(f"{_shown(path)}: field {name!r}: expected {expected}, found "
                                 f"{json.dumps(manifest.get(name))[:40]}; {restore}")
    return manifest


def seed(folder: str, cache_dir: Path, published_dir: Path = PUBLISHED_DIR) -> dict[str, Any] | None:
    """Copy ``published_dir/<folder>/responses.sqlite`` into ``cache_dir`` when it holds no cache yet; return the
    published manifest, or None when nothing was copied (no published cache, or a cache already there)."""
    source_dir = Path(published_dir) / folder
    source = source_dir / CACHE_FILENAME
    if not source.is_file() or has_cache(cache_dir):
        return None
    manifest = read_manifest(source_dir)
    found = _sha256(source)
    if found != manifest.get("sha256"):
        raise PublishedError(f"{_shown(source)} does not match its manifest (sha256 {found[:12]}, manifest "
                             f"{str(manifest.get('sha256'))[:12]}): restore both from git "
                             f"(git checkout -- {_shown(source_dir)}) or run with --fresh")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{CACHE_FILENAME}.", suffix=".tmp", dir=cache_dir)
    os.close(handle)
    try:
        shutil.copyfile(source, temporary)
        os.replace(temporary, cache_dir / CACHE_FILENAME)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    marker = {**manifest, "seeded_from": _shown(source),
              "seeded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    (cache_dir / SEEDED_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return manifest


@dataclass
class Replay:
    """What :func:`before_run` did, for :meth:`after_run`: whether the cache was seeded, whether the run is fresh,
    and the committed tables to compare with (read before the run, which may overwrite them)."""

    folder: str
    fresh: bool = False
    seeded: dict[str, Any] | None = None
    committed: dict[str, str] = field(default_factory=dict)
    reference: str = ""

    def after_run(self, artifacts_dir: Path, echo: Callable[[str], None] = print) -> None:
        """After ``--fresh`` or a seeded run: the committed tables against this run's (one line each that moved)."""
        if not (self.fresh or self.seeded) or self.reference == "":
            return
        if not self.committed:
            echo(f"reproduce: no committed tables in {self.reference} to compare this run with")
            return
        current = {p.name: p.read_text(encoding="utf-8") for p in sorted(Path(artifacts_dir).glob("*.csv"))}
        what = "this fresh run" if self.fresh else "this replay of the published generations"
        for line in compare_tables(self.committed, current, reference=self.reference, what=what):
            echo(line)


def before_run(profile: Profile, paths: Any, *, fresh: bool = False, echo: Callable[[str], None] = print,
               published_dir: Path | None = None, repository: Path | None = None) -> Replay:
    """``make reproduce``'s hook before the notebooks run: seed ``paths.cache_dir`` from the published cache
    (``published_dir``, default :data:`PUBLISHED_DIR`) unless ``fresh``; say in one line what the run replays. A
    variant run seeds the shared cache but compares nothing."""
    published_dir = Path(published_dir) if published_dir is not None else PUBLISHED_DIR
    repository = Path(repository) if repository is not None else REPOSITORY
    folder = profile.folder
    replay = Replay(folder, fresh=fresh)
    published = Path(published_dir) / folder / CACHE_FILENAME
    cache = Path(paths.cache_dir) / CACHE_FILENAME
    if fresh:
        line = (f"reproduce: --fresh: the published generations ({_shown(published)}) are not used"
                if published.is_file() else "reproduce: --fresh: generating anew")
        if has_cache(paths.cache_dir):
            seeded = " (seeded from the published ones)" if (Path(paths.cache_dir) / SEEDED_MARKER).is_file() else ""
            line += (f"; {_shown(cache)} already holds generations{seeded}, replayed: for a run from nothing remove "
                     f"{_shown(paths.cache_dir)} and {_shown(paths.runs_dir)} first")
        echo(line)
    else:
        replay.seeded = seed(folder, paths.cache_dir, published_dir)
        if replay.seeded is not None:
            made = str(replay.seeded.get("commit") or "?")[:7]
            echo(f"reproduce: replaying the published generations: {_shown(published)} ({replay.seeded.get('rows')} "
                 f"generations, published at {made}) copied to {_shown(cache)}; --fresh generates anew")
        elif publishes(profile) and not has_cache(paths.cache_dir):
            echo(f"reproduce: profile {profile.name} has no published generations ({_shown(published)}): every "
                 "generation is made here and may differ from the committed run's (docs/engines.md, Published runs)")
    if (replay.fresh or replay.seeded) and not getattr(paths, "variant", None):
        replay.committed, replay.reference = committed_tables(folder, repository)
    return replay


def committed_tables(folder: str, repository: Path = REPOSITORY) -> tuple[dict[str, str], str]:
    """The table CSVs of ``figures/<folder>/`` as committed (git HEAD), else as on disk now; and what they are."""
    prefix = f"figures/{folder}/"
    try:
        listed = subprocess.run(["git", "-C", str(repository), "ls-tree", "--name-only", "HEAD", prefix],
                                capture_output=True, text=True, check=True, timeout=60).stdout.split()
        names = [n for n in listed if n.endswith(".csv") and "/" not in n[len(prefix):]]
        head = subprocess.run(["git", "-C", str(repository), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()
        batch = subprocess.run(["git", "-C", str(repository), "cat-file", "--batch"], input="".join(
            f"HEAD:{n}\n" for n in names).encode(), capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        disk = sorted((Path(repository) / prefix).glob("*.csv"))
        return {p.name: p.read_text(encoding="utf-8") for p in disk}, prefix.rstrip("/")
    tables: dict[str, str] = {}
    position = 0
    for name in names:
        end = batch.index(b"\n", position)
        size = int(batch[position:end].split()[2])
        tables[Path(name).name] = batch[end + 1:end + 1 + size].decode("utf-8")
        position = end + 1 + size + 1
    return tables, f"{prefix.rstrip('/')} at {head}"


_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _number(text: str) -> float | None:
    """A cell's number: the whole cell, or its leading number (``"0.500 [0.2, 0.8]"`` -> 0.5)."""
    found = _NUMBER.match(text or "")
    try:
        return float(found.group(0)) if found else None
    except ValueError:
        return None


def _rows(text: str) -> list[list[str]]:
    return [row for row in csv.reader(io.StringIO(text))]


def table_changes(committed: str, current: str, largest: int = LARGEST) -> tuple[int, int, list[str]] | str:
    """``(changed cells, cells, the largest changes)`` between two CSV texts of one table, or a sentence when their
    shapes differ. A change reads ``row label / column: old -> new (difference)``, the largest difference first."""
    old, new = _rows(committed), _rows(current)
    if old and new and old[0] != new[0] and len(old) == len(new):  # columns added or dropped: the shared ones compared
        shared = [c for c in old[0] if c in new[0]]
        if shared:
            def project(rows: list[list[str]]) -> str:
                at = [rows[0].index(c) for c in shared]
                out = io.StringIO()
                csv.writer(out, lineterminator="\n").writerows([[r[i] if i < len(r) else "" for i in at] for r in rows])
                return out.getvalue()

            added = [c for c in new[0] if c not in old[0]]
            dropped = [c for c in old[0] if c not in new[0]]
            said = "; ".join(part for part in (f"columns added: {', '.join(added)}" if added else "",
                                               f"columns dropped: {', '.join(dropped)}" if dropped else "") if part)
            found = table_changes(project(old), project(new), largest)
            if isinstance(found, str):
                return f"{said}; {found}"
            changed, cells, largest_changes = found
            return (f"{said}; on the {len(shared)} other columns {changed} of {cells} cells changed"
                    + (f"; largest: {'; '.join(largest_changes)}" if largest_changes else ""))
    if not old or not new or old[0] != new[0] or len(old) != len(new):
        only_old = len({tuple(r) for r in old[1:]} - {tuple(r) for r in new[1:]})
        only_new = len({tuple(r) for r in new[1:]} - {tuple(r) for r in old[1:]})
        return (f"shape changed: {max(len(old) - 1, 0)} -> {max(len(new) - 1, 0)} rows"
                + ("" if old[:1] == new[:1] else ", other columns")
                + f"; {only_old} committed rows not in this run, {only_new} new")
    header, changes, cells = old[0], [], 0
    for before, after in zip(old[1:], new[1:], strict=False):
        # the row's label: its words that this run kept (method, benchmark, quantity), not the numbers
        label = "/".join(a for a, b in zip(before, after,
                                           strict=False) if a and a == b and _number(a) is None)[:60] or "row"
        for column, a, b in zip(header, before, after, strict=False):
            cells += 1
            if a == b:
                continue
            x, y = _number(a), _number(b)
            size = abs(y - x) if x is not None and y is not None and math.isfinite(y - x) else math.inf
            delta = f" ({y - x:+.4g})" if size != math.inf else ""
            changes.append((size, f"{label} / {column}: {a or '(empty)'} -> {b or '(empty)'}{delta}"))
    changes.sort(key=lambda c: (c[0] == math.inf, -c[0] if c[0] != math.inf else 0.0))  # text changes last
    return len(changes), cells, [text for _, text in changes[:largest]]


def compare_tables(committed: Mapping[str, str], current: Mapping[str, str], *, reference: str = "the committed tables",
                   what: str = "this run") -> list[str]:
    """Lines saying which tables of ``committed`` (name -> CSV text) moved in ``current``, and by how much."""
    lines, moved, same, missing = [], 0, 0, []
    for name in sorted(committed):
        if name not in current:
            missing.append(name)
            continue
        if committed[name] == current[name]:
            same += 1
            continue
        moved += 1
        found = table_changes(committed[name], current[name])
        if isinstance(found, str):
            lines.append(f"  {name}: {found}")
        else:
            changed, cells, largest = found
            lines.append(f"  {name}: {changed} of {cells} cells changed; largest: " + "; ".join(largest))
    head = (f"reproduce: {what} against {reference}: {moved} of {moved + same} tables moved, {same} identical"
            + (f"; {len(missing)} not made by this run ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})"
               if missing else ""))
    return [head, *lines]


# --------------------------------------------------------------------------------------------
# Publishing (the maintainer, after regenerating a profile)
# --------------------------------------------------------------------------------------------


def _git(repository: Path, *args: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _outside(folder: Path, repository: Path) -> list[str]:
    """A git pathspec leaving ``folder`` out, when it is inside ``repository``."""
    try:
        return [f":(exclude){Path(folder).resolve().relative_to(Path(repository).resolve()).as_posix()}"]
    except ValueError:
        return []


def model_files(models: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Each local model file that made the published generations (``models``' keys: ``<identity> <model>``), read
    back from the file on this machine: sha256, tensor types (its quantization) and, for a file re-quantized at
    first use, the file it was made from (:func:`r2mad_lab.engines.requantize.file_record`)."""
    from r2mad_core.engine import EngineError
    from r2mad_lab.engines.local import packaged_model_path
    from r2mad_lab.engines.requantize import file_record

    try:
        packaged: Path | None = packaged_model_path()
    except EngineError:
        packaged = None
    identities = sorted({key.split(" ", 1)[0] for key in models if key.startswith("local:")})
    return {identity: file_record(identity, packaged=packaged) for identity in identities}


def generation_seconds(executed_dir: Path | None, cache_dir: Path) -> dict[str, float] | None:
    """Each notebook's wall seconds in the run that made ``cache_dir``'s generations: ``executed_dir/timings.json``
    when that cache was generated here (no :data:`SEEDED_MARKER`: a seeded cache's last run was a replay), else None."""
    if executed_dir is None or (Path(cache_dir) / SEEDED_MARKER).is_file():
        return None
    try:
        timings = json.loads((Path(executed_dir) / "timings.json").read_text(encoding="utf-8"))
        found = {name: round(float(entry["seconds"]), 2) for name, entry in sorted(timings.items())
                 if entry.get("succeeded", True)}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return found or None


def generation_hints(profile: Profile, cache_dir: Path, published_dir: Path = PUBLISHED_DIR) -> dict[str, float]:
    """The notebooks' expected wall seconds for a run that generates every completion anew (``cache_dir`` holds no
    cache yet after :func:`before_run`: ``--fresh`` from nothing, or no published cache): the published run's
    ``generation_seconds``; empty otherwise (a replay or a resumed run: the folder's own timings are the better
    guess)."""
    if has_cache(cache_dir):
        return {}
    try:
        manifest = json.loads((Path(published_dir) / profile.folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        return {str(name): float(seconds) for name, seconds in (manifest.get("generation_seconds") or {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def publish(profile: Profile, cache_dir: Path, published_dir: Path = PUBLISHED_DIR,
            repository: Path = REPOSITORY, executed_dir: Path | None = None) -> dict[str, Any]:
    """Copy ``cache_dir/responses.sqlite`` compacted (``VACUUM INTO``, rollback journal: one self-contained file) to
    ``published_dir/<profile>/`` with ``manifest.json``; return the manifest. Replaces an earlier publication.
    ``executed_dir``: the folder of the run's executed notebooks, whose ``timings.json`` becomes the manifest's
    ``generation_seconds`` when the cache was generated there (:func:`generation_seconds`)."""
    if not publishes(profile):
        raise PublishedError(f"profile {profile.name}: its agents are simulated (deterministic: a rerun makes the "
                             "same tables), nothing to publish")
    source = Path(cache_dir) / CACHE_FILENAME
    if not source.is_file():
        raise PublishedError(f"{_shown(source)} does not exist: run make reproduce PROFILE={profile.name} first")
    target_dir = Path(published_dir) / profile.folder
    target_dir.mkdir(parents=True, exist_ok=True)
    temporary = target_dir / f".{CACHE_FILENAME}.publishing.tmp"
    temporary.unlink(missing_ok=True)
    try:
        connection = sqlite3.connect(source)
        try:
            columns = tuple(row[1] for row in connection.execute("PRAGMA table_info(responses)"))
            if columns != COLUMNS:
                raise PublishedError(f"{_shown(source)}: not an r2mad response cache (columns {list(columns)})")
            connection.execute("VACUUM INTO ?", (str(temporary),))
        finally:
            connection.close()
        connection = sqlite3.connect(temporary)
        try:
            connection.execute("PRAGMA journal_mode = DELETE")
            rows = connection.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            models = {f"{identity} {model}": count for identity, model, count in connection.execute(
                "SELECT identity, model, COUNT(*) FROM responses GROUP BY identity, model ORDER BY identity, model")}
        finally:
            connection.close()
    except sqlite3.Error as exc:
        temporary.unlink(missing_ok=True)
        raise PublishedError(f"{_shown(source)}: cannot copy ({exc})") from None
    except PublishedError:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, target_dir / CACHE_FILENAME)
    target = target_dir / CACHE_FILENAME
    figures = Path(repository) / "figures" / profile.folder / "MANIFEST.json"
    made_at: list[str] = []
    if figures.is_file():
        try:
            artifacts = json.loads(figures.read_text(encoding="utf-8")).get("artifacts", {})
            made_at = sorted({(a.get("git") or {}).get("commit") for a in artifacts.values()} - {None})
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise PublishedError(f"{_shown(figures)}: field 'artifacts': expected an object of artifacts each with "
                                 f"its git commit ({type(exc).__name__}: {exc}); restore it from git") from None
    manifest = {
        "profile": profile.name,
        "commit": _git(repository, "rev-parse", "HEAD"),
        # tracked files changed but this publication itself (which always changes published/<profile>/)
        "dirty": bool(_git(repository, "status", "--porcelain", "--untracked-files=no", "--", ".",
                           *_outside(target_dir, repository))),
        "figures_made_at": made_at,
        "rows": rows,
        "bytes": target.stat().st_size,
        "sha256": _sha256(target),
        "models": models,
        "model_files": model_files(models),
        "source": f"cache/{profile.folder}/{CACHE_FILENAME}",
        "published": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    made_in = generation_seconds(executed_dir, cache_dir)
    if made_in:
        manifest["generation_seconds"] = made_in
    (target_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m r2mad_lab.reproduce.published",
        description="Publish a profile's response cache (after regenerating it): cache/<profile>/responses.sqlite, "
        "compacted, to published/<profile>/ with manifest.json; commit both with figures/<profile>/.")
    parser.add_argument("--profile", required=True, help="a packaged profile (cpu, api, paper) or a YAML path")
    parser.add_argument("--output-dir", type=Path, default=Path.cwd(),
                        help="the reproduction's output folder, holding cache/<profile>/ (default: the "
                             "working directory)")
    parser.add_argument("--published-dir", type=Path, default=PUBLISHED_DIR,
                        help=f"where published caches go (default: {_shown(PUBLISHED_DIR)})")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(args.profile)
        manifest = publish(profile, args.output_dir / "cache" / profile.folder, args.published_dir,
                           executed_dir=args.output_dir / "notebooks" / "executed" / profile.folder)
    except (FileNotFoundError, ProfileError) as exc:
        print(f"publish: {exc}", file=sys.stderr)
        return 2
    folder = args.published_dir / profile.folder
    print(f"publish: {_shown(folder / CACHE_FILENAME)} ({manifest['rows']} generations, {manifest['bytes']:,} bytes, "
          f"sha256 {manifest['sha256'][:12]}) and {MANIFEST_NAME}; commit them with figures/{profile.folder}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
