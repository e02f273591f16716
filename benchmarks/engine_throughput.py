"""Engine throughput: the local backend's aggregate tokens/s at 1, 2, 4 and 8 concurrent requests,
and the response cache's lookup cost per request for 10^3 .. 10^4 stored entries.

Usage:
    .venv/bin/python benchmarks/engine_throughput.py [--threads 1 2] [--max-tokens 96] [--repetitions 2]

Prints two tables and writes ``benchmarks/results/engine_throughput.csv`` and
``benchmarks/results/cache_lookup.csv``. The machine's load average is printed with the numbers:
on a shared machine the local server's speed depends on what else runs.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_core.engine import Completion  # noqa: E402
from r2mad_lab.engines import CachedEngine, Ledger, Request, ResponseCache, SamplingParams  # noqa: E402
from r2mad_lab.engines.local import LocalEngine, available_cores  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOPICS = ["rivers", "markets", "bridges", "volcanoes", "libraries", "trains", "forests", "harbours"]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def story_request(topic: str, *, max_tokens: int, seed: int, sample_index: int) -> Request:
    return Request(
        messages=(
            {"role": "system", "content": "You are a helpful assistant who writes at length."},
            {"role": "user", "content": f"Write a long, detailed essay about {topic}. Do not stop early."},
        ),
        params=SamplingParams(temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=seed),
        sample_index=sample_index,
    )


def local_throughput(threads: int, max_tokens: int, repetitions: int, levels: list[int]) -> list[dict]:
    rows = []
    with LocalEngine(threads=threads, parallel_slots=max(levels), context_per_slot=512) as engine:
        engine.generate([story_request("warm-up", max_tokens=8, seed=0, sample_index=0)])
        for concurrency in levels:
            tokens = 0
            seconds = 0.0
            requests = 0
            rates = []
            for repetition in range(repetitions):
                batch = [
                    story_request(TOPICS[i % len(TOPICS)], max_tokens=max_tokens, seed=repetition, sample_index=i)
                    for i in range(concurrency)
                ]
                started = time.perf_counter()
                out = engine.generate(batch)
                elapsed = time.perf_counter() - started
                seconds += elapsed
                tokens += sum(c.completion_tokens for c in out)
                rates.append(sum(c.completion_tokens for c in out) / elapsed)
                requests += len(out)
            rows.append(
                {
                    "concurrency": concurrency,
                    "threads": threads,
                    "requests": requests,
                    "completion_tokens": tokens,
                    "seconds": round(seconds, 2),
                    "tokens_per_second": round(tokens / seconds, 1),
                    "min_rep_tokens_per_second": round(min(rates), 1),
                    "max_rep_tokens_per_second": round(max(rates), 1),
                    "mean_tokens_per_request": round(tokens / requests, 1),
                    "load_average": load(),
                }
            )
            print(f"  concurrency {concurrency}: {rows[-1]['tokens_per_second']} tokens/s (load {load()})", flush=True)
    return rows


class NeverCalled:
    identity = "bench"
    model = "bench-model"

    def __init__(self) -> None:
        self.ledger = Ledger()

    def generate(self, requests):
        raise AssertionError("all lookups must be hits")

    def close(self) -> None:
        pass


def cache_lookup(sizes: list[int], probe: int = 200, rounds: int = 5) -> list[dict]:
    rows = []
    rng = random.Random(0)
    filler = "The answer is ((B)) because " + "supply and demand " * 60  # ~1.1 kB, a typical reply
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            cache = ResponseCache(tmp)
            requests = []
            for i in range(size):
                request = Request(
                    messages=(
                        {"role": "system", "content": "You are an economist."},
                        {"role": "user", "content": f"Question {i}: " + "context " * 200},
                    ),
                    params=SamplingParams(max_tokens=6144, seed=1),
                    sample_index=i % 3,
                )
                requests.append(request)
                cache.put(request.key("bench", "bench-model"), Completion(text=filler, prompt_tokens=300,
                          completion_tokens=250), identity="bench", model="bench-model", tag="debate")
            cache.close()
            engine = CachedEngine(NeverCalled(), tmp)
            hit_seconds = 0.0
            get_seconds = 0.0
            key_seconds = 0.0
            for _ in range(rounds):
                sample = rng.sample(requests, probe)
                started = time.perf_counter()
                engine.generate(sample)
                hit_seconds += time.perf_counter() - started
                started = time.perf_counter()
                keys = [r.key("bench", "bench-model") for r in sample]
                key_seconds += time.perf_counter() - started
                started = time.perf_counter()
                engine.cache.get_many(keys)
                get_seconds += time.perf_counter() - started
            engine.close()
            per = 1e6 / (probe * rounds)
            rows.append(
                {
                    "entries": size,
                    "batch": probe,
                    "cached_generate_us_per_request": round(hit_seconds * per, 1),
                    "key_hash_us_per_request": round(key_seconds * per, 1),
                    "sqlite_lookup_us_per_request": round(get_seconds * per, 1),
                    "load_average": load(),
                }
            )
            print(f"  {size} entries: {rows[-1]['cached_generate_us_per_request']} us/request", flush=True)
    return rows


def print_table(rows: list[dict]) -> None:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=False)))
    for row in rows:
        print("  ".join(str(row[c]).rjust(w) for c, w in zip(columns, widths, strict=False)))


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, available_cores()],
                        help="llama.cpp thread counts to measure (default: 1 and all cores)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--cache-sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {available_cores()} cores, load average {load()}")
    if not args.skip_local:
        rows = []
        for threads in dict.fromkeys(args.threads):
            print(f"local backend (SmolLM2-135M-Instruct Q4_1, {threads} threads, {args.max_tokens} new tokens):")
            rows += local_throughput(threads, args.max_tokens, args.repetitions, args.levels)
        print_table(rows)
        write_csv(rows, RESULTS / "engine_throughput.csv")
    print("response cache lookups (hits; key hashing + one SQLite query per batch):")
    rows = cache_lookup(args.cache_sizes)
    print_table(rows)
    write_csv(rows, RESULTS / "cache_lookup.csv")


if __name__ == "__main__":
    main()
