"""r2mad_lab: the machinery that runs, reports and reproduces the method of :mod:`r2mad_core`.

The lab imports the core; the core never imports the lab (tests/test_architecture.py). Bottom layer first
(:data:`ARCHITECTURE`, above the core's layers):

- ``engines``: the engine backends behind :class:`r2mad_core.Engine` (llama.cpp, OpenAI-compatible servers, vLLM, the
  rehearsal), the persistent response cache, the engine registry.
- ``experiments``: run cells, memory construction, profiles, protocol presets, budgets.
- ``report``: results into tables, figures and text: tables, artifacts with manifests, findings, the comparison with
  the paper (it runs nothing).
- ``export``: runs in the field's formats: Inspect eval logs, the tidy per-question table (it runs nothing).
- ``reproduce``: running a reproduction: ``make reproduce``, the notebooks through papermill, what each notebook runs
  first, the run grid, variants and sweeps, the pre-flight estimate.
- ``cli``, ``__main__``: the ``r2mad`` command (``python -m r2mad_lab``).

docs/design.md describes each package.
"""

from __future__ import annotations

#: The packages whose files are the code of a run, core first: what the up-to-date check digests and what a committed
#: artifact's commit must match (tests/test_committed_artifacts.py).
CODE_PACKAGES: tuple[str, ...] = ("r2mad_core", "r2mad_lab")

#: The lab's layers, bottom up, all above the core's (:data:`r2mad_core.ARCHITECTURE`): a module imports only from
#: its own unit, from units of lower layers, or from the core.
ARCHITECTURE: tuple[tuple[str, ...], ...] = (
    ("engines",),
    ("experiments",),
    ("report",),
    ("export",),
    ("reproduce", "cli"),
    ("__main__",),
)


def layers() -> tuple[tuple[str, ...], ...]:
    """The whole house's layers, bottom up: the core's (:data:`r2mad_core.ARCHITECTURE`), then the lab's, each unit
    named with its package (``r2mad_core.debate``, ``r2mad_lab.report``)."""
    from r2mad_core import ARCHITECTURE as CORE

    return (tuple(tuple(f"r2mad_core.{unit}" for unit in layer) for layer in CORE)
            + tuple(tuple(f"r2mad_lab.{unit}" for unit in layer) for layer in ARCHITECTURE))
