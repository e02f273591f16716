"""Batching: one debate round (4 questions x 3 agents, the paper's round-0 prompts) on the local
engine, submitted as one batch versus one request at a time. Prints aggregate tokens/s.

Usage:
    .venv/bin/python benchmarks/batching.py [--threads 1 2] [--max-tokens 96] [--slots 4 12]

Each mode runs the same 12 requests (same seeds). "sequential" sends them one at a time (one
generate call per request); "batch, S slots" sends all 12 in one generate call to a server with S
parallel slots (continuous batching). Writes ``benchmarks/results/batching.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_core.debate import prompts  # noqa: E402
from r2mad_lab.engines import Request, SamplingParams  # noqa: E402
from r2mad_lab.engines.local import LocalEngine, available_cores  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BENCHMARK = "mmlu_pro_economics"
QUESTIONS = [
    "If the price of a good rises and the quantity demanded falls by a larger percentage, demand is\n"
    "A. perfectly inelastic\nB. inelastic\nC. unit elastic\nD. elastic",
    "A tax on a good whose supply is perfectly inelastic is borne\n"
    "A. entirely by buyers\nB. entirely by sellers\nC. equally by both\nD. by the government",
    "In the short run, a perfectly competitive firm shuts down when price falls below\n"
    "A. average total cost\nB. marginal cost\nC. average variable cost\nD. average fixed cost",
    "An increase in the money supply, other things equal, tends in the short run to\n"
    "A. raise interest rates\nB. lower interest rates\nC. leave interest rates unchanged\nD. lower output",
]


def round_requests(max_tokens: int, agents: int = 3) -> list[Request]:
    return [
        Request(
            messages=(
                {"role": "system", "content": prompts.system_prompt(BENCHMARK, agent)},
                {"role": "user", "content": prompts.task_prompt(BENCHMARK, question)},
            ),
            params=SamplingParams(temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=0),
            sample_index=agent,
        )
        for question in QUESTIONS
        for agent in range(agents)
    ]


def run_once(slots: int | None, requests: list[Request], threads: int) -> tuple[int, int, float]:
    """Start a server, warm it up, run the round; ``slots=None`` means one request at a time."""
    with LocalEngine(threads=threads, parallel_slots=slots or 1, context_per_slot=1024) as engine:
        engine.generate([requests[0]])  # warm-up
        started = time.perf_counter()
        if slots is None:
            out = [engine.generate([r])[0] for r in requests]
        else:
            out = engine.generate(requests)
        seconds = time.perf_counter() - started
    return sum(c.prompt_tokens for c in out), sum(c.completion_tokens for c in out), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, available_cores()],
                        help="llama.cpp thread counts to measure (default: 1 and all cores)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--slots", type=int, nargs="+", default=[4, 12])
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args()
    requests = round_requests(args.max_tokens)
    threads_list = list(dict.fromkeys(args.threads))
    modes = [(threads, slots) for threads in threads_list for slots in (None, *args.slots)]
    runs: dict[tuple[int, int | None], list[tuple[int, int, float]]] = {m: [] for m in modes}
    loads = []
    for repetition in range(args.repetitions):  # interleaved, so load changes hit every mode
        for mode in modes:
            threads, slots = mode
            runs[mode].append(run_once(slots, requests, threads))
            loads.append(os.getloadavg()[0])
            prompt, completion, seconds = runs[mode][-1]
            label = "sequential" if slots is None else f"batch, {slots} slots"
            print(f"  rep {repetition}, {threads} threads, {label}: {completion / seconds:.1f} completion tokens/s, "
                  f"{seconds:.1f} s (load {loads[-1]:.2f})", flush=True)
    rows = []
    for mode in modes:
        threads, slots = mode
        prompt = sum(r[0] for r in runs[mode])
        completion = sum(r[1] for r in runs[mode])
        seconds = sum(r[2] for r in runs[mode])
        rows.append(
            {
                "mode": "sequential" if slots is None else "batch",
                "slots": slots or 1,
                "threads": threads,
                "requests": len(requests) * len(runs[mode]),
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "seconds_per_round": round(seconds / len(runs[mode]), 2),
                "completion_tokens_per_second": round(completion / seconds, 1),
                "all_tokens_per_second": round((prompt + completion) / seconds, 1),
                "min_rep_completion_tokens_per_second": round(min(r[1] / r[2] for r in runs[mode]), 1),
                "max_rep_completion_tokens_per_second": round(max(r[1] / r[2] for r in runs[mode]), 1),
            }
        )
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    print(f"one debate round: {len(QUESTIONS)} questions x 3 agents, {args.max_tokens} new tokens max, "
          f"{args.repetitions} repetitions, "
          f"load average (1 min) {min(loads):.2f}..{max(loads):.2f} on {available_cores()} cores")
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=False)))
    for row in rows:
        print("  ".join(str(row[c]).rjust(w) for c, w in zip(columns, widths, strict=False)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "batching.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
