"""The benchmark files the tests read (issue 36): the packaged ones unless told otherwise.

``$R2MAD_DATA_DIR``, when set, is the data folder to test (e.g. the shared data folder in CI). Otherwise the
files shipped in the package (r2mad_core/data/packaged, sha256-checked against its MANIFEST.json) are
written, decompressed, into a folder in the shared data folder's layout (``math500/raw/test.jsonl``,
``mmlu_pro/derived/test_<category>.jsonl``, ``truthfulqa/raw/mc_task.json``), so that the tests reading raw
files find them in a fresh clone with nothing beside it. No test skips for want of data.
"""

from __future__ import annotations

import os
from pathlib import Path

from r2mad_core.data import sources

#: Packaged file -> its place in the shared data folder's layout (:data:`r2mad_core.data.sources.DATA_FILES`).
SHARED_LAYOUT = {
    "math500/test.jsonl.gz": "math500/raw/test.jsonl",
    "mmlu_pro/test_economics.jsonl.gz": "mmlu_pro/derived/test_economics.jsonl",
    "mmlu_pro/test_engineering.jsonl.gz": "mmlu_pro/derived/test_engineering.jsonl",
    "truthfulqa/mc_task.json.gz": "truthfulqa/raw/mc_task.json",
}


def configured_data_dir() -> Path | None:
    """``$R2MAD_DATA_DIR`` when set (the tests then read that folder), else None (the packaged files)."""
    value = os.environ.get("R2MAD_DATA_DIR")
    return Path(value).expanduser() if value else None


def unpack_packaged(target: Path) -> Path:
    """The packaged benchmark files, checked and decompressed, in the shared layout under ``target``."""
    assert set(SHARED_LAYOUT) == set(sources.packaged_manifest()), "a packaged file has no place in SHARED_LAYOUT"
    for packaged, relative in SHARED_LAYOUT.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(sources._packaged_bytes(sources.PACKAGED_DATA_DIR / packaged))
    return target


def data_dir_for_tests(target: Path) -> Path:
    """The folder the tests read: ``$R2MAD_DATA_DIR`` when set, else the packaged files unpacked into ``target``."""
    return configured_data_dir() or unpack_packaged(target)
