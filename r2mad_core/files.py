"""Files that survive a crash: one atomic write, one lock, one file digest for the whole package.

- :func:`atomic_write`: into a temporary file in the target's folder, flushed to disk, then ``os.replace``d over
  the target, so a reader (or a rerun after a SIGKILL) sees the old file or the new one, never half of one. The
  temporary file is locked while it is written; a temporary file of the same target that nobody holds locked (a
  SIGKILL left it, ``.fig_x.ab12cd34.tmp.png``) is removed by the next write of that target.
- :func:`write_json_atomic`: the same for a JSON document.
- :func:`locked`: an exclusive ``fcntl.flock`` held for a ``with`` block and released by the kernel if the process
  dies; on a folder itself (no lock file left among the outputs) or on a lock file.
- :func:`file_sha256`: ``hashlib.file_digest`` of a file.
- :func:`file_stamps`: what tells a file unchanged without reading it (inode, size, modification and change times),
  for the per-process memos of verified memory banks and finished runs.
- :func:`exit_with_parent`: a child process (a notebook's kernel) ends the moment the process that started it
  ends, however it ended (SIGKILL included), so it cannot go on writing outputs of a run that was stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


def atomic_write(path: str | Path, data: str | bytes | Callable[[Path], None], *, mode: int = 0o644) -> Path:
    """Write ``path`` atomically.

    ``data`` is the text, the bytes, or a function that writes the temporary path it is given
    (``lambda tmp: fig.savefig(tmp)``); the temporary file keeps the target's suffix so such writers pick the right
    format. The temporary file is removed if writing fails; the written file gets permissions ``mode``.
    """
    path = Path(path)
    remove_stale_temporaries(path.parent, path)
    descriptor, temporary = _locked_temporary(path.parent, f".{path.stem}.", f".tmp{path.suffix}")
    try:
        if callable(data):
            data(Path(temporary))
            with open(temporary, "rb+") as handle:
                os.fsync(handle.fileno())
        else:
            payload = data.encode("utf-8") if isinstance(data, str) else data
            with os.fdopen(descriptor, "wb", closefd=False) as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    finally:
        os.close(descriptor)  # the lock goes with it
    return path


def _temporary_names(target: Path | None) -> re.Pattern[str]:
    """The names of :func:`atomic_write`'s temporary files: ``.<stem>.<8 random characters of mkstemp>.tmp<suffix>``
    of ``target``, or of any target when None."""
    if target is None:
        return re.compile(r"\..*\.[a-z0-9_]{8}\.tmp(\.[A-Za-z0-9]+)?")
    return re.compile(re.escape(f".{target.stem}.") + r"[a-z0-9_]{8}" + re.escape(f".tmp{target.suffix}"))


def _locked_temporary(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """A new temporary file in ``folder``, held under an exclusive ``flock`` (so :func:`remove_stale_temporaries` of
    another process leaves it alone); made again in the unlikely case one removed it before the lock was taken."""
    while True:
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            if os.stat(temporary).st_ino == os.fstat(descriptor).st_ino:
                return descriptor, temporary
        except FileNotFoundError:
            pass
        os.close(descriptor)


def remove_stale_temporaries(folder: str | Path, target: str | Path | None = None) -> list[Path]:
    """Remove the temporary files of :func:`atomic_write` in ``folder`` (of ``target`` only, when given) that no
    writer holds locked: a process killed mid-write left them. Returns the removed paths."""
    removed: list[Path] = []
    pattern = _temporary_names(None if target is None else Path(target))
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not pattern.fullmatch(name):
            continue
        candidate = Path(folder) / name
        try:
            descriptor = os.open(candidate, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live writer's
            os.close(descriptor)
            continue
        try:
            if os.stat(candidate).st_ino == os.fstat(descriptor).st_ino:
                os.unlink(candidate)
                removed.append(candidate)
        except FileNotFoundError:
            pass
        finally:
            os.close(descriptor)
    return removed


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


def exit_with_parent() -> None:
    """End this process the moment its parent ends (Linux pidfd; elsewhere nothing changes).

    For the notebooks' kernels (:mod:`r2mad_lab.reproduce.notebook_runner` runs this at kernel start): jupyter_client
    starts each kernel in a session of its own, and ipykernel notices a parent that died only by polling once a
    second, so after a ``kill -9`` of ``reproduce`` its kernels went on computing and writing for seconds. The parent
    is ``JPY_PARENT_PID`` (set by jupyter_client), else the parent process."""
    parent = int(os.environ.get("JPY_PARENT_PID") or os.getppid())
    try:
        handle = os.pidfd_open(parent)
    except ProcessLookupError:  # already gone
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here (not Linux, or an old kernel): ipykernel's own poll stays
        return
    if os.getppid() != parent:  # gone before the handle was taken (its pid may be reused already)
        os._exit(1)

    def wait_for_the_parent() -> None:
        select.select([handle], [], [])
        os._exit(1)

    threading.Thread(target=wait_for_the_parent, name="r2mad-exit-with-parent", daemon=True).start()
