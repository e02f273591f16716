"""One settings object from the profile to the hook: :class:`RunSettings`.

Everything that shapes a run cell besides the models, the questions' files and the folders, carried whole: the debate
(:class:`~r2mad_core.debate.settings.DebateSettings`), what R2-MAD adds
(:class:`~r2mad_core.memory.settings.MemorySettings`), the other protocol choices by name (:attr:`RunSettings.other`;
every choice, read from the object that holds it: :attr:`RunSettings.choices`), the name of the preset that filled
what was unset (:mod:`r2mad_lab.experiments.protocol`), the seed, the embedder, the question limits and the
bootstrap resamples. Each value has one holder and one default (its declaration's); a preset is an overlay applied
when the settings are made, to what is unset, never after.

- Built once from a profile (:meth:`RunSettings.from_profile`, when the profile file is loaded and validated: the
  profile's ``protocol`` fills every choice it leaves null or out); a
  ``--set``, a sweep point, a variant, a replicate's seed
  (:meth:`r2mad_lab.experiments.profiles.Profile.with_overrides`: every override of a field in :data:`PROFILE_FIELDS`)
  or a table row's own settings (``with_k``: K; the round-0 rows: ``round0``) land in it by one
  :meth:`RunSettings.replace` of flat names, routed to the object that declares each. An override of a field that is not
  a run setting (the models, the benchmarks, which rows a table runs, engine options, extra parameters) changes what the
  rest of the profile is checked against: it takes the profile file's road
  (:func:`r2mad_lab.experiments.profiles.load_profile`).
- The grid (:class:`r2mad_lab.reproduce.grid.ExperimentGrid`) holds it whole.
- It is flattened exactly once, into a method's options, which are a run's recorded identity
  (:func:`r2mad_lab.experiments.method_labels.resolve`): the settings each row has always stated, every other
  memory setting and protocol choice only where it departs from the method's default, so a setting added with a
  default leaves every run key as it was.
- Its inverse is :func:`read_settings`: a run's ``config.json`` read back into its settings objects (debate, memory,
  choices), defaults from the declarations: the one reader of the worked state, the viewer and the runs index.

The walks of gamma and of K from the profile to the line where they act are drawn in docs/design.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from r2mad_core.debate.settings import PROFILE_SETTINGS, DebateSettings
from r2mad_core.debate.settings import SPECS as DEBATE_SPECS
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_core.memory.settings import MemorySettings
from r2mad_lab.experiments import protocol as presets

#: The profile fields that are run settings: what :meth:`RunSettings.from_profile` reads, the names
#: :meth:`RunSettings.replace` routes. An override of one of them (``--set``, a sweep point, a variant, a replicate's
#: seed) lands by that one ``replace`` (:meth:`r2mad_lab.experiments.profiles.Profile.with_overrides`).
PROFILE_FIELDS: tuple[str, ...] = tuple(dict.fromkeys((
    *PROFILE_SETTINGS, *MEMORY_SPECS, *presets.PROFILE_CHOICES, "protocol", "seed", "embedder", "test_limit",
    "train_limit", "bootstrap_resamples")))


#: The protocol choices that are fields of the debate settings / of what R2-MAD adds: each is set there, nowhere else.
DEBATE_CHOICES = tuple(c.name for c in presets.CHOICES if c.field == "debate")
MEMORY_CHOICES = tuple(c.name for c in presets.CHOICES if c.field == "memory")
#: The other choices (a method option, how the banks are built, which questions, the overflow): held in
#: :attr:`RunSettings.choices` by name.
OTHER_CHOICES = tuple(c.name for c in presets.CHOICES if c.field not in ("debate", "memory")
                      and c.name in presets.PROFILE_CHOICES)


@dataclass(frozen=True)
class RunSettings:
    """The settings of a profile's runs (see the module docstring).

    A preset is an overlay (:func:`r2mad_lab.experiments.protocol.overlay`): what is left unset (None: ``debate``,
    ``memory``, ``choices``, or a choice of ``choices``) takes the value of ``protocol``'s preset when the settings
    are made, and nothing is changed after: an object given whole is taken whole (``RunSettings(memory=
    MemorySettings(top_k=5))`` runs K = 5; its other fields are the declaration's defaults). ``choices``: every
    protocol choice by name (read: the debate's and K from their objects, the others held here)."""

    debate: DebateSettings = None  # type: ignore[assignment]  # None: the declaration's, overlaid by the preset
    memory: MemorySettings = None  # type: ignore[assignment]
    protocol: str = presets.DEFAULT_PROTOCOL
    seed: int = 0
    embedder: str = "hashing"
    test_limit: int | None = None
    train_limit: int | None = None
    bootstrap_resamples: int = 10_000
    other: Mapping[str, Any] = None  # type: ignore[assignment]  # the choices of OTHER_CHOICES; None: the preset's

    def __post_init__(self) -> None:
        values = presets.preset(self.protocol)
        if self.debate is None:
            object.__setattr__(self, "debate", DebateSettings().replace(**{k: values[k] for k in DEBATE_CHOICES}))
        if self.memory is None:
            object.__setattr__(self, "memory", MemorySettings().replace(**{k: values[k] for k in MEMORY_CHOICES}))
        other = dict(self.other or {})
        unknown = sorted(set(other) - set(OTHER_CHOICES))
        if unknown:
            raise TypeError(f"RunSettings: {unknown} are not protocol choices held by name ({list(OTHER_CHOICES)})")
        object.__setattr__(self, "other", MappingProxyType(
            {k: values[k] if other.get(k) is None else other[k] for k in OTHER_CHOICES}))

    @classmethod
    def from_profile(cls, spec: Any) -> "RunSettings":
        """The settings of a typed profile (:class:`~r2mad_lab.experiments.profile_schema.ProfileSpec`): its fields, and
        for every protocol choice it leaves unset (null or left out) the value of its ``protocol``'s preset."""
        values = presets.overlay(spec.protocol, {name: getattr(spec, name) for name in presets.PROFILE_CHOICES})
        return cls(
            debate=DebateSettings().replace(**{name: getattr(spec, name) for name in PROFILE_SETTINGS},
                                            **{k: values[k] for k in DEBATE_CHOICES}),
            memory=MemorySettings(**{name: getattr(spec, name) for name in MEMORY_SPECS if name not in MEMORY_CHOICES},
                                  **{k: values[k] for k in MEMORY_CHOICES}),
            protocol=spec.protocol, other={k: values[k] for k in OTHER_CHOICES},
            seed=spec.seed, embedder=spec.embedder, test_limit=spec.test_limit, train_limit=spec.train_limit,
            bootstrap_resamples=spec.bootstrap_resamples,
        )

    def replace(self, **changes: Any) -> "RunSettings":
        """These settings with ``changes`` (flat names: ``w_low=0.4``, ``n_rounds=2``, ``round0="independent"``,
        ``top_k=5``, ``seed=1``; or a whole ``debate``/``memory`` object, taken whole), each routed to the one object
        that declares it: a debate setting (the loop's protocol choices among them) to :attr:`debate`, what R2-MAD
        adds (K among it) to :attr:`memory`, any other protocol choice to :attr:`other`. A preset fills only what
        is unset when settings are made: ``protocol`` and a choice's None are refused here (a profile override of
        either is loaded with the profile file, :meth:`r2mad_lab.experiments.profiles.Profile.with_overrides`)."""
        own = {f.name for f in dataclasses.fields(self)} - {"protocol", "other"}
        if "protocol" in changes:
            raise TypeError("RunSettings.replace: protocol is a preset, applied to the unset settings when "
                            "settings are made (RunSettings(protocol=...), a profile's protocol); it never changes "
                            "settings after")
        nulls = sorted(k for k, v in changes.items() if v is None and k in presets.BY_NAME)
        if nulls:
            raise TypeError(f"RunSettings.replace: {nulls}=None: a preset fills an unset choice when settings are made "
                            "(a profile's null), never after")
        direct = {k: v for k, v in changes.items() if k in own}
        debate = {k: v for k, v in changes.items() if k not in direct and (k in PROFILE_SETTINGS or k in DEBATE_SPECS)}
        memory = {k: v for k, v in changes.items() if k not in direct and k not in debate and k in MEMORY_SPECS}
        other = {k: v for k, v in changes.items() if k in OTHER_CHOICES}
        unknown = sorted(set(changes) - set(direct) - set(debate) - set(memory) - set(other))
        if unknown:
            raise TypeError(f"RunSettings: unknown setting(s) {unknown}")
        values: dict[str, Any] = dict(direct)
        if debate:
            values["debate"] = values.get("debate", self.debate).replace(**debate)
        if memory:
            values["memory"] = values.get("memory", self.memory).replace(**memory)
        if other:
            values["other"] = {**self.other, **other}
        return dataclasses.replace(self, **values)

    @property
    def choices(self) -> Mapping[str, Any]:
        """Every protocol choice by name, read from the object that holds it (a view, never a second copy)."""
        held = {**{k: getattr(self.debate, k) for k in DEBATE_CHOICES},
                **{k: getattr(self.memory, k) for k in MEMORY_CHOICES}, **self.other}
        return MappingProxyType({c.name: held[c.name] for c in presets.CHOICES if c.name in held})

    # -- read ------------------------------------------------------------------------------------
    @property
    def method_choices(self) -> dict[str, Any]:
        """The protocol's method-level choices, under each method option's name (K apart: it is a memory setting)."""
        choices = self.choices
        return {c.method_option: choices[c.name] for c in presets.CHOICES if c.level == "method" and c.name != "top_k"}

    def memory_options(self) -> dict[str, Any]:
        """How the memory banks are built under this protocol
        (:func:`r2mad_lab.experiments.protocol.memory_options`)."""
        return presets.memory_options(self.protocol, self.choices)

    def values(self) -> dict[str, Any]:
        """Plain values: the debate, the memory settings, the protocol with every choice, the rest."""
        return {"debate": self.debate.values(), "memory": self.memory.values(), "protocol": self.protocol,
                "choices": dict(self.choices), "seed": self.seed, "embedder": self.embedder,
                "test_limit": self.test_limit, "train_limit": self.train_limit,
                "bootstrap_resamples": self.bootstrap_resamples}


@dataclass(frozen=True)
class RecordedSettings:
    """A run's settings read back from its ``config.json`` (:func:`read_settings`, the inverse of the flattening into
    a method's options): ``method`` the registered method, ``options`` as recorded, the debate settings, what R2-MAD
    adds and every protocol choice the method takes, each filled from its declaration where the run did not record
    it (an option added after the run, one at its default that the run leaves out, one its policy does not read)."""

    method: str
    options: Mapping[str, Any]
    debate: DebateSettings
    memory: MemorySettings
    choices: Mapping[str, Any]

    def recorded(self, name: str) -> bool:
        """Whether the run recorded option ``name`` (a setting its configuration does not read is not recorded)."""
        return name in self.options


def _as_recorded(cls: Any, values: Mapping[str, Any]) -> Any:
    """A settings object holding what a run recorded, the declaration's defaults elsewhere, not checked again: the
    values were checked when the run was made (a plugin's policy need not be registered to read its run back)."""
    made = object.__new__(cls)
    for f in dataclasses.fields(cls):
        object.__setattr__(made, f.name, values.get(f.name, f.default))
    return made


def read_settings(config: Mapping[str, Any]) -> RecordedSettings:
    """The settings of a run from its ``config.json`` (a mapping, or its ``method`` record: ``{"name", "options",
    ...}``): one reader for the worked state, the viewer, the runs index and the run pages."""
    method = config.get("method", config) if isinstance(config.get("method"), Mapping) else config
    options = dict(method.get("options") or {})
    debate = _as_recorded(DebateSettings, {k: v for k, v in options.items() if k in DEBATE_SPECS})
    memory = _as_recorded(MemorySettings, {k: v for k, v in options.items() if k in MEMORY_SPECS
                                           and (v is not None or MEMORY_DEFAULTS[k] is None)})
    choices = {}
    for choice in presets.CHOICES:
        if choice.field in ("debate", "memory"):
            choices[choice.name] = getattr(debate if choice.field == "debate" else memory, choice.name)
        elif choice.field == "method" and choice.method_option in options:
            choices[choice.name] = options[choice.method_option]
        elif choice.name in presets.PROFILE_CHOICES:
            choices[choice.name] = config.get(choice.name, presets.declared_default(choice.name)) if choice.field == \
                "profile" else presets.declared_default(choice.name)
    return RecordedSettings(str(method.get("name", "")), MappingProxyType(options), debate, memory,
                            MappingProxyType(choices))
