"""\
``make reproduce`` (profile sim) from nothing, two commits side by side: CPU seconds with every kernel, and the bytes.

    .venv/bin/python benchmarks/sim_side_by_side.py  # main against HEAD, 2 pairs, one after another
    .venv/bin/python benchmarks/sim_side_by_side.py --before main --after HEAD --pairs 2 --together

Each run gets a fresh clone of the repository at its commit (``git clone``: no ``runs/``, no ``cache/``) under
``--scratch`` and runs ``python -m r2mad_lab.reproduce --profile sim`` there with the clone first on ``PYTHONPATH``
(what ``make reproduce`` runs). The runs alternate, before and after, the first of each pair switching sides
(``B A``, ``A B``, ...): a machine whose speed drifts favours neither. ``--together`` starts the two runs of a pair at
once (the machine is shared anyway; each run's CPU is its own).

What it measures, for each run: **CPU seconds** (user + system) of the run's process and every process it waited for
(``os.wait4``: the notebook kernels are children the runner reaps, so their CPU is counted; ``/usr/bin/time -v``
counts the same), the wall time, and the 1-minute load average at its start and end. CPU seconds move much less with
the machine's load than wall time does (docs/performance.md, "Stated times"); the ratio after/before is per pair.

What it checks: every file of ``figures/sim/`` but ``MANIFEST.json`` byte for byte, and every executed notebook of
``notebooks/executed/sim/`` after :func:`r2mad_lab.report.volatile.normalized_notebook` (papermill's clock fields and
the progress outputs) with every commit name replaced (the report lists the commit that made each artifact), between
every run and the first run of ``--before``. One line per run, then the summary; a CSV
in ``benchmarks/results/sim_side_by_side.csv`` (another profile's: ``sim_side_by_side_<profile>.csv``). Exit status 1
when a file differs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(REPOSITORY))
RESULTS = HERE / "results" / "sim_side_by_side.csv"  # another profile's: sim_side_by_side_<profile>.csv


def load() -> float:
    return os.getloadavg()[0]


def commit_of(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPOSITORY, check=True, capture_output=True,
                          text=True).stdout.strip()


def fresh_clone(commit: str, folder: Path) -> Path:
    """A clone of this repository at ``commit``: the committed files only (no runs/, cache/, no local changes)."""
    if folder.exists():
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPOSITORY), str(folder)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=folder, check=True)
    return folder


def start(clone: Path, log: Path, profile: str) -> tuple[subprocess.Popen, float, float]:
    env = dict(os.environ, PYTHONPATH=str(clone), PYTHONUNBUFFERED="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as make's commands (the Makefile unexports it)
    with log.open("w") as output:
        process = subprocess.Popen([sys.executable, "-m", "r2mad_lab.reproduce", "--profile", profile], cwd=clone,
                                   env=env, stdout=output, stderr=subprocess.STDOUT)
    return process, time.perf_counter(), load()


def finish(process: subprocess.Popen, started: float) -> dict[str, float]:
    """Wait for the run; its CPU with every descendant it reaped (``os.wait4``)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": time.perf_counter() - started, "user_s": usage.ru_utime, "system_s": usage.ru_stime,
            "cpu_s": usage.ru_utime + usage.ru_stime, "exit": process.returncode, "load_end": load()}


def commit_names(clone: Path, tokens: set[str]) -> list[str]:
    """The tokens that name a commit of the repository (the report's list of artifacts names the commit that made
    each: the clone's own, or an earlier one whose package code is the same, which the manifest keeps)."""
    if not tokens:
        return []
    ordered = sorted(tokens)
    answer = subprocess.run(["git", "cat-file", "--batch-check"], cwd=clone, input="".join(f"{t}^{{commit}}\n"
                            for t in ordered), capture_output=True, text=True, check=True).stdout.splitlines()
    return [token for token, line in zip(ordered, answer, strict=False) if not line.endswith("missing")
            and not line.endswith("ambiguous")]


def fingerprint(clone: Path, profile: str) -> dict[str, str]:
    """sha256 of every figure file but the manifest, and of every executed notebook without its volatile parts."""
    from r2mad_lab.report.volatile import normalized_notebook

    found: dict[str, str] = {}
    figures = clone / "figures" / profile
    for path in sorted(p for p in figures.rglob("*") if p.is_file() and p.name != "MANIFEST.json"):
        found[str(path.relative_to(clone))] = hashlib.sha256(path.read_bytes()).hexdigest()
    for path in sorted((clone / "notebooks" / "executed" / profile).glob("*.ipynb")):
        text = json.dumps(normalized_notebook(path.read_text(encoding="utf-8")), sort_keys=True)
        for name in commit_names(clone, set(re.findall(r"(?<![0-9a-f])[0-9a-f]{7,40}(?![0-9a-f])", text))):
            text = re.sub(rf"(?<![0-9a-f]){name}(?![0-9a-f])", "<commit>", text)  # the report lists each artifact's
        found[str(path.relative_to(clone))] = hashlib.sha256(text.encode()).hexdigest()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="the commit measured first as the reference (default: main)")
    parser.add_argument("--after", default="HEAD", help="the commit compared with it (default: HEAD)")
    parser.add_argument("--pairs", type=int, default=2, help="pairs of runs, alternating (default: 2)")
    parser.add_argument("--together", action="store_true", help="start the two runs of a pair at once")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/r2mad-sim-side-by-side"))
    parser.add_argument("--profile", default="sim", help="a packaged profile with simulated agents (default: sim; "
                        "tiny checks this script in a few minutes)")
    args = parser.parse_args(argv)
    commits = {"before": commit_of(args.before), "after": commit_of(args.after)}
    print(f"{args.profile} from nothing: before {commits['before']} ({args.before}), after {commits['after']} "
          f"({args.after}); {args.pairs} pairs{' run together' if args.together else ''}; {os.cpu_count()} cores, "
          f"load {load():.2f}",
          flush=True)
    args.scratch.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    reference: dict[str, str] | None = None
    differing: set[str] = set()
    for pair in range(args.pairs):
        sides = ["after", "before"] if pair % 2 == 0 else ["before", "after"]
        clones = {side: fresh_clone(commits[side], args.scratch / f"{side}-{pair + 1}") for side in sides}
        runs = []
        for side in sides:
            process, started, load_start = start(clones[side], args.scratch / f"{side}-{pair + 1}.log", args.profile)
            runs.append((side, process, started, load_start))
            if not args.together:
                rows.append({"pair": pair + 1, "side": side, "commit": commits[side], "load_start": load_start,
                             **finish(process, started)})
                print(f"  pair {pair + 1} {side:6s} {rows[-1]['cpu_s']:7.1f} CPU s  {rows[-1]['wall_s']:7.1f} s wall  "
                      f"load {load_start:.1f}-{rows[-1]['load_end']:.1f}  exit {rows[-1]['exit']}", flush=True)
        if args.together:
            for side, process, started, load_start in runs:
                rows.append({"pair": pair + 1, "side": side, "commit": commits[side], "load_start": load_start,
                             **finish(process, started)})
                print(f"  pair {pair + 1} {side:6s} {rows[-1]['cpu_s']:7.1f} CPU s  {rows[-1]['wall_s']:7.1f} s wall  "
                      f"load {load_start:.1f}-{rows[-1]['load_end']:.1f}  exit {rows[-1]['exit']}", flush=True)
        for side in sorted(sides, reverse=True):  # "before" first: the reference is before's first run
            found = fingerprint(clones[side], args.profile)
            if reference is None:
                reference = found
            differing |= {name for name in set(reference) | set(found) if reference.get(name) != found.get(name)}
    results = RESULTS if args.profile == "sim" else RESULTS.with_name(f"{RESULTS.stem}_{args.profile}.csv")
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    ratios = []
    for pair in range(1, args.pairs + 1):
        cpu = {row["side"]: row["cpu_s"] for row in rows if row["pair"] == pair}
        ratios.append(cpu["after"] / cpu["before"])
    for side in ("before", "after"):
        cpus = [row["cpu_s"] for row in rows if row["side"] == side]
        print(f"{side}: CPU s {', '.join(f'{c:.1f}' for c in cpus)} (median {median(cpus):.1f})")
    print(f"after / before, CPU seconds per pair: {', '.join(f'{r:.3f}' for r in ratios)} "
          f"(median {median(ratios):.3f})")
    files = len(reference or {})
    print(f"files compared: {files} (figures/{args.profile} but MANIFEST.json; executed notebooks normalized); "
          + (f"DIFFERING: {', '.join(sorted(differing))}" if differing else "all identical"))
    print(f"written: {results.relative_to(REPOSITORY)}")
    return 1 if differing or any(row["exit"] for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
