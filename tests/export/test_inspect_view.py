"""The real viewer (issue 60): ``inspect view`` on exported logs, started on 127.0.0.1 and stopped after, lists every
log through its HTTP API, and headless Chromium shows one debate's round-by-round answers of the three agents.

Slow (a server and a browser): ``make test-slow`` and CI. Debian's ``chromium`` is needed (.ci/run installs it);
without it the test is skipped on a developer's machine and fails under CI (CI=true). The screenshot is kept in the
test's folder (``debate.png``) for a look.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from r2mad_lab.cli import main
from r2mad_lab.export import inspect_log

pytestmark = pytest.mark.slow


def need(condition: bool, why: str) -> None:
    if not condition:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read().decode("utf-8"))


def wait_for(url: str, process: subprocess.Popen, seconds: float = 120) -> object:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return get_json(url)
        except OSError:
            assert process.poll() is None, "inspect view ended before it served"
            assert time.monotonic() < deadline, f"inspect view did not answer {url} in {seconds} s"
            time.sleep(0.5)


def page_text_and_screenshot(chromium: str, url: str, png: Path, wanted: list[str], seconds: float = 150) -> str:
    """Open ``url`` in headless Chromium (its DevTools protocol), wait until the page's text holds every ``wanted``
    string (the viewer loads the log in the page), screenshot it into ``png``; the page's text."""
    import websocket  # websocket-client (a Jupyter dependency, the notebooks extra)

    port = free_port()
    profile = tempfile.mkdtemp(prefix="chromium-", dir=png.parent)
    browser = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                                "--remote-allow-origins=*", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        targets = wait_for(f"http://127.0.0.1:{port}/json", browser)
        page = next(t for t in targets if t["type"] == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        counter = iter(range(1, 1 << 30))

        def call(method: str, **params: object) -> dict:
            number = next(counter)
            ws.send(json.dumps({"id": number, "method": method, "params": params}))
            while True:
                message = json.loads(ws.recv())
                if message.get("id") == number:
                    return message.get("result", {})

        call("Emulation.setDeviceMetricsOverride", width=1280, height=2200, deviceScaleFactor=1, mobile=False)
        call("Page.navigate", url=url)
        deadline = time.monotonic() + seconds
        text = ""
        while time.monotonic() < deadline:
            text = call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                        returnByValue=True)["result"].get("value", "")
            if all(w in text for w in wanted):
                break
            time.sleep(1)
        time.sleep(1)  # the last render
        png.write_bytes(base64.b64decode(call("Page.captureScreenshot", format="png")["data"]))
        ws.close()
        return text
    finally:
        browser.terminate()
        browser.wait(30)


def test_inspect_view_lists_every_log_and_shows_a_debate_round_by_round(sim_root, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    need(chromium is not None, "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)")
    logs = tmp_path / "logs"
    assert main(["export", "inspect", str(sim_root / "runs" / "demo"), "--out", str(logs)]) == 0
    names = sorted(p.name for p in logs.glob("*.eval"))
    port = free_port()
    inspect = Path(sys.executable).with_name("inspect")
    command = [str(inspect)] if inspect.exists() else [sys.executable, "-m", "inspect_ai"]
    server = subprocess.Popen([*command, "view", "start", "--log-dir", str(logs), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        listed = wait_for(f"{base}/api/log-files", server)
        assert sorted(Path(urllib.parse.urlparse(f["name"]).path).name for f in listed["files"]) == names
        r2mad = next(n for n in names if "-r2mad-" in n)
        listed_name = next(f["name"] for f in listed["files"] if f["name"].endswith(r2mad))
        log = read_eval_log(str(logs / r2mad))
        # the whole log, as the viewer reads it
        served = get_json(f"{base}/api/logs/{urllib.parse.quote(listed_name, safe=':/')}")
        assert served["eval"]["task"] == "r2mad/math500/r2mad"
        assert sorted((s["id"], s["epoch"]) for s in served["samples"]) == sorted((s.id, s.epoch) for s in log.samples)
        sample = max(log.samples, key=lambda s: len(s.messages))  # the longest debate: every round shown
        turns = [m for m in sample.messages if m.role == "assistant" and "agent" in (m.metadata or {})]
        rounds = sorted({m.metadata["round"] for m in turns})
        assert {m.metadata["agent"] for m in turns} == {0, 1, 2} and len(rounds) >= 2
        url = (f"{base}/#/logs/{urllib.parse.quote(r2mad)}/samples/sample/"
               f"{urllib.parse.quote(str(sample.id), safe='')}/{sample.epoch}/messages")
        png = tmp_path / "debate.png"
        last = turns[-1].text.strip().splitlines()[0][:60]
        text = page_text_and_screenshot(chromium, url, png, ["METADATA", last])
        assert last in text, text[:2000]
        for m in turns:  # every agent's response of every round, in order
            assert m.text.strip().splitlines()[0][:60] in text
        assert text.count("agent:") >= len(turns)
        assert png.stat().st_size > 20_000
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
    assert inspect_log.SCORER
