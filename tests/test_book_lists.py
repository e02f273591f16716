"""The book's Markdown lists render as written (issue 61): every page of docs/ (and the README, and the other pages
the book copies) shows the same lists, nested the same way and numbered the same, as CommonMark reads its source.

The reference is markdown-it-py's CommonMark; the book's renderer is Python-Markdown with the book's extensions,
fed what docs/build_book.py stages (:func:`build_book.commonmark_lists`). docs/statistics.md numbered its rules 1-3
then 9-14: its sub-bullets under rule 3, indented 3 spaces, were read as items 4-8. tests/test_book_browser.py
checks the built pages the same way.
"""

from __future__ import annotations

import html.parser
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
import build_book  # noqa: E402

markdown = pytest.importorskip("markdown")
markdown_it = pytest.importorskip("markdown_it")


class _Lists(html.parser.HTMLParser):
    """Every list item of a page, in order: (its list's kind and number as shown, ...) from the outermost list in."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[list] = []  # per open list: [kind, next number]
        self.path: list[str] = []
        self.items: list[tuple[str, ...]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("ol", "ul"):
            start = dict(attrs).get("start")
            self.stack.append([tag, int(start) if tag == "ol" and start else 1])
        elif tag == "li" and self.stack:
            kind, number = self.stack[-1]
            self.stack[-1][1] += 1
            self.path.append(str(number) if kind == "ol" else "-")
            self.items.append(tuple(self.path))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("ol", "ul") and self.stack:
            self.stack.pop()
        elif tag == "li" and self.path:
            self.path.pop()


def outline(page_html: str) -> list[tuple[str, ...]]:
    """The lists of a page's HTML: one tuple per item, ``("3", "-")`` for a bullet under item 3."""
    parser = _Lists()
    parser.feed(page_html)
    return parser.items


def commonmark(text: str) -> list[tuple[str, ...]]:
    return outline(markdown_it.MarkdownIt("commonmark").enable("table").render(text))


#: The extensions mkdocs renders with: its built-in ones (always on), then the book's (build_book.config).
EXTENSIONS = list(dict.fromkeys(["toc", "tables", "fenced_code",
                                 *build_book.config("sim", ROOT, ROOT / "site", [])["markdown_extensions"]]))


def book(text: str) -> list[tuple[str, ...]]:
    """What the book's renderer (mkdocs: Python-Markdown and the book's extensions) makes of a staged page."""
    return outline(markdown.markdown(build_book.commonmark_lists(text), extensions=EXTENSIONS))


PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / name for name in build_book.LINKED)])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_list_renders_as_commonmark_reads_its_source(page):
    text = page.read_text(encoding="utf-8")
    assert book(text) == commonmark(text)


def written_numbers(text: str) -> list[str]:
    """The numbers a page's source gives its top-level numbered items ("6. **Small samples...**" at the margin),
    outside code blocks."""
    tokens = markdown_it.MarkdownIt("commonmark").enable("table").parse(text)
    code = {line for token in tokens if token.type in ("fence", "code_block") and token.map
            for line in range(*token.map)}
    return [m.group(1) for number, line in enumerate(text.split("\n"))
            if number not in code and (m := re.match(r"(\d{1,9})[.)] ", line))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_numbers_shown_are_the_numbers_written(page):
    """docs/statistics.md's "rule 6" is the item written "6." (its rules showed as 1-3, 9-14)."""
    text = page.read_text(encoding="utf-8")
    assert [item[0] for item in book(text) if len(item) == 1 and item[0] != "-"] == written_numbers(text)


def test_the_check_sees_sub_bullets_read_as_numbered_items():
    """Without the book's staging, Python-Markdown renumbers a list whose sub-bullets are indented 3 spaces."""
    text = "1. one\n2. two\n   - a\n   - b\n3. three\n"
    assert outline(markdown.markdown(text, extensions=EXTENSIONS)) != commonmark(text)
    assert book(text) == commonmark(text) == [("1",), ("2",), ("2", "-"), ("2", "-"), ("3",)]
