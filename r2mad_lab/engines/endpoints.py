"""Several servers of one model: least busy first, and a circuit breaker per endpoint (failover).

Part of the engine boundary (docs/design.md); no equation of the paper. A request goes to the live endpoint with
the fewest requests in flight (ties in turn). An endpoint whose attempt fails in a way worth retrying (refused
connection, timeout, HTTP 429/5xx, a malformed body) is taken out for a backoff period -- exponential in its
consecutive failures, with full jitter, at least a ``Retry-After`` it sent (:class:`~r2mad_lab.engines.
openai_compat.RetryPolicy`) -- and the requests go to the live ones; a success puts it back at once. Without this, a
server that refuses connections looks least busy (it answers at once) and receives every retry.

Adaptive back-off (as inspect's adaptive connections do): an endpoint given a capacity (its declared
batch, vLLM's ``max_num_seqs``) takes at most ``limit`` requests at once; HTTP 429/503 halves the limit (to half of
what it had in flight), every answer raises it by one, up to the capacity. An endpoint with no capacity (the budget
gateway's) is bounded by nothing here.

Who fails, and how often, is counted per endpoint (:meth:`EndpointPool.summary`); :meth:`EndpointPool.describe_failed`
says which endpoints failed and how, for the one line a run ends with when none is live. Used by
:class:`~r2mad_lab.engines.openai_compat.OpenAICompatEngine` and the budget's forwarding gateway
(:class:`~r2mad_lab.experiments.budget.ForwardingGateway`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

#: Longest single wait while no endpoint is live (the stop flag is looked at in between).
WAIT_SLICE_SECONDS = 0.2


def without_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` part (what a URL looks like in every printed line and file)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("@", 1)[-1] if "@" in url else url
    if parts.username is None and parts.password is None and "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


@dataclass
class EndpointState:
    """One endpoint's counters and breaker state (``open_until``: a ``time.monotonic()`` value)."""

    url: str
    in_flight: int = 0
    sent: int = 0
    answered: int = 0
    failed: int = 0
    consecutive_failures: int = 0
    open_until: float = 0.0
    last_error: str = ""
    capacity: int | None = None  # the most requests in flight it takes (None: no bound here)
    limit: float = float("inf")  # the adaptive bound now: halved on 429/503, +1 per answer, up to capacity

    @property
    def shown(self) -> str:
        return without_userinfo(self.url)


class EndpointPool:
    """The endpoints of one engine or gateway. ``backoff(k, retry_after)`` is how long an endpoint stays out after its
    ``k+1``-th consecutive failure."""

    def __init__(self, urls: Sequence[str], backoff: Callable[[int, float | None], float],
                 capacities: Sequence[int | None] | None = None) -> None:
        if not urls:
            raise ValueError("expected at least one endpoint URL like http://host:8000/v1")
        self.endpoints = {url: EndpointState(url) for url in urls}
        for state, capacity in zip(self.endpoints.values(), capacities or (), strict=False):
            if capacity is not None:
                state.capacity, state.limit = capacity, float(capacity)
        self._order = list(self.endpoints)
        self._next = 0
        self._backoff = backoff
        self._lock = threading.Lock()

    def _live(self, now: float) -> list[EndpointState]:
        return [self.endpoints[u] for u in self._order if self.endpoints[u].open_until <= now]

    def any_live(self) -> bool:
        with self._lock:
            return bool(self._live(time.monotonic()))

    def try_acquire(self) -> tuple[str | None, float]:
        """``(url, 0)``: the least busy live endpoint with room under its limit, now counted in flight;
        ``(None, seconds)``: none is live (or every live one is full), the first out comes back in ``seconds``;
        ``(None, None)``: every endpoint is live and full (one comes free when an attempt ends)."""
        with self._lock:
            now = time.monotonic()
            live = [e for e in self._live(now) if e.in_flight < e.limit]
            if not live:
                out = [e.open_until for e in self.endpoints.values() if e.open_until > now]
                return None, (min(out) - now if out else None)
            count = len(self._order)
            rotated = [self.endpoints[self._order[(self._next + k) % count]] for k in range(count)]
            chosen = min((e for e in rotated if e in live), key=lambda e: e.in_flight)
            self._next = (self._order.index(chosen.url) + 1) % count
            chosen.in_flight += 1
            chosen.sent += 1
            return chosen.url, 0.0

    def acquire(self, stop: threading.Event | None = None) -> str | None:
        """The least busy live endpoint (waiting while none is live); ``None`` when ``stop`` was set meanwhile."""
        while True:
            url, wait = self.try_acquire()
            if url is not None:
                return url
            pause = max(0.001, min(WAIT_SLICE_SECONDS if wait is None else wait, WAIT_SLICE_SECONDS))
            if stop is not None:
                if stop.wait(pause):
                    return None
            else:
                time.sleep(pause)

    def succeeded(self, url: str) -> None:
        """The endpoint answered (any answer that is not a fault to retry): it is live again."""
        with self._lock:
            state = self.endpoints[url]
            state.in_flight -= 1
            state.answered += 1
            state.consecutive_failures = 0
            state.open_until = 0.0
            if state.capacity is not None and state.limit < state.capacity:
                state.limit = min(float(state.capacity), state.limit + 1.0)

    def released(self, url: str) -> None:
        """The attempt ended without telling anything about the endpoint (stopped, interrupted)."""
        with self._lock:
            self.endpoints[url].in_flight -= 1
            self.endpoints[url].sent -= 1

    def failed(self, url: str, description: str, retry_after: float | None = None, overloaded: bool = False) -> bool:
        """The endpoint failed an attempt: out for its backoff; ``overloaded`` (HTTP 429/503) also halves its limit
        on requests in flight (to half of what it had in flight, at least 1). Returns whether another endpoint is
        still live."""
        with self._lock:
            state = self.endpoints[url]
            if overloaded and state.capacity is not None:
                state.limit = max(1.0, min(state.limit, float(state.in_flight)) / 2.0)
            state.in_flight -= 1
            state.failed += 1
            state.consecutive_failures += 1
            state.last_error = description
            now = time.monotonic()
            state.open_until = now + max(0.0, self._backoff(state.consecutive_failures - 1, retry_after))
            return bool(self._live(now))

    def describe_failed(self) -> str:
        """Which endpoints failed and how: ``"http://a/v1: 3 failed, last ConnectError: ...; ..."``."""
        with self._lock:
            return "; ".join(f"{e.shown}: {e.failed} attempt(s) failed, last {e.last_error}"
                             for e in self.endpoints.values() if e.failed) or "no endpoint failed"

    def summary(self) -> str:
        """Requests per endpoint: ``"http://a/v1 0 answered of 3 sent (3 failed); http://b/v1 18 answered of 18
        sent"``."""
        with self._lock:
            return "; ".join(f"{e.shown} {e.answered} answered of {e.sent} sent"
                             + (f" ({e.failed} failed, last {e.last_error})" if e.failed else "")
                             for e in self.endpoints.values())

    def counts(self) -> dict[str, int]:
        """Attempts sent per endpoint URL (as shown: no user-info)."""
        with self._lock:
            return {e.shown: e.sent for e in self.endpoints.values()}


__all__ = ["EndpointPool", "EndpointState", "without_userinfo"]
