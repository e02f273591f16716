"""``r2mad runs PROFILE_OR_FOLDER``: every run of a profile as a table in the terminal and an index page.

The page (``runs/<profile>/index.html``, or ``--out``) links each run to its debate page (``r2mad view``, written
beside the run when missing or older than it); the columns and what "feeds" means: :mod:`r2mad_core.report.run_index`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from r2mad_core.cli.common import UsageError
from r2mad_core.report import run_index


def add_runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="PROFILE_OR_FOLDER",
                        help="a profile whose runs are under runs/PROFILE (e.g. sim), or a folder of run directories")
    parser.add_argument("--root", type=Path, default=Path("."), metavar="DIR",
                        help="the folder holding runs/ and figures/ (default: the current one)")
    parser.add_argument("--figures", type=Path, metavar="DIR",
                        help="the artifacts' folder whose MANIFEST.json files name the runs (default: figures/PROFILE)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="the index page (default: the runs folder's index.html)")
    parser.add_argument("--no-pages", action="store_true", help="do not write the runs' debate pages (view.html)")
    parser.add_argument("--quiet", action="store_true", help="no table in the terminal, only the page")


def runs_command(args: argparse.Namespace) -> int:
    try:
        entries, index = run_index.build(args.target, root=args.root, out=args.out, figures=args.figures,
                                         pages=not args.no_pages)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet:
        print(run_index.format_table(entries))
    fed = sum(1 for e in entries if e.feeds)
    print(f"{len(entries)} runs ({fed} feeding a table or figure); index: {index}")
    return 0
