"""The ``openai`` engine's HTTP/1.1 client (r2mad_lab/engines/http1.py): the request's exact bytes in httpx's order,
answers framed by Content-Length, chunked or the connection's end, gzip undone, keep-alive reuse, and a connection
the server closed while idle never reused. Against raw-socket servers on 127.0.0.1 (one scripted reply each)."""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading

import pytest

from r2mad_lab.engines.http1 import HostPool, RemoteProtocolError, direct_target, user_agent


class Scripted:
    """A server that answers each request with the next reply of ``replies`` and records every request's bytes and
    the connection it came on; ``close_after``: close the connection after each answer."""

    def __init__(self, replies: list[bytes], close_after: bool = False) -> None:
        self.replies, self.close_after = list(replies), close_after
        self.raw: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while self.replies:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.raw.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                conn.sendall(self.replies.pop(0))
                if self.close_after:
                    return

    def close(self) -> None:
        self.sock.close()


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


def _pool(port: int, headers: list[tuple[str, str]] | None = None) -> HostPool:
    return HostPool("http", "127.0.0.1", port, "/v1", headers or [("User-Agent", "ua")], connect_timeout=10.0)


def test_the_request_bytes_are_httpx_s_in_order_and_case() -> None:
    server = Scripted([_ok(b"{}")])
    headers = [("User-Agent", user_agent()), ("Content-Type", "application/json"),
               ("Accept-Encoding", "gzip, deflate"), ("Authorization", "Bearer k")]

    async def go() -> int:
        pool = _pool(server.port, headers)
        try:
            return (await pool.request("POST", "/v1/chat/completions", b'{"a":1}')).status_code
        finally:
            pool.close()

    try:
        assert asyncio.run(go()) == 200
    finally:
        server.close()
    assert server.raw == [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:" + str(server.port).encode()
        + b"\r\nAccept: */*\r\nConnection: keep-alive\r\nUser-Agent: " + user_agent().encode()
        + b"\r\nContent-Type: application/json\r\nAccept-Encoding: gzip, deflate\r\nAuthorization: Bearer k"
        + b"\r\nContent-Length: 7\r\n\r\n{\"a\":1}"]


def test_chunked_gzip_and_close_delimited_answers_are_read_and_keep_alive_reuses_one_connection() -> None:
    packed = gzip.compress(b'{"x": "chunked"}')
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
               + b"%x\r\n" % 5 + packed[:5] + b"\r\n" + b"%x\r\n" % (len(packed) - 5) + packed[5:] + b"\r\n0\r\n\r\n")
    replies = [b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b'{"x": 1}'), chunked,
               b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 2\r\n\r\n{}",
               b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"]
    server = Scripted(replies)

    async def go() -> list:
        pool = _pool(server.port)
        try:
            return [await pool.request("POST", "/v1/chat/completions", b"{}") for _ in range(4)]
        finally:
            pool.close()

    try:
        answers = asyncio.run(go())
    finally:
        server.close()
    assert [a.status_code for a in answers] == [200, 200, 429, 200]
    assert answers[0].json() == {"x": 1} and answers[1].json() == {"x": "chunked"}
    assert answers[2].headers["retry-after"] == "2" and answers[3].text == "until the end"
    assert server.connections == 1  # keep-alive: the four requests on one connection


def test_a_connection_closed_by_the_server_is_not_reused_and_a_cut_answer_is_an_error() -> None:
    server = Scripted([_ok(b"1"), _ok(b"2"), b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"], close_after=True)

    async def go() -> list:
        pool = _pool(server.port)
        out = []
        try:
            for _ in range(2):
                out.append((await pool.request("GET", "/v1/models")).content)
                for _ in range(1000):  # until the server's close has reached the loop (an order, not a time)
                    if all(c.reader.at_eof() for c in pool._idle):
                        break
                    await asyncio.sleep(0.01)
            with pytest.raises(RemoteProtocolError):
                await pool.request("GET", "/v1/models")
        finally:
            pool.close()
        return out

    try:
        assert asyncio.run(go()) == [b"1", b"2"]
    finally:
        server.close()
    assert server.connections == 3
    assert all(raw.startswith(b"GET /v1/models HTTP/1.1\r\n") and b"Content-Length" not in raw for raw in server.raw)


def test_urls_with_credentials_a_query_or_a_proxy_are_left_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert direct_target("http://127.0.0.1:8000/v1") == ("http", "127.0.0.1", 8000, "/v1")
    assert direct_target("https://api.example.com/v1") == ("https", "api.example.com", 443, "/v1")
    assert direct_target("http://user:secret@127.0.0.1:8000/v1") is None
    assert direct_target("http://127.0.0.1:8000/v1?key=1") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert direct_target("http://10.0.0.5:8000/v1") is None
    assert direct_target("http://localhost:8000/v1") == ("http", "localhost", 8000, "/v1")
