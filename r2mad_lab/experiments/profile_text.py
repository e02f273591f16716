"""A profile's text: YAML numbers, the ``${NAME}`` rule, ``--set KEY=VALUE``, and the one profile error.

YAML read as Python reads numbers, the ``${NAME}`` rule of its model and endpoint fields, and
``--set KEY=VALUE``; :class:`ProfileError`, the one error of a profile (:mod:`r2mad_lab.experiments.profile_schema`
is the schema, :mod:`r2mad_lab.experiments.profiles` the loading, which re-exports these names)."""

from __future__ import annotations

import functools
import os
import re
from typing import Any

import yaml

from r2mad_lab.experiments.model_specs import ENVIRONMENT_VARIABLE


class ProfileError(ValueError):
    """A profile file is missing, unreadable or has fields of the wrong type or value."""


class NumberLoader(yaml.SafeLoader):
    """YAML's safe loader reading numbers as Python does: ``5e-1`` and ``1e3`` are floats (YAML 1.1, PyYAML's
    default, wants ``5.0e-1``: ``--set gamma=5e-1`` was refused as the string '5e-1')."""


NumberLoader.yaml_implicit_resolvers = {key: list(value)
                                        for key, value in yaml.SafeLoader.yaml_implicit_resolvers.items()}
NumberLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def read_yaml(text: str) -> Any:
    """YAML text as a profile reads it (:class:`NumberLoader`)."""
    return yaml.load(text, Loader=NumberLoader)  # noqa: S506 (a SafeLoader subclass)


@functools.lru_cache(maxsize=32)
def _parsed_yaml(text: str) -> Any:
    """A profile's YAML, parsed once per text (parsing is slow and every load asked; callers get a deep copy)."""
    return read_yaml(text)


#: The fields where ``${NAME}`` may stand: the ones naming a model (``models[i].model``, ``large_models[i].model``) or
#: an endpoint (``options.base_url``/``base_urls``). Elsewhere ``${NAME}`` is an error: a label names folders and table
#: rows.
EXPANDABLE_FIELDS = re.compile(r"(models|large_models)\[\d+\]\.(model|options\.base_urls?(\[\d+\])?)")


def _secret_variables(data: Any) -> set[str]:
    """The variables a profile names as holding API keys (every ``api_key_env``): never a model or an endpoint."""
    if isinstance(data, dict):
        return {v for k, v in data.items() if k == "api_key_env" and isinstance(v, str)}.union(
            *(_secret_variables(v) for k, v in data.items() if k != "api_key_env"))
    return set().union(*(_secret_variables(v) for v in data)) if isinstance(data, list) else set()


def expand_environment(data: Any, source: str, where: str = "",
                       secrets: set[str] | frozenset[str] = frozenset()) -> Any:
    """Check every ``${NAME}`` of a profile; the profile keeps the text ``${NAME}`` (secrets by construction).

    ``${NAME}`` may stand only in :data:`EXPANDABLE_FIELDS` (a model's name, an endpoint), ``NAME`` must be set and
    may not be one of ``secrets`` (the profile's ``api_key_env`` variables). The value is read only when the engine
    is opened (:meth:`r2mad_lab.experiments.model_specs.ModelSpec.resolved`), so what the profile's fields reach --
    the notebooks' parameters, the executed notebooks, every manifest and run configuration -- is the variable's
    name, never its value. Each refusal is a :class:`ProfileError` naming the file, the field and the variable."""
    if isinstance(data, dict):
        return {key: expand_environment(value, source, f"{where}.{key}" if where else str(key), secrets)
                for key, value in data.items()}
    if isinstance(data, list):
        return [expand_environment(value, source, f"{where}[{i}]", secrets) for i, value in enumerate(data)]
    if isinstance(data, str) and "${" in data:
        for name in ENVIRONMENT_VARIABLE.findall(data):
            uses = f"{source}: field {where!r} uses ${{{name}}}"
            if not EXPANDABLE_FIELDS.fullmatch(where):
                raise ProfileError(
                    f"{uses}, but environment variables are read only in the fields naming a model or an endpoint "
                    "(models[i].model, large_models[i].model, options.base_urls): write the value itself"
                )
            if name in secrets:
                raise ProfileError(
                    f"{uses}, which holds an API key (api_key_env): a key reaches an engine by name only")
            if not os.environ.get(name, "").strip():
                raise ProfileError(
                    f"{uses}, but the environment variable {name} is not set (export it, see the comments in the "
                    "profile file)"
                )
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"top_k=5"`` -> ``("top_k", 5)``; the value is read as YAML (lists, null, numbers, strings)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ProfileError(f"--set {text!r}: expected KEY=VALUE, e.g. --set top_k=5")
    try:
        return key.strip(), read_yaml(value)
    except yaml.YAMLError as exc:
        raise ProfileError(f"--set {text!r}: the value is not valid YAML: {exc}") from exc
