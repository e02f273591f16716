"""What R2-MAD adds to the debate, declared once (``MemorySettings``).

K (Eq. 5), gamma (Eq. 6), the retrieval policy and its fixed lambda,
the thresholds w_h/w_l (Eq. 7) and how much of a past response an experience shows.

:class:`MemorySettings` is to the method what :class:`~r2mad_core.debate.settings.DebateSettings` is to the debate: a
frozen dataclass whose fields are declared with :func:`~r2mad_core.debate.settings.setting` (default, bounds, one-line
doc citing the paper, the authors' code or "ours"). Everything else reads it:

- the profile schema (:class:`r2mad_lab.experiments.profile_schema.ProfileSpec`) has one field per setting, with its
  default and bounds (a bound a run can honour: ``top_k=1000000000`` is refused before anything runs, with the
  bound); a profile may leave a setting out;
- the run's settings (:class:`r2mad_lab.experiments.run_settings.RunSettings`) carry one :class:`MemorySettings`
  from the profile to the method's options (:func:`r2mad_lab.experiments.method_labels.resolve`);
- the ``r2mad``/``icl_cot`` builders take the settings with
  :func:`~r2mad_core.methods.memory_keywords` (flat options, one checked object);
  :meth:`~r2mad_core.memory.retrieval.RetrievalConfig.from_settings`,
  :meth:`~r2mad_core.memory.confidence.ConfidenceConfig.from_settings` and
  :meth:`~r2mad_core.memory.hook.R2MadSettings.from_settings` fill every field named as a setting;
- ``r2mad run`` has one flag per setting (:func:`r2mad_lab.cli.common.add_setting_arguments`).

Adding a setting is one field here (and reading its default where it acts): docs/extending.md, "Add a memory knob".

Each setting has one default, here: ``top_k``'s is 1 (the authors' run script, ``--n_retrieval 1``), what a method
built without a preset, ``r2mad run`` without ``--protocol`` and every profile run. A protocol preset
(:mod:`r2mad_lab.experiments.protocol`) is an overlay: it fills only the settings a profile or a command line leaves
unset, when the settings are built, never after. The bounds are checked here, once, when a :class:`MemorySettings` is
made; nothing downstream checks a frozen one again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from r2mad_core.debate.settings import Spec, setting

#: The largest K a run can honour: every agent's prompt holds K experiences per round (a bank holds at most
#: train questions x rounds cases per agent; beyond a few dozen no prompt fits a context).
MAX_TOP_K = 64
#: The longest past response an experience may show, in characters (a 128K-token context is ~512K characters).
MAX_EXPERIENCE_CHARS = 1_000_000


#: The retrieval policy registry, by name: :data:`r2mad_core.memory.retrieval.POLICIES` is this very dict (filled by
#: ``register_policy``: the built-ins and a plugin's). Held here so that the vocabulary of ``retrieval_policy`` is read
#: at each check, not at import, without this module importing the one that reads its defaults.
POLICY_REGISTRY: dict[str, Any] = {}


class RegisteredPolicies:
    """The names of the retrieval policies registered when asked (:data:`POLICY_REGISTRY`): the vocabulary of
    ``retrieval_policy``."""

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(POLICY_REGISTRY)

    def __contains__(self, value: object) -> bool:
        return value in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return repr(self.names())


@dataclass(frozen=True)
class MemorySettings:
    """The settings R2-MAD adds to the debate (Section 4), with the paper's values where it gives them."""

    top_k: int = setting(1, "K, experiences retrieved per agent and round by MMR (Eq. 5; the paper does not say; "
                         "default 1: the authors' run script, as both protocol presets)", flag="--top-k", minimum=1,
                         maximum=MAX_TOP_K)
    gamma: float = setting(0.9, "gamma of lambda_t = 1 - gamma * Cons(Z^(t-1)) (Eq. 6; paper: 0.9)", flag="--gamma",
                           minimum=0.0, maximum=1.0)
    retrieval_policy: str = setting("state_aware", "retrieval policy of the R2-MAD rows (default: state_aware, Eq. "
                                    "5-6, the paper's; the others are Table 3's, whose rows state their own)",
                                    flag="--retrieval-policy", choices=RegisteredPolicies())
    fixed_lambda: float = setting(0.5, "lambda of the fixed_lambda retrieval policy (Table 3: 0.25 / 0.5 / 0.75; acts "
                                  "where retrieval_policy is fixed_lambda)", flag="--fixed-lambda", minimum=0.0,
                                  maximum=1.0)
    w_high: float = setting(0.55, "w_h: a peer with confidence c_ji > w_h is annotated high (Eq. 7; paper: 0.55)",
                            flag="--w-high", minimum=0.0, maximum=1.0)
    w_low: float = setting(0.45, "w_l: a peer with confidence c_ji < w_l is annotated low (Eq. 7; paper: 0.45)",
                           flag="--w-low", minimum=0.0, maximum=1.0)
    max_experience_chars: int | None = setting(None, "characters of a past response an experience shows (None: in "
                                               "full, the paper; small-context models: ours)", kind="int",
                                               flag="--max-experience-chars", minimum=1,
                                               maximum=MAX_EXPERIENCE_CHARS)

    def __post_init__(self) -> None:
        self.check_all("MemorySettings", self.values())

    # -- the declaration, read (twins of DebateSettings') --------------------------------------------
    @staticmethod
    def check(owner: str, name: str, value: Any) -> Any:
        """Check one setting's value for ``owner`` (e.g. ``"method 'r2mad'"``); ValueError names the option. None
        is a value only where the default is None (``max_experience_chars``: in full)."""
        if value is None and DEFAULTS[name] is None:
            return value
        return SPECS[name].check(owner, name, value)

    @staticmethod
    def check_all(owner: str, values: Mapping[str, Any]) -> None:
        """Check every value of ``values`` and the one rule between two of them (w_l <= w_h, Eq. 7): the only place
        the bounds of what R2-MAD adds are checked."""
        for name, value in values.items():
            MemorySettings.check(owner, name, value)
        high, low = values.get("w_high", DEFAULTS["w_high"]), values.get("w_low", DEFAULTS["w_low"])
        if low > high:
            raise ValueError(f"{owner}: w_low ({low}) must be <= w_high ({high})")

    def values(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """``{name: value}`` of ``names`` (default: every setting, in declaration order)."""
        return {name: getattr(self, name) for name in (names if names is not None else SPECS)}

    def typed(self, names: Sequence[str]) -> dict[str, Any]:
        """:meth:`values` as a configuration reads them: a float setting as a float (``gamma: 1`` is 1.0; what a
        method records in ``config.json`` is what it was given, :meth:`values`)."""
        return {name: float(value) if SPECS[name].kind == "float" and value is not None else value
                for name, value in self.values(names).items()}

    def replace(self, **changes: Any) -> "MemorySettings":
        unknown = sorted(set(changes) - set(SPECS))
        if unknown:
            raise TypeError(f"MemorySettings: unknown setting(s) {unknown}; expected some of {list(SPECS)}")
        return dataclasses.replace(self, **changes)


def specs() -> Iterator[tuple[str, Spec]]:
    """``(name, spec)`` of every setting, in declaration order."""
    for f in dataclasses.fields(MemorySettings):
        yield f.name, f.metadata["spec"]


#: name -> :class:`~r2mad_core.debate.settings.Spec`, in declaration order.
SPECS: dict[str, Spec] = dict(specs())
#: Every setting's default (``DEFAULTS["gamma"]`` is the one place gamma's 0.9 is written).
DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(MemorySettings)}
#: How the settings table of a notebook (:meth:`r2mad_lab.reproduce.grid.ExperimentGrid.describe`) shows them: row
#: name -> the settings it shows, " / "-joined (a variant marks the row of each setting it changes).
DESCRIBED: dict[str, tuple[str, ...]] = {"K / gamma / w_l / w_h": ("top_k", "gamma", "w_low", "w_high")}
#: The settings R2-MAD's run keys were fixed with: its rows state them whatever their value (every other setting is
#: stated only where it departs from its default, so a setting added with a default keeps every run key;
#: :func:`r2mad_lab.experiments.method_labels.resolve`).
STATED = ("top_k", "gamma", "w_high", "w_low")
#: The settings a run's ``config.json`` has always recorded; one added later is recorded only where it departs from
#: its default, so a finished run from before it is still the same run (:func:`r2mad_core.methods.get_method`).
RECORDED = ("top_k", "gamma", "retrieval_policy", "fixed_lambda", "w_high", "w_low", "max_experience_chars")
