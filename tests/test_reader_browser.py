"""What a reader sees: the debate viewer's page and the book (`make docs`) opened in headless Chromium.

Checks the rendered DOM (every round of a known transcript present; the book's navigation in the paper's order),
that the page logs nothing to the console (an error, a failed script), and that a screenshot is not blank.
Debian's `chromium` is needed (.ci/run installs it); the book needs the `docs` extra. Without them the tests are
skipped on a developer's machine and fail under CI (CI=true).
"""

from __future__ import annotations

import html as htmllib
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
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


def open_page(chromium: str, page: Path, tmp_path: Path, *, screenshot: Path | None = None,
              budget_ms: int = 5000) -> tuple[str, list[str]]:
    """(the DOM after scripts ran, the console messages) of ``page``; with ``screenshot``, also a PNG of it."""
    profile = Path(tempfile.mkdtemp(prefix=f"profile-{page.stem}-", dir=tmp_path))
    action = [f"--screenshot={screenshot}", "--window-size=1280,1600"] if screenshot else ["--dump-dom"]
    result = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                             f"--virtual-time-budget={budget_ms}", *action, page.as_uri()],
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


#: Appended to a copy of each page of the book: once the page has loaded and MathJax (if any) has typeset, it writes
#: what a reader would see wrong into ``data-book-check`` on <html>: images that did not load, maths MathJax could not
#: typeset, wide tables cut off instead of scrolling inside their frame.
PAGE_CHECK = """<script>
(function () {
  function check() {
    var out = {images: [], tables: [], math_errors: [], mathjax: document.documentElement.getAttribute("data-mathjax"),
               has_mathjax: !!(window.MathJax && window.MathJax.Hub)};
    document.querySelectorAll("img").forEach(function (img) {
      if (!img.complete || img.naturalWidth === 0) out.images.push(img.getAttribute("src"));
    });
    var article = document.querySelector("article") || document.body, width = article.clientWidth;
    var frame = (document.querySelector(".md-content") || article).getBoundingClientRect();
    document.querySelectorAll("article table").forEach(function (table, index) {
      if (table.scrollWidth <= width + 1) return;
      for (var node = table; node && node !== article; node = node.parentElement) {
        var overflow = getComputedStyle(node).overflowX, box = node.getBoundingClientRect();
        if ((overflow === "auto" || overflow === "scroll") && node.clientWidth < table.scrollWidth
            && box.left >= frame.left - 1 && box.right <= frame.right + 1) return;  // it scrolls, inside the page
      }
      out.tables.push("table " + index + ": " + table.scrollWidth + "px wide in a " + width + "px frame, cut off");
    });
    document.querySelectorAll(".MathJax_Error, .merror, .noError").forEach(function (node) {
      out.math_errors.push(node.textContent.slice(0, 200));
    });
    if (document.body.innerText.indexOf("Math Processing Error") >= 0) out.math_errors.push("Math Processing Error");
    document.documentElement.setAttribute("data-book-check", JSON.stringify(out));
  }
  window.addEventListener("load", function () {
    if (window.MathJax && window.MathJax.Hub) window.MathJax.Hub.Queue(check); else check();
  });
})();
</script>
"""


class _Links(html.parser.HTMLParser):
    """The links (a, link: href; img, script: src) and the element ids of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name"):
            if values.get(name):
                self.ids.add(values[name])
        attribute = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src"}.get(tag)
        if attribute and values.get(attribute):
            self.links.append(values[attribute])


def broken_internal_links(site: Path) -> list[str]:
    """Every relative link of every page of ``site`` whose file is missing, or whose #fragment names no element."""
    parsed: dict[Path, _Links] = {}

    def parse(page: Path) -> _Links:
        if page not in parsed:
            parsed[page] = _Links()
            parsed[page].feed(page.read_text(encoding="utf-8", errors="replace"))
        return parsed[page]

    broken = []
    # 404.html is for a web server (mkdocs writes its links from the site root, /...); a reader on the disk never opens it
    pages = sorted(p for p in site.rglob("*.html") if p.relative_to(site) != Path("404.html"))
    for page in pages:
        for link in parse(page).links:
            if re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I) or link.startswith("//"):
                continue  # another scheme (https:, mailto:, data:): not a link inside the book
            target_text, _, fragment = link.partition("#")
            target_text = urllib.parse.unquote(target_text.partition("?")[0])
            target = (page.parent / target_text).resolve() if target_text else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif fragment and target.suffix == ".html" and urllib.parse.unquote(fragment) not in parse(target).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no element #{fragment})")
    return broken


def check_page(chromium: str, site: Path, page: Path, tmp_path: Path) -> tuple[dict, list[str], str]:
    """(what PAGE_CHECK found, the console messages, the DOM) of ``page``, opened as a reader opens it."""
    copy = page.with_name(page.stem + ".__check__.html")  # beside the page: its relative links resolve the same
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", PAGE_CHECK + "</body>", 1), encoding="utf-8")
    try:
        dom, console = open_page(chromium, copy, tmp_path, budget_ms=20000)
    finally:
        copy.unlink()
    found = re.search(r'<html[^>]*data-book-check="([^"]*)"', dom)
    assert found, f"{page.relative_to(site)}: the page check never ran (the page did not finish loading)"
    # MathJax 2's own probe of web fonts (an @font-face "MathJax_Blank" at about:blank) is refused on a file:// page
    console = [line for line in console if "Access to font at 'about:blank'" not in line]
    return json.loads(htmllib.unescape(found.group(1))), console, dom


def test_book_in_chromium(chromium, tmp_path):
    """The book (make docs) opened in Chromium, every page of it: no MathJax error (the MMR equations of notebook
    04 and 06 were "[Math Processing Error]"), MathJax done where a page has maths, every image loaded (design.md's
    import graph was missing), no broken relative link or anchor, wide tables scroll in their frame, no progress
    bar (tqdm's stderr), no dangling "Eq. name" reference, nothing on the console."""
    try:
        import mkdocs  # noqa: F401
        import mkdocs_jupyter  # noqa: F401
    except ImportError:
        need(False, "the docs extra is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "build_book.py"), "--site", str(site),
                             "--stage", str(tmp_path / "stage")], capture_output=True, text=True, timeout=900,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    pages = sorted(p for p in site.rglob("*.html"))
    notebooks = [p for p in pages if p.parent.name == "notebooks" and re.match(r"\d\d_", p.name)]
    assert len(notebooks) == 10 and len(pages) > 20, [p.relative_to(site) for p in pages]
    # Nothing is loaded from the network: no script, stylesheet or image points to a host.
    for page in pages:
        text = page.read_text()
        assert not re.search(r'<(script|img)[^>]+src="https?://|<link[^>]+href="https?://', text), page
        assert not re.search(r"application/vnd\.jupyter\.stderr[^>]*>.{0,600}?\d+%\|", text, re.S), f"{page}: a progress bar"
        assert not re.search(r"Eq\.\s*\(?[a-z_]{4,}\)?", re.sub(r"<[^>]+>", "", text)), f"{page}: a dangling Eq. reference"
    assert broken_internal_links(site) == []

    problems = {}
    for page in pages:
        found, console, _ = check_page(chromium, site, page, tmp_path)
        name = str(page.relative_to(site))
        wrong = {key: found[key] for key in ("images", "tables", "math_errors") if found[key]}
        if console:
            wrong["console"] = console
        if found["has_mathjax"] and found["mathjax"] != "typeset":
            wrong["mathjax"] = "MathJax never finished typesetting"
        if wrong:
            problems[name] = wrong
    assert problems == {}, json.dumps(problems, indent=1)[:6000]

    dom, console = open_page(chromium, site / "index.html", tmp_path)
    assert console == []
    assert "r2mad: a reproducible R2-MAD" in dom and "make reproduce" in dom
    titles = [re.search(rf'href="notebooks/{n}\.html"', dom) for n in ("01_data", "02_memory", "03_main_results",
              "04_ablations", "05_baselines", "06_shared_misconception", "07_cost", "08_theory",
              "09_poisoned_memory", "10_report")]
    assert all(titles) and [m.start() for m in titles] == sorted(m.start() for m in titles)  # the paper's order

    found, _, dom = check_page(chromium, site, site / "notebooks" / "04_ablations.html", tmp_path)
    assert "Ablations (Table 2)" in dom and 'class="MathJax"' in dom  # the executed notebook, its maths typeset
    assert found["math_errors"] == [] and found["mathjax"] == "typeset"  # the MMR equations (Eqs. 5-6) among them
    assert "arg" in dom and "mathcal" in dom  # the MMR equation's source is on the page, typeset without an error
    design = (site / "docs" / "design.html").read_text()
    assert 'src="import-graph.png"' in design and (site / "docs" / "import-graph.png").is_file()

    png = tmp_path / "index.png"
    open_page(chromium, site / "index.html", tmp_path, screenshot=png)
    assert not_blank(png) > 0.05


def test_the_page_check_sees_a_maths_error_a_missing_image_a_cut_off_table_and_a_broken_link(chromium, tmp_path):
    """The checks above fail when they should: a page with an unknown TeX macro, a missing picture, a table wider
    than its frame and a link to no page, built with the book's own MathJax configuration."""
    sys.path.insert(0, str(ROOT / "docs"))
    import build_book

    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    shutil.copytree(build_book.mathjax_dir(), site / "assets" / "mathjax")
    (site / "assets" / "mathjax" / "config" / f"{build_book.MATHJAX_CONFIG_NAME}.js").write_text(build_book.MATHJAX_CONFIG)
    url = f"assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe,{build_book.MATHJAX_CONFIG_NAME}"
    cells = "".join(f"<td>{'x' * 40}</td>" for _ in range(60))
    (site / "bad.html").write_text(
        f'<html><head><script src="{url}"></script></head><body><article style="width:600px">'
        r"<p>$$\undefinedmacro{x} \frac{1}{$$</p>"
        f'<img src="missing.png"><table><tr>{cells}</tr></table><a href="nowhere.html">x</a>'
        '<a href="#nothing">y</a></article></body></html>')
    found, console, _ = check_page(chromium, site, site / "bad.html", tmp_path)
    assert found["images"] == ["missing.png"]
    assert len(found["tables"]) == 1 and "cut off" in found["tables"][0]
    assert found["math_errors"] or any("MathJax" in line for line in console), (found, console)
    assert broken_internal_links(site) == ["bad.html: missing.png (no such file)", "bad.html: nowhere.html (no such file)",
                                           "bad.html: #nothing (no element #nothing)"]
