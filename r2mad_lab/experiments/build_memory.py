"""Memory construction (Appendix A "Memory Construction"): the experience banks M_i of Eq. 4, built from debates.

:func:`build_memory`: a 3-agent, 3-round MAD with debate summaries on the TRAIN split, all rounds forced (no early
stop), run through :func:`r2mad_lab.experiments.cell.run_cell` (resumable, cached), then the banks built from its
transcripts (:func:`r2mad_core.memory.banks.build_bank_set`) and saved. :func:`bank_set_from_run` builds banks from an
existing run directory of such debates.

This module sits above :mod:`r2mad_lab.experiments.cell` (it runs debates); the R2-MAD round hook
(:mod:`r2mad_core.memory.hook`) only reads banks, so the hook never imports the experiment runner.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from r2mad_core.data import benchmarks as benchmark_data
from r2mad_core.debate import prompts
from r2mad_core.debate.settings import PROFILE_SETTINGS, DebateSettings
from r2mad_core.engine import recorded_model
from r2mad_core.memory.banks import MemoryBankSet, build_bank_set
from r2mad_core.memory.cases import debate_record_from_transcript
from r2mad_core.memory.embeddings import Embedder, get_embedder
from r2mad_core.methods import get_method
from r2mad_lab.experiments.cell import load_run, run_cell

logger = logging.getLogger(__name__)


def bank_set_from_run(
    run_dir: str | Path,
    embedder: Embedder | str,
    *,
    data_dir: str | Path | None = None,
    reward_definition: str = "final_vote",
    state_layout: str = "full",
    state_encoding: str = "text",
    progress: bool = False,
) -> MemoryBankSet:
    """Memory banks from an existing run directory of debates with summaries (not saved).

    The question texts come from the benchmark files (transcripts store sample ids only).
    """
    config, records = load_run(run_dir)
    if isinstance(embedder, str):
        embedder = get_embedder(embedder)
    samples = benchmark_data.load(config["benchmark"], config["split"], data_dir=data_dir)
    wording = config["method"]["debate"].get("task_prompt", "paper")  # x as the debates showed it
    questions = {s.id: prompts.question_text(s.question, bool(s.choices), wording) for s in samples}
    missing = [r.sample_id for r in records if r.sample_id not in questions]
    if missing:
        raise ValueError(f"{run_dir}: samples {missing[:3]} are not in {config['benchmark']} {config['split']}")
    debate_records = [debate_record_from_transcript(r, questions[r.sample_id]) for r in records]
    debate = config["method"]["debate"]
    if debate.get("stop_at_unanimity") or not debate.get("with_summaries"):
        logger.warning(
            "%s: the debates were run with stop_at_unanimity=%s, with_summaries=%s; memory construction "
            "(Appendix A) forces all rounds and needs summaries", run_dir, debate.get("stop_at_unanimity"),
            debate.get("with_summaries"),
        )
    return build_bank_set(
        debate_records, embedder, benchmark=config["benchmark"], split=config["split"],
        model=str(config.get("engine", {}).get("model") or config.get("engine", {}).get("identity", "")),
        reward_definition=reward_definition, state_layout=state_layout, state_encoding=state_encoding,
        show_progress=progress,
        metadata={"debates_run_dir": str(run_dir), "method": config["method"], "seed": config.get("seed"),
                  "limit": config.get("limit"), "n_debates": len(debate_records)},
    )


#: The round 0 of the memory-construction debates, as they run and as their ``config.json`` records it: MAD's one
#: stream (``shared``, the declaration's default): the debates are the only run on the training questions, so nothing
#: is replayed from another method and nothing is drawn apart from it (docs/protocol.md, the round0 row).
BANK_ROUND0 = "shared"
BANK_ROUND0_NOTE = ("the memory-construction debates run MAD's one stream (round0 shared: seed = the run seed) on the "
                    "training questions, which no other run asks")


def bank_method_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The debates' method record as a bank's manifest stores it: the debates' own ``config.json`` record, whole (what
    ran), with a note on their round 0."""
    out = json.loads(json.dumps(dict(record), default=str))
    out["round0_note"] = BANK_ROUND0_NOTE
    return out


def build_memory(
    benchmark: str,
    engine: Any,
    embedder: Embedder | str,
    out_dir: str | Path,
    limit: int | None = None,
    *,
    split: str = "train",
    seed: int = 0,
    settings: DebateSettings | None = None,
    reward_definition: str = "final_vote",
    state_layout: str = "full",
    state_encoding: str = "text",
    debate_options: Mapping[str, Any] | None = None,
    run_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    samples: Sequence[Any] | None = None,
    chunk_size: int = 32,
    progress: bool = True,
    overwrite: bool = False,
    **setting_values: Any,
) -> MemoryBankSet:
    """Run the memory-construction debates on ``split`` and save the bank set to ``out_dir``.

    The debates (MAD with the debate ``settings``, :class:`~r2mad_core.debate.settings.DebateSettings`: ``n_agents``
    personas, ``n_rounds`` rounds, sampling, summary length: :data:`~r2mad_core.debate.settings.PROFILE_SETTINGS`;
    always with summaries, no early stop and round 0 :data:`BANK_ROUND0`; a setting may also be given by name,
    ``n_agents=3``, on top of ``settings``) go to
    ``run_dir`` (default ``out_dir/debates``), a resumable run directory of :mod:`r2mad_lab.experiments.cell`;
    a rerun reuses finished debates. ``embedder`` is an embedder or a name for :func:`get_embedder`.
    ``debate_options``: more options of those MAD debates (the protocol's ``summaries``, ``summary_agents``,
    ``empty_peers``, ``unclosed_thinking``, ``task_prompt``: :func:`r2mad_lab.experiments.protocol.memory_options`).
    """
    settings = (settings or DebateSettings()).replace(**setting_values)
    if isinstance(embedder, str):
        embedder = get_embedder(embedder)
    out = Path(out_dir)
    if (out / "manifest.json").exists() and not overwrite:
        raise FileExistsError(f"{out / 'manifest.json'} exists: pass overwrite=True to rebuild the bank set")
    if samples is None:
        samples = benchmark_data.load(benchmark, split, data_dir=data_dir)
    samples = list(samples)
    if limit is not None:
        samples = samples[:limit]
    # the profile's debate settings (agents, rounds, sampling, summary length) from ``settings``; the loop's protocol
    # choices from ``debate_options`` (the preset's, protocol.memory_options); round 0 as it runs (BANK_ROUND0)
    method = get_method("mad", **{**settings.values(PROFILE_SETTINGS), "stop_at_unanimity": False,
                                  "with_summaries": True, "round0": BANK_ROUND0, **dict(debate_options or {})})
    debates_dir = Path(run_dir) if run_dir is not None else out / "debates"
    result = run_cell(
        debates_dir, benchmark=benchmark, split=split, engine=engine, method=method, seed=seed,
        limit=limit, samples=samples, data_dir=data_dir, chunk_size=chunk_size, progress=progress,
    )
    wording = method.debate.task_prompt  # x as the debates showed it (the authors' prompts: "Question: " for MC)
    questions = {s.id: prompts.question_text(s.question, bool(s.choices), wording) for s in samples}
    records = [debate_record_from_transcript(row, questions[row.sample_id]) for row in result.records]
    bank_set = build_bank_set(
        records,
        embedder,
        benchmark=benchmark,
        split=split,
        model=recorded_model(engine) or str(getattr(engine, "identity", "")),
        reward_definition=reward_definition,
        state_layout=state_layout,
        state_encoding=state_encoding,
        show_progress=progress,
        metadata={
            "debates_run_dir": str(debates_dir),
            "engine_identity": str(getattr(engine, "identity", "")),
            "method": bank_method_record(method.to_dict()),
            "seed": seed,
            "limit": limit,
            "n_debates": len(records),
            "debate_accuracy": result.metrics.get("accuracy"),
        },
    )
    bank_set.save(out, overwrite=overwrite)
    return bank_set
