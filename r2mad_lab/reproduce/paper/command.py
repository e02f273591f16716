"""The paper run from the command line (docs/paper-run.md).

``--rehearse``, ``--estimate-only`` (from the rehearsal), ``--preflight``,
``--calibrate`` and ``--gpus``.

- ``--rehearse``: :func:`r2mad_lab.reproduce.paper.rehearsal.rehearse`, into the folder of what it rehearses.
- ``--estimate-only`` on a GPU profile: :mod:`r2mad_lab.reproduce.paper.estimate` (never rehearses itself: one
  line with the command when the rehearsal of the configuration asked is missing, partial or of other inputs).
- ``--preflight``: :mod:`r2mad_lab.reproduce.paper.preflight` (also run before any real GPU run).
- ``--calibrate``: :mod:`r2mad_lab.reproduce.paper.calibrate`.

Every number a user types here is bounded at its declaration (argparse ``type``): ``--gpus`` >= 1,
``--calibrate-seconds`` > 0, ``--gpu-hour-price`` >= 0; out of bounds is one line, exit 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_lab.experiments.profiles import Profile
from r2mad_lab.reproduce.paper import calibrate, estimate, preflight, rehearsal, serve, throughput, together
from r2mad_lab.reproduce.paper.estimate import gpu_models  # noqa: F401  (the command line's name for it)

MAX_GPUS = 4096


def _bounded(kind: type, low: float, *, open_low: bool = False, high: float = math.inf) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, found {text!r}") from None
        if not math.isfinite(value) or value < low or (open_low and value == low) or value > high:
            bound = f"> {low:g}" if open_low else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"expected a number {bound}"
                                             + (f" and <= {high:g}" if high < math.inf else "")
                                             + f", found {text!r}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the paper run (GPU profiles, docs/paper-run.md)")
    group.add_argument("--rehearse", action="store_true",
                       help="run every notebook with each model behind a stand-in (its context and reply lengths) on "
                       f"{rehearsal.TEST_LIMIT} test / {rehearsal.TRAIN_LIMIT} train questions per benchmark, on the "
                       "CPU; artifacts in figures/<profile>-rehearsal/ (a variant's or a part's under its variants/), "
                       "every request logged")
    group.add_argument("--gpus", type=_bounded(int, 1, high=MAX_GPUS), default=1, metavar="N",
                       help="with --estimate-only: the wall-clock on N GPUs (the models side by side, N/M GPUs each); "
                       "a run: N GPUs of this node (docs/paper-run.md); at least 1")
    group.add_argument("--gpu-kind", default=None, choices=sorted(throughput.GPUS),
                       help="with --estimate-only/--preflight: only this GPU kind (default: every kind)")
    group.add_argument("--gpu-hour-price", type=_bounded(float, 0.0), default=None, metavar="USD",
                       help="with --estimate-only: your price per GPU-hour (default: per-kind on-demand ranges, "
                       "assumed, with their sources)")
    group.add_argument("--calibrate", action="store_true",
                       help="on the GPU: a few minutes of the real workload per model through vLLM; the measured "
                       "tokens/s is stored beside the cache and used by later estimates")
    group.add_argument("--dummy-weights", action="store_true",
                       help="with --calibrate: vLLM's load_format dummy (config.json only, no weight download); the "
                       "rate is labelled as measured with dummy weights")
    group.add_argument("--calibrate-seconds", type=_bounded(float, 0.0, open_low=True, high=86_400), default=120.0,
                       metavar="S", help="time per model for --calibrate (> 0, at most a day; default 120)")
    group.add_argument("--preflight", action="store_true",
                       help="check this node (vLLM, CUDA devices and their free memory), gated models' access, free "
                       "disk for the weights, and the API models' variables")
    group.add_argument("--skip-api-models", action="store_true",
                       help="leave the API models of the large-model table out (a GPU-only node): the pre-flight does "
                       "not ask for their variables and the estimate does not count them")


def wanted(args: argparse.Namespace) -> bool:
    """The options this module runs: the rehearsal, pre-flight, calibration, and a real run on ``--gpus N`` > 1."""
    return bool(args.rehearse or args.calibrate or args.preflight
                or ((args.gpus > 1 or args.skip_api_models) and not args.estimate_only))


def _data_dir(args: argparse.Namespace) -> Path | None:
    return args.data_dir or (Path(os.environ["R2MAD_DATA_DIR"]) if os.environ.get("R2MAD_DATA_DIR") else None)


def main(args: argparse.Namespace, profile: Profile, only: Sequence[str] | None, run_notebooks: Callable,
         paths_of: Callable, discover: Callable[[Path, Sequence[str] | None], list[Path]],
         run: Callable | None = None) -> int:
    """What the paper run's options ask; ``discover(notebooks_dir, only)`` lists the notebooks; ``run(args, profile,
    only)`` is the command line's real run (for ``--gpus N``)."""
    data_dir = _data_dir(args)
    notebooks = partial(discover, args.notebooks_dir)
    skip_api = bool(getattr(args, "skip_api_models", False))
    if args.preflight:
        failures = preflight.check(profile, gpu_kind=args.gpu_kind, skip_api=skip_api, gpus=args.gpus)
        for line in failures:
            print(f"preflight: {line}")
        print("preflight: " + ("FAILED" if failures else "every check passed")
              + ("; the API models of the large-model table left out (--skip-api-models)" if skip_api else ""))
        if failures or not (args.rehearse or args.calibrate):
            return 1 if failures else 0
    if args.rehearse:
        code = rehearsal.rehearse(
            profile, args.output_dir, data_dir=data_dir, only=only, notebooks=notebooks(only),
            run=lambda rehearsed, paths: run_notebooks(rehearsed, paths, notebooks_dir=args.notebooks_dir, only=only,
                                                       jobs=args.jobs,
                                                       reuse_kernels=False if args.fresh_kernels else None),
            paths_of=lambda out, name, data=None: paths_of(out, name, data.resolve() if data else None))
        if not code and not args.preflight:  # what the GPU machine must also pass (not the rehearsal's to fail)
            for line in preflight.check_gated(profile) + ([] if skip_api else preflight.check_api(profile)):
                print(f"rehearse: note for the real run (pre-flight here): {line}")
        if code or not args.estimate_only:
            return code
        return estimate_main(args, profile, only, run_notebooks, paths_of, discover)
    if args.calibrate:
        target = paths_of(args.output_dir, profile.folder).cache_dir / calibrate.FILE_NAME
        try:
            found = estimate.find_rehearsal(profile, args.output_dir, paths_of, notebooks(None), data_dir)
            rows = rehearsal.read_log(found.log)
        except estimate.NoRehearsal:
            rows = None
        try:
            for line in calibrate.calibrate(profile, target, seconds=args.calibrate_seconds, rows=rows,
                                            dummy_weights=args.dummy_weights):
                print(line)
        except calibrate.CalibrationError as exc:
            print(f"reproduce: --calibrate: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.estimate_only:
        return estimate_main(args, profile, only, run_notebooks, paths_of, discover)
    if not gpu_models(profile):
        print(f"reproduce: --gpus/--skip-api-models: profile {profile.name!r} runs no model on vLLM (they "
              "are for a GPU profile such as paper)", file=sys.stderr)
        return 2
    return served_run(args, profile, only, paths_of, run) if run is not None else 0


def served_run(args: argparse.Namespace, profile: Profile, only: Sequence[str] | None, paths_of: Callable,
               run: Callable, *, command: Callable | None = None) -> int:
    """``--gpus N``: the pre-flight, one vLLM server per GPU (:mod:`~r2mad_lab.reproduce.paper.serve`), the run on
    them (the profile with each vLLM model served, written beside the runs; a whole run first runs the notebooks'
    grids of every served model side by side, :mod:`~r2mad_lab.reproduce.paper.together`), the servers stopped. With
    one GPU no server (the in-process engine). ``--skip-api-models``: the API models' rows not run
    (:func:`~r2mad_lab.reproduce.paper.estimate.gpu_only_fields`)."""
    import yaml

    from r2mad_core.files import atomic_write
    from r2mad_lab.experiments.profiles import load_profile

    if profile.overrides:
        print("reproduce: --gpus N runs the profile as written; for --set/--protocol, serve the models yourself "
              "(docs/paper-run.md, \"Several GPUs\")", file=sys.stderr)
        return 2
    if command is None and preflight_failed(profile, args):
        return 1
    entries = [e for e in [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]
               if e.get("engine") in estimate.GPU_ENGINES]
    runs_dir = paths_of(args.output_dir, profile.folder).runs_dir / "served"
    base = estimate.gpu_only_fields(profile.fields) if args.skip_api_models else dict(profile.fields)

    def run_with(fields: Mapping[str, Any], served: Sequence[str] = ()) -> int:
        path = runs_dir / f"{profile.name}.yaml"
        runs_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(path, f"# Written by `reproduce --profile {profile.name} --gpus {args.gpus}"
                     f"{' --skip-api-models' if args.skip_api_models else ''}`: the profile as this run ran it.\n"
                     + yaml.safe_dump(fields, sort_keys=False))
        loaded = load_profile(path)
        if len(served) > 1 and not only:  # every model's servers busy; --only: just the notebooks asked
            paths = paths_of(args.output_dir, loaded.folder)
            together.run_side_by_side(loaded, served, runs_dir=paths.runs_dir, cache_dir=paths.cache_dir,
                                      data_dir=_data_dir(args))
        return run(args, loaded, only)

    if args.gpus == 1:
        return run_with(base)
    try:
        planned = serve.plan(entries, args.gpus, **({"command": command} if command else {}))
        with serve.Servers(planned, runs_dir / "logs") as servers:
            evaluated = [e["label"] for e in base.get("models", []) if e["label"] in servers.urls()]
            return run_with(serve.served_fields(base, servers.urls()), evaluated)  # memory-only: in their banks
    except serve.ServeError as exc:
        print(f"reproduce: --gpus {args.gpus}: {exc}", file=sys.stderr)
        return 1


def preflight_failed(profile: Profile, args: argparse.Namespace | None = None) -> bool:
    """Run the pre-flight before a real GPU run; print each failure (one line) and say whether any failed."""
    failures = preflight.check(profile, skip_api=bool(getattr(args, "skip_api_models", False)),
                               gpus=int(getattr(args, "gpus", 1) or 1))
    for line in failures:
        print(f"preflight: {line}", file=sys.stderr)
    return bool(failures)


def estimate_main(args: argparse.Namespace, profile: Profile, only: Sequence[str] | None, run_notebooks: Callable,
                  paths_of: Callable, discover: Callable[[Path, Sequence[str] | None], list[Path]]) -> int:
    """``--estimate-only`` on a GPU profile: the complete rehearsal of this configuration, scaled; never a rehearsal."""
    from r2mad_lab.report.power import claims_power_lines  # lazy: only the printout needs it

    data_dir = _data_dir(args)
    notebooks = partial(discover, args.notebooks_dir)
    if only:
        print("reproduce: --estimate-only estimates every notebook of the profile (--only is ignored here)")
    try:
        found = estimate.find_rehearsal(profile, args.output_dir, paths_of, notebooks(None), data_dir)
        lines = estimate.estimate(profile, found,
                                  paths_of(args.output_dir, profile.folder).cache_dir / calibrate.FILE_NAME,
                                  data_dir=data_dir, gpus=args.gpus, gpu_kind=args.gpu_kind,
                                  gpu_hour_price=args.gpu_hour_price,
                                  skip_api=bool(getattr(args, "skip_api_models", False)))
    except (estimate.NoRehearsal, ValueError) as exc:  # CalibrationError, a profile's prices: one line
        print(f"reproduce: --estimate-only: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    for line in claims_power_lines(profile.fields, name=profile.name):
        print(line)
    return 0
