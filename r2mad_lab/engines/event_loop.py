"""The process's one event-loop thread, on which every request of the ``openai`` engine is a coroutine.

Part of the engine boundary (docs/design.md); no equation of the paper. Started on first use, and again in a forked
child (a loop thread does not survive ``fork``). :class:`~r2mad_lab.engines.openai_compat.OpenAICompatEngine` runs
its batches here, whatever thread iterates them: thousands of requests in flight cost no thread each.
"""

from __future__ import annotations

import asyncio
import os
import threading

_lock = threading.Lock()
_state: dict[str, object] = {}
THREAD_NAME = "r2mad-openai-loop"


def event_loop() -> asyncio.AbstractEventLoop:
    """The running loop of the process's one event-loop thread (started now if there is none in this process)."""
    with _lock:
        loop, thread = _state.get("loop"), _state.get("thread")
        if loop is None or _state.get("pid") != os.getpid() or not thread.is_alive():  # type: ignore[union-attr]
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=THREAD_NAME, daemon=True)
            thread.start()
            _state.update(loop=loop, thread=thread, pid=os.getpid())
        return loop  # type: ignore[return-value]
