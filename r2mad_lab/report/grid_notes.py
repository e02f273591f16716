"""A grid in words: the settings table of a notebook's first cell, the captions' notes, the artifacts' context.

:class:`GridNotes` reads an :class:`~r2mad_lab.reproduce.grid.ExperimentGrid` and says what it runs:
:meth:`~GridNotes.describe` (one row per setting; a variant marks the rows it changes, :data:`SETTING_FIELDS`), the
captions' question counts and benchmark names, and the :class:`~r2mad_lab.report.artifacts.ReportContext` whose
manifest describes the experiment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from r2mad_core.memory.settings import DESCRIBED as MEMORY_DESCRIBED
from r2mad_lab.experiments import protocol as protocol_presets
from r2mad_lab.report.artifacts import ReportContext, display_path
from r2mad_lab.report.tables import benchmark_label

#: The profile fields behind each row of :meth:`GridNotes.describe` (a variant marks the rows it changes).
SETTING_FIELDS = {
    "models": ("models",), "benchmarks": ("benchmarks",), "test questions per benchmark": ("test_limit",),
    "train questions per benchmark (memory)": ("train_limit",), "agents x rounds": ("n_agents", "n_rounds"),
    "temperature / top_p / max_tokens": ("temperature", "top_p", "max_tokens"),
    **{row: tuple(names) for row, names in MEMORY_DESCRIBED.items()},
    "experience responses shown": ("max_experience_chars",), "embedder": ("embedder",), "seed": ("seed",),
}


class GridNotes:
    """What ``exp`` runs, in words (its models, benchmarks, run settings, folders, ``variant`` and questions)."""

    def __init__(self, exp: Any) -> None:
        self.exp = exp

    def describe(self) -> pd.DataFrame:
        """The settings of this experiment, one row each (for the notebooks' first cell)."""
        exp = self.exp
        memory = exp.run_settings.memory
        rows = {
            "models": ", ".join(f"{m.label} [{m.engine}]" for m in exp.models),
            "stands in for": ", ".join(m.paper_model for m in exp.models),
            "benchmarks": ", ".join(exp.benchmarks),
            "test questions per benchmark": exp.test_limit or "all",
            "train questions per benchmark (memory)": exp.train_limit or "all",
            "agents x rounds": f"{exp.n_agents} x {exp.n_rounds}",
            "temperature / top_p / max_tokens": f"{exp.sampling['temperature']} / {exp.sampling['top_p']} / "
                                                f"{exp.sampling['max_tokens']}",
            "protocol": exp.protocol_name + "".join(f"; {k}={v}" for k, v in exp.choices.items()
                                                    if v != protocol_presets.BY_NAME[k].value(exp.protocol_name)),
            **{row: " / ".join(str(getattr(memory, n)) for n in names) for row, names in MEMORY_DESCRIBED.items()},
            "memory built by": exp.memory_model or "each evaluated model (its own bank)",
            "experience responses shown": (f"first {memory.max_experience_chars} characters"
                                           if memory.max_experience_chars else "in full"),
            "embedder": exp.embedder,
            "seed": exp.seed,
            "runs": display_path(exp.runs_dir),
            "response cache": display_path(exp.cache_dir),
        }
        rows = {k: str(v) for k, v in rows.items()}
        variant = exp.variant
        if variant is not None:  # a variant marks every setting it changes, with the profile's value
            for setting, fields in SETTING_FIELDS.items():
                changed = [variant.describe_one(f) for f in variant.overrides if f in fields]
                if changed:
                    rows[setting] += "  <- VARIANT: " + "; ".join(changed)
            rows = {"VARIANT " + variant.name: variant.describe(), **rows}
        return pd.DataFrame({"setting": list(rows), "value": list(rows.values())}).set_index("setting")

    def questions_note(self, benchmarks: Sequence[str] | None = None) -> str:
        """How many test questions each cell has, for captions: ``"4 test questions per benchmark"``,
        ``"211-500 test questions per benchmark (the full test splits)"``, ``"2 test questions"`` (one benchmark)."""
        counts = self.exp.sample_counts(benchmarks)
        low, high = min(counts.values()), max(counts.values())
        number = str(low) if low == high else f"{low}-{high}"
        note = f"{number} test questions" + (" per benchmark" if len(counts) > 1 else "")
        return note + (" (the full test splits)" if self.exp.test_limit is None else "")

    def benchmarks_note(self, benchmarks: Sequence[str] | None = None) -> str:
        """The benchmarks by their table names, for captions: ``"MATH500, Economics, Engineering and TruthfulQA"``."""
        names = [benchmark_label(b) for b in (benchmarks or self.exp.benchmarks)]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    def report_context(self, profile: str, figures_dir: str | Path, notebook: str) -> ReportContext:
        """A :class:`ReportContext` whose manifest fields describe this experiment."""
        exp = self.exp
        return ReportContext(
            profile=profile, out_dir=Path(figures_dir), notebook=notebook,
            models=[m.label + (f" (stands in for {m.stands_in_for})" if m.stands_in_for else "") for m in exp.models],
            benchmarks=exp.benchmarks, seeds=[exp.seed], sample_counts=exp.sample_counts(),
            engine_titles=[m.title for m in exp.models], limit_cells=exp.limits,
        )
