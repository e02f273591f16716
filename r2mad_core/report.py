"""Report output: figures (PNG + PDF) and tables (CSV + Markdown + LaTeX) in ``figures_dir``.

Every notebook writes its figures and tables through these two functions so that names and
formats stay uniform (DESIGN.md, "Shape": figures/ holds what the notebooks write).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

logger = logging.getLogger(__name__)


def save_figure(fig, name: str, figures_dir: str | Path, dpi: int = 150) -> list[Path]:
    """Save a matplotlib figure as ``<figures_dir>/<name>.png`` and ``.pdf``; return the paths."""
    directory = Path(figures_dir)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{name}.png", directory / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=dpi, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    logger.info("saved figure %s", ", ".join(str(p) for p in paths))
    return paths


def save_table(df: pd.DataFrame, name: str, figures_dir: str | Path, float_format: str = "{:.4g}") -> list[Path]:
    """Save a table as ``<name>.csv`` (full precision), ``.md`` and ``.tex``; return the paths."""
    directory = Path(figures_dir)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{name}.csv", directory / f"{name}.md", directory / f"{name}.tex"]
    df.to_csv(paths[0], index=False)
    paths[1].write_text(df.to_markdown(index=False, floatfmt=float_format.strip("{}:")) + "\n", encoding="utf-8")
    paths[2].write_text(df.to_latex(index=False, float_format=float_format.format), encoding="utf-8")
    logger.info("saved table %s", ", ".join(str(p) for p in paths))
    return paths
