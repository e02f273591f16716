"""``--jobs N``: a point running in its own process has its progress relayed to the terminal (issue 62): one line
with the last line of its log while it runs. The child ends only once the relay line was seen, so nothing here
depends on how fast the machine is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from r2mad_lab.reproduce.launcher import last_line, wait_relaying


def test_a_running_point_has_the_last_line_of_its_log_relayed(tmp_path: Path) -> None:
    log = tmp_path / "point.log"
    child = ("import sys; print('[1/3] 01_main ...', flush=True); print('q 12/400\\rq 80/400', flush=True); "
             "sys.stdin.read()")
    lines: list[str] = []
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen([sys.executable, "-c", child], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.PIPE)

        def echo(line: str) -> None:
            lines.append(line)
            if "q 80/400" in line:  # the relay said where the point is: let it end
                process.stdin.close()

        code = wait_relaying(process, log, "point seed=1", echo, every=0.05)
    assert code == 0
    assert any(line.startswith("reproduce: point seed=1 running for ") and line.endswith(": q 80/400")
               for line in lines), lines


def test_the_last_line_of_a_missing_or_empty_log_is_empty(tmp_path: Path) -> None:
    assert last_line(tmp_path / "none.log") == ""
    (tmp_path / "empty.log").write_text("\n\n")
    assert last_line(tmp_path / "empty.log") == ""
