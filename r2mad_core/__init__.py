"""r2mad_core: the method of R2-MAD (Remember and Reweight) and the debate it plugs into, with no machinery.

Where the paper's equations live:

- Eqs. 1-3, the debate (agents answer, read their peers, the consensus ratio): ``debate/loop.py`` (:func:`run_debate`);
  its settings ``debate/settings.py`` (:class:`DebateSettings`); the vote of Appendix A ``debate/vote.py``.
- Eq. 4, a memory case, and the banks: ``memory/cases.py``, ``memory/banks.py`` (:class:`MemoryBankSet`).
- Eqs. 5-6, MMR retrieval with lambda_t = 1 - gamma * Cons: ``memory/retrieval.py`` (:func:`retrieve`,
  :func:`mmr_tradeoff`, :data:`POLICIES`).
- Eq. 7, a peer's confidence from the retrieved cases: ``memory/confidence.py`` (:func:`peer_confidence`).
- The round hook that puts them into the debate: ``memory/hook.py`` (:class:`R2MadHook`); the methods (CoT,
  Self-Consistency, MAD, MAD-M2, ICL-CoT, R2-MAD) as configurations of one loop: ``methods.py`` (:func:`get_method`).
- Section 4 and Appendix C, the latent-concept model and its bounds: ``theory/``.

Bottom layer first (:data:`ARCHITECTURE`; tests/test_architecture.py holds every import to it):

- ``files``, ``records``, ``plugins``: atomic files and locks, the typed run files (one transcript type for
  writer and readers), plugin loading.
- ``data``: the benchmarks, their splits and answers (Section 5.1).
- ``engine``: the interface of the one batched generation call (requests, completions, the ``Engine`` protocol).
- ``debate``: the debate of Eqs. 1-3: prompts, the round loop, scheduling, the vote.
- ``memory``: what R2-MAD adds: cases (Eqs. 2, 4), banks, MMR retrieval (Eqs. 5-6), confidence (Eq. 7), the round hook.
- ``theory``: Section 4 and Appendix C: the latent-concept model, its checks and simulations, simulated agents.
- ``methods``: the methods as configurations of the debate loop plus plug-ins.

The core never imports the lab (``r2mad_lab``: engine backends, experiments, report, export, reproduce, the ``r2mad``
command; tests/test_architecture.py checks it). The names below are the core's public face (:data:`__all__`),
imported on first use, so ``import r2mad_core`` stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from typing import Any

__version__ = "0.1.0"

#: The layers, bottom up: a module imports only from its own unit or from units of lower layers.
ARCHITECTURE: tuple[tuple[str, ...], ...] = (
    ("files", "records", "plugins"),
    ("data",),
    ("engine",),
    ("debate",),
    ("memory",),
    ("theory",),
    ("methods",),
)

#: The public face: each name and the module that owns it (with the name there, where it differs).
_FACE: dict[str, str | tuple[str, str]] = {
    # the debate (Eqs. 1-3)
    "DebateSettings": "r2mad_core.debate.settings",
    "DebateConfig": "r2mad_core.debate.loop",
    "RoundHook": "r2mad_core.debate.loop",
    "run_debate": "r2mad_core.debate.loop",
    "vote": "r2mad_core.debate.vote",
    # the memory (Eqs. 4-7)
    "MemorySettings": "r2mad_core.memory.settings",
    "MemoryCase": "r2mad_core.memory.cases",
    "MemoryBankSet": "r2mad_core.memory.banks",
    "Query": "r2mad_core.memory.retrieval",
    "retrieve": "r2mad_core.memory.retrieval",
    "mmr_tradeoff": "r2mad_core.memory.retrieval",
    "mmr_policy": "r2mad_core.memory.retrieval",
    "POLICIES": "r2mad_core.memory.retrieval",
    "PolicySpec": "r2mad_core.memory.retrieval",
    "register_policy": "r2mad_core.memory.retrieval",
    "peer_confidence": "r2mad_core.memory.confidence",
    "R2MadHook": "r2mad_core.memory.hook",
    # the methods
    "Method": "r2mad_core.methods",
    "METHOD_SPECS": "r2mad_core.methods",
    "get_method": "r2mad_core.methods",
    "MethodSpec": "r2mad_core.methods",
    "register_method": "r2mad_core.methods",
    # the engine interface (Eq. 1's sampler)
    "Engine": "r2mad_core.engine",
    "Request": "r2mad_core.engine",
    "Completion": "r2mad_core.engine",
    "SamplingParams": "r2mad_core.engine",
    "EngineError": "r2mad_core.engine",
    # the data
    "Sample": "r2mad_core.data.benchmarks",
    "load_benchmark": ("r2mad_core.data.benchmarks", "load"),
    "BENCHMARK_SPECS": "r2mad_core.data.benchmarks",
    "BenchmarkSpec": "r2mad_core.data.benchmarks",
    "register_benchmark": "r2mad_core.data.benchmarks",
    "format_question": "r2mad_core.data.benchmarks",
    "extract_answer": "r2mad_core.data.answers",
    "is_correct": "r2mad_core.data.answers",
    # the run files
    "TranscriptRecord": "r2mad_core.records",
}

__all__ = ["ARCHITECTURE", "__version__", *_FACE]


def __getattr__(name: str) -> Any:
    """A name of the face, imported from its module on first use (PEP 562)."""
    if name not in _FACE:
        raise AttributeError(f"module 'r2mad_core' has no attribute {name!r}")
    where = _FACE[name]
    module, attribute = (where, name) if isinstance(where, str) else where
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


#: The units that moved to the lab, for a clear error where an old import names them, with what stayed in the core.
MOVED_TO_LAB = {"engines": " (the engine interface, engines.base: r2mad_core.engine)",
                "experiments": " (the methods, experiments.methods: r2mad_core.methods)",
                "report": "", "export": "", "reproduce": "", "cli": "", "profiles": "",
                "__main__": " (python -m r2mad_lab, or the r2mad command)"}


class _MovedToLab(importlib.abc.MetaPathFinder):
    """``import r2mad_core.reproduce`` (and the other lab units) fails with a message that names the new home."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        parts = fullname.split(".")
        if len(parts) == 2 and parts[0] == __name__ and parts[1] in MOVED_TO_LAB:
            raise ModuleNotFoundError(f"{fullname} moved: import r2mad_lab.{parts[1]}{MOVED_TO_LAB[parts[1]]} "
                                      f"(docs/design.md, \"Packages and layers\")", name=fullname)
        return None


if not any(type(finder).__name__ == "_MovedToLab" for finder in sys.meta_path):
    sys.meta_path.append(_MovedToLab())
