"""``r2mad runs PROFILE_OR_FOLDER``: every run of a profile as a table in the terminal and an index page.

The page (``runs/<profile>/index.html``, or ``--out``) sorts, filters and searches the runs, links each to its run
page (written beside the run when missing or older than it) and compares two; the columns, the pages and what
"feeds" means: :mod:`r2mad_lab.report.run_index`, :mod:`r2mad_lab.report.run_pages`. A line on stderr every few
seconds says how far it is; a run whose config.json, metrics.json or transcripts cannot be read is left out with a
warning line naming the file and field (the exit status is then 1); a damaged MANIFEST.json stops it (status 2).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from r2mad_lab.cli.common import UsageError

#: Seconds between two progress lines.
PROGRESS_EVERY = 3.0


def add_runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="PROFILE_OR_FOLDER",
                        help="a profile whose runs are under runs/PROFILE (e.g. sim), or a folder of run directories")
    parser.add_argument("--root", type=Path, default=Path("."), metavar="DIR",
                        help="the folder holding runs/ and figures/ (default: the current one)")
    parser.add_argument("--figures", type=Path, metavar="DIR",
                        help="the artifacts' folder whose MANIFEST.json files name the runs (default: figures/PROFILE)")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help="the index page (default: the runs folder's index.html)")
    parser.add_argument("--no-pages", action="store_true", help="do not write the run pages (view.html)")
    parser.add_argument("--quiet", action="store_true", help="no table in the terminal, only the page")


class _Progress:
    """Prints the latest progress line to stderr, at most one every PROGRESS_EVERY seconds."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.start = self.last

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY:
            print(f"r2mad runs: {line} ({now - self.start:.0f} s)", file=sys.stderr, flush=True)
            self.last = now


def runs_command(args: argparse.Namespace) -> int:
    from r2mad_lab.report import run_index  # here, not at the top: pandas is not imported to print --help

    skipped: list[str] = []
    print(f"r2mad runs: reading the runs of {args.target} ...", file=sys.stderr, flush=True)
    try:
        entries, index = run_index.build(args.target, root=args.root, out=args.out, figures=args.figures,
                                         pages=not args.no_pages, progress=_Progress(), skipped=skipped)
    except (FileNotFoundError, run_index.RunIndexError) as exc:
        raise UsageError(str(exc)) from None
    for line in skipped:
        print(f"r2mad runs: warning: {line}", file=sys.stderr)
    if not args.quiet:
        print(run_index.format_table(entries))
    fed = sum(1 for e in entries if e.feeds)
    print(f"{len(entries)} runs ({fed} feeding a table or figure); index: {index}"
          + (f"; {len(skipped)} skipped (see the warnings above)" if skipped else ""))
    return 1 if skipped else 0
