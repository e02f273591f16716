"""Files that survive a crash: one atomic write, one lock, one file digest for the whole package.

- :func:`atomic_write`: into a temporary file in the target's folder, flushed to disk, then ``os.replace``d over
  the target, so a reader (or a rerun after a SIGKILL) sees the old file or the new one, never half of one.
- :func:`write_json_atomic`: the same for a JSON document.
- :func:`locked`: an exclusive ``fcntl.flock`` held for a ``with`` block and released by the kernel if the process
  dies; on a folder itself (no lock file left among the outputs) or on a lock file.
- :func:`file_sha256`: ``hashlib.file_digest`` of a file.
- :func:`file_stamps`: what tells a file unchanged without reading it (inode, size, modification and change times),
  for the per-process memos of verified memory banks and finished runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


def atomic_write(path: str | Path, data: str | bytes | Callable[[Path], None], *, mode: int = 0o644) -> Path:
    """Write ``path`` atomically.

    ``data`` is the text, the bytes, or a function that writes the temporary path it is given
    (``lambda tmp: fig.savefig(tmp)``); the temporary file keeps the target's suffix so such writers pick the right
    format. The temporary file is removed if writing fails; the written file gets permissions ``mode``.
    """
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    try:
        if callable(data):
            os.close(descriptor)
            data(Path(temporary))
            with open(temporary, "rb+") as handle:
                os.fsync(handle.fileno())
        else:
            payload = data.encode("utf-8") if isinstance(data, str) else data
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """``data`` as indented JSON (NaN allowed, unknown objects as strings), written with :func:`atomic_write`."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=True, default=str) + "\n"
    return atomic_write(path, text)


@contextlib.contextmanager
def locked(target: str | Path, *, blocking: bool = True) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``target``: a folder (created if missing; locked itself) or a lock file
    (created if missing). ``blocking=False`` raises ``BlockingIOError`` at once when another process holds it."""
    target = Path(target)
    if target.is_dir():
        descriptor = os.open(target, os.O_RDONLY)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def file_sha256(path: str | Path) -> str:
    """The sha256 hex digest of a file's bytes (read in blocks by ``hashlib.file_digest``)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_stamps(paths: Iterable[str | Path]) -> tuple[tuple[int, int, int, int], ...] | None:
    """``(inode, size, mtime_ns, ctime_ns)`` of each path, in order; None when one is missing. Equal stamps mean a
    file was neither rewritten nor replaced since (an atomic replace gets a new inode)."""
    try:
        return tuple((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for st in (os.stat(p) for p in paths))
    except OSError:
        return None
