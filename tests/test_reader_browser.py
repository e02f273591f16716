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
from typing import Sequence

import pytest

from r2mad_lab.cli import main
from r2mad_lab.report import inference

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need(condition: bool, why: str) -> None:
    if not condition:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)


def open_page(chromium: str, page: Path, tmp_path: Path, *, screenshot: Path | None = None,
              budget_ms: int = 5000, width: int | None = None) -> tuple[str, list[str]]:
    """(the DOM after scripts ran, the console messages) of ``page``; with ``screenshot``, also a PNG of it (1280 px
    wide unless ``width``); ``width``: the window's width in CSS px (headless Chromium's own is 800)."""
    profile = Path(tempfile.mkdtemp(prefix=f"profile-{page.stem}-", dir=tmp_path))
    size = [f"--window-size={width or 1280},1600"] if screenshot or width else []
    action = [f"--screenshot={screenshot}", *size] if screenshot else ["--dump-dom", *size]
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


#: Appended to a copy of a viewer page (index.html, a run's view.html, compare.html): once the page has drawn, it
#: clicks as a reader would (sorts a column, filters, searches, picks two runs; opens a question) and writes what it
#: saw, and every expectation that failed, as JSON into ``data-viewer-check`` on <html>.
VIEWER_CHECK = """<script>
(function () {
  var out = {problems: []}, started = Date.now();
  function problem(text) { out.problems.push(text); }
  function visible(selector) { return Array.prototype.filter.call(document.querySelectorAll(selector),
    function (el) { return !el.classList.contains("hidden"); }); }
  function fire(el, type) { el.dispatchEvent(new Event(type, {bubbles: true})); }
  function finish() { document.documentElement.setAttribute("data-viewer-check", JSON.stringify(out)); }
  function when(test, then, what) {
    var timer = setInterval(function () {
      var ok = false; try { ok = test(); } catch (e) { ok = false; }
      if (ok) { clearInterval(timer); try { then(); } catch (e) { problem("check failed: " + e); finish(); } }
      else if (Date.now() - started > 15000) { clearInterval(timer); problem("missing: " + what); finish(); }
    }, 50);
  }
  function indexPage() {
    when(function () { return document.querySelectorAll("#runs tbody tr").length > 0; }, function () {
      var rows = document.querySelectorAll("#runs tbody tr"), n = rows.length;
      out.rows = n;
      ["#search", "#compare", "th[data-sort=accuracy]", "#f-benchmark", "#f-method", "#f-model", "#f-protocol",
       "#f-variant", "#f-engine"].forEach(function (s) { if (!document.querySelector(s)) problem("missing: " + s); });
      var header = document.querySelector("th[data-sort=accuracy]");
      var accuracy = function () { return visible("#runs tbody tr").map(function (tr) {
        return parseFloat(tr.children[8].textContent) || 0; }); };
      header.click();
      var up = accuracy();
      header.click();
      var down = accuracy();
      out.sorted = [up, down];
      if (up.join() !== up.slice().sort(function (a, b) { return a - b; }).join()) problem("sort: not ascending " + up);
      if (down.join() !== up.slice().reverse().join()) problem("sort again: not descending " + down);
      var select = document.querySelector("#f-method"), value = select.options[select.options.length - 1].value;
      select.value = value; fire(select, "change");
      var shown = visible("#runs tbody tr");
      out.filtered = [value, shown.length];
      if (!shown.length || shown.length === n) problem("filter " + value + ": " + shown.length + " of " + n + " rows shown");
      var expected = window.R2V.index.runs.filter(function (r) { return r.method === value; }).length;
      if (shown.length !== expected) problem("filter " + value + ": " + shown.length + " rows shown, " + expected + " expected");
      if (document.querySelector("#count").textContent !== String(shown.length)) problem("filter: the count is not the rows shown");
      select.value = ""; fire(select, "change");
      var search = document.querySelector("#search");
      search.value = "K="; fire(search, "input");
      var found = visible("#runs tbody tr");
      out.searched = found.length;
      if (found.some(function (tr) { return tr.textContent.indexOf("K=") < 0; }) || found.length === n)
        problem("search: rows without the text shown (" + found.length + " of " + n + ")");
      search.value = ""; fire(search, "input");
      var wanted = window.R2V_CHECK_PICK || [];
      wanted.forEach(function (path) {
        var box = document.querySelector('#runs tbody tr[data-run="' + path + '"] input.pick');
        if (!box) { problem("missing: the row of " + path); return; }
        box.click();
      });
      var link = document.querySelector("#compare");
      out.compare = link.getAttribute("href");
      if (link.classList.contains("disabled") || out.compare.indexOf("compare.html?a=") !== 0) problem("compare: not enabled after picking two runs");
      finish();
    }, "the rows of #runs");
  }
  function runPage() {
    when(function () { return document.querySelectorAll("#questions tbody tr").length > 0; }, function () {
      var n = document.querySelectorAll("#questions tbody tr").length, correct = document.querySelector("#f-correct");
      out.rows = n;
      correct.value = "wrong"; fire(correct, "change");
      var wrong = visible("#questions tbody tr");
      out.wrong = wrong.length;
      if (wrong.some(function (tr) { return !tr.querySelector(".ans.bad"); })) problem("filter wrong: a right answer shown");
      correct.value = ""; fire(correct, "change");
      var first = document.querySelector("#questions tbody tr");
      out.opened = first.getAttribute("data-q");
      first.click();
      when(function () { return document.querySelector("#detail table.grid"); }, function () {
        out.rounds = document.querySelectorAll("#detail table.grid th[data-round]").length;
        out.text = document.querySelector("#detail pre").textContent.length;
        finish();
      }, "the debate grid of " + out.opened);
    }, "the rows of #questions");
  }
  function comparePage() {
    when(function () { return document.querySelector("#twobytwo") && document.querySelectorAll("#pairs tbody tr").length; }, function () {
      out.counts = ["c-both", "c-a", "c-b", "c-neither"].map(function (id) { return +document.getElementById(id).textContent; });
      out.p = document.getElementById("p-value") && document.getElementById("p-value").textContent;
      out.mcnemar = document.getElementById("mcnemar").textContent;
      // the 2x2 as a reader reads it: each cell's name and number, and whether its number sits under its column's
      // header and beside its row's header (centres within 3 px across, inside the header's height down)
      var table = document.getElementById("twobytwo"), columns = table.querySelectorAll("thead th");
      var centre = function (el) {  // of the text itself, wherever its box's alignment puts it
        var range = document.createRange(); range.selectNodeContents(el);
        var b = range.getBoundingClientRect(), box = el.getBoundingClientRect();
        return {x: (b.left + b.right) / 2, y: (b.top + b.bottom) / 2, top: box.top, bottom: box.bottom}; };
      out.grid = [];
      Array.prototype.forEach.call(table.querySelectorAll("tbody tr"), function (tr) {
        var head = tr.querySelector("th"), row = {row: head.textContent.trim(), cells: []};
        Array.prototype.forEach.call(tr.querySelectorAll("td"), function (td, k) {
          var number = td.querySelector(".num") || td, n = centre(number), h = centre(columns[k]), r = centre(head);
          var name = td.querySelector(".cell-name");
          row.cells.push({column: columns[k].textContent.trim(), name: name ? name.textContent.trim() : "",
                          number: number.textContent.trim(), kind: td.getAttribute("data-kind")});
          if (Math.abs(n.x - h.x) > 3) problem("2x2: " + row.row + "/" + columns[k].textContent + ": its number is "
                                               + Math.round(n.x - h.x) + " px from its column's header");
          if (n.y < r.top - 1 || n.y > r.bottom + 1) problem("2x2: " + row.row + "/" + columns[k].textContent
                                                             + ": its number is not beside its row's header");
        });
        out.grid.push(row);
      });
      var kinds = Array.prototype.map.call(document.querySelectorAll("#pairs tbody tr"), function (tr) { return tr.getAttribute("data-kind"); });
      out.kinds = kinds;
      var first = document.querySelector("#pairs tbody tr");
      first.click();
      when(function () { return document.querySelectorAll("#detail .run table.grid").length === 2; }, function () {
        out.sides = document.querySelectorAll("#detail .run").length;
        finish();
      }, "both debates of " + first.getAttribute("data-q"));
    }, "the 2x2 table and the questions of the comparison");
  }
  window.addEventListener("load", function () {
    var app = document.getElementById("r2v-app");
    if (!app) { problem("missing: #r2v-app"); finish(); return; }
    var page = app.getAttribute("data-page");
    if (page === "index") indexPage(); else if (page === "run") runPage(); else comparePage();
  });
})();
</script>
"""


def check_viewer(chromium: str, page: Path, tmp_path: Path, *, query: str = "",
                 pick: Sequence[str] = ()) -> tuple[dict, list[str]]:
    """(what VIEWER_CHECK saw, the console messages) of ``page`` (with ``?query``), opened from the disk."""
    copy = page.with_name(page.stem + ".__check__.html")
    setup = f"<script>window.R2V_CHECK_PICK = {json.dumps(list(pick))};</script>"
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", setup + VIEWER_CHECK + "</body>", 1),
                    encoding="utf-8")
    try:
        profile = Path(tempfile.mkdtemp(prefix="profile-viewer-", dir=tmp_path))
        result = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                                 "--virtual-time-budget=30000", "--dump-dom", copy.as_uri() + query],
                                capture_output=True, text=True, timeout=180, check=False)
    finally:
        copy.unlink()
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    found = re.search(r'<html[^>]*data-viewer-check="([^"]*)"', result.stdout)
    seen = json.loads(htmllib.unescape(found.group(1))) if found else {"problems": ["the check never finished"]}
    return seen, console


@pytest.fixture(scope="module")
def viewer_site(tmp_path_factory) -> dict:
    """runs/demo with a memory bank, R2-MAD and MAD runs on the same TruthfulQA questions,
    their pages written by `r2mad runs demo`."""
    root = tmp_path_factory.mktemp("site")
    runs = root / "runs" / "demo"
    cache = ["--cache-dir", str(root / "cache")]
    assert main(["build-memory", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "6",
                 "--out", str(runs / "bank"), *cache]) == 0
    assert main(["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--memory", str(runs / "bank"),
                 "--engine", "simulated", "--limit", "10",
                 "--out", str(runs / "simulated" / "r2mad"), *cache]) == 0
    assert main(["run", "--benchmark", "truthfulqa", "--method", "mad", "--engine", "simulated", "--limit", "10",
                 "--out", str(runs / "simulated" / "mad"), *cache]) == 0
    assert main(["runs", "demo", "--root", str(root), "--quiet"]) == 0
    return {"root": root, "runs": runs, "a": "runs/demo/simulated/r2mad", "b": "runs/demo/simulated/mad"}


def test_the_run_index_sorts_filters_searches_and_compares_two_runs_in_chromium(chromium, viewer_site, tmp_path):
    runs = viewer_site["runs"]
    seen, console = check_viewer(chromium, runs / "index.html", tmp_path, pick=[viewer_site["a"], viewer_site["b"]])
    assert console == [] and seen["problems"] == [], (seen, console)
    assert seen["rows"] == 3 and seen["filtered"][1] >= 1 and seen["searched"] >= 1
    assert seen["compare"] == (f"compare.html?a={urllib.parse.quote(viewer_site['a'], safe='')}"
                               f"&b={urllib.parse.quote(viewer_site['b'], safe='')}")

    seen, console = check_viewer(chromium, runs / "compare.html", tmp_path, query=seen["compare"][len("compare.html"):])
    assert console == [] and seen["problems"] == [], (seen, console)
    correct = [{json.loads(x)["sample_id"]: json.loads(x)["correct"]
                for x in (viewer_site["root"] / run / "transcripts.jsonl").read_text().splitlines()}
               for run in (viewer_site["a"], viewer_site["b"])]
    ids = sorted(correct[0])
    test = inference.paired_estimate([correct[0][q] for q in ids], [correct[1][q] for q in ids], n_bootstrap=2)
    accuracy_a, accuracy_b = (sum(c[q] for q in ids) / len(ids) for c in correct)  # the claims table's test
    both = sum(1 for q in correct[0] if correct[0][q] and correct[1][q])
    assert seen["counts"] == [both, test.a_only, test.b_only, test.n - both - test.a_only
                              - test.b_only]
    assert seen["p"] == f"{test.p_value:.3g}"
    # every cell named by what it counts, under its column's header and beside its row's (no problem reported above)
    a_right, a_wrong, total = seen["grid"]
    assert [c["name"] for c in a_right["cells"][:2] + a_wrong["cells"][:2]] == [
        "both right", "only A right", "only B right", "both wrong"]
    assert (a_right["row"], a_wrong["row"], total["row"]) == ("A right", "A wrong", "total")
    assert [c["column"] for c in a_right["cells"]] == ["B right", "B wrong", "total"]
    assert [int(c["number"]) for c in a_right["cells"] + a_wrong["cells"] + total["cells"]] == [
        seen["counts"][0], seen["counts"][1], seen["counts"][0] + seen["counts"][1],
        seen["counts"][2], seen["counts"][3], seen["counts"][2] + seen["counts"][3],
        seen["counts"][0] + seen["counts"][2], seen["counts"][1] + seen["counts"][3], test.n]
    assert f"accuracy A {accuracy_a:.3f}, B {accuracy_b:.3f}" in seen["mcnemar"]
    discordant = test.a_only + test.b_only
    assert all(kind in ("a", "b") for kind in seen["kinds"][:discordant])  # the questions the runs disagree on first
    assert seen["sides"] == 2

    seen, console = check_viewer(chromium, runs / "simulated" / "r2mad" / "view.html", tmp_path)
    assert console == [] and seen["problems"] == [], (seen, console)
    records = [json.loads(x) for x in (runs / "simulated" / "r2mad" / "transcripts.jsonl").read_text().splitlines()]
    assert seen["rows"] == len(records) and seen["wrong"] == sum(1 for r in records if not r["correct"])
    assert seen["rounds"] == len(records[0]["rounds"]) and seen["text"] > 0


def test_the_2x2_check_fails_on_numbers_away_from_their_headers(chromium, viewer_site, tmp_path):
    """The compare page's check sees the 2x2 of before (issue 61): a full-width table, headers on the left, numbers
    on the right, so that a column's count stands under the next column's header."""
    site = tmp_path / "copy"
    shutil.copytree(viewer_site["runs"], site)
    style = site / "_viewer" / "viewer.css"
    style.write_text(style.read_text() + ".r2v table.twobytwo{width:100%}.r2v table.twobytwo th{text-align:left}"
                     ".r2v table.twobytwo td{text-align:right}")
    seen, _ = check_viewer(chromium, site / "index.html", tmp_path, pick=[viewer_site["a"], viewer_site["b"]])
    seen, _ = check_viewer(chromium, site / "compare.html", tmp_path, query=seen["compare"][len("compare.html"):])
    assert any(p.startswith("2x2: A right/B right: its number is") for p in seen["problems"]), seen


@pytest.mark.parametrize("mutation", ["no-op filter", "syntax error"])
def test_the_viewer_check_fails_when_the_filter_script_is_broken(chromium, viewer_site, tmp_path, mutation):
    """The check above sees a broken filter: one that hides nothing, and a script that does not parse."""
    site = tmp_path / "copy"
    shutil.copytree(viewer_site["runs"], site)
    script = site / "_viewer" / "viewer.js"
    text = script.read_text()
    if mutation == "no-op filter":
        broken = text.replace("var hide = INDEX_FILTERS.some(", "var hide = false && INDEX_FILTERS.some(")
    else:
        broken = text.replace("function render() {", "function render() {{", 1)
    assert broken != text
    script.write_text(broken)
    seen, console = check_viewer(chromium, site / "index.html", tmp_path, pick=[viewer_site["a"], viewer_site["b"]])
    assert seen["problems"] != [] or console != []
    if mutation == "no-op filter":
        assert any(p.startswith("filter") for p in seen["problems"]), seen
    else:
        assert console and any("missing" in p for p in seen["problems"]), (seen, console)


def test_the_viewer_embedded_at_the_books_width_keeps_its_words_whole(chromium, viewer_site, tmp_path):
    """Notebook 04 embeds the viewer (viewer.show): in an output area of the book (its width, the book's CSS, which
    makes every table of an output a scrolling block), a grid cell keeps a readable width (the grid scrolls in its
    frame) instead of one letter per line. With the viewer's style of before (no display:table), the cells were
    9 px wide."""
    from r2mad_lab.report import viewer

    book_css = (ROOT / "docs" / "book" / "book.css").read_text(encoding="utf-8")  # the book's own style (make docs)

    runs = [viewer.load_view(viewer_site["runs"] / "simulated" / "r2mad")]
    fragment = viewer.render(runs, viewer.select_questions(runs, limit=1), page=False, expand=True)
    page = tmp_path / "book.html"
    page.write_text(f'<!DOCTYPE html><html><head><style>{book_css}</style></head><body>'
                    '<div class="jupyter-wrapper" style="width:700px"><div class="jp-OutputArea-output '
                    f'jp-RenderedHTMLCommon">{fragment}</div></div><script>window.addEventListener("load", function () '
                    f'{{'
                    'var w = Array.prototype.map.call(document.querySelectorAll("td.turn"), function (td) {'
                    ' return td.getBoundingClientRect().width; });'
                    'document.documentElement.setAttribute("data-widths", JSON.stringify(w)); });</script>'
                    "</body></html>")
    dom, console = open_page(chromium, page, tmp_path)
    widths = json.loads(htmllib.unescape(re.search(r'data-widths="([^"]*)"', dom).group(1)))
    assert console == [] and widths and min(widths) >= 120, widths


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
    # 404.html is for a web server (mkdocs writes its links from the site root, /...); a reader on the disk never
    # opens it
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


def injected_check(chromium: str, page: Path, script: str, attribute: str, tmp_path: Path,
                   shown: str, width: int | None = None) -> tuple[dict, list[str], str]:
    """(what ``script`` found, the console messages, the DOM) of ``page`` opened with ``script`` before its
    ``</body>`` (in a window ``width`` px wide, default Chromium's 800): the script writes its findings as JSON into
    the ``<html>`` element's ``attribute``."""
    copy = page.with_name(page.stem + ".__check__.html")  # beside the page: its relative links resolve the same
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>", 1), encoding="utf-8")
    try:
        dom, console = open_page(chromium, copy, tmp_path, budget_ms=20000, width=width)
    finally:
        copy.unlink()
    found = re.search(rf'<html[^>]*{attribute}="([^"]*)"', dom)
    assert found, f"{shown}: the check never ran (the page did not finish loading)"
    return json.loads(htmllib.unescape(found.group(1))), console, dom


def check_page(chromium: str, site: Path, page: Path, tmp_path: Path) -> tuple[dict, list[str], str]:
    """(what PAGE_CHECK found, the console messages, the DOM) of ``page``, opened as a reader opens it."""
    found, console, dom = injected_check(chromium, page, PAGE_CHECK, "data-book-check", tmp_path,
                                         str(page.relative_to(site)))
    # MathJax 2's own probe of web fonts (an @font-face "MathJax_Blank" at about:blank) is refused on a file:// page
    console = [line for line in console if "Access to font at 'about:blank'" not in line]
    return found, console, dom


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
        assert not re.search(r"application/vnd\.jupyter\.stderr[^>]*>.{0,600}?\d+%\|", text,
                             re.S), f"{page}: a progress bar"
        assert not re.search(r"Eq\.\s*\(?[a-z_]{4,}\)?", re.sub(r"<[^>]+>", "",
                                                                text)), f"{page}: a dangling Eq. reference"
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
    (site / "assets" / "mathjax" / "config" / f"{build_book.MATHJAX_CONFIG_NAME}.js").write_text(
        build_book.MATHJAX_CONFIG)
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
    assert broken_internal_links(site) == ["bad.html: missing.png (no such file)",
                                           "bad.html: nowhere.html (no such file)",
                                           "bad.html: #nothing (no element #nothing)"]
