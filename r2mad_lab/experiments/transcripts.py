"""The transcript store: a run's append-only ``transcripts.jsonl``, written crash-safe and read back validated.

Each line is one finished sample (:class:`r2mad_core.records.TranscriptRecord`), written with one ``os.write`` on an
``O_APPEND`` descriptor, then ``fsync`` (a chunk of records in one write). A run killed mid-write leaves at most a
truncated last line: on load it is detected (no trailing newline or not valid JSON), logged as a warning and the
file is truncated back to the last complete line. A corrupt line that is not the last one is an error naming the
file and line; a complete line that does not fit the schema is an error naming the file, the line and the field. A
sample id never appears twice (skipped at write time; a duplicate found on load is an error).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from pydantic import ValidationError

from r2mad_core.records import TranscriptError, TranscriptRecord, as_transcripts, problems

logger = logging.getLogger(__name__)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _validated_json(schema: type[TranscriptRecord], raw: bytes) -> TranscriptRecord | None:
    """``raw`` parsed and validated by ``schema`` from JSON, or None when it does not fit (the caller says why)."""
    try:
        return schema.model_validate_json(raw)
    except ValidationError:
        return None


class TranscriptStore:
    """The append-only ``transcripts.jsonl`` of a run directory (see the module docstring): every complete line
    read is validated into ``schema`` (:class:`r2mad_core.records.TranscriptRecord`, the one transcript type) and
    :meth:`load` returns the typed records; :meth:`append` takes typed records (or a record's JSON object, validated
    at the door by :func:`~r2mad_core.records.as_transcript`)."""

    def __init__(self, path: str | Path, schema: type[TranscriptRecord] = TranscriptRecord) -> None:
        self.path = Path(path)
        self.schema = schema
        self._ids: set[str] | None = None

    def load(self, repair: bool = True) -> list[Any]:
        """All complete records (:class:`TranscriptRecord` with a schema), in file order. A truncated last line
        is dropped with a warning and, when ``repair``, cut from the file."""
        if not self.path.exists():
            self._ids = set()
            return []
        data = self.path.read_bytes()
        records: list[Any] = []
        ids: set[str] = set()
        position = 0
        line_number = 0
        good_end = 0
        while position < len(data):
            line_number += 1
            newline = data.find(b"\n", position)
            end = len(data) if newline == -1 else newline
            raw = data[position:end]
            is_last = newline == -1 or newline == len(data) - 1
            problem = None
            record = None
            if newline == -1:
                problem = "no trailing newline (the write was cut off)"
            elif (record := _validated_json(self.schema, raw)) is not None:
                pass  # a line that fits: parsed and validated in one step (pydantic-core; 1.7x json.loads + validate)
            else:  # the slow path names what is wrong
                try:
                    record = json.loads(raw.decode("utf-8"))
                    if not isinstance(record, dict) or "sample_id" not in record:
                        problem = "not a transcript record (no sample_id)"
                        record = None
                    else:
                        try:
                            record = self.schema.model_validate(record)
                        except ValidationError:
                            mismatch = problems(self.schema, record)
                            raise TranscriptError(
                                f"{self.path}, line {line_number}: does not fit the transcript schema "
                                f"(r2mad_core.records.TranscriptRecord): {mismatch[0]}"
                                + (f"; and {len(mismatch) - 1} more" if len(mismatch) > 1 else "")
                            ) from None
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    problem = f"invalid JSON ({exc})"
            if problem is not None:
                if not is_last:
                    raise TranscriptError(
                        f"{self.path}, line {line_number}: {problem}; only the last line can be cut off by a crash, "
                        "so the file was changed by something else"
                    )
                logger.warning(
                    "%s, line %d: %s; dropping %d bytes of an unfinished record%s",
                    self.path,
                    line_number,
                    problem,
                    len(data) - position,
                    " and truncating the file" if repair else "",
                )
                if repair:
                    with open(self.path, "r+b") as f:
                        f.truncate(good_end)
                        f.flush()
                        os.fsync(f.fileno())
                break
            assert record is not None
            sample_id = record.sample_id
            if sample_id in ids:
                raise TranscriptError(f"{self.path}, line {line_number}: sample_id {sample_id!r} appears twice")
            ids.add(sample_id)
            records.append(record)
            position = end + 1
            good_end = position
        self._ids = ids
        return records

    @property
    def ids(self) -> set[str]:
        if self._ids is None:
            self.load()
        assert self._ids is not None
        return self._ids

    def append(self, record: TranscriptRecord | Mapping[str, Any]) -> bool:
        """Append one record (one write + fsync). Returns False (and writes nothing) when the
        sample is already stored."""
        return self.append_many([record]) == 1

    def append_many(self, records: Sequence[TranscriptRecord | Mapping[str, Any]]) -> int:
        """Append several records (a chunk of finished debates) with one write and one fsync.

        Records whose sample is already stored, or that repeat an earlier record of ``records``, are
        skipped with a warning. Returns the number of records written. A crash during the write leaves
        the complete lines before the cut and at most one cut-off last line, which :meth:`load` drops,
        exactly as with one write per record; one fsync per chunk instead of one per record keeps the
        durability points where the chunk ends (the records of a chunk finish together).
        """
        lines = []
        fresh: list[str] = []
        for record in as_transcripts(records):
            if (sample_id := record.sample_id) in self.ids or sample_id in fresh:
                logger.warning("%s: sample %r is already stored; not writing it again", self.path, sample_id)
                continue
            fresh.append(sample_id)
            lines.append(json.dumps(record.model_dump(), ensure_ascii=False, allow_nan=True, separators=(",", ":"))
                         + "\n")
        if not lines:
            return 0
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview("".join(lines).encode("utf-8"))
            while view:  # a regular file takes the whole buffer in one write; loop only on a short write
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(self.path.parent)
        self.ids.update(fresh)
        return len(fresh)
