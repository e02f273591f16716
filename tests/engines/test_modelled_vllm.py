"""benchmarks/fake_vllm.py, the modelled vLLM server of the request-path benchmark (issue 62): its batch limit, its
queue and its 429 beyond them, and the throughput it is saturated at. No timing is asserted."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _fake_vllm():
    spec = importlib.util.spec_from_file_location("bench_fake_vllm", BENCHMARKS / "fake_vllm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_request_beyond_the_batch_and_the_queue_is_refused_and_the_others_all_finish() -> None:
    fake = _fake_vllm()
    model = fake.Model(max_num_seqs=2, queue=1, ttft=0.0, tokens=4, tokens_per_second=1e6,
                       max_tokens_per_second_per_seq=1e6)

    async def scenario() -> tuple[list[bool], int, int]:
        server = fake.ModelledServer(model)
        outcomes = await asyncio.gather(*(server.generate() for _ in range(5)))
        return list(outcomes), server.most_running, server.completed

    outcomes, most_running, completed = asyncio.run(scenario())
    assert outcomes == [True, True, True, False, False]  # 2 run, 1 waits in the queue, 2 are refused (HTTP 429)
    assert most_running == 2 and completed == 3


def test_the_default_server_is_saturated_at_25_requests_a_second_from_32_decoding() -> None:
    model = _fake_vllm().Model()
    assert model.capacity == 25.0
    assert model.tokens_per_second / model.max_tokens_per_second_per_seq == 32
    assert model.max_num_seqs >= 32
