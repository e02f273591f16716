"""Build the book: the README, docs/*.md and the committed executed notebooks as one static site (`make docs`).

Offline and without executing anything: the notebooks are rendered from their stored outputs
(notebooks/executed/<profile>/, default sim) by mkdocs-jupyter (`execute: false`), the theme is mkdocs-material
with its web fonts off, and MathJax comes from the jupyter-server-mathjax package, copied into the site, so no
page loads anything from the network. The navigation follows the paper: data, memory, results, ablations,
baselines, shared misconception, cost, theory, poisoning, report; then the documents of docs/.

    python docs/build_book.py [--profile sim] [--site site] [--stage _build/book]

The site is written to site/ (gitignored); open site/index.html in a browser.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

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
        shutil.copy2(source, stage_dir / "notebooks" / source.name)
        nav_notebooks.append({title: f"notebooks/{source.name}"})
    pages = {p.name: p for p in sorted((ROOT / "docs").glob("*.md"))}
    order = [name for name, _ in DOCS if name in pages] + [n for n in pages if n not in dict(DOCS)]
    titles = dict(DOCS)
    nav_docs = []
    for name in order:
        shutil.copy2(pages[name], stage_dir / "docs" / name)
        nav_docs.append({titles.get(name, Path(name).stem.replace("-", " ").capitalize()): f"docs/{name}"})
    for name in LINKED:
        if (ROOT / name).exists():
            (stage_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, stage_dir / name)
    shutil.copytree(mathjax_dir(), stage_dir / "assets" / "mathjax")
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
                "custom_mathjax_url": "../assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe",
            }},
        ],
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
