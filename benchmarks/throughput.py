"""Throughput of the two debate schedules (issue 17): round barriers vs question by question.

Usage:
    .venv/bin/python benchmarks/throughput.py [--questions 211] [--windows 32 64 128 211] [--quick]
    .venv/bin/python benchmarks/throughput.py --local [--local-questions 4] [--local-repeats 2]   # llama.cpp

Part (a), default: a continuous-batching engine in VIRTUAL time at the paper's settings (Qwen3-8B thinking,
max_tokens 6144 for debate turns and summaries, one A100/H100-class GPU, vLLM-like scheduling) drives the REAL
code: ``experiments.run_cell`` with ``schedule="rounds"`` (chunks of ``--window`` questions) and
``schedule="questions"`` (a window of ``--window`` questions in flight), for MAD and R2-MAD.

- Texts come from the simulated latent-concept agents (``SimulatedAgentParams``, ~300-token visible responses,
  the order of a thinking model's answer after its ``<think>`` block is stripped); prompt tokens are those
  texts' tokens (1.3 per word), so R2-MAD's experiences and peers' responses cost what they would.
- Each request's decode length (thinking + answer) is drawn from a long-tailed distribution, deterministic in
  the request: lognormal, median ``--debate-median`` tokens, sigma ``--sigma``, capped at max_tokens (a capped
  completion is cut, as vLLM would); summaries the same with ``--summary-median``. The parameters are printed.
- The engine: up to ``--max-num-seqs`` sequences run together; every step decodes one token for each running
  sequence and prefills at most ``--max-batched-tokens`` new prompt tokens (chunked prefill, FCFS), with
  automatic prefix caching at message granularity (a prompt's longest message prefix seen before is not
  recomputed). Step time = ``base + per_seq x batch + kv x (context tokens / 1000) + prefill x new tokens``
  (defaults: 8 ms, 0.02 ms, 0.05 ms, 0.04 ms: ~8 ms/step at batch 1, ~35-45 ms at batch 256 with ~2-3K-token
  contexts, ~25K prefill tokens/s). The KV-cache capacity and preemption are not modelled.
- Virtual time advances only when every client thread (the round loop's thread, or every question's thread)
  is waiting on the engine: the client's own work (prompts, answer extraction, the R2-MAD hook) costs no
  virtual time; its real seconds are printed beside. Requests that arrive at the same virtual instant queue in
  the order of a hash of their content (threads arrive in any order); what still varies between runs is which
  of several simultaneous requests pays for a shared prompt prefix: MAD's speed-up at window 64 was 1.497-1.514
  over five runs, R2-MAD's 1.567-1.568.

Printed per method and schedule: virtual wall, generated tokens/s, the idle share of the engine's slots
(1 - time-weighted mean batch / max_num_seqs) and the time with an empty batch; the speed-up of ``questions``
over ``rounds`` (target >= 1.5x for both methods), R2-MAD / MAD wall under each schedule with a breakdown of
R2-MAD's extra engine work (prefill tokens, summary decode), and the paper profile's GPU-hour estimate
recomputed with the modelled throughput (100K generations per model at the modelled mean completion length).

Part (b), ``--local``: the local llama.cpp engine (SmolLM2-135M, 8 slots, the cpu profile's max_tokens 128,
1 thread) on the same few questions, MAD and R2-MAD, both schedules, interleaved runs, response cache off:
real wall time per run and the gain of ``questions``.

Writes ``benchmarks/results/throughput.csv`` (and ``throughput_local.csv`` with ``--local``). The last lines
printed are ``questions/rounds throughput mad: <x>`` and ``questions/rounds throughput r2mad: <x>`` (the
summary of ``run_all.py`` reads them).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from end_to_end import BANK_CACHE, bank_directory, ensure_bank, message_tokens, prefix_keys  # noqa: E402
from r2mad_core import benchmarks as benchmark_data  # noqa: E402
from r2mad_core.engines.base import Completion, Ledger, Request  # noqa: E402
from r2mad_core.engines.simulated import SimulatedAgentParams, SimulatedEngine  # noqa: E402
from r2mad_core.experiments import run_cell  # noqa: E402
from r2mad_core.methods import get_method  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
QUESTION_THREAD = "r2mad-question-"  # r2mad_core.scheduling names each question's thread so
PAPER_GENERATIONS_PER_MODEL = 100_000  # r2mad_core/profiles/paper.yaml's estimate


@dataclass(frozen=True)
class CostModel:
    """The continuous-batching cost model (module docstring); every field is printed."""

    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    step_base_ms: float = 8.0
    step_per_seq_ms: float = 0.02
    step_kv_ms_per_1k: float = 0.05
    prefill_ms_per_token: float = 0.04
    debate_median: float = 1200.0
    summary_median: float = 400.0
    sigma: float = 0.8
    max_tokens: int = 6144

    def step_seconds(self, batch: int, context_tokens: float, prefill_tokens: int) -> float:
        return (self.step_base_ms + self.step_per_seq_ms * batch + self.step_kv_ms_per_1k * context_tokens / 1000.0
                + self.prefill_ms_per_token * prefill_tokens) / 1000.0

    def decode_length(self, request: Request, visible_tokens: int) -> int:
        """Thinking + answer tokens of ``request``: lognormal (deterministic in the request), at least the
        visible answer, at most max_tokens."""
        digest = hashlib.sha256(repr((request.messages, request.sample_index, request.tag)).encode()).digest()
        u = (int.from_bytes(digest[:8], "big") + 0.5) / 2.0 ** 64
        z = math_normal_ppf(u)
        median = self.summary_median if request.tag == "summary" else self.debate_median
        length = int(round(median * math.exp(self.sigma * z)))
        return max(1, min(self.max_tokens, max(length, visible_tokens)))


def math_normal_ppf(u: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(min(max(u, 1e-12), 1 - 1e-12))


@dataclass
class _Sequence:
    call: "_Call"
    prefill_left: int
    decode_left: int
    context: int  # tokens in the KV cache once running (prompt + generated so far)
    tag: str
    key: str = ""  # orders the requests that arrive at the same virtual instant (threads arrive in any order)


@dataclass
class _Call:
    done: threading.Event = field(default_factory=threading.Event)
    left: int = 0


class VirtualBatchingEngine:
    """A continuous-batching engine in virtual time in front of the simulated agents (module docstring)."""

    concurrent_generate = True

    def __init__(self, inner: SimulatedEngine, model: CostModel) -> None:
        self.inner = inner
        self.cost = model
        self.identity = inner.identity
        self.model = inner.model
        self.ledger = Ledger()
        self._cond = threading.Condition()
        self._waiting: list[_Sequence] = []
        self._arrivals: list[_Sequence] = []  # since the last step, sorted by key before they queue
        self._running: list[_Sequence] = []
        self._blocked: set[int] = set()
        self._drivers: set[threading.Thread] = set()
        self._seen_prefixes: set[str] = set()
        self._calls_by_thread: dict[int, _Call] = {}
        self._stop = False
        self.reset()
        self._thread = threading.Thread(target=self._loop, name="virtual-engine", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._cond:
            self.now = 0.0
            self.busy_slot_seconds = 0.0
            self.empty_seconds = 0.0
            self.steps = 0
            self.tokens: dict[str, dict[str, int]] = {}
            self._seen_prefixes.clear()
            self._drivers.clear()
            self.ledger.reset()

    # -- client side ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        completions = self.inner.generate(requests)  # texts now (CPU), their cost in virtual time below
        call = _Call(left=len(requests))
        me = threading.current_thread()
        with self._cond:
            if not me.name.startswith(QUESTION_THREAD):
                self._drivers.add(me)
            for request, completion in zip(requests, completions):
                prefill = self._prefill_tokens(request, completion)
                decode = self.cost.decode_length(request, completion.completion_tokens)
                if decode >= self.cost.max_tokens:
                    completion.finish_reason = "length"
                completion.completion_tokens = decode
                counts = self.tokens.setdefault(request.tag, {"prefill": 0, "decode": 0, "prompt": 0, "requests": 0})
                counts["prefill"] += prefill
                counts["decode"] += decode
                counts["prompt"] += completion.prompt_tokens
                counts["requests"] += 1
                key = hashlib.sha256(repr((request.messages, request.sample_index)).encode()).hexdigest()
                self._arrivals.append(
                    _Sequence(call, prefill, decode, completion.prompt_tokens - prefill, request.tag, key))
                self.ledger.record(request, completion)
            self._calls_by_thread[me.ident] = call
            self._blocked.add(me.ident)
            self._cond.notify_all()
        call.done.wait()
        return completions

    def _prefill_tokens(self, request: Request, completion: Completion) -> int:
        sizes = [message_tokens(m.get("content", "")) for m in request.messages]
        keys = prefix_keys(request.messages)
        cached = 0
        for k in range(len(keys) - 1, -1, -1):
            if keys[k] in self._seen_prefixes:
                cached = k + 1
                break
        self._seen_prefixes.update(keys)
        answered = (*request.messages, {"role": "assistant", "content": completion.text or ""})
        self._seen_prefixes.add(prefix_keys(answered)[-1])
        return max(1, sum(sizes[cached:]))

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    # -- engine side ---------------------------------------------------------------------------
    def _clients(self) -> set[int]:
        alive = {t.ident for t in threading.enumerate() if t.name.startswith(QUESTION_THREAD)}
        alive |= {t.ident for t in self._drivers if t.is_alive()}
        return alive

    def _quiescent(self) -> bool:
        if not (self._waiting or self._running or self._arrivals):
            return False
        return self._clients() <= self._blocked

    def _loop(self) -> None:
        with self._cond:
            while not self._stop:
                if not self._quiescent():
                    self._cond.wait(timeout=0.0003)
                    continue
                self._advance()

    def _advance(self) -> None:
        """Admit waiting sequences, then run steps up to the next completion (cond held)."""
        cost = self.cost
        self._waiting.extend(sorted(self._arrivals, key=lambda s: s.key))
        self._arrivals.clear()
        while self._waiting and len(self._running) < cost.max_num_seqs:
            self._running.append(self._waiting.pop(0))
        batch = len(self._running)
        prefilling = [s for s in self._running if s.prefill_left > 0]
        if prefilling:  # one step: decode the others, prefill up to the budget (FCFS)
            decoding = batch - len(prefilling)
            budget = max(0, cost.max_batched_tokens - decoding)
            spent = 0
            for s in prefilling:
                take = min(s.prefill_left, budget - spent)
                if take <= 0:
                    break
                s.prefill_left -= take
                s.context += take
                spent += take
            context = sum(s.context for s in self._running)
            seconds = cost.step_seconds(batch, context, spent)
            steps = 1
            for s in self._running:
                if s.prefill_left == 0 and s not in prefilling:
                    s.decode_left -= 1
                    s.context += 1
        else:  # k identical decode steps until the next sequence finishes
            steps = min(s.decode_left for s in self._running)
            context = sum(s.context for s in self._running) + batch * (steps - 1) / 2.0
            seconds = steps * cost.step_seconds(batch, context, 0)
            for s in self._running:
                s.decode_left -= steps
                s.context += steps
        self.now += seconds
        self.steps += steps
        self.busy_slot_seconds += seconds * batch
        finished = [s for s in self._running if s.prefill_left == 0 and s.decode_left <= 0]
        if finished:
            self._running = [s for s in self._running if not (s.prefill_left == 0 and s.decode_left <= 0)]
            for s in finished:
                s.call.left -= 1
                if s.call.left == 0:
                    s.call.done.set()
            # the callers whose calls are complete wake up: no longer blocked
            self._blocked = {ident for ident in self._blocked if not self._woken(ident)}

    def _woken(self, ident: int) -> bool:
        call = self._calls_by_thread.get(ident)
        return call is None or call.done.is_set()


# ----------------------------------------------------------------------------------------------
@dataclass
class Result:
    method: str
    schedule: str
    questions: int
    window: int
    virtual_s: float
    real_s: float
    decode_tokens: int
    idle_slot_share: float
    empty_share: float
    tokens: dict[str, dict[str, int]]
    accuracy: float | None
    records_digest: str

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.virtual_s if self.virtual_s else 0.0

    def row(self) -> dict[str, Any]:
        row = {"method": self.method, "schedule": self.schedule, "questions": self.questions, "window": self.window,
               "virtual_wall_s": round(self.virtual_s, 1), "real_s": round(self.real_s, 2),
               "generated_tokens": self.decode_tokens, "tokens_per_s": round(self.tokens_per_s, 1),
               "idle_slot_share": round(self.idle_slot_share, 4), "empty_batch_share": round(self.empty_share, 4),
               "accuracy": self.accuracy, "transcripts_sha256": self.records_digest}
        for tag in ("debate", "summary"):
            counts = self.tokens.get(tag, {})
            row[f"{tag}_prefill_tokens"] = counts.get("prefill", 0)
            row[f"{tag}_decode_tokens"] = counts.get("decode", 0)
        return row


def transcripts_digest(run_dir: Path) -> str:
    """SHA-256 of the transcript file without its wall-time fields (equal under both schedules)."""
    import json

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "seconds"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    lines = (run_dir / "transcripts.jsonl").read_text().splitlines()
    blob = "\n".join(json.dumps(strip(json.loads(line)), sort_keys=True) for line in lines)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def virtual_run(engine: VirtualBatchingEngine, method: Any, samples: list, schedule: str, window: int, work: Path,
                benchmark: str) -> Result:
    engine.reset()
    run_dir = work / f"{method.name}-{schedule}"
    shutil.rmtree(run_dir, ignore_errors=True)
    start = time.perf_counter()
    result = run_cell(run_dir, benchmark=benchmark, split="test", engine=engine, method=method, samples=samples,
                      chunk_size=window, window=window, schedule=schedule, progress=False)
    real = time.perf_counter() - start
    with engine._cond:
        virtual = engine.now
        busy = engine.busy_slot_seconds
        tokens = {k: dict(v) for k, v in engine.tokens.items()}
    decode = sum(v["decode"] for v in tokens.values())
    idle = 1.0 - busy / (virtual * engine.cost.max_num_seqs) if virtual else 0.0
    return Result(method.name, schedule, len(samples), window, virtual, real, decode, idle, 0.0, tokens,
                  result.metrics.get("accuracy"), transcripts_digest(run_dir))


def print_virtual(results: list[Result], cost: CostModel, target_window: int) -> dict[str, float]:
    print(f"\n{'method':7s} {'schedule':10s} {'q':>4s} {'window':>6s} {'virtual wall':>13s} {'tokens/s':>9s} "
          f"{'idle slots':>10s} {'real s':>7s} {'transcripts':>17s}")
    for r in results:
        print(f"{r.method:7s} {r.schedule:10s} {r.questions:4d} {r.window:6d} {r.virtual_s / 60:10.1f} min "
              f"{r.tokens_per_s:9.0f} {100 * r.idle_slot_share:9.1f}% {r.real_s:7.1f} {r.records_digest:>17s}")
    windows = sorted({r.window for r in results})
    gains = {}
    for window in windows:
        by = {(r.method, r.schedule): r for r in results if r.window == window}
        for method in ("mad", "r2mad"):
            rounds, questions = by[(method, "rounds")], by[(method, "questions")]
            gain = questions.tokens_per_s / rounds.tokens_per_s
            if window == target_window:
                gains[method] = gain
            same = "identical" if rounds.records_digest == questions.records_digest else "DIFFERENT"
            print(f"window {window:3d} {method:5s}: questions / rounds throughput {gain:.3f}x (wall "
                  f"{rounds.virtual_s / 60:.1f} -> {questions.virtual_s / 60:.1f} min); transcripts {same}")
    by = {(r.method, r.schedule): r for r in results if r.window == target_window}
    print(f"at window {target_window} (the target's):")
    for schedule in ("rounds", "questions"):
        mad, r2 = by[("mad", schedule)], by[("r2mad", schedule)]
        q = mad.questions
        extra_prefill = (sum(v["prefill"] for v in r2.tokens.values()) - sum(v["prefill"] for v in mad.tokens.values()))
        summary_decode = r2.tokens.get("summary", {}).get("decode", 0)
        extra_debate_decode = r2.tokens.get("debate", {}).get("decode", 0) - mad.tokens.get("debate", {}).get("decode", 0)
        print(f"R2-MAD / MAD wall, {schedule}: {r2.virtual_s / mad.virtual_s:.2f} "
              f"(R2-MAD extra per question: prefill {extra_prefill / q:+.0f} tokens "
              f"[debate {(r2.tokens['debate']['prefill'] - mad.tokens['debate']['prefill']) / q:+.0f}, summary "
              f"{r2.tokens.get('summary', {}).get('prefill', 0) / q:+.0f}], summary decode {summary_decode / q:+.0f}, "
              f"debate decode {extra_debate_decode / q:+.0f} tokens; hook: client CPU, 0 virtual s)")
    results = [r for r in results if r.window == target_window]
    mean_completion = sum(r.decode_tokens for r in results) / sum(
        sum(v["requests"] for v in r.tokens.values()) for r in results)
    total_tokens = PAPER_GENERATIONS_PER_MODEL * mean_completion
    print(f"paper profile, Qwen3-8B part (100K generations x {mean_completion:.0f} modelled tokens each = "
          f"{total_tokens / 1e6:.0f}M tokens):")
    for schedule in ("rounds", "questions"):
        rate = (by[("mad", schedule)].tokens_per_s + by[("r2mad", schedule)].tokens_per_s) / 2
        print(f"  {schedule:9s}: {rate:.0f} tokens/s (mean of MAD and R2-MAD) -> {total_tokens / rate / 3600:.1f} GPU-hours")
    return gains


# ----------------------------------------------------------------------------------------------
def local_runs(args: argparse.Namespace, bank_dir: Path, test: list, work: Path) -> list[dict[str, Any]]:
    from r2mad_core.engines import make_engine

    rows = []
    samples = test[: args.local_questions]
    methods = [get_method("mad", max_tokens=128),
               get_method("r2mad", memory=str(bank_dir), max_tokens=128, summary_max_tokens=128,
                          max_experience_chars=400)]
    with make_engine("local", threads=1, parallel_slots=8, context_per_slot=8192) as engine:
        engine.generate([Request(messages=({"role": "user", "content": "Say hi."},))])  # warm-up
        for repeat in range(args.local_repeats):
            for method in methods:
                for schedule in ("rounds", "questions"):  # interleaved
                    run_dir = work / f"local-{method.name}-{schedule}-{repeat}"
                    start = time.perf_counter()
                    result = run_cell(run_dir, benchmark=args.benchmark, split="test", engine=engine, method=method,
                                      samples=samples, chunk_size=len(samples), window=len(samples),
                                      schedule=schedule, progress=False)
                    wall = time.perf_counter() - start
                    tokens = sum(r["tokens"].get("debate", {}).get("completion_tokens", 0)
                                 + r["tokens"].get("summary", {}).get("completion_tokens", 0) for r in result.records)
                    rows.append({"method": method.name, "schedule": schedule, "repeat": repeat,
                                 "questions": len(samples), "wall_s": round(wall, 2), "completion_tokens": tokens,
                                 "tokens_per_s": round(tokens / wall, 2), "load_average": os.getloadavg()[0]})
                    print(f"  local {method.name:5s} {schedule:9s} run {repeat + 1}: wall {wall:7.1f} s, "
                          f"{tokens} completion tokens, load {os.getloadavg()[0]:.2f}", flush=True)
    print("\nlocal llama.cpp (SmolLM2-135M, 8 slots, 1 thread, max_tokens 128), best of the interleaved runs:")
    for method in ("mad", "r2mad"):
        best = {s: min(r["wall_s"] for r in rows if r["method"] == method and r["schedule"] == s)
                for s in ("rounds", "questions")}
        print(f"local {method}: rounds {best['rounds']:.1f} s, questions {best['questions']:.1f} s, "
              f"gain {best['rounds'] / best['questions']:.2f}x")
    for method in ("mad", "r2mad"):
        best = {s: min(r["wall_s"] for r in rows if r["method"] == method and r["schedule"] == s)
                for s in ("rounds", "questions")}
        print(f"local gain {method}: {best['rounds'] / best['questions']:.2f}")
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mmlu_pro_economics", choices=benchmark_data.BENCHMARKS)
    parser.add_argument("--questions", type=int, default=211,
                        help="test questions per run (default: 211, the whole Economics test split)")
    parser.add_argument("--windows", type=int, nargs="+", default=[32, 64, 128, 211],
                        help="questions in flight, each run under both schedules: the rounds chunk and the questions "
                             "window (default: 32 64 128 211; 32 is run_cell's default chunk, 64 the authors')")
    parser.add_argument("--target-window", type=int, default=64,
                        help="the window whose speed-up is checked against the 1.5x target (default: 64, the "
                             "authors' chunk of 64 questions)")
    cost_defaults = CostModel()
    for name, value in cost_defaults.__dict__.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value,
                            help=f"cost model (default: {value})")
    parser.add_argument("--quick", action="store_true", help="96 questions, window 32")
    parser.add_argument("--local", action="store_true", help="run part (b) too: the local llama.cpp engine")
    parser.add_argument("--local-only", action="store_true", help="run part (b) only")
    parser.add_argument("--local-questions", type=int, default=4)
    parser.add_argument("--local-repeats", type=int, default=2)
    parser.add_argument("--csv", type=Path, default=RESULTS / "throughput.csv")
    parser.add_argument("--bank-questions", type=int, default=120, help="train questions of the memory bank")
    parser.add_argument("--bank-cache", type=Path, default=BANK_CACHE, help="where the bank is built and reused")
    args = parser.parse_args(argv)
    if args.quick:
        args.questions, args.windows, args.target_window = min(args.questions, 96), [32], 32
    args.windows = sorted({min(w, args.questions) for w in args.windows})
    if min(args.target_window, args.questions) not in args.windows:
        args.windows = sorted({*args.windows, min(args.target_window, args.questions)})
    cost = CostModel(**{name: getattr(args, name) for name in cost_defaults.__dict__})
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    data_dir = os.environ.get("R2MAD_DATA_DIR")
    params = SimulatedAgentParams(response_words=230, response_words_jitter=46)
    bank_dir = bank_directory(args.benchmark, "hashing", args.bank_questions, params, 0, 512, 128, args.bank_cache)
    bank_dir, _ = ensure_bank(bank_dir, args.benchmark, "hashing", args.bank_questions, params, 0, 512, 128, data_dir)
    test = benchmark_data.load(args.benchmark, "test", data_dir=data_dir)
    train = benchmark_data.load(args.benchmark, "train", data_dir=data_dir)
    gains: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="r2mad-throughput-") as tmp:
        work = Path(tmp)
        if not args.local_only:
            samples = test[: args.questions]
            print(f"(a) virtual continuous batching, paper settings: {len(samples)} {args.benchmark} questions, "
                  f"windows {args.windows}")
            print(f"    cost model: {cost}")
            print(f"    completion lengths: lognormal, median {cost.debate_median:g} (debate) / {cost.summary_median:g} "
                  f"(summary) tokens, sigma {cost.sigma:g}, cap {cost.max_tokens} "
                  f"(mean {cost.debate_median * math.exp(cost.sigma ** 2 / 2):.0f} / "
                  f"{cost.summary_median * math.exp(cost.sigma ** 2 / 2):.0f} before the cap)")
            methods = [get_method("mad", max_tokens=cost.max_tokens),
                       get_method("r2mad", memory=str(bank_dir), max_tokens=cost.max_tokens,
                                  summary_max_tokens=cost.max_tokens)]
            results = []
            engine = VirtualBatchingEngine(SimulatedEngine([*test, *train], seed=0, params=params), cost)
            try:
                for window in args.windows:
                    for method in methods:
                        for schedule in ("rounds", "questions"):
                            results.append(virtual_run(engine, method, samples, schedule, window, work,
                                                       args.benchmark))
                            print(f"  window {window:3d}, {method.name:5s} {schedule:9s}: done in "
                                  f"{results[-1].real_s:.1f} s real", flush=True)
            finally:
                engine.close()
            gains = print_virtual(results, cost, min(args.target_window, len(samples)))
            write_csv([r.row() for r in results], args.csv)
        if args.local or args.local_only:
            rows = local_runs(args, bank_dir, test, work)
            write_csv(rows, args.csv.with_name("throughput_local.csv"))
    for method, gain in gains.items():
        print(f"questions/rounds throughput {method}: {gain:.3f}")
    return gains


if __name__ == "__main__":
    main()
