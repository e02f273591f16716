"""The paper run from the command line: ``--rehearse``, ``--estimate-only`` (from the rehearsal), ``--gpus``,
``--calibrate`` and ``--preflight`` (docs/paper-run.md).

- ``--rehearse``: :func:`r2mad_core.reproduce.rehearsal.rehearse`.
- ``--estimate-only`` on a GPU profile: **the rehearsal, scaled** (:func:`estimate_from_log`): the requests the
  rehearsal logged per model (running it first when there is no log), each scaled by its benchmark and split's full
  size over the rehearsed one; GPU-hours per model and GPU kind from the throughput model
  (:mod:`r2mad_core.reproduce.throughput`, a modelled range with its sources) or from ``--calibrate``'s measured rate
  (:mod:`r2mad_core.reproduce.calibrate`; only that rate is called measured); ``--gpus N``: the wall-clock on N GPUs.
- ``--preflight``: :mod:`r2mad_core.reproduce.preflight` (also run before any real GPU run).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_core.engines.rehearsal import reply_lengths
from r2mad_core.experiments.profiles import Profile
from r2mad_core.reproduce import calibrate, preflight, rehearsal, throughput

GPU_ENGINES = ("vllm",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the paper run (GPU profiles, docs/paper-run.md)")
    group.add_argument("--rehearse", action="store_true",
                       help="run every notebook with each model behind a stand-in (its context and reply lengths) on "
                       f"{rehearsal.TEST_LIMIT} test / {rehearsal.TRAIN_LIMIT} train questions per benchmark, on the "
                       "CPU; artifacts in figures/<profile>-rehearsal/, every request logged")
    group.add_argument("--gpus", type=int, default=1, metavar="N",
                       help="with --estimate-only: the wall-clock on N GPUs (data parallel, each model in turn)")
    group.add_argument("--gpu-kind", default=None, choices=sorted(throughput.GPUS),
                       help="with --estimate-only/--preflight: only this GPU kind (default: every kind)")
    group.add_argument("--calibrate", action="store_true",
                       help="on the GPU: a few minutes of the real workload per model through vLLM; the measured "
                       "tokens/s is stored beside the cache and used by later estimates")
    group.add_argument("--calibrate-seconds", type=float, default=120.0, help="time per model for --calibrate")
    group.add_argument("--preflight", action="store_true",
                       help="check gated models' access, free disk for the weights and each model's GPU memory")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.rehearse or args.calibrate or args.preflight)


def gpu_models(profile: Profile) -> dict[str, str]:
    """label -> Hugging Face id of the profile's models that run on the GPU (evaluated and memory-only)."""
    entries = [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]
    return {e["label"]: str(e.get("model")) for e in entries if e.get("engine") in GPU_ENGINES}


def _log_path(output_dir: Path, profile: Profile, paths_of: Callable) -> Path:
    return paths_of(output_dir, rehearsal.rehearsal_name(profile)).runs_dir / rehearsal.LOG_NAME


def main(args: argparse.Namespace, profile: Profile, only: Sequence[str] | None, run_notebooks: Callable,
         paths_of: Callable) -> int:
    data_dir = args.data_dir or (Path(os.environ["R2MAD_DATA_DIR"]) if os.environ.get("R2MAD_DATA_DIR") else None)
    if args.preflight:
        failures = preflight.check(profile, gpu_kind=args.gpu_kind)
        for line in failures:
            print(f"preflight: {line}")
        print("preflight: " + ("FAILED" if failures else "every check passed"))
        if failures or not (args.rehearse or args.calibrate):
            return 1 if failures else 0
    if args.rehearse:
        code = rehearsal.rehearse(
            profile, args.output_dir, data_dir=data_dir, only=only,
            run=lambda rehearsed, paths: run_notebooks(rehearsed, paths, notebooks_dir=args.notebooks_dir, only=only,
                                                       jobs=args.jobs, reuse_kernels=False if args.fresh_kernels else None),
            paths_of=lambda out, name, data=None: paths_of(out, name, data.resolve() if data else None))
        if not code and not args.preflight:  # what the GPU machine must also pass (not the rehearsal's to fail)
            for line in preflight.check_gated(profile) + preflight.check_api(profile):
                print(f"rehearse: note for the real run (pre-flight here): {line}")
        if code or not args.estimate_only:
            return code
        return estimate_main(args, profile, only, run_notebooks, paths_of)
    if args.calibrate:
        log = _log_path(args.output_dir, profile, paths_of)
        target = paths_of(args.output_dir, profile.folder).cache_dir / calibrate.FILE_NAME
        for line in calibrate.calibrate(profile, target, seconds=args.calibrate_seconds,
                                        rows=rehearsal.read_log(log) if log.is_file() else None):
            print(line)
        return 0
    return 0


def preflight_failed(profile: Profile) -> bool:
    """Run the pre-flight before a real GPU run; print each failure (one line) and say whether any failed."""
    kind = calibrate.gpu_kind(calibrate.cuda_device())  # the card here; memory unchecked on a card not modelled
    failures = preflight.check(profile, gpu_kind=kind) if kind in throughput.GPUS else [
        *preflight.check_gated(profile), *preflight.check_disk(profile), *preflight.check_api(profile)]
    for line in failures:
        print(f"preflight: {line}", file=sys.stderr)
    return bool(failures)


def scale_factors(profile: Profile, summary: Mapping[str, Any], data_dir: Path | None = None) -> dict[tuple[str, str], float]:
    """(benchmark, split) -> full questions / rehearsed questions."""
    rule = profile.spec.choices["split_rule"]
    factors = {}
    for benchmark in profile.spec.benchmarks:
        for split in ("test", "train"):
            full = len(load_benchmark(benchmark, split, data_dir, split_rule=rule))
            limit = getattr(profile.spec, f"{split}_limit")
            full = min(full, limit) if limit else full
            factors[(benchmark, split)] = full / max(1, min(int(summary[f"{split}_limit"]), full))
    return factors


def estimate_from_log(rows: Sequence[Mapping[str, Any]], factors: Mapping[tuple[str, str], float]) -> dict[str, dict[str, Any]]:
    """Per model label: the rehearsal's requests (``sampled``, longest prompt, context) and the same scaled to the
    full splits by each request's benchmark and split (a request the rehearsal could not place: the mean test factor)."""
    tests = [f for (b, s), f in factors.items() if s == "test"] or [1.0]
    fallback = sum(tests) / len(tests)
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        usage = out.setdefault(row["label"], {"model": row["model"], "context": row.get("context"), "sampled": 0,
                                              "longest_prompt": 0, "unplaced": 0, "requests": 0.0,
                                              "prompt_tokens": 0.0, "completion_tokens": 0.0, "overflows": 0})
        factor = factors.get((row.get("benchmark"), row.get("split")))
        if factor is None:
            usage["unplaced"] += 1
            factor = fallback
        usage["sampled"] += 1
        usage["longest_prompt"] = max(usage["longest_prompt"], row["prompt_tokens"])
        usage["overflows"] += row.get("cut") == "context_overflow"
        usage["requests"] += factor
        usage["prompt_tokens"] += factor * row["prompt_tokens"]
        usage["completion_tokens"] += factor * row["completion_tokens"]
    return out


def _tokens(value: float) -> str:
    return f"{value / 1e6:,.1f}M" if value >= 1e6 else f"{value / 1e3:,.0f}K"


def estimate_lines(profile: Profile, usage: Mapping[str, Mapping[str, Any]], *, gpus: int = 1,
                   gpu_kind: str | None = None, calibration: Mapping[str, Any] | None = None,
                   rehearsed: str = "") -> list[str]:
    """The printout: per model, the rehearsal's and the scaled figures; per GPU model and GPU kind, a modelled range
    (or the rate ``--calibrate`` measured); totals per GPU kind; the wall-clock on ``gpus`` GPUs."""
    on_gpu = gpu_models(profile)
    utilization = {e["label"]: float((e.get("options") or {}).get("gpu_memory_utilization", 0.9))
                   for e in [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]}
    kinds = [gpu_kind] if gpu_kind else list(throughput.GPUS)
    measured = dict((calibration or {}).get("models") or {})
    lines = [f"estimate of profile {profile.name!r}: the requests its rehearsal sent ({rehearsed}), each scaled by its "
             f"benchmark and split's full size; prompt tokens = characters/4 + 4 per message"]
    totals = {kind: [0.0, 0.0] for kind in kinds}
    for label, u in usage.items():
        where = "GPU" if label in on_gpu else "API"
        context = u.get("context")
        share = f" ({u['longest_prompt'] / context:.0%} of its context {context:,})" if context else " (the server's context)"
        lines.append(f"  {label} ({u['model']}, {where}): rehearsal {u['sampled']:,} requests, longest prompt "
                     f"{u['longest_prompt']:,} tokens{share}, {u['overflows']} over it; scaled: {u['requests']:,.0f} "
                     f"requests, {_tokens(u['prompt_tokens'])} prompt + {_tokens(u['completion_tokens'])} completion tokens")
        lines.append(f"    reply lengths: {reply_lengths(u['model']).source}")
        if where != "GPU":
            continue
        work = throughput.Workload(u["prompt_tokens"] / max(u["requests"], 1), u["completion_tokens"] / max(u["requests"], 1))
        for kind in kinds:
            rate = measured.get(label)
            if rate and rate.get("gpu_kind") == kind:
                hours = u["completion_tokens"] / rate["tokens_per_s"] / 3600
                totals[kind][0] += hours
                totals[kind][1] += hours
                lines.append(f"    {kind}: {hours:,.1f} GPU-hours at {rate['tokens_per_s']:,.0f} tokens/s, measured on "
                             f"{rate.get('device', kind)} by --calibrate ({rate.get('when', '?')})")
                continue
            found = throughput.rate_range(u["model"], kind, utilization.get(label, 0.9), work)
            if not found or found[0] <= 0:
                lines.append(f"    {kind}: no modelled rate ({'unknown model shape' if not found else 'weights do not fit'})")
                continue
            low, high = found
            hours = (u["completion_tokens"] / high / 3600, u["completion_tokens"] / low / 3600)
            totals[kind][0] += hours[0]
            totals[kind][1] += hours[1]
            lines.append(f"    {kind}: {low:,.0f}-{high:,.0f} tokens/s modelled -> "
                         f"{hours[0]:,.1f}-{hours[1]:,.1f} GPU-hours")
    absent = [label for label in [*on_gpu, *(e["label"] for e in profile.fields.get("large_models") or [] if "stand_in" not in e)]
              if label not in usage]
    if absent:
        lines.append(f"  not in the rehearsal's log (not counted; rehearse every notebook): {', '.join(absent)}")
    for kind, (low, high) in totals.items():
        lines.append(f"  total on {kind}: {low:,.1f}-{high:,.1f} GPU-hours for the {len(on_gpu)} vLLM models, one after "
                     f"another; on {gpus} GPU{'s' if gpus != 1 else ''}: wall-clock {low / gpus:,.1f}-{high / gpus:,.1f} h "
                     f"(data parallel, each model's requests spread over the {gpus}; ideal scaling assumed)")
    lines.append("  sources:")
    lines += [f"    {line}" for line in throughput.sources(on_gpu)]
    if not measured:
        lines.append("    no calibration file: run `reproduce --profile paper --calibrate` on the GPU to replace the "
                     "modelled ranges by rates from your GPU")
    return lines


def estimate_main(args: argparse.Namespace, profile: Profile, only: Sequence[str] | None, run_notebooks: Callable,
                  paths_of: Callable) -> int:
    """``--estimate-only`` on a GPU profile: the rehearsal's log (the rehearsal is run first when there is none),
    scaled (:func:`estimate_lines`)."""
    from r2mad_core.report.power import claims_power_lines  # lazy: only the printout needs it

    data_dir = args.data_dir or (Path(os.environ["R2MAD_DATA_DIR"]) if os.environ.get("R2MAD_DATA_DIR") else None)
    log = _log_path(args.output_dir, profile, paths_of)
    if not log.is_file():
        print("reproduce: --estimate-only: no rehearsal log yet; rehearsing first (minutes, on this CPU) ...", flush=True)
        args.rehearse, args.estimate_only = True, False
        code = main(args, profile, None, run_notebooks, paths_of)
        if code:
            return code
    summary_path = paths_of(args.output_dir, rehearsal.rehearsal_name(profile)).figures_dir / rehearsal.SUMMARY_NAME
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {
        "test_limit": rehearsal.TEST_LIMIT, "train_limit": rehearsal.TRAIN_LIMIT}
    when = _dt.datetime.fromtimestamp(log.stat().st_mtime, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    usage = estimate_from_log(rehearsal.read_log(log), scale_factors(profile, summary, data_dir))
    calibration = calibrate.read(paths_of(args.output_dir, profile.folder).cache_dir / calibrate.FILE_NAME)
    for line in estimate_lines(profile, usage, gpus=max(1, args.gpus), gpu_kind=args.gpu_kind, calibration=calibration,
                               rehearsed=f"{log}, {when}, {summary['test_limit']} test / {summary['train_limit']} "
                               f"train questions per benchmark"):
        print(line)
    for line in claims_power_lines(profile.fields, name=profile.name):
        print(line)
    return 0
