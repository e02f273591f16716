"""Retrieval + confidence cost per agent-round as the memory bank grows, and embedder throughput.

Usage:
    .venv/bin/python benchmarks/retrieval_scaling.py [--sizes 1000 10000 100000 1000000] [--dims 384 1024]
        [--queries 1 32] [--repeats 20] [--faiss] [--embedder minilm | --skip-embedder]

What is timed (median of ``--repeats`` runs, after one warm-up):

- ``retrieve`` (r2mad_core.memory.retrieval, the state-aware policy, K = 3, 3K = 9 candidates): one [Q, d] x [d, N]
  product, argpartition for the top-3K, vectorised MMR; plus ``peer_confidence`` (Eq. 7) over the K
  retrieved cases for 3 agents. Brute force numpy on synthetic unit float32 embeddings.
  One agent-round = the Q samples one agent handles in one round (Q = 1: a single question; Q = 32: a batch,
  reported per query too).
- ``--faiss``: faiss-cpu ``IndexFlatIP`` (exact) and ``IndexHNSWFlat`` (approximate; M = 32, efSearch = 64;
  build time and recall of the top-9 candidates against brute force) for the candidate stage only.
- Embedder throughput: sentences/s for short (~12 words) and long (~300 tokens) texts.

Synthetic response embeddings for the confidence step are stored for at most 10^5 cases (the confidence
step gathers only the K retrieved rows, so its cost does not depend on N; a [10^6, 3, 1024] array would be
12 GB). Results go to ``benchmarks/results/retrieval_scaling.csv`` (and ``faiss_scaling.csv``,
``embedder_throughput.csv``). Numbers depend on the machine's load, printed with them.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2mad_core.memory.confidence import peer_confidence  # noqa: E402
from r2mad_core.memory.retrieval import RetrievalConfig, retrieve, top_candidates  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
N_AGENTS = 3
RESPONSE_ROWS_CAP = 100_000


def unit_rows(rows: int, dim: int, seed: int, chunk: int = 100_000) -> np.ndarray:
    """Random unit float32 rows, generated in chunks to bound peak memory."""
    rng = np.random.default_rng(seed)
    out = np.empty((rows, dim), dtype=np.float32)
    for start in range(0, rows, chunk):
        block = rng.standard_normal((min(chunk, rows - start), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = block
    return out


def timed(fn, repeats: int) -> tuple[float, float]:
    """(best, median) seconds over ``repeats`` calls after one warm-up. On a shared machine the best is the
    closer estimate of the cost; the median shows the interference."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)



def repeats_for(n: int, dim: int, repeats: int) -> int:
    """Fewer repetitions for the big banks (each pass reads N x d x 4 bytes)."""
    return repeats if n * dim <= 4e7 else max(3, repeats // 4)


def bench_numpy(sizes, dims, queries, repeats):
    rows = []
    for dim in dims:
        for n in sizes:
            gb = n * dim * 4 / 1e9
            print(f"  generating bank N={n:,} d={dim} ({gb:.2f} GB) ...", flush=True)
            bank = unit_rows(n, dim, seed=1)
            rewards = (np.random.default_rng(2).random(n) < 0.6).astype(np.float32)
            response_rows = min(n, RESPONSE_ROWS_CAP)
            responses = unit_rows(response_rows * N_AGENTS, dim, seed=3).reshape(response_rows, N_AGENTS, dim)
            labels = (np.random.default_rng(4).random((response_rows, N_AGENTS)) < 0.5).astype(np.float32)
            for q in queries:
                # queries near existing cases, like real debate states
                picks = np.random.default_rng(5).integers(0, n, size=q)
                query = bank[picks] + 0.5 * unit_rows(q, dim, seed=6)
                query /= np.linalg.norm(query, axis=1, keepdims=True)
                current = unit_rows(q * N_AGENTS, dim, seed=7).reshape(q, N_AGENTS, dim)
                consensus = np.full(q, 2 / 3)
                config = RetrievalConfig(k=3)

                def retrieval_only(query=query, bank=bank, rewards=rewards, consensus=consensus, config=config):
                    return retrieve(query, bank, rewards, consensus, config)

                def retrieval_and_confidence(query=query, bank=bank, rewards=rewards, consensus=consensus,
                                             config=config, response_rows=response_rows, current=current,
                                             responses=responses, labels=labels, q=q):
                    result = retrieve(query, bank, rewards, consensus, config)
                    evidence = np.where(result.indices >= 0, result.indices % response_rows, -1)
                    return peer_confidence(current, evidence, responses, labels, np.zeros(q, dtype=np.int64))

                reps = repeats_for(n, dim, repeats)
                best_r, med_r = timed(retrieval_only, reps)
                best_t, med_t = timed(retrieval_and_confidence, reps)
                row = {
                    "n_cases": n, "dim": dim, "queries": q,
                    "retrieve_best_ms": 1e3 * best_r, "retrieve_median_ms": 1e3 * med_r,
                    "retrieve_confidence_best_ms": 1e3 * best_t, "retrieve_confidence_median_ms": 1e3 * med_t,
                    "per_query_best_ms": 1e3 * best_t / q,
                }
                rows.append(row)
                write_csv("retrieval_scaling.csv", rows, quiet=True)
                print(
                    f"  N={n:>9,} d={dim:>4} Q={q:>3}: retrieve {1e3 * best_r:9.3f} ms (median {1e3 * med_r:9.3f}), "
                    f"+confidence {1e3 * best_t:9.3f} ms (median {1e3 * med_t:9.3f}), "
                    f"per query {1e3 * best_t / q:8.3f} ms",
                    flush=True,
                )
            del bank, responses
            gc.collect()
    return rows


def bench_faiss(sizes, dims, repeats, hnsw_max_cells: float, threads: int):
    import faiss  # faiss-cpu, optional

    faiss.omp_set_num_threads(threads)
    rows = []
    for dim in dims:
        for n in sizes:
            bank = unit_rows(n, dim, seed=1)
            picks = np.random.default_rng(5).integers(0, n, size=32)
            query = bank[picks] + 0.5 * unit_rows(32, dim, seed=6)
            query /= np.linalg.norm(query, axis=1, keepdims=True)
            exact, _ = top_candidates(query @ bank.T, 9)
            t_numpy = timed(lambda query=query, bank=bank: top_candidates(query[:1] @ bank.T, 9), repeats)[0]
            flat = faiss.IndexFlatIP(dim)
            flat.add(bank)
            t_flat = timed(lambda flat=flat, query=query: flat.search(query[:1], 9), repeats)[0]
            t_hnsw = build = recall = float("nan")
            hnsw = None
            if n * dim <= hnsw_max_cells:
                start = time.perf_counter()
                hnsw = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
                hnsw.hnsw.efConstruction = 40
                hnsw.add(bank)
                build = time.perf_counter() - start
                hnsw.hnsw.efSearch = 64
                t_hnsw = timed(lambda hnsw=hnsw, query=query: hnsw.search(query[:1], 9), repeats)[0]
                _, found = hnsw.search(query, 9)
                recall = float(np.mean([len(set(a) & set(b)) / 9
                                        for a, b in zip(exact.tolist(), found.tolist(), strict=False)]))
            row = {"n_cases": n, "dim": dim, "numpy_top9_ms": 1e3 * t_numpy, "faiss_flat_ms": 1e3 * t_flat,
                   "faiss_hnsw_ms": 1e3 * t_hnsw, "hnsw_build_s": build, "hnsw_recall_at_9": recall}
            rows.append(row)
            write_csv("faiss_scaling.csv", rows, quiet=True)
            print(
                f"  N={n:>9,} d={dim:>4}: numpy {row['numpy_top9_ms']:8.3f} ms | "
                f"faiss flat {row['faiss_flat_ms']:8.3f} ms"
                f" | hnsw {row['faiss_hnsw_ms']:7.3f} ms (build {build:6.1f} s, recall@9 {recall:.3f})",
                flush=True,
            )
            del flat, hnsw, bank
            gc.collect()
    return rows


def bench_embedder(name: str):
    from r2mad_core.memory.embeddings import get_embedder

    start = time.perf_counter()
    embedder = get_embedder(name)
    load = time.perf_counter() - start
    short = [f"Agent {k} argues that option {k % 10} follows from the law of demand." for k in range(256)]
    paragraph = (
        "The agent first restates the question, then recalls the definition of price elasticity of demand "
        "as the percentage change in quantity demanded divided by the percentage change in price, computes "
        "both percentage changes from the numbers given, compares the magnitude of the ratio with one, and "
        "concludes which option describes the demand curve, noting that the other agents reached a different "
        "conclusion because they used the arc formula instead of the point formula. "
    )
    long = [f"Response {k}. " + paragraph * 3 for k in range(48)]
    rows = []
    for label, texts in (("short", short), ("long", long)):
        tokens = None
        tokenizer = getattr(getattr(embedder, "model", None), "tokenizer", None)
        if tokenizer is not None:
            tokens = statistics.mean(len(tokenizer(t)["input_ids"]) for t in texts[:8])
        embedder.encode(texts[:8])
        start = time.perf_counter()
        embedder.encode(texts, batch_size=32)
        seconds = time.perf_counter() - start
        rows.append({"embedder": embedder.name, "texts": label, "count": len(texts),
                     "mean_tokens": tokens, "sentences_per_s": len(texts) / seconds, "load_s": load})
        print(f"  {embedder.name} {label:5s}: {len(texts) / seconds:8.1f} texts/s "
              f"(mean {tokens} tokens before truncation; load {load:.1f} s)", flush=True)
    return rows


def write_csv(name: str, rows: list[dict], quiet: bool = False) -> None:
    if not rows:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / name).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if not quiet:
        print(f"wrote {RESULTS / name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 1024])
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--faiss", action="store_true", help="also time faiss-cpu (must be installed)")
    parser.add_argument("--faiss-sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--faiss-dims", type=int, nargs="+", default=None, help="default: --dims")
    parser.add_argument("--hnsw-max-cells", type=float, default=1.1e8,
                        help="build HNSW only when N x d is at most this (the build is slow on 2 cores)")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--skip-embedder", action="store_true")
    parser.add_argument("--skip-numpy", action="store_true")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS (threadpoolctl) and faiss OpenMP threads; 1 is steadiest on a shared machine")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.blas_threads)
    print(f"BLAS threads: {args.blas_threads}")

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()}, "
          f"numpy {np.__version__}")
    if not args.skip_numpy:
        print("retrieval + confidence (numpy brute force, state-aware MMR, K=3):")
        write_csv("retrieval_scaling.csv", bench_numpy(args.sizes, args.dims, args.queries, args.repeats))
    if args.faiss:
        print("candidate stage: numpy vs faiss (Q=1):")
        write_csv("faiss_scaling.csv", bench_faiss(args.faiss_sizes, args.faiss_dims or args.dims,
                                                   max(5, args.repeats // 2), args.hnsw_max_cells, args.blas_threads))
    if not args.skip_embedder:
        print("embedder throughput:")
        write_csv("embedder_throughput.csv", bench_embedder(args.embedder))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
