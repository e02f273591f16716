"""Run keys: the folder name of a run cell or a memory bank, a hash of its configuration.

A cell's folder is ``<model slug>/<benchmark>/<registered method>-<hash>`` and a bank's
``<builder slug>/<benchmark>/memory-<hash>``, the hash being :func:`config_hash` of the configuration that makes it:
a rerun finds what it made before, and a changed parameter makes a new folder. Published caches replay only while
these names stay as they are.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from r2mad_core.report.artifacts import jsonable


def slug(text: str) -> str:
    """A file-name-safe form of a label: ``R2-MAD w/o Memory`` -> ``r2-mad-w-o-memory``."""
    return re.sub(r"[^0-9a-z.]+", "-", str(text).lower()).strip("-") or "x"


def config_hash(payload: Any, length: int = 12) -> str:
    """First ``length`` hex digits of SHA-256 of the canonical JSON of ``payload``."""
    blob = json.dumps(jsonable(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]
