"""The benchmark files: where they are, where they came from, and whether they are intact.

The paper evaluates on MATH500, MMLU-Pro Economics and Engineering, and TruthfulQA-MC (Section 5.1,
"Experiment Setups"; Appendix A, "Benchmark Details"). This module is about the *files* holding those
questions, not about the questions themselves (those, and the paper's splits, are
:mod:`r2mad_core.data.benchmarks`):

- the packaged files (the default source): the four benchmark files gzip-compressed in
  ``r2mad_core/data/packaged/`` (:data:`PACKAGED_DATA_DIR`, :data:`PACKAGED_FILES`), with their
  licenses and upstream provenance in the README there; every read decompresses a file and checks its
  size and sha256 against that folder's ``MANIFEST.json`` (:func:`packaged_manifest`);
- a data directory of one's own (the ``data_dir`` argument / ``--data-dir``, else ``$R2MAD_DATA_DIR``;
  :func:`resolve_data_dir`), searched in the layouts of :data:`DATA_FILES`, first hit wins
  (:func:`locate`);
- the Hugging Face Hub (:data:`HUB_SOURCES`, through the optional ``datasets`` package, the ``hub``
  extra) as the last resort for a file missing from such a directory; the download is written into it;
- integrity: :func:`verify_checksums` (the packaged files against ``MANIFEST.json``, a data directory
  against :data:`CHECKSUMS`, the shared data folder's sha256), :func:`describe_data_source` for the line
  every artifact prints about where its questions came from.

Errors: :class:`BenchmarkFilesNotFound` (no file, and no download possible: names every path tried) and
:class:`BenchmarkDataError` (a file is damaged or malformed: names the file, the 1-based row and the field).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: The MMLU-Pro ``category`` whose rows hold each MMLU-Pro benchmark (one file per category, or one parquet).
MMLU_PRO_CATEGORY: dict[str, str] = {
    "mmlu_pro_economics": "economics",
    "mmlu_pro_engineering": "engineering",
}
MMLU_PRO_PARQUET = "test-00000-of-00001.parquet"

#: Where each source file is looked for, relative to the data directory, first hit wins.
#: ``{category}`` is the MMLU-Pro category. The first entry is the layout of the shared data folder;
#: the others are flat layouts a user may have (and where a Hub download is written).
DATA_FILES: dict[str, tuple[str, ...]] = {
    "math500": ("math500/raw/test.jsonl", "math500/test.jsonl"),
    "mmlu_pro_parquet": (
        f"mmlu_pro/raw/data/{MMLU_PRO_PARQUET}",
        f"mmlu_pro/data/{MMLU_PRO_PARQUET}",
        f"mmlu_pro/{MMLU_PRO_PARQUET}",
    ),
    "mmlu_pro_jsonl": ("mmlu_pro/derived/test_{category}.jsonl", "mmlu_pro/test_{category}.jsonl"),
    "truthfulqa": ("truthfulqa/raw/mc_task.json", "truthfulqa/mc_task.json"),
}

#: sha256 of the files in the shared data folder (from its README), for :func:`verify_checksums`.
CHECKSUMS: dict[str, str] = {
    "math500/raw/test.jsonl": "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
    f"mmlu_pro/raw/data/{MMLU_PRO_PARQUET}": "e816408684f5715a7081087ad06128fa0ab6001b8a77065447bd0c60c35305f0",
    "mmlu_pro/derived/test_economics.jsonl": "4c34195cea3dbd65fb4ea7f3c38ee75e9cd556c34c700bd6f4cf3fbeb5f70c34",
    "mmlu_pro/derived/test_engineering.jsonl": "15826effaa4455c538f83a007e976c868688cd86caf545810d1a462ae77a6bdc",
    "truthfulqa/raw/mc_task.json": "6eb4125d25750c0145c4be2dce00440736684ab6f74ce6bff2139571cc758954",
}

#: Hugging Face Hub datasets used when no local file exists (needs the optional ``datasets`` package).
HUB_SOURCES: dict[str, tuple[str, str | None, str]] = {
    "math500": ("HuggingFaceH4/MATH-500", None, "test"),
    "mmlu_pro": ("TIGER-Lab/MMLU-Pro", None, "test"),
    "truthfulqa": ("truthful_qa", "multiple_choice", "validation"),
}

#: The repository checkout holding the package (a source install; not used to find the data).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The benchmark files shipped with the package (the default data source).
PACKAGED_DATA_DIR = Path(__file__).resolve().parent / "packaged"
#: The packaged file of each benchmark, relative to :data:`PACKAGED_DATA_DIR` (checksums: MANIFEST.json there).
PACKAGED_FILES: dict[str, tuple[str, str]] = {
    "math500": ("math500_jsonl", "math500/test.jsonl.gz"),
    "mmlu_pro_economics": ("mmlu_pro_jsonl", "mmlu_pro/test_economics.jsonl.gz"),
    "mmlu_pro_engineering": ("mmlu_pro_jsonl", "mmlu_pro/test_engineering.jsonl.gz"),
    "truthfulqa": ("truthfulqa_json", "truthfulqa/mc_task.json.gz"),
}


class BenchmarkDataError(ValueError):
    """A benchmark file is malformed; the message names the file, the 1-based row and the field."""

    def __init__(self, path: Path | str, row: int | None, field_name: str | None, problem: str) -> None:
        self.path = Path(path)
        self.row = row
        self.field_name = field_name
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if field_name is not None:
            where += f", field {field_name!r}"
        super().__init__(f"{where}: {problem}")


class BenchmarkFilesNotFound(FileNotFoundError):
    """No data file for a benchmark was found and it could not be downloaded."""



# ----------------------------------------------------------------------------------------------------
# Data directory, packaged files and their integrity
# ----------------------------------------------------------------------------------------------------


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: the argument, else ``$R2MAD_DATA_DIR``, else the packaged files
    (:data:`PACKAGED_DATA_DIR`)."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    from_env = os.environ.get("R2MAD_DATA_DIR")
    if from_env:
        return Path(from_env).expanduser()
    return PACKAGED_DATA_DIR


def describe_data_source(data_dir: str | os.PathLike[str] | None = None) -> str:
    """One line saying where the benchmark files come from (no machine path for the packaged files)."""
    directory = resolve_data_dir(data_dir)
    if directory == PACKAGED_DATA_DIR:
        return "the files shipped with r2mad (r2mad_core/data/packaged, sha256-checked at load)"
    return f"the data directory {directory} (set by --data-dir / data_dir, else $R2MAD_DATA_DIR)"


@functools.lru_cache(maxsize=1)
def packaged_manifest() -> dict[str, dict[str, Any]]:
    """``MANIFEST.json`` of the packaged files: relative path -> rows, bytes, sha256, git_blob, upstream, license."""
    path = PACKAGED_DATA_DIR / "MANIFEST.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError) as error:
        raise BenchmarkFilesNotFound(
            f"{path}: the manifest of the packaged benchmark files is missing or unreadable ({error}); "
            f"reinstall r2mad or set R2MAD_DATA_DIR to a data folder"
        ) from None


@functools.lru_cache(maxsize=8)
def _packaged_bytes(path: Path) -> bytes:
    """The decompressed bytes of a packaged file, after checking their size and sha256 against the manifest."""
    relative = path.relative_to(PACKAGED_DATA_DIR).as_posix()
    entry = packaged_manifest().get(relative)
    if entry is None:
        raise BenchmarkDataError(path, None, None, "not listed in MANIFEST.json of the packaged data")
    try:
        data = gzip.decompress(path.read_bytes())
    except FileNotFoundError:
        raise BenchmarkFilesNotFound(
            f"{path}: packaged benchmark file missing (reinstall r2mad, or set R2MAD_DATA_DIR to a data folder)"
        ) from None
    except (OSError, EOFError) as error:
        raise BenchmarkDataError(path, None, None, f"not a valid gzip file ({error})") from None
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != entry["bytes"] or digest != entry["sha256"]:
        raise BenchmarkDataError(
            path, None, None,
            f"sha256 {digest} ({len(data)} bytes) differs from MANIFEST.json's {entry['sha256']} "
            f"({entry['bytes']} bytes): the packaged file is damaged; reinstall r2mad",
        )
    return data


def open_text(path: Path) -> io.TextIOBase:
    """A text handle on a data file: packaged ``.gz`` files are decompressed and checksum-verified."""
    if path.suffix == ".gz":
        data = _packaged_bytes(path) if path.is_relative_to(PACKAGED_DATA_DIR) else gzip.decompress(path.read_bytes())
        return io.StringIO(data.decode("utf-8-sig"))
    return path.open(encoding="utf-8-sig")


def _candidates(key: str, data_dir: Path, **fmt: str) -> list[Path]:
    return [data_dir / pattern.format(**fmt) for pattern in DATA_FILES[key]]


def _first_existing(paths: Iterable[Path]) -> Path | None:
    for path in paths:
        if path.is_file():
            return path
    return None


def _pyarrow_available() -> bool:
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def _not_found(name: str, data_dir: Path, tried: Sequence[Path], reason: str) -> BenchmarkFilesNotFound:
    tried_text = "\n".join(f"  - {p}" for p in tried)
    return BenchmarkFilesNotFound(
        f"No data file for benchmark {name!r} in data directory {data_dir} "
        f"(set by the data_dir argument or --data-dir, else $R2MAD_DATA_DIR; unset both to use the "
        f"files shipped with r2mad).\n"
        f"Paths tried:\n{tried_text}\n"
        f"Expected files: MATH500 prm800k test.jsonl (500 rows), MMLU-Pro test parquet or "
        f"test_<category>.jsonl, TruthfulQA mc_task.json (817 questions, commit 013686a); see "
        f"r2mad_core/data/packaged/README.md.\nDownload from the Hugging Face Hub was not possible: {reason}"
    )


def locate(name: str, data_dir: Path) -> tuple[str, Path]:
    """(format, path) of the file holding benchmark ``name`` (one of the paper's four, the keys of
    :data:`PACKAGED_FILES`): the packaged file when ``data_dir`` is :data:`PACKAGED_DATA_DIR`, else the first
    :data:`DATA_FILES` layout present in ``data_dir``, else a download from the Hub written there.
    ``format`` is ``math500_jsonl``, ``mmlu_pro_parquet``, ``mmlu_pro_jsonl`` or ``truthfulqa_json``."""
    if data_dir == PACKAGED_DATA_DIR and name in PACKAGED_FILES:
        file_format, relative = PACKAGED_FILES[name]
        return file_format, PACKAGED_DATA_DIR / relative
    tried: list[Path] = []
    if name == "math500":
        tried = _candidates("math500", data_dir)
        found = _first_existing(tried)
        if found:
            return "math500_jsonl", found
    elif name in MMLU_PRO_CATEGORY:
        category = MMLU_PRO_CATEGORY[name]
        parquet = _candidates("mmlu_pro_parquet", data_dir)
        jsonl = _candidates("mmlu_pro_jsonl", data_dir, category=category)
        # The raw parquet is the checksummed original; the derived JSONL is identical and needs no pyarrow.
        order = (parquet + jsonl) if _pyarrow_available() else jsonl
        tried = parquet + jsonl
        for path in order:
            if path.is_file():
                return ("mmlu_pro_parquet" if path.suffix == ".parquet" else "mmlu_pro_jsonl"), path
    elif name == "truthfulqa":
        tried = _candidates("truthfulqa", data_dir)
        found = _first_existing(tried)
        if found:
            return "truthfulqa_json", found
    else:
        raise ValueError(f"no data files are known for benchmark {name!r}; files exist for {tuple(PACKAGED_FILES)}")
    return _download_from_hub(name, data_dir, tried)


def _download_from_hub(name: str, data_dir: Path, tried: Sequence[Path]) -> tuple[str, Path]:
    """Fetch a benchmark with ``datasets`` and write it in the flat layout of :data:`DATA_FILES`."""
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise _not_found(name, data_dir, tried, "the optional package 'datasets' is not installed") from None
    source_key = "mmlu_pro" if name in MMLU_PRO_CATEGORY else name
    repo, config, split = HUB_SOURCES[source_key]
    logger.info("Downloading %s from the Hugging Face Hub (%s, split %s)", name, repo, split)
    try:
        rows = list(datasets.load_dataset(repo, config, split=split))
    except Exception as error:  # network, authentication, renamed dataset: report all the same way
        raise _not_found(name, data_dir, tried, f"{type(error).__name__}: {error}") from error
    if name == "math500":
        target = data_dir / DATA_FILES["math500"][1]
        _write_jsonl(target, rows)
        return "math500_jsonl", target
    if name in MMLU_PRO_CATEGORY:
        category = MMLU_PRO_CATEGORY[name]
        target = data_dir / DATA_FILES["mmlu_pro_jsonl"][1].format(category=category)
        _write_jsonl(target, [row for row in rows if row.get("category") == category])
        return "mmlu_pro_jsonl", target
    # truthful_qa/multiple_choice: mc1_targets = {"choices": [...], "labels": [...]} in mc_task.json order.
    converted = []
    for row in rows:
        entry: dict[str, Any] = {"question": row["question"]}
        for key in ("mc1_targets", "mc2_targets"):
            targets = row[key]
            entry[key] = dict(zip(targets["choices"], targets["labels"], strict=True))
        converted.append(entry)
    target = data_dir / DATA_FILES["truthfulqa"][1]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(converted, ensure_ascii=False, indent=2), encoding="utf-8")
    return "truthfulqa_json", target


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def verify_checksums(data_dir: str | os.PathLike[str] | None = None) -> dict[str, bool | None]:
    """sha256 check of the data files: path -> True (matches), False (differs), None (absent).

    The packaged files (the default) are checked against ``MANIFEST.json`` (decompressed bytes); a
    data directory against :data:`CHECKSUMS` (the shared data folder's layout)."""
    directory = resolve_data_dir(data_dir)
    results: dict[str, bool | None] = {}
    if directory == PACKAGED_DATA_DIR:
        for relative in packaged_manifest():
            try:
                _packaged_bytes(PACKAGED_DATA_DIR / relative)
            except BenchmarkFilesNotFound:
                results[relative] = None
            except BenchmarkDataError:
                results[relative] = False
            else:
                results[relative] = True
        return results
    for relative, expected in CHECKSUMS.items():
        path = directory / relative
        if not path.is_file():
            results[relative] = None
            continue
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        results[relative] = digest.hexdigest() == expected
    return results
