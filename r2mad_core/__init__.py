"""r2mad_core: the thin core of the R2-MAD reproduction, one sub-package per part of the paper.

Bottom layer first (:data:`ARCHITECTURE`; tests/test_architecture.py holds every import to it):

- ``files``, ``records``, ``plugins``: atomic files and locks, the typed run files (one transcript type for
  writer and readers), plugin loading.
- ``data``: the benchmarks, their splits and answers (Section 5.1).
- ``engines``: the one batched generation call behind every method, its response cache, the engine registry.
- ``debate``: the debate of Eqs. 1-2: prompts, the round loop, scheduling, Appendix A's vote.
- ``memory``: what R2-MAD adds: cases (Eqs. 2, 4), banks, MMR retrieval (Eqs. 5-6), confidence (Eq. 7), the round hook.
- ``theory``: Section 4 and Appendix C: the latent-concept model, its checks and simulations, simulated agents.
- ``experiments``: methods, run cells and their metrics, memory construction, profiles, budgets.
- ``report``: results into tables, figures and text: tables, artifacts with manifests, findings, the comparison with
  the paper (it runs nothing).
- ``export``: runs in the field's formats: Inspect eval logs, the tidy per-question table (it runs nothing).
- ``reproduce``: running a reproduction: ``make reproduce``, the notebooks through papermill, what each notebook runs
  first, the run grid, variants and sweeps, the pre-flight estimate.
- ``cli``, ``__main__``: the ``r2mad`` command (``python -m r2mad_core``).

docs/design.md describes each package; the method itself (what the paper adds) is ``memory/`` plus the
``r2mad`` method in ``experiments/methods.py``.
"""

__version__ = "0.1.0"

#: The layers, bottom up: a module imports only from its own unit or from units of lower layers.
ARCHITECTURE: tuple[tuple[str, ...], ...] = (
    ("files", "records", "plugins"),
    ("data",),
    ("engines",),
    ("debate",),
    ("memory",),
    ("theory",),
    ("experiments",),
    ("report",),
    ("export",),
    ("reproduce", "cli"),
    ("__main__",),
)
