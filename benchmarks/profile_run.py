"""Profile a reproduction: run the numbered notebooks in this process (no kernel) under cProfile.

Usage:
    .venv/bin/python benchmarks/profile_run.py [--profile sim] [--only 02,03] [--output-dir /tmp/prof]
                                               [--top 25] [--stats /tmp/prof/run.pstats]

Each notebook gets the parameters ``make reproduce`` would inject (papermill's parameterisation, the same
profile and paths), then its code cells run one after another in one namespace with the working directory
``notebooks/`` and matplotlib's Agg backend. The whole run is one cProfile session: the printed table gives,
for the functions with the most cumulative time, their calls, own time and cumulative share of the run; the
wall time per notebook comes first. cProfile slows Python code ~1.5-2x, so the shares, not the seconds, are
the result; the real run's timings are ``make reproduce``'s (``timings.json``) and ``benchmarks/run_all.py``'s.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def notebook_source(notebook: Path, parameters: dict) -> str:
    """The code of ``notebook`` with ``parameters`` injected after its parameters cell, IPython syntax translated."""
    from IPython.core.inputtransformer2 import TransformerManager
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = parameterize_notebook(load_notebook_node(str(notebook)), parameters)
    manager = TransformerManager()
    return "\n\n".join(manager.transform_cell(cell.source) for cell in nb.cells if cell.cell_type == "code")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="sim")
    parser.add_argument("--only", default=None, help="comma-separated notebook numbers, e.g. 02,03")
    parser.add_argument("--output-dir", type=Path, default=Path("/tmp/r2mad-profile"))
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="cumulative", choices=["cumulative", "tottime"])
    parser.add_argument("--stats", type=Path, default=None, help="also write the pstats file here")
    args = parser.parse_args()

    # The environment make reproduce gives its kernels (reproduce.run_notebooks): one BLAS thread, set before numpy
    # starts its BLAS (OpenBLAS's two threads on small products made retrieval look five times as costly), and
    # the answer-verdict memo shared by the notebooks (set below, once the cache folder is known).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import matplotlib

    matplotlib.use("Agg")
    from r2mad_lab.reproduce import (
        ANSWER_MEMO_ENVIRONMENT,
        ANSWER_MEMO_FILE,
        BLAS_THREAD_VARIABLES,
        PORTABLE_PATH_PARAMETERS,
        ReproductionPaths,
        _portable,
        default_notebooks_dir,
        discover_notebooks,
        load_profile,
        notebook_parameters,
    )

    assert BLAS_THREAD_VARIABLES == ("OPENBLAS_NUM_THREADS",), "set the kernels' BLAS variables above"
    profile = load_profile(args.profile)
    paths = ReproductionPaths(args.output_dir, profile.folder)
    os.environ.setdefault(ANSWER_MEMO_ENVIRONMENT, str(paths.cache_dir / ANSWER_MEMO_FILE))
    for folder in (paths.figures_dir, paths.runs_dir, paths.cache_dir):
        folder.mkdir(parents=True, exist_ok=True)
    parameters = notebook_parameters(profile, paths)  # what every notebook is given (the profile, overrides, paths)
    only = [t for t in args.only.split(",") if t.strip()] if args.only else None
    notebooks = discover_notebooks(default_notebooks_dir(), only)
    profiler = cProfile.Profile()
    timings: list[tuple[str, float]] = []
    os.chdir(notebooks[0].parent)
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    total_start = time.perf_counter()
    for notebook in notebooks:
        passed = {k: _portable(v, notebook.parent) if k in PORTABLE_PATH_PARAMETERS else v
                  for k, v in parameters.items()}
        code = compile(notebook_source(notebook, passed), str(notebook), "exec")
        namespace: dict = {"__name__": "__main__"}
        start = time.perf_counter()
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                profiler.enable()
                exec(code, namespace)
            finally:
                profiler.disable()
                sys.stdout = stdout
        timings.append((notebook.stem, time.perf_counter() - start))
        print(f"{notebook.stem}: {timings[-1][1]:.1f} s (under cProfile)", flush=True)
        import matplotlib.pyplot as plt

        plt.close("all")
    total = time.perf_counter() - total_start
    print(f"total {total:.1f} s under cProfile; load average at start {load}, at end "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    stats = pstats.Stats(profiler)
    if args.stats:
        stats.dump_stats(str(args.stats))
    stats.sort_stats(args.sort)
    width = max(len(n) for n, _ in timings)
    print(f"\ntop {args.top} by {args.sort} time (share of the {total:.1f} s run):")
    print(f"{'calls':>10} {'own s':>8} {'cum s':>8} {'cum %':>6}  function")
    entries = stats.stats  # type: ignore[attr-defined]
    key = (lambda item: item[1][3]) if args.sort == "cumulative" else (lambda item: item[1][2])
    for (filename, line, name), (_, calls, own, cum, _) in sorted(entries.items(), key=key, reverse=True)[: args.top]:
        where = f"{Path(filename).name}:{line}({name})" if line else name
        print(f"{calls:>10} {own:>8.2f} {cum:>8.2f} {100 * cum / total:>5.1f}%  {where}")
    del width
    return 0


if __name__ == "__main__":
    sys.exit(main())
