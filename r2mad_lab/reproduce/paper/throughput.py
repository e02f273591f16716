"""A throughput model of vLLM on one GPU, per model and GPU kind: a range of generated tokens per second, with sources.

Nothing here is measured: a rate from this model is "modelled" in every printout; only a rate from ``--calibrate``
(:mod:`r2mad_lab.reproduce.paper.calibrate`) is "measured". The model:

- **KV cache capacity.** vLLM gives ``gpu_memory_utilization`` x the card's memory to the weights, the activations
  and the KV cache. KV tokens = (util x memory - weights - :data:`OVERHEAD_BYTES`) / KV bytes per token, KV bytes
  per token = layers x KV heads x head_dim x 2 (K and V) x 2 bytes (bf16), from each model's config.json
  (:data:`MODELS`). Sequences resident at once = min(KV tokens / (mean prompt + half the mean completion),
  :data:`MAX_NUM_SEQS`, the requests the grid keeps in flight).
- **Decode** is memory-bound: one step reads the weights and every resident sequence's KV once, at ``bw_efficiency``
  of the card's bandwidth; it yields one token per resident sequence.
- **Prefill** is compute-bound: 2 x parameters FLOPs per prompt token at ``mfu`` of the card's bf16 peak; the
  prompt tokens not served by vLLM's prefix cache (``prefix_hit``) are computed.
- The range: low = (bandwidth efficiency 0.5, MFU 0.4, no prefix-cache hits), high = (0.8, 0.6, half the prompt
  tokens hit). Per generated token: time = 1 / decode rate + (prompt/completion) x (1 - hit) x 2P / (peak x mfu).

Checked against public figures: 7-14B models on one H100/A100 reach 3.2K-12.5K tokens/s in vLLM's
benchmarks (vllm-project/vllm PRs #18566 and #7117; gpustack performance-lab pages for Qwen3 on H100; Red Hat's
MLPerf Inference v5.1 post; QwenLM/Qwen3 issue #244).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

GiB = 1024 ** 3
OVERHEAD_BYTES = 3 * GiB  # activations, CUDA graphs, the sampler (ours, assumed; vLLM profiles it at start-up)
MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs


@dataclass(frozen=True)
class ModelShape:
    """What the throughput model needs of a model, from its config.json (``source``)."""

    params: float  # parameters, for weights (bf16: 2 bytes each) and prefill FLOPs
    layers: int
    kv_heads: int
    head_dim: int
    source: str
    #: layers whose KV grows with the sequence (Gemma 3: 1 in 6 is global, the others keep a 1,024-token window);
    #: None: every layer. The low end of the range counts every layer (a KV cache without sliding-window savings).
    global_layers: int | None = None

    @property
    def weight_bytes(self) -> float:
        return self.params * 2

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * self.kv_heads * self.head_dim * 2 * 2

    def kv_bytes_effective(self, sliding_savings: bool) -> float:
        layers = self.global_layers if (sliding_savings and self.global_layers) else self.layers
        return layers * self.kv_heads * self.head_dim * 2 * 2


_HF = "https://huggingface.co/{}/blob/main/config.json"
#: Model shapes by Hugging Face id (lower case).
MODELS: dict[str, ModelShape] = {
    "qwen/qwen2.5-7b-instruct": ModelShape(
        7.62e9, 28, 4, 128, _HF.format("Qwen/Qwen2.5-7B-Instruct") + ": num_hidden_layers 28, num_key_value_heads 4, "
        "hidden_size 3584 / num_attention_heads 28 = head_dim 128; 7.62B parameters (model card)"),
    "qwen/qwen3-8b": ModelShape(
        8.19e9, 36, 8, 128,
        _HF.format("Qwen/Qwen3-8B") + ": num_hidden_layers 36, num_key_value_heads 8, head_dim 128; "
        "8.2B parameters (model card)"),
    "google/gemma-3-4b-it": ModelShape(
        4.3e9, 34, 4, 256, _HF.format("google/gemma-3-4b-it") + ": text_config num_hidden_layers 34, "
        "num_key_value_heads 4, head_dim 256, sliding_window 1024 on 5 of every 6 layers; 4.3B parameters with the "
        "vision tower (model card)", global_layers=6),
    "qwen/qwen3-4b-instruct-2507": ModelShape(
        4.02e9, 36, 8, 128, _HF.format("Qwen/Qwen3-4B-Instruct-2507") + ": num_hidden_layers 36, "
        "num_key_value_heads 8, head_dim 128; 4.0B parameters (model card); non-thinking"),
}


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: float
    bandwidth: float  # bytes/s
    bf16_flops: float  # dense peak
    source: str


#: GPU kinds by name.
GPUS: dict[str, GPU] = {
    "H100": GPU("H100 SXM 80GB", 80e9, 3.35e12, 989e12,
                "NVIDIA H100 datasheet: 80 GB HBM3, 3.35 TB/s, 989 TFLOPS bf16 dense"),
    "A100-80GB": GPU("A100 SXM 80GB", 80e9, 2.039e12, 312e12, "NVIDIA A100 datasheet: 80 GB HBM2e, 2,039 GB/s, "
                     "312 TFLOPS bf16 dense"),
    "L40S": GPU("L40S 48GB", 48e9, 0.864e12, 362e12, "NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, 362 TFLOPS bf16 "
                "dense (with sparsity 733)"),
}
#: (bandwidth efficiency, MFU, prefix-cache hit share) at the low and the high end of the range.
LOW = (0.5, 0.4, 0.0)
HIGH = (0.8, 0.6, 0.5)


def shape_of(model: str | None) -> ModelShape | None:
    return MODELS.get((model or "").lower())


@dataclass(frozen=True)
class Workload:
    """What the rehearsal sent a model, per request on average."""

    mean_prompt: float
    mean_completion: float
    in_flight: int = 192  # the grid's window: 64 questions x 3 agents


def kv_capacity_tokens(shape: ModelShape, gpu: GPU, utilization: float, *, sliding_savings: bool = False) -> float:
    """KV-cache tokens one GPU holds at ``utilization`` (module docstring); <= 0: the weights do not fit."""
    free = utilization * gpu.memory_bytes - shape.weight_bytes - OVERHEAD_BYTES
    return free / shape.kv_bytes_effective(sliding_savings)


def tokens_per_second(shape: ModelShape, gpu: GPU, utilization: float, work: Workload,
                      knobs: tuple[float, float, float]) -> float:
    """Generated tokens per second of one GPU under ``knobs`` = (bandwidth efficiency, MFU, prefix hit)."""
    efficiency, mfu, hit = knobs
    sliding = hit > 0  # the high end: prefix hits and Gemma 3's sliding-window savings
    kv = shape.kv_bytes_effective(sliding)
    resident = work.mean_prompt + work.mean_completion / 2
    capacity = kv_capacity_tokens(shape, gpu, utilization, sliding_savings=sliding)
    if capacity <= 0:
        return 0.0
    batch = max(1.0, min(capacity / resident, MAX_NUM_SEQS, work.in_flight))
    step = (shape.weight_bytes + batch * resident * kv) / (gpu.bandwidth * efficiency)
    decode = batch / step
    prompt_ratio = work.mean_prompt / max(work.mean_completion, 1.0)
    prefill = prompt_ratio * (1 - hit) * 2 * shape.params / (gpu.bf16_flops * mfu)
    return 1.0 / (1.0 / decode + prefill)


def rate_range(model: str | None, gpu: str, utilization: float, work: Workload) -> tuple[float, float] | None:
    """(low, high) generated tokens/s of ``model`` on one ``gpu`` (a key of :data:`GPUS`); None for an unknown model."""
    shape = shape_of(model)
    if shape is None:
        return None
    card = GPUS[gpu]
    return tokens_per_second(shape, card, utilization, work,
                             LOW), tokens_per_second(shape, card, utilization, work, HIGH)


def sources(models: Mapping[str, str]) -> list[str]:
    """The lines that say where the numbers come from: each model's shape, each GPU's datasheet, the knobs."""
    lines = [f"{label}: {shape_of(model).source}; KV {shape_of(model).kv_bytes_per_token / 1024:.0f} KiB/token (bf16)"
             for label, model in models.items() if shape_of(model)]
    lines += [f"{key}: {gpu.source}" for key, gpu in GPUS.items()]
    lines.append(f"range: low = bandwidth efficiency {LOW[0]}, MFU {LOW[1]}, no prefix-cache hits; high = {HIGH[0]}, "
                 f"{HIGH[1]}, {HIGH[2]:.0%} of prompt tokens hit (and Gemma 3's sliding-window KV savings); "
                 f"{OVERHEAD_BYTES / GiB:.0f} GiB of activations; at most {MAX_NUM_SEQS} sequences (ours, assumed)")
    return lines
