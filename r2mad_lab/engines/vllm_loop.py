"""The engine thread of the ``vllm`` backend.

One thread drives vLLM's ``LLMEngine``, callers in any threads
submit requests to it and wait for their own completions (continuous batching for the question-by-
question schedule, :mod:`r2mad_core.debate.scheduling`).

Every request is one generation of the debate -- Eq. 1 for a turn, Eq. 2 for a summary; this module decides only
*when* vLLM sees it: as soon as its caller submits it, beside whatever else is running (:class:`EngineLoop`).
:class:`_DeathWatch` turns an engine core killed without a word into vLLM's own ``EngineDeadError``. Nothing here
imports vLLM: the loop calls the ``LLMEngine`` it is given (tests give a fake), and
:mod:`r2mad_lab.engines.vllm_backend` turns what comes back into completions and one-line errors.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)


class _DeathWatch:
    """Unblock ``llm_engine.step()`` when the engine core process dies without a word.

    vLLM 0.32's multiprocess client notices a killed EngineCore (e.g. the OOM killer) and marks itself
    dead, but a ``step()`` already waiting for outputs then waits forever. While a batch runs, this
    thread checks the client's ``resources.engine_dead`` flag every ``interval`` seconds and, once it
    is set, puts an exception into the client's output queue: ``step()`` then raises vLLM's own
    ``EngineDeadError``. Engines without these attributes (in-process cores, fakes) are not watched.
    """

    def __init__(self, llm_engine: Any, interval: float = 0.5) -> None:
        core = getattr(llm_engine, "engine_core", None)
        self._resources = getattr(core, "resources", None)
        self._queue = getattr(core, "outputs_queue", None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if (self._resources is not None and hasattr(self._resources, "engine_dead")
                and hasattr(self._queue, "put_nowait")):
            self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True,
                                            name="r2mad-vllm-deathwatch")
            self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if getattr(self._resources, "engine_dead", False):
                self._queue.put_nowait(RuntimeError("the EngineCore process died"))
                return

    def stop(self) -> None:
        self._stop.set()


class Call:
    """One caller's mailbox: the engine thread puts ``("output", RequestOutput)`` for each finished request
    of the call, or one ``("error", exception)`` / ``("lost", count)`` / ``("closed", None)``."""

    __slots__ = ("mailbox",)

    def __init__(self) -> None:
        self.mailbox: "queue.SimpleQueue[tuple[str, Any]]" = queue.SimpleQueue()


class EngineLoop:
    """The one thread that drives a vLLM ``LLMEngine``; callers in any threads submit requests and wait.

    vLLM's ``LLMEngine`` (``add_request``/``step``/``abort_request``) is not safe to call from several threads,
    and ``step()`` blocks until the engine core has run one iteration. So this thread alone calls it: each
    turn it adds every request submitted since the last turn (one call's requests together), aborts what
    callers gave up on, runs one ``step()`` if anything is unfinished, and routes each finished output to the
    mailbox of the call it belongs to. New requests thus join the running batch after at most one engine
    iteration: the batch stays full while questions advance on their own (continuous batching).

    Failures: ``add_request`` raising (``VLLMValidationError``) fails only that call, after aborting the
    requests of it already added; ``step()`` raising (``EngineDeadError``, a crash) aborts every unfinished
    request and fails every call waiting. While requests run, a :class:`_DeathWatch` unblocks a ``step()``
    that waits on an engine core killed without a word.

    Counters for tests and benchmarks: ``steps`` (``step()`` calls), ``max_unfinished`` (most requests in the
    engine at once), ``max_calls`` (most calls with requests in the engine at once).
    """

    def __init__(self, llm_engine: Any, *, poll_seconds: float = 0.5) -> None:
        self.engine = llm_engine
        self.poll_seconds = poll_seconds
        self.steps = 0
        self.max_unfinished = 0
        self.max_calls = 0
        self._cond = threading.Condition()
        self._incoming: list[tuple[Call, list[tuple[str, Any, Any]]]] = []
        self._aborts: list[str] = []
        self._closing = False
        self._routes: dict[str, Call] = {}  # the engine thread's own: request id -> call
        self._thread = threading.Thread(target=self._run, name="r2mad-vllm-engine", daemon=True)
        self._thread.start()

    # -- callers' side -----------------------------------------------------------------------------

    def submit(self, call: Call, items: list[tuple[str, Any, Any]]) -> None:
        """Queue ``(request_id, prompt, sampling_params)`` items; the engine thread adds them together."""
        with self._cond:
            if self._closing or not self._thread.is_alive():
                call.mailbox.put(("closed", None))
                return
            self._incoming.append((call, items))
            self._cond.notify_all()

    def abort(self, request_ids: Sequence[str]) -> None:
        """Abort requests a caller no longer waits for (unknown or finished ids are ignored)."""
        with self._cond:
            self._aborts.extend(request_ids)
            self._cond.notify_all()

    def wait(self, call: Call) -> tuple[str, Any]:
        """The next message for ``call`` (interruptible; ``("closed", None)`` once the thread has ended)."""
        while True:
            try:
                return call.mailbox.get(timeout=self.poll_seconds)
            except queue.Empty:
                if not self._thread.is_alive():
                    try:
                        return call.mailbox.get_nowait()
                    except queue.Empty:
                        return ("closed", None)

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread: unfinished requests are aborted and their callers told ``closed``."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the engine thread -------------------------------------------------------------------------

    def _run(self) -> None:
        watch: _DeathWatch | None = None
        try:
            while True:
                with self._cond:
                    while not (self._incoming or self._aborts or self._routes or self._closing):
                        self._cond.wait()
                    if self._closing:
                        return
                    incoming, self._incoming = self._incoming, []
                    aborts, self._aborts = self._aborts, []
                for call, items in incoming:  # before the aborts: a call's abort never precedes its submit
                    self._add(call, items)
                if aborts:
                    self._abort([i for i in aborts if self._routes.pop(i, None) is not None])
                if not self._routes:
                    if watch is not None:
                        watch.stop()
                        watch = None
                    continue
                if watch is None:
                    watch = _DeathWatch(self.engine)
                self.max_unfinished = max(self.max_unfinished, len(self._routes))
                self.max_calls = max(self.max_calls, len({id(c) for c in self._routes.values()}))
                if not self.engine.has_unfinished_requests():
                    self._fail_all(lambda calls: ("lost", calls))
                    continue
                try:
                    self.steps += 1
                    outputs = self.engine.step()
                except Exception as exc:  # EngineDeadError, a crash in the engine core: every call fails
                    self._abort(list(self._routes))
                    self._fail_all(lambda calls, exc=exc: ("error", exc))
                    continue
                for output in outputs:
                    if getattr(output, "finished", False):
                        call = self._routes.pop(output.request_id, None)
                        if call is not None:
                            call.mailbox.put(("output", output))
        finally:
            if watch is not None:
                watch.stop()
            with self._cond:
                self._closing = True
                incoming, self._incoming = self._incoming, []
            if self._routes:
                self._abort(list(self._routes))
            calls = {id(c): c for c in self._routes.values()}
            calls.update({id(c): c for c, _ in incoming})
            self._routes.clear()
            for call in calls.values():
                call.mailbox.put(("closed", None))

    def _add(self, call: Call, items: list[tuple[str, Any, Any]]) -> None:
        added: list[str] = []
        try:
            for request_id, prompt, params in items:
                self.engine.add_request(request_id, prompt, params)
                added.append(request_id)
                self._routes[request_id] = call
        except Exception as exc:  # VLLMValidationError, a dead engine: this call fails, nothing of it keeps running
            for request_id in added:
                self._routes.pop(request_id, None)
            self._abort(added)
            call.mailbox.put(("error", exc))

    def _abort(self, request_ids: list[str]) -> None:
        if not request_ids:
            return
        try:
            self.engine.abort_request(request_ids)
        except Exception as exc:  # the engine may be dead already
            logger.debug("vllm backend: abort_request failed: %s", exc)

    def _fail_all(self, message: Callable[[int], tuple[str, Any]]) -> None:
        """Give every call with requests in the engine one failure message; forget their requests."""
        counts: dict[int, list[Any]] = {}
        for call in self._routes.values():
            counts.setdefault(id(call), [call, 0])[1] += 1
        self._routes.clear()
        for call, count in counts.values():
            call.mailbox.put(message(count))
