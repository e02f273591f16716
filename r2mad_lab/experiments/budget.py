"""What an API run will cost, and a hard cap on what it may spend (the ``api`` profile).

The paper runs GPT-4o-mini and Llama-3.3-70B through APIs (Section 5.1, Table "large models"); a
reproduction through a paid OpenAI-compatible endpoint must say what it will send before it sends
anything, and must be able to stop at a budget. Both are done by a small HTTP gateway that sits
between the notebooks' ``openai`` engine and the endpoint, so no method code changes:

- **Estimate** (:class:`EstimatingGateway`): the notebooks run once against the gateway, which answers
  every chat-completion request itself, at once, with a reply of ``max_tokens`` filler tokens that
  holds no answer (so no debate stops early: the request count is the protocol's maximum, Eq. 1 for
  every agent and round, summaries and judges included). It counts the requests per notebook, the
  prompt tokens estimated from the prompts actually built (:func:`estimate_tokens`: 4 characters a
  token, plus 4 per message) and the completion tokens at ``max_tokens`` each. Both token counts are
  upper-bound-minded estimates, not a tokenizer's; requests already in the response cache from an
  earlier run are counted too (a rerun does not send them again).
- **Cap** (:class:`ForwardingGateway` with a :class:`BudgetCap`): during the real run every request
  goes through the gateway to the endpoint(s). Before forwarding request N+1 the gateway reserves
  its worst case (1 request, its estimated prompt tokens and ``max_tokens`` completion tokens); when
  that would pass ``max_requests`` or ``max_cost`` the request is refused with HTTP 402 and never
  sent. A request that left the process counts, whatever came back (an HTTP 500, a reset or timed-out
  connection, an answer whose ``usage`` cannot be read: the endpoint saw it and may bill it); only one that
  never reached it (the connection could not be made) is given back. So the printed count of requests sent
  is what the endpoint saw, and a failing endpoint cannot be sent more than the cap by the engine's retries. The engine
  does not retry a 402: it stops the batch, keeps every completion that came back (the response cache writes each one as
  it arrives), and the notebook stops. Requests already in flight are allowed to finish, so nothing is cut mid-write,
  and the cap is never passed. A rerun with a higher cap resumes: cached completions are not sent again and count
  nothing.

Money is ``prompt_tokens * price_prompt + completion_tokens * price_completion`` per million tokens;
without prices only requests and tokens are reported. Spent money is computed from the usage the
endpoint reports (the estimate when it reports none).
"""

from __future__ import annotations

import json
import math
import random
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Sequence

from r2mad_lab.engines.endpoints import EndpointPool, without_userinfo
from r2mad_lab.engines.openai_compat import RetryPolicy

if TYPE_CHECKING:  # httpx is imported only where a request is forwarded
    import httpx

#: Characters per token of the estimate (English text and code average about 4 in BPE tokenizers).
CHARS_PER_TOKEN = 4
#: Tokens added per chat message (role and separators).
TOKENS_PER_MESSAGE = 4
#: The filler word of the estimating replies: ``CHARS_PER_TOKEN`` characters, no answer in it.
FILLER_TOKEN = "zzz "
#: HTTP status of a request refused by the cap (not retried by the openai engine).
REFUSED_STATUS = 402


def estimate_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """Estimated prompt tokens of chat ``messages``: ceil(characters / 4) per message plus 4 each."""
    total = 0
    for message in messages:
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content)
        total += math.ceil(len(content) / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE
    return total


@dataclass(frozen=True)
class Prices:
    """Prices in money units (e.g. USD) per million prompt and completion tokens; None: not given."""

    prompt_per_million: float | None = None
    completion_per_million: float | None = None

    @property
    def known(self) -> bool:
        return self.prompt_per_million is not None and self.completion_per_million is not None

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float | None:
        if not self.known:
            return None
        return (prompt_tokens * self.prompt_per_million + completion_tokens * self.completion_per_million) / 1e6  # type: ignore[operator]


@dataclass
class Usage:
    """Requests and tokens (one notebook's, or a total)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: "Usage") -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def minus(self, other: "Usage") -> "Usage":
        return Usage(self.requests - other.requests, self.prompt_tokens - other.prompt_tokens,
                     self.completion_tokens - other.completion_tokens)

    def copy(self) -> "Usage":
        return Usage(self.requests, self.prompt_tokens, self.completion_tokens)

    def describe(self, prices: Prices) -> str:
        text = (f"{self.requests} requests, ~{self.prompt_tokens:,} prompt tokens, "
                f"<= {self.completion_tokens:,} completion tokens")
        cost = prices.cost(self.prompt_tokens, self.completion_tokens)
        return text + (f", <= {cost:.4f} (money at the given prices)" if cost is not None else "")


class BudgetExceeded(Exception):
    """Request N+1 would pass the cap; it was not sent."""


@dataclass
class BudgetCap:
    """``max_requests`` and/or ``max_cost`` over the requests this process sends (None: no limit).

    :meth:`reserve` before sending (raises :class:`BudgetExceeded` when the worst case of this
    request, added to what was spent and what is in flight, passes a limit; the request counts as sent from
    here on), :meth:`settle` once it is over with the usage the endpoint reported (or the worst case when it
    reported none it could read), :meth:`release` only when the request never left (nothing sent).
    """

    max_requests: int | None = None
    max_cost: float | None = None
    prices: Prices = field(default_factory=Prices)
    spent: Usage = field(default_factory=Usage)
    refused: int = 0
    _in_flight_requests: int = 0
    _in_flight_cost: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.max_cost is not None and not self.prices.known:
            raise ValueError("a max_cost cap needs both prices (per million prompt and completion tokens)")
        if self.max_requests is not None and self.max_requests < 0:
            raise ValueError(f"max_requests must be >= 0, found {self.max_requests}")
        if self.max_cost is not None and not self.max_cost >= 0:
            raise ValueError(f"max_cost must be >= 0, found {self.max_cost}")

    @property
    def spent_cost(self) -> float | None:
        return self.prices.cost(self.spent.prompt_tokens, self.spent.completion_tokens)

    def reserve(self, prompt_tokens: int, max_tokens: int) -> float:
        """Reserve one request's worst case; returns the reserved cost (pass it to settle/release)."""
        worst = self.prices.cost(prompt_tokens, max_tokens) or 0.0
        with self._lock:
            if self.max_requests is not None and self.spent.requests + 1 > self.max_requests:
                self.refused += 1
                raise BudgetExceeded(
                    f"max_requests {self.max_requests} reached ({self.spent.requests} sent, "
                    f"{self._in_flight_requests} of them in flight)"
                )
            spent_cost = self.spent_cost or 0.0
            if self.max_cost is not None and spent_cost + self._in_flight_cost + worst > self.max_cost:
                self.refused += 1
                raise BudgetExceeded(
                    f"max_cost {self.max_cost:g} reached ({spent_cost:.4f} spent, {self._in_flight_cost:.4f} "
                    f"reserved in flight, this request could cost up to {worst:.4f})"
                )
            self._in_flight_requests += 1
            self._in_flight_cost += worst
            self.spent.requests += 1  # sent from here on, whatever comes back (release() if it never leaves)
        return worst

    def settle(self, reserved: float, prompt_tokens: int, completion_tokens: int) -> None:
        """The request is over: it cost ``prompt_tokens`` and ``completion_tokens`` (what the endpoint reported,
        else the worst case reserved)."""
        with self._lock:
            self._in_flight_requests -= 1
            self._in_flight_cost -= reserved
            self.spent.add(Usage(0, prompt_tokens, completion_tokens))

    def release(self, reserved: float) -> None:
        """The request never left the process (no connection): nothing sent, nothing spent."""
        with self._lock:
            self._in_flight_requests -= 1
            self._in_flight_cost -= reserved
            self.spent.requests -= 1

    def describe(self) -> str:
        limits = []
        if self.max_requests is not None:
            limits.append(f"max_requests {self.max_requests}")
        if self.max_cost is not None:
            limits.append(f"max_cost {self.max_cost:g}")
        return ", ".join(limits) or "no cap"


# --------------------------------------------------------------------------------------------
# The gateways
# --------------------------------------------------------------------------------------------
class _Gateway:
    """A threaded HTTP server on 127.0.0.1 that takes the engine's ``/chat/completions`` requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "_Gateway":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "_Gateway":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def handle_post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        raise NotImplementedError

    def handle_get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        return 404, b'{"error": {"message": "not found"}}', {}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", headers.get("content-type", "application/json"))
                    self.send_header("Content-Length", str(len(payload)))
                    if "retry-after" in headers:
                        self.send_header("Retry-After", headers["retry-after"])
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                self._reply(*gateway.handle_post(self.path, body, {k.lower(): v for k, v in self.headers.items()}))

            def do_GET(self) -> None:
                self._reply(*gateway.handle_get(self.path, {k.lower(): v for k, v in self.headers.items()}))

        return Handler


def _error(status: int, message: str, kind: str) -> tuple[int, bytes, dict[str, str]]:
    return status, json.dumps({"error": {"message": message, "type": kind}}).encode(), {}


class EstimatingGateway(_Gateway):
    """Answers every request itself with ``max_tokens`` filler tokens (no answer in them) and counts
    requests and estimated tokens; :meth:`snapshot` between notebooks gives per-notebook usage."""

    def __init__(self) -> None:
        super().__init__()
        self.usage = Usage()
        self.models: set[str] = set()

    def snapshot(self) -> Usage:
        with self._lock:
            return self.usage.copy()

    def handle_post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        if not path.endswith("/chat/completions"):
            return _error(404, f"no such endpoint {path}", "not_found")
        try:
            request = json.loads(body)
            messages = request["messages"]
            max_tokens = int(request.get("max_tokens") or 0)
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"malformed request ({exc})", "invalid_request")
        prompt_tokens = estimate_tokens(messages)
        with self._lock:
            self.usage.add(Usage(1, prompt_tokens, max_tokens))
            self.models.add(str(request.get("model")))
            number = int(self.usage.requests)
        # each reply differs (its number first): two later prompts built from replies are never the same request, so
        # the response cache cannot fold them into one (summaries of rounds with equal replies did: 6 of 9 counted)
        text = f"#{number} " + FILLER_TOKEN * max(max_tokens - 1, 0)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "length",
        }
        if request.get("logprobs"):
            choice["logprobs"] = {
                "content": [{"token": FILLER_TOKEN, "logprob": -1.0, "top_logprobs": []}] * max_tokens}
        reply = {
            "id": "r2mad-estimate", "object": "chat.completion", "model": request.get("model"), "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                      "total_tokens": prompt_tokens + max_tokens},
        }
        return 200, json.dumps(reply).encode(), {}


class ForwardingGateway(_Gateway):
    """Forwards requests to the endpoint(s) ``upstreams`` (least busy first, failing over between them:
    :class:`~r2mad_lab.engines.endpoints.EndpointPool`) under a :class:`BudgetCap`.

    The client's headers that matter (Authorization, OpenAI-Organization) are passed on; the
    endpoint's status and body come back unchanged. A refused request gets HTTP 402 and a message
    naming the cap; :attr:`cap` says how many were refused.
    """

    def __init__(self, upstreams: Sequence[str], cap: BudgetCap, *, timeout_seconds: float = 900.0,
                 retry_policy: RetryPolicy | None = None) -> None:
        if not upstreams:
            raise ValueError("ForwardingGateway needs at least one upstream base URL")
        super().__init__()
        self.upstreams = [u.rstrip("/") for u in upstreams]
        self.cap = cap
        policy, rng = retry_policy or RetryPolicy(), random.Random()
        # failover (r2mad_lab.engines.endpoints): an upstream that fails is out for a backoff, the live ones serve
        # (a lone upstream is never taken out: the engine's own retries and backoff decide when it is tried again)
        single = len(self.upstreams) == 1
        self.pool = EndpointPool(self.upstreams, lambda k, after: 0.0 if single else policy.delay(k, rng, after))
        self.timeout_seconds = timeout_seconds  # a total deadline per forwarded request (a trickle is cut off too)
        import httpx  # here, not at the top: a run that forwards nothing (an up-to-date rerun) never loads it

        from r2mad_lab.engines.deadline import bounded_client

        self._client = bounded_client(timeout=httpx.Timeout(timeout_seconds, connect=10.0),
                                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    def stop(self) -> None:
        super().stop()
        self._client.close()

    def _none_live(self, wait: float) -> tuple[int, bytes, dict[str, str]]:
        status, body, headers = _error(503, f"r2mad gateway: no endpoint live ({self.pool.describe_failed()})",
                                       "no_live_endpoint")
        return status, body, {**headers, "retry-after": f"{max(0.0, wait):.2f}"}

    @staticmethod
    def _forwarded_headers(headers: dict[str, str]) -> dict[str, str]:
        keep = {"authorization", "openai-organization", "openai-project", "content-type"}
        return {k: v for k, v in headers.items() if k in keep}

    def _suffix(self, path: str) -> str:
        # the engine posts to <gateway>/v1/<suffix>; the upstream base URL already ends in its own prefix
        return path[len("/v1"):] if path.startswith("/v1") else path

    def handle_get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        import httpx
        url, wait = self.pool.try_acquire()
        if url is None:
            return self._none_live(wait)
        try:
            response = self._client.get(url + self._suffix(path), headers=self._forwarded_headers(headers))
        except httpx.RequestError as exc:
            self.pool.failed(url, f"{type(exc).__name__}: {exc}")
            return _error(502, f"r2mad gateway: {without_userinfo(url)} unreachable ({type(exc).__name__}: {exc})",
                          "bad_gateway")
        self.pool.succeeded(url)
        return (response.status_code, response.content,
                {"content-type": response.headers.get("content-type", "application/json")})

    def handle_post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        import httpx

        from r2mad_lab.engines.deadline import attempt_limits

        try:
            request = json.loads(body)
            prompt_tokens = estimate_tokens(request["messages"])
            max_tokens = int(request.get("max_tokens") or 0)
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"r2mad gateway: malformed request ({exc})", "invalid_request")
        try:
            reserved = self.cap.reserve(prompt_tokens, max_tokens)
        except BudgetExceeded as exc:
            return _error(REFUSED_STATUS, f"r2mad budget cap: {exc}; request not sent", "budget_cap")
        # counted as sent (reserve) unless no connection could be made (then the next live upstream gets it, at most
        # one try each); settled with the endpoint's usage when it reported one that can be read, else with the worst
        # case reserved (an error answer may be billed too)
        sent, tokens = False, (prompt_tokens, max_tokens)
        try:
            for _ in self.upstreams:
                url, wait = self.pool.try_acquire()
                if url is None:
                    return self._none_live(wait)
                sent = True
                try:
                    with attempt_limits(self.timeout_seconds):
                        response = self._client.post(url + self._suffix(path), content=body,
                                                     headers=self._forwarded_headers(headers))
                except httpx.RequestError as exc:
                    sent = not isinstance(exc, not_sent_errors())
                    self.pool.failed(url, f"{type(exc).__name__}: {exc}")
                    if not sent:
                        continue
                    return _error(502, f"r2mad gateway: {without_userinfo(url)} failed after the request was sent "
                                  f"({type(exc).__name__}: {exc})", "bad_gateway")
                tokens = _reported_tokens(response, default=tokens)
                extra = {"content-type": response.headers.get("content-type", "application/json")}
                if "retry-after" in response.headers:
                    extra["retry-after"] = response.headers["retry-after"]
                if response.status_code == 429 or response.status_code >= 500:
                    self.pool.failed(url, f"HTTP {response.status_code}", _seconds(response.headers.get("retry-after")))
                else:
                    self.pool.succeeded(url)
                return response.status_code, response.content, extra
            return _error(502, f"r2mad gateway: every endpoint unreachable ({self.pool.describe_failed()})",
                          "bad_gateway")
        finally:
            if sent:
                self.cap.settle(reserved, *tokens)
            else:
                self.cap.release(reserved)


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None


def not_sent_errors() -> tuple[type[Exception], ...]:
    """The request errors after which the endpoint has not seen the request: no connection was made."""
    import httpx

    return httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol


def _reported_tokens(response: httpx.Response, default: tuple[int, int]) -> tuple[int, int]:
    """``(prompt, completion)`` tokens of an answer's ``usage``, each count the endpoint left out or reported in a
    form that cannot be read (a string, an object) replaced by ``default``'s."""
    try:
        data = response.json()
    except ValueError:
        return default
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return default
    counts = []
    for name, fallback in zip(("prompt_tokens", "completion_tokens"), default, strict=False):
        value = usage.get(name)
        ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        counts.append(value if ok else fallback)
    return counts[0], counts[1]


def format_estimate(per_notebook: dict[str, Usage], prices: Prices) -> list[str]:
    """The lines of the estimate: one per notebook that sends requests, then the total."""
    total = Usage()
    lines = []
    for notebook, usage in per_notebook.items():
        total.add(usage)
        if usage.requests:
            lines.append(f"  {notebook}: {usage.describe(prices)}")
        else:
            lines.append(f"  {notebook}: no requests")
    lines.append(f"  total: {total.describe(prices)}")
    if not prices.known:
        lines.append("  (no prices given: set R2MAD_API_PRICE_PROMPT and R2MAD_API_PRICE_COMPLETION, per million "
                     "tokens, for a money estimate)")
    return lines
