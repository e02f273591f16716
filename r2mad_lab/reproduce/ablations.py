"""Ablation runs: ``reproduce --set``, ``--variant`` and ``--sweep`` as variants of a profile, each beside its baseline.

The paper's ablations (Section 5.3, Tables 2-3 and the hyperparameter study of K, gamma, w_l/w_h) change one value
of the setup. :func:`run_ablation` turns the runner's overrides into a :class:`~r2mad_lab.reproduce.points.Variant`
(no variant when every override equals the profile's value), makes sure the profile itself (the baseline) has run
the chosen notebooks first (it runs them when it has not), runs the variant into its own folders, and prints each
comparison with the baseline; a sweep runs every value as a variant and draws the metric against the parameter
(:func:`r2mad_lab.reproduce.compare.sweep.sweep_artifacts`). The runner (:mod:`r2mad_lab.reproduce`) passes the function
that executes notebooks (``run``), so this module stays below it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.report.artifacts import read_manifest
from r2mad_lab.reproduce.compare.replicate import replicate_artifacts, replicate_comparison
from r2mad_lab.reproduce.compare.sweep import sweep_artifacts
from r2mad_lab.reproduce.compare.variant import changes_nothing, comparison_lines
from r2mad_lab.reproduce.launcher import execute
from r2mad_lab.reproduce.point_cache import PointCache
from r2mad_lab.reproduce.point_cache import dry_run as dry_run_of
from r2mad_lab.reproduce.point_cache import show_config as show_config_of
from r2mad_lab.reproduce.points import (
    INCOMPLETE_MARKER,
    REPLICATES_DIR,
    SWEEPS_DIR,
    Point,
    Variant,
    check_name,
    differences,
    inert_notes,
    parse_sweep,
    plan_points,
    profile_values,
    replicate_seeds,
    show_value,
    sweep_points,
    variant_dir,
)

#: ``run(overrides, variant, only) -> figures folder or None (a notebook failed)``: the runner's notebook execution.
Runner = Callable[[Mapping[str, Any], "Variant | None", "Sequence[str] | None"], "Path | None"]


def plan_variant(profile: Any, overrides: Mapping[str, Any], name: str | None = None,
                 echo: Callable[[str], None] = print) -> Variant | None:
    """The variant ``--set`` overrides make (None: every override is the profile's value, said so). ``profile``: a
    :class:`~r2mad_lab.experiments.profiles.Profile` or a name; the keys were checked when the runner loaded it
    with the overrides (an unknown key never gets here)."""
    loaded = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    base = profile_values(loaded)
    found = differences(dict(overrides), base)
    profile = loaded.name
    for key in overrides:
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


def run_ablation(run: Runner, profile: Any, profile_dir: Path, notebooks: Sequence[str], overrides: Mapping[str, Any],
                 *, name: str | None = None, sweep: str | Sequence[str] | None = None,
                 only: Sequence[str] | None = None, engine_note: str = "", echo: Callable[[str], None] = print,
                 baseline_first: bool = True, replicates: int = 1, cache: PointCache | None = None,
                 launch: Mapping[str, Any] | None = None, dry_run: bool = False,
                 show_config: int | None = None, dry_run_context: Mapping[str, Any] | None = None) -> int:
    """``reproduce --set ... [--variant NAME] [--sweep KEY=V1,V2,... ...] [--replicates N]``: the exit code.
    ``profile``: the :class:`~r2mad_lab.experiments.profiles.Profile` (or a packaged name).

    Several ``--sweep`` axes run their Cartesian product; ``replicates`` > 1 runs the profile (and the variant, or
    every sweep point) under that many run seeds (:mod:`r2mad_lab.reproduce.compare.replicate`). ``cache``: the points
    already made are left (:mod:`r2mad_lab.reproduce.point_cache`); ``launch``: how the others run
    (:func:`r2mad_lab.reproduce.launcher.execute`'s keywords: ``jobs``, ``launcher``, ``child_arguments``, ...);
    ``dry_run``/``show_config``: print the points (or one point's settings) and execute nothing."""
    loaded = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    profile = loaded.name
    sweeps = [sweep] if isinstance(sweep, str) else list(sweep or [])
    base = profile_values(loaded)
    seeds = replicate_seeds(int(base.get("seed") or 0), replicates)
    axes = [parse_sweep(text) for text in sweeps]
    keys = [key for key, _ in axes]
    sweep_points(axes, {**base, **overrides})  # a key swept twice, an inert axis: one line, before anything runs
    quiet = dry_run or show_config is not None
    fixed = plan_variant(loaded, {k: v for k, v in overrides.items() if k not in keys}, None if sweeps else name,
                         (lambda line: None) if quiet and sweeps else echo)
    if name is not None and sweeps:
        check_name(name)
    points = plan_points(base, profile, variant_overrides(fixed), axes, seeds, fixed.name if fixed and name else None)
    if replicates > 1 and (sweeps or fixed is not None):  # the profile's own seeds, each point's comparison
        have = {json.dumps(p.values, sort_keys=True, default=str) for p in points}
        points += [p for p in plan_points(base, profile, {}, [], seeds)
                   if json.dumps(p.values, sort_keys=True, default=str) not in have]
    if quiet:
        if cache is None:
            raise ValueError("--dry-run and --show-config need the point records (run through reproduce)")
        if show_config is not None:
            return show_config_of(points, show_config, cache, echo)
        context = dict(dry_run_context or {})
        return dry_run_of(points, cache, only, baseline_missing=notebooks_without_baseline(profile_dir, notebooks),
                          echo=echo, **context)
    run = marking_incomplete(run, profile_dir)
    if cache is not None:
        run = cache.wrap(run)
    if fixed is not None and name is not None:
        check_reuse(variant_dir(profile_dir, fixed.name), fixed)
    if not sweeps and replicates == 1:
        return _one_variant(run, fixed, profile, profile_dir, notebooks, only, echo, baseline_first)
    if sweeps:
        for note in inert_notes({**variant_overrides(fixed), **points[0].setting}, base):
            echo(note)
    if not ensure_baseline(run, profile, profile_dir, notebooks, echo, baseline_first):
        return 1
    if sweeps:
        echo(f"reproduce: sweep of {' x '.join(keys)}: {len(points)} points"
             + (f" ({len(seeds)} seeds each)" if replicates > 1 else ""))
    folders = execute(points, run, cache, only, profile_dir=profile_dir, echo=echo, **dict(launch or {}))
    if folders is None:
        return 1
    if not sweeps:
        if fixed is not None:
            _say_comparisons(fixed, folders[0], echo)
        return _replicate_tables(loaded, profile_dir, seeds, fixed, points, folders, echo)
    first = [(position, p) for position, p in enumerate(points) if p.replicate == 0 and p.setting]
    _sweep_tables(loaded, profile_dir, keys, fixed, [p.at(folders[position]) for position, p in first], base,
                  engine_note, echo)
    if replicates > 1:
        _sweep_replicates(loaded, profile_dir, seeds, fixed, points, [p for _, p in first], folders, echo)
    return 0


def _sweep_replicates(loaded: Any, profile_dir: Path, seeds: Sequence[int], fixed: Variant | None,
                      points: Sequence[Point], first: Sequence[Point], folders: Mapping[int, Path],
                      echo: Callable[[str], None]) -> None:
    """A sweep under several seeds: each point's replicate summary and comparison with the profile's seeds
    (``first``: each sweep point's own seed, in order; the profile's summary once, with the first)."""
    plain = [i for i, p in enumerate(points) if not set(p.values) - {"seed"}]  # the profile's own seeds
    for number, point in enumerate(first):
        variant = plan_variant(loaded, {**variant_overrides(fixed), **point.setting}, None, echo=lambda line: None)
        if variant is None and number:
            continue
        same = [i for i, p in enumerate(points) if p.setting == point.setting and i not in plain]
        positions = same + plain
        _replicate_tables(loaded, profile_dir, seeds, variant, [points[i] for i in positions], folders, echo,
                          positions=positions, with_profile=not number)


def _one_variant(run: Runner, fixed: Variant | None, profile: str, profile_dir: Path, notebooks: Sequence[str],
                 only: Sequence[str] | None, echo: Callable[[str], None], baseline_first: bool) -> int:
    """A single ``--set`` variant (or the profile itself when nothing differs): the baseline first, then the variant,
    then its comparisons."""
    if fixed is None:
        return 0 if run({}, None, only) is not None else 1
    if not ensure_baseline(run, profile, profile_dir, notebooks, echo, baseline_first):
        return 1
    echo(f"reproduce: variant {fixed.name} of profile {profile}: {fixed.describe()}; its figures and "
         f"tables go to {variant_dir(profile_dir, fixed.name)} (the profile's own are not touched)")
    variant_figures = run(variant_overrides(fixed), fixed, only)
    if variant_figures is None:
        return 1
    _say_comparisons(fixed, variant_figures, echo)
    return 0


def _sweep_tables(loaded: Any, profile_dir: Path, keys: Sequence[str], fixed: Variant | None, swept: Sequence[Point],
                  base: Mapping[str, Any], engine_note: str, echo: Callable[[str], None]) -> None:
    """A sweep's figures and tables once its points ran (each at its folder), and what they show."""
    profile = loaded.name
    folder_name = "__".join(keys) if fixed is None else f"{'__'.join(keys)}__{fixed.name}"
    folder = profile_dir / SWEEPS_DIR / folder_name
    sentences = sweep_artifacts(swept, keys, profile, {k: base.get(k) for k in keys}, folder, fixed=fixed,
                                engine_note=engine_note)
    echo(f"reproduce: sweep of {' x '.join(keys)} over {len(swept)} points: figures and tables in {folder}")
    for line in sentences:
        echo("  " + line)
    if not sentences:
        echo(f"reproduce: the notebooks chosen wrote no table with confidence intervals to draw against "
             f"{' and '.join(keys)}")


def _say_comparisons(variant: Variant, figures: Path, echo: Callable[[str], None]) -> None:
    for line in comparison_lines(figures):
        echo("  " + line)
    if changes_nothing(figures):  # read back from the runs' config.json, not from the request
        echo(f"reproduce: variant {variant.name} changes nothing that ran: no run of these notebooks records "
             f"{', '.join(variant.overrides)} with the variant's value; it is the profile's own run")


def _replicate_tables(loaded: Any, profile_dir: Path, seeds: Sequence[int], variant: Variant | None,
                      points: Sequence[Point], folders: Mapping[int, Path], echo: Callable[[str], None],
                      positions: Sequence[int] | None = None, with_profile: bool = True) -> int:
    """The replicate summaries once every seed ran: the profile's mean and spread over the seeds, and the
    variant's (its points: those with its setting or ``--set`` values) with the seed-by-seed comparison."""
    profile = loaded.name
    positions = list(range(len(points))) if positions is None else list(positions)
    by_seed_profile, by_seed_variant = {}, {}
    variant_keys = set(variant.overrides) - {"seed"} if variant is not None else set()
    for point, position in zip(points, positions, strict=False):
        own = set(point.values) - {"seed"}
        (by_seed_variant if own and own == variant_keys else by_seed_profile)[point.seed] = point.at(folders[position])
    profile_runs = [by_seed_profile[seed] for seed in seeds if seed in by_seed_profile]
    variant_runs = [by_seed_variant[seed] for seed in seeds if seed in by_seed_variant]
    tag = f"seeds={seeds[0]}-{seeds[-1]}"
    folder = profile_dir / REPLICATES_DIR / tag
    sentences = replicate_artifacts(profile_runs, folder, profile, f"profile {profile}") if with_profile else []
    if variant is not None and variant_runs:
        variant_folder = profile_dir / REPLICATES_DIR / f"{variant.name}__{tag}"
        sentences += replicate_artifacts(variant_runs, variant_folder, profile, f"variant {variant.name}")
        sentences += replicate_comparison(profile_runs, variant_runs, variant_folder, profile, variant.name)
        folder = variant_folder
    echo(f"reproduce: {len(seeds)} replicates (run seeds {', '.join(map(str, seeds))}): mean and spread across "
         f"seeds in {folder}")
    for line in sentences:
        echo("  " + line)
    return 0


def marking_incomplete(run: Runner, profile_dir: Path) -> Runner:
    """``run`` that marks a variant's folder :data:`INCOMPLETE_MARKER` until the variant's notebooks all finished."""
    def wrapped(values: Mapping[str, Any], variant: Variant | None, only: Sequence[str] | None) -> Path | None:
        if variant is None:
            return run(values, variant, only)
        folder = variant_dir(profile_dir, variant.name)
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / INCOMPLETE_MARKER
        marker.write_text(f"variant {variant.name} of profile {variant.profile} started and has not "
                          "finished: its tables may be partial. Run the same reproduce command again to complete it.\n",
                          encoding="utf-8")
        figures = run(values, variant, only)
        if figures is not None:
            marker.unlink(missing_ok=True)
        return figures

    return wrapped


def check_reuse(folder: Path, variant: Variant) -> None:
    """``--variant NAME`` names a folder that holds another variant (other overrides): a one-line ValueError."""
    wanted = variant.record()["overrides"]
    for record in read_manifest(folder)["artifacts"].values():
        found = (record.get("variant") or {}).get("overrides")
        if found is not None and found != wanted:
            shown = ", ".join(f"{k}={show_value(v.get('value'))}" for k, v in found.items())
            raise ValueError(f"--variant {variant.name}: {folder} already holds variant {variant.name} with other "
                             f"overrides ({shown}); choose another --variant name or remove that folder")


def variant_overrides(variant: Variant | None) -> dict[str, Any]:
    """The values to run a variant with (``field -> value``)."""
    return {} if variant is None else {key: value for key, (value, _) in variant.overrides.items()}


__all__ = ["ensure_baseline", "notebooks_without_baseline", "plan_variant", "run_ablation",
           "variant_overrides"]
