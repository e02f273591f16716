"""Method labels: the paper's table row names, and how each maps to a registered method and its options.

The notebooks and the tables speak the paper's row names (``CoT``, ``Self-Consistency (9)``, ``MAD``,
``MAD-M2 (O)``, ``R2-MAD w/o Confidence``, ``R2-MAD retrieval=Random``, ``R2-MAD poisoned=0.5``,
``ICL-CoT``); a run directory is keyed by the registered method of :mod:`r2mad_core.experiments.methods` and its
options. :func:`resolve` is that map, filled from a profile's settings (:class:`MethodSettings`: the
debate of Section 5.1, Eq. 8's K and gamma, Eq. 7's thresholds).

A method registered from outside (:func:`r2mad_core.experiments.methods.register_method`, e.g. through a plugin) is
reached by its ``label``: it receives every setting it declares as an option (``n_agents``, ``n_rounds``,
``temperature``, ``top_p``, ``max_tokens``, ``summary_max_tokens``: the profile's
:class:`~r2mad_core.debate.settings.DebateSettings`; ``top_k``, ``gamma``, ``w_high``, ``w_low``, ``max_experience_chars`` and, when it declares ``memory``, the model's memory
bank), so a new method is one registry entry and appears in the notebooks' grids by its label.

Also here: the rows of each paper table (:data:`MAIN_METHODS`, ...) and the label builders of the
parameterised rows (:func:`retrieval_method_label`, :func:`poisoned_method_label`, :func:`sc_methods`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from r2mad_core.debate.settings import SAMPLING, DebateSettings
from r2mad_core.experiments.methods import METHOD_SPECS, method_options
from r2mad_core.memory.retrieval import POLICIES, parse_retrieval_policy, policy_label, policy_spec_of_label
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS

#: Suffix of a method name whose run draws its own round 0 (``round0="independent"``), and of one that replays MAD's
#: round 0 (``round0="shared"``, the paired analysis of notebook 06 when the protocol draws round 0 per method).
INDEPENDENT_ROUND0 = " (independent round 0)"
SHARED_ROUND0 = " (shared round 0)"
#: Suffix setting K for one row (``"R2-MAD retrieval=Random (K=3)"``): the retrieval ablation at K = 3 beside the
#: protocol's K (at K = 1 lambda_t cannot change the pick).
_K_SUFFIX = re.compile(r" \(K=(\d+)\)$")


def with_k(label: str, k: int) -> str:
    """``with_k("R2-MAD", 3)`` -> ``"R2-MAD (K=3)"``."""
    return f"{label} (K={int(k)})"

#: The methods of each paper table (the paper's row names).
MAIN_METHODS = ("CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD")
ABLATION_METHODS = ("R2-MAD", "R2-MAD w/o Confidence", "R2-MAD w/o Memory")
LARGE_MODEL_METHODS = ("CoT", "MAD", "R2-MAD")
MAD_M2_METHODS = ("MAD-M2 (S)", "MAD-M2 (O)")
ICL_METHODS = ("CoT", "ICL-CoT", "R2-MAD")
SUBSET_METHODS = ("MAD", "MAD-M2", "R2-MAD")
TRANSITION_METHODS = ("R2-MAD", "R2-MAD w/o Confidence")
COST_METHODS = ("Self-Consistency", "MAD", "R2-MAD")

GRAMMAR = (
    "CoT, Self-Consistency[ (k)], MAD, MAD-M2[ (O)| (S)], ICL-CoT, "
    "R2-MAD[ w/o Confidence| w/o Memory| retrieval=<policy>| poisoned=<fraction>], optionally followed by"
    f"{INDEPENDENT_ROUND0!r} or {SHARED_ROUND0!r} and/or ' (K=<k>)', or the label of a registered method"
)


def sc_methods(paths: Sequence[int]) -> list[str]:
    """``[3, 6, 9]`` -> ``["Self-Consistency (3)", ...]`` (Table 5)."""
    return [f"Self-Consistency ({k})" for k in paths]


def retrieval_policy_label(spec: str) -> str:
    """``fixed_lambda:0.25`` -> ``Fixed-lambda (0.25)``; ``state_aware`` -> ``Debate-State-Aware`` (the
    registry of :mod:`r2mad_core.memory.retrieval`, so a registered policy gets its own row name)."""
    return policy_label(spec)


def retrieval_method_label(spec: str) -> str:
    """The method name the paper's retrieval ablation uses: ``R2-MAD retrieval=Random``."""
    return f"R2-MAD retrieval={retrieval_policy_label(spec)}"


def poisoned_method_label(fraction: float) -> str:
    return f"R2-MAD poisoned={fraction:g}"


@dataclass(frozen=True)
class MethodSettings:
    """The profile's settings every method label is filled from: the debate (one
    :class:`~r2mad_core.debate.settings.DebateSettings`), K, gamma, the thresholds, how experiences are shown."""

    debate_settings: DebateSettings = field(default_factory=DebateSettings)
    top_k: int = MEMORY_DEFAULTS["top_k"]
    gamma: float = MEMORY_DEFAULTS["gamma"]
    w_high: float = MEMORY_DEFAULTS["w_high"]
    w_low: float = MEMORY_DEFAULTS["w_low"]
    max_experience_chars: int | None = None
    seed: int = 0

    @property
    def sampling(self) -> dict[str, Any]:
        return self.debate_settings.values(SAMPLING)

    @property
    def n_agents(self) -> int:
        return self.debate_settings.n_agents

    def debate(self) -> dict[str, Any]:
        return self.debate_settings.values(("n_agents", "n_rounds", *SAMPLING))

    def shown(self) -> dict[str, Any]:
        """Shortened experiences only when the profile asks (small-context models); the paper shows them in full."""
        return {"max_experience_chars": self.max_experience_chars} if self.max_experience_chars else {}

    def candidates(self, memory: Path | str | None) -> dict[str, Any]:
        """Every setting a registered method may declare as an option."""
        values = {**self.debate(), "top_k": self.top_k, "gamma": self.gamma, "w_high": self.w_high,
                  "w_low": self.w_low, "summary_max_tokens": self.debate_settings.summary_max_tokens, **self.shown()}
        if memory is not None:
            values["memory"] = str(memory)
        return values


def registered_by_label(label: str) -> str | None:
    """The registered method whose ``label`` is ``label`` (None if none)."""
    return next((spec.name for spec in METHOD_SPECS.values() if spec.label == label), None)


def needs_memory(label: str) -> bool:
    """Does the method of this label read a memory bank (R2-MAD and its variants, ICL-CoT, a registered
    method that declares a ``memory`` option)?"""
    label = _K_SUFFIX.sub("", label).removesuffix(INDEPENDENT_ROUND0).removesuffix(SHARED_ROUND0)
    if label.startswith("R2-MAD") or label == "ICL-CoT":
        return True
    name = registered_by_label(label)
    return name is not None and "memory" in method_options(name)


def resolve(label: str, settings: MethodSettings, memory: Path | str | None = None) -> tuple[str, dict[str, Any]]:
    """``(registered method name, options)`` of a method label (see the module docstring).

    A trailing :data:`INDEPENDENT_ROUND0` (``"MAD (independent round 0)"``) sets ``round0="independent"``: the
    run draws its own round 0 instead of sharing MAD's (the paper's separate runs).
    """
    k = _K_SUFFIX.search(label)
    if k:
        name, options = resolve(label[: k.start()], dataclasses.replace(settings, top_k=int(k.group(1))), memory)
        if "top_k" not in options:
            raise ValueError(f"{label!r}: {name} retrieves nothing, K does not apply")
        return name, options
    for suffix, mode in ((INDEPENDENT_ROUND0, "independent"), (SHARED_ROUND0, "shared")):
        if label.endswith(suffix):
            name, options = resolve(label[: -len(suffix)], settings, memory)
            if "round0" not in method_options(name):
                raise ValueError(f"{label!r}: {name} has no round 0 to draw independently or share")
            return name, {**options, "round0": mode}
    sampling = dict(settings.sampling)
    sc = re.fullmatch(r"Self-Consistency(?: \((\d+)\))?", label)
    if label == "CoT":
        return "cot", sampling
    if sc:
        paths = int(sc.group(1)) if sc.group(1) else settings.debate_settings.n_agents * settings.debate_settings.n_rounds
        return "self_consistency", {"k_paths": paths, **sampling}
    if label == "MAD":
        return "mad", settings.debate()
    if label in ("MAD-M2", "MAD-M2 (O)", "MAD-M2 (S)"):
        masking = "subjective" if label.endswith("(S)") else "objective"
        return "mad_m2", {"masking": masking, **settings.debate()}
    if label == "ICL-CoT":
        return "icl_cot", {"memory": str(memory), "top_k": settings.top_k, **settings.shown(), **sampling}
    if label.startswith("R2-MAD"):
        return "r2mad", _r2mad_options(label, settings, memory)
    name = registered_by_label(label)
    if name is not None:
        declared = method_options(name)
        return name, {k: v for k, v in settings.candidates(memory).items() if k in declared}
    raise ValueError(f"unknown method {label!r}: expected {GRAMMAR}")


def _r2mad_options(label: str, settings: MethodSettings, memory: Path | str | None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "memory": str(memory), "top_k": settings.top_k, "gamma": settings.gamma, "w_high": settings.w_high,
        "w_low": settings.w_low, "summary_max_tokens": settings.debate_settings.summary_max_tokens, **settings.shown(),
        **settings.debate(),
    }
    rest = label[len("R2-MAD"):].strip()
    if rest == "w/o Confidence":
        options["use_confidence"] = False
    elif rest == "w/o Memory":
        options["use_memory"] = False
    elif rest.startswith("retrieval="):
        name, value = parse_retrieval_policy(policy_spec_of_label(rest[len("retrieval="):]))
        if name != "state_aware":
            options["retrieval_policy"] = name
        if value is not None:
            options[POLICIES[name].parameter or "fixed_lambda"] = value
    elif rest.startswith("poisoned="):
        fraction = float(rest[len("poisoned="):])
        if fraction:
            options["poison_fraction"] = fraction
            options["poison_seed"] = settings.seed
    elif rest:
        raise ValueError(f"unknown R2-MAD variant {label!r}: expected {GRAMMAR}")
    # A setting the row's policy does not read (gamma for Random) is not part of the cell: a change of it leaves the
    # cell the very same run (methods.get_method records the same options).
    for unread in POLICIES[options.get("retrieval_policy", "state_aware")].unread:
        options.pop(unread, None)
    return options
