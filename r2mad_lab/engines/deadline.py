"""One attempt's total deadline for a blocking ``httpx.Client`` (the budget gateway's forwarding requests).

Part of the engine boundary (docs/design.md); no equation of the paper. httpx's timeouts bound each socket operation,
so a server that sends one byte a second keeps a request alive forever under any read timeout: a
:func:`bounded_client`'s requests made inside :func:`attempt_limits` end at that attempt's total deadline, or when
its stop flag is set. The ``openai`` engine itself runs its requests as coroutines and bounds each attempt with
``asyncio.timeout`` (:mod:`r2mad_lab.engines.openai_compat`); only the blocking gateway
(:class:`~r2mad_lab.experiments.budget.ForwardingGateway`) needs this.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from typing import Any, Iterator

import httpcore
import httpx

# --------------------------------------------------------------------------------------------------
# One attempt's total deadline, and stopping attempts in flight
# --------------------------------------------------------------------------------------------------
#: How long one socket read or write waits before the attempt's deadline and stop flag are looked at again.
POLL_SECONDS = 0.2
_attempt = threading.local()  # .deadline (time.monotonic() value or None), .stop (threading.Event or None)


class AttemptStopped(httpcore.NetworkError):
    """An attempt ended by its engine's stop flag (Ctrl-C, close()) while it waited for the server."""


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose reads and writes end at the current attempt's total deadline.

    httpx's timeouts bound each socket operation, so a server that sends one byte a second keeps a request alive
    forever under any read timeout. Every read and write here waits at most :data:`POLL_SECONDS` at a time, and
    between the waits looks at the attempt's deadline (-> ``ReadTimeout``/``WriteTimeout``) and its engine's stop
    flag (-> :class:`AttemptStopped`); a socket wait that timed out consumed nothing, so it is simply repeated."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    @staticmethod
    def _slice(timeout: float | None, expired: type[Exception]) -> tuple[float | None, float | None, bool]:
        """(how long to wait now, when the whole wait ends, whether the wait is cut in slices)."""
        deadline = getattr(_attempt, "deadline", None)
        stop = getattr(_attempt, "stop", None)
        if stop is not None and stop.is_set():
            raise AttemptStopped("stopped while waiting for the server")
        now = time.monotonic()
        end = None if timeout is None else now + timeout
        if deadline is not None:
            if deadline <= now:
                raise expired("the attempt's total deadline (timeout_seconds) passed")
            end = deadline if end is None else min(end, deadline)
        if deadline is None and stop is None:
            return timeout, end, False
        return (POLL_SECONDS if end is None else max(0.0, min(POLL_SECONDS, end - now))), end, True

    def _io(self, operation: Any, expired: type[Exception], timeout: float | None) -> Any:
        while True:
            wait, end, sliced = self._slice(timeout, expired)
            try:
                return operation(wait)
            except (httpcore.ReadTimeout, httpcore.WriteTimeout):
                if not sliced:
                    raise
                if end is not None and time.monotonic() >= end:
                    raise expired("no answer within the attempt's deadline (timeout_seconds)") from None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._io(lambda wait: self._stream.read(max_bytes, wait), httpcore.ReadTimeout, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # in one piece (a request is small; a timed-out sendall leaves unknown how much was sent), up to the deadline
        _, end, _ = self._slice(timeout, httpcore.WriteTimeout)
        self._stream.write(buffer, None if end is None else max(0.001, end - time.monotonic()))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every stream a :class:`_DeadlineStream` (connecting is bounded too)."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    @staticmethod
    def _connect_timeout(timeout: float | None) -> float | None:
        deadline = getattr(_attempt, "deadline", None)
        if deadline is None:
            return timeout
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise httpcore.ConnectTimeout("the attempt's total deadline (timeout_seconds) passed")
        return remaining if timeout is None else min(timeout, remaining)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, self._connect_timeout(timeout), local_address,
                                                         socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(path, self._connect_timeout(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


@functools.lru_cache(maxsize=4)
def _verifying_ssl_context(cert_file: str | None, cert_dir: str | None) -> Any:
    """httpx's default SSL context (certifi's CA bundle, or the SSL_CERT_FILE / SSL_CERT_DIR given), built once per
    setting: httpx built one for every client, reading the whole bundle for each client."""
    return httpx.create_ssl_context()


def bounded_client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` whose requests made inside :func:`attempt_limits` end at that attempt's total deadline or
    when its stop flag is set (proxies from the environment are kept: every transport of the client is wrapped)."""
    if "verify" not in options and options.get("trust_env", True):  # certificates checked as httpx would
        options["verify"] = _verifying_ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    client = httpx.Client(**options)
    transports = [client._transport, *client._mounts.values()]  # noqa: SLF001 (httpx has no public hook for this)
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            raise RuntimeError(f"httpx {httpx.__version__}: cannot bound request times (no network backend found)")
        if not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return client


@contextlib.contextmanager
def attempt_limits(seconds: float | None, stop: threading.Event | None = None) -> Iterator[None]:
    """Requests of a :func:`bounded_client` in this thread end ``seconds`` from now (a total deadline: connecting,
    sending and every byte of the answer) or as soon as ``stop`` is set."""
    saved = (getattr(_attempt, "deadline", None), getattr(_attempt, "stop", None))
    _attempt.deadline = None if seconds is None else time.monotonic() + seconds
    _attempt.stop = stop
    try:
        yield
    finally:
        _attempt.deadline, _attempt.stop = saved
