"""A small HTTP/1.1 client on asyncio streams: keep-alive connections to one server, the ``openai`` engine's wire.

Part of the engine boundary (docs/design.md); no equation of the paper. :class:`HostPool` keeps idle keep-alive
connections to one ``scheme://host:port`` and sends requests whose head is fixed per pool (:func:`request_head`):
the same bytes, in the same order and casing, as the ``httpx.AsyncClient`` it replaced sent (tests/engines/
test_engine_async_path.py compares them). It reads an answer framed by ``Content-Length``, ``chunked`` or the
connection's end, and undoes ``gzip`` / ``deflate`` (the encodings the head accepts). Per request it costs a few
string operations where httpx built request and response objects, header models and anyio stream wrappers
(benchmarks/README.md, "The request path").

What it does not do (:func:`direct_target` says so, and the engine keeps httpx for such a URL): proxies from the
environment, credentials in the URL, a query in the base URL, hosts that are not plain ASCII.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import zlib
from typing import Any, Sequence
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

#: An idle connection older than this is closed rather than reused (httpx's ``keepalive_expiry`` before).
KEEPALIVE_EXPIRY_SECONDS = 60.0
_LINE_LIMIT = 1 << 16


class RequestError(Exception):
    """A request that got no complete answer (named as httpx named it: the class name is part of the message)."""


class ConnectError(RequestError):
    pass


class ConnectTimeout(RequestError):
    pass


class RemoteProtocolError(RequestError):
    pass


class ReadError(RequestError):
    pass


class WriteError(RequestError):
    pass


class Response:
    """An answer: status, headers (names lower-cased), the body decoded of its content encoding."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def direct_target(url: str) -> tuple[str, str, int, str] | None:
    """``(scheme, host, port, path)`` of a base URL this client serves itself, or ``None`` (httpx's case: a proxy
    from the environment applies, credentials or a query in the URL, a host that is not plain ASCII)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        return None
    if parts.username is not None or parts.password is not None or not parts.hostname.isascii():
        return None
    proxies = getproxies()
    if (proxies.get(parts.scheme) or proxies.get("all")) and not proxy_bypass(parts.hostname):
        return None
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname, port or default, parts.path


def request_head(method: str, host_header: str, target: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """The request line and header lines (without ``Content-Length``) in httpx's order: Host, Accept, Connection,
    User-Agent, then the client's own headers as given."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}", "Accept: */*", "Connection: keep-alive"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


class _Connection:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.idle_since = reader, writer, 0.0

    def usable(self, now: float) -> bool:
        return (not self.reader.at_eof() and not self.writer.is_closing()
                and now - self.idle_since < KEEPALIVE_EXPIRY_SECONDS)

    def close(self) -> None:
        try:
            self.writer.close()
        except (OSError, RuntimeError):
            pass


class HostPool:
    """Keep-alive connections to one server (the event loop's thread only). ``path``: the base URL's path (request
    targets are below it); ``headers``: the client's headers after httpx's own (User-Agent first);
    ``connect_timeout`` bounds opening a connection (TLS included)."""

    def __init__(self, scheme: str, host: str, port: int, path: str, headers: Sequence[tuple[str, str]], *,
                 connect_timeout: float, ssl_context: ssl.SSLContext | None = None) -> None:
        self.host, self.port, self.path, self.connect_timeout = host, port, path, connect_timeout
        self.ssl = ssl_context if scheme == "https" else None
        default = 443 if scheme == "https" else 80
        shown = f"[{host}]" if ":" in host else host
        self.host_header = shown if port == default else f"{shown}:{port}"
        self.headers = list(headers)
        self._heads: dict[tuple[str, str], bytes] = {}
        self._idle: list[_Connection] = []

    def _head(self, method: str, target: str) -> bytes:
        head = self._heads.get((method, target))
        if head is None:
            head = self._heads[(method, target)] = request_head(method, self.host_header, target, self.headers)
        return head

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.ssl, server_hostname=self.host if self.ssl else None,
                    limit=_LINE_LIMIT)
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {self.host_header} within {self.connect_timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer)

    def _take(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def request(self, method: str, target: str, body: bytes | None = None) -> Response:
        """Send one request and read its whole answer. Raises :class:`RequestError`; a cancelled request's
        connection is closed, never reused."""
        connection = self._take() or await self._connect()
        head = self._head(method, target)
        data = head + (b"\r\n" if body is None else b"Content-Length: %d\r\n\r\n" % len(body) + body)
        reusable = False
        try:
            try:
                connection.writer.write(data)
                await connection.writer.drain()
            except (OSError, RuntimeError) as exc:
                raise WriteError(str(exc) or type(exc).__name__) from exc
            response, reusable = await _read_response(connection.reader, head_only=method == "HEAD")
            return response
        finally:
            if reusable:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


async def _read_response(reader: asyncio.StreamReader, head_only: bool = False) -> tuple[Response, bool]:
    """One answer from ``reader`` (informational 1xx answers skipped) and whether the connection can be reused."""
    try:
        while True:
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw[:-4].decode("latin-1").split("\r\n")
            status_line = lines[0].split(" ", 2)
            if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
                raise RemoteProtocolError(f"malformed status line {lines[0][:80]!r}")
            status = int(status_line[1])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise RemoteProtocolError(f"malformed header line {line[:80]!r}")
                name = name.strip().lower()
                value = value.strip()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            if 100 <= status < 200 and status != 101:
                continue
            break
        reusable = status_line[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if head_only or status in (204, 304):
            content = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            content = await _read_chunked(reader)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"].split(",")[0])
            except ValueError:
                raise RemoteProtocolError(f"malformed Content-Length {headers['content-length']!r}") from None
            content = await reader.readexactly(length) if length else b""
        else:
            content = await reader.read(-1)  # framed by the connection's end
            reusable = False
    except asyncio.IncompleteReadError as exc:
        raise RemoteProtocolError("Server disconnected without sending a complete response.") from exc
    except asyncio.LimitOverrunError as exc:
        raise RemoteProtocolError("a response header line longer than 64 KiB") from exc
    except (OSError, RuntimeError) as exc:
        raise ReadError(str(exc) or type(exc).__name__) from exc
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "deflate") and content:
        try:
            content = zlib.decompress(content, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        except zlib.error:
            try:  # raw deflate, as some servers send it
                content = zlib.decompress(content, -zlib.MAX_WBITS)
            except zlib.error:
                raise RemoteProtocolError(f"a {encoding} body that does not decompress") from None
    return Response(status, headers, content), reusable


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise RemoteProtocolError(f"malformed chunk size {size_line[:40]!r}") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (>= 0); ``None`` when absent or not a number (an HTTP date is not read)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def user_agent() -> str:
    """The User-Agent the engine has always sent (httpx's): kept so the bytes of a request do not change."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"python-httpx/{version('httpx')}"
    except PackageNotFoundError:
        return "python-httpx"


