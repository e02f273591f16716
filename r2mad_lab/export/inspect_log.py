"""Inspect eval logs: one ``.eval`` per (benchmark, method, model, variant), replicates as epochs.

Written through inspect_ai's own API (``inspect_ai.log.write_eval_log``; the optional ``inspect`` extra, pinned in
pyproject.toml), so ``inspect view``, ``inspect_ai.log.read_eval_log`` and ``inspect_ai.analysis.samples_df`` open it.
The mapping, from the run folders' records (:mod:`r2mad_lab.export.source`), what executed:

- the eval spec: task ``r2mad/<benchmark>/<method>`` (the registered method; its display name the run index's),
  the model as ``<engine>/<model>`` with the engine's recorded identity as ``model_args``, the debate's generation
  config (temperature, top_p, max_tokens, seed), the method's options as ``task_args`` (debate and memory settings,
  vote rule, round 0, ...), the protocol and settings in ``metadata``, the r2mad version that wrote the run under
  ``packages`` (a run folder records no git revision: ``revision`` stays empty), the dataset's name and sample ids;
- each sample is one question of one replicate (epoch = the replicate's place in seed order): its input (the
  question with its options, from the benchmark files), ``choices``, the target (gold), the final answer as output
  and the score ``r2mad_vote`` (C / I, the vote rule, group sizes and tie as explanation); per-round correctness,
  consensus Cons(Z^(t)), lambda_t, the retrieved case ids with their similarities and the peer confidences of Eq. 7
  as metadata; the transcript as messages (the question, then every agent's response, ``agent`` and ``round`` in
  each message's metadata; a round's summary h^(t)); one model event per request with its usage, inside a span per
  round and one per agent (the request's text is not stored by r2mad, only its SHA-256 prefix: the event's input
  says so); usage and time in the stats.

Timestamps come from the run's own files: its start is when ``config.json`` was written, each event is placed at
the start plus the recorded seconds of the rounds before it, the end is when ``transcripts.jsonl`` was last written.
:func:`export_inspect` reads every folder before writing anything, then builds and writes one log at a time.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from r2mad_core import __version__
from r2mad_core.data import benchmarks as benchmark_data
from r2mad_lab.export.source import ExportError, ExportRun, portable, read_runs, replicate_free

#: The score's name in every log (``score_r2mad_vote`` in ``samples_df``).
SCORER = "r2mad_vote"
SUFFIX = ".eval"


def _inspect() -> Any:
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise ExportError(
            "inspect_ai is not installed: pip install -e '.[inspect]' (the optional inspect extra)") from None
    import inspect_ai

    return inspect_ai


def _questions(benchmark: str) -> dict[str, Any]:
    try:
        return {s.id: s for s in benchmark_data.load(benchmark, "all")}
    except (ValueError, OSError):
        return {}


def _iso(moment: _dt.datetime) -> str:
    return moment.isoformat(timespec="seconds")


def group_cells(runs: Sequence[ExportRun]) -> list[list[ExportRun]]:
    """The runs by cell (:attr:`ExportRun.cell_key`), each cell's replicates in seed order, cells in path order;
    :class:`ExportError` for two replicates with one seed or with different questions."""
    cells: dict[str, list[ExportRun]] = defaultdict(list)
    for run in runs:
        cells[run.cell_key].append(run)
    out = [sorted(c, key=lambda r: (r.seed, r.path)) for c in cells.values()]
    for cell in out:
        seeds = [r.seed for r in cell]
        if len(set(seeds)) != len(seeds):
            raise ExportError(f"{cell[1].path}: seed: {cell[1].seed} as in {cell[0].path}; two runs of one cell with "
                              "the same seed cannot be two epochs (export them apart)")
        ids = [r.sample_id for r in cell[0].records]
        for run in cell[1:]:
            if [r.sample_id for r in run.records] != ids:
                raise ExportError(f"{run.path}/transcripts.jsonl: sample_id: its questions differ from "
                                  f"{cell[0].path}'s (replicates of one cell answer the same questions)")
    return sorted(out, key=lambda c: c[0].path)


def log_name(cell: Sequence[ExportRun]) -> str:
    """The log's file name: task, variant and the cell's key (the same cell: the same name)."""
    first = cell[0]
    text = f"r2mad-{first.config.benchmark}-{first.config.method['name']}-{replicate_free(first.entry.variant)}"
    return re.sub(r"[^0-9A-Za-z.=_-]+", "-", text).strip("-") + f"_{first.cell_key}{SUFFIX}"


def build_log(cell: Sequence[ExportRun]) -> Any:
    """The ``EvalLog`` of one cell (module docstring)."""
    _inspect()
    from inspect_ai import __version__ as inspect_version
    from inspect_ai.event import ModelEvent, SpanBeginEvent, SpanEndEvent
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalPlan,
        EvalPlanStep,
        EvalResults,
        EvalSample,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, GenerateConfig, ModelOutput, ModelUsage
    from inspect_ai.scorer import CORRECT, INCORRECT, Score

    first = cell[0]
    config = first.config
    debate = config.method.get("debate", {})
    engine = first.entry.engine
    model = f"{engine}/{config.engine.get('model', '?')}"
    generate = GenerateConfig(temperature=debate.get("temperature"), top_p=debate.get("top_p"),
                              max_tokens=debate.get("max_tokens"), seed=debate.get("seed"))
    questions = _questions(config.benchmark)
    ids = [r.sample_id for r in first.records]
    samples = []
    usage_total = ModelUsage()
    for epoch, run in enumerate(cell, start=1):
        for record in run.records:
            samples.append(_sample(record, run, epoch, model, generate, questions.get(record.sample_id),
                                   ModelEvent, SpanBeginEvent, SpanEndEvent, EvalSample, ChatMessageAssistant,
                                   ChatMessageUser, ModelOutput, ModelUsage, Score, CORRECT, INCORRECT))
            usage_total = usage_total + samples[-1].model_usage[model]
    n_correct = sum(bool(r.correct) for run in cell for r in run.records)
    total = len(samples)
    metrics = {"accuracy": EvalMetric(name="accuracy", value=n_correct / total if total else 0.0)}
    for name in ("ci_low", "ci_high"):
        if len(cell) == 1 and isinstance(first.metrics.get(name), (int, float)):
            metrics[name] = EvalMetric(name=name, value=float(first.metrics[name]))
    spec = EvalSpec(
        eval_id=first.cell_key, run_id=first.cell_key, created=_iso(min(r.started for r in cell)),
        task=f"r2mad/{config.benchmark}/{config.method['name']}", task_id=first.cell_key, task_version=0,
        task_display_name=f"{first.entry.method} · {benchmark_data.display_name(config.benchmark)}",
        task_args={**first.method_options, "vote_rule": config.method.get("vote_rule"),
                   "protocol": first.entry.protocol, "split": config.split, "limit": config.limit},
        solver="r2mad/debate", solver_args=portable({k: v for k, v in debate.items() if k != "seed"}),
        dataset=EvalDataset(name=config.benchmark, samples=len(ids), sample_ids=list(ids), shuffled=False),
        model=model, model_generate_config=generate, model_args=portable(dict(config.engine)),
        config=EvalConfig(epochs=len(cell)),
        packages={"r2mad": config.r2mad_version, "inspect_ai": inspect_version},
        metadata={"r2mad": {"runs": [r.path for r in cell], "seeds": [r.seed for r in cell],
                            "method": first.entry.method, "settings": first.entry.settings,
                            "protocol": first.entry.protocol, "variant": replicate_free(first.entry.variant),
                            "engine_identity": portable(config.engine.get("identity")),
                            "exported_by": f"r2mad {__version__}",
                            "inputs": portable(dict(getattr(config, "model_extra", None) or {}))}},
    )
    results = EvalResults(total_samples=total, completed_samples=total, scores=[EvalScore(
        name=SCORER, scorer=SCORER, scored_samples=total, unscored_samples=0, metrics=metrics,
        params={"vote_rule": config.method.get("vote_rule")})])
    stats = EvalStats(started_at=_iso(min(r.started for r in cell)), completed_at=_iso(max(r.finished for r in cell)),
                      model_usage={model: usage_total})
    plan = EvalPlan(name="r2mad", steps=[EvalPlanStep(solver="r2mad/debate", params=portable(dict(debate)))],
                    config=generate)
    return EvalLog(status="success", eval=spec, plan=plan, results=results, stats=stats, samples=samples)


def _sample(record: Any, run: ExportRun, epoch: int, model: str, generate: Any, question: Any, ModelEvent: Any,
            SpanBeginEvent: Any, SpanEndEvent: Any, EvalSample: Any, ChatMessageAssistant: Any, ChatMessageUser: Any,
            ModelOutput: Any, ModelUsage: Any, Score: Any, CORRECT: Any, INCORRECT: Any) -> Any:
    if question is not None:
        text = benchmark_data.format_question(question.question, question.choices)
        choices = list(question.choices) or None
    else:
        text, choices = f"(question {record.sample_id}: not in this machine's {record.benchmark} files)", None
    messages: list[Any] = [ChatMessageUser(content=text, source="input")]
    events: list[Any] = []
    clock = run.started
    usage = ModelUsage()
    rounds_meta = []
    for rnd in record.rounds:
        t = rnd.round
        round_span = f"e{epoch}-round-{t}"
        events.append(SpanBeginEvent(id=round_span, name=f"round {t}", type="round", timestamp=clock,
                                     metadata={"round": t}))
        lambdas, retrieved, peers = [], [], {}
        for turn in rnd.agents:
            agent_span = f"{round_span}-agent-{turn.agent}"
            events.append(SpanBeginEvent(id=agent_span, parent_id=round_span, name=f"agent {turn.agent}",
                                         type="agent", timestamp=clock, span_id=round_span))
            meta = {"agent": turn.agent, "round": t, "answer": turn.answer, "correct": turn.correct,
                    "finish_reason": turn.finish_reason, "prompt_id": turn.prompt_id}
            message = ChatMessageAssistant(content=turn.response or "(empty response)", model=model, metadata=meta,
                                           source="generate")
            messages.append(message)
            turn_usage = ModelUsage(input_tokens=turn.prompt_tokens, output_tokens=turn.completion_tokens,
                                    total_tokens=turn.prompt_tokens + turn.completion_tokens)
            usage = usage + turn_usage
            output = ModelOutput.from_content(model, turn.response or "", stop_reason=_stop(turn.finish_reason))
            output.usage, output.time = turn_usage, turn.seconds
            events.append(ModelEvent(
                model=model, input=[ChatMessageUser(content=f"(round {t} prompt of agent {turn.agent}: r2mad stores "
                                                            f"its SHA-256 prefix {turn.prompt_id}, not its text)")],
                tools=[], tool_choice="none", config=generate, output=output, cache="read" if turn.cached else None,
                timestamp=clock, completed=clock + _dt.timedelta(seconds=turn.seconds), working_time=turn.seconds,
                span_id=agent_span, metadata={"agent": turn.agent, "round": t}))
            events.append(SpanEndEvent(id=agent_span, timestamp=clock + _dt.timedelta(seconds=turn.seconds),
                                       span_id=round_span))
            hook = turn.retrieved or {}
            if "lambda" in hook:
                lambdas.append(hook["lambda"])
            if hook.get("case_ids"):
                retrieved.append({"agent": turn.agent, "case_ids": list(hook["case_ids"]),
                                  "similarities": list(hook.get("similarities", [])),
                                  "scores": list(hook.get("scores", []))})
            if turn.peer_confidence:
                peers[str(turn.agent)] = {str(k): v for k, v in turn.peer_confidence.items()}
                if "confidence" in hook:
                    peers[str(turn.agent) + "_c"] = {str(k): v for k, v in hook["confidence"].items()}
        for call in rnd.extra_calls:
            call_usage = ModelUsage(input_tokens=call.prompt_tokens, output_tokens=call.completion_tokens,
                                    total_tokens=call.prompt_tokens + call.completion_tokens)
            usage = usage + call_usage
            output = ModelOutput.from_content(model, rnd.summary if call.tag == "summary" and rnd.summary else "",
                                              stop_reason=_stop(call.finish_reason))
            output.usage, output.time = call_usage, call.seconds
            events.append(ModelEvent(
                model=model,
                input=[ChatMessageUser(content=f"({call.tag} request of round {t}: its text is not stored)")],
                tools=[], tool_choice="none", config=generate, output=output, cache="read" if call.cached else None,
                timestamp=clock, working_time=call.seconds, span_id=round_span, metadata={"tag": call.tag, "round": t}))
        if rnd.summary:
            messages.append(ChatMessageAssistant(content=rnd.summary, model=model, source="generate",
                                                 metadata={"round": t, "summary": True}))
        clock = clock + _dt.timedelta(seconds=rnd.seconds)
        events.append(SpanEndEvent(id=round_span, timestamp=clock))
        rounds_meta.append({
            "round": t, "answers": [a.answer for a in rnd.agents], "agents_correct": [a.correct for a in rnd.agents],
            "consensus": rnd.consensus_ratio, "unanimous": rnd.unanimous,
            "lambda_t": lambdas[0] if lambdas else None, "retrieved": retrieved,
            "peer_confidence": {k: v for k, v in peers.items() if not k.endswith("_c")},
            "peer_confidence_values": {k[:-2]: v for k, v in peers.items() if k.endswith("_c")},
        })
    vote = record.vote
    explanation = (f"{vote.rule} vote over the last round's answers: answer groups of sizes "
                   f"{list(vote.group_sizes)}" + ("; a tie broken by the seeded rule" if vote.tied else "")
                   + f"; gold {record.gold}")
    final = ModelOutput.from_content(model, record.final_answer or "")
    final.usage = usage
    return EvalSample(
        id=record.sample_id, epoch=epoch, input=text, choices=choices, target=record.gold, messages=messages,
        output=final, scores={SCORER: Score(value=CORRECT if record.correct else INCORRECT, answer=record.final_answer,
                                            explanation=explanation,
                                            metadata={"rule": vote.rule, "group_sizes": list(vote.group_sizes),
                                                      "tied": vote.tied})},
        metadata={"benchmark": record.benchmark, "split": record.split, "seed": record.seed, "run": run.path,
                  "rounds_executed": record.n_rounds_executed, "stopped_early": record.stopped_early,
                  "truncated_completions": record.truncated_completions, "rounds": rounds_meta},
        events=events, model_usage={model: usage}, started_at=_iso(run.started),
        completed_at=_iso(run.started + _dt.timedelta(seconds=record.seconds)), total_time=round(record.seconds, 6),
        working_time=round(record.seconds, 6),
    )


def _stop(finish_reason: str) -> str:
    return {"length": "max_tokens", "stop": "stop"}.get(finish_reason, "unknown")


def export_inspect(run_dirs: Sequence[str | Path], out_dir: str | Path) -> list[Path]:
    """One ``.eval`` log per cell of ``run_dirs`` (folders holding runs stand for every run in them) into
    ``out_dir``. Every folder is read and checked first (:class:`ExportError`: nothing written); then each log is
    built and written, one at a time, into a hidden folder inside ``out_dir``, and moved into place when all are."""
    _inspect()
    from inspect_ai.log import write_eval_log

    cells = group_cells(read_runs(run_dirs))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".r2mad-export-", dir=out_dir))
    try:
        names = []
        for cell in cells:
            name = log_name(cell)
            write_eval_log(build_log(cell), os.fspath(staging / name), format="eval")
            names.append(name)
        written = []
        for name in names:
            os.replace(staging / name, out_dir / name)
            written.append(out_dir / name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
