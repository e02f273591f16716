"""``reproduce --profile paper --calibrate``: measure each GPU model's generated tokens per second on the user's GPU.

For each model the profile runs on vLLM, the model is loaded as the run loads it (its engine and options, no
response cache: every request is generated) and sent the workload's first requests: round 0 of a debate (each
agent's system prompt and the task prompt) on the test questions of every benchmark, ``n_agents`` per question,
at the profile's sampling settings, in batches of :data:`BATCH`, until ``seconds`` have passed. Round-0 prompts are
shorter than later rounds' (prefill is a smaller share than in the run): the printout says so. The rate, the GPU it
ran on and when go to ``cache/<profile>/calibration.json`` (:data:`FILE_NAME`), beside the response cache; later
``--estimate-only`` runs print it as "measured" (the only rate they call so).

``engine_factory``, ``requests_for``, ``clock`` and ``device`` are injectable (the tests use a fake engine; there is
no GPU here).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_core.data.benchmarks import load as load_benchmark
from r2mad_core.debate import prompts
from r2mad_core.engines import Request, SamplingParams, make_engine
from r2mad_core.experiments.model_specs import ModelSpec
from r2mad_core.experiments.profiles import Profile
from r2mad_core.files import atomic_write

FILE_NAME = "calibration.json"
BATCH = 256


def read(path: Path) -> dict[str, Any]:
    """The calibration file (``{}`` when there is none)."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def gpu_kind(device: str) -> str:
    """The throughput model's GPU kind of a CUDA device name (``NVIDIA H100 80GB HBM3`` -> ``H100``), else the name."""
    name = device.upper()
    if "H100" in name:
        return "H100"
    if "A100" in name and "80" in name:
        return "A100-80GB"
    if "L40S" in name:
        return "L40S"
    return device


def cuda_device() -> str:
    try:
        import torch  # lazy: only on the GPU machine

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    except ImportError:
        return "no torch"


def round0_requests(profile: Profile, limit: int = 10_000) -> list[Request]:
    """Round 0 of a debate on the test questions of every benchmark: each agent's system prompt and the task prompt."""
    spec = profile.spec
    params = SamplingParams(temperature=spec.temperature, top_p=spec.top_p, max_tokens=spec.max_tokens, seed=spec.seed)
    out = []
    for sample_index in range(spec.n_agents):
        for benchmark in spec.benchmarks:
            for sample in load_benchmark(benchmark, "test", split_rule=spec.choices["split_rule"]):
                messages = ({"role": "system", "content": prompts.system_prompt(benchmark, sample_index)},
                            {"role": "user", "content": prompts.task_prompt(benchmark, sample.question)})
                out.append(Request(messages, params, sample_index=sample_index))
    return out[:limit]


def _default_engine(spec: ModelSpec) -> Any:
    model, options = spec.resolved()
    return make_engine(spec.engine, model=model, **options)


def calibrate(profile: Profile, target: Path, *, seconds: float = 120.0, rows: Sequence[Mapping[str, Any]] | None = None,
              engine_factory: Callable[[ModelSpec], Any] = _default_engine,
              requests_for: Callable[[Profile], list[Request]] = round0_requests,
              clock: Callable[[], float] = time.perf_counter, device: Callable[[], str] = cuda_device) -> list[str]:
    """Measure each vLLM model of ``profile`` (module docstring), merge into ``target``; the printed lines."""
    specs = [ModelSpec.from_entry(m) for m in [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]
             if m.get("engine") == "vllm"]
    stored = read(target)
    models = dict(stored.get("models") or {})
    name = device()
    lines = [f"calibrate: {len(specs)} vLLM models of profile {profile.name} on {name}, ~{seconds:.0f} s each "
             f"(round-0 requests: shorter prompts than later rounds)"]
    requests = requests_for(profile)
    for spec in specs:
        engine = engine_factory(spec)
        sent = tokens = 0
        try:
            start = clock()
            while sent < len(requests) and clock() - start < seconds:
                batch = requests[sent:sent + BATCH]
                tokens += sum(c.completion_tokens for c in engine.generate(batch))
                sent += len(batch)
            elapsed = clock() - start
        finally:
            engine.close()
        if elapsed <= 0 or tokens <= 0:
            lines.append(f"calibrate: {spec.label}: nothing generated in {elapsed:.1f} s; no rate stored")
            continue
        rate = tokens / elapsed
        models[spec.label] = {"model": spec.model, "tokens_per_s": round(rate, 1), "gpu_kind": gpu_kind(name),
                              "device": name, "requests": sent, "completion_tokens": tokens,
                              "seconds": round(elapsed, 2), "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                              "workload": "round-0 debate requests at the profile's sampling settings"}
        lines.append(f"calibrate: {spec.label}: {rate:,.0f} tokens/s measured ({tokens:,} tokens in {elapsed:.1f} s, "
                     f"{sent:,} requests)")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, json.dumps({"profile": profile.name, "models": models}, indent=2) + "\n")
    lines.append(f"calibrate: stored in {target}; `--estimate-only` uses these rates")
    return lines
