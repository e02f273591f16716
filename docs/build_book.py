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
(:func:`without_progress`); wide tables scroll inside their frame (:data:`BOOK_CSS`); the pictures docs/ shows
are copied beside it.

The site is written to site/ (gitignored); open site/index.html in a browser.
"""

from __future__ import annotations

import argparse
import json
import os
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
#: Wide tables (a notebook's data frames, Markdown tables) scroll inside their frame instead of being cut off.
BOOK_CSS = """.jupyter-wrapper .jp-OutputArea-output, .jupyter-wrapper .jp-RenderedMarkdown { overflow-x: auto; }
.jupyter-wrapper .jp-RenderedHTMLCommon table { display: block; max-width: 100%; overflow-x: auto; }
.md-typeset table:not([class]) { display: block; max-width: 100%; overflow-x: auto; }
"""


def is_progress(output: dict) -> bool:
    """Whether a notebook output is progress on stderr (a tqdm bar), which the book leaves out."""
    from r2mad_core.report.volatile import is_progress as progress  # the one definition (a rerun ignores them too)

    return progress(output)


def without_progress(source: Path, target: Path) -> int:
    """Copy the notebook ``source`` to ``target`` without its progress output; returns how many were dropped."""
    notebook = json.loads(source.read_text(encoding="utf-8"))
    dropped = 0
    for cell in notebook.get("cells", []):
        if "outputs" in cell:
            kept = [output for output in cell["outputs"] if not is_progress(output)]
            dropped += len(cell["outputs"]) - len(kept)
            cell["outputs"] = kept
    target.write_text(json.dumps(notebook, ensure_ascii=False, indent=1), encoding="utf-8")
    return dropped


def mathjax_dir() -> Path:
    """MathJax 2.7 as the jupyter-server-mathjax package ships it (the `docs` extra)."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def stage(profile: str, stage_dir: Path) -> list[dict[str, object]]:
    """Copy the pages into ``stage_dir`` (README as the index, docs/, the executed notebooks); return the nav."""
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    (stage_dir / "docs").mkdir(parents=True)
    (stage_dir / "notebooks").mkdir()
    shutil.copy2(ROOT / "README.md", stage_dir / "README.md")  # mkdocs makes it index.html
    # The README links docs/x.md; in the book the index sits beside docs/, so those links resolve as they are.
    executed = ROOT / "notebooks" / "executed" / profile
    nav_notebooks = []
    for name, title in NOTEBOOKS:
        source = executed / f"{name}.ipynb"
        if not source.exists():
            raise SystemExit(f"build_book: {source.relative_to(ROOT)} is missing (make reproduce PROFILE={profile})")
        without_progress(source, stage_dir / "notebooks" / source.name)
        nav_notebooks.append({title: f"notebooks/{source.name}"})
    pages = {p.name: p for p in sorted((ROOT / "docs").glob("*.md"))}
    order = [name for name, _ in DOCS if name in pages] + [n for n in pages if n not in dict(DOCS)]
    titles = dict(DOCS)
    nav_docs = []
    for name in order:
        shutil.copy2(pages[name], stage_dir / "docs" / name)
        nav_docs.append({titles.get(name, Path(name).stem.replace("-", " ").capitalize()): f"docs/{name}"})
    for pattern in PICTURES:
        for picture in sorted((ROOT / "docs").glob(pattern)):
            shutil.copy2(picture, stage_dir / "docs" / picture.name)
    for name in LINKED:
        if (ROOT / name).exists():
            (stage_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, stage_dir / name)
    shutil.copytree(mathjax_dir(), stage_dir / "assets" / "mathjax")
    (stage_dir / "assets" / "mathjax" / "config" / f"{MATHJAX_CONFIG_NAME}.js").write_text(MATHJAX_CONFIG, encoding="utf-8")
    (stage_dir / "assets" / "book.css").write_text(BOOK_CSS, encoding="utf-8")
    return [{"Home": "README.md"}, {f"Notebooks ({profile} profile)": nav_notebooks}, {"Documentation": nav_docs}]


def config(profile: str, stage_dir: Path, site_dir: Path, nav: list[dict[str, object]]) -> dict[str, object]:
    return {
        "site_name": "r2mad: a reproducible R2-MAD",
        "site_description": f"The R2-MAD reproduction: notebooks executed with the {profile} profile, and the docs",
        "docs_dir": str(stage_dir),
        "site_dir": str(site_dir),
        "use_directory_urls": False,  # plain .html files: the site opens from the disk, no server
        "theme": {"name": "material", "font": False, "features": ["navigation.sections", "toc.follow"]},
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
    args = parser.parse_args(argv)
    stage_dir, site_dir = args.stage.resolve(), args.site.resolve()
    nav = stage(args.profile, stage_dir)
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
