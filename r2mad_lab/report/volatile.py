"""Volatile facts: what differs between two runs whose results are the same, kept out of the tracked files.

A rerun whose results are unchanged leaves ``git status`` clean. What changes from run to run without
the results changing: papermill's timestamps and durations in an executed notebook (the notebook's and each
cell's), tqdm's progress bars on stderr (how often a bar redraws depends on the machine's speed), the notebooks'
wall times (``timings.json``), the lines a new machine adds to a cell's stderr (:data:`MACHINE_LINES`), and a manifest
entry's ``created`` time and ``git`` commit (:func:`r2mad_lab.report.artifacts.update_manifest` keeps an entry whose
files and fields are unchanged and whose code is the same, :func:`same_but_volatile`: a commit that changed only figures
or documents is not news).

:class:`ExecutedSnapshot` is taken before the notebooks run and settled after: an executed notebook equal to the one
it replaced but for :func:`normalized_notebook`'s volatile parts gets its previous bytes back; when no notebook
changed, ``timings.json`` too, and this run's times go to ``timings.last.json`` beside it (not tracked).
:func:`is_progress` is also what the book leaves out (docs/build_book.py).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any, Mapping

from r2mad_core.files import atomic_write
from r2mad_lab import CODE_PACKAGES

REPOSITORY = Path(__file__).resolve().parents[2]
#: Fields of a manifest entry that say when and at which commit it was written, not what it holds.
MANIFEST_VOLATILE = ("created", "git")
#: papermill's clock fields (the notebook's ``metadata.papermill`` and each cell's).
PAPERMILL_CLOCK = ("start_time", "end_time", "duration")
TIMINGS_NAME = "timings.json"
#: Where the times of a run that changed no result go (ignored by git: .gitignore).
LAST_TIMINGS_NAME = "timings.last.json"

#: A line of progress output: a tqdm bar ("12 cells:  50%|#####     | 6/12 [00:02<00:02, ...]") or nothing.
PROGRESS_LINE = re.compile(r"^.*\d+%\|.*\|\s*\d+/\d+ \[.*$|^\s*$")
#: Lines the machine, not the notebook, writes to a cell's stderr: matplotlib building its font cache on a new
#: machine (when that takes over 5 s). They say nothing of the results, and appear or not with the machine.
MACHINE_LINES = (
    re.compile(r"^Matplotlib is building the font cache; this may take a moment\.$"),
)
_CURSOR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # tqdm's cursor movements between nested bars


def is_progress(output: Mapping[str, Any]) -> bool:
    """Whether a notebook output is only progress on stderr: tqdm's bars, and the :data:`MACHINE_LINES` a new
    machine adds (a real warning is not progress: a rerun that adds one changed the notebook)."""
    if output.get("output_type") != "stream" or output.get("name") != "stderr":
        return False
    text = output.get("text", "")
    text = _CURSOR.sub("", "".join(text) if isinstance(text, list) else str(text))
    return all(PROGRESS_LINE.match(part) or any(line.match(part.strip()) for line in MACHINE_LINES)
               for part in re.split(r"[\r\n]", text))


def normalized_notebook(text: str) -> Any:
    """An executed notebook without its volatile parts: papermill's clock fields and progress outputs."""
    notebook = json.loads(text)
    papermill = notebook.get("metadata", {}).get("papermill", {})
    for key in PAPERMILL_CLOCK:
        papermill.pop(key, None)
    for cell in notebook.get("cells", []):
        cell.pop("id", None)  # papermill gives the injected-parameters cell a new random id every run
        metadata = cell.get("metadata", {})
        for key in PAPERMILL_CLOCK:
            metadata.get("papermill", {}).pop(key, None)
        metadata.pop("execution", None)
        if "outputs" in cell:
            cell["outputs"] = [output for output in cell["outputs"] if not is_progress(output)]
    return notebook


def same_but_volatile(old: Mapping[str, Any], new: Mapping[str, Any],
                      volatile: tuple[str, ...] = MANIFEST_VOLATILE) -> bool:
    """Whether two manifest entries differ only in their :data:`MANIFEST_VOLATILE` fields, and their ``git`` records
    name the same code: the same commit, or two commits whose code trees are one (:func:`same_code`), neither
    built from uncommitted changes. A new commit of the package's code is thus recorded even when no result changed."""
    if {k: v for k, v in old.items() if k not in volatile} != {k: v for k, v in new.items() if k not in volatile}:
        return False
    before, after = old.get("git") or {}, new.get("git") or {}
    return before == after or (not before.get("dirty") and not after.get("dirty")
                               and same_code(str(before.get("commit")), str(after.get("commit"))))


@functools.lru_cache(maxsize=64)
def code_tree(commit: str) -> tuple[str, ...] | None:
    """The git trees of the code packages (:data:`r2mad_lab.CODE_PACKAGES`) at ``commit`` (None when git cannot say:
    not a checkout, an unknown commit, a commit before a package existed)."""
    trees = []
    for package in CODE_PACKAGES:
        try:
            tree = subprocess.run(["git", "rev-parse", f"{commit}:{package}"], cwd=REPOSITORY, capture_output=True,
                                  text=True, timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
        if not tree:
            return None
        trees.append(tree)
    return tuple(trees)


def same_code(first: str, second: str) -> bool:
    """Whether two commits hold the same code, core and lab (what tests/test_committed_artifacts.py compares)."""
    if first == second:
        return True
    trees = code_tree(first), code_tree(second)
    return trees[0] is not None and trees[0] == trees[1]


class ExecutedSnapshot:
    """The executed notebooks and ``timings.json`` of a folder before a run (:meth:`settle` after it)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.before: dict[str, bytes] = {}
        if self.folder.is_dir():
            for path in [*sorted(self.folder.glob("*.ipynb")), self.folder / TIMINGS_NAME]:
                if path.is_file():
                    self.before[path.name] = path.read_bytes()

    def settle(self) -> dict[str, list[str]]:
        """Give back the previous bytes of every executed notebook whose results are unchanged, and of
        ``timings.json`` when none changed; returns the notebooks ``kept`` and ``changed``."""
        kept, changed = [], []
        for path in sorted(self.folder.glob("*.ipynb")):
            old = self.before.get(path.name)
            new = path.read_bytes()
            if old is None or old == new:
                (kept if old == new else changed).append(path.stem)
                continue
            try:
                same = normalized_notebook(old.decode("utf-8")) == normalized_notebook(new.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                same = False
            if same:
                atomic_write(path, old)
                kept.append(path.stem)
            else:
                changed.append(path.stem)
        timings = self.folder / TIMINGS_NAME
        old_timings = self.before.get(TIMINGS_NAME)
        if not changed and old_timings is not None and timings.is_file() and self._same_notebooks(old_timings, timings):
            atomic_write(self.folder / LAST_TIMINGS_NAME, timings.read_bytes())
            atomic_write(timings, old_timings)
        return {"kept": kept, "changed": changed}

    @staticmethod
    def _same_notebooks(old: bytes, path: Path) -> bool:
        """The same notebooks, each with the same outcome (only the times differ)."""
        try:
            before, after = json.loads(old), json.loads(path.read_text(encoding="utf-8"))
            return ({k: v.get("succeeded") for k, v in before.items()}
                    == {k: v.get("succeeded") for k, v in after.items()})
        except (ValueError, AttributeError):
            return False
