"""Answer checking speed: extract_answer and is_correct on MATH500 and multiple choice.

Usage:
    .venv/bin/python benchmarks/answer_checking.py [--pairs 300]   # the packaged data; R2MAD_DATA_DIR=DIR for yours

Measures, per call: extraction from the 500 MATH500 reference solutions; is_correct on
(a) a matching answer in the same form (normal-form fast path), (b) a matching answer in another form
(``\\frac{a}{b}`` gold vs decimal prediction: math-verify), (c) a wrong answer (math-verify, no
match), each cold (empty memo) and warm (memoised), in the main thread and in a worker thread.
Writes ``benchmarks/results/answer_checking.csv``.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_core.data import benchmarks  # noqa: E402

from r2mad_core.data import answers

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
    return {"case": label, "thread": "worker" if in_thread else "main", "calls": len(calls), "ms_per_call": 1000 * seconds / len(calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args()
    samples = benchmarks.load("math500", "all")
    rows: list[dict[str, object]] = []
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

    golds = [s.gold for s in samples][: args.pairs]
    same_form = list(zip(extracted[: args.pairs], golds))
    fractions = [(g, m) for g in golds if (m := re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", g))]
    other_form = [(f"{float(Fraction(int(m.group(1)), int(m.group(2)))):.6f}", g) for g, m in fractions]
    wrong = list(zip(golds[1:], golds[:-1]))
    for in_thread in (False, True):
        for label, calls in (("match, same form", same_form), ("match, other form (frac vs decimal)", other_form),
                             ("no match (another problem's answer)", wrong)):
            answers.clear_caches()
            rows.append(_timed(f"is_correct cold: {label}", calls, in_thread))
            rows.append(_timed(f"is_correct warm: {label}", calls, in_thread))

    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "answer_checking.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["case", "thread", "calls", "ms_per_call"])
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(f"{row['case']:<55} {row['thread']:<7} n={row['calls']:<5} {row['ms_per_call']:8.3f} ms/call")


if __name__ == "__main__":
    main()
