"""The book (`make docs`) at its width, every page opened in headless Chromium as a reader opens it (issue 49).

Fails on a display equation or a table wider than its box without a scrollbar (cut off at the page's edge or by a box
that hides it), on a picture without a caption under it, on notebook 08's propositions not typeset as mathematics
(MathJax output), on code cells that do not fold, and on notebook 04's equations not numbered and linked as in the
paper. A second test proves the page check fails when it should, on a page built to be wrong.

Debian's `chromium` and the `docs` extra are needed; without them the tests are skipped on a developer's machine and
fail under CI (CI=true), as tests/test_reader_browser.py's, whose page opener they share.
"""

from __future__ import annotations

import base64
import html as htmllib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_reader_browser import injected_check, need

ROOT = Path(__file__).resolve().parent.parent

#: Appended to a copy of a page: once the page has loaded, book.js has run and MathJax (if any) has typeset, it writes
#: what a reader would see wrong, and what the page shows, into ``data-layout-check`` on <html>.
LAYOUT_CHECK = """<script>
(function () {
  function scrolls(node) { var o = getComputedStyle(node).overflowX; return o === "auto" || o === "scroll"; }
  function hides(node) { var o = getComputedStyle(node).overflowX; return o === "hidden" || o === "clip"; }
  // Whether the content of ``el`` runs past what a reader can see: wider than the column (or a box that hides its
  // overflow) with no scrolling box, inside the column, that holds it.
  function cut(el, frame) {
    var width = el.scrollWidth, left = el.getBoundingClientRect().left;
    for (var node = el; node && node !== document.body; node = node.parentElement) {
      var box = node.getBoundingClientRect();
      var overflowing = node === el ? node.scrollWidth > node.clientWidth + 1 : left + width > box.right + 1;
      if (!overflowing) continue;
      if (scrolls(node)) return box.left < frame.left - 1 || box.right > frame.right + 1;  // scrolls: inside the column?
      if (hides(node)) return true;  // a box that clips it: cut off
    }
    return left + width > frame.right + 1;  // it spills past the column
  }
  function label(el) { return (el.textContent || "").replace(/\\s+/g, " ").trim().slice(0, 80); }
  function check() {
    var article = document.querySelector("article") || document.body;
    // the page's column: mkdocs-material's content box (its scroll wrappers of tables reach into its padding)
    var frame = (document.querySelector(".md-content") || article).getBoundingClientRect();
    var out = {cut_equations: [], cut_tables: [], cut_elements: [], figure_widths: {}, uncaptioned: [], equations: 0,
               tables: 0, figures: 0,
               folds: 0, open_folds: 0, unfolded_code: [], eqref_links: 0, tags: [], statements: {},
               mathjax: document.documentElement.getAttribute("data-mathjax"),
               book_js: document.documentElement.getAttribute("data-book-js"),
               has_mathjax: !!(window.MathJax && window.MathJax.Hub)};
    article.querySelectorAll(".MathJax_Display, mjx-container[display='true']").forEach(function (el) {
      out.equations += 1;
      if (cut(el, frame)) out.cut_equations.push(el.scrollWidth + "px: " + label(el));
    });
    article.querySelectorAll("table").forEach(function (el) {
      out.tables += 1;
      if (cut(el, frame)) out.cut_tables.push(el.scrollWidth + "px in a " + Math.round(frame.width) + "px column: "
                                              + label(el.rows[0] || el));
    });
    article.querySelectorAll("img").forEach(function (img) {
      out.figures += 1;
      var figure = img.closest("figure"), caption = figure && figure.querySelector("figcaption");
      var text = caption ? caption.textContent.trim() : "";
      var under = caption && caption.getBoundingClientRect().top >= img.getBoundingClientRect().bottom - 1;
      if (!caption || !text || !under || text.indexOf("no caption recorded") >= 0)
        out.uncaptioned.push((img.getAttribute("src") || "").slice(0, 60) + (caption ? " (caption: " + text.slice(0, 60) + ")" : ""));
    });
    article.querySelectorAll(".jp-CodeCell").forEach(function (cell) {
      var input = cell.querySelector(".jp-Cell-inputWrapper");
      if (!input) return;
      var fold = input.closest("details.r2mad-fold");
      if (fold) { out.folds += 1; if (fold.open) out.open_folds += 1; }
      else out.unfolded_code.push(Array.prototype.filter.call(cell.classList, function (c) {
        return c.indexOf("celltag_") === 0; }).join(" ") || "untagged: " + label(input));
    });
    // any other element: none runs past the column, or is cut by a box that hides it, without a scrolling box
    // of its own inside the column (code, an output, a figure, a table's cell); the outermost of each is reported
    var seenCut = [];
    article.querySelectorAll("*").forEach(function (el) {
      var box = el.getBoundingClientRect();
      if (box.width <= 1 || box.height <= 1 || el.closest(".MJX_Assistive_MathML")  // MathJax's text for screen readers
          || seenCut.some(function (outer) { return outer.contains(el); })) return;
      var past = box.left + el.scrollWidth > frame.right + 1, clipped = el.scrollWidth > el.clientWidth + 1 && hides(el);
      if ((past || clipped) && cut(el, frame)) {
        seenCut.push(el);
        out.cut_elements.push(el.tagName.toLowerCase() + (el.className && typeof el.className === "string"
          ? "." + el.className.trim().split(/\\s+/).join(".") : "") + " " + el.scrollWidth + "px: " + label(el));
      }
    });
    // every figure the book sized: its name and the width it is drawn at (the test reads its smallest text from
    // the figure's PDF), and whether a box it overflows scrolls
    article.querySelectorAll("figure.r2mad-figure[data-name] img").forEach(function (img) {
      out.figure_widths[img.closest("figure").getAttribute("data-name")] = img.getBoundingClientRect().width;
    });
    out.column = frame.width;
    // each compact view of a long table: its headers, and whether each is in sight before any scrolling
    out.compact_views = [];
    article.querySelectorAll("table.r2mad-compact-view").forEach(function (table) {
      var right = Math.min(table.getBoundingClientRect().right, frame.right);
      out.compact_views.push(Array.prototype.map.call(table.rows[0].cells, function (cell) {
        return [cell.textContent.trim(), cell.getBoundingClientRect().right <= right + 1]; }));
    });
    out.eqref_links = article.querySelectorAll("a[href^='#mjx-eqn']").length;
    article.querySelectorAll(".MathJax_Display").forEach(function (el) {
      ((el.textContent || "").match(/\\(\\d+\\)/g) || []).forEach(function (tag) { out.tags.push(tag.slice(1, -1)); });
    });
    article.querySelectorAll("h2").forEach(function (heading) {
      var cell = heading.closest(".jp-Cell") || heading.parentElement;
      out.statements[heading.textContent.replace(/\\u00b6/g, "").trim()] = {
        display_maths: cell.querySelectorAll(".MathJax_Display").length,
        raw_tex: (cell.innerText || "").indexOf("$$") >= 0 || /\\\\(mathbb|frac|theta)/.test(cell.innerText || "")};
    });
    document.documentElement.setAttribute("data-layout-check", JSON.stringify(out));
  }
  window.addEventListener("load", function () {
    if (window.MathJax && window.MathJax.Hub) window.MathJax.Hub.Queue(check); else check();
  });
})();
</script>
"""


#: The smallest figure text the book draws at 1280 px (docs/build_book.py, MIN_TEXT_PX; ~9 px: issue 61).
MIN_TEXT_PX = 9.0


def figure_text(found: dict) -> dict[str, float]:
    """Figure name -> the height in CSS px of its smallest text as drawn: its drawn width times the smallest font
    size over the page width of the figure's PDF (figures/sim/<name>.pdf, read by build_book.smallest_text)."""
    sys.path.insert(0, str(ROOT / "docs"))
    import build_book

    sizes = {}
    for name, width in found["figure_widths"].items():
        text = build_book.smallest_text(ROOT / "figures" / "sim" / f"{name}.pdf")
        assert text is not None, f"{name}: no PDF with text beside its PNG"
        sizes[name] = width * text[2] / text[0]
    return sizes


def layout(chromium: str, page: Path, tmp_path: Path, width: int = 1280) -> tuple[dict, list[str]]:
    """(what LAYOUT_CHECK found, the console messages) of ``page`` in a window ``width`` px wide."""
    found, console, _ = injected_check(chromium, page, LAYOUT_CHECK, "data-layout-check", tmp_path, str(page), width)
    return found, console


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    """The book as `make docs` builds it (the committed executed notebooks of the sim profile)."""
    try:
        import mkdocs  # noqa: F401
        import mkdocs_jupyter  # noqa: F401
    except ImportError:
        need(False, "the docs extra is not installed (pip install -e '.[docs]')")
    tmp = tmp_path_factory.mktemp("book")
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "build_book.py"), "--site", str(tmp / "site"),
                             "--stage", str(tmp / "stage")], capture_output=True, text=True, timeout=1200, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp / "site"


def test_every_page_of_the_book_at_its_width(chromium, book, tmp_path):
    """Every page: no equation or table cut off (wider than its box without a scrollbar), every picture with a
    caption under it, code folded (one click shows it) but for the parameters and the by-hand cells."""
    pages = sorted(p for p in book.rglob("*.html") if p.name != "404.html")
    notebooks = {p.stem: p for p in pages if p.parent.name == "notebooks" and re.match(r"\d\d_", p.name)}
    assert len(notebooks) == 10 and len(pages) > 20
    problems, seen = {}, {}
    for page in pages:
        found, _ = layout(chromium, page, tmp_path)
        name = str(page.relative_to(book))
        seen[name] = found
        wrong = {key: found[key][:10] for key in ("cut_equations", "cut_tables", "cut_elements", "uncaptioned")
                 if found[key]}
        small = {name: round(px, 1) for name, px in figure_text(found).items() if px < MIN_TEXT_PX - 0.05}
        if small:
            wrong["figure text under 9 px"] = small
        if found["book_js"] != "done":
            wrong["book_js"] = "the book's script did not run"
        if found["has_mathjax"] and found["mathjax"] != "typeset":
            wrong["mathjax"] = "MathJax never finished typesetting"
        if page.stem in notebooks:
            unfolded = [c for c in found["unfolded_code"] if not re.search(r"parameters|show-code", c)]
            if unfolded or found["open_folds"] or not found["folds"]:
                wrong["folds"] = {"folds": found["folds"], "open": found["open_folds"], "not folded": unfolded}
        if wrong:
            problems[name] = wrong
    assert problems == {}, json.dumps(problems, indent=1)[:6000]
    # the checks looked at something: the book has equations, wide tables and figures
    assert sum(f["equations"] for f in seen.values()) >= 12  # 04: Eqs. 5-7, 08: its statements, 01 and 03
    assert sum(f["figures"] for f in seen.values()) >= 16  # every notebook figure, and design.md's import graph
    assert seen["docs/design.html"]["figures"] >= 1


def test_the_books_pages_number_their_lists_as_their_sources(book):
    """Every Markdown page as built: its lists nested and numbered as CommonMark reads its source (issue 61:
    docs/statistics.md's rules 4-9 showed as 9-14); tests/test_book_lists.py checks the renderer the same way."""
    from test_book_lists import PAGES, commonmark, outline

    for source in PAGES:
        name = source.relative_to(ROOT)
        built = book / ("index.html" if name == Path("README.md") else name.with_suffix(".html"))
        if name.parts[0] not in ("docs", "README.md") and not built.is_file():
            built = book / name.parent / "index.html"  # notebooks/README.md is notebooks/index.html
        article = re.search(r"<article[^>]*>(.*)</article>", built.read_text(encoding="utf-8"), re.S).group(1)
        assert outline(article) == commonmark(source.read_text(encoding="utf-8")), name


def test_notebook_10_at_1280_px_its_claims_verdicts_in_sight_and_its_figures_readable(chromium, book, tmp_path):
    """Issue 61: the claims table was 1,749 px wide in a 648 px column, its verdicts off-screen; figure 10.2's labels
    were 5 px tall. At 1280 px: nothing runs past the column or is cut without a scrolling box of its own, the
    claims table's compact view shows each claim's outcome, significance and adjusted p before any scrolling, and
    every figure's smallest text is at least 9 px tall."""
    found, _ = layout(chromium, book / "notebooks" / "10_report.html", tmp_path, width=1280)
    assert found["cut_elements"] == [] and found["cut_tables"] == [], found
    assert found["column"] >= 900, found["column"]  # the page's contents moved to the left navigation
    claims = next(view for view in found["compact_views"] if "ordering" in dict(view))
    in_sight = [name for name, shown in claims if shown]
    assert {"ordering", "benchmark", "outcome", "significant", "p_holm"} <= set(in_sight), claims
    sizes = figure_text(found)
    assert {"fig_paper_vs_reproduced", "fig_paper_claims_power"} <= set(sizes), sizes
    assert min(sizes.values()) >= MIN_TEXT_PX - 0.05, sizes
    found, _ = layout(chromium, book / "notebooks" / "10_report.html", tmp_path, width=800)
    assert found["cut_elements"] == [] and found["cut_tables"] == [], found
    assert min(figure_text(found).values()) >= MIN_TEXT_PX - 0.05


def test_notebook_04_numbers_its_equations_and_shows_the_worked_state(chromium, book, tmp_path):
    """Eqs. 5-7 carry the paper's numbers and the text links them; the by-hand cells are not folded."""
    found, _ = layout(chromium, book / "notebooks" / "04_ablations.html", tmp_path)
    assert {"5", "6", "7"} <= set(found["tags"]), found["tags"]
    assert found["eqref_links"] >= 4
    assert sum("show-code" in c for c in found["unfolded_code"]) >= 4, found["unfolded_code"]  # the by-hand cells
    page = (book / "notebooks" / "04_ablations.html").read_text(encoding="utf-8")
    assert "One debate state, worked by hand" in page and "AssertionError" not in page


def test_notebook_08_states_its_propositions_in_typeset_mathematics(chromium, book, tmp_path):
    """Each statement of Section 4 and Appendix C, under its paper number, renders as MathJax output (no raw TeX),
    and links the function of r2mad_core.theory that simulates it (its page in the book)."""
    found, _ = layout(chromium, book / "notebooks" / "08_theory.html", tmp_path)
    statements = found["statements"]
    for number in ("Proposition 4.1", "Proposition 4.2", "Lemma C.2", "Theorem C.3"):
        heading = next((h for h in statements if h.startswith(number)), None)
        assert heading is not None, (number, list(statements))
        assert (statements[heading]["display_maths"] >= 1 and not statements[heading]["raw_tex"]), (heading,
                                                                                                    statements[heading])
    page = (book / "notebooks" / "08_theory.html").read_text(encoding="utf-8")
    for link in ("checks.html#check_prior_correction", "checks.html#check_collapse_rate",
                 "checks.html#check_log_odds_decomposition", "checks.html#check_joint_bound"):
        assert f"../source/r2mad_core/theory/{link}" in page, link
    checks = (book / "source" / "r2mad_core" / "theory" / "checks.html").read_text(encoding="utf-8")
    assert 'id="check_joint_bound"' in checks and "def check_joint_bound(" in htmllib.unescape(checks)


def test_the_layout_check_fails_on_a_cut_off_equation_or_table_and_an_uncaptioned_figure(chromium, book, tmp_path):
    """A page with the book's own stylesheet, script and MathJax, holding an equation and a table in boxes that hide
    their overflow and a picture without a caption: each is reported. The same equation and table in the book's
    boxes, and a captioned figure, are not."""
    png = base64.b64encode((ROOT / "docs" / "import-graph.png").read_bytes()).decode()
    long_sum = " + ".join(rf"\frac{{a_{{{k}}}}}{{b_{{{k}}}}}" for k in range(60))
    cells = "".join(f"<td style='white-space:nowrap'>{'x' * 200}</td>" for _ in range(6))  # no compact view: 6 columns
    page = book / "notebooks" / "bad_layout.html"
    head = re.search(r"<head>.*?</head>", (book / "notebooks" / "08_theory.html").read_text(encoding="utf-8"),
                     re.S).group(0)
    mathjax = re.search(r'<script[^>]+src="[^"]*MathJax\.js[^"]*"[^>]*>',
                        (book / "notebooks" / "08_theory.html").read_text(encoding="utf-8")).group(0) + "</script>"
    page.write_text(
        f"<html>{head}<body>{mathjax}<article style='width:700px'>"
        f"<div style='overflow:hidden'><div style='width:3000px'><p>$$ {long_sum} $$</p></div></div>"
        f"<div style='overflow:hidden'><table><tr>{cells}</tr></table></div>"
        f"<p><img src='data:image/png;base64,{png}' width='300'></p>"
        f"<div class='jupyter-wrapper'><div class='jp-RenderedMarkdown'><p>$$ {long_sum} $$</p></div></div>"
        f"<figure class='r2mad-figure'><img src='data:image/png;base64,{png}' width='300'>"
        f"<figcaption>A caption under it.</figcaption></figure>"
        "</article></body></html>", encoding="utf-8")
    try:
        found, _ = layout(chromium, page, tmp_path)
    finally:
        page.unlink()
    assert found["mathjax"] == "typeset" and found["equations"] == 2, found
    assert len(found["cut_equations"]) == 1 and len(found["cut_tables"]) == 1, found
    assert len(found["uncaptioned"]) == 1 and found["figures"] == 2, found
