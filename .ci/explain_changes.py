"""Print what changed in the tracked files a rerun rewrote (CI's "a rerun changed tracked files" step).

Executed notebooks are compared without their volatile parts (r2mad_lab.report.volatile.normalized_notebook), cell by
cell, so the log names the cell and output that differ; other files get a short unified diff.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

from r2mad_lab.report.volatile import normalized_notebook


def show(path: str, limit: int = 60) -> None:
    old = subprocess.run(["git", "show", f"HEAD:{path}"], capture_output=True, text=True).stdout
    new = Path(path).read_text(encoding="utf-8")
    if path.endswith(".ipynb"):
        before, after = normalized_notebook(old), normalized_notebook(new)
        cells_before, cells_after = before.get("cells", []), after.get("cells", [])
        if len(cells_before) != len(cells_after):
            print(f"{path}: {len(cells_before)} cells before, {len(cells_after)} after")
        for index, (a, b) in enumerate(zip(cells_before, cells_after, strict=False)):
            if a != b:
                lines = difflib.unified_diff(json.dumps(a, indent=1).splitlines(), json.dumps(b, indent=1).splitlines(),
                                             f"{path} cell {index} (committed)", f"{path} cell {index} (this run)",
                                             lineterm="", n=1)
                print("\n".join(list(lines)[:limit]))
        rest_before = {k: v for k, v in before.items() if k != "cells"}
        rest_after = {k: v for k, v in after.items() if k != "cells"}
        if rest_before != rest_after:
            print(f"{path}: the notebook's metadata differs")
        return
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{path} (committed)", f"{path} (this run)",
                                 lineterm="", n=1)
    print("\n".join(list(lines)[:limit]))


if __name__ == "__main__":
    for changed in sys.argv[1:]:
        show(changed)
