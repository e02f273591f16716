"""r2mad_core.files: the one atomic write, lock and file digest of the package."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from r2mad_core import files


def test_atomic_write_replaces_whole_files_and_cleans_up(tmp_path: Path) -> None:
    target = tmp_path / "table.csv"
    files.atomic_write(target, "a,b\n1,2\n")
    assert target.read_text() == "a,b\n1,2\n"
    assert oct(target.stat().st_mode & 0o777) == "0o644"

    def failing_writer(path: Path) -> None:
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        files.atomic_write(target, failing_writer)
    assert target.read_text() == "a,b\n1,2\n"  # the old file, not half a new one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]  # no temporary left behind
    files.write_json_atomic(tmp_path / "m.json", {"x": float("nan"), "p": Path("a")})
    assert json.loads((tmp_path / "m.json").read_text().replace("NaN", "null")) == {"x": None, "p": "a"}


def _try_lock(path: str, queue) -> None:  # runs in another process
    try:
        with files.locked(Path(path), blocking=False):
            queue.put("acquired")
    except BlockingIOError:
        queue.put("busy")


@pytest.mark.parametrize("kind", ["folder", "lock file"])
def test_locked_excludes_another_process(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "figures" if kind == "folder" else tmp_path / "run" / ".lock"
    if kind == "folder":
        target.mkdir()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with files.locked(target):
        process = context.Process(target=_try_lock, args=(str(target), queue))
        process.start()
        process.join(30)
        assert queue.get(timeout=5) == "busy"
    process = context.Process(target=_try_lock, args=(str(target), queue))
    process.start()
    process.join(30)
    assert queue.get(timeout=5) == "acquired"
    if kind == "folder":
        assert list(target.iterdir()) == []  # no lock file among the outputs


def test_file_sha256(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(3_000_000))
    assert files.file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_file_stamps_change_with_a_rewrite_or_a_replace_and_are_none_for_a_missing_file(tmp_path: Path) -> None:
    from r2mad_core.files import atomic_write, file_stamps

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one")
    b.write_text("two")
    first = file_stamps([a, b])
    assert first is not None and len(first) == 2 and first == file_stamps([a, b])
    assert first[0][0] == a.stat().st_ino and first[1][1] == 3  # inode, then size
    stat = a.stat()
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # same bytes, touched
    touched = file_stamps([a, b])
    assert touched != first and touched[1] == first[1]
    atomic_write(b, "two")  # same bytes, replaced: a new inode
    assert file_stamps([a, b])[1][0] != touched[1][0]
    assert file_stamps([a, tmp_path / "missing"]) is None
