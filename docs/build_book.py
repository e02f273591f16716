"""Build the book: the README, docs/*.md and the committed executed notebooks as one static site (`make docs`).

Offline and without executing anything: the notebooks are rendered from their stored outputs
(notebooks/executed/<profile>/, default sim) by mkdocs-jupyter (`execute: false`), the theme is mkdocs-material
with its web fonts off, and MathJax comes from the jupyter-server-mathjax package, copied into the site, so no
page loads anything from the network. The navigation follows the paper: data, memory, results, ablations,
baselines, shared misconception, cost, theory, poisoning, report; then the documents of docs/.

    python docs/build_book.py [--profile sim] [--site site] [--stage _build/book]

What JupyterLab shows is what the book shows (issue 36): MathJax 2.7 draws with the STIX-Web web fonts it ships
(its default, local STIX fonts, has no font data in jupyter-server-mathjax: "[Math Processing Error]" on \\mathcal)
and logs every maths error to the console (:data:`MATHJAX_CONFIG`); progress bars (tqdm's stderr) are left out
(:func:`without_progress`); the pictures docs/ shows are copied beside it.

The book at its width (issue 49; docs/book/book.css and book.js, tests/test_book_browser.py): display equations and
wide tables scroll inside their box; a table of many columns opens in a compact view (the first columns, one line per
cell; the rest behind a toggle, and the table's CSV in the book beside it); every figure is a <figure> with its
caption under it, read from the profile's figures/<profile>/MANIFEST.json (:func:`with_captions`; a Markdown
picture's alt text is its caption); code cells fold (one click shows them) except the parameters cell, papermill's
injected cell and cells tagged ``show-code``; a link from a notebook to ``../r2mad_core/<path>.py#<function>`` opens
that module's page in the book (:func:`source_page`), its functions as anchors.

What a reader sees is what the page means (issue 61; tests/test_book_browser.py, tests/test_book_lists.py): a page's
contents sit in the navigation on the left, so its column is 978 px at 1280 px wide; every figure is drawn no narrower
than its smallest text needs to be 9 px tall (read from the figure's PDF: :func:`figure_style`), scrolling in its box
when the column is narrower; code inputs scroll, outputs wrap at spaces; the compact view of a table of verdicts
shows its verdict columns right after its labels; Markdown lists are laid out as CommonMark reads them
(:func:`commonmark_lists`: Python-Markdown renumbered docs/statistics.md's rules).

The site is written to site/ (gitignored); open site/index.html in a browser.
"""

from __future__ import annotations

import argparse
import ast
import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's r2mad_core (its definition of progress output)

#: The notebooks in the paper's order, with their titles in the navigation.
NOTEBOOKS = [
    ("01_data", "Data (Section 5.1)"),
    ("02_memory", "Memory (Section 3, Eqs. 2-4)"),
    ("03_main_results", "Results (Table 1)"),
    ("04_ablations", "Ablations (Tables 2-3)"),
    ("05_baselines", "Baselines (Tables 5, 6, 8)"),
    ("06_shared_misconception", "Shared misconception (Figs. 3-4, Tables 4, 7)"),
    ("07_cost", "Cost (Table 10)"),
    ("08_theory", "Theory (Section 4)"),
    ("09_poisoned_memory", "Poisoning (Limitations)"),
    ("10_report", "Report: against the paper"),
]

#: docs/ pages in this order when present; any other docs/*.md follows, alphabetically.
DOCS = [
    ("design.md", "Design"),
    ("protocol.md", "Protocol: paper, authors, ours"),
    ("ablations.md", "Running an ablation"),
    ("paper-run.md", "The paper's run"),
    ("command-line.md", "The command line and the debate viewer"),
    ("elsewhere.md", "Use your runs elsewhere"),
    ("data.md", "The data"),
    ("engines.md", "Engines and the cache"),
    ("performance.md", "Performance log"),
    ("reliability.md", "Reliability"),
    ("extending.md", "Extending"),
    ("power.md", "Statistical power of the claims"),
]

#: Other Markdown files the pages link to, copied so the links resolve (not in the navigation).
LINKED = ["notebooks/README.md", "benchmarks/README.md"]
#: The pictures of docs/ (e.g. the import graph of design.md), copied beside the pages that show them.
PICTURES = ("*.png", "*.svg", "*.jpg", "*.gif")

#: A MathJax configuration file loaded after the notebooks' own (``config=...,r2mad-book``): the STIX-Web web
#: fonts MathJax ships in jupyter-server-mathjax, never local fonts it has no data for, and every maths error
#: on the console (a page that cannot typeset its maths says so; tests/test_reader_browser.py reads it).
MATHJAX_CONFIG_NAME = "r2mad-book"
MATHJAX_CONFIG = """MathJax.Hub.Config({
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null},
  SVG: {font: "STIX-Web"}
});
MathJax.Hub.Register.MessageHook("Math Processing Error", function (message) {
  console.error("MathJax: Math Processing Error: " + (message[2] && (message[2].message || message[2])));
});
MathJax.Hub.Register.MessageHook("TeX Jax - parse error", function (message) {
  console.error("MathJax: TeX parse error: " + message[1] + " in " + message[2]);
});
MathJax.Hub.Queue(function () { document.documentElement.setAttribute("data-mathjax", "typeset"); });
MathJax.Ajax.loadComplete("[MathJax]/config/r2mad-book.js");
"""
#: The book's stylesheet and script (docs/book/): wide content scrolls in its box, captions, folds, compact tables.
ASSETS = ROOT / "docs" / "book"
#: A notebook's link to a module of the package (``../r2mad_core/theory/checks.py#check_collapse_rate``).
SOURCE_LINK = re.compile(r"\]\(\.\./(r2mad_core/[\w/]+)\.py(#[\w-]+)?\)")
#: A figure's name in a code cell's source (``ctx.save_figure(fig, "fig_ablation", ...)``), a table's name.
FIGURE_NAME = re.compile(r"[\"'](fig_\w+)[\"']")
TABLE_NAME = re.compile(r"save_table\(\s*[\w.]+\s*,\s*[\"'](\w+)[\"']")


def is_progress(output: dict) -> bool:
    """Whether a notebook output is progress on stderr (a tqdm bar), which the book leaves out."""
    from r2mad_lab.report.volatile import is_progress as progress  # the one definition (a rerun ignores them too)

    return progress(output)


def without_progress(source: Path, target: Path, captions: dict[str, str] | None = None,
                     tables_dir: str | None = None, figures_dir: Path | None = None) -> int:
    """Copy the notebook ``source`` to ``target`` without its progress output; returns how many were dropped.

    With ``captions`` (figure name -> caption, :func:`figure_captions`), every figure becomes a figure with its caption
    under it (:func:`with_captions`); with ``tables_dir`` (the book's folder of the profile's CSVs, relative to the
    page), a cell that saves tables links their CSV files under its outputs. Links to the package's modules point
    to their pages in the book (:data:`SOURCE_LINK`)."""
    notebook = json.loads(source.read_text(encoding="utf-8"))
    dropped = 0
    figure_number = 0
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell.get("source", ""))
            cell["source"] = SOURCE_LINK.sub(lambda m: f"](../source/{m.group(1)}.html{m.group(2) or ''})", text)
        if "outputs" in cell:
            kept = [output for output in cell["outputs"] if not is_progress(output)]
            dropped += len(cell["outputs"]) - len(kept)
            code = "".join(cell.get("source", ""))
            if captions is not None:
                kept, figure_number = with_captions(kept, code, captions, source.stem, figure_number, figures_dir)
            names = TABLE_NAME.findall(code)
            if tables_dir is not None and names:
                links = ", ".join(f'<a href="{tables_dir}/{n}.csv">{n}.csv</a>' for n in names)
                kept.append({"output_type": "display_data", "metadata": {},
                             "data": {"text/html": f'<p class="r2mad-files">Every row and column: {links}</p>',
                                      "text/plain": f"tables: {', '.join(names)}"}})
            cell["outputs"] = kept
    target.write_text(json.dumps(notebook, ensure_ascii=False, indent=1), encoding="utf-8")
    return dropped


def figure_captions(profile: str) -> dict[str, str]:
    """Figure name -> caption, from figures/<profile>/MANIFEST.json (what the notebooks saved, as they ran)."""
    manifest = ROOT / "figures" / profile / "MANIFEST.json"
    if not manifest.is_file():
        raise SystemExit(f"build_book: {manifest.relative_to(ROOT)} is missing (make reproduce PROFILE={profile})")
    artifacts = json.loads(manifest.read_text(encoding="utf-8")).get("artifacts", {})
    return {name: str(entry.get("caption") or "") for name, entry in artifacts.items() if entry.get("kind") == "figure"}


def with_captions(outputs: list[dict], code: str, captions: dict[str, str], notebook: str,
                  number: int, figures_dir: Path | None = None) -> tuple[list[dict], int]:
    """``outputs`` with every PNG figure replaced by an HTML <figure> holding it and its caption under it.

    The figures of a cell are named by the ``"fig_..."`` strings of its source, in order (``ctx.save_figure(fig,
    "fig_ablation", ...)``); each caption is the one the manifest recorded. A figure without a caption keeps a
    caption that says so (the browser test fails on it). ``number`` counts the notebook's figures. With
    ``figures_dir`` (the profile's figures), each figure is drawn no narrower than its smallest text needs
    (:func:`figure_style`)."""
    names = [n for n in dict.fromkeys(FIGURE_NAME.findall(code)) if n in captions]
    out = []
    for output in outputs:
        data = output.get("data", {})
        if "image/png" not in data:
            out.append(output)
            continue
        number += 1
        name = names.pop(0) if names else None
        caption = captions.get(name, "") if name else ""
        if not caption:
            caption = f"(no caption recorded for this figure of {notebook})"
        png = data["image/png"]
        png = "".join(png) if isinstance(png, list) else png
        label = f"Figure {notebook[:2].lstrip('0')}.{number}"
        style = figure_style(png, figures_dir / f"{name}.pdf") if name and figures_dir is not None else ""
        figure = (f'<figure class="r2mad-figure" id="figure-{number}"'
                  f'{f" data-name={chr(34)}{name}{chr(34)}" if name else ""}>'
                  f'<img src="data:image/png;base64,{png.strip()}" alt="{html.escape(caption)}"{style}>'
                  f"<figcaption><b>{label}.</b> {html.escape(caption)}"
                  + (f' <span class="r2mad-files">({name}.png)</span>' if name else "") + "</figcaption></figure>")
        out.append({"output_type": "display_data", "metadata": {},
                    "data": {"text/html": figure, "text/plain": f"{label}. {caption}"}})
    return out, number


#: The smallest text a reader should have to read in a figure, in CSS px (issue 61: 5 px labels at 1280 px wide).
MIN_TEXT_PX = 9.0
PDF_BOX = re.compile(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]")
PDF_STREAM = re.compile(rb"stream\r?\n(.*?)\r?\nendstream", re.S)
PDF_FONT_SIZE = re.compile(rb"/F\w*\s+([\d.]+)\s+Tf")


def smallest_text(pdf: Path) -> tuple[float, float, float] | None:
    """(page width, page height, the smallest font size), in points, of a figure's PDF (matplotlib's: every text is
    set with ``/F<n> <size> Tf`` in a Flate-compressed content stream); None without a PDF or any text.

    The PNG beside it is the same figure at another resolution, so size / width is the height of the smallest text
    per unit of the figure's drawn width."""
    import zlib

    if not pdf.is_file():
        return None
    data = pdf.read_bytes()
    box = PDF_BOX.search(data)
    if box is None:
        return None
    x0, y0, x1, y1 = (float(v) for v in box.groups())
    sizes = []
    for stream in PDF_STREAM.finditer(data):
        try:
            content = zlib.decompress(stream.group(1))
        except zlib.error:
            content = stream.group(1)
        sizes += [float(size) for size in PDF_FONT_SIZE.findall(content)]
    sizes = [size for size in sizes if size > 0]
    return (x1 - x0, y1 - y0, min(sizes)) if sizes else None


def png_size(png_base64: str) -> tuple[int, int]:
    """(width, height) in pixels of a base64 PNG, from its IHDR chunk."""
    head = base64.b64decode(png_base64.strip()[:44])
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def figure_style(png_base64: str, pdf: Path) -> str:
    """The <img> attributes that draw a figure no narrower than its smallest text needs (:data:`MIN_TEXT_PX`): the
    column's width (never wider than the PNG itself), or the width at which that text is MIN_TEXT_PX tall when the
    column is narrower (the figure then scrolls inside its box). The smallest text is read from the figure's PDF
    (:func:`smallest_text`); the PNG and PDF must have one shape, else the figure keeps the column's width."""
    text = smallest_text(pdf)
    width, height = png_size(png_base64)
    if text is None or not width or not height or abs(width / height - text[0] / text[1]) > 0.02 * width / height:
        return ""
    need = min(width, int(-(-MIN_TEXT_PX * text[0] // text[2])))
    return (f' data-text-fraction="{text[2] / text[0]:.6f}" style="width:max(min(100%,{width}px),{need}px);'
            f'max-width:none"')


def source_page(module: str) -> str:
    """A Markdown page of ``module`` (``r2mad_core/theory/checks``): its docstring, then each top-level function and
    class with its own anchor (``#name``, lower case), signature, docstring and source."""
    path = ROOT / f"{module}.py"
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = [f"# `{module.replace('/', '.')}`", "", f"The source of `{module}.py`, one section per function.", ""]
    doc = ast.get_docstring(tree)
    if doc:
        lines += ["```text", doc, "```", ""]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            lines += [f'<a id="{node.name.lower()}"></a>', "", f"## `{node.name}`", "", "```python",
                      ast.get_source_segment(text, node) or "", "```", ""]
    return "\n".join(lines)


#: A list item's marker line: its indentation, its marker (``-``, ``*``, ``+``, ``12.``, ``3)``) and the spaces after
#: it.
LIST_MARKER = re.compile(r"^( *)([-*+]|\d{1,9}[.)])( *)")
#: A continuation line of an item that Python-Markdown would read as a new item: its marker, escaped by the book.
CONTINUED_MARKER = re.compile(r"^(\d{1,9}|)([.)]|[-*+])(?= )")
#: Python-Markdown's indentation of a nested block (its ``tab_length``): the book's renderer needs 4 where
#: CommonMark needs the width of the marker ("1. " is 3).
NESTED_INDENT = 4


def commonmark_lists(text: str) -> str:
    """``text`` with every list laid out as CommonMark reads it, in the indentation Python-Markdown (mkdocs'
    renderer) needs: each line inside a list item indented by :data:`NESTED_INDENT` per enclosing item, plus what it
    has beyond the item's content column. Issue 61: docs/statistics.md's sub-bullets under "3. ", indented 3 spaces
    (the width of "3. ", enough for CommonMark), were read by Python-Markdown as items 4-8 of the numbered list, so
    its rules 4-9 showed as 9-14. markdown-it-py (CommonMark) finds the items; the source file is left as written."""
    from markdown_it import MarkdownIt

    lines = text.split("\n")
    items = []  # (first line, end line, content column) of every list item, outermost first
    # Python-Markdown needs a blank line where CommonMark does not: before a list right under a paragraph, before a
    # list's item that follows a paragraph of the item before it (in a loose list: the blank line changes nothing),
    # and where a list ends at a line that is not blank (a table right under a list's last item)
    blank_before: set[int] = set()
    code: set[int] = set()  # the lines of code blocks: never escaped
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    for index, token in enumerate(tokens):
        if token.type in ("bullet_list_open", "ordered_list_open") and token.map is not None:
            if token.level == 0:  # a list right under a paragraph (CommonMark lets a list interrupt a paragraph)
                blank_before.update(token.map)
            inner = []
            for other in tokens[index + 1:]:
                if other.level <= token.level:
                    break
                inner.append(other)
            loose = any(o.type == "paragraph_open" and o.level == token.level + 2 and not o.hidden for o in inner)
            if loose:
                blank_before.update(o.map[0] for o in inner
                                    if o.type == "list_item_open" and o.level == token.level + 1 and o.map)
        if token.type in ("fence", "code_block") and token.map is not None:
            code.update(range(*token.map))
        if token.type != "list_item_open" or token.map is None:
            continue
        start, end = token.map
        marker = LIST_MARKER.match(lines[start].expandtabs(4))
        if marker is None:
            continue
        indent, mark, spaces = (len(g) for g in marker.groups())
        rest = lines[start].expandtabs(4)[marker.end():]
        spaces = 1 if not rest.strip() or spaces > 4 else spaces  # an empty item, or indented code after the marker
        items.append((start, end, indent + mark + spaces))
    if not items:
        return text
    out: list[str] = []
    for number, line in enumerate(lines):
        if number in blank_before and line.strip() and out and out[-1].strip():
            out.append("")
        inside = [column for start, end, column in items if start < number < end]  # continuation lines of the items
        opens = [column for start, end, column in items if start == number]  # the item this line starts
        if not line.strip() or not (inside or opens):
            out.append(line)
            continue
        expanded = line.expandtabs(4)
        indent = len(expanded) - len(expanded.lstrip(" "))
        if opens and not inside:  # a top-level item's marker line: as written
            out.append(line)
            continue
        depth, column = len(inside), max(inside)
        extra = max(0, indent - column) if not opens else 0  # a nested marker sits at its parent's content
        body = expanded.lstrip(" ")
        if not opens and number not in code:  # a line of text that only looks like a marker ("435. Each ...")
            body = CONTINUED_MARKER.sub(lambda m: m.group(1) + "\\" + m.group(2), body, count=1)
        out.append(" " * (NESTED_INDENT * depth + extra) + body)
    return "\n".join(out)


def mathjax_dir() -> Path:
    """MathJax 2.7 as the jupyter-server-mathjax package ships it (the `docs` extra)."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def stage_markdown(source: Path, target: Path) -> None:
    """A Markdown page into the book, its lists as CommonMark reads them (:func:`commonmark_lists`)."""
    target.write_text(commonmark_lists(source.read_text(encoding="utf-8")), encoding="utf-8")


def stage(profile: str, stage_dir: Path, executed: Path | None = None) -> list[dict[str, object]]:
    """Copy the pages into ``stage_dir`` (README as the index, docs/, the executed notebooks); return the nav."""
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    (stage_dir / "docs").mkdir(parents=True)
    (stage_dir / "notebooks").mkdir()
    stage_markdown(ROOT / "README.md", stage_dir / "README.md")  # mkdocs makes it index.html
    # The README links docs/x.md; in the book the index sits beside docs/, so those links resolve as they are.
    executed = ROOT / "notebooks" / "executed" / profile if executed is None else executed
    captions = figure_captions(profile)
    (stage_dir / "tables").mkdir()
    for table in sorted((ROOT / "figures" / profile).glob("*.csv")):  # the full tables the compact views point to
        shutil.copy2(table, stage_dir / "tables" / table.name)
    nav_notebooks = []
    modules: set[str] = set()
    for name, title in NOTEBOOKS:
        source = executed / f"{name}.ipynb"
        if not source.exists():
            raise SystemExit(f"build_book: {source} is missing (make reproduce PROFILE={profile})")
        without_progress(source, stage_dir / "notebooks" / source.name, captions, "../tables",
                         ROOT / "figures" / profile)
        modules.update(m.group(1) for m in SOURCE_LINK.finditer(source.read_text(encoding="utf-8")))
        nav_notebooks.append({title: f"notebooks/{source.name}"})
    for module in sorted(modules):  # the modules the notebooks link to, as pages (not in the navigation)
        page = stage_dir / "source" / f"{module}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(source_page(module), encoding="utf-8")
    pages = {p.name: p for p in sorted((ROOT / "docs").glob("*.md"))}
    order = [name for name, _ in DOCS if name in pages] + [n for n in pages if n not in dict(DOCS)]
    titles = dict(DOCS)
    nav_docs = []
    for name in order:
        stage_markdown(pages[name], stage_dir / "docs" / name)
        nav_docs.append({titles.get(name, Path(name).stem.replace("-", " ").capitalize()): f"docs/{name}"})
    for pattern in PICTURES:
        for picture in sorted((ROOT / "docs").glob(pattern)):
            shutil.copy2(picture, stage_dir / "docs" / picture.name)
    for name in LINKED:
        if (ROOT / name).exists():
            (stage_dir / name).parent.mkdir(parents=True, exist_ok=True)
            stage_markdown(ROOT / name, stage_dir / name)
    shutil.copytree(mathjax_dir(), stage_dir / "assets" / "mathjax")
    (stage_dir / "assets" / "mathjax" / "config" / f"{MATHJAX_CONFIG_NAME}.js").write_text(
        MATHJAX_CONFIG, encoding="utf-8")
    for asset in ("book.css", "book.js"):
        shutil.copy2(ASSETS / asset, stage_dir / "assets" / asset)
    return [{"Home": "README.md"}, {f"Notebooks ({profile} profile)": nav_notebooks}, {"Documentation": nav_docs}]


def config(profile: str, stage_dir: Path, site_dir: Path, nav: list[dict[str, object]]) -> dict[str, object]:
    return {
        "site_name": "r2mad: a reproducible R2-MAD",
        "site_description": f"The R2-MAD reproduction: notebooks executed with the {profile} profile, and the docs",
        "docs_dir": str(stage_dir),
        "site_dir": str(site_dir),
        "use_directory_urls": False,  # plain .html files: the site opens from the disk, no server
        # toc.integrate: a page's contents in the navigation on the left, so the page's column has the width the
        # right-hand sidebar took (issue 61)
        "theme": {"name": "material", "font": False,
                  "features": ["navigation.sections", "toc.follow", "toc.integrate"]},
        "plugins": [
            {"search": {}},
            {"mkdocs-jupyter": {
                "execute": False,
                "include": ["*.ipynb"],
                "include_source": False,
                "ignore_h1_titles": True,
                "cache": False,
                # Every notebook page sits in notebooks/, one level below the root.
                "custom_mathjax_url": "../assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe,"
                                      + MATHJAX_CONFIG_NAME,
            }},
        ],
        "extra_css": ["assets/book.css"],
        "extra_javascript": ["assets/book.js"],
        "markdown_extensions": ["tables", "admonition", "toc"],
        "validation": {"links": {"not_found": "info", "unrecognized_links": "info", "absolute_links": "info"},
                       "nav": {"omitted_files": "info"}},
        "nav": nav,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the book of the executed notebooks and docs/ (offline).")
    parser.add_argument("--profile", default="sim", help="whose executed notebooks (notebooks/executed/PROFILE)")
    parser.add_argument("--site", type=Path, default=ROOT / "site", help="output folder (default: site/)")
    parser.add_argument("--stage", type=Path, default=ROOT / "_build" / "book", help="staging folder")
    parser.add_argument("--executed", type=Path, default=None,
                        help="the executed notebooks (default: notebooks/executed/PROFILE)")
    args = parser.parse_args(argv)
    stage_dir, site_dir = args.stage.resolve(), args.site.resolve()
    nav = stage(args.profile, stage_dir, args.executed)
    config_path = stage_dir.parent / "mkdocs.yml"
    config_path.write_text(yaml.safe_dump(config(args.profile, stage_dir, site_dir, nav), sort_keys=False,
                                          allow_unicode=True), encoding="utf-8")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about a future MkDocs 2
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--clean", "-f", str(config_path)], check=False,
                            env=env)
    if result.returncode:
        return result.returncode
    print(f"book: {site_dir / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
