"""``reproduce --profile paper --calibrate``: measure each GPU model's generated tokens per second on the user's GPU.

For each model the profile runs on vLLM, the model is loaded as the run loads it (its engine and options, no
response cache: every request is generated) and sent the workload's first requests: round 0 of a debate (each
agent's system prompt and the task prompt) on the test questions of every benchmark, ``n_agents`` per question,
at the profile's sampling settings, in batches of :data:`BATCH`, until ``seconds`` have passed. Round-0 prompts are
shorter than later rounds' (prefill is a smaller share than in the run): the printout says so. The rate, the GPU it
ran on and when go to ``cache/<profile>/calibration.json`` (:data:`FILE_NAME`), beside the response cache; later
``--estimate-only`` runs print it as "measured" (the only rate they call so).

``--dummy-weights``: each model is loaded with vLLM's ``load_format="dummy"`` (its config.json only, random weights of
the right shape, no download): a rate before the weights are fetched, stored with ``dummy_weights: true`` and printed
as such (decoding speed depends on the shapes, not the values; the lengths of dummy replies are capped at
``max_tokens`` by ``ignore_eos``-free sampling of random weights, so they run long: an upper bound on work per request).

The file is validated when read (:func:`read`): anything else than the shape :func:`calibrate` writes, or a rate
outside physical bounds (:data:`RATE_BOUNDS`), is one line naming the file and the field (:class:`CalibrationError`).
Where vLLM is not installed, ``--calibrate`` says so in one line with the install command.

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
from r2mad_core.files import atomic_write
from r2mad_lab.engines import Request, SamplingParams, make_engine
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.experiments.profiles import Profile

FILE_NAME = "calibration.json"
BATCH = 256
#: Generated tokens/s of one GPU a calibration may report: above 0, below 1M (an 8B model on an H100 decodes a few
#: thousand to ~20K tokens/s in vLLM's public benchmarks; 1M leaves room for any card and batch, never a typo's 1e9).
RATE_BOUNDS = (0.0, 1_000_000.0)


class CalibrationError(ValueError):
    """A calibration file that is not what ``--calibrate`` writes, or a calibration that cannot run (one line)."""


def _check_rate(path: Path, label: str, entry: Any) -> dict[str, Any]:
    where = f"{path}: models.{label}"
    if not isinstance(entry, dict):
        raise CalibrationError(f"{where}: expected an object, found {type(entry).__name__}")
    rate = entry.get("tokens_per_s")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise CalibrationError(f"{where}.tokens_per_s: expected a number, found {rate!r}")
    low, high = RATE_BOUNDS
    if not (low < float(rate) < high):  # NaN fails too
        raise CalibrationError(f"{where}.tokens_per_s: {rate!r} is outside physical bounds (> {low:g} and < "
                               f"{high:,.0f} tokens/s); rerun --calibrate or delete the file")
    kind = entry.get("gpu_kind")
    if not isinstance(kind, str) or not kind:
        raise CalibrationError(f"{where}.gpu_kind: expected a GPU kind (e.g. H100), found {kind!r}")
    for key in ("device", "when", "model"):
        if key in entry and not isinstance(entry[key], str):
            raise CalibrationError(f"{where}.{key}: expected text, found {entry[key]!r}")
    if "dummy_weights" in entry and not isinstance(entry["dummy_weights"], bool):
        raise CalibrationError(f"{where}.dummy_weights: expected true or false, found {entry['dummy_weights']!r}")
    return entry


def read(path: Path) -> dict[str, Any]:
    """The calibration file, validated (``{}`` when there is none); :class:`CalibrationError` names the file and
    field."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CalibrationError(f"{path}: not UTF-8 text; rerun --calibrate or delete the file") from None
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); rerun "
                               f"--calibrate or delete the file") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: expected an object with \"models\", found {type(data).__name__}")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise CalibrationError(f"{path}: models: expected an object (label -> rate), found {type(models).__name__}")
    return {**data, "models": {str(label): _check_rate(path, str(label), entry) for label, entry in models.items()}}


def vllm_missing() -> str | None:
    """None when vLLM can be imported, else why not (one line, with the install command)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not installed here (it runs on the GPU node): `make setup "
                "EXTRAS=gpu,notebooks,dev`, or use the container of docs/paper-run.md")
    return None


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


def _default_engine(spec: ModelSpec, dummy_weights: bool = False) -> Any:
    model, options = spec.resolved()
    if dummy_weights:
        options = {**options, "load_format": "dummy"}
    return make_engine(spec.engine, model=model, **options)


def calibrate(profile: Profile, target: Path, *, seconds: float = 120.0,
              rows: Sequence[Mapping[str, Any]] | None = None,
              engine_factory: Callable[..., Any] | None = None, dummy_weights: bool = False,
              requests_for: Callable[[Profile], list[Request]] = round0_requests,
              clock: Callable[[], float] = time.perf_counter, device: Callable[[], str] = cuda_device) -> list[str]:
    """Measure each vLLM model of ``profile`` (module docstring), merge into ``target``; the printed lines."""
    if engine_factory is None:
        problem = vllm_missing()
        if problem:
            raise CalibrationError(problem)
        engine_factory = _default_engine
    specs = [ModelSpec.from_entry(m) for m in [*profile.fields.get("models", []),
                                               *(profile.fields.get("memory_models") or [])]
             if m.get("engine") == "vllm"]
    stored = read(target) if Path(target).is_file() else {}
    models = dict(stored.get("models") or {})
    name = device()
    lines = [f"calibrate: {len(specs)} vLLM models of profile {profile.name} on {name}, ~{seconds:.0f} s each "
             f"(round-0 requests: shorter prompts than later rounds)"
             + ("; DUMMY WEIGHTS (vLLM load_format dummy: config.json only, no download)" if dummy_weights else "")]
    requests = requests_for(profile)
    for spec in specs:
        engine = engine_factory(spec, dummy_weights) if dummy_weights else engine_factory(spec)
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
                              "seconds": round(elapsed, 2),
                              "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                              "workload": "round-0 debate requests at the profile's sampling settings",
                              "dummy_weights": bool(dummy_weights)}
        lines.append(f"calibrate: {spec.label}: {rate:,.0f} tokens/s "
                     f"measured{' with dummy weights' if dummy_weights else ''} ({tokens:,} tokens in {elapsed:.1f} s, "
                     f"{sent:,} requests)")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, json.dumps({"profile": profile.name, "models": models}, indent=2) + "\n")
    lines.append(f"calibrate: stored in {target}; `--estimate-only` uses these rates")
    return lines
