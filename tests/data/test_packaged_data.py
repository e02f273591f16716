"""The benchmark files shipped in the package (r2mad_core/data/packaged): the default data source,
checked against MANIFEST.json at every load, with licenses and provenance; R2MAD_DATA_DIR and the Hub
(through a fake ``datasets`` module) stay as overrides."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
import tomllib
import types
from pathlib import Path

import pytest

from r2mad_core.data import benchmarks
from r2mad_core.data import sources as benchmark_files
from r2mad_core.data.benchmarks import PAPER_SPLIT_SIZES, load
from r2mad_core.data.sources import (
    PACKAGED_DATA_DIR,
    BenchmarkDataError,
    BenchmarkFilesNotFound,
    describe_data_source,
    packaged_manifest,
    verify_checksums,
)

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
#: Upstream git blob ids (data README of the shared folder / the source repositories).
UPSTREAM_BLOBS = {
    "math500/test.jsonl.gz": "2376b9a194b46c0790e197c91b7249e5f88ac09b",  # BudgetThinker test_ori.jsonl = prm800k LFS
    # sylinrl/TruthfulQA@013686a data/mc_task.json
    "truthfulqa/mc_task.json.gz": "2e2bcc91f0dc2bc8a516433fbd4b79f55caefa2f",
}


@pytest.fixture(autouse=True)
def no_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MAD_DATA_DIR", raising=False)


def test_every_packaged_file_matches_its_manifest_entry_and_upstream_blob() -> None:
    manifest = packaged_manifest()
    assert sorted(manifest) == sorted(relative for _, relative in benchmark_files.PACKAGED_FILES.values())
    for relative, entry in manifest.items():
        data = gzip.decompress((PACKAGED_DATA_DIR / relative).read_bytes())
        assert len(data) == entry["bytes"] and hashlib.sha256(data).hexdigest() == entry["sha256"], relative
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == entry["git_blob"], relative
        assert entry["license"] and entry["upstream"]
    for relative, blob in UPSTREAM_BLOBS.items():
        assert manifest[relative]["git_blob"] == blob
    # the shared data folder's sha256 (its README) for the same bytes
    assert {k: v for k, v in benchmark_files.CHECKSUMS.items() if "parquet" not in k} == {
        "math500/raw/test.jsonl": manifest["math500/test.jsonl.gz"]["sha256"],
        "mmlu_pro/derived/test_economics.jsonl": manifest["mmlu_pro/test_economics.jsonl.gz"]["sha256"],
        "mmlu_pro/derived/test_engineering.jsonl": manifest["mmlu_pro/test_engineering.jsonl.gz"]["sha256"],
        "truthfulqa/raw/mc_task.json": manifest["truthfulqa/mc_task.json.gz"]["sha256"],
    }
    assert verify_checksums() == {relative: True for relative in manifest}


def test_licenses_and_provenance_ship_beside_the_files() -> None:
    assert "MIT License" in (PACKAGED_DATA_DIR / "math500" / "LICENSE").read_text()
    assert "Copyright (c) 2023 OpenAI" in (PACKAGED_DATA_DIR / "math500" / "LICENSE").read_text()
    assert "MIT License" in (PACKAGED_DATA_DIR / "mmlu_pro" / "LICENSE").read_text()
    assert "Apache License" in (PACKAGED_DATA_DIR / "truthfulqa" / "LICENSE").read_text()
    readme = (PACKAGED_DATA_DIR / "README.md").read_text()
    for entry in packaged_manifest().values():
        assert entry["sha256"] in readme and entry["git_blob"] in readme
    assert "013686a06be7a7bde5bf8223943e106c7250123c" in readme
    package_data = (tomllib.loads((REPO / "pyproject.toml").read_text())
                    ["tool"]["setuptools"]["package-data"]["r2mad_core.data"])
    for pattern in ("packaged/*.json", "packaged/*.md", "packaged/*/*.gz", "packaged/*/LICENSE"):
        assert pattern in package_data


def test_default_source_is_the_package_with_the_papers_counts() -> None:
    assert benchmark_files.resolve_data_dir() == PACKAGED_DATA_DIR
    assert describe_data_source() == "the files shipped with r2mad (r2mad_core/data/packaged, sha256-checked at load)"
    for name in benchmarks.BENCHMARKS:
        for split in ("train", "test"):
            assert len(load(name, split)) == PAPER_SPLIT_SIZES[name][split], (name, split)


@pytest.mark.skipif(not (SHARED / "truthfulqa" / "raw" / "mc_task.json").is_file(),
                    reason="no ../shared/data beside the repo")
def test_packaged_samples_equal_the_shared_folders() -> None:
    for name in benchmarks.BENCHMARKS:
        packaged = load(name, "all")
        shared = load(name, "all", SHARED)
        assert [(s.id, s.question, s.gold, s.choices) for s in packaged] == [
            (s.id, s.question, s.gold, s.choices) for s in shared
        ], name


def _copy_packaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "benchmarks"
    shutil.copytree(PACKAGED_DATA_DIR, copy)
    monkeypatch.setattr(benchmark_files, "PACKAGED_DATA_DIR", copy)  # the module that reads it
    benchmark_files.packaged_manifest.cache_clear()
    benchmark_files._packaged_bytes.cache_clear()
    return copy


def test_the_files_concept_lives_in_benchmark_files() -> None:
    """benchmark_files owns the data files (issue 13); benchmarks re-exports only what notebook 01, the command
    lines and callers of load() use, as the very same objects, and no longer holds the file constants: a test
    patching ``benchmarks.PACKAGED_DATA_DIR`` would change nothing that load() reads, so it must fail loudly."""
    for name in ("resolve_data_dir", "describe_data_source", "verify_checksums", "BenchmarkDataError",
                 "BenchmarkFilesNotFound"):
        assert getattr(benchmarks, name) is getattr(benchmark_files, name), name
    for name in ("PACKAGED_DATA_DIR", "PACKAGED_FILES", "CHECKSUMS", "DATA_FILES", "HUB_SOURCES", "packaged_manifest",
                 "_packaged_bytes"):
        assert hasattr(benchmark_files, name) and not hasattr(benchmarks, name), name
    assert benchmark_files.locate("truthfulqa", PACKAGED_DATA_DIR) == (
        "truthfulqa_json", PACKAGED_DATA_DIR / "truthfulqa" / "mc_task.json.gz")
    with pytest.raises(ValueError, match="no data files are known for benchmark 'toy'"):
        benchmark_files.locate("toy", PACKAGED_DATA_DIR / "elsewhere")


def test_a_damaged_packaged_file_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = _copy_packaged(tmp_path, monkeypatch)
    try:
        path = copy / "truthfulqa" / "mc_task.json.gz"
        rows = json.loads(gzip.decompress(path.read_bytes()))
        rows[0]["question"] += " (edited)"
        path.write_bytes(gzip.compress(json.dumps(rows).encode()))
        with pytest.raises(BenchmarkDataError) as raised:
            load("truthfulqa", "test")
        message = str(raised.value)
        assert message.startswith(f"{path}: sha256 ") and "differs from MANIFEST.json's 6eb4125d" in message
        assert "reinstall r2mad" in message
        assert verify_checksums()["truthfulqa/mc_task.json.gz"] is False
        path.write_bytes(b"not gzip")
        benchmark_files._packaged_bytes.cache_clear()
        with pytest.raises(BenchmarkDataError, match="not a valid gzip file"):
            load("truthfulqa", "test")
        path.unlink()
        with pytest.raises(BenchmarkFilesNotFound, match="packaged benchmark file missing"):
            load("truthfulqa", "test")
        assert verify_checksums()["truthfulqa/mc_task.json.gz"] is None
        assert len(load("math500", "test")) == 134  # the others still load
    finally:
        benchmark_files.packaged_manifest.cache_clear()
        benchmark_files._packaged_bytes.cache_clear()


def test_data_dir_overrides_the_package_and_an_empty_one_is_filled_from_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R2MAD_DATA_DIR pointing at an empty folder: the file comes from the (fake) Hub, not the package."""
    calls = []

    def load_dataset(repo: str, config: str | None, split: str) -> list:
        calls.append((repo, config, split))
        return [{"question": f"Q{i}?", "mc1_targets": {"choices": [f"right {i}", "b", "c", "d"],
                                                       "labels": [1, 0, 0, 0]},
                 "mc2_targets": {"choices": ["x"], "labels": [1]}} for i in range(8)]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv("R2MAD_DATA_DIR", str(tmp_path))
    assert describe_data_source().startswith(f"the data directory {tmp_path}")
    samples = load("truthfulqa", "all")
    assert calls == [("truthful_qa", "multiple_choice", "validation")]
    assert len(samples) == 8 and (tmp_path / "truthfulqa" / "mc_task.json").is_file()
    assert load("truthfulqa", "all") == samples and len(calls) == 1  # the downloaded file is reused


def test_hub_extra_installs_datasets() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [r.split(">")[0] for r in extras["hub"]] == ["datasets"]
