"""Answer checking speed: extract_answer and is_correct on MATH500 and multiple choice.

Usage:
    .venv/bin/python benchmarks/answer_checking.py [--pairs 300]   # the packaged data; R2MAD_DATA_DIR=DIR for yours

Measures, per call: extraction from the 500 MATH500 reference solutions; is_correct on
(a) a matching answer in the same form (normal-form fast path), (b) a matching answer in another form
(``\\frac{a}{b}`` gold vs decimal prediction: math-verify), (c) a wrong answer (math-verify, no
match), each cold (empty memo) and warm (memoised), in the main thread and in a worker thread.
Writes ``benchmarks/results/answer_checking.csv``.

The deadline's own cost (issue 58), with the load average printed beside: each symbolic parse and comparison goes to
the worker process and back (r2mad_core.data.deadline). ``--deadline-only`` measures only that
(``benchmarks/results/answer_checking_deadline.csv``); ``--thread-deadline FILE`` measures the same calls through
another ``with_deadline`` as well, e.g. the verifier thread before issue 58 (``git show
dc0c295:r2mad_core/data/deadline.py > /tmp/thread_deadline.py``): per call, the caller's wall and CPU time and the
worker process's CPU time (from /proc; 0 for a thread, which the caller's CPU time includes).
"""

from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_core.data import (
    answers,
    benchmarks,  # noqa: E402
)

RESULTS = Path(__file__).resolve().parent / "results"


def _timed(label: str, calls: list[tuple[str, str]], in_thread: bool) -> dict[str, object]:
    def run() -> float:
        start = time.perf_counter()
        for predicted, gold in calls:
            answers.is_correct(predicted, gold, "math500")
        return time.perf_counter() - start

    if in_thread:
        with ThreadPoolExecutor(max_workers=1) as pool:
            seconds = pool.submit(run).result()
    else:
        seconds = run()
    return {"case": label, "thread": "worker" if in_thread else "main", "calls": len(calls),
            "ms_per_call": 1000 * seconds / len(calls)}


def _process_cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc; 0 without one)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _deadline_rows(label: str, with_deadline, calls: list[tuple[str, str]], repeats: int) -> list[dict[str, object]]:
    """Per call through ``with_deadline``: a trivial job, and answers' own parse + compare jobs (cold: the worker's
    parses too, as in a fresh process; warm: parsed already, the comparison again)."""
    from r2mad_core.data import deadline

    def measure(case: str, jobs: list) -> dict[str, object]:
        worker = deadline._WORKER.processes()[1] if label == "worker process" else None
        wall, cpu, child = time.perf_counter(), time.process_time(), _process_cpu_seconds(worker)
        for job in jobs:
            with_deadline(job, answers.SYMBOLIC_TIMEOUT_SECONDS, None)
        n = len(jobs)
        return {"case": f"deadline, {case}", "thread": label, "calls": n,
                "ms_per_call": 1000 * (time.perf_counter() - wall) / n,
                "caller_cpu_ms_per_call": 1000 * (time.process_time() - cpu) / n,
                "worker_cpu_ms_per_call": 1000 * (_process_cpu_seconds(worker) - child) / n,
                "load_1min": round(os.getloadavg()[0], 2)}

    with_deadline(functools.partial(int, "1"), 5, None)  # started (the worker's imports are not a call's cost)
    if label != "worker process":
        answers.warm_worker()  # what the worker's zygote loads before it forks, loaded here too
    answers._parsed_here.cache_clear()
    trivial = [functools.partial(int, "7")] * repeats
    parses = [functools.partial(answers._parses_in_worker, clean) for pair in calls
              for clean in map(answers.clean_math_answer, pair)]
    compares = [functools.partial(answers._verify_in_worker, *map(answers.clean_math_answer, (gold, predicted)))
                for predicted, gold in calls]
    return [measure("trivial job", trivial), measure("parse, cold", parses), measure("parse + compare, warm", compares)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--thread-deadline", type=Path, default=None,
                        help="another deadline module (e.g. the verifier thread before issue 58) to measure beside")
    parser.add_argument("--deadline-only", action="store_true", help="only the deadline's cost per call")
    args = parser.parse_args()
    samples = benchmarks.load("math500", "all")
    rows: list[dict[str, object]] = []
    golds = [s.gold for s in samples][: args.pairs]
    fractions = [(g, m) for g in golds if (m := re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", g))]
    other_form = [(f"{float(Fraction(int(m.group(1)), int(m.group(2)))):.6f}", g) for g, m in fractions]
    from r2mad_core.data import deadline

    rows += _deadline_rows("worker process", deadline.with_deadline, other_form, 2000)
    if args.thread_deadline is not None:
        spec = importlib.util.spec_from_file_location("thread_deadline", args.thread_deadline)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        rows += _deadline_rows(f"thread ({args.thread_deadline.name})", module.with_deadline, other_form, 2000)
    if args.deadline_only:
        _write(rows, "answer_checking_deadline.csv")
        return
    start = time.perf_counter()
    answers.is_correct("0.75", "\\frac{3}{4}", "math500")  # loads math-verify, sympy and the LaTeX grammar
    rows.append({"case": "first symbolic is_correct (imports)", "thread": "main", "calls": 1,
                 "ms_per_call": 1000 * (time.perf_counter() - start)})

    start = time.perf_counter()
    extracted = [answers.extract_answer(s.metadata["solution"], "math500") for s in samples]
    rows.append({"case": "extract_answer (MATH500 solution)", "thread": "main", "calls": len(samples),
                 "ms_per_call": 1000 * (time.perf_counter() - start) / len(samples)})
    text = "Reasoning... " * 200 + "so the answer is ((C)). On reflection ((D))."
    start = time.perf_counter()
    for _ in range(1000):
        answers.extract_answer(text, "mmlu_pro_economics", 10)
    rows.append({"case": "extract_answer (choice, 2.6 kB text)", "thread": "main", "calls": 1000,
                 "ms_per_call": (time.perf_counter() - start)})

    same_form = list(zip(extracted[: args.pairs], golds, strict=False))
    wrong = list(zip(golds[1:], golds[:-1], strict=False))
    for in_thread in (False, True):
        for label, calls in (("match, same form", same_form), ("match, other form (frac vs decimal)", other_form),
                             ("no match (another problem's answer)", wrong)):
            answers.clear_caches()
            rows.append(_timed(f"is_correct cold: {label}", calls, in_thread))
            rows.append(_timed(f"is_correct warm: {label}", calls, in_thread))

    _write(rows, "answer_checking.csv")


def _write(rows: list[dict[str, object]], name: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    fields = ["case", "thread", "calls", "ms_per_call", "caller_cpu_ms_per_call", "worker_cpu_ms_per_call", "load_1min"]
    with (RESULTS / name).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore", restval="")
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        extra = "".join(f" {key}={row[key]}" for key in fields[4:] if key in row)
        print(f"{row['case']:<55} {row['thread']:<14} n={row['calls']:<5} {row['ms_per_call']:8.3f} ms/call{extra}")


if __name__ == "__main__":
    main()
