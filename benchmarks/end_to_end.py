"""End to end: MAD vs R2-MAD on the same samples and engine -- wall time, tokens, and what is not generation.

Usage:
    .venv/bin/python benchmarks/end_to_end.py [--limit 32] [--token-latency-ms 10] [--benchmark mmlu_pro_economics]
        [--embedder hashing | minilm] [--state-encoding text | components] [--bank-questions 120]
        [--prefill-tokens-per-s 0 [--no-prefix-caching]]
        [--top-k 3] [--max-experience-chars N] [--repeats 1] [--local [--local-limit 2]] [--quick] [--profile]

What runs: ``experiments.run_cell`` (the code path of ``r2mad run``: prompts, the batched debate loop,
answer extraction, consensus, the R2-MAD hook, transcript I/O, metrics) for MAD and then R2-MAD on the
first ``--limit`` questions of the TEST split, each into a fresh run directory, with the response cache
OFF (every generation is paid). The engine is the simulated latent-concept engine
(``SimulatedAgentParams``) with a per-token decode latency: a batch runs in waves of ``--max-concurrency``
sequences and each wave sleeps ``token_latency_ms x its longest completion``.

Why 10 ms per token by default: vLLM with continuous batching decodes every running sequence once per
engine step; a 7-8B model (the paper's Qwen2.5-7B / Qwen3-8B) on one A100/H100 takes roughly 5-20 ms per
step at batch sizes of 16-256 (memory-bandwidth bound at small batch, attention/compute bound at large
batch). So each sequence advances ~50-200 tokens/s and a batch finishes when its longest sequence does.
Responses default to ~300 tokens (``--response-words 230``), the order of a 7B model's chain of thought on
MMLU-Pro; summaries are whatever the simulated agents write (two sentences, ~45 tokens) capped by
``summary_max_tokens``. Prefill is not modelled by the simulated engine; ``--prefill-tokens-per-s R`` adds
``(prompt tokens the server must compute) / R`` seconds per generate call: a throughput-bound batch prefill,
by default with vLLM's automatic prefix caching (at message granularity: an agent's own earlier turns and a
shared system prompt are not recomputed; ``--no-prefix-caching`` charges every prompt token). A 7-8B model
prefills roughly 10-30K tokens/s on one A100/H100; R2-MAD's retrieved experiences and summary prompts are
new prompt tokens every round, so this is where most of its extra cost goes once prefill is charged.

What is measured (per method):
- wall: the whole ``run_cell`` call (including loading the memory bank and writing transcripts);
- generation: wall time inside ``engine.generate`` (a timing wrapper around the engine), split into the
  modelled decode (+ prefill) sleep and the simulated engine's own CPU work (parsing prompts, drawing
  answers: a cost a real engine does not have in the client process);
- hook: wall time inside the R2-MAD round hook (embedding, retrieval, confidence, annotations);
- non-generation = wall - generation: prompt building, answer extraction, consensus, the hook, transcript
  and metrics I/O, bank loading. Its share of the wall is the figure this benchmark is about.
Tokens per query by tag (debate, summary) come from the engine's ledger.

Once-per-process costs (importing the embedder's libraries, loading a model, the checker's and the scorer's
lazy imports) are paid by an untimed warm-up of both methods on one question before the timed runs.

The memory bank is built once from the TRAIN split with the same simulated agents (no latency) and the
chosen embedder, and kept under ``cache/bench_banks/`` (``make clean-runs`` removes it); later runs reuse it.
``--local`` also runs both methods on the local CPU engine (llama.cpp, SmolLM2-135M) on ``--local-limit``
questions with the same bank (its experiences come from the simulated agents; only the cost is of interest).

Writes ``benchmarks/results/end_to_end.csv`` (one row per engine x method) and prints a table. The last
two lines printed are ``r2mad/mad wall ratio: <x.xx>`` and ``non-generation share: <p.p>%`` (simulated engine;
the share is the larger of the two methods').
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_core.data import benchmarks as benchmark_data  # noqa: E402
from r2mad_core.engine import Completion, Request  # noqa: E402
from r2mad_core.methods import Method, get_method  # noqa: E402
from r2mad_core.theory.agents import TOKENS_PER_WORD, SimulatedAgentParams, SimulatedEngine  # noqa: E402
from r2mad_lab.experiments.cell import run_cell  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
BANK_CACHE = ROOT / "cache" / "bench_banks"
TAGS = ("debate", "summary")


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


# ----------------------------------------------------------------------------------------------
# Timing wrappers
# ----------------------------------------------------------------------------------------------
@dataclass
class CallRecord:
    tags: str
    requests: int
    seconds: float
    modelled_seconds: float
    prompt_tokens: int
    completion_tokens: int
    prefill_tokens: int = 0  # prompt tokens charged to the modelled prefill (0 when prefill is off)


class TimedEngine:
    """An engine wrapper that times every ``generate`` call (the engine boundary of docs/design.md).

    ``modelled_seconds`` of a call is the decode time the simulated engine sleeps (waves of
    ``max_concurrency``, each as long as its longest completion; 0 for a real engine) plus the optional
    prefill sleep this wrapper adds (``prefill_tokens_per_s``).
    """

    def __init__(self, inner: Any, *, token_latency_ms: float = 0.0, max_concurrency: int = 1,
                 prefill_tokens_per_s: float = 0.0, prefix_caching: bool = True) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.model = inner.model
        self.ledger = inner.ledger
        self.token_latency_ms = token_latency_ms
        self.max_concurrency = max_concurrency
        self.prefill_tokens_per_s = prefill_tokens_per_s
        self.prefix_caching = prefix_caching
        self.calls: list[CallRecord] = []
        self._seen_prefixes: set[str] = set()

    def reset(self) -> None:
        """Forget the calls, the ledger and the prefix cache (a fresh server for the next run)."""
        self.calls.clear()
        self.ledger.reset()
        self._seen_prefixes.clear()

    def prefill_tokens(self, requests: Sequence[Request], completions: Sequence[Completion]) -> int:
        """Prompt tokens a server must compute for this batch.

        Without prefix caching: every prompt token. With it (vLLM's automatic prefix caching, at message
        granularity): the tokens after the longest message prefix already seen -- in an earlier request, or
        an earlier request followed by its completion as the assistant turn (an agent's own conversation).
        Token counts use the simulated engine's rule (``TOKENS_PER_WORD`` x words per message).
        """
        total = 0
        for request, completion in zip(requests, completions, strict=False):
            sizes = [message_tokens(m.get("content", "")) for m in request.messages]
            keys = prefix_keys(request.messages)
            if not self.prefix_caching:
                total += sum(sizes)
                continue
            cached = 0
            for k in range(len(keys) - 1, -1, -1):
                if keys[k] in self._seen_prefixes:
                    cached = k + 1
                    break
            total += sum(sizes[cached:])
            self._seen_prefixes.update(keys)
            answered = (*request.messages, {"role": "assistant", "content": completion.text or ""})
            self._seen_prefixes.add(prefix_keys(answered)[-1])
        return total

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        start = time.perf_counter()
        completions = self.inner.generate(requests)
        prompt_tokens = sum(c.prompt_tokens for c in completions)
        prefill = 0.0
        prefill_tokens = 0
        if self.prefill_tokens_per_s > 0:
            prefill_tokens = self.prefill_tokens(requests, completions)
            prefill = prefill_tokens / self.prefill_tokens_per_s
        if prefill:
            time.sleep(prefill)
        seconds = time.perf_counter() - start
        decode = 0.0
        if self.token_latency_ms > 0:
            for first in range(0, len(completions), self.max_concurrency):
                wave = completions[first : first + self.max_concurrency]
                decode += max(c.completion_tokens for c in wave) * self.token_latency_ms / 1000.0
        self.calls.append(CallRecord(
            tags=",".join(sorted({r.tag for r in requests})),
            requests=len(requests),
            seconds=seconds,
            modelled_seconds=decode + prefill,
            prompt_tokens=prompt_tokens,
            completion_tokens=sum(c.completion_tokens for c in completions),
            prefill_tokens=prefill_tokens,
        ))
        return completions

    def close(self) -> None:
        self.inner.close()

    @property
    def generate_seconds(self) -> float:
        return sum(c.seconds for c in self.calls)

    @property
    def modelled_seconds(self) -> float:
        return sum(c.modelled_seconds for c in self.calls)

    def seconds_by_tag(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in self.calls:
            out[c.tags] = out.get(c.tags, 0.0) + c.seconds
        return out

    def prefill_tokens_by_tag(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.calls:
            out[c.tags] = out.get(c.tags, 0) + c.prefill_tokens
        return out


def message_tokens(text: str) -> int:
    return int(round(TOKENS_PER_WORD * len(text.split())))


def prefix_keys(messages: Sequence[dict]) -> list[str]:
    """Hashes of every message prefix (1 message, 2 messages, ...) of a chat."""
    keys = []
    digest = hashlib.sha256()
    for m in messages:
        digest.update(json.dumps([m.get("role"), m.get("content")], ensure_ascii=False).encode())
        keys.append(digest.copy().hexdigest())
    return keys


class TimedHook:
    """Wraps a round hook and times ``prepare_round`` / ``finish_round``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    def prepare_round(self, round_index: int, states: Sequence[Any]) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.prepare_round(round_index, states)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    def finish_round(self, round_index: int, states: Sequence[Any]) -> None:
        finish = getattr(self.inner, "finish_round", None)
        if callable(finish):
            start = time.perf_counter()
            try:
                finish(round_index, states)
            finally:
                self.seconds += time.perf_counter() - start


def with_timed_hook(method: Method) -> tuple[Method, list[TimedHook]]:
    """The same method whose hook (if any) is wrapped by :class:`TimedHook`; the list receives the hook."""
    made: list[TimedHook] = []
    if method.make_hook is None:
        return method, made
    original = method.make_hook

    def make_hook(context: Any) -> Any:
        hook = original(context)
        if hook is None:
            return None
        timed = TimedHook(hook)
        made.append(timed)
        return timed

    return replace(method, make_hook=make_hook), made


# ----------------------------------------------------------------------------------------------
# Memory bank (built once, cached)
# ----------------------------------------------------------------------------------------------
def bank_directory(benchmark: str, embedder: str, questions: int, params: SimulatedAgentParams, seed: int,
                   max_tokens: int, summary_max_tokens: int, cache: Path = BANK_CACHE,
                   state_encoding: str = "text") -> Path:
    settings = {"benchmark": benchmark, "embedder": embedder, "questions": questions, "seed": seed,
                "params": params.behaviour_dict(), "max_tokens": max_tokens, "summary_max_tokens": summary_max_tokens}
    if state_encoding != "text":  # (banks of the default encoding keep their earlier names)
        settings["state_encoding"] = state_encoding
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return cache / f"{benchmark}-{embedder}-{questions}q-{digest}"


def ensure_bank(directory: Path, benchmark: str, embedder: str, questions: int, params: SimulatedAgentParams,
                seed: int, max_tokens: int, summary_max_tokens: int, data_dir: str | None,
                state_encoding: str = "text") -> tuple[Path, float]:
    """The bank directory (built now if missing) and the seconds spent building it (0 when reused)."""
    if (directory / "manifest.json").exists():
        return directory, 0.0
    from r2mad_lab.experiments.build_memory import build_memory

    train = benchmark_data.load(benchmark, "train", data_dir=data_dir)[:questions]
    engine = SimulatedEngine(train, seed=seed, params=replace(params, token_latency_ms=0.0))
    start = time.perf_counter()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
    try:
        build_memory(benchmark, engine, embedder, tmp / "bank", samples=train, seed=seed, max_tokens=max_tokens,
                     summary_max_tokens=summary_max_tokens, state_encoding=state_encoding, progress=False,
                     run_dir=tmp / "debates")
        try:
            os.replace(tmp / "bank", directory)
        except OSError:  # another process built it meanwhile
            if not (directory / "manifest.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory, time.perf_counter() - start


# ----------------------------------------------------------------------------------------------
# One timed run
# ----------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    engine: str
    method: str
    queries: int
    wall_s: float
    generate_s: float
    modelled_s: float
    hook_s: float
    accuracy: float | None
    rounds_per_query: float
    generate_calls: int
    tokens: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds_by_tag: dict[str, float] = field(default_factory=dict)
    prefill_tokens_by_tag: dict[str, int] = field(default_factory=dict)

    @property
    def non_generation_s(self) -> float:
        return self.wall_s - self.generate_s

    @property
    def non_generation_share(self) -> float:
        return self.non_generation_s / self.wall_s if self.wall_s > 0 else 0.0

    def row(self) -> dict[str, Any]:
        q = self.queries
        row: dict[str, Any] = {
            "engine": self.engine,
            "method": self.method,
            "queries": q,
            "wall_s": round(self.wall_s, 4),
            "wall_per_query_s": round(self.wall_s / q, 4),
            "generate_s": round(self.generate_s, 4),
            "modelled_generation_s": round(self.modelled_s, 4),
            "engine_cpu_s": round(self.generate_s - self.modelled_s, 4),
            "hook_s": round(self.hook_s, 4),
            "non_generation_s": round(self.non_generation_s, 4),
            "non_generation_share": round(self.non_generation_share, 5),
            "generate_calls": self.generate_calls,
            "rounds_per_query": round(self.rounds_per_query, 3),
            "accuracy": self.accuracy,
        }
        for tag in TAGS:
            cost = self.tokens.get(tag, {})
            row[f"{tag}_prompt_tokens_per_query"] = round(cost.get("prompt_tokens", 0) / q, 1)
            row[f"{tag}_completion_tokens_per_query"] = round(cost.get("completion_tokens", 0) / q, 1)
            row[f"{tag}_prefill_tokens_per_query"] = round(self.prefill_tokens_by_tag.get(tag, 0) / q, 1)
            row[f"{tag}_generate_s"] = round(self.seconds_by_tag.get(tag, 0.0), 4)
        return row


def timed_run(engine_label: str, engine: TimedEngine, method: Method, samples: list, benchmark: str,
              seed: int, work_dir: Path) -> RunResult:
    engine.reset()
    timed_method, hooks = with_timed_hook(method)
    run_dir = work_dir / f"{engine_label}-{method.name}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    start = time.perf_counter()
    result = run_cell(run_dir, benchmark=benchmark, split="test", engine=engine, method=timed_method, seed=seed,
                      samples=samples, chunk_size=max(1, len(samples)), progress=False)
    wall = time.perf_counter() - start
    rounds = sum(len(r.rounds) for r in result.records) / len(result.records)
    return RunResult(
        engine=engine_label,
        method=method.name,
        queries=len(samples),
        wall_s=wall,
        generate_s=engine.generate_seconds,
        modelled_s=engine.modelled_seconds,
        hook_s=sum(h.seconds for h in hooks),
        accuracy=result.metrics.get("accuracy"),
        rounds_per_query=rounds,
        generate_calls=len(engine.calls),
        tokens={tag: dict(cost) for tag, cost in engine.ledger.as_dict().items()},
        seconds_by_tag=engine.seconds_by_tag(),
        prefill_tokens_by_tag=engine.prefill_tokens_by_tag(),
    )


def best_of(runs: list[RunResult]) -> RunResult:
    """The run with the smallest wall time (the closest estimate of the cost on a shared machine)."""
    return min(runs, key=lambda r: r.wall_s)


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------
def print_table(results: list[RunResult]) -> None:
    header = (f"{'engine':10s} {'method':7s} {'q':>4s} {'wall/q s':>9s} {'gen s':>8s} {'hook s':>7s} "
              f"{'non-gen s':>9s} {'share':>6s} {'rounds':>6s} {'debate tok/q (p+c)':>19s} "
              f"{'summary tok/q (p+c)':>20s} {'acc':>5s}")
    print(header)
    print("-" * len(header))
    for r in results:
        row = r.row()
        debate = f"{row['debate_prompt_tokens_per_query']:.0f}+{row['debate_completion_tokens_per_query']:.0f}"
        summary = f"{row['summary_prompt_tokens_per_query']:.0f}+{row['summary_completion_tokens_per_query']:.0f}"
        acc = "" if r.accuracy is None else f"{r.accuracy:.2f}"
        print(f"{r.engine:10s} {r.method:7s} {r.queries:4d} {row['wall_per_query_s']:9.3f} {r.generate_s:8.2f} "
              f"{r.hook_s:7.3f} {r.non_generation_s:9.3f} {100 * r.non_generation_share:5.1f}% "
              f"{r.rounds_per_query:6.2f} {debate:>19s} {summary:>20s} {acc:>5s}")


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


# ----------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="mmlu_pro_economics", choices=benchmark_data.BENCHMARKS)
    parser.add_argument("--limit", type=int, default=32, help="test questions per method (default: 32)")
    parser.add_argument("--token-latency-ms", type=float, default=10.0,
                        help="simulated decode time per token per sequence (default: 10, see the docstring)")
    parser.add_argument("--max-concurrency", type=int, default=256,
                        help="sequences decoded together by the simulated engine (default: 256, vLLM's max_num_seqs)")
    parser.add_argument("--prefill-tokens-per-s", type=float, default=0.0,
                        help="add a batch prefill sleep of prompt tokens / R per call (default: 0 = off)")
    parser.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false",
                        help="with --prefill-tokens-per-s: charge every prompt token (default: only the tokens after "
                             "the longest prefix seen before, like vLLM's automatic prefix caching)")
    parser.add_argument("--response-words", type=int, default=230,
                        help="mean reasoning words of a simulated response (x1.3 tokens; default: 230 = ~300 tokens)")
    parser.add_argument("--max-tokens", type=int, default=512, help="debate max_tokens (default: 512)")
    parser.add_argument("--summary-max-tokens", type=int, default=128, help="summary max_tokens (default: 128)")
    parser.add_argument("--top-k", type=int, default=3, help="R2-MAD's K, experiences per agent and round (default: 3)")
    parser.add_argument("--max-experience-chars", type=int, default=None,
                        help="R2-MAD: shorten each past response shown to this many characters (default: in full)")
    parser.add_argument("--embedder", default="hashing", help="bank and query embedder: hashing (default) or minilm")
    parser.add_argument("--state-encoding", choices=("text", "components"), default="text",
                        help="the bank's debate-state encoding (memory_cases.STATE_ENCODINGS; default: text, "
                             "the paper's)")
    parser.add_argument("--bank-questions", type=int, default=120,
                        help="train questions debated to build the bank (default: 120, 3 agents x 2 rounds each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per method, interleaved; the fastest of each is reported (default: 1)")
    parser.add_argument("--local", action="store_true", help="also run both methods on the local CPU engine")
    parser.add_argument("--local-limit", type=int, default=2, help="questions for --local (default: 2)")
    parser.add_argument("--local-max-tokens", type=int, default=128, help="debate max_tokens for --local")
    parser.add_argument("--quick", action="store_true", help="a smaller run: at most 16 questions, one repeat")
    parser.add_argument("--profile", action="store_true", help="cProfile each run and print the top entries")
    parser.add_argument("--csv", type=Path, default=RESULTS / "end_to_end.csv")
    parser.add_argument("--bank-cache", type=Path, default=BANK_CACHE,
                        help=f"where memory banks are built and reused (default: {BANK_CACHE.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if args.quick:
        args.limit = min(args.limit, 16)
        args.repeats = 1
    if args.limit < 1:
        parser.error("--limit must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> float:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    data_dir = os.environ.get("R2MAD_DATA_DIR")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {load_average()}")
    params = SimulatedAgentParams(
        response_words=args.response_words,
        response_words_jitter=max(1, args.response_words // 5),
        token_latency_ms=args.token_latency_ms,
        max_concurrency=args.max_concurrency,
    )
    bank_dir = bank_directory(args.benchmark, args.embedder, args.bank_questions, params, args.seed,
                              args.max_tokens, args.summary_max_tokens, args.bank_cache, args.state_encoding)
    bank_dir, build_s = ensure_bank(bank_dir, args.benchmark, args.embedder, args.bank_questions, params, args.seed,
                                    args.max_tokens, args.summary_max_tokens, data_dir, args.state_encoding)
    print(f"memory bank: {bank_dir} ({'built in %.1f s' % build_s if build_s else 'reused'})")
    test = benchmark_data.load(args.benchmark, "test", data_dir=data_dir)[: args.limit]
    train = benchmark_data.load(args.benchmark, "train", data_dir=data_dir)
    sampling = {"max_tokens": args.max_tokens}
    mad = get_method("mad", **sampling)
    r2mad_options = {"memory": str(bank_dir), "summary_max_tokens": args.summary_max_tokens, "top_k": args.top_k,
                     "max_experience_chars": args.max_experience_chars}
    r2mad = get_method("r2mad", **r2mad_options, **sampling)
    print(f"simulated engine: {args.token_latency_ms:g} ms/token/sequence, {args.max_concurrency} sequences per wave, "
          f"~{1.3 * args.response_words:.0f}-token responses, prefill "
          f"{'off' if not args.prefill_tokens_per_s else '%g tokens/s' % args.prefill_tokens_per_s}; "
          f"{len(test)} {args.benchmark} test questions, cache off")

    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="r2mad-e2e-") as work:
        work_dir = Path(work)
        # Once-per-process costs (imports of the embedder's libraries, a model load, lazy imports of the
        # checker and the scorer) are paid by an untimed warm-up of both methods on one question.
        from r2mad_core.memory.embeddings import get_embedder

        get_embedder(args.embedder)
        warm_engine = TimedEngine(SimulatedEngine([*test, *train], seed=args.seed + 1,
                                                  params=replace(params, token_latency_ms=0.0)))
        for method in (mad, r2mad):
            timed_run("warm-up", warm_engine, method, test[:1], args.benchmark, args.seed + 1, work_dir)
        inner = SimulatedEngine([*test, *train], seed=args.seed, params=params)
        engine = TimedEngine(inner, token_latency_ms=args.token_latency_ms, max_concurrency=args.max_concurrency,
                             prefill_tokens_per_s=args.prefill_tokens_per_s, prefix_caching=args.prefix_caching)
        runs: dict[str, list[RunResult]] = {mad.name: [], r2mad.name: []}
        for repeat in range(max(1, args.repeats)):  # interleaved, so a change of machine load hits both methods
            for method in (mad, r2mad):
                profiler = None
                if args.profile:
                    import cProfile

                    profiler = cProfile.Profile()
                    profiler.enable()
                run = timed_run("simulated", engine, method, test, args.benchmark, args.seed, work_dir)
                if profiler is not None:
                    import pstats

                    profiler.disable()
                    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
                runs[method.name].append(run)
                print(f"  run {repeat + 1}, {method.name:5s}: wall {run.wall_s:7.3f} s, "
                      f"generation {run.generate_s:7.3f} s, "
                      f"non-generation {run.non_generation_s:6.3f} s ({100 * run.non_generation_share:4.1f}%), "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        simulated = {name: best_of(method_runs) for name, method_runs in runs.items()}
        results.extend(simulated.values())
        if args.local:
            from r2mad_lab.engines import make_engine

            local_test = test[: args.local_limit]
            local_sampling = {"max_tokens": args.local_max_tokens}
            local_mad = get_method("mad", **local_sampling)
            local_r2mad = get_method("r2mad", **r2mad_options, **local_sampling)
            with make_engine("local", threads=1, parallel_slots=4, context_per_slot=8192) as local:
                timed_local = TimedEngine(local)
                timed_local.generate([Request(messages=({"role": "user", "content": "Say hi."},))])  # warm-up
                for method in (local_mad, local_r2mad):
                    results.append(timed_run("local", timed_local, method, local_test, args.benchmark, args.seed,
                                             work_dir))

    print()
    print_table(results)
    rows = [r.row() for r in results]
    ratio = simulated["r2mad"].wall_s / simulated["mad"].wall_s
    share = max(simulated["r2mad"].non_generation_share, simulated["mad"].non_generation_share)
    for row in rows:
        row.update({"token_latency_ms": args.token_latency_ms if row["engine"] == "simulated" else None,
                    "prefill_tokens_per_s": args.prefill_tokens_per_s if row["engine"] == "simulated" else None,
                    "prefix_caching": args.prefix_caching if args.prefill_tokens_per_s else None,
                    "state_encoding": args.state_encoding,
                    "embedder": args.embedder, "benchmark": args.benchmark, "top_k": args.top_k,
                    "max_experience_chars": args.max_experience_chars, "load_average": load_average()})
    write_csv(rows, args.csv)
    r2 = simulated["r2mad"]
    print(f"R2-MAD non-generation breakdown: hook (embed + retrieve + confidence) {r2.hook_s:.3f} s, "
          f"rest (prompts, parsing, consensus, I/O, bank load) {r2.non_generation_s - r2.hook_s:.3f} s; "
          f"simulated-engine CPU inside generate {r2.generate_s - r2.modelled_s:.3f} s")
    print(f"load average after: {load_average()}")
    print(f"r2mad/mad wall ratio: {ratio:.2f}")
    print(f"non-generation share: {100 * share:.1f}%")
    return ratio


if __name__ == "__main__":
    main()
