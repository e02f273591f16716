"""Method labels: the paper's table row names, and how each maps to a registered method and its options.

The notebooks and the tables speak the paper's row names (``CoT``, ``Self-Consistency (9)``, ``MAD``,
``MAD-M2 (O)``, ``R2-MAD w/o Confidence``, ``R2-MAD retrieval=Random``, ``R2-MAD poisoned=0.5``,
``ICL-CoT``); a run directory is keyed by the registered method of :mod:`r2mad_core.methods` and its
options. :func:`resolve` is that map, filled from the run's settings
(:class:`~r2mad_lab.experiments.run_settings.RunSettings`, one object): the one place those settings are flattened
into options. A row name names a row (a method and what makes it another row of a table), never a setting: a row
that runs at its own settings (notebook 04's retrieval rows at K = 3, notebook 06's other round 0) is a :class:`Row`,
which carries them beside its name.

A method registered from outside (:func:`r2mad_core.methods.register_method`, e.g. through a plugin) is
reached by its ``label``: it receives every setting it declares as an option (the debate's, what R2-MAD adds, the
protocol's choices where they depart from its defaults and, when it declares ``memory``, the model's memory bank), so
a new method is one registry entry and appears in the notebooks' grids by its label.

Also here: the rows of each paper table (:data:`MAIN_METHODS`, ...) and the label builders of the
parameterised rows (:func:`retrieval_method_label`, :func:`poisoned_method_label`, :func:`sc_methods`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from r2mad_core.debate.settings import SAMPLING
from r2mad_core.memory.retrieval import POLICIES, parse_retrieval_policy, policy_label, policy_spec_of_label
from r2mad_core.memory.settings import STATED as MEMORY_STATED
from r2mad_core.methods import METHOD_SPECS, method_options
from r2mad_lab.experiments.run_settings import RunSettings


class Row(str):
    """A table row's name that also sets some of its run's settings (``changes``): ``with_k("R2-MAD", 3)`` is the row
    ``"R2-MAD (K=3)"`` run at K = 3; ``"MAD" + INDEPENDENT_ROUND0`` the row ``"MAD (independent round 0)"`` run with
    ``round0="independent"``. The name is what the tables show; the settings travel beside it and are never parsed
    back out of it (the grid applies them to its :class:`~r2mad_lab.experiments.run_settings.RunSettings` with one
    ``replace``; the run states them in its options). ``base`` is the row it derives from (a suffix's: "")."""

    base: str
    changes: Mapping[str, Any]

    def __new__(cls, text: str, base: str, changes: Mapping[str, Any]) -> "Row":
        row = super().__new__(cls, text)
        row.base, row.changes = str(base), dict(changes)
        return row

    def __add__(self, other: str) -> "Row | str":
        if isinstance(other, Row):  # a row plus a suffix: both rows' settings
            return Row(str(self) + str(other), self.base, {**self.changes, **other.changes})
        return str(self) + other

    def __radd__(self, other: str) -> "Row":
        """``"MAD" + INDEPENDENT_ROUND0``: a plain label plus a suffix row."""
        return Row(str(other) + str(self), str(other), self.changes)

    def __reduce__(self) -> Any:
        return (Row, (str(self), self.base, self.changes))


def row_of(label: str) -> tuple[str, dict[str, Any]]:
    """``(the row it derives from, the settings it sets)`` of a label (a plain label: itself, none)."""
    if isinstance(label, Row):
        return label.base, dict(label.changes)
    return str(label), {}


#: Suffixes of a method name whose run draws its own round 0 (``round0="independent"``), and of one that replays MAD's
#: round 0 (``round0="shared"``, the paired analysis of notebook 06 when the protocol draws round 0 per method).
INDEPENDENT_ROUND0 = Row(" (independent round 0)", "", {"round0": "independent"})
SHARED_ROUND0 = Row(" (shared round 0)", "", {"round0": "shared"})


def with_k(label: str, k: int) -> Row:
    """``with_k("R2-MAD", 3)`` -> the row ``"R2-MAD (K=3)"``, run at K = 3 (the retrieval ablation at K = 3 beside
    the protocol's K: at K = 1 lambda_t cannot change the pick)."""
    base, changes = row_of(label)
    return Row(f"{label} (K={int(k)})", base, {**changes, "top_k": int(k)})

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
    "R2-MAD[ w/o Confidence| w/o Memory| retrieval=<policy>| poisoned=<fraction>], or the label of a registered "
    "method (a row's own K or round 0: with_k, INDEPENDENT_ROUND0, SHARED_ROUND0)"
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


def registered_by_label(label: str) -> str | None:
    """The registered method whose ``label`` is ``label`` (None if none)."""
    return next((spec.name for spec in METHOD_SPECS.values() if spec.label == label), None)


def needs_memory(label: str) -> bool:
    """Does the method of this label read a memory bank (R2-MAD and its variants, ICL-CoT, a registered
    method that declares a ``memory`` option)?"""
    label = row_of(label)[0]
    if label.startswith("R2-MAD") or label == "ICL-CoT":
        return True
    name = registered_by_label(label)
    return name is not None and "memory" in method_options(name)


#: The debate settings of a full debate.
DEBATE = ("n_agents", "n_rounds", *SAMPLING)
#: The settings each built-in method's options state whatever their value (the run keys were fixed with them);
#: every other memory setting and protocol choice a method declares is stated only where it departs from the
#: method's default (so a setting added with a default keeps every run key).
STATED = {
    "cot": SAMPLING, "self_consistency": SAMPLING, "mad": DEBATE, "mad_m2": DEBATE, "icl_cot": ("top_k", *SAMPLING),
    "r2mad": (*MEMORY_STATED, "summary_max_tokens", *DEBATE),
}
#: What a registered method (a plugin's) is given of the settings it declares, whatever their value.
REGISTERED_STATED = STATED["r2mad"]


def resolve(label: str, settings: RunSettings, memory: Path | str | None = None) -> tuple[str, dict[str, Any]]:
    """``(registered method name, options)`` of a method label (see the module docstring): where the run settings
    are flattened, once, into a run's recorded identity.

    A :class:`Row` (``with_k``, the round-0 suffixes) sets its settings first and states them in the options.
    """
    label, changes = row_of(label)
    if changes:
        settings = settings.replace(**changes)
    name, row = _row(label, settings)
    declared = method_options(name)
    stated = STATED.get(name, REGISTERED_STATED)
    values = {**settings.debate.values(), **settings.memory.values()}
    options: dict[str, Any] = {k: values[k] for k in stated if k in declared}
    if "memory" in declared and (memory is not None or name in STATED):
        options["memory"] = str(memory)
    for key, value in {**settings.memory.values(), **settings.method_choices}.items():
        if key in declared and key not in options and declared[key] != value:
            options[key] = value
    options.update(row)
    for key, value in changes.items():
        if key not in declared:
            raise ValueError(f"{label!r}: {name} does not take {key} ({key}={value!r} does not apply)")
        options[key] = value
    # A setting the row's policy does not read (Eq. 6's tradeoff for Random) is not part of the cell: a change of it
    # leaves the cell the very same run (methods.get_method records the same options).
    if name == "r2mad":
        # the paper's policy: stated nowhere (the run keys were fixed without it; "retrieval=Debate-State-Aware" is
        # "R2-MAD")
        if options.get("retrieval_policy") == declared["retrieval_policy"]:
            del options["retrieval_policy"]
        for unread in POLICIES[options.get("retrieval_policy", declared["retrieval_policy"])].unread:
            options.pop(unread, None)
    return name, options


def _row(label: str, settings: RunSettings) -> tuple[str, dict[str, Any]]:
    """The registered method of a row name and the options that make the row (not the settings every row shares)."""
    sc = re.fullmatch(r"Self-Consistency(?: \((\d+)\))?", label)
    if label == "CoT":
        return "cot", {}
    if sc:
        paths = int(sc.group(1)) if sc.group(1) else settings.debate.n_agents * settings.debate.n_rounds
        return "self_consistency", {"k_paths": paths}
    if label == "MAD":
        return "mad", {}
    if label in ("MAD-M2", "MAD-M2 (O)", "MAD-M2 (S)"):
        return "mad_m2", {"masking": "subjective" if label.endswith("(S)") else "objective"}
    if label == "ICL-CoT":
        return "icl_cot", {}
    if label.startswith("R2-MAD"):
        return "r2mad", _r2mad_row(label, settings)
    name = registered_by_label(label)
    if name is not None:
        return name, {}
    raise ValueError(f"unknown method {label!r}: expected {GRAMMAR}")


def _r2mad_row(label: str, settings: RunSettings) -> dict[str, Any]:
    options: dict[str, Any] = {}
    rest = label[len("R2-MAD"):].strip()
    if rest == "w/o Confidence":
        options["use_confidence"] = False
    elif rest == "w/o Memory":
        options["use_memory"] = False
    elif rest.startswith("retrieval="):
        name, value = parse_retrieval_policy(policy_spec_of_label(rest[len("retrieval="):]))
        options["retrieval_policy"] = name  # the row's own policy, whatever the settings' (resolve drops the paper's)
        if value is not None:
            options[POLICIES[name].parameter or "fixed_lambda"] = value
    elif rest.startswith("poisoned="):
        fraction = float(rest[len("poisoned="):])
        if fraction:
            options["poison_fraction"] = fraction
            options["poison_seed"] = settings.seed
    elif rest:
        raise ValueError(f"unknown R2-MAD variant {label!r}: expected {GRAMMAR}")
    return options
