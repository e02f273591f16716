"""A faster file of the same weights (issue 52): a Q4_1 GGUF re-quantized to Q8_0 or Q4_0 with llama.cpp's ``gguf``
package, its metadata and other tensors copied, made once and cached with its sha256; and the thread count taken
from the idle cores."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from r2mad_lab.engines.local import idle_cores, resolve_threads  # noqa: E402
from r2mad_lab.engines.requantize import RequantizeError, derived_name, file_record, requantized  # noqa: E402

Q4_1 = gguf.GGMLQuantizationType.Q4_1


def _small_q4_1(path: Path) -> np.ndarray:
    """A GGUF with one Q4_1 matrix, one F32 vector and metadata; returns the matrix's Q4_1 values as floats."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((8, 64)).astype(np.float32)
    quantized = gguf.quants.quantize(weights, Q4_1)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny test model")
    writer.add_uint32("general.file_type", 3)  # MOSTLY_Q4_1
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
    writer.add_tensor("blk.0.ffn_up.weight", quantized, raw_dtype=Q4_1)
    writer.add_tensor("blk.0.attn_norm.weight", np.arange(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.quants.dequantize(quantized, Q4_1)


def test_q4_1_becomes_q8_0_with_the_same_weights_and_metadata(tmp_path: Path) -> None:
    source = tmp_path / "Tiny.Q4_1.gguf"
    values = _small_q4_1(source)
    made = requantized(source, "Q8_0", cache_dir=tmp_path / "cache")
    assert made.name == "Tiny.Q8_0.gguf" == derived_name(source, "Q8_0")
    reader = gguf.GGUFReader(made)
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["blk.0.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(tensors["blk.0.attn_norm.weight"].data, np.arange(64, dtype=np.float32))
    again = gguf.quants.dequantize(tensors["blk.0.ffn_up.weight"].data, gguf.GGMLQuantizationType.Q8_0)
    # Q8_0 keeps each block of 32 on 255 levels: within half a step (amax / 127 / 2) of the Q4_1 values
    steps = np.abs(values.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(again.reshape(-1, 32) - values.reshape(-1, 32)) <= steps / 2 + 1e-6)
    assert reader.fields["general.file_type"].contents() == 7  # MOSTLY_Q8_0
    assert reader.fields["general.name"].contents() == "tiny test model"
    assert reader.fields["tokenizer.ggml.tokens"].contents() == ["<s>", "a", "b"]
    record = json.loads((made.parent / (made.name + ".json")).read_text())
    assert record["sha256"] == hashlib.sha256(made.read_bytes()).hexdigest()
    assert record["source"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert oct(made.stat().st_mode & 0o777) == "0o644"


def test_the_cached_file_is_used_again_and_made_again_when_it_does_not_match(tmp_path: Path) -> None:
    source = tmp_path / "Tiny.Q4_1.gguf"
    _small_q4_1(source)
    made = requantized(source, "Q4_0", cache_dir=tmp_path)
    stamp = made.stat().st_mtime_ns
    assert requantized(source, "Q4_0", cache_dir=tmp_path) == made and made.stat().st_mtime_ns == stamp
    good = made.read_bytes()
    made.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit flipped: the sha256 no longer matches
    assert requantized(source, "Q4_0", cache_dir=tmp_path).read_bytes() == good


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RequantizeError, match="not a file"):
        requantized(tmp_path / "missing.gguf")
    with pytest.raises(RequantizeError, match="not supported"):
        requantized(tmp_path / "missing.gguf", "Q5_K")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(RequantizeError, match="not a readable GGUF"):
        requantized(bad, cache_dir=tmp_path / "cache")


def test_threads_come_from_the_idle_cores() -> None:
    assert idle_cores(cores=2, load=1.0) == 2  # idle but for this run
    assert idle_cores(cores=2, load=2.2) == 1
    assert idle_cores(cores=2, load=14.0) == 1  # a shared machine: 1 thread
    assert idle_cores(cores=8, load=3.0) == 6
    assert resolve_threads(3) == 3 and 1 <= resolve_threads("idle") <= (os.cpu_count() or 1)
    with pytest.raises(ValueError, match="threads"):
        resolve_threads("all")


def test_the_file_that_ran_is_read_back_from_its_identity(tmp_path: Path) -> None:
    """What the published manifest records for each local engine identity: the file's sha256 and tensor types read
    from the file itself, the source a re-quantized file was made from; a file of another size is not the one."""
    source = tmp_path / "Tiny.Q4_1.gguf"
    _small_q4_1(source)
    made = requantized(source, "Q8_0", cache_dir=tmp_path / "models")
    record = file_record(f"local:{made.name}:{made.stat().st_size}", packaged=source, cache_dir=tmp_path / "models")
    assert record["sha256"] == hashlib.sha256(made.read_bytes()).hexdigest()
    assert record["tensor_types"] == {"F32": 1, "Q8_0": 1} and record["type"] == "Q8_0"
    assert record["made_from"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    packaged = file_record(f"local:{source.name}:{source.stat().st_size}:template-abc", packaged=source,
                           cache_dir=tmp_path / "models")
    assert packaged["tensor_types"] == {"F32": 1, "Q4_1": 1} and "made_from" not in packaged
    assert file_record(f"local:{made.name}:1", cache_dir=tmp_path / "models") == {
        "file": made.name, "bytes": 1, "found": False}
    with pytest.raises(RequantizeError, match="not a local engine identity"):
        file_record("openai:gpt")
