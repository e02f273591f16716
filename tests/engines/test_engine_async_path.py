"""The ``openai`` backend's request path (issue 62): one event-loop thread, no thread per request, the bytes sent
equal those of the thread-per-request client it replaced, adaptive back-off on 429/503, per-server capacity.

The golden bytes below were captured from the client at dc0c295 (a ``ThreadPoolExecutor`` over ``httpx.Client``)
for the same requests: the body and the header lines, the ``Host`` port left out."""

from __future__ import annotations

import hashlib
import socket
import threading
from typing import Any

import httpx
import pytest
from fake_openai_server import FakeOpenAIServer

from r2mad_core.engine import Request, SamplingParams
from r2mad_lab.engines.openai_compat import OpenAICompatEngine

REPLY = (b'{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
         b'"usage":{"prompt_tokens":3,"completion_tokens":1}}')


class RawCapture:
    """A one-connection-at-a-time HTTP/1.1 server on 127.0.0.1 that keeps every request's raw bytes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.raw: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.raw.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(REPLY)).encode() + b"\r\n\r\n" + REPLY)

    def close(self) -> None:
        self.sock.close()


def _requests() -> list[Request]:
    return [
        Request(messages=({"role": "system", "content": "You are an economist. \u00e9\u4e2d"},
                          {"role": "user", "content": "Question \"one\"\n"}),
                params=SamplingParams(temperature=0.7, top_p=0.9, max_tokens=32, seed=3)),
        Request(messages=({"role": "user", "content": "two"},),
                params=SamplingParams(temperature=1.0, top_p=1.0, max_tokens=6144, seed=0, logprobs=True),
                sample_index=2, tag="judge"),
    ]


def _normalised(raw: bytes) -> tuple[bytes, list[bytes], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    return lines[0], sorted(line for line in lines[1:] if not line.lower().startswith(b"host:")), body


#: sha256 of each request's body, and the request line and headers (Host left out), from the client at dc0c295.
GOLDEN_BODIES = ["5c0d1a384f5df425e8251a2849df7f12b5ed1035de991cf36ebaecbb58f22b88",
                 "4004dab7639a05eb420efb0fdc35527cf6cb25f12dbc21d8e7d29a1ed343ed5e"]
GOLDEN_HEADERS = [b"Accept-Encoding: gzip, deflate", b"Accept: */*", b"Authorization: Bearer sk-golden",
                  b"Connection: keep-alive", b"Content-Type: application/json",
                  b"User-Agent: python-httpx/" + httpx.__version__.encode()]


def test_the_bytes_sent_equal_those_of_the_thread_per_request_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_GOLDEN_KEY", "sk-golden")
    capture = RawCapture()
    try:
        with OpenAICompatEngine("golden-model", capture.base_url, api_key_env="R2MAD_GOLDEN_KEY", max_concurrency=1,
                                neutral_sampling=True, jitter_seed=0) as engine:
            for request in _requests():  # one at a time: the order of the captures is the order of the requests
                engine.generate([request])
    finally:
        capture.close()
    seen = [_normalised(raw) for raw in capture.raw]
    assert [hashlib.sha256(body).hexdigest() for _, _, body in seen] == GOLDEN_BODIES
    for request_line, headers, body in seen:
        assert request_line == b"POST /v1/chat/completions HTTP/1.1"
        assert headers == sorted(GOLDEN_HEADERS + [b"Content-Length: " + str(len(body)).encode()])


def _ask(text: str) -> Request:
    return Request(messages=({"role": "user", "content": text},), params=SamplingParams(max_tokens=8))


def test_requests_in_flight_are_coroutines_not_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 requests held at the server until all 64 have arrived: they are in flight together, and the engine
    started no thread for them (the only threads started are the fake server's, one per connection, and at most
    the process's one event-loop thread)."""
    release = threading.Event()
    count = {"n": 0}
    lock = threading.Lock()

    def responder(body: dict[str, Any]) -> str:
        with lock:
            count["n"] += 1
            if count["n"] == 64:
                release.set()
        release.wait(60)
        return "held " + body["messages"][-1]["content"]

    started: list[str] = []
    original = threading.Thread.start

    def recording_start(self: threading.Thread) -> None:
        started.append(self.name)
        original(self)

    with FakeOpenAIServer(responder=responder) as server:
        server._httpd.socket.listen(128)  # 64 connections at once: http.server's backlog of 5 would drop SYNs
        engine = OpenAICompatEngine("m", server.base_url, api_key_env=None, max_concurrency=64, neutral_sampling=False)
        monkeypatch.setattr(threading.Thread, "start", recording_start)
        try:
            out = engine.generate([_ask(f"q{i}") for i in range(64)])
        finally:
            monkeypatch.undo()
            engine.close()
        assert server.max_concurrent == 64 and release.is_set()
    assert [c.text for c in out] == [f"held q{i}" for i in range(64)]
    ours = [name for name in started if "process_request_thread" not in name]
    assert ours in ([], ["r2mad-openai-loop"]), ours


class OverloadedServer:
    """A server of capacity ``capacity``: a request beyond it in flight gets HTTP 429 with ``Retry-After``; the
    others are answered after 0.05 s. Records, for each refused prompt sent again, how long after its refusal."""

    def __init__(self, capacity: int, retry_after: float) -> None:
        import json
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.capacity, self.in_flight, self.most = capacity, 0, 0
        self.refused: dict[str, float] = {}  # prompt -> when it was last refused
        self.gaps: list[float] = []  # for each retry of a refused prompt: seconds since its refusal
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                now = time.monotonic()
                with outer.lock:
                    if prompt in outer.refused:
                        outer.gaps.append(now - outer.refused.pop(prompt))
                    over = outer.in_flight >= outer.capacity
                    if over:
                        outer.refused[prompt] = now
                    else:
                        outer.in_flight += 1
                        outer.most = max(outer.most, outer.in_flight)
                if over:
                    payload, status, extra = b'{"error": "over capacity"}', 429, {"Retry-After": str(retry_after)}
                else:
                    time.sleep(0.05)
                    payload, status, extra = REPLY, 200, {}
                    with outer.lock:
                        outer.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # 16 connections at once (http.server's 5 would drop some)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_server_that_answers_429_sees_backed_off_retries_and_a_lower_limit() -> None:
    """16 requests at once against a server that takes 2: the refused ones come back no sooner than its
    Retry-After (0.3 s), the endpoint's limit falls below the 16 it was declared for, and every request is
    answered."""
    server = OverloadedServer(capacity=2, retry_after=0.3)
    try:
        engine = OpenAICompatEngine("m", server.base_url, api_key_env=None, max_concurrency=16, max_retries=50,
                                    initial_backoff_seconds=0.01, max_backoff_seconds=1.0, jitter_seed=0,
                                    neutral_sampling=False)
        pool, limits = engine.endpoints, []
        failed = pool.failed

        def failed_and_seen(*args: Any, **kwargs: Any) -> Any:  # the limit right after each refusal
            result = failed(*args, **kwargs)
            limits.append(pool.endpoints[server.base_url].limit)
            return result

        pool.failed = failed_and_seen
        try:
            out = engine.generate([_ask(f"q{i}") for i in range(16)])
            state = pool.endpoints[server.base_url]
        finally:
            engine.close()
    finally:
        server.close()
    assert [c.text for c in out] == ["ok"] * 16
    assert server.gaps, "the server refused nothing: the test did not overload it"
    assert min(server.gaps) >= 0.3, f"a refused request came back {min(server.gaps):.3f} s after its 429"
    # the limit fell below the declared 16 on the refusals (how far it has climbed back by the end, one per answer,
    # depends on the order the answers and refusals arrived in: not asserted)
    assert state.failed == len(server.gaps) == len(limits) and state.capacity == 16 and min(limits) < 16


def test_each_url_gets_at_most_its_declared_capacity() -> None:
    """max_concurrency 16 over two URLs of capacity 3 each: neither server sees more than 3 at once."""
    with FakeOpenAIServer(delay_seconds=0.05) as a, FakeOpenAIServer(delay_seconds=0.05) as b:
        with OpenAICompatEngine("m", [a.base_url, b.base_url], api_key_env=None, max_concurrency=16,
                                max_concurrency_per_url=3, neutral_sampling=False) as engine:
            out = engine.generate([_ask(f"q{i}") for i in range(30)])
        assert len(out) == 30 and a.requests_served + b.requests_served == 30
        assert a.max_concurrent <= 3 and b.max_concurrent <= 3


def test_the_limit_halves_on_overload_and_climbs_back_one_per_answer() -> None:
    from r2mad_lab.engines.endpoints import EndpointPool

    pool = EndpointPool(["u"], lambda retry, after: 0.0, capacities=[8])
    urls = [pool.try_acquire()[0] for _ in range(8)]
    assert urls == ["u"] * 8 and pool.try_acquire() == (None, None)  # full, none out: wait for a release
    pool.failed("u", "HTTP 429", overloaded=True)  # 8 in flight when refused -> limit 4
    assert pool.endpoints["u"].limit == 4.0
    for _ in range(7):
        pool.succeeded("u")
    assert pool.endpoints["u"].limit == 8.0  # +1 per answer, never above the capacity
    gateway = EndpointPool(["g"], lambda retry, after: 0.0)  # no capacity: unbounded, 429 changes nothing
    for _ in range(100):
        assert gateway.try_acquire()[0] == "g"
    gateway.failed("g", "HTTP 429", overloaded=True)
    assert gateway.endpoints["g"].limit == float("inf")
