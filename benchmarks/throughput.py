"""Throughput of the two debate schedules (issue 17): round barriers vs question by question.

Usage:
    .venv/bin/python benchmarks/throughput.py [--questions 211] [--windows 32 64 128 211] [--quick] [--no-breakdown]
    .venv/bin/python benchmarks/throughput.py --local-only [--local-questions 2] [--local-rounds 2] [--local-repeats 2]

Part (a), default: a continuous-batching engine in VIRTUAL time at the paper's settings (Qwen3-8B thinking,
max_tokens 6144 for debate turns and summaries, one A100/H100-class GPU, vLLM-like scheduling) drives the REAL
code: ``experiments.run_cell`` with ``schedule="rounds"`` (chunks of ``--window`` questions) and
``schedule="questions"`` (``--window`` questions' worth of engine requests in flight, r2mad_core.debate.scheduling),
for MAD and R2-MAD.

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
  contexts, ~25K prefill tokens/s). The KV-cache capacity and preemption are not modelled. Completions are
  handed back one by one as their sequences finish (``generate_iter``), as a streaming server does.
- Virtual time advances only when every client thread (the round loop's thread, or every question's thread)
  is waiting on the engine: the client's own work (prompts, answer extraction, the R2-MAD hook) costs no
  virtual time; its real seconds are printed beside (and the hook's own). Requests that arrive at the same
  virtual instant queue in the order of a hash of their content (threads arrive in any order); what still
  varies between runs is which of several simultaneous requests pays for a shared prompt prefix.

Printed per method and schedule: virtual wall, generated tokens/s, the idle share of the engine's slots
(1 - time-weighted mean batch / max_num_seqs), the most requests out and questions debated at once, and the
drain (virtual seconds after the last question started); the speed-up of ``questions`` over ``rounds`` (target
>= 1.5x for both methods) and why it is what it is (mean batch, the slots a round keeps busy when it ends with
its slowest agent, the drain); R2-MAD / MAD wall under each schedule with R2-MAD's extra engine work (prefill
tokens, summary decode, hook CPU) and a breakdown of its extra wall from a counterfactual run of R2-MAD whose
summaries cost nothing (same debates; ``--no-breakdown`` skips it); and the paper profile's GPU-hour estimate
recomputed with the modelled throughput (100K generations per model at the modelled mean completion length).

Part (b), ``--local``/``--local-only``: the local llama.cpp engine (SmolLM2-135M, 8 slots, the cpu profile's
generation settings: 3 agents, max_tokens 128, summaries 48, experiences cut to 400 characters, K = 3; 1
thread by default, the profile's advice on a shared machine; ``--local-rounds`` rounds, the profile has 3) on
the first ``--local-questions`` test questions, MAD and R2-MAD, both schedules, runs interleaved (per repeat and
method: rounds, then questions), response cache off. The memory bank is the simulated agents' (hashing
embedder), as in part (a). Per run: wall, the engine's busy share (time with at least one request out; and the
slots' share: requests out / 8, time-weighted, measured on the client from ``generate_iter``), the hook's
seconds, tokens, and the load average before and after.

Writes ``benchmarks/results/throughput.csv`` (and ``throughput_local.csv`` with ``--local``, after every run).
The last lines printed are ``questions/rounds throughput mad: <x>`` and ``questions/rounds throughput r2mad:
<x>`` (the summary of ``run_all.py`` reads them; with ``--local``, ``local gain <method>: <x>`` before them).
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
from typing import Any, Iterator, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from end_to_end import BANK_CACHE, bank_directory, ensure_bank, message_tokens, prefix_keys  # noqa: E402

from r2mad_core.data import benchmarks as benchmark_data  # noqa: E402
from r2mad_core.engine import Completion, Ledger, Request, collect_in_order  # noqa: E402
from r2mad_core.methods import get_method  # noqa: E402
from r2mad_core.theory.agents import SimulatedAgentParams, SimulatedEngine  # noqa: E402
from r2mad_lab.experiments.cell import run_cell  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
QUESTION_THREAD = "r2mad-question-"  # r2mad_core.debate.scheduling names each question's thread so
PAPER_GENERATIONS_PER_MODEL = 100_000  # r2mad_lab/profiles/paper.yaml's estimate


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
    index: int  # the request's index in its call
    prefill_left: int
    decode_left: int
    context: int  # tokens in the KV cache once running (prompt + generated so far)
    tag: str
    key: str = ""  # orders the requests that arrive at the same virtual instant (threads arrive in any order)


@dataclass
class _Call:
    thread: int
    left: int = 0  # sequences not yet handed back
    ready: list = field(default_factory=list)  # indices finished, not yet handed back


class VirtualBatchingEngine:
    """A continuous-batching engine in virtual time in front of the simulated agents (module docstring).

    ``generate_iter`` hands each completion back as its sequence finishes (in virtual time), as a streaming
    server does; ``generate`` collects them in request order."""

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
        self._stop = False
        self.free_tags: frozenset[str] = frozenset()  # requests with these tags cost nothing (a counterfactual)
        self.reset()
        self._thread = threading.Thread(target=self._loop, name="virtual-engine", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._cond:
            self.now = 0.0
            self.busy_slot_seconds = 0.0
            self.steps = 0
            self.max_batch = 0
            self.max_out = 0
            self.max_questions = 0
            self.last_new_question = 0.0  # virtual time of the last question's first request
            self._questions_seen: set[str] = set()
            self.tokens: dict[str, dict[str, int]] = {}
            self._seen_prefixes.clear()
            self._drivers.clear()
            self.ledger.reset()

    # -- client side ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        completions = self.inner.generate(requests)  # texts now (CPU), their cost in virtual time below
        me = threading.current_thread()
        call = _Call(thread=me.ident, left=len(requests))
        with self._cond:
            if not me.name.startswith(QUESTION_THREAD):
                self._drivers.add(me)
            if me.name.startswith(QUESTION_THREAD) and me.name not in self._questions_seen:
                self._questions_seen.add(me.name)
                self.last_new_question = self.now
            for index, (request, completion) in enumerate(zip(requests, completions, strict=False)):
                if request.tag in self.free_tags:  # back at once, no engine time (its modelled length is kept)
                    completion.completion_tokens = self.cost.decode_length(request, completion.completion_tokens)
                    if completion.completion_tokens >= self.cost.max_tokens:
                        completion.finish_reason = "length"
                    call.ready.append(index)
                    self.ledger.record(request, completion)
                    continue
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
                    _Sequence(call, index, prefill, decode, completion.prompt_tokens - prefill, request.tag, key))
                self.ledger.record(request, completion)
            out = len(self._arrivals) + len(self._waiting) + len(self._running)
            self.max_out = max(self.max_out, out)
            questions = sum(1 for t in threading.enumerate() if t.name.startswith(QUESTION_THREAD))
            self.max_questions = max(self.max_questions, questions)
        while True:
            with self._cond:
                while not call.ready:
                    if call.left == 0:
                        return
                    self._blocked.add(me.ident)  # waiting on the engine: virtual time may advance
                    self._cond.notify_all()
                    self._cond.wait()
                ready, call.ready = call.ready, []
                call.left -= len(ready)
            for index in ready:
                yield index, completions[index]

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
        self.max_batch = max(self.max_batch, batch)
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
            for s in finished:  # handed back now: its caller runs (no longer blocked) until it waits again
                s.call.ready.append(s.index)
                self._blocked.discard(s.call.thread)
            self._cond.notify_all()


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
    max_out: int  # most requests in the engine (running or queued) at once
    max_questions: int  # most questions being debated at once (questions schedule)
    drain_s: float  # virtual seconds after the last question sent its first request
    hook_s: float  # real seconds inside the round hook (client CPU; no virtual time)
    tokens: dict[str, dict[str, int]]
    accuracy: float | None
    records_digest: str
    free_tags: tuple[str, ...] = ()

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.virtual_s if self.virtual_s else 0.0

    def row(self) -> dict[str, Any]:
        row = {"method": self.method + ("" if not self.free_tags else " (" + "+".join(self.free_tags) + " free)"),
               "schedule": self.schedule, "questions": self.questions, "window": self.window,
               "virtual_wall_s": round(self.virtual_s, 1), "real_s": round(self.real_s, 2),
               "generated_tokens": self.decode_tokens, "tokens_per_s": round(self.tokens_per_s, 1),
               "idle_slot_share": round(self.idle_slot_share, 4), "max_requests_out": self.max_out,
               "max_questions_debated": self.max_questions,
               "drain_s": round(self.drain_s, 1), "hook_real_s": round(self.hook_s, 3),
               "accuracy": self.accuracy, "transcripts_sha256": self.records_digest}
        for tag in ("debate", "summary"):
            counts = self.tokens.get(tag, {})
            row[f"{tag}_prefill_tokens"] = counts.get("prefill", 0)
            row[f"{tag}_decode_tokens"] = counts.get("decode", 0)
        return row


def transcripts_digest(run_dir: Path) -> str:
    """SHA-256 of the transcript file without its wall-time fields (equal under both schedules)."""
    import json

    from r2mad_core.records import without_seconds

    lines = (run_dir / "transcripts.jsonl").read_text().splitlines()
    blob = "\n".join(json.dumps(without_seconds(json.loads(line)), sort_keys=True) for line in lines)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def virtual_run(engine: VirtualBatchingEngine, method: Any, samples: list, schedule: str, window: int, work: Path,
                benchmark: str, free_tags: tuple[str, ...] = ()) -> Result:
    engine.reset()
    engine.free_tags = frozenset(free_tags)
    run_dir = work / f"{method.name}-{schedule}"
    shutil.rmtree(run_dir, ignore_errors=True)
    hook = HookTimer(method)
    start = time.perf_counter()
    result = run_cell(run_dir, benchmark=benchmark, split="test", engine=engine, method=hook.method, samples=samples,
                      chunk_size=window, window=window, schedule=schedule, progress=False)
    real = time.perf_counter() - start
    with engine._cond:
        virtual = engine.now
        busy = engine.busy_slot_seconds
        max_out, max_questions = engine.max_out, engine.max_questions
        drain = virtual - engine.last_new_question if schedule == "questions" else 0.0
        tokens = {k: dict(v) for k, v in engine.tokens.items()}
    engine.free_tags = frozenset()
    decode = sum(v["decode"] for v in tokens.values())
    idle = 1.0 - busy / (virtual * engine.cost.max_num_seqs) if virtual else 0.0
    return Result(method.name, schedule, len(samples), window, virtual, real, decode, idle, max_out, max_questions,
                  drain, hook.seconds, tokens, result.metrics.get("accuracy"), transcripts_digest(run_dir),
                  tuple(free_tags))


def slots_per_question(cost: CostModel, agents: int = 3, draws: int = 20000) -> float:
    """Mean engine slots a question in a debate round keeps busy: E[sum] / E[max] of ``agents`` debate
    lengths (the round ends with its slowest agent), from the cost model's distribution (fixed draws)."""
    from statistics import NormalDist

    normal = NormalDist()
    total = longest = 0.0
    for d in range(draws):
        lengths = []
        for a in range(agents):
            digest = hashlib.sha256(f"{d}:{a}".encode()).digest()
            u = (int.from_bytes(digest[:8], "big") + 0.5) / 2.0 ** 64
            z = normal.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
            lengths.append(min(cost.max_tokens, cost.debate_median * math.exp(cost.sigma * z)))
        total += sum(lengths)
        longest += max(lengths)
    return total / longest


def print_virtual(results: list[Result], cost: CostModel, target_window: int,
                  figures: dict[str, str] | None = None) -> dict[str, float]:
    """Print the virtual runs; ``figures`` receives the summary lines (label -> value) run_all.py reads."""
    figures = {} if figures is None else figures
    print(f"\n{'method':24s} {'schedule':10s} {'q':>4s} {'window':>6s} {'virtual wall':>13s} {'tokens/s':>9s} "
          f"{'idle slots':>10s} {'max out':>7s} {'max q':>5s} {'drain':>7s} {'real s':>7s} {'transcripts':>17s}")
    for r in results:
        label = r.method + ("" if not r.free_tags else f" ({'+'.join(r.free_tags)} free)")
        print(f"{label:24s} {r.schedule:10s} {r.questions:4d} {r.window:6d} {r.virtual_s / 60:10.1f} min "
              f"{r.tokens_per_s:9.0f} {100 * r.idle_slot_share:9.1f}% {r.max_out:7d} {r.max_questions:5d} "
              f"{r.drain_s:6.0f}s {r.real_s:7.1f} {r.records_digest:>17s}")
    main_results = [r for r in results if not r.free_tags]
    windows = sorted({r.window for r in main_results})
    gains = {}
    for window in windows:
        by = {(r.method, r.schedule): r for r in main_results if r.window == window}
        for method in ("mad", "r2mad"):
            rounds, questions = by[(method, "rounds")], by[(method, "questions")]
            gain = questions.tokens_per_s / rounds.tokens_per_s
            if window == target_window:
                gains[method] = gain
            same = "identical" if rounds.records_digest == questions.records_digest else "DIFFERENT"
            print(f"window {window:3d} {method:5s}: questions / rounds throughput {gain:.3f}x (wall "
                  f"{rounds.virtual_s / 60:.1f} -> {questions.virtual_s / 60:.1f} min); transcripts {same}")
    by = {(r.method, r.schedule): r for r in main_results if r.window == target_window}
    free = {r.schedule: r for r in results if r.free_tags == ("summary",) and r.window == target_window}
    print(f"at window {target_window} (the target's):")
    per_question = slots_per_question(cost)
    for method in ("mad", "r2mad"):
        q = by[(method, "questions")]
        batch = (1 - q.idle_slot_share) * cost.max_num_seqs
        figures[f"engine idle slots {method} rounds"] = f"{100 * by[(method, 'rounds')].idle_slot_share:.1f}%"
        figures[f"engine idle slots {method} questions"] = f"{100 * q.idle_slot_share:.1f}%"
        figures[f"drain share {method} questions"] = f"{100 * q.drain_s / q.virtual_s:.1f}%"
        print(f"  {method} questions: mean batch {batch:.0f} of the window's {3 * target_window} requests (max "
              f"{q.max_out} out at once, {q.max_questions} questions at most); a round keeps {per_question:.2f} of "
              f"its 3 agents' slots busy on average (it ends with its slowest agent); the last "
              f"{q.drain_s:.0f} s of {q.virtual_s:.0f} s ({100 * q.drain_s / q.virtual_s:.0f}%) come after the last "
              f"question started (the run drains)")
    for schedule in ("rounds", "questions"):
        mad, r2 = by[("mad", schedule)], by[("r2mad", schedule)]
        q = mad.questions
        extra_prefill = (sum(v["prefill"] for v in r2.tokens.values()) - sum(v["prefill"] for v in mad.tokens.values()))
        summary_decode = r2.tokens.get("summary", {}).get("decode", 0)
        extra_debate_decode = (r2.tokens.get("debate", {}).get("decode", 0)
                               - mad.tokens.get("debate", {}).get("decode", 0))
        figures[f"r2mad/mad wall {schedule}"] = f"{r2.virtual_s / mad.virtual_s:.2f}"
        print(f"R2-MAD / MAD wall, {schedule}: {r2.virtual_s / mad.virtual_s:.2f} "
              f"(R2-MAD extra per question: prefill {extra_prefill / q:+.0f} tokens "
              f"[debate {(r2.tokens['debate']['prefill'] - mad.tokens['debate']['prefill']) / q:+.0f}, summary "
              f"{r2.tokens.get('summary', {}).get('prefill', 0) / q:+.0f}], summary decode {summary_decode / q:+.0f}, "
              f"debate decode {extra_debate_decode / q:+.0f} tokens; hook {1000 * r2.hook_s / q:.1f} ms real CPU "
              f"per question, 0 virtual s)")
        if schedule in free:
            extra = r2.virtual_s - mad.virtual_s
            summaries = r2.virtual_s - free[schedule].virtual_s
            figures[f"r2mad extra wall from summaries {schedule}"] = f"{100 * summaries / extra:.0f}%"
            print(f"  breakdown of R2-MAD's extra {extra:.0f} s ({schedule}): summaries (their prefill, decode and "
                  f"their place on each question's path) {summaries:.0f} s ({100 * summaries / extra:.0f}%), the rest "
                  f"(experiences' prefill and context, the debates' own lengths) {extra - summaries:.0f} s; "
                  f"R2-MAD with free summaries / MAD = {free[schedule].virtual_s / mad.virtual_s:.2f}")
    mean_completion = sum(r.decode_tokens for r in by.values()) / sum(
        sum(v["requests"] for v in r.tokens.values()) for r in by.values())
    total_tokens = PAPER_GENERATIONS_PER_MODEL * mean_completion
    print(f"paper profile, Qwen3-8B part (100K generations x {mean_completion:.0f} modelled tokens each = "
          f"{total_tokens / 1e6:.0f}M tokens):")
    for schedule in ("rounds", "questions"):
        rate = (by[("mad", schedule)].tokens_per_s + by[("r2mad", schedule)].tokens_per_s) / 2
        figures[f"paper profile gpu-hours {schedule}"] = f"{total_tokens / rate / 3600:.1f}"
        print(f"  {schedule:9s}: {rate:.0f} tokens/s (mean of MAD and R2-MAD) -> "
              f"{total_tokens / rate / 3600:.1f} GPU-hours")
    return gains


# ----------------------------------------------------------------------------------------------
class BusyTracker:
    """Wraps an engine and records, per request, when it was sent and when its completion came back
    (``generate_iter``): the engine is busy while at least one request is out; its slots' share is the
    time-weighted number of requests out / ``slots`` (capped at 1)."""

    concurrent_generate = True

    def __init__(self, engine: Any, slots: int) -> None:
        self.engine = engine
        self.slots = slots
        self.identity = engine.identity
        self.model = engine.model
        self.ledger = engine.ledger
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._out = 0
            self._last = time.perf_counter()
            self.busy_s = 0.0
            self.slot_s = 0.0

    def _move(self, delta: int) -> None:
        with self._lock:
            now = time.perf_counter()
            if self._out:
                self.busy_s += now - self._last
                self.slot_s += (now - self._last) * min(self._out, self.slots)
            self._last = now
            self._out += delta

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        out: list[Any] = [None] * len(requests)
        self._move(len(requests))
        pending = len(requests)
        try:
            for index, completion in self.engine.generate_iter(requests):
                out[index] = completion
                pending -= 1
                self._move(-1)
        finally:
            if pending:
                self._move(-pending)
        return out

    def shares(self, wall: float) -> tuple[float, float]:
        self._move(0)
        return self.busy_s / wall, self.slot_s / (wall * self.slots)


class ServerTimings:
    """Sums llama.cpp's per-response ``timings`` (prompt tokens it actually processed -- the rest came from its
    prompt cache -- and the milliseconds it reports for prompt processing and for decoding) over a run, by
    wrapping the OpenAI client's response parser."""

    KEYS = ("prompt_n", "cache_n", "prompt_ms", "predicted_n", "predicted_ms")

    def __init__(self) -> None:
        from r2mad_lab.engines import openai_compat

        self._module = openai_compat
        self._original = openai_compat.parse_chat_completion
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(self.KEYS, 0.0)
        self.responses = 0

        def parse(data: Any, **kwargs: Any) -> Completion:
            timings = data.get("timings") if isinstance(data, dict) else None
            if isinstance(timings, dict):
                with self._lock:
                    self.responses += 1
                    for key in self.KEYS:
                        value = timings.get(key)
                        if isinstance(value, (int, float)):
                            self.totals[key] += value
            return self._original(data, **kwargs)

        openai_compat.parse_chat_completion = parse

    def take(self) -> dict[str, float]:
        with self._lock:
            out, self.totals, self.responses = dict(self.totals), dict.fromkeys(self.KEYS, 0.0), 0
        return out

    def close(self) -> None:
        self._module.parse_chat_completion = self._original


def local_runs(args: argparse.Namespace, bank_dir: Path, test: list, work: Path, csv_path: Path,
               figures: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Part (b): the cpu profile's settings on llama.cpp; runs interleaved: for each repeat and method,
    rounds then questions."""
    from r2mad_lab.engines import make_engine

    rows = []
    samples = test[: args.local_questions]
    rounds = args.local_rounds
    # r2mad_lab/profiles/cpu.yaml: 3 agents, max_tokens 128, summary_max_tokens 48, experiences cut to 400
    # characters, K = 3, temperature 1.0; rounds from --local-rounds (the profile: 3)
    methods = [get_method("mad", max_tokens=128, n_rounds=rounds),
               get_method("r2mad", memory=str(bank_dir), max_tokens=128, summary_max_tokens=48,
                          max_experience_chars=400, top_k=3, n_rounds=rounds)]
    methods = [m for m in methods if m.name in args.local_methods]
    slots = 8
    print(f"(b) local llama.cpp: SmolLM2-135M, {slots} slots, {args.local_threads} thread(s), {len(samples)} "
          f"{args.benchmark} test questions, {rounds} rounds, max_tokens 128 (summaries 48), experiences cut to "
          f"400 characters, response cache off; {args.local_repeats} repeats, interleaved", flush=True)
    with make_engine("local", threads=args.local_threads, parallel_slots=slots, context_per_slot=8192) as engine:
        engine.generate([Request(messages=({"role": "user", "content": "Say hi."},))])  # warm-up
        tracked = BusyTracker(engine, slots)
        server = ServerTimings()
        try:
            run_local_repeats(args, methods, samples, tracked, server, work, csv_path, rows)
        finally:
            server.close()
    print_local(args, rows, slots, figures)
    return rows


def run_local_repeats(args: argparse.Namespace, methods: list, samples: list, tracked: "BusyTracker",
                      server: ServerTimings, work: Path, csv_path: Path, rows: list[dict[str, Any]]) -> None:
    rounds = args.local_rounds
    for repeat in range(args.local_repeats):
        for method in methods:
            for schedule in ("rounds", "questions"):  # interleaved
                run_dir = work / f"local-{method.name}-{schedule}-{repeat}"
                load_before = os.getloadavg()[0]
                tracked.reset()
                server.take()
                hook = HookTimer(method)
                start = time.perf_counter()
                result = run_cell(run_dir, benchmark=args.benchmark, split="test", engine=tracked,
                                  method=hook.method, samples=samples, chunk_size=len(samples),
                                  window=len(samples), schedule=schedule, progress=False)
                wall = time.perf_counter() - start
                busy, slot_share = tracked.shares(wall)
                timings = server.take()
                tokens = local_tokens(result.records)
                completion = tokens["debate_completion"] + tokens["summary_completion"]
                row = {"method": method.name, "schedule": schedule, "repeat": repeat,
                       "questions": len(samples), "rounds": rounds, "wall_s": round(wall, 2),
                       "engine_busy_share": round(busy, 4), "slot_share": round(slot_share, 4),
                       "hook_s": round(hook.seconds, 3), "completion_tokens": completion,
                       "tokens_per_s": round(completion / wall, 2),
                       "rounds_debated": sum(len(r.rounds) for r in result.records),
                       "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
                row.update(tokens)
                row.update({"server_prompt_processed": int(timings["prompt_n"]),
                            "server_prompt_cached": int(timings["cache_n"]),
                            "server_prompt_s": round(timings["prompt_ms"] / 1000, 1),
                            "server_decode_s": round(timings["predicted_ms"] / 1000, 1)})
                rows.append(row)
                write_csv(rows, csv_path, quiet=True)  # after every run: a stopped benchmark keeps its rows
                print(f"  local {method.name:5s} {schedule:9s} run {repeat + 1}: wall {wall:7.1f} s, engine busy "
                      f"{100 * busy:5.1f}% (slots {100 * slot_share:5.1f}%), hook {1000 * hook.seconds:.0f} ms, "
                      f"{completion} completion tokens, prompt tokens {row['debate_prompt'] + row['summary_prompt']} "
                      f"of which the server processed {row['server_prompt_processed']} (its prompt cache had "
                      f"the rest), {row['rounds_debated']} question-rounds, load "
                      f"{load_before:.2f} -> {row['load_after']:.2f}", flush=True)


def print_local(args: argparse.Namespace, rows: list[dict[str, Any]], slots: int,
                figures: dict[str, str] | None) -> None:
    print(f"\nlocal llama.cpp (SmolLM2-135M, {slots} slots, {args.local_threads} thread(s), max_tokens 128), "
          f"mean over {args.local_repeats} interleaved runs [min-max]:")
    gains = {}
    names = [m for m in ("mad", "r2mad") if any(r["method"] == m for r in rows)]
    for method in names:
        walls = {s: [r["wall_s"] for r in rows if r["method"] == method and r["schedule"] == s]
                 for s in ("rounds", "questions")}
        rates = {s: [r["tokens_per_s"] for r in rows if r["method"] == method and r["schedule"] == s]
                 for s in ("rounds", "questions")}
        busy = {s: [r["engine_busy_share"] for r in rows if r["method"] == method and r["schedule"] == s]
                for s in ("rounds", "questions")}
        mean = {s: sum(v) / len(v) for s, v in walls.items()}
        gains[method] = mean["rounds"] / mean["questions"]
        # each repeat's rounds / questions
        pairs = [a / b for a, b in zip(walls["rounds"], walls["questions"], strict=False)]
        print(f"local {method}: rounds {mean['rounds']:.1f} s [{min(walls['rounds']):.0f}-{max(walls['rounds']):.0f}], "
              f"questions {mean['questions']:.1f} s [{min(walls['questions']):.0f}-{max(walls['questions']):.0f}], "
              f"wall gain {gains[method]:.2f}x; completion tokens/s "
              f"{sum(rates['rounds']) / len(rates['rounds']):.2f} -> "
              f"{sum(rates['questions']) / len(rates['questions']):.2f}; "
              f"engine busy {100 * sum(busy['rounds']) / len(busy['rounds']):.0f}% -> "
              f"{100 * sum(busy['questions']) / len(busy['questions']):.0f}%; questions faster in "
              f"{sum(p > 1 for p in pairs)} of {len(pairs)} interleaved pairs (rounds / questions "
              f"{', '.join(f'{p:.2f}' for p in pairs)})")
    for schedule in ("rounds", "questions") if len(names) == 2 else ():
        mad = [r for r in rows if r["method"] == "mad" and r["schedule"] == schedule]
        r2 = [r for r in rows if r["method"] == "r2mad" and r["schedule"] == schedule]
        ratio = sum(r["wall_s"] for r in r2) / sum(r["wall_s"] for r in mad)
        per = lambda rs, key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
        print(f"local R2-MAD / MAD wall, {schedule}: {ratio:.2f} (per run: prompt tokens "
              f"{per(mad, 'debate_prompt'):.0f} vs {per(r2, 'debate_prompt'):.0f} debate + "
              f"{per(r2, 'summary_prompt'):.0f} "
              f"summary; completion tokens {per(mad, 'debate_completion'):.0f} vs {per(r2, 'debate_completion'):.0f} "
              f"debate + {per(r2, 'summary_completion'):.0f} summary; hook {1000 * per(r2, 'hook_s'):.0f} ms; prompt "
              f"tokens the server processed {per(mad, 'server_prompt_processed'):.0f} vs "
              f"{per(r2, 'server_prompt_processed'):.0f}, its prompt / decode sequence-seconds "
              f"{per(mad, 'server_prompt_s'):.0f} / {per(mad, 'server_decode_s'):.0f} vs "
              f"{per(r2, 'server_prompt_s'):.0f} / {per(r2, 'server_decode_s'):.0f})")
    figures = {} if figures is None else figures
    for method in names:
        for schedule in ("rounds", "questions"):
            busy = [r["engine_busy_share"] for r in rows if r["method"] == method and r["schedule"] == schedule]
            figures[f"local engine busy {method} {schedule}"] = f"{100 * sum(busy) / len(busy):.1f}%"
    for schedule in ("rounds", "questions") if len(names) == 2 else ():
        mad = sum(r["wall_s"] for r in rows if r["method"] == "mad" and r["schedule"] == schedule)
        r2 = sum(r["wall_s"] for r in rows if r["method"] == "r2mad" and r["schedule"] == schedule)
        figures[f"local r2mad/mad wall {schedule}"] = f"{r2 / mad:.2f}"
    figures["local load average"] = f"{sum(r['load_before'] for r in rows) / len(rows):.2f}"
    for method, gain in gains.items():
        figures[f"local gain {method}"] = f"{gain:.2f}"


def local_tokens(records: list[Any]) -> dict[str, int]:
    """Prompt and completion tokens by tag (debate, summary) summed over a run's transcripts."""
    out = {}
    for tag in ("debate", "summary"):
        for kind in ("prompt", "completion"):
            out[f"{tag}_{kind}"] = sum(getattr(r.tokens[tag], f"{kind}_tokens") for r in records if tag in r.tokens)
    return out


class HookTimer:
    """The method with its round hook's calls timed (wall seconds inside prepare_round / finish_round)."""

    def __init__(self, method: Any) -> None:
        self.seconds = 0.0
        self.method = method
        factory = getattr(method, "make_hook", None)
        if factory is None:
            return
        timer = self

        def timed_factory(*a: Any, **k: Any) -> Any:
            hook = factory(*a, **k)
            for name in ("prepare_round", "finish_round"):
                inner = getattr(hook, name, None)
                if inner is None:
                    continue

                def wrapped(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                    t0 = time.perf_counter()
                    try:
                        return _inner(*args, **kwargs)
                    finally:
                        timer.seconds += time.perf_counter() - t0
                setattr(hook, name, wrapped)
            return hook

        self.method = replace(method, make_hook=timed_factory)


def write_csv(rows: list[dict[str, Any]], path: Path, quiet: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if not quiet:
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
    parser.add_argument("--no-breakdown", action="store_true",
                        help="skip the two runs of R2-MAD with free summaries (the breakdown of its extra wall)")
    parser.add_argument("--local", action="store_true", help="run part (b) too: the local llama.cpp engine")
    parser.add_argument("--local-only", action="store_true", help="run part (b) only")
    parser.add_argument("--local-questions", type=int, default=2)
    parser.add_argument("--local-repeats", type=int, default=2)
    parser.add_argument("--local-methods", nargs="+", default=["mad", "r2mad"], choices=["mad", "r2mad"],
                        help="methods of part (b) (default: both)")
    parser.add_argument("--local-rounds", type=int, default=2, help="debate rounds on llama.cpp (the cpu profile: 3)")
    parser.add_argument("--local-threads", type=int, default=1,
                        help="llama.cpp threads (the cpu profile: 2; 1 on a machine shared with other busy processes)")
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
    figures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="r2mad-throughput-") as tmp:
        work = Path(tmp)
        if not args.local_only:
            samples = test[: args.questions]
            print(f"(a) virtual continuous batching, paper settings: {len(samples)} {args.benchmark} questions, "
                  f"windows {args.windows}")
            print(f"    cost model: {cost}")
            print(f"    completion lengths: lognormal, median {cost.debate_median:g} (debate) / "
                  f"{cost.summary_median:g} "
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
                if not args.no_breakdown:  # the counterfactual: R2-MAD with summaries at no cost
                    target = min(args.target_window, len(samples))
                    for schedule in ("rounds", "questions"):
                        results.append(virtual_run(engine, methods[1], samples, schedule, target, work,
                                                   args.benchmark, free_tags=("summary",)))
                        print(f"  window {target:3d}, r2mad {schedule:9s} with free summaries: done in "
                              f"{results[-1].real_s:.1f} s real", flush=True)
            finally:
                engine.close()
            gains = print_virtual(results, cost, min(args.target_window, len(samples)), figures)
            write_csv([r.row() for r in results], args.csv)
        if args.local or args.local_only:
            local_csv = args.csv.with_name(args.csv.stem + "_local.csv")
            rows = local_runs(args, bank_dir, test, work, local_csv, figures)
            write_csv(rows, local_csv)
    print()
    for label, value in figures.items():
        print(f"{label}: {value}")
    for method, gain in gains.items():
        print(f"questions/rounds throughput {method}: {gain:.3f}")
    return gains


if __name__ == "__main__":
    main()
