"""One settings object from the profile to the hook: :class:`RunSettings`.

Everything that shapes a run cell besides the models, the questions' files and the folders, carried whole: the debate
(:class:`~r2mad_core.debate.settings.DebateSettings`), what R2-MAD adds
(:class:`~r2mad_core.memory.settings.MemorySettings`), the protocol preset with every choice resolved
(:mod:`r2mad_core.experiments.protocol`), the seed, the embedder, the question limits and the bootstrap resamples.

- Built once from a profile (:meth:`RunSettings.from_profile`, when the profile file is loaded and validated); a
  ``--set``, a sweep point, a variant, a replicate's seed (:meth:`r2mad_core.experiments.profiles.Profile.with_overrides`:
  every override of a field in :data:`PROFILE_FIELDS`) or a table row's own settings (``with_k``: K; the round-0 rows:
  ``round0``) land in it by one :meth:`RunSettings.replace` of flat names, routed to the object that declares each.
  An override of a field that is not a run setting (the models, the benchmarks, which rows a table runs, engine
  options, extra parameters) changes what the rest of the profile is checked against: it takes the profile file's
  road (:func:`r2mad_core.experiments.profiles.load_profile`).
- The grid (:class:`r2mad_core.reproduce.grid.ExperimentGrid`) holds it whole.
- It is flattened exactly once, into a method's options, which are a run's recorded identity
  (:func:`r2mad_core.experiments.method_labels.resolve`): the settings each row has always stated, every other
  memory setting and protocol choice only where it departs from the method's default, so a setting added with a
  default leaves every run key as it was.

The walk of one value (Eq. 6's tradeoff) from the profile to the line where it acts is drawn in docs/design.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from r2mad_core.debate.settings import PROFILE_SETTINGS, SPECS as DEBATE_SPECS, DebateSettings
from r2mad_core.experiments import protocol as presets
from r2mad_core.memory.settings import SPECS as MEMORY_SPECS, MemorySettings


#: The profile fields that are run settings: what :meth:`RunSettings.from_profile` reads, the names
#: :meth:`RunSettings.replace` routes. An override of one of them (``--set``, a sweep point, a variant, a replicate's
#: seed) lands by that one ``replace`` (:meth:`r2mad_core.experiments.profiles.Profile.with_overrides`).
PROFILE_FIELDS: tuple[str, ...] = tuple(dict.fromkeys((
    *PROFILE_SETTINGS, *MEMORY_SPECS, *presets.PROFILE_CHOICES, "protocol", "seed", "embedder", "test_limit",
    "train_limit", "bootstrap_resamples")))


@dataclass(frozen=True)
class RunSettings:
    """The settings of a profile's runs (see the module docstring). ``given``: the protocol choices stated explicitly
    (the rest are the preset's); ``choices``: every choice resolved; ``memory.top_k`` is the resolved K."""

    debate: DebateSettings = field(default_factory=DebateSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    protocol: str = presets.DEFAULT_PROTOCOL
    given: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    embedder: str = "hashing"
    test_limit: int | None = None
    train_limit: int | None = None
    bootstrap_resamples: int = 10_000
    choices: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        presets.check_protocol(self.protocol)
        given = {k: v for k, v in self.given.items() if v is not None}
        choices = presets.resolve(self.protocol, given)
        object.__setattr__(self, "given", MappingProxyType(given))
        object.__setattr__(self, "choices", MappingProxyType(choices))
        object.__setattr__(self, "memory", self.memory.replace(top_k=int(choices["top_k"])))

    @classmethod
    def from_profile(cls, spec: Any) -> "RunSettings":
        """The settings of a typed profile (:class:`~r2mad_core.experiments.profiles.ProfileSpec`)."""
        return cls(
            debate=DebateSettings().replace(**{name: getattr(spec, name) for name in PROFILE_SETTINGS}),
            memory=MemorySettings(**{name: getattr(spec, name) for name in MEMORY_SPECS if name != "top_k"}),
            protocol=spec.protocol, given={name: getattr(spec, name) for name in presets.PROFILE_CHOICES},
            seed=spec.seed, embedder=spec.embedder, test_limit=spec.test_limit, train_limit=spec.train_limit,
            bootstrap_resamples=spec.bootstrap_resamples,
        )

    def replace(self, **changes: Any) -> "RunSettings":
        """These settings with ``changes`` (flat names: ``w_low=0.4``, ``n_rounds=2``, ``round0="independent"``,
        ``seed=1``; or a whole ``debate``/``memory`` object), each routed to the object that declares it: the
        profile's debate settings to :attr:`debate`, the protocol choices (K among them) to :attr:`given`, what
        R2-MAD adds to :attr:`memory`. None for a protocol choice: the preset's value."""
        own = {f.name for f in dataclasses.fields(self) if f.init}
        direct = {k: v for k, v in changes.items() if k in own}
        debate = {k: v for k, v in changes.items() if k not in direct and (k in PROFILE_SETTINGS or (
            k in DEBATE_SPECS and k not in presets.PROFILE_CHOICES))}
        given = {k: v for k, v in changes.items() if k not in direct and k not in debate and k in presets.BY_NAME}
        memory = {k: v for k, v in changes.items() if k not in direct and k not in debate and k not in given
                  and k in MEMORY_SPECS}
        unknown = sorted(set(changes) - set(direct) - set(debate) - set(given) - set(memory))
        if unknown:
            raise TypeError(f"RunSettings: unknown setting(s) {unknown}")
        values = {"debate": self.debate, "memory": self.memory, "given": self.given, **direct}
        if debate:
            values["debate"] = values["debate"].replace(**debate)
        if memory:
            values["memory"] = values["memory"].replace(**memory)
        if given:  # None: back to the preset's value (__post_init__ drops it)
            values["given"] = {**values["given"], **given}
        return dataclasses.replace(self, **values)

    # -- read ------------------------------------------------------------------------------------
    @property
    def method_choices(self) -> dict[str, Any]:
        """The protocol's method-level choices, under each method option's name (K apart: it is a memory setting)."""
        return {c.method_option: self.choices[c.name] for c in presets.CHOICES
                if c.level == "method" and c.name != "top_k"}

    def memory_options(self) -> dict[str, Any]:
        """How the memory banks are built under this protocol (:func:`r2mad_core.experiments.protocol.memory_options`)."""
        return presets.memory_options(self.protocol, self.choices)

    def values(self) -> dict[str, Any]:
        """Plain values: the debate, the memory settings, the protocol with every choice, the rest."""
        return {"debate": self.debate.values(), "memory": self.memory.values(), "protocol": self.protocol,
                "choices": dict(self.choices), "seed": self.seed, "embedder": self.embedder,
                "test_limit": self.test_limit, "train_limit": self.train_limit,
                "bootstrap_resamples": self.bootstrap_resamples}
