"""The ``openai`` backend's request path against modelled vLLM servers (issue 62): achieved requests/s against the
servers' capacity at 1, 2, 4 and 8 servers, and the package's CPU per request, for three clients in one run, with
the machine's load beside each line (:data:`CLIENTS`): ``old``, a thread per request over ``httpx.Client``
(r2mad_lab/engines/openai_compat.py at dc0c295, read from git into a temporary module); ``httpx``, coroutines on
one event-loop thread over ``httpx.AsyncClient`` pools (at dc2d4db, read likewise); ``new``, today's: coroutines
over the package's own HTTP/1.1 client (r2mad_lab/engines/http1.py).

The servers (benchmarks/fake_vllm.py, one process, a port each) answer 25 requests/s each when busy (3,200 tokens/s
shared by the decoding requests, 128 tokens a reply, 0.2 s to the first token, batch 128, 429 beyond a queue of
256). Each point runs in a child process of its own (its CPU is the client's alone: the servers' process is
apart) and sends ``seconds`` x capacity requests at ``max_num_seqs`` in flight per server (8 servers: 1,024 in
flight), through ``generate_iter`` as the debate loop does. Between the 20th and the 80th percentile of the
completions (the ramp up and the drain left out), read from the servers (``GET /stats``): req/s, what they answered
a second; busy, the share of that time each server had enough requests decoding to run at its full throughput
(32 or more), averaged over the servers.

    python benchmarks/request_path.py                 # 1, 2, 4, 8 servers, the three clients
    python benchmarks/request_path.py --servers 8 --clients new --seconds 30
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The clients measured side by side: a commit whose engines/openai_compat.py is read from git, or None for today's.
CLIENTS = {
    "old": "dc0c295",  # a thread per request over httpx.Client
    "httpx": "dc2d4db",  # coroutines on one event-loop thread over httpx.AsyncClient pools
    "new": None,  # coroutines over the package's own HTTP/1.1 client (r2mad_lab/engines/http1.py)
}


def old_client_module(directory: Path, commit: str) -> object | None:
    """The client at ``commit`` as a module, or ``None`` when this is not a git checkout."""
    try:
        source = subprocess.run(["git", "show", f"{commit}:r2mad_lab/engines/openai_compat.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = directory / f"r2mad_openai_compat_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"r2mad_openai_compat_{commit}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  (dataclasses look their module up)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def point(client: str, ports: list[int], per_server: int, requests: int, timeout: float) -> dict:
    """(child process) One run: ``requests`` requests over the servers at ``ports``; timings and CPU."""
    sys.path.insert(0, str(ROOT))
    from r2mad_core.engine import Request, SamplingParams

    urls = [f"http://127.0.0.1:{port}/v1" for port in ports]
    options = dict(api_key_env=None, max_concurrency=per_server * len(urls), timeout_seconds=timeout,
                   connect_timeout_seconds=120.0,  # 1,024 connections opened at once on a loaded 2-core machine
                   neutral_sampling=False, max_retries=20)
    with tempfile.TemporaryDirectory() as scratch:
        if client == "old":
            module = old_client_module(Path(scratch), CLIENTS[client])
            if module is None:
                return {"skipped": "not a git checkout: the old client cannot be read"}
            engine = module.OpenAICompatEngine("modelled", urls, **options)
        elif CLIENTS[client] is not None:
            module = old_client_module(Path(scratch), CLIENTS[client])
            if module is None:
                return {"skipped": "not a git checkout: the old client cannot be read"}
            engine = module.OpenAICompatEngine("modelled", urls, max_concurrency_per_url=per_server, **options)
        else:
            from r2mad_lab.engines.openai_compat import OpenAICompatEngine

            engine = OpenAICompatEngine("modelled", urls, max_concurrency_per_url=per_server, **options)
        batch = [Request(messages=({"role": "system", "content": "You are a careful economist."},
                                   {"role": "user", "content": f"Question {i}: which statement is true?"}),
                         params=SamplingParams(max_tokens=128, seed=1), sample_index=i % 3) for i in range(requests)]
        import threading

        cpu0, wall0 = time.process_time(), time.monotonic()
        arrivals = 0
        marks = {int(0.2 * requests): None, int(0.8 * requests): None}
        most_threads = threading.active_count()
        for _index, _completion in engine.generate_iter(batch):
            arrivals += 1
            if arrivals in marks:
                marks[arrivals] = (time.monotonic(), server_stats(ports))
            if arrivals % 64 == 0:
                most_threads = max(most_threads, threading.active_count())
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        engine.close()
    (t0, first), (t1, last) = marks.values()
    span = max(1e-9, t1 - t0)
    busy = sum(b["busy_seconds"] - a["busy_seconds"] for a, b in zip(first, last, strict=False)) / (span * len(ports))
    rate = sum(b["completed"] - a["completed"] for a, b in zip(first, last, strict=False)) / span
    return {"requests": arrivals, "wall": wall, "cpu": cpu, "steady_rate": rate, "busy": busy,
            "threads": most_threads}


def server_stats(ports: list[int]) -> list[dict]:
    import urllib.request

    return [json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=60).read())
            for port in ports]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument("--clients", nargs="*", default=list(CLIENTS), choices=list(CLIENTS))
    parser.add_argument("--seconds", type=float, default=20.0, help="requests per point: seconds x capacity")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # child: client,ports,per_server,requests
    args = parser.parse_args(argv)
    if args.point:
        client, ports, per_server, requests = args.point.split(";")
        result = point(client, json.loads(ports), int(per_server), int(requests), timeout=600.0)
        print(json.dumps(result))
        return 0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fake_vllm import Model

    model = Model()
    most = max(args.servers)
    servers = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fake_vllm.py"), "--servers", str(most)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(servers.stdout.readline())  # type: ignore[union-attr]
        ports = info["ports"]
        print(f"modelled vLLM servers: {model.capacity:g} requests/s each when busy ({model.tokens_per_second:g} "
              f"tokens/s, {model.tokens} tokens a reply, ttft {model.ttft} s, batch {model.max_num_seqs}); "
              f"{os.cpu_count()} cores")
        print(f"{'servers':>7} {'client':>6} {'in flight':>9} {'requests':>8} {'req/s':>7} {'of cap.':>7} {'busy':>6} "
              f"{'CPU ms/req':>10} {'threads':>7} {'wall s':>7}  load (1 min) before/after")
        for n in args.servers:
            for client in args.clients:
                requests = int(args.seconds * model.capacity * n)
                load = os.getloadavg()[0]
                child = subprocess.run(
                    [sys.executable, __file__, "--point",
                     f"{client};{json.dumps(ports[:n])};{model.max_num_seqs};{requests}"],
                    capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
                try:
                    result = json.loads(child.stdout.strip().splitlines()[-1])
                except (IndexError, ValueError):
                    print(f"{n:>7} {client:>6} failed: {child.stderr.strip().splitlines()[-1:]}")
                    continue
                if "skipped" in result:
                    print(f"{n:>7} {client:>6} skipped: {result['skipped']}")
                    continue
                busy = result["busy"]
                print(f"{n:>7} {client:>6} {model.max_num_seqs * n:>9} {result['requests']:>8} "
                      f"{result['steady_rate']:>7.1f} {result['steady_rate'] / (model.capacity * n):>7.0%} "
                      f"{busy:>6.1%} "
                      f"{1000 * result['cpu'] / result['requests']:>10.2f} "
                      f"{result['threads']:>7} {result['wall']:>7.1f}  {load:.2f}/{os.getloadavg()[0]:.2f}",
                      flush=True)
    finally:
        servers.stdin.close()  # type: ignore[union-attr]
        servers.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
