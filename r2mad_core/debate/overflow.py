"""What the debate does with a prompt that does not fit the model's context (the ``overflow_policy``).

A debate prompt grows with every round (Eq. 1: agent i's conversation keeps x, its own earlier responses and
the peers' Z^(t-1); R2-MAD adds the retrieved experiences E_i^(t) of Eq. 8). At the paper's settings a round-2
R2-MAD prompt is 4-16K tokens, but one peer that loops to ``max_tokens`` makes it 31-46K, past a model's
context. A backend never sends such a prompt: it returns an empty completion with ``cut="context_overflow"``
(:class:`r2mad_core.engine.Completion`), counted apart in every run's metrics. The policy decides what
happens next (:data:`OVERFLOW_POLICIES`):

- ``empty`` (default; the authors' code, KylJin/R2-MAD ``src/models.py``: a prompt longer than vLLM's
  ``max_model_len`` is skipped with a warning and its response is ``""``; the paper says nothing): the agent's
  turn is the empty response, recorded and counted.
- ``trim_experiences`` (ours; keeps the debate going): the oldest retrieved experiences are left out, one at a
  time (the earliest round's first, :func:`r2mad_core.debate.prompt_parsing.drop_oldest_experience`), and the request
  is sent again until it fits; the turn records how many were left out (``trimmed_experiences``). A prompt with
  no experience left to drop (MAD, or still too long) ends as under ``empty``.
- ``raise``: the run stops with one line naming the request (fix: a longer context, a smaller max_tokens).

:func:`with_overflow_policy` wraps an engine with the policy; ``empty`` returns the engine itself.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any, Iterator, Sequence

from r2mad_core.debate.prompt_parsing import drop_oldest_experience
from r2mad_core.engine import Completion, EngineError, Request, collect_in_order

logger = logging.getLogger(__name__)

OVERFLOW_POLICIES = ("empty", "trim_experiences", "raise")
DEFAULT_OVERFLOW_POLICY = "empty"


def check_overflow_policy(policy: Any) -> str:
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow_policy: expected one of {OVERFLOW_POLICIES}, found {policy!r}")
    return str(policy)


def is_overflow(completion: Completion) -> bool:
    """A prompt that did not fit (a completion cached before ``cut`` existed: ``length`` with no token)."""
    if completion.cut is not None:
        return completion.cut == "context_overflow"
    return completion.finish_reason == "length" and completion.completion_tokens == 0


class OverflowPolicyEngine:
    """``backend`` with the ``trim_experiences`` or ``raise`` policy (module docstring). Streams when the
    backend streams; takes concurrent calls when the backend does (``backend`` is what
    :func:`r2mad_core.debate.scheduling.accepts_concurrent_calls` reads)."""

    def __init__(self, backend: Any, policy: str) -> None:
        self.backend = backend
        self.policy = check_overflow_policy(policy)
        self.identity = backend.identity
        self.model = backend.model
        self.ledger = backend.ledger
        self._lock = threading.Lock()
        self.trimmed = 0  # requests that fit after experiences were left out

    def _stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        stream = getattr(self.backend, "generate_iter", None)
        if stream is not None:
            yield from stream(requests)
        else:
            yield from enumerate(self.backend.generate(list(requests)))

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        requests = list(requests)
        overflowed: list[tuple[int, Completion]] = []
        for index, completion in self._stream(requests):
            if not is_overflow(completion):
                yield index, completion
                continue
            if self.policy == "raise":
                raise EngineError(
                    f"{self.identity} ({self.model}): a prompt of {completion.prompt_tokens} tokens does not fit the "
                    f"context (tag {request_tag(requests[index])!r}, overflow_policy raise); fix: a longer context "
                    "(max_model_len), a smaller max_tokens, or overflow_policy trim_experiences / empty"
                )
            overflowed.append((index, completion))
        for index, completion in overflowed:
            yield index, self._trimmed(requests[index], completion)

    def _trimmed(self, request: Request, completion: Completion) -> Completion:
        """Leave out the oldest experiences one at a time until the prompt fits (or none is left)."""
        messages, dropped = list(request.messages), 0
        while True:
            messages, removed = drop_oldest_experience(messages)
            if not removed:
                break
            dropped += 1
            completion = collect_in_order(self._stream([replace(request, messages=tuple(messages))]), 1)[0]
            if not is_overflow(completion):
                with self._lock:
                    self.trimmed += 1
                logger.info("overflow_policy trim_experiences: a prompt fits with %d experience(s) left out", dropped)
                break
        return replace(completion, trimmed_experiences=dropped if not is_overflow(completion) else 0)

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return collect_in_order(self.generate_iter(requests), len(requests))

    def close(self) -> None:
        self.backend.close()


def request_tag(request: Request) -> str:
    return request.tag


def with_overflow_policy(engine: Any, policy: str) -> Any:
    """``engine`` under ``policy``: itself for ``empty`` (the backends' own behaviour), else wrapped."""
    if check_overflow_policy(policy) == DEFAULT_OVERFLOW_POLICY:
        return engine
    return OverflowPolicyEngine(engine, policy)
