"""``r2mad export``: runs in the field's formats (:mod:`r2mad_lab.export`, docs/elsewhere.md).

``r2mad export inspect RUN_DIR... --out DIR``  one Inspect eval log per (benchmark, method, model, variant), the
                                              replicates as epochs (``inspect view --log-dir DIR`` opens them)
``r2mad export table RUN_DIR... --out FILE``   the tidy per-question table (``.parquet``, or ``.csv``)

A RUN_DIR may be a folder of runs (``runs/sim``: every run under it, variants and replicates included). A folder
that is damaged, incomplete or from another version ends it with one line naming the file and the field, before
anything is written (exit status 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from r2mad_lab.cli.common import UsageError

HELP = "write runs as Inspect eval logs (inspect view) or as one per-question table (Parquet / CSV)"


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="format", required=True, metavar="FORMAT", parser_class=type(parser),
                                help="inspect (Inspect eval logs) or table (the per-question table)")
    inspect = sub.add_parser("inspect", help="one Inspect .eval log per cell (replicates as epochs)",
                             description="one Inspect .eval log per (benchmark, method, model, variant)")
    inspect.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders, or folders holding run folders")
    inspect.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder for the .eval logs")
    table = sub.add_parser("table", help="one row per question x method x model x variant x replicate",
                           description="the tidy per-question table of the runs")
    table.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders, or folders holding run folders")
    table.add_argument("--out", type=Path, required=True, metavar="FILE", help="samples.parquet or samples.csv")


def export_command(args: argparse.Namespace) -> int:
    from r2mad_lab.export import source

    try:
        if args.format == "inspect":
            from r2mad_lab.export import inspect_log

            written = inspect_log.export_inspect(args.runs, args.out)
            print(f"wrote {len(written)} Inspect logs to {args.out} (open them: inspect view --log-dir {args.out})")
        else:
            from r2mad_lab.export import table

            if args.out.suffix not in (".parquet", ".csv"):
                raise UsageError(f"--out {args.out}: expected a .parquet or .csv file name")
            frame = table.from_runs(source.read_runs(args.runs))
            table.write(frame, args.out)
            print(f"wrote {len(frame)} rows to {args.out}")
    except source.ExportError as exc:
        raise UsageError(str(exc)) from None
    return 0
