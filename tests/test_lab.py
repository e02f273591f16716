"""`make lab` (issue 23): JupyterLab from the notebooks extra, on notebooks/, localhost only, with a token.

Started headless on a free local port exactly as the Makefile starts it; the notebooks are listed through the
server's REST API (with the token; without it the API refuses), then the server is stopped."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # a server start takes several seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _lab_command(port: int) -> list[str]:
    """The Makefile's `lab` recipe with this interpreter, a chosen port, no browser (the token is its own)."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^lab: setup\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "Makefile: no `lab` target"
    text = recipe.group(1).replace("\\\n", " ")
    for option in ("--notebook-dir=notebooks", "--ServerApp.ip=127.0.0.1", "--ServerApp.log_level=WARN"):
        assert option in text, f"make lab does not pass {option}"
    command = [sys.executable, "-m", "jupyter", "lab", "--notebook-dir=notebooks", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--ServerApp.log_level=WARN",
               "--LabApp.log_level=WARN", "--ServerApp.open_browser=False"]
    return command + (["--allow-root"] if os.geteuid() == 0 else [])


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_make_lab_serves_the_notebooks_on_localhost_with_a_token(tmp_path: Path) -> None:
    pytest.importorskip("jupyterlab")
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(_lab_command(port), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        # the one block it prints: where to open it, with the token it generated
        deadline = time.monotonic() + 120
        found = None
        while time.monotonic() < deadline and server.poll() is None and found is None:
            found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=([0-9a-f]+)", (tmp_path / "lab.log").read_text())
            time.sleep(0.5)
        assert found, f"make lab printed no URL with a token: {(tmp_path / 'lab.log').read_text()[-2000:]}"
        token = found.group(1)
        status, body = _get(f"{base}/api/contents?token={token}")
        assert status == 200
        listed = sorted(item["name"] for item in json.loads(body)["content"]
                        if item["type"] == "notebook" and item["name"].endswith(".ipynb"))
        assert listed == sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
        assert len(listed) == 10 and listed[0] == "01_data.ipynb"
        assert _get(f"{base}/api/contents")[0] == 403  # the token is required
        kernels = json.loads(_get(f"{base}/api/kernelspecs?token={token}")[1])
        assert "python3" in kernels["kernelspecs"]
        # quiet: nothing but the one block that says where to open it
        output = (tmp_path / "lab.log").read_text()
        assert "[I " not in output
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
