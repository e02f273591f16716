"""``--estimate-only`` on a GPU profile: **the rehearsal, scaled**, in GPU-hours and in money (docs/paper-run.md).

- **Which rehearsal**: the complete rehearsal of exactly the configuration asked (the profile, its overrides, every
  notebook: :func:`~r2mad_lab.reproduce.paper.rehearsal.rehearsal_folder`) whose inputs are unchanged
  (:func:`~r2mad_lab.reproduce.paper.rehearsal.inputs`): :func:`find_rehearsal` names it, or says in one line
  (with the command) why there is none: missing, partial (``--only``, interrupted or failed) or of other inputs.
  The estimate never rehearses: it reads the log, so it takes seconds.
- **Scaled** (:func:`estimate_from_log`): each logged request counts full questions / rehearsed questions of its
  benchmark and split.
- **GPU-hours** per model and GPU kind from the throughput model (:mod:`~r2mad_lab.reproduce.paper.throughput`, a
  modelled range with its sources) or from ``--calibrate``'s rate (only that is "measured"; a rate measured with
  dummy weights says so).
- **Money** (:func:`money_lines`): GPU-hours x a price per GPU-hour: ``--gpu-hour-price X``, else the per-kind ranges
  of :data:`GPU_HOUR_PRICES` (assumptions, with their sources, printed); the API models' tokens at the profile's
  ``prices`` (``large_models[i].prices``, per million tokens, with their source); the total.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_lab.engines.rehearsal import reply_lengths
from r2mad_lab.experiments.profiles import Profile
from r2mad_lab.reproduce.paper import calibrate, rehearsal, serve, throughput

GPU_ENGINES = ("vllm",)


@dataclass(frozen=True)
class GpuPrice:
    low: float
    high: float
    source: str


#: USD per GPU-hour, on-demand, by GPU kind: assumptions (prices move; pass --gpu-hour-price for yours).
GPU_HOUR_PRICES: dict[str, GpuPrice] = {
    "H100": GpuPrice(2.49, 3.99, "typical on-demand H100 SXM 80GB list prices, early 2026 (CoreWeave, Lambda, Crusoe, "
                     "RunPod), https://pricegpu.pages.dev/blog/h100-vs-a100-cloud-price"),
    "A100-80GB": GpuPrice(1.49, 2.49, "typical on-demand A100 SXM 80GB list prices, early 2026 (Lambda, CoreWeave, "
                          "vast.ai, RunPod), https://pricegpu.pages.dev/blog/h100-vs-a100-cloud-price"),
    "L40S": GpuPrice(0.87, 0.87, "L40S cloud price, December 2025, "
                     "https://aihardwareindex.com/blog/h100-vs-a100-vs-l40s-the-cost-per-token-analysis"),
}


def gpu_models(profile: Profile) -> dict[str, str]:
    """label -> Hugging Face id of the profile's models that run on the GPU (evaluated and memory-only)."""
    entries = [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]
    return {e["label"]: str(e.get("model")) for e in entries if e.get("engine") in GPU_ENGINES}


def rehearse_command(profile: Profile) -> str:
    """The command that rehearses ``profile`` as loaded (its overrides as ``--set``)."""
    sets = "".join(f" --set {key}={value}" for key, value in profile.overrides.items())
    return f"python -m r2mad_lab.reproduce --profile {profile.name}{sets} --rehearse"


@dataclass(frozen=True)
class Found:
    """The rehearsal an estimate uses: its folder, log and record."""

    folder: str
    log: Path
    summary: Mapping[str, Any]
    when: str


class NoRehearsal(Exception):
    """Why there is no rehearsal to estimate from (one line, with the command)."""


def find_rehearsal(profile: Profile, output_dir: Path, paths_of: Any, notebooks: Sequence[Path],
                   data_dir: Path | None = None) -> Found:
    """The complete rehearsal of ``profile`` (with its overrides, every notebook), inputs unchanged; else
    :class:`NoRehearsal` saying which and what to run."""
    folder = rehearsal.rehearsal_folder(profile)
    paths = paths_of(output_dir, folder)
    log, record = paths.runs_dir / rehearsal.LOG_NAME, paths.figures_dir / rehearsal.SUMMARY_NAME
    what = f"profile {profile.name!r}" + (f" with {', '.join(f'{k}={v}' for k, v in profile.overrides.items())}"
                                          if profile.overrides else "")
    run = rehearse_command(profile)
    if not record.is_file():
        state = (f"{log} holds a partial log (the rehearsal was interrupted or failed; it is not used)"
                 if log.is_file() else f"no rehearsal in {paths.figures_dir}")
        raise NoRehearsal(f"no complete rehearsal of {what} (every notebook): {state}; run `{run}` (minutes, on this "
                          f"CPU), then --estimate-only again")
    try:
        summary = json.loads(record.read_text(encoding="utf-8"))
        if not isinstance(summary, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        raise NoRehearsal(f"{record}: unreadable ({exc}); run `{run}` again") from None
    if not summary.get("complete") or summary.get("rehearsed_notebooks") != "all" or not log.is_file():
        raise NoRehearsal(f"the rehearsal in {paths.figures_dir} is partial (notebooks "
                          f"{summary.get('rehearsed_notebooks', '?')}, complete: {summary.get('complete', False)}); "
                          f"run `{run}` for a full one")
    now = rehearsal.inputs(profile, notebooks, data_dir,
                           test_limit=int(summary.get("test_limit", rehearsal.TEST_LIMIT)),
                           train_limit=int(summary.get("train_limit", rehearsal.TRAIN_LIMIT)))
    changed = [name for name, digest in now.items() if (summary.get("inputs") or {}).get(name) != digest]
    if changed:
        raise NoRehearsal(f"the rehearsal in {paths.figures_dir} was of other inputs (changed since: "
                          f"{', '.join(changed)}); run `{run}` again")
    when = _dt.datetime.fromtimestamp(log.stat().st_mtime, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Found(folder, log, summary, when)


def scale_factors(profile: Profile, summary: Mapping[str, Any],
                  data_dir: Path | None = None) -> dict[tuple[str, str], float]:
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


def estimate_from_log(rows: Sequence[Mapping[str, Any]],
                      factors: Mapping[tuple[str, str], float]) -> dict[str, dict[str, Any]]:
    """Per model label: the rehearsal's requests (``sampled``, longest prompt, context) and the same scaled to the
    full splits by each request's benchmark and split (a request the rehearsal could not place: the mean test
    factor)."""
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


def _money(value: float) -> str:
    return f"${value:,.0f}" if value >= 100 else f"${value:,.2f}"


PRICE_KEYS = ("prompt_per_million", "completion_per_million")


def api_prices(profile: Profile) -> dict[str, Mapping[str, Any]]:
    """label -> the ``prices`` of each API model of the large-model table (USD per million prompt and completion
    tokens, and ``source``), checked: ``ValueError`` naming the profile and the field."""
    out = {}
    for position, entry in enumerate(profile.fields.get("large_models") or []):
        prices = entry.get("prices")
        if not prices:
            continue
        where = f"profile {profile.name}: large_models[{position}].prices"
        unknown = sorted(set(prices) - {*PRICE_KEYS, "source"})
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; expected {list(PRICE_KEYS)} and source")
        for key in PRICE_KEYS:
            value = prices.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 10_000:
                raise ValueError(f"{where}.{key}: expected USD per million tokens, >= 0 and < 10,000, found {value!r}")
        out[entry["label"]] = prices
    return out


def money_lines(profile: Profile, usage: Mapping[str, Mapping[str, Any]], hours: Mapping[str, tuple[float, float]],
                *, gpu_hour_price: float | None = None) -> list[str]:
    """GPU-hours per kind at a price per GPU-hour (``gpu_hour_price``, else :data:`GPU_HOUR_PRICES`, assumed), the API
    models' tokens at the profile's prices, and the total per GPU kind."""
    lines = ["  money (USD):"]
    api_low = api_high = 0.0
    unpriced = []
    prices = api_prices(profile)
    on_gpu = gpu_models(profile)
    for label, u in usage.items():
        if label in on_gpu:
            continue
        price = prices.get(label)
        if not price:
            unpriced.append(label)
            continue
        cost = (u["prompt_tokens"] * float(price["prompt_per_million"])
                + u["completion_tokens"] * float(price["completion_per_million"])) / 1e6
        api_low += cost
        api_high += cost
        lines.append(f"    {label}: {_money(cost)} ({_tokens(u['prompt_tokens'])} prompt tokens at "
                     f"${float(price['prompt_per_million']):g}/M + {_tokens(u['completion_tokens'])} completion at "
                     f"${float(price['completion_per_million']):g}/M; {price.get('source', 'the profile')})")
    if unpriced:
        lines.append(f"    not priced (no prices in the profile's large_models entry): {', '.join(unpriced)}")
    for kind, (low, high) in hours.items():
        if gpu_hour_price is not None:
            p_low = p_high = gpu_hour_price
            said = f"${gpu_hour_price:g}/GPU-hour (--gpu-hour-price)"
        else:
            assumed = GPU_HOUR_PRICES[kind]
            p_low, p_high = assumed.low, assumed.high
            said = (f"${p_low:g}-{p_high:g}/GPU-hour, assumed ({assumed.source}; --gpu-hour-price X for yours)")
        gpu_low, gpu_high = low * p_low, high * p_high
        lines.append(f"    {kind}: GPUs {_money(gpu_low)}-{_money(gpu_high)} at {said}; with the API models: total "
                     f"{_money(gpu_low + api_low)}-{_money(gpu_high + api_high)}")
    return lines


def estimate_lines(profile: Profile, usage: Mapping[str, Mapping[str, Any]], *, gpus: int = 1,
                   gpu_kind: str | None = None, calibration: Mapping[str, Any] | None = None,
                   rehearsed: str = "", gpu_hour_price: float | None = None) -> list[str]:
    """The printout: per model, the rehearsal's and the scaled figures; per GPU model and GPU kind, a modelled range
    (or the rate ``--calibrate`` measured); totals per GPU kind; the wall-clock on ``gpus`` GPUs; money."""
    on_gpu = gpu_models(profile)
    utilization = {e["label"]: float((e.get("options") or {}).get("gpu_memory_utilization", 0.9))
                   for e in [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]}
    kinds = [gpu_kind] if gpu_kind else list(throughput.GPUS)
    measured = dict((calibration or {}).get("models") or {})
    lines = [f"estimate of profile {profile.name!r}"
             + (f" with {', '.join(f'{k}={v}' for k, v in profile.overrides.items())}" if profile.overrides else "")
             + f": the requests its rehearsal sent ({rehearsed}), each scaled by its benchmark and split's full size; "
             "prompt tokens = characters/4 + 4 per message"]
    totals = {kind: [0.0, 0.0] for kind in kinds}
    per_model: dict[str, dict[str, tuple[float, float]]] = {kind: {} for kind in kinds}
    for label, u in usage.items():
        where = "GPU" if label in on_gpu else "API"
        context = u.get("context")
        share = (f" ({u['longest_prompt'] / context:.0%} of its context {context:,})" if context
                 else " (the server's context)")
        lines.append(f"  {label} ({u['model']}, {where}): rehearsal {u['sampled']:,} requests, longest prompt "
                     f"{u['longest_prompt']:,} tokens{share}, {u['overflows']} over it; scaled: {u['requests']:,.0f} "
                     f"requests, {_tokens(u['prompt_tokens'])} prompt + {_tokens(u['completion_tokens'])} "
                     "completion tokens")
        lines.append(f"    reply lengths: {reply_lengths(u['model']).source}")
        if where != "GPU":
            continue
        work = throughput.Workload(u["prompt_tokens"] / max(u["requests"], 1),
                                   u["completion_tokens"] / max(u["requests"], 1))
        for kind in kinds:
            rate = measured.get(label)
            if rate and rate.get("gpu_kind") == kind:
                hours = u["completion_tokens"] / rate["tokens_per_s"] / 3600
                totals[kind][0] += hours
                totals[kind][1] += hours
                per_model[kind][label] = (hours, hours)
                dummy = " with dummy weights (vLLM load_format dummy: the model's shape, random values)" if rate.get(
                    "dummy_weights") else ""
                lines.append(f"    {kind}: {hours:,.1f} GPU-hours at {rate['tokens_per_s']:,.0f} tokens/s, measured on "
                             f"{rate.get('device', kind)} by --calibrate{dummy} ({rate.get('when', '?')})")
                continue
            found = throughput.rate_range(u["model"], kind, utilization.get(label, 0.9), work)
            if not found or found[0] <= 0:
                lines.append(f"    {kind}: no modelled rate "
                             f"({'unknown model shape' if not found else 'weights do not fit'})")
                continue
            low, high = found
            hours = (u["completion_tokens"] / high / 3600, u["completion_tokens"] / low / 3600)
            totals[kind][0] += hours[0]
            totals[kind][1] += hours[1]
            per_model[kind][label] = hours
            lines.append(f"    {kind}: {low:,.0f}-{high:,.0f} tokens/s modelled -> "
                         f"{hours[0]:,.1f}-{hours[1]:,.1f} GPU-hours")
    absent = [label for label in [*on_gpu,
                                  *(e["label"] for e in profile.fields.get("large_models") or []
                                    if "stand_in" not in e)]
              if label not in usage]
    if absent:
        lines.append(f"  not in the rehearsal's log (not counted): {', '.join(absent)}")
    for kind, (low, high) in totals.items():
        lines.append(f"  total on {kind}: {low:,.1f}-{high:,.1f} GPU-hours for the {len(on_gpu)} vLLM "
                     f"models; {wall_clock_line(per_model[kind], list(on_gpu), gpus)}")
    lines += money_lines(profile, usage, {k: (v[0], v[1]) for k, v in totals.items()}, gpu_hour_price=gpu_hour_price)
    lines.append("  sources:")
    lines += [f"    {line}" for line in throughput.sources(on_gpu)]
    if not measured:
        lines.append("    no calibration file: run `reproduce --profile paper --calibrate` on the GPU to replace the "
                     "modelled ranges by rates from your GPU")
    return lines


def wall_clock(hours: Mapping[str, tuple[float, float]], models: Sequence[str],
               gpus: int) -> tuple[float, float] | None:
    """The run's wall-clock (low, high) in hours on ``gpus`` GPUs from each GPU model's GPU-hours: on one GPU the
    models one after another (the sum); on N >= M GPUs the M models side by side, each on its share of the GPUs
    (:func:`~r2mad_lab.reproduce.paper.serve.assignment`), so the slowest model's GPU-hours over its GPUs (ideal
    scaling within a model assumed); None where the run refuses (1 < N < M)."""
    if gpus == 1:
        return sum(h[0] for h in hours.values()), sum(h[1] for h in hours.values())
    if gpus < len(models):
        return None
    share = Counter(serve.assignment(list(models), gpus))
    return (max((h[0] / share[label] for label, h in hours.items()), default=0.0),
            max((h[1] / share[label] for label, h in hours.items()), default=0.0))


def wall_clock_line(hours: Mapping[str, tuple[float, float]], models: Sequence[str], gpus: int) -> str:
    """The printout's wall-clock clause (:func:`wall_clock`)."""
    wall = wall_clock(hours, models, gpus)
    if wall is None:
        return (f"on {gpus} GPUs: no run (the {len(models)} vLLM models run at once on separate GPUs: at least "
                f"{len(models)} GPUs, or 1)")
    if gpus == 1:
        return f"on 1 GPU: wall-clock {wall[0]:,.1f}-{wall[1]:,.1f} h (the models one after another)"
    share = Counter(serve.assignment(list(models), gpus))
    slowest = max(hours, key=lambda label: hours[label][1] / share[label]) if hours else None
    return (f"on {gpus} GPUs: wall-clock {wall[0]:,.1f}-{wall[1]:,.1f} h (the models side by side, each on its "
            f"GPUs: " + ", ".join(f"{label} {share[label]}" for label in models)
            + (f"; the slowest, {slowest}, sets it" if slowest else "") + "; ideal scaling within a model assumed)")


def estimate(profile: Profile, found: Found, calibration_file: Path, *, data_dir: Path | None = None, gpus: int = 1,
             gpu_kind: str | None = None, gpu_hour_price: float | None = None, skip_api: bool = False) -> list[str]:
    """The estimate's lines from the rehearsal ``found`` (and a calibration, validated when read); ``skip_api``: the
    API models of the large-model table left out (said in the first lines)."""
    summary = found.summary
    usage = estimate_from_log(rehearsal.read_log(found.log), scale_factors(profile, summary, data_dir))
    left_out = []
    if skip_api:
        on_gpu = gpu_models(profile)
        left_out = [label for label in usage if label not in on_gpu]
        usage = {label: u for label, u in usage.items() if label in on_gpu}
        profile = _without_api(profile)
    calibration = calibrate.read(calibration_file)
    note = ([f"  left out (--skip-api-models): the API models {', '.join(left_out)} and the large-model table"]
            if skip_api else [])
    lines = estimate_lines(profile, usage, gpus=gpus, gpu_kind=gpu_kind, calibration=calibration,
                          gpu_hour_price=gpu_hour_price,
                          rehearsed=f"{found.folder}, {found.when}, every notebook, {summary['test_limit']} test / "
                          f"{summary['train_limit']} train questions per benchmark, inputs unchanged since")
    return lines[:1] + note + lines[1:]


def gpu_only_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``--skip-api-models``: the profile's fields with each API model of the large-model table a ``stand_in`` row
    (not run: the table says "not run in this profile", notebook 03) and the description saying so."""
    out = json.loads(json.dumps(dict(fields), default=str))
    first = out["models"][0]["label"]
    api = [e["label"] for e in out.get("large_models") or [] if "stand_in" not in e]
    out["large_models"] = [e if "stand_in" in e else {"label": e["label"], "stand_in": first}
                           for e in out.get("large_models") or []]
    if api:
        out["description"] = (f"{str(out.get('description') or '').rstrip()} GPU ONLY (--skip-api-models): the API "
                              f"models {', '.join(api)} are left out; their rows of the large-model table say not run.")
    return out


def _without_api(profile: Profile) -> Profile:
    """``profile`` with no API model in its large-model table (the estimate's view under ``--skip-api-models``)."""
    from dataclasses import replace

    return replace(profile, fields=gpu_only_fields(profile.fields))
