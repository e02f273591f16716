"""Ablation runs: ``reproduce --set``, ``--variant`` and ``--sweep`` as variants of a profile, each beside its baseline.

The paper's ablations (Section 5.3, Tables 2-3 and the hyperparameter study of K, gamma, w_l/w_h) change one value
of the setup. :func:`run_ablation` turns the runner's overrides into a :class:`~r2mad_core.reproduce.variants.Variant`
(no variant when every override equals the profile's value), makes sure the profile itself (the baseline) has run
the chosen notebooks first (it runs them when it has not), runs the variant into its own folders, and prints each
comparison with the baseline; a sweep runs every value as a variant and draws the metric against the parameter
(:func:`r2mad_core.reproduce.variants.sweep_artifacts`). The runner (:mod:`r2mad_core.reproduce`) passes the function
that executes notebooks (``run``), so this module stays below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_core.report.artifacts import read_manifest
from r2mad_core.reproduce.variants import (
    COMPARISON_SUFFIX,
    SWEEPS_DIR,
    SweepPoint,
    Variant,
    check_name,
    differences,
    inert_notes,
    parse_sweep,
    profile_values,
    show_value,
    sweep_artifacts,
    variant_dir,
    variant_name,
)

#: ``run(overrides, variant, only) -> figures folder or None (a notebook failed)``: the runner's notebook execution.
Runner = Callable[[Mapping[str, Any], "Variant | None", "Sequence[str] | None"], "Path | None"]


def plan_variant(profile: str, overrides: Mapping[str, Any], name: str | None = None,
                 echo: Callable[[str], None] = print) -> Variant | None:
    """The variant ``--set`` overrides make (None: every override is the profile's value, said so)."""
    base = profile_values(profile)
    found = differences(dict(overrides), base)
    for key in overrides:
        if key not in base:
            echo(f"reproduce: warning: {key} is not a field of profile {profile} (nor one of its extra_parameters); "
                 f"it reaches only notebooks whose parameters cell declares {key}")
        if key not in found:
            echo(f"reproduce: {key}={show_value(overrides[key])} is the profile {profile}'s own value: not a variant")
    if name is not None:
        check_name(name)
    for note in inert_notes({k: v for k, v in overrides.items() if k in found}, base):
        echo(note)
    if not found:
        if name is not None:
            raise ValueError(f"--variant {name}: no --set value differs from profile {profile}, so there is no variant "
                             f"to name")
        return None
    return Variant(profile, found, name or "")


def notebooks_without_baseline(profile_dir: Path, notebooks: Sequence[str]) -> list[str]:
    """The notebooks (stems) that have not written any artifact into the profile's own folder yet."""
    written = {record.get("notebook") for record in read_manifest(profile_dir)["artifacts"].values()}
    return [stem for stem in notebooks if stem not in written]


def comparison_lines(figures_dir: Path) -> list[str]:
    """The "What this shows" sentences of every ``*_vs_profile`` table of a variant folder."""
    manifest = read_manifest(figures_dir)["artifacts"]
    return [record.get("notes", "") for name, record in manifest.items()
            if name.endswith(COMPARISON_SUFFIX) and record.get("notes")]


def ensure_baseline(run: Runner, profile: str, profile_dir: Path, notebooks: Sequence[str],
                    echo: Callable[[str], None], auto: bool = True) -> bool:
    """Run the profile itself for the notebooks it has not run yet (a variant is compared with it). ``auto`` False
    (a profile on paid or GPU engines, or an estimate): say what is missing and go on without it (ours: a variant that
    shrinks a run, ``--set test_limit=1``, must not start the full profile's run)."""
    missing = notebooks_without_baseline(profile_dir, notebooks)
    if not missing:
        return True
    if not auto:
        echo(f"reproduce: the baseline (profile {profile} itself) has not run {', '.join(missing)}; not running it "
             f"first (its engines are not the free simulated ones); the variant is compared with it once it has "
             f"(make reproduce PROFILE={profile})")
        return True
    echo(f"reproduce: the baseline (profile {profile} itself) has not run {', '.join(missing)}: running it first, "
         f"into its own folder, so the variant has something to be compared with")
    return run({}, None, [m.split("_", 1)[0] for m in missing]) is not None


def run_ablation(run: Runner, profile: str, profile_dir: Path, notebooks: Sequence[str], overrides: Mapping[str, Any],
                 *, name: str | None = None, sweep: str | None = None, only: Sequence[str] | None = None,
                 engine_note: str = "", echo: Callable[[str], None] = print, baseline_first: bool = True) -> int:
    """``reproduce --set ... [--variant NAME] [--sweep KEY=V1,V2,...]``: the exit code."""
    if sweep is None:
        variant = plan_variant(profile, overrides, name, echo)
        if variant is None:
            return 0 if run({}, None, only) is not None else 1
        if not ensure_baseline(run, profile, profile_dir, notebooks, echo, baseline_first):
            return 1
        echo(f"reproduce: variant {variant.name} of profile {profile}: {variant.describe()}; its figures and tables "
             f"go to {variant_dir(profile_dir, variant.name)} (the profile's own are not touched)")
        figures = run(variant_overrides(variant), variant, only)
        if figures is None:
            return 1
        for line in comparison_lines(figures):
            echo("  " + line)
        return 0
    key, values = parse_sweep(sweep)
    fixed = plan_variant(profile, {k: v for k, v in overrides.items() if k != key}, None, echo)
    base = profile_values(profile)
    for note in inert_notes({**(variant_overrides(fixed) if fixed else {}), key: values[0]}, base):
        echo(note)
    if not ensure_baseline(run, profile, profile_dir, notebooks, echo, baseline_first):
        return 1
    points = []
    for value in values:
        point = plan_variant(profile, {**(variant_overrides(fixed) if fixed else {}), key: value}, None,
                             echo=lambda line: None)
        echo(f"reproduce: sweep {key} = {show_value(value)}"
             + (f" (variant {point.name})" if point else f" (the profile's own value: its own run)"))
        figures = run(variant_overrides(point), point, only) if point is not None else profile_dir
        if figures is None:
            return 1
        points.append(SweepPoint(value, figures, point is None))
    folder = profile_dir / SWEEPS_DIR / (key if fixed is None else f"{key}__{fixed.name}")
    sentences = sweep_artifacts(points, key, profile, base.get(key), folder, fixed=fixed, engine_note=engine_note)
    echo(f"reproduce: sweep of {key} over {len(values)} values: figures and tables in {folder}")
    for line in sentences:
        echo("  " + line)
    if not sentences:
        echo(f"reproduce: the notebooks chosen wrote no table with confidence intervals to draw against {key}")
    return 0


def variant_overrides(variant: Variant | None) -> dict[str, Any]:
    """The values to run a variant with (``field -> value``)."""
    return {} if variant is None else {key: value for key, (value, _) in variant.overrides.items()}


__all__ = ["comparison_lines", "ensure_baseline", "notebooks_without_baseline", "plan_variant", "run_ablation",
           "variant_name", "variant_overrides"]
