"""Modelled vLLM servers on 127.0.0.1 for benchmarks/request_path.py (issue 62): OpenAI-compatible
``/v1/chat/completions`` whose reply time follows a throughput model, not a fixed delay.

The model of one server (one GPU):

- at most ``max_num_seqs`` requests run at once (vLLM's batch); up to ``queue`` more wait in its queue, first come
  first served; a request beyond those gets HTTP 429 (``Retry-After: 1``);
- a running request spends ``ttft`` seconds in prefill (its time to first token), then decodes ``tokens`` tokens;
- the decoding requests share ``tokens_per_second`` (the GPU's output throughput), each at most
  ``max_tokens_per_second_per_seq`` (one sequence alone cannot use the whole GPU): processor sharing, computed
  exactly with a virtual clock (a heap of finish levels; O(log n) per event).

Saturated, a server answers ``tokens_per_second / tokens`` requests a second: 3,200 / 128 = 25 by default, the
rate of one H200 for an 8B model (vLLM's CI: ~22.6 requests/s); it saturates once
``tokens_per_second / max_tokens_per_second_per_seq`` = 32 requests decode at once, so a client must keep
~35-128 in flight per server to keep it busy.

Run: ``python benchmarks/fake_vllm.py --servers 8`` prints one JSON line ``{"ports": [...]}`` and serves until
stdin closes. ``GET /stats`` on a port: ``{"completed", "refused", "most_running", "busy_seconds", "since"}``
(``busy_seconds``: time with at least the saturating number decoding).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import sys
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    max_num_seqs: int = 128
    queue: int = 256
    ttft: float = 0.2
    tokens: int = 128
    tokens_per_second: float = 3200.0
    max_tokens_per_second_per_seq: float = 100.0

    @property
    def capacity(self) -> float:
        """Requests a second when saturated."""
        return self.tokens_per_second / self.tokens


class ModelledServer:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.running = 0
        self.waiting: deque[asyncio.Future[None]] = deque()
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._count = itertools.count()
        self._level = 0.0  # tokens decoded so far by each decoding request (the virtual clock)
        self._last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self.completed = self.refused = self.most_running = 0
        self.busy_seconds = 0.0
        self.since = time.monotonic()

    def _per_sequence(self) -> float:
        n = len(self._heap)
        return min(self.model.max_tokens_per_second_per_seq, self.model.tokens_per_second / n) if n else 0.0

    def _advance(self) -> None:
        now = time.monotonic()
        elapsed = now - self._last
        self._level += elapsed * self._per_sequence()
        if len(self._heap) * self.model.max_tokens_per_second_per_seq >= self.model.tokens_per_second:
            self.busy_seconds += elapsed
        self._last = now

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap:
            delay = max(0.0, (self._heap[0][0] - self._level) / self._per_sequence())
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._advance()
        while self._heap and self._heap[0][0] <= self._level + 1e-6:
            _, _, future = heapq.heappop(self._heap)
            if not future.done():
                future.set_result(None)
        self._reschedule()

    async def generate(self) -> bool:
        """One request through the model; ``False``: refused (over the queue)."""
        if self.running + len(self.waiting) >= self.model.max_num_seqs + self.model.queue:
            self.refused += 1
            return False
        loop = asyncio.get_running_loop()
        if self.running >= self.model.max_num_seqs:
            admitted = loop.create_future()
            self.waiting.append(admitted)
            await admitted
        else:
            self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.model.ttft)
            self._advance()
            done = loop.create_future()
            heapq.heappush(self._heap, (self._level + self.model.tokens, next(self._count), done))
            self._reschedule()
            await done
            self.completed += 1
        finally:
            if self.waiting:
                self.waiting.popleft().set_result(None)  # its slot passes on: running stays the same
            else:
                self.running -= 1
        return True

    def stats(self) -> dict[str, float]:
        self._advance()
        return {"completed": self.completed, "refused": self.refused, "most_running": self.most_running,
                "busy_seconds": round(self.busy_seconds, 3), "since": self.since}


def _reply(body: dict, model: Model) -> bytes:
    text = "modelled answer " + str(body.get("seed"))
    return json.dumps({
        "id": "chatcmpl-modelled", "object": "chat.completion", "model": body.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": sum(len(m.get("content", "")) // 4 for m in body.get("messages", [])),
                  "completion_tokens": model.tokens},
    }).encode()


def _response(status: int, payload: bytes, extra: str = "") -> bytes:
    reason = {200: "OK", 404: "Not Found", 429: "Too Many Requests"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            f"{extra}\r\n").encode() + payload


async def _connection(server: ModelledServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                if line[:15].lower() == "content-length:":
                    length = int(line[15:])
            raw = await reader.readexactly(length) if length else b""
            if method == "GET" and path.endswith("/models"):
                out = _response(200, json.dumps({"object": "list", "data": [
                    {"id": "modelled", "object": "model", "owned_by": "vllm"}]}).encode())
            elif method == "GET" and path.endswith("/stats"):
                out = _response(200, json.dumps(server.stats()).encode())
            elif method == "POST" and path.endswith("/chat/completions"):
                body = json.loads(raw)
                if await server.generate():
                    out = _response(200, _reply(body, server.model))
                else:
                    out = _response(429, b'{"error": "over capacity"}', "Retry-After: 1\r\n")
            else:
                out = _response(404, b'{"error": "not found"}')
            writer.write(out)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def serve(n: int, model: Model, ports: list[int] | None = None) -> None:
    servers = []
    for k in range(n):
        modelled = ModelledServer(model)
        handler = (lambda m: (lambda r, w: _connection(m, r, w)))(modelled)
        servers.append(await asyncio.start_server(handler, "127.0.0.1", (ports or [0] * n)[k], backlog=4096))
    print(json.dumps({"ports": [s.sockets[0].getsockname()[1] for s in servers],
                      "capacity_per_server": model.capacity, "max_num_seqs": model.max_num_seqs}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=8)
    for name, value in vars(Model()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    model = Model(**{name: getattr(args, name) for name in vars(Model())})
    asyncio.run(serve(args.servers, model))


if __name__ == "__main__":
    main()
