"""Extensions from outside the package: modules that register benchmarks, retrieval policies, methods or engines.

See docs/design.md, "Extension points".

Each extension point has one registry (:data:`r2mad_core.data.benchmarks.BENCHMARK_SPECS`,
:data:`r2mad_core.memory.retrieval.POLICIES`, :data:`r2mad_core.methods.METHOD_SPECS`,
:data:`r2mad_lab.engines.ENGINES`); an extension is a module whose import registers its entries (a registration
that lacks something fails there, with one line naming it). The command line, ``python -m r2mad_lab.reproduce`` and
every notebook (through their shared setup) call :func:`load_plugins` before they read a registry, so a registered entry
shows up in the CLI's choices, the profiles and the tables.

Where the modules come from:

- ``R2MAD_PLUGINS``: comma-separated module names (``mylab.r2mad_extras``) or paths to ``.py`` files;
- the ``r2mad.plugins`` entry-point group of installed packages (``[project.entry-points."r2mad.plugins"]``).

A module that fails to import is an error naming it (one line), never silently skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

logger = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "R2MAD_PLUGINS"
ENTRY_POINT_GROUP = "r2mad.plugins"

_loaded: dict[str, ModuleType] = {}


class PluginError(ImportError):
    """A plugin module named in R2MAD_PLUGINS or an entry point could not be imported."""


def _import(name: str) -> ModuleType:
    if name in _loaded:
        return _loaded[name]
    try:
        if name.endswith(".py"):
            path = Path(name).expanduser()
            if not path.is_file():
                raise PluginError(f"{ENVIRONMENT_VARIABLE}: plugin file {path} does not exist")
            module_name = f"r2mad_plugin_{path.stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise PluginError(f"{ENVIRONMENT_VARIABLE}: cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(name)
    except PluginError:
        raise
    except Exception as exc:  # a plugin's own error, named with the plugin
        raise PluginError(f"plugin {name!r} failed to import: {type(exc).__name__}: {exc}") from exc
    _loaded[name] = module
    logger.info("loaded plugin %s", name)
    return module


#: (the folders on sys.path with their modification times, the entry points' module names read then)
_entry_points_read: tuple[tuple[tuple[str, int | None], ...], tuple[str, ...]] | None = None


def _path_stamp() -> tuple[tuple[str, int | None], ...]:
    """Each ``sys.path`` entry with its modification time: installing or removing a package changes its folder's."""
    stamps = []
    for entry in sys.path:
        try:
            stamps.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            stamps.append((entry, None))
    return tuple(stamps)


def _entry_point_modules() -> tuple[str, ...]:
    """The ``r2mad.plugins`` entry points' module names, read again only when a folder on ``sys.path`` changed:
    reading them scans every installed distribution's metadata (slow), and every profile load asks."""
    global _entry_points_read
    stamp = _path_stamp()
    if _entry_points_read is None or _entry_points_read[0] != stamp:
        _entry_points_read = (stamp, tuple(entry.value for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)))
    return _entry_points_read[1]


def plugin_names(environ: dict[str, str] | None = None) -> list[str]:
    """The plugin modules to load: ``R2MAD_PLUGINS`` entries, then the ``r2mad.plugins`` entry points."""
    env = os.environ if environ is None else environ
    names = [part.strip() for part in env.get(ENVIRONMENT_VARIABLE, "").split(",") if part.strip()]
    for value in _entry_point_modules():
        if value not in names:
            names.append(value)
    return names


def load_plugins(environ: dict[str, str] | None = None) -> list[ModuleType]:
    """Import every plugin module once (idempotent); returns them in order."""
    return [_import(name) for name in plugin_names(environ)]


def entry_problem(name: Any, registry: Mapping[str, Any], *, label: Any, label_role: str, label_field: str = "label",
                  kind: str | None = None, name_note: str = "") -> str | None:
    """What a registry entry's identity lacks, the same for every extension point (None: nothing): a name of
    letters, digits, '_' or '-' not registered yet, and a label (``label_field``, shown as ``label_role``) that
    no other entry of ``kind`` uses (``kind`` None: labels may repeat)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        return f"needs a name of letters, digits, '_' or '-'{name_note}"
    if name in registry:
        return "is already registered"
    if not isinstance(label, str) or not label.strip():
        return f"needs a {label_field} ({label_role})"
    if kind is not None:
        used = {getattr(entry, label_field): other for other, entry in registry.items()}
        if label in used:
            return f"uses the {label_field} {label!r} of {kind} {used[label]!r}"
    return None
