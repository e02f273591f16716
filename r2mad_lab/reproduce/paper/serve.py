"""``--gpus N`` on a real run: vLLM's OpenAI-compatible servers started, health-checked and stopped by the run.

Decision (docs/paper-run.md, "Several GPUs"): **one server per GPU** (``CUDA_VISIBLE_DEVICES=i``, port
``base_port + i``), not one server per model with ``--data-parallel-size``:

- the client already spreads requests over several URLs (the least busy first,
  :class:`~r2mad_lab.engines.openai_compat.OpenAICompatEngine`), so the servers need no coordination;
- one server that dies takes one GPU's share out, not the model's (the engine's failover moves its requests to the
  live ones);
- every server is the same command on one GPU, so a node of any size (and the fake servers of the tests) is started
  the same way.

The profile's vLLM models run **at once on separate GPUs**: with N GPUs and M models, model k gets the GPUs i with
i mod M = k (N >= M is required: one line saying so otherwise). Each server runs the model's pinned revision at its
``max_model_len`` and ``gpu_memory_utilization``, with ``--generation-config vllm`` (vLLM's server otherwise fills
omitted sampling fields from the model's generation_config.json, which the offline engine does not: the same
sampling either way). The run's profile is the profile with each vLLM entry served (:func:`served_fields`: engine
``openai``, the servers' URLs, ``max_concurrency`` 192 per server), written beside the runs and given to the notebooks.

``command`` is injectable: tests start ``tests/fake_openai_server.py`` the same way (a process per GPU, a port each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

BASE_PORT = 8100
IN_FLIGHT_PER_SERVER = 192  # 64 questions x 3 agents: the grid's window per replica (docs/paper-run.md)
HEALTH_TIMEOUT_SECONDS = 1800.0  # a first start downloads the weights


class ServeError(RuntimeError):
    """A server plan that cannot run, or a server that did not come up (one line)."""


def vllm_command(entry: Mapping[str, Any], port: int) -> list[str]:
    """The vLLM OpenAI server for one GPU (ENGINE-NOTES: ``python -m vllm.entrypoints.openai.api_server``)."""
    options = entry.get("options") or {}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
               "--model", str(entry["model"]), "--served-model-name", str(entry["model"]),
               "--generation-config", "vllm"]
    if options.get("revision"):
        command += ["--revision", str(options["revision"])]
    if options.get("max_model_len"):
        command += ["--max-model-len", str(options["max_model_len"])]
    if options.get("gpu_memory_utilization"):
        command += ["--gpu-memory-utilization", str(options["gpu_memory_utilization"])]
    if options.get("load_format"):
        command += ["--load-format", str(options["load_format"])]
    return command


@dataclass
class Server:
    label: str
    gpu: int
    port: int
    command: list[str]
    process: subprocess.Popen | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def plan(entries: Sequence[Mapping[str, Any]], gpus: int, *, base_port: int = BASE_PORT,
         command: Callable[[Mapping[str, Any], int], list[str]] = vllm_command) -> list[Server]:
    """One server per GPU; model k of M on the GPUs i with i mod M = k."""
    if gpus < 1:
        raise ServeError(f"--gpus {gpus}: expected at least 1")
    if gpus < len(entries):
        raise ServeError(f"--gpus {gpus}: the profile's {len(entries)} vLLM models "
                         f"({', '.join(e['label'] for e in entries)}) run at once on separate GPUs, so at least "
                         f"{len(entries)} GPUs are needed; without --gpus the run loads them one at a time in-process")
    return [Server(entry["label"], i, base_port + i, command(entry, base_port + i))
            for i, entry in enumerate(assignment(entries, gpus))]


def assignment(models: Sequence[Any], gpus: int) -> list[Any]:
    """What GPU i runs: model k of the M ``models`` on the GPUs i with i mod M = k (the run's plan and the
    estimate's wall-clock)."""
    return [models[i % len(models)] for i in range(gpus)]


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=timeout) as response:
            return response.status == 200
    except Exception:
        return False


@dataclass
class Servers:
    """Start every planned server (its own process, its GPU, a log file), wait until each answers ``GET /v1/models``,
    and stop them all on exit (terminate, then kill after ``stop_seconds``)."""

    servers: list[Server]
    log_dir: Path
    timeout: float = HEALTH_TIMEOUT_SECONDS
    stop_seconds: float = 30.0
    echo: Callable[[str], None] = print
    _files: list[Any] = field(default_factory=list)

    def urls(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for server in self.servers:
            out.setdefault(server.label, []).append(server.url)
        return out

    def __enter__(self) -> "Servers":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for server in self.servers:
                server.log = self.log_dir / f"server-gpu{server.gpu}-{server.port}.log"
                handle = open(server.log, "ab")
                self._files.append(handle)
                environment = {**os.environ, "CUDA_VISIBLE_DEVICES": str(server.gpu)}
                server.process = subprocess.Popen(server.command, stdout=handle, stderr=subprocess.STDOUT,
                                                  env=environment, start_new_session=True)
            self.echo(f"serve: {len(self.servers)} servers starting (one per GPU): "
                      + "; ".join(f"{label} on {len(urls)}" for label, urls in self.urls().items()))
            self._wait()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait(self) -> None:
        deadline = time.monotonic() + self.timeout
        waiting = list(self.servers)
        while waiting:
            for server in list(waiting):
                if server.process is not None and server.process.poll() is not None:
                    raise ServeError(f"the server of {server.label} on GPU {server.gpu} exited with code "
                                     f"{server.process.returncode} before it was healthy; its log: {server.log}")
                if healthy(server.url):
                    waiting.remove(server)
            if waiting and time.monotonic() > deadline:
                raise ServeError(f"{len(waiting)} servers not healthy after {self.timeout:.0f} s (e.g. "
                                 f"{waiting[0].label} on GPU {waiting[0].gpu}, {waiting[0].url}); logs in "
                                 f"{self.log_dir}")
            if waiting:
                time.sleep(0.2)
        self.echo(f"serve: every server healthy ({', '.join(s.url for s in self.servers)})")

    def __exit__(self, *exc_info: object) -> None:
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                server.process.terminate()
        for server in self.servers:
            if server.process is not None:
                try:
                    server.process.wait(timeout=self.stop_seconds)
                except subprocess.TimeoutExpired:
                    server.process.kill()
                    server.process.wait()
        for handle in self._files:
            handle.close()
        self._files.clear()


def served_fields(fields: Mapping[str, Any], urls: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The profile's fields with each served model (a key of ``urls``) on its servers: engine ``openai``, model name =
    the served name (the Hugging Face id), ``max_concurrency`` :data:`IN_FLIGHT_PER_SERVER` per server, and no server
    more than that
    (``max_concurrency_per_url``: its declared capacity)."""
    out = json.loads(json.dumps(dict(fields), default=str))
    for key in ("models", "memory_models"):
        for position, entry in enumerate(out.get(key) or []):
            if entry["label"] not in urls:
                continue
            options = entry.get("options") or {}
            out[key][position] = {
                "label": entry["label"], "engine": "openai", "model": entry["model"],
                "options": {"base_urls": list(urls[entry["label"]]), "api_key_env": None,
                            "max_concurrency": IN_FLIGHT_PER_SERVER * len(urls[entry["label"]]),
                            "max_concurrency_per_url": IN_FLIGHT_PER_SERVER,
                            # the pinned revision stays in the cache keys (docs/paper-run.md, "The Hub")
                            **({"identity": f"openai+vllm:{options['revision']}"} if options.get("revision") else {})},
            }
    return out
