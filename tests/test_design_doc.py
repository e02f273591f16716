"""docs/design.md: every section the code cites exists, and every package of the architecture is described."""

from __future__ import annotations

import re
from pathlib import Path

from r2mad_lab import CODE_PACKAGES, layers

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
CITATION = re.compile(r'docs/design\.md[,]?\s+\(?"([^"]+)"')


def test_every_cited_section_of_the_design_document_exists() -> None:
    sections = {line[3:].strip() for line in DESIGN.read_text(encoding="utf-8").splitlines() if line.startswith("## ")}
    cited: dict[str, list[str]] = {}
    for folder in (*CODE_PACKAGES, "tests", "benchmarks", "engine_tests", "notebooks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".ipynb", ".md") or "executed" in path.parts:
                continue
            text = " ".join(path.read_text(encoding="utf-8").split())  # a citation may wrap a line
            for section in CITATION.findall(text):
                cited.setdefault(section, []).append(str(path.relative_to(ROOT)))
    assert "Runs and results" in cited and "The engine boundary" in cited  # the pattern finds the citations
    missing = {section: files for section, files in cited.items() if section not in sections}
    assert missing == {}


def test_the_design_document_describes_every_package() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    units = [unit.split(".", 1)[1] for layer in layers() for unit in layer]
    assert [unit for unit in units if f"`{unit}`" not in text] == []
