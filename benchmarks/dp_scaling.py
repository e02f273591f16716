"""Data-parallel scaling over N OpenAI-compatible endpoints of fixed capacity (issue 34): wall time vs 1/N.

Each simulated endpoint is a fake OpenAI-compatible server on 127.0.0.1 with ``--slots`` concurrent slots (a request
waits for a free slot) and a fixed delay per generated token (``--token-ms``): a GPU replica of fixed capacity, as
one ``vllm serve`` process (or one rank of ``--data-parallel-size N``). The client is the project's own ``openai``
engine (:class:`r2mad_lab.engines.openai_compat.OpenAICompatEngine`) with the N base URLs and ``slots x N`` requests
in flight, as a paper profile with ``base_urls`` per model sends them. The workload: ``--requests`` requests of
``--tokens`` tokens each. Prints wall time, speed-up and efficiency for 1, 2, 4, 8 endpoints against the target
(speed-up >= 0.8 N). Not a test: figures go to benchmarks/README.md.

    python benchmarks/dp_scaling.py [--requests 384] [--slots 4] [--tokens 20] [--token-ms 5]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from r2mad_lab.engines import Request, SamplingParams
from r2mad_lab.engines.openai_compat import OpenAICompatEngine


class Endpoint:
    """A fake ``/v1/chat/completions`` with ``slots`` concurrent slots and ``token_seconds`` per generated token."""

    def __init__(self, slots: int, token_seconds: float) -> None:
        gate = threading.BoundedSemaphore(slots)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                self.send_response(404)
                self.end_headers()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                tokens = int(body.get("max_tokens") or 16)
                with gate:
                    time.sleep(tokens * token_seconds)
                reply = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"], "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "tok " * tokens},
                     "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run(n: int, requests: int, slots: int, tokens: int, token_seconds: float) -> float:
    endpoints = [Endpoint(slots, token_seconds) for _ in range(n)]
    try:
        engine = OpenAICompatEngine("fake", [e.url for e in endpoints], api_key_env=None, max_concurrency=slots * n,
                                    neutral_sampling=False, max_retries=0)
        batch = [Request(({"role": "user", "content": f"q{i}"},), SamplingParams(max_tokens=tokens), sample_index=i)
                 for i in range(requests)]
        start = time.perf_counter()
        done = engine.generate(batch)
        seconds = time.perf_counter() - start
        engine.close()
        assert sum(c.completion_tokens for c in done) == requests * tokens, "a request came back short"
        return seconds
    finally:
        for e in endpoints:
            e.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=384)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument("--endpoints", default="1,2,4,8")
    args = parser.parse_args()
    ideal_one = args.requests / args.slots * args.tokens * args.token_ms / 1000
    print(f"dp_scaling: {args.requests} requests x {args.tokens} tokens, {args.slots} slots per endpoint, "
          f"{args.token_ms:g} ms/token (ideal on 1 endpoint: {ideal_one:.2f} s); load average "
          f"{os.getloadavg()[0]:.1f}")
    base = None
    print("endpoints  wall s  speed-up  efficiency  target (speed-up >= 0.8 N)")
    for n in [int(x) for x in args.endpoints.split(",")]:
        seconds = run(n, args.requests, args.slots, args.tokens, args.token_ms / 1000)
        base = base or seconds * n  # the 1-endpoint time (first row)
        speedup = base / seconds
        print(f"{n:9d}  {seconds:6.2f}  {speedup:8.2f}  {speedup / n:10.0%}  "
              f"{'met' if speedup >= 0.8 * n else 'MISSED'}")


if __name__ == "__main__":
    main()
