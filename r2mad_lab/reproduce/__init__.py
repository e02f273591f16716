"""Running a reproduction: from one profile (plus the user's overrides) to the notebooks that ran and what they wrote.

- :mod:`~r2mad_lab.reproduce.command` (run by ``__main__``): ``python -m r2mad_lab.reproduce`` / ``make reproduce``: the
  command line, the banner, the run of the notebooks.
- :mod:`~r2mad_lab.reproduce.notebook_runner`: the notebooks through papermill, each after those it needs,
  several at once, kernels kept.
- :mod:`~r2mad_lab.reproduce.up_to_date`: which notebooks a rerun leaves (their inputs and outputs as their last run
  left them) and the record of a complete run.
- :mod:`~r2mad_lab.reproduce.notebook_setup`: what every notebook runs first (the profile, the experiment grid,
  quiet logs).
- :mod:`~r2mad_lab.reproduce.gc_settings`: the garbage collector set for batch work (what is alive after the imports
  frozen, collections less often), in every notebook's kernel and every test worker.
- :mod:`~r2mad_lab.reproduce.grid`: the run cells a notebook asks for (``ExperimentGrid``), run or replayed.
- :mod:`~r2mad_lab.reproduce.points`: making the points of an ablation (a profile plus overrides, one seed, one
  folder): ``--set`` variants, ``--sweep`` (several: their product), ``--replicates N`` (the run seeds).
- :mod:`~r2mad_lab.reproduce.compare`: comparing them: a variant's tables with the profile's on the same questions
  (common random numbers, Holm-adjusted), a sweep's tests, table and figure, the mean and spread across seeds.
- :mod:`~r2mad_lab.reproduce.point_cache`: each point up to date when its executed configuration was made before;
  the dry run (``--dry-run``, ``--show-config``).
- :mod:`~r2mad_lab.reproduce.launcher`: the points not up to date, run one by one, side by side (``--jobs``) or as
  cluster jobs (``--launcher slurm``, submitit); a failed or killed job named and run again by the next invocation.
- :mod:`~r2mad_lab.reproduce.ablations`: ``reproduce --set/--variant/--sweep/--replicates``: the points planned, the
  baseline first, then the points run and compared.
- :mod:`~r2mad_lab.reproduce.api_budget`: an API profile's cost estimate and budget cap.
- :mod:`~r2mad_lab.reproduce.collect`: every cell behind the paper's tables, run or loaded, in the paper's terms
  (notebook 10's one step).
- :mod:`~r2mad_lab.reproduce.paper`: the paper run on GPUs (``--rehearse``, ``--estimate-only`` from the rehearsal,
  ``--preflight``, ``--calibrate``, ``--gpus N`` with vLLM servers): its own sub-package (docs/paper-run.md).
- :mod:`~r2mad_lab.reproduce.published`: published runs replay: a real-engine profile's response cache committed in
  ``published/<profile>/`` seeds an empty ``cache/<profile>/``; ``--fresh`` says which committed tables moved;
  ``make publish`` writes it.

The command line's public names (``main``, ``load_profile``, ``run_notebooks``, ...) are importable from here, as
they were from the module ``r2mad_lab.reproduce`` before it became this package.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

#: nbformat (papermill's, the notebooks') validates with jsonschema, whose format checkers import ``rfc3987_syntax``
#: when it is installed (jupyterlab's jsonschema[format-nongpl] brings it): that import compiles 38 lark grammars,
#: seconds of CPU in every process that reads a notebook, for "iri" string formats no notebook schema uses.
#: Marked absent (the import raises ImportError, which jsonschema expects) unless something imported it already.
#: Our choice (docs/performance.md); tests/conftest.py does the same for the test processes.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


#: This package's modules: ``from r2mad_lab.reproduce import grid`` asks this package for ``grid`` before it imports
#: the module, and :func:`__getattr__` would import :mod:`.command` (pandas, scipy: costly) to look for it there.
#: Written out (no directory listing on import); tests/reproduce/paper/test_gpu_day.py checks it against the folder.
_SUBMODULES = frozenset({
    "ablations", "api_budget", "collect", "command", "compare", "gc_settings", "grid", "launcher", "notebook_runner",
    "notebook_setup", "paper", "point_cache", "points", "published", "up_to_date",
})


def __getattr__(name: str) -> Any:
    """``from r2mad_lab.reproduce import main`` (and every other name of :mod:`.command`), loaded on first use."""
    if name.startswith("__") or name in _SUBMODULES:  # a submodule: the import system loads it, not command
        raise AttributeError(name)
    command = importlib.import_module("r2mad_lab.reproduce.command")
    try:
        return getattr(command, name)
    except AttributeError:
        raise AttributeError(f"module 'r2mad_lab.reproduce' has no attribute {name!r}") from None
