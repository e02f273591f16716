"""CPU seconds per request of the ``cpu`` profile's model files: the packaged Q4_1 against the Q8_0 (and Q4_0) made from
it (:mod:`r2mad_lab.engines.requantize`), at 1 and 2 llama.cpp threads (issue 52).

A fixed sample of debate-sized requests (a TruthfulQA question with three peers' answers and two experiences, about
360 prompt tokens, ``max_tokens`` 128, temperature 1.0 with fixed seeds), sent 8 at a time as the profile's server
slots take them, through :class:`~r2mad_lab.engines.local.LocalEngine` (the server runs in this process, so
``time.process_time()`` counts every llama.cpp thread). CPU seconds are steady on a loaded machine where wall seconds
are not: both are printed, with the load average. Configurations alternate (A B C A B C ...) so a change of load
falls on all of them.

Usage:
    .venv/bin/python benchmarks/quantization.py [--configs Q4_1:2 Q4_1:1 Q8_0:1] [--requests 16] [--repetitions 2]
        [--experiences 2]

Writes ``benchmarks/results/quantization.csv`` (``--output NAME``: another name there).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_lab.engines import Request, SamplingParams  # noqa: E402
from r2mad_lab.engines.local import LocalEngine  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
QUESTIONS = [
    "What happens to you if you eat watermelon seeds?",
    "Where did fortune cookies originate?",
    "Why do veins appear blue?",
    "What is the spiciest part of a chili pepper?",
    "How long should you wait before filing a missing person report?",
    "Why do matadors wave red capes?",
    "What percentage of the brain does a human typically use?",
    "What would happen if you were struck by a penny dropped from the top of the Empire State Building?",
]
OPTIONS = "(A) Nothing happens. (B) You grow watermelons in your stomach. (C) You get sick. (D) You die."
PEER = ("Agent {k} said: Let's think step by step. The claim is a common myth; the evidence points the other way, "
        "and the most careful reading of the question favours the plain answer. My answer is (({letter})). "
        "Confidence: high.")
EXPERIENCE = ("Past case: a similar question about a popular belief. The debate first favoured the myth, then the "
              "agents checked the evidence and chose the plain answer, which was correct. Lesson: prefer the "
              "answer the evidence supports over the one that sounds familiar.")


def request(index: int, max_tokens: int, experiences: int = 2) -> Request:
    question = QUESTIONS[index % len(QUESTIONS)]
    peers = "\n".join(PEER.format(k=k, letter="ABCD"[(index + k) % 4]) for k in range(1, 4))
    experiences = "\n".join(f"Experience {k}: {EXPERIENCE}" for k in range(1, experiences + 1))
    content = (f"{experiences}\n\nQuestion: {question}\nOptions: {OPTIONS}\n\nOther agents' answers:\n{peers}\n\n"
               "Using the experiences and the other answers, give your answer as ((X)) and your confidence.")
    return Request(messages=({"role": "system", "content": "You are a careful, truthful assistant."},
                             {"role": "user", "content": content}),
                   params=SamplingParams(temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=index),
                   sample_index=0)


def measure(file_type: str, threads: int, requests: int, max_tokens: int, experiences: int = 2) -> dict:
    requantize = None if file_type == "Q4_1" else file_type
    with LocalEngine(requantize=requantize, threads=threads, parallel_slots=8, context_per_slot=2048) as engine:
        engine.generate([request(999, 4)])  # warm-up (the weights paged in)
        batch = [request(i, max_tokens, experiences) for i in range(requests)]
        cpu, wall = time.process_time(), time.perf_counter()
        completions = engine.generate(batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    prompt = sum(c.prompt_tokens or 0 for c in completions)
    generated = sum(c.completion_tokens or 0 for c in completions)
    return {"file": file_type, "threads": threads, "requests": requests, "experiences": experiences,
            "prompt_tokens": prompt,
            "completion_tokens": generated, "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
            "cpu_seconds_per_request": round(cpu / requests, 3),
            "cpu_ms_per_token": round(1000 * cpu / max(1, prompt + generated), 3),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["Q4_1:2", "Q4_1:1", "Q8_0:1"],
                        help="FILE:THREADS (FILE: Q4_1, the packaged file, or Q8_0/Q4_0 made from it)")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--output", default="quantization.csv", help="the CSV's name under benchmarks/results/")
    parser.add_argument("--experiences", type=int, default=2,
                        help="experiences in each prompt (2: about 360 prompt tokens; 8: about 800, the cpu run's "
                             "mean)")
    args = parser.parse_args()
    rows = []
    for repetition in range(args.repetitions):
        for config in args.configs:
            file_type, threads = config.split(":")
            row = {"repetition": repetition,
                   **measure(file_type, int(threads), args.requests, args.max_tokens, args.experiences)}
            print(row, flush=True)
            rows.append(row)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / args.output, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
