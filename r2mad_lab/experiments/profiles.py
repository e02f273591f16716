"""Profiles loaded: a packaged name or a YAML file read, validated by the schema, and overridden (``Profile``).

A loaded profile (:class:`Profile`) carries the settings of its runs whole (``run_settings``, a
:class:`~r2mad_lab.experiments.run_settings.RunSettings` built once from the validated file); ``--set``, a sweep
point, a variant and a notebook's ``overrides`` reach it by :meth:`Profile.with_overrides` (a run setting by one
``RunSettings.replace``; any other field by loading the file again with it).

Strings of the form ``${NAME}`` stand for the environment variable ``NAME`` in the fields that name a model or an
endpoint only (:data:`EXPANDABLE_FIELDS`, checked when a profile is loaded: :func:`expand_environment`), and are
replaced by its value only when the engine is opened: every field of a profile reaches the notebooks' parameters,
the executed notebooks and the artifacts' manifests, so what they record is the variable's name, never its value
(secrets by construction, whatever the variable is called). API keys reach an engine by name too
(``api_key_env: NAME``), read by the engine when it sends a request.

The schema, its fields and their rules are :mod:`r2mad_lab.experiments.profile_schema`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from r2mad_core.plugins import PluginError, load_plugins
from r2mad_lab.experiments import protocol as protocol_presets
from r2mad_lab.experiments.profile_schema import (
    OPTIONAL_FIELDS,
    ProfileSpec,
    field_type,
    invalid_profile,
    problem_lines,
    validated_spec,
)
from r2mad_lab.experiments.profile_text import (  # noqa: F401  (re-exported: a profile's text, read)
    EXPANDABLE_FIELDS,
    NumberLoader,
    ProfileError,
    _parsed_yaml,
    _secret_variables,
    expand_environment,
    parse_override,
    read_yaml,
)
from r2mad_lab.experiments.run_settings import PROFILE_FIELDS as RUN_SETTING_FIELDS
from r2mad_lab.experiments.run_settings import RunSettings

PROFILE_PACKAGE_DIR = "profiles"


@dataclass(frozen=True)
class Profile:
    """A validated profile: ``name``, the file it came from, its fields as written (the notebook
    parameters) and ``spec``, the same fields typed (:class:`ProfileSpec`, defaults filled in)."""

    name: str
    source: str
    fields: Mapping[str, Any]
    spec: ProfileSpec
    #: What a kernel is given to load the same profile: the packaged name, or the YAML file's absolute path.
    location: str = ""
    #: The overrides it was loaded with (``--set``, ``--sweep``, a notebook's ``overrides``), as given.
    overrides: Mapping[str, Any] = field(default_factory=dict)
    #: The settings of its runs (built once, from ``spec``, when the file is validated; the overrides of run settings
    #: applied by :meth:`RunSettings.replace`): what the grid holds whole.
    run_settings: RunSettings = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.run_settings is None:
            object.__setattr__(self, "run_settings", RunSettings.from_profile(self.spec))

    def with_overrides(self, overrides: Mapping[str, Any] | None, extra_keys: Any = ()) -> "Profile":
        """This profile with ``overrides`` on top of its own (``--set``, a sweep point, a variant, a replicate's seed,
        a notebook's ``overrides``; None or empty: itself).

        A preset fills only what a profile leaves unset, where the profile is loaded: an override of ``protocol``, or
        a protocol choice set to null (the preset's value again), is loaded with the file (:func:`load_profile`).
        Any other override of a run setting (:data:`~r2mad_lab.experiments.run_settings.PROFILE_FIELDS`: the debate's,
        what R2-MAD adds, the protocol and its choices, the seed, the embedder, the limits) lands by one
        :meth:`RunSettings.replace` on :attr:`run_settings`: its value is checked against its declared type (the
        profile field's, generated from the declaration; one line naming the field), the profile file is neither
        read nor validated again, and ``spec`` and ``fields`` show the new value to the notebooks. An override of
        any other field (the models, the benchmarks, which rows a table runs, engine options, an extra parameter)
        changes what the rest of the profile is checked against (a label must name a model): the profile file is
        loaded again with it (:func:`load_profile`). An unknown key is refused (:func:`check_override_keys`)."""
        if not overrides:
            return self
        if any(key not in RUN_SETTING_FIELDS or key == "protocol"
               or (value is None and key in protocol_presets.PROFILE_CHOICES)
               for key, value in overrides.items()):  # a preset fills unset choices where the profile is loaded
            return load_profile(self.location or self.source, {**self.overrides, **overrides}, extra_keys=extra_keys)
        errors = []
        for key, value in overrides.items():
            try:
                field_type(key).validate_python(value)
            except ValidationError as exc:
                errors += problem_lines(exc, self.source, key)
        if errors:
            raise invalid_profile(errors)
        try:
            settings = self.run_settings.replace(**overrides)
        except ValueError as exc:  # a rule between two settings (w_l <= w_h, Eq. 7), said by its declaration
            raise ProfileError(f"invalid profile: {self.source}: {exc}") from None
        return dataclasses.replace(self, fields={**self.fields, **overrides},
                                   spec=self.spec.model_copy(update=overrides),
                                   overrides={**self.overrides, **overrides}, run_settings=settings)

    @property
    def folder(self) -> str:
        """The profile's name as a folder name (``figures/<folder>``): letters, digits and ``._-`` only, never
        ``..`` (a profile given as ``../profiles/tiny`` writes into ``figures/tiny``)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("._") or "profile"

    def reloaded(self, overrides: Mapping[str, Any] | None = None, extra_keys: Any = ()) -> "Profile":
        """The same profile file with ``overrides`` instead of this one's (None: none)."""
        return load_profile(self.location or self.source, overrides, extra_keys=extra_keys)

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def parameters(self, paths: Mapping[str, Any]) -> dict[str, Any]:
        """Every notebook parameter: the fields (``extra_parameters`` spread out; an optional field the profile
        leaves out takes the schema's default), the name, the paths."""
        params = {name: getattr(self.spec, name) for name in OPTIONAL_FIELDS}
        params["memory_models"] = [m.model_dump() for m in self.spec.memory_models]
        params.update({k: v for k, v in self.fields.items() if k != "extra_parameters"})
        params.update(self.fields.get("extra_parameters") or {})
        params["profile"] = self.name
        params.update({k: (str(v) if isinstance(v, Path) else v) for k, v in paths.items()})
        return params


def profile_names() -> list[str]:
    """The profiles shipped with the package (``api``, ``cpu``, ``paper``, ``sim``, ``tiny``)."""
    folder = resources.files("r2mad_lab").joinpath(PROFILE_PACKAGE_DIR)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None, *,
                 extra_keys: Any = ()) -> Profile:
    """Load and validate a profile by name (a packaged profile) or by path to a YAML file.

    ``overrides``: the overrides of fields that are not run settings replace top-level fields (or
    ``extra_parameters`` entries) before validation; those of run settings land afterwards, by one
    :meth:`RunSettings.replace` (:meth:`Profile.with_overrides`). A key that is
    neither a profile field (every protocol choice is one), an ``extra_parameters`` entry of the profile nor one of
    ``extra_keys`` (the extra parameters a notebook declares) is refused: one line naming the nearest valid keys
    (:func:`check_override_keys`).
    The registries the fields are checked against include plugins (:func:`r2mad_core.plugins.load_plugins`:
    ``R2MAD_PLUGINS`` and the ``r2mad.plugins`` entry points), loaded here first, so a plugin's benchmark, policy
    or method label is a valid profile value in the runner and in every notebook's kernel.
    Raises :class:`ProfileError` listing every problem.
    """
    try:
        load_plugins()
    except PluginError as exc:
        raise ProfileError(str(exc)) from exc
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.is_file():
            raise ProfileError(f"profile file {candidate} does not exist")
        text, source, name = candidate.read_text(encoding="utf-8"), str(candidate), candidate.stem
        location = str(candidate.resolve())
    else:
        name = location = str(name_or_path)
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):  # not a packaged name (``../profiles/tiny``): never a folder
            raise ProfileError(f"unknown profile {name!r}: expected one of {profile_names()} or a path to a .yaml file")
        resource = resources.files("r2mad_lab").joinpath(PROFILE_PACKAGE_DIR, f"{name}.yaml")
        if not resource.is_file():
            raise ProfileError(f"unknown profile {name!r}: expected one of {profile_names()} or a path to a .yaml file")
        text, source = resource.read_text(encoding="utf-8"), f"r2mad_lab/profiles/{name}.yaml"
    try:
        data = copy.deepcopy(_parsed_yaml(text))
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: not valid YAML: {exc}") from exc
    data = expand_environment(data, source, secrets=_secret_variables(data))
    given = overrides = dict(overrides or {})
    if overrides and isinstance(data, dict):
        check_override_keys(overrides, data, name, extra_keys)
    # a preset and what it fills: with the file
    run = {key: value for key, value in overrides.items() if key in RUN_SETTING_FIELDS and key != "protocol"
           and not (value is None and key in protocol_presets.PROFILE_CHOICES)}
    overrides = {key: value for key, value in overrides.items() if key not in run}
    if overrides and isinstance(data, dict):
        data = dict(data)
        for key, value in overrides.items():
            if key in ProfileSpec.model_fields:
                data[key] = value
            else:
                extra = dict(data.get("extra_parameters") or {})
                extra[key] = value
                data["extra_parameters"] = extra
    spec, errors = validated_spec(data, source)
    if spec is None:
        raise invalid_profile(errors)
    loaded = Profile(name=name, source=source, fields=data, spec=spec, location=location, overrides=overrides)
    return dataclasses.replace(loaded.with_overrides(run), overrides=given)  # as given, in their order


def check_override_keys(overrides: Mapping[str, Any], data: Mapping[str, Any], name: str, extra_keys: Any = ()) -> None:
    """Refuse an override key that is not a profile field (every protocol choice is one), an ``extra_parameters``
    entry of the profile nor one of ``extra_keys``: one line naming the nearest valid keys (difflib)."""
    valid = [*ProfileSpec.model_fields, *(data.get("extra_parameters") or {}), *extra_keys]
    for key in overrides:
        if key in valid:
            continue
        near = difflib.get_close_matches(str(key), valid, n=3, cutoff=0.6)
        raise ProfileError(
            f"unknown key {key!r}: not a field of profile {name}, a protocol choice nor a declared extra parameter; "
            + (f"did you mean {', '.join(near)}?" if near else "the fields are ProfileSpec's "
               "(r2mad_lab/experiments/profile_schema.py)"))


__all__ = [
    "Profile", "ProfileError", "check_override_keys", "expand_environment", "load_profile", "parse_override",
    "profile_names",
]
