"""The pre-flight estimate of the paper profile (issue 22, section 5): every cell the notebooks run, built by the
real debate code on a sample of questions, counted by an estimating engine, scaled to the full splits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from r2mad_core.data.benchmarks import load
from r2mad_core.engines.base import Request, SamplingParams
from r2mad_core.reproduce import estimate as est
from r2mad_core.reproduce import load_profile

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_the_plan_has_every_grid_call_of_every_notebook() -> None:
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        source = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        calls = len(re.findall(r"\bexp\.grid\(", source))
        steps = [s for s in est.NOTEBOOK_PLAN.get(path.stem, []) if s[0] != "memory"]
        assert calls == len(steps), f"{path.name}: {calls} exp.grid calls, {len(steps)} in NOTEBOOK_PLAN"
        if "exp.memory(" in source:
            assert est.NOTEBOOK_PLAN[path.stem][0][0] == "memory", path.name


def ask(text: str, max_tokens: int = 50) -> Request:
    return Request(messages=({"role": "user", "content": text},), params=SamplingParams(max_tokens=max_tokens))


def test_the_estimating_engine_counts_overflows_caps_and_loops() -> None:
    engine = est.EstimatingEngine("m", context=100, lengths=est.LengthModel(loop=0.0))
    [over] = engine.generate([ask("x" * 400)])  # 100 + 4 tokens >= 100
    assert (over.cut, over.prompt_tokens, over.completion_tokens, engine.overflows) == ("context_overflow", 104, 0, 1)
    [capped] = engine.generate([ask("x" * 320, max_tokens=90)])  # 84 prompt tokens: the context caps the output at 16
    assert (capped.cut, capped.completion_tokens, engine.capped) == ("context_capped", 16, 1)
    loops = est.EstimatingEngine("m", lengths=est.LengthModel(loop=1.0))
    [loop] = loops.generate([ask("question?")])
    assert (loop.cut, loop.completion_tokens, loop.text.split().count("tok")) == ("max_tokens", 50, 50)
    thinker = est.EstimatingEngine("Qwen/Qwen3-8B", lengths=est.LengthModel(loop=1.0, thinking=True))
    [think] = thinker.generate([ask("question?")])
    assert (think.text, think.unclosed_thinking, think.completion_tokens) == ("", True, 50)
    assert est.LengthModel.for_model("Qwen/Qwen3-8B").thinking and not est.LengthModel.for_model("google/gemma-3-4b-it").thinking


def test_the_paper_profile_estimate_scales_each_split_and_prints_one_gpu_figure() -> None:
    fields = dict(load_profile("paper").fields)
    one = "truthfulqa"
    fields.update(benchmarks=[one], retrieval_benchmarks=[one], icl_benchmarks=[one], poison_benchmarks=[one],
                  cost_benchmark=one, large_models=[], retrieval_policies=["random", "state_aware"],
                  poison_fractions=[0.5], sc_paths=[3])
    estimate = est.estimate_profile(fields, test_sample=2, train_sample=2)
    assert list(estimate.per_notebook) == list(est.NOTEBOOK_PLAN)
    assert estimate.per_notebook["07_cost"].requests == 0  # SC, MAD and R2-MAD ran in notebook 03 already
    # memory: every train question of the split, 3 agents x 3 forced rounds + a summary after each round, once: the
    # paper profile's one memory model (Qwen3-4B-Instruct-2507, as the authors) builds the bank every model reads
    train = len(load(one, "train"))
    per_debate = estimate.per_notebook["02_memory"].requests / train
    assert per_debate == pytest.approx(12)
    assert estimate.per_model["Qwen3-4B-Instruct-2507"].requests == pytest.approx(estimate.per_notebook["02_memory"].requests)
    assert estimate.gpu_hours == pytest.approx(estimate.gpu_tokens / est.TOKENS_PER_S / 3600)
    lines = est.estimate_lines(estimate)
    assert isinstance(lines, list) and all(isinstance(line, str) for line in lines)
    [gpu] = [line for line in lines if "GPU-hours" in line]
    assert f"{estimate.gpu_hours:,.1f} GPU-hours" in gpu and "3,754 tokens/s" in gpu
    assert any(line.startswith("  Qwen3-8B (GPU, context 40,960)") for line in lines)
