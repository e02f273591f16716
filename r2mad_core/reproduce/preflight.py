"""Pre-flight of a GPU profile, before any GPU work: each failure one line.

- **Gated models** (:data:`GATED`: Gemma 3): a token (``$HF_TOKEN`` or huggingface_hub's stored login) and access
  granted on the model page (the licence accepted), asked of the Hub through ``access`` (injectable: the default
  calls ``huggingface_hub.HfApi().model_info``).
- **Disk** for the weights: the free space of the Hugging Face cache (``$HF_HOME``, else ``~/.cache/huggingface``)
  against the bf16 weights of every model not yet there (:mod:`r2mad_core.reproduce.throughput` parameters x 2 bytes).
- **GPU memory**: each model's weights plus the KV cache of one sequence at its ``max_model_len`` (vLLM refuses to
  start without it) within ``gpu_memory_utilization`` x the card's memory (the card named, else every kind).
- **API models**: the environment variables naming their model, URL and key are set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from r2mad_core.experiments.profiles import Profile
from r2mad_core.reproduce import throughput

#: Models whose weights the Hub gives only to accounts that accepted the licence.
GATED = {"google/gemma-3-4b-it": "https://huggingface.co/google/gemma-3-4b-it"}
GB = 1e9


def hub_token() -> str | None:
    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    try:
        from huggingface_hub import get_token  # lazy: optional

        return get_token()
    except Exception:
        return None


def hub_access(model: str, revision: str | None, token: str) -> str | None:
    """None when ``token`` may download ``model``, else why not (one line)."""
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(model, revision=revision, token=token)
        return None
    except Exception as exc:  # GatedRepoError, an HTTP error, no network
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def hf_cache() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def _entries(profile: Profile) -> list[Mapping[str, Any]]:
    return [e for e in [*profile.fields.get("models", []), *(profile.fields.get("memory_models") or [])]
            if e.get("engine") == "vllm"]


def check_gated(profile: Profile, *, token: Callable[[], str | None] | None = None,
                access: Callable[[str, str | None, str], str | None] | None = None) -> list[str]:
    token, access = token or hub_token, access or hub_access  # looked up now (tests replace them)
    failures = []
    for entry in _entries(profile):
        model = str(entry.get("model"))
        if model.lower() not in GATED:
            continue
        found = token()
        if not found:
            failures.append(f"{entry['label']} ({model}) is gated: no Hugging Face token; accept the licence at "
                            f"{GATED[model.lower()]} and export HF_TOKEN=<a read token of that account>")
            continue
        problem = access(model, (entry.get("options") or {}).get("revision"), found)
        if problem:
            failures.append(f"{entry['label']} ({model}) is gated and the token cannot read it ({problem}); accept the "
                            f"licence at {GATED[model.lower()]} while logged in to the token's account")
    return failures


def check_disk(profile: Profile, *, cache: Path | None = None,
               disk_usage: Callable[[Path], Any] = shutil.disk_usage) -> list[str]:
    cache = cache or hf_cache()
    needed = 0.0
    for entry in _entries(profile):
        model = str(entry.get("model"))
        shape = throughput.shape_of(model)
        present = (cache / "hub" / ("models--" + model.replace("/", "--"))).is_dir()
        if shape is not None and not present:
            needed += shape.weight_bytes
    where = cache if cache.exists() else next((p for p in cache.parents if p.exists()), Path("/"))
    free = disk_usage(where).free
    if needed > free:
        return [f"disk: {needed / GB:,.1f} GB of weights to download into {cache}, {free / GB:,.1f} GB free"]
    return []


def check_memory(profile: Profile, *, gpu_kind: str | None = None) -> list[str]:
    failures = []
    kinds = [gpu_kind] if gpu_kind else list(throughput.GPUS)
    for entry in _entries(profile):
        options = entry.get("options") or {}
        shape = throughput.shape_of(str(entry.get("model")))
        if shape is None:
            failures.append(f"{entry['label']}: no shape known for {entry.get('model')} (add it to "
                            f"r2mad_core/reproduce/throughput.py MODELS)")
            continue
        utilization = float(options.get("gpu_memory_utilization", 0.9))
        context = int(options.get("max_model_len") or 0)
        for kind in kinds:
            capacity = throughput.kv_capacity_tokens(shape, throughput.GPUS[kind], utilization)
            if capacity < context:
                failures.append(f"{entry['label']} on {kind}: one sequence of {context:,} tokens needs "
                                f"{context * shape.kv_bytes_per_token / GB:,.1f} GB of KV beside {shape.weight_bytes / GB:,.1f} "
                                f"GB of weights; {utilization:g} x {throughput.GPUS[kind].memory_bytes / GB:.0f} GB holds "
                                f"{max(capacity, 0):,.0f} tokens (lower max_model_len or raise gpu_memory_utilization)")
    return failures


def check_api(profile: Profile, environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    failures = []
    for entry in profile.fields.get("large_models") or []:
        for key in ("model_env", "base_url_env", "api_key_env"):
            variable = entry.get(key)
            if variable and not environ.get(variable):
                failures.append(f"{entry['label']}: environment variable {variable} ({key[:-4].replace('_', ' ')}) is not set")
    return failures


def check(profile: Profile, *, gpu_kind: str | None = None, **fakes: Any) -> list[str]:
    """Every check; the failures, one line each (empty: all passed)."""
    return [*check_gated(profile, **{k: v for k, v in fakes.items() if k in ("token", "access")}),
            *check_disk(profile, **{k: v for k, v in fakes.items() if k in ("cache", "disk_usage")}),
            *check_memory(profile, gpu_kind=gpu_kind),
            *check_api(profile, fakes.get("environ"))]
