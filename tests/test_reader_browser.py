"""What a reader sees: the debate viewer's page and the book (`make docs`) opened in headless Chromium.

Checks the rendered DOM (every round of a known transcript present; the book's navigation in the paper's order),
that the page logs nothing to the console (an error, a failed script), and that a screenshot is not blank.
Debian's `chromium` is needed (.ci/run installs it); the book needs the `docs` extra. Without them the tests are
skipped on a developer's machine and fail under CI (CI=true).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r2mad_core.cli import main

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need(condition: bool, why: str) -> None:
    if not condition:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    need(path is not None, "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)")
    return path


def open_page(chromium: str, page: Path, tmp_path: Path, *, screenshot: Path | None = None) -> tuple[str, list[str]]:
    """(the DOM after scripts ran, the console messages) of ``page``; with ``screenshot``, also a PNG of it."""
    profile = tmp_path / f"profile-{page.stem}-{'png' if screenshot else 'dom'}"
    profile.mkdir()
    action = [f"--screenshot={screenshot}", "--window-size=1280,1600"] if screenshot else ["--dump-dom"]
    result = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                             "--virtual-time-budget=5000", *action, page.as_uri()],
                            capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console


def not_blank(png: Path) -> float:
    """The share of pixels that are not the page's background colour."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24)
    background = max(colours)[0]
    return 1.0 - background / (image.width * image.height)


def test_viewer_page_in_chromium(chromium, tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["build-memory", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "6",
                 "--out", str(tmp_path / "bank"), *cache]) == 0
    assert main(["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--memory", str(tmp_path / "bank"),
                 "--engine", "simulated", "--limit", "6", "--out", str(tmp_path / "r2"), *cache]) == 0
    records = [json.loads(x) for x in (tmp_path / "r2" / "transcripts.jsonl").read_text().splitlines()]
    record = max(records, key=lambda r: len(r["rounds"]))  # a debate that ran past round 0
    assert len(record["rounds"]) > 1
    page = tmp_path / "view.html"
    assert main(["view", str(tmp_path / "r2"), "--out", str(page)]) == 0

    dom, console = open_page(chromium, page, tmp_path)
    assert console == []
    section = re.search(rf'<section[^>]*data-q="{re.escape(record["sample_id"])}".*?</section>', dom, re.S).group(0)
    for rnd in record["rounds"]:
        assert f'<th data-round="{rnd["round"]}">round {rnd["round"]}' in section
        for turn in rnd["agents"]:
            cell = re.search(rf'<td class="turn[^"]*" data-round="{rnd["round"]}" data-agent="{turn["agent"]}" '
                             rf'data-answer="([^"]*)" data-correct="(\d)"', section)
            assert cell is not None and cell.groups() == (turn["answer"] or "", str(int(bool(turn["correct"]))))
    # the filter script ran: the count of shown questions was written by it
    assert re.search(rf'<span id="f-count">{len(records)}</span>', dom)

    png = tmp_path / "view.png"
    open_page(chromium, page, tmp_path, screenshot=png)
    assert not_blank(png) > 0.05


def test_book_in_chromium(chromium, tmp_path):
    try:
        import mkdocs  # noqa: F401
        import mkdocs_jupyter  # noqa: F401
    except ImportError:
        need(False, "the docs extra is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "build_book.py"), "--site", str(site),
                             "--stage", str(tmp_path / "stage")], capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # Nothing is loaded from the network: no script, stylesheet or image points to a host.
    for page in site.rglob("*.html"):
        assert not re.search(r'<(script|img)[^>]+src="https?://|<link[^>]+href="https?://', page.read_text()), page

    dom, console = open_page(chromium, site / "index.html", tmp_path)
    assert console == []
    assert "r2mad: a reproducible R2-MAD" in dom and "make reproduce" in dom
    titles = [re.search(rf'href="notebooks/{n}\.html"', dom) for n in ("01_data", "02_memory", "03_main_results",
              "04_ablations", "05_baselines", "06_shared_misconception", "07_cost", "08_theory",
              "09_poisoned_memory", "10_report")]
    assert all(titles) and [m.start() for m in titles] == sorted(m.start() for m in titles)  # the paper's order

    dom, console = open_page(chromium, site / "notebooks" / "04_ablations.html", tmp_path)
    assert console == []
    assert "Ablations (Table 2)" in dom and 'class="MathJax"' in dom  # the executed notebook, its maths typeset

    png = tmp_path / "index.png"
    open_page(chromium, site / "index.html", tmp_path, screenshot=png)
    assert not_blank(png) > 0.05
