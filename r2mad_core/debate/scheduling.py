"""Schedules of a batch of debates: round-synchronous, or question by question over a continuous-batching engine.

The debate of one question is a chain of dependent generations (Eq. 1-3, Eq. 2 for the summaries): round t's
responses Z^(t) of every agent -> the consensus ratio Cons(Z^(t)) (Eq. 3) and the early stop -> the summary
h^(t) (Eq. 2, R2-MAD) -> the round hook (R2-MAD: the debate states s_i^(t+1), retrieval, Eq. 5-6, confidence,
Eq. 7) -> round t+1's requests. Nothing links two questions.

``schedule="rounds"`` (:func:`r2mad_core.debate.loop.run_debate`, the authors' code's structure too): each phase is
one engine call over every active question of the batch, so each phase waits for the slowest sequence of the
whole batch. With long-tailed completion lengths (a thinking model with max_tokens 6144) most of a phase is
tail: the engine's batch drains while a few long sequences finish.

``schedule="questions"`` (:func:`run_questions`): every question advances on its own. As soon as one
question's round-t responses are in, its summary request goes out; as soon as that is in, its hook runs and
its round-t+1 requests go out; it stops early on its own unanimity. The engine sees a steady stream of
requests and keeps its batch full. The phases are the same functions as the round loop's
(:func:`~r2mad_core.debate.loop.select_peers`, :func:`~r2mad_core.debate.loop.round_contexts`,
:func:`~r2mad_core.debate.loop.round_requests`, :func:`~r2mad_core.debate.loop.record_round`,
:func:`~r2mad_core.debate.loop.finish_round`, :func:`~r2mad_core.debate.loop.summarize`) called for one question, so
every request is the same as under ``rounds``; with per-request seeds derived from the request itself
(:func:`r2mad_core.engine.backend_seed`) every completion is the same too, and so is every transcript
except the wall-time fields (``seconds``).

Mechanics of ``questions``:

- one thread per question being debated (it spends its life waiting on the engine).
- the window counts engine requests, ``window`` questions' worth (``window`` x ``n_agents``: the most a
  ``rounds`` chunk of ``window`` questions has out at once). A new question starts while the questions in flight
  claim fewer than that, each claiming its requests still out -- one fewer per completion as it comes back
  (``generate_iter``, :class:`~r2mad_core.engine.StreamingEngine`), its last one until its next phase's
  requests replace it (``n_agents`` for a round, 1 for a summary, none once it is finished). Why not count
  questions: a debate round ends with its slowest agent, so a question in a round keeps on average only part of
  its agents' engine slots busy (1.78 of 3 with the long-tailed lengths of ``benchmarks/throughput.py`` at the
  paper's settings) and counting questions left the rest of the window's slots empty (window 64, 211
  questions: mean batch 94 of the window's 192 requests and 1.51x the throughput of ``rounds``; counting
  requests: mean batch 143, 1.66x; benchmarks/README.md). Questions in flight never wait for room, so the
  requests out may pass ``window`` x ``n_agents`` briefly (a question going from its last request to its next
  round's ``n_agents``; the overshoot is small). An engine with ``generate`` only hands a phase's
  completions back together: its questions claim ``n_agents`` from start to finish, i.e. at most ``window``
  questions are debated at once.
- ``on_finished`` receives questions in input order, so a run's transcript file is the same, line for line,
  under both schedules: a question that finishes before an earlier one waits, in memory, until that one is done.
  At most :data:`HOLD_FACTOR` x ``window`` questions are *in flight* -- started and not yet handed to
  ``on_finished`` -- which is what a SIGKILL can lose; every generation of a finished question is in the
  response cache (when the engine has one, as the command line's does), so a resume replays those without
  generating. Why hold more than the window: with long-tailed completions one slow question would otherwise stop
  new questions from starting while it runs (``benchmarks/throughput.py`` at the paper's settings: holding only
  ``window`` unwritten questions lost much of the gain over ``rounds``; benchmarks/README.md).
- the round hook is called under one lock (one call at a time, as in the round loop; R2-MAD's hook keeps
  state between ``finish_round`` and the next ``prepare_round`` and is not safe to call concurrently).
  ``prepare_round`` gets one question per call under both schedules (:func:`~r2mad_core.debate.loop.round_contexts`:
  numpy's matrix products are not batch-invariant in the last bits, so retrieval and confidence must see the
  same calls). ``finish_round`` (R2-MAD: embed the responses in the background) gets the round's questions
  under ``rounds`` and one question here; the embedding cache is per text, so with a deterministic embedder
  (hashing) the vectors are the same. A neural embedder can differ in the last bits with the batch a text is
  embedded in; with one, transcripts agree up to such differences (a near tie in retrieval could then go
  the other way).
- peer selectors (MAD-M2 masking, possibly an engine call for the judge) are called without a lock: both
  shipped ones are stateless.
- the engine must take concurrent ``generate`` calls (:func:`accepts_concurrent_calls`; the simulated, the
  ``openai``, the ``local`` and the ``vllm`` engines do). One that does not declare it runs ``rounds`` instead,
  with one warning naming the engine: the results are the same, only slower.
- an error in one question (an :class:`~r2mad_core.engine.EngineError`, a hook error) stops the others
  at their next phase; the questions before it that finished are handed over, then the error is raised.
- per-round ``seconds``: the wall time is shared, at every moment, equally among the questions in a round
  phase at that moment; a question's round gets its shares. Summed over questions this is the wall time
  spent in rounds, as under ``rounds`` (where a round's wall time is shared equally among its questions).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from r2mad_core.debate.loop import (
    DebateConfig,
    DebateState,
    PeerSelector,
    RoundHook,
    finish_round,
    generate_checked,
    new_states,
    record_round,
    round_contexts,
    round_requests,
    run_debate,
    select_peers,
    summarize,
)
from r2mad_core.engine import Completion, Engine, Request

if TYPE_CHECKING:  # pragma: no cover
    from r2mad_core.data.benchmarks import Sample

logger = logging.getLogger(__name__)

SCHEDULES = ("rounds", "questions")
DEFAULT_WINDOW = 64
#: A finished question waits for every earlier one to be written; at most HOLD_FACTOR x window questions are
#: started and not yet written (module docstring).
HOLD_FACTOR = 4
CAPABILITY = "concurrent_generate"
#: Engines known to take concurrent ``generate`` calls that do not (yet) carry the ``concurrent_generate``
#: attribute themselves: the HTTP client (a shared, bounded thread pool; the ledger and the URL picker are
#: locked) and the llama.cpp engine that talks through it.
KNOWN_CONCURRENT = frozenset({
    "r2mad_lab.engines.openai_compat.OpenAICompatEngine",
    "r2mad_lab.engines.local.LocalEngine",
})


def accepts_concurrent_calls(engine: Any) -> bool:
    """Whether ``engine.generate`` may be called from several threads at once.

    An engine declares it with a ``concurrent_generate`` attribute (True or False); a wrapper with a
    ``backend`` (the response cache) inherits its backend's answer; the classes in :data:`KNOWN_CONCURRENT`
    count as declared. Anything else does not.
    """
    declared = getattr(engine, CAPABILITY, None)
    if declared is not None:
        return bool(declared)
    kind = type(engine)
    if f"{kind.__module__}.{kind.__qualname__}" in KNOWN_CONCURRENT:
        return True
    backend = getattr(engine, "backend", None)
    if backend is not None and backend is not engine:
        return accepts_concurrent_calls(backend)
    return False


def check_schedule(schedule: Any, window: Any) -> None:
    """ValueError naming the argument when ``schedule`` or ``window`` is not valid."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, found {schedule!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive integer (questions in flight), found {window!r}")


def run_scheduled(
    samples: Sequence["Sample"],
    engine: Engine,
    config: DebateConfig,
    *,
    schedule: str = "rounds",
    window: int | None = None,
    benchmark: str | None = None,
    hook: RoundHook | None = None,
    peer_selector: PeerSelector | None = None,
    on_round: Callable[[int, int], None] | None = None,
    on_finished: Callable[[list[DebateState]], None] | None = None,
) -> list[DebateState]:
    """Debate ``samples`` under ``schedule`` and return their finished states in input order.

    ``on_finished(states)`` receives the finished states in input order, each once: under ``questions`` as soon
    as a question and every one before it are done; under ``rounds`` all at once at the end. ``on_round`` is
    the round loop's progress callback (``rounds`` only). ``window`` (``questions``): engine requests in flight,
    ``window`` questions' worth (module docstring), default :data:`DEFAULT_WINDOW`. An engine that does not
    accept concurrent calls runs ``rounds``.
    """
    check_schedule(schedule, window)
    if not samples:
        return []
    if schedule == "questions":
        if accepts_concurrent_calls(engine):
            states = new_states(samples, benchmark or samples[0].benchmark, config)
            run_questions(states, engine, config, hook=hook, peer_selector=peer_selector, window=window,
                          on_finished=on_finished)
            return states
        logger.warning(
            "schedule 'questions': engine %s does not declare that it takes concurrent calls (%s); "
            "running schedule 'rounds' instead (same transcripts, round barriers)",
            getattr(engine, "identity", type(engine).__name__), CAPABILITY,
        )
    states = run_debate(samples, engine, config, benchmark=benchmark, hook=hook, peer_selector=peer_selector,
                        on_round=on_round)
    if on_finished is not None:
        on_finished(list(states))
    return states


class _Stopped(Exception):
    """Raised inside a question's thread when the run stops (another question failed, or an interrupt)."""


class WallShares:
    """Wall time shared equally among the questions in a round phase at each moment (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = time.perf_counter()
        self._open: dict[int, float] = {}

    def _advance(self) -> None:
        now = time.perf_counter()
        if self._open:
            share = (now - self._last) / len(self._open)
            for key in self._open:
                self._open[key] += share
        self._last = now

    def start(self, key: int) -> None:
        with self._lock:
            self._advance()
            self._open[key] = 0.0

    def stop(self, key: int) -> float:
        with self._lock:
            self._advance()
            return self._open.pop(key)


def generate_streamed(engine: Engine, requests: list[Request], on_each: Callable[[], None]) -> list[Completion]:
    """``engine``'s completions of ``requests`` in request order; ``on_each()`` after each one as it arrives
    (``generate_iter``, :class:`~r2mad_core.engine.StreamingEngine`); never for an engine with
    ``generate`` only (its completions come back together, when the phase is over)."""
    stream = getattr(engine, "generate_iter", None)
    if stream is None or not requests:
        return generate_checked(engine, requests)
    out: list[Completion | None] = [None] * len(requests)
    for index, completion in stream(requests):
        out[index] = completion
        on_each()
    missing = [i for i, c in enumerate(out) if c is None]
    if missing:
        raise RuntimeError(
            f"engine {getattr(engine, 'identity', engine)!r} returned no completion for request(s) {missing[:10]} "
            f"of {len(requests)}"
        )
    return out  # type: ignore[return-value]


def run_questions(
    states: Sequence[DebateState],
    engine: Engine,
    config: DebateConfig,
    *,
    hook: RoundHook | None = None,
    peer_selector: PeerSelector | None = None,
    window: int | None = None,
    on_finished: Callable[[list[DebateState]], None] | None = None,
) -> None:
    """Advance every state question by question (module docstring): a new question starts while the questions
    in flight claim fewer than ``window`` x ``n_agents`` engine requests, and while fewer than
    :data:`HOLD_FACTOR` x ``window`` are started and not yet handed to ``on_finished``.

    ``states`` are fresh (:func:`r2mad_core.debate.loop.new_states`); they are finished in place.
    ``on_finished`` is called from the question threads, one call at a time, in input order.
    """
    check_schedule("questions", window)
    window = DEFAULT_WINDOW if window is None else window
    n = len(states)
    hook_lock = threading.Lock()
    shares = WallShares()
    cond = threading.Condition()
    stop = threading.Event()
    interrupted = threading.Event()
    errors: list[BaseException] = []
    done = [False] * n
    progress = {"started": 0, "written": 0, "running": 0, "claimed": 0}
    claims: dict[int, int] = {}
    hold = HOLD_FACTOR * window
    per_question = config.n_agents
    budget = window * per_question

    def claim(index: int, requests: int) -> None:
        """Question ``index`` now claims ``requests`` engine slots (module docstring: its requests out, or
        between two phases its next phase's); freed slots start new questions."""
        with cond:
            progress["claimed"] += requests - claims.get(index, 0)
            claims[index] = requests
            admit()

    def release_one(index: int) -> Callable[[], None]:
        """A completion is back: one slot fewer, down to 1 (the last one becomes the next phase's claim)."""
        def release() -> None:
            with cond:
                if claims.get(index, 0) > 1:
                    claims[index] -= 1
                    progress["claimed"] -= 1
                    admit()
        return release

    def debate_one(index: int) -> None:
        state = states[index]
        one = [state]
        for round_index in range(config.n_rounds):
            if state.finished:
                return
            if stop.is_set():
                raise _Stopped
            shares.start(id(state))
            appended = False
            try:
                selections = select_peers(round_index, one, engine, config, peer_selector)
                with hook_lock:
                    contexts = round_contexts(round_index, one, config, hook)
                requests, pending = round_requests(round_index, one, selections, contexts, config)
                claim(index, len(requests))
                completions = generate_streamed(engine, requests, release_one(index))
                record_round(round_index, one, selections, pending, completions, config)
                appended = True
                summary = config.summarizes_after(round_index, state)
                more = round_index < config.n_rounds - 1 and not state.finished
                claim(index, 1 if summary else per_question if more else 0)  # the next phase's requests
                with hook_lock:
                    finish_round(round_index, one, hook)
                if summary:
                    if stop.is_set():
                        raise _Stopped
                    summarize(engine, config, one, round_index)
                    claim(index, per_question if more else 0)
            finally:
                seconds = shares.stop(id(state))
                if appended:
                    state.rounds[-1].seconds = seconds

    def admit() -> None:  # with cond held
        while (not stop.is_set() and progress["started"] < n and progress["claimed"] + per_question <= budget
               and progress["started"] - progress["written"] < hold):
            index = progress["started"]
            progress["started"] += 1
            progress["running"] += 1
            claims[index] = per_question
            progress["claimed"] += per_question
            threading.Thread(target=worker, args=(index,), name=f"r2mad-question-{index}", daemon=True).start()

    def fail(exc: BaseException) -> None:  # with cond held
        if not isinstance(exc, _Stopped):
            errors.append(exc)
        stop.set()

    def worker(index: int) -> None:
        finished = False
        try:
            debate_one(index)
            finished = True
        except BaseException as exc:  # handed to the main thread
            with cond:
                fail(exc)
        with cond:
            progress["running"] -= 1
            progress["claimed"] -= claims.pop(index, 0)
            try:
                done[index] = finished
                ready = []
                while progress["written"] < n and done[progress["written"]]:
                    ready.append(states[progress["written"]])
                    progress["written"] += 1
                if ready and on_finished is not None and not interrupted.is_set():
                    on_finished(ready)
                admit()
            except BaseException as exc:
                fail(exc)
            finally:
                cond.notify_all()

    with cond:
        try:
            admit()
            while progress["running"] > 0 or (not stop.is_set() and progress["written"] < n):
                cond.wait(timeout=0.5)
        except BaseException:  # KeyboardInterrupt: stop admitting and writing; threads end at their next phase
            interrupted.set()
            stop.set()
            raise
    if errors:
        raise errors[0]
