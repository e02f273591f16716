"""Making the points of an ablation: a profile plus overrides, one seed, one folder (Eqs. 5-7's K, gamma, w_l/w_h).

An ablation is a change of one parameter (K of Eq. 5, gamma of Eq. 6, the thresholds w_l/w_h of Eq. 7, the
retrieval policy of Table 3, n_agents, n_rounds, train_limit, ...). A *point* is one run of the chosen notebooks under
one configuration: the overrides, the seed and the folder they write, one data object (:class:`Point`). Every kind
of ablation is a way of making points, nothing more:

- ``--set`` (papermill ``-p``, an edited parameters cell): one *variant* (:class:`Variant`), its name from the
  overrides, sorted and filesystem-safe (``gamma=0.5``, ``gamma=0.5,top_k=5``; :func:`variant_name`) or from
  ``--variant NAME``; its figures and tables go to ``figures/<profile>/variants/<name>/`` and its executed notebooks
  to ``notebooks/executed/<profile>/variants/<name>/`` (:func:`variant_dir`); the profile's own artifacts are never
  written; runs and the response cache stay shared, so every generation the change does not affect replays; every
  artifact says so (captions name each override with the profile's value, ``gamma = 0.5 (profile tiny: 0.9)``,
  :meth:`Variant.note`; the manifest records the overrides, :meth:`Variant.record`);
- ``--sweep KEY=V1,V2,...`` (several flags: their Cartesian product, :func:`sweep_points`): each value a variant, the
  figures and tables that compare them under ``figures/<profile>/sweeps/``;
- ``--replicates N``: the same configuration under the run seeds ``seed, ..., seed + N - 1`` (:func:`replicate_seeds`),
  each extra seed a variant ``seed=<s>``, their summary under ``figures/<profile>/replicates/``;
- all of them together (:func:`plan_points`): the product of the axes and the seeds, first axis outermost, seeds
  innermost.

An override equal to the profile's value is no override (no variant); overrides of a variant run again with
more changes make a variant of the profile with every change in its name (a variant is always relative to its
profile, never nested). Comparing the points is :mod:`r2mad_lab.reproduce.compare`'s trade; caching and running them
the launcher's (:mod:`r2mad_lab.reproduce.point_cache`, :mod:`r2mad_lab.reproduce.launcher`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from r2mad_core.memory.inert import inert_sweep_problem
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.experiments.protocol import PROFILE_CHOICES
from r2mad_lab.report.artifacts import display_path, jsonable

VARIANTS_DIR = "variants"

SWEEPS_DIR = "sweeps"
#: Where a replicate summary goes, under the profile's figures folder.
REPLICATES_DIR = "replicates"
#: The folders of an artifacts folder that hold other points' artifacts (left out of the profile's own digest).
POINT_FOLDERS = (VARIANTS_DIR, SWEEPS_DIR, REPLICATES_DIR)
#: The file a variant's folder holds while its run has not finished
#: (:func:`r2mad_lab.reproduce.ablations.marking_incomplete`).
INCOMPLETE_MARKER = "INCOMPLETE"
#: The environment variable ``reproduce`` passes the overrides and the chosen name through to the kernels
#: (fields a notebook does not declare are still part of its variant).
ENVIRONMENT = "R2MAD_VARIANT"
#: Parameters that never make a variant: the profile's name and where things go.
NOT_OVERRIDES = frozenset({"profile", "data_dir", "figures_dir", "runs_dir", "cache_dir", "variant"})
MAX_NAME = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")
#: The most seeds ``--replicates`` takes (each a whole run of the chosen notebooks).
MAX_REPLICATES = 20


def same_value(a: Any, b: Any) -> bool:
    """Whether an override equals the profile's value (``1`` and ``1.0`` are equal; lists and mappings by item)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def show_value(value: Any) -> str:
    """A value as a name and a caption show it: YAML-like and compact (``0.5``, ``[3, 6]``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump"):
        value = value.model_dump(exclude_defaults=True)
    return json.dumps(value, separators=(", ", ": "),
                      default=str) if isinstance(value, (list, tuple, dict)) else str(value)


def variant_name(overrides: Mapping[str, Any]) -> str:
    """The stable, filesystem-safe name of a set of overrides: ``key=value`` sorted by key, joined by ``,``;
    characters other than letters, digits and ``._=,+-`` become ``_`` (``fixed_lambda:0.5`` ->
    ``fixed_lambda_0.5``); a name over 80 characters keeps its start and a hash of the whole."""
    if not overrides:
        raise ValueError("variant_name: no overrides (the profile itself is not a variant)")
    text = ",".join(f"{key}={_name_value(_value(overrides[key]))}" for key in sorted(overrides))
    name = _UNSAFE.sub("_", text).strip("._") or "variant"
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 13] + "-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return name


def _name_value(value: Any) -> str:
    """A value inside a name: list items joined by ``+`` (``0.0+0.5``), anything else as shown, without spaces."""
    if isinstance(value, (list, tuple)):
        return "+".join(_name_value(v) for v in value) if value else "empty"
    return show_value(value).replace(" ", "")


def check_name(name: str) -> str:
    """``--variant NAME``: a single folder name of safe characters, else a one-line ValueError."""
    if not name or _UNSAFE.search(name) or name in (".", "..") or name.startswith("."):
        raise ValueError(f"--variant {name!r}: expected a folder name of letters, digits and ._=,+- "
                         f"(e.g. --variant low-gamma)")
    return name


def _value(entry: Any) -> Any:
    """An override is stored as ``(value, profile value)``; a bare value is the value."""
    return entry[0] if isinstance(entry, tuple) and len(entry) == 2 else entry


@dataclass(frozen=True)
class Variant:
    """A profile plus overrides: ``overrides[field] = (value, profile's value)``, sorted by field."""

    profile: str
    overrides: Mapping[str, tuple[Any, Any]]
    name: str = ""
    notebook_declares: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", dict(sorted(self.overrides.items())))
        if not self.name:
            object.__setattr__(self, "name", variant_name(self.overrides))

    def describe_one(self, key: str) -> str:
        """``gamma = 0.5 (profile tiny: 0.9)``."""
        value, base = self.overrides[key]
        return f"{key} = {show_value(value)} (profile {self.profile}: {show_value(base)})"

    def describe(self) -> str:
        """``gamma = 0.5 (profile tiny: 0.9); top_k = 5 (profile tiny: 3)``."""
        return "; ".join(self.describe_one(key) for key in self.overrides)

    def note(self) -> str:
        """The sentence every caption of the variant ends with."""
        return f"Variant {self.name} of profile {self.profile}: {self.describe()}."

    def record(self, baseline_dir: str | Path | None = None) -> dict[str, Any]:
        """The manifest's ``variant`` entry."""
        return {"name": self.name, "profile": self.profile,
                "overrides": {k: {"value": jsonable(v),
                                  "profile_value": jsonable(b)} for k, (v, b) in self.overrides.items()},
                "baseline": display_path(baseline_dir) if baseline_dir else None}

    def command(self, only: str | None = None) -> str:
        """The one command that runs the profile itself (the baseline) for ``only``."""
        return f"python -m r2mad_lab.reproduce --profile {self.profile}" + (f" --only {only}" if only else "")


def differences(values: Mapping[str, Any], profile_values: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``field -> (value, profile's value)`` for every parameter in ``values`` that differs from the profile's
    (paths and the profile's name never count; a name the profile does not have is an override of nothing: kept
    with profile value None; a protocol choice given as None is the preset's value, the profile's own)."""
    found = {}
    for key, value in values.items():
        if key in NOT_OVERRIDES or key.startswith("_") or value is Ellipsis:
            continue
        if value is None and key in PROFILE_CHOICES:  # a protocol choice left to the preset: the profile's own
            continue
        base = profile_values.get(key)
        if key not in profile_values or not same_value(value, base):
            found[key] = (value, base)
    return found


def inert_notes(overrides: Mapping[str, Any], profile_values: Mapping[str, Any]) -> list[str]:
    """One line per override that cannot act where the run would spend its time, said before it runs: gamma (and a
    fixed lambda) act only through lambda_t of the MMR pick (Eqs. 5-6), which at K = 1 cannot change the pick (the
    first pick is the most relevant candidate whatever lambda_t; memory/retrieval.py), so at the profile's K = 1 a
    gamma change reaches only the rows that set their own K (notebook 04's "(K=3)" retrieval ablation)."""
    values = {**profile_values, **overrides}
    notes = []
    for key in ("gamma",):
        if key in overrides and int(values.get("top_k") or 1) == 1:
            notes.append(f"reproduce: note: {key} acts only through lambda_t, which at K = 1 cannot change the pick "
                         f"(Eqs. 5-6): with top_k = 1 it reaches only rows that set their own K (notebook 04's "
                         f"retrieval ablation at K = 3); every other cell is the profile's run. To see it act: "
                         f"--set top_k=3 --sweep {key}=...")
    return notes


def profile_values(profile: Any) -> dict[str, Any]:
    """Every notebook parameter of a profile (a :class:`~r2mad_lab.experiments.profiles.Profile`, or a name or path
    to load): the fields, ``extra_parameters`` spread out, optional defaults, each protocol choice the profile leaves
    to its preset at the preset's value (``top_k`` of the paper preset: 1)."""
    loaded = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    values = loaded.parameters({})
    for name, value in loaded.spec.choices.items():
        if values.get(name) is None:
            values[name] = value
    return values


def shown_path(path: str | Path) -> str:
    """A path as a variant's labels show it: relative to the repository when inside it, else from its ``figures``
    (or ``notebooks``) part on (``.../figures/tiny/variants/gamma=0.5``): no machine paths in outputs."""
    shown = display_path(path)
    if not shown.startswith(".../"):
        return shown
    parts = Path(path).resolve().parts
    for anchor in ("figures", "notebooks"):
        if anchor in parts:
            return ".../" + "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor):])
    return shown


def variant_dir(profile_dir: str | Path, name: str) -> Path:
    """``<profile_dir>/variants/<name>``."""
    return Path(profile_dir) / VARIANTS_DIR / name


def profile_dir_of(directory: str | Path) -> Path:
    """The profile's own folder of ``directory``: itself, or two levels up for ``.../variants/<name>``."""
    directory = Path(directory)
    return directory.parent.parent if directory.parent.name == VARIANTS_DIR else directory


def to_environment(overrides: Mapping[str, Any], name: str | None) -> str:
    return json.dumps({"name": name, "overrides": jsonable({k: _value(v) for k, v in overrides.items()})})


def from_environment() -> tuple[dict[str, Any], str | None]:
    """The overrides and name ``reproduce`` passed to this kernel (``({}, None)`` when run otherwise)."""
    text = os.environ.get(ENVIRONMENT, "").strip()
    if not text:
        return {}, None
    data = json.loads(text)
    return dict(data.get("overrides") or {}), data.get("name")


def detect(loaded: Any, base: Any, name: str | None = None) -> Variant | None:
    """The variant a notebook runs: every resolved value of ``loaded`` (the profile with the notebook's overrides)
    that differs from ``base`` (the profile itself), compared after the protocol preset is resolved, so an override
    that equals what the profile resolves to is no variant. The name: ``name``, else the one ``reproduce`` passed
    (:data:`ENVIRONMENT`), else from the overrides. None when nothing differs."""
    found = differences(profile_values(loaded), profile_values(base))
    if not found:
        return None
    name = name or from_environment()[1]
    return Variant(base.name, found, check_name(str(name)) if name else "")


def mark_variant(executed: Path, profile: Any, name: str | None, artifacts_dir: Path, figures_dir: Path) -> None:
    """A variant's executed notebook says at its top which variant it is and where its outputs went."""
    import nbformat  # lazy: the notebooks extra

    from r2mad_core.files import atomic_write

    if not executed.is_file():
        return
    found = differences(profile_values(profile), profile_values(profile.reloaded()))
    variant = Variant(profile.name, found or {"?": (None, None)}, name or "")
    notebook = nbformat.read(executed, as_version=4)
    cell = nbformat.v4.new_markdown_cell(
        f"**Variant `{variant.name}` of profile {profile.name}**: {variant.describe()}. Its figures and tables are in "
        f"`{shown_path(artifacts_dir)}/`, each compared with the profile's (`*_vs_profile`); the profile's "
        f"own artifacts are in `{shown_path(figures_dir)}/`.")
    cell.metadata["tags"] = ["variant"]
    notebook.cells.insert(0, cell)
    atomic_write(executed, nbformat.writes(notebook) + "\n")

# --------------------------------------------------------------------------------------------
# A sweep: its axes, their product, one point per setting
# --------------------------------------------------------------------------------------------


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``"gamma=0,0.3,0.6"`` -> ``("gamma", [0, 0.3, 0.6])``; values are YAML, split at top-level commas
    (``"top_k=[1, 2],[3]"`` is two lists). A one-line ValueError for anything else."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key or not rest.strip():
        raise ValueError(f"--sweep {text!r}: expected KEY=V1,V2,..., e.g. --sweep gamma=0,0.3,0.6,0.9")
    parts, depth, current = [], 0, ""
    for char in rest:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    try:
        values = [yaml.safe_load(p) for p in parts if p.strip()]
    except yaml.YAMLError as exc:
        raise ValueError(f"--sweep {text!r}: a value is not valid YAML: {exc}") from None
    if len(values) < 2:
        raise ValueError(f"--sweep {text!r}: expected at least two values, e.g. --sweep {key}=0,0.5")
    if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
        raise ValueError(f"--sweep {text!r}: a value repeats")
    return key, values


def sweep_points(axes: Sequence[tuple[str, Sequence[Any]]], settings: Mapping[str, Any] | None = None
                 ) -> list[dict[str, Any]]:
    """The Cartesian product of the swept axes (``[("gamma", [0, 0.9]), ("top_k", [1, 3])]`` -> 4 settings), first
    axis outermost. A key swept twice, or an axis inert given ``settings`` (r2mad_core.memory.inert), is a one-line
    ValueError."""
    keys = [key for key, _ in axes]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"--sweep {repeated[0]} is given twice; give its values once: --sweep {repeated[0]}=V1,V2,...")
    if settings is not None and (inert := inert_sweep_problem(axes, settings)):
        raise ValueError(inert)
    return [dict(zip(keys, values, strict=False)) for values in itertools.product(*(list(v) for _, v in axes))]




# --------------------------------------------------------------------------------------------
# Replicates: one point per run seed
# --------------------------------------------------------------------------------------------


def replicate_seeds(seed: int, replicates: int) -> list[int]:
    """``seed, seed + 1, ..., seed + replicates - 1`` (a one-line ValueError for a count out of range)."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or not 1 <= replicates <= MAX_REPLICATES:
        raise ValueError(f"--replicates: expected a whole number from 1 to {MAX_REPLICATES}, found {replicates!r}")
    return [int(seed) + i for i in range(replicates)]


# --------------------------------------------------------------------------------------------
# Every point of an ablation: the product of the axes and the seeds
# --------------------------------------------------------------------------------------------


@dataclass
class Point:
    """One run of the chosen notebooks: its swept values (``setting``, in the order the axes were given), its seed,
    the values it runs with (every override: ``--set``, the setting, the seed), the variant they make (None: the
    profile itself) and, once it ran, the folder of its figures and tables (:meth:`at`). A sweep's point, a
    replicate and a ``--set`` variant are all this one object; the comparisons read what they need of it."""

    setting: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    values: dict[str, Any] = field(default_factory=dict)
    variant: Variant | None = None
    replicate: int = 0  # 0: the profile's own seed
    figures_dir: Path | None = None

    @property
    def name(self) -> str:
        return self.variant.name if self.variant is not None else "the profile itself"

    @property
    def is_profile(self) -> bool:
        """Whether the point is the profile itself (no value differs from the profile's)."""
        return self.variant is None

    @property
    def value(self) -> Any:
        """The value on the first swept axis (a sweep figure's x axis)."""
        return next(iter(self.setting.values()))

    def at(self, figures_dir: str | Path) -> "Point":
        """The same point with the folder its run wrote."""
        return replace(self, figures_dir=Path(figures_dir))

    def label(self, keys: Sequence[str] | None = None) -> str:
        """``gamma=0.5, seed=1``; with ``keys``: those axes only (``gamma=0.5``)."""
        if keys is not None:
            return ", ".join(f"{k}={show_value(self.setting[k])}" for k in keys)
        parts = [f"{k}={show_value(v)}" for k, v in self.setting.items()]
        if self.replicate:
            parts.append(f"seed={self.seed}")
        return ", ".join(parts) or (self.variant.name if self.variant is not None else "profile")

def plan_points(base: Mapping[str, Any], profile: str, fixed: Mapping[str, Any],
                axes: Sequence[tuple[str, Sequence[Any]]], seeds: Sequence[int],
                name: str | None = None) -> list[Point]:
    """Every point: the product of the swept axes (first outermost) and the seeds (innermost). ``base``: the
    profile's values (:func:`~.points.profile_values`); ``fixed``: the ``--set`` overrides every point keeps;
    ``name``: ``--variant NAME`` for a single variant's first seed."""
    points = []
    for setting in sweep_points(axes):
        for position, seed in enumerate(seeds):
            values = {**{k: v for k, v in fixed.items() if k not in setting}, **setting}
            if position:
                values["seed"] = seed
            found = differences(values, base)
            named = name if name is not None and not setting and not position else ""
            variant = Variant(profile, found, named) if found else None
            points.append(Point(dict(setting), seed, {k: v for k, v in values.items() if k in found}, variant,
                                position))
    return points
