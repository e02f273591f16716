"""Run cells: (benchmark, split, engine/model, method config, seed, limit) -> a run directory.

See docs/design.md "Runs and results" (the debate of Eq. 1-3, scored as in Section 5).

A run directory holds

- ``config.json``: the cell (benchmark, split, limit, seed, method name/options/debate config/vote
  rule, engine identity and model, a hash of the sample ids, and under ``inputs`` the content digests
  of the files the method reads, e.g. the memory bank's :func:`~r2mad_core.memory.banks.bank_digest`).
  Written once; a later call with a different cell on the same directory raises
  :class:`RunConfigMismatch` (use another directory: the engine cache makes the shared generations
  free). A memory bank rebuilt at the same path is a different cell: resuming against it would mix
  debates that saw two banks. A directory written before ``inputs`` existed gets them added (with a
  warning) on its next run.
- ``transcripts.jsonl``: append-only, one JSON line per finished sample (schema below), kept by
  :class:`r2mad_lab.experiments.transcripts.TranscriptStore`.
- ``metrics.json``: recomputed from the transcripts (:func:`r2mad_lab.experiments.metrics.compute_metrics`),
  written atomically (temporary file + ``os.replace``).

Resume and crash safety: a call on an existing directory skips the samples already in
``transcripts.jsonl`` (and the engine cache replays the generations of a half-finished chunk).
Samples are processed in chunks (``chunk_size``), so transcripts appear progressively; how a run killed
mid-write is read back is the store's (:mod:`r2mad_lab.experiments.transcripts`). One process at a
time: the directory is locked with ``fcntl.flock`` on ``.lock`` (released by the kernel when a
process dies).

Bad inputs cost no generation: :func:`prepare_cell` checks everything that needs no engine (method
options, samples, the directory's config, the method's hook, e.g. loading and verifying the memory
bank and ``hook.check_run``) so that a command line can build the engine only afterwards;
:func:`run_cell` runs the same checks before its first generation.

Transcript line (one sample): the schema is :class:`r2mad_core.records.TranscriptRecord` (rounds, agents' turns,
vote, tokens, seconds); every line read is checked against it, and a complete line that does not fit is an error
naming the file, the line and the field. ``config.json``: :class:`r2mad_core.records.RunConfig`.

``prompt_id`` is the first 16 hex digits of SHA-256 of the request's chat messages; ``seconds``
(per round and per sample) is the sample's share of the wall time of each round it took part in
(round wall time / samples in the round); per-turn ``seconds`` is the engine's own time (0 for a
cached completion). ``truncated`` is ``finish_reason == "length"`` (cut off at ``max_tokens``),
``empty`` a blank response; both are counted in the metrics (``completion_health``,
``truncated_share``), and ``score_run(truncated_answers="missing")`` scores truncated answers as
missing (see :mod:`r2mad_core.debate.vote`). ``truncated_completions`` counts the sample's truncated turns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from tqdm.std import tqdm  # not tqdm.auto: in a kernel without ipywidgets it warns at import (a notebook stays quiet)

from r2mad_core import __version__, files
from r2mad_core.data import benchmarks
from r2mad_core.debate.loop import DebateState, score_turns
from r2mad_core.debate.overflow import DEFAULT_OVERFLOW_POLICY, check_overflow_policy, with_overflow_policy
from r2mad_core.debate.scheduling import check_schedule, run_scheduled
from r2mad_core.debate.vote import vote
from r2mad_core.engine import Engine, recorded_model
from r2mad_core.files import write_json_atomic
from r2mad_core.methods import Method, RunContext, get_method
from r2mad_core.records import RunConfigMismatch, TranscriptError, TranscriptRecord, check_records, read_config
from r2mad_lab.experiments.metrics import compute_metrics, sample_cost
from r2mad_lab.experiments.transcripts import TranscriptStore

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
TRANSCRIPTS_FILE = "transcripts.jsonl"
METRICS_FILE = "metrics.json"
LOCK_FILE = ".lock"
FORMAT_VERSION = 1
# Keys of config.json that describe the call, not the cell: they may differ between resumes.
INFORMATIONAL_KEYS = frozenset({"r2mad_version", "chunk_size"})


class RunDirectoryBusy(RuntimeError):
    """Another process holds the run directory's lock."""


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock (``.lock``, ``fcntl.flock``; released if the process dies)."""
    try:
        with files.locked(Path(run_dir) / LOCK_FILE, blocking=False):
            yield
    except BlockingIOError:
        raise RunDirectoryBusy(f"{run_dir}: another process is running this cell (lock {LOCK_FILE})") from None


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------
def transcript_record(state: DebateState, method: Method, *, split: str, seed: int) -> TranscriptRecord:
    """The transcript line of a finished debate (turn correctness must already be scored): the loop's own
    round records, the vote over the last round, the cost per tag."""
    last = state.rounds[-1]
    result = vote(
        last.answers,
        state.sample.gold,
        state.benchmark,
        rule=method.vote_rule,
        run_seed=seed,
        sample_id=state.sample.id,
        corrects=[bool(t.correct) for t in last.agents],
    )
    return TranscriptRecord(
        sample_id=state.sample.id,
        benchmark=state.benchmark,
        split=split,
        gold=state.sample.gold,
        num_options=state.num_options,
        method=method.name,
        seed=seed,
        rounds=state.rounds,
        n_rounds_executed=len(state.rounds),
        stopped_early=state.stopped_early,
        final_answer=result.answer,
        correct=result.correct,
        vote=result,
        tokens=sample_cost(state.rounds),
        seconds=sum(r.seconds for r in state.rounds),
        truncated_completions=sum(1 for r in state.rounds for t in r.agents if t.truncated),
    )


def sample_ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:16]


def cell_config(
    *,
    benchmark: str,
    split: str,
    method: Method,
    seed: int,
    limit: int | None,
    engine: Engine,
    sample_ids: Sequence[str],
    chunk_size: int,
) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "benchmark": benchmark,
        "split": split,
        "limit": limit,
        "seed": seed,
        "method": method.to_dict(),
        "engine": {"identity": getattr(engine, "identity", type(engine).__name__), "model": recorded_model(engine)},
        "n_samples": len(sample_ids),
        "sample_ids_sha256": sample_ids_digest(sample_ids),
        "r2mad_version": __version__,
        "chunk_size": chunk_size,
        **({"inputs": dict(method.inputs)} if method.inputs else {}),
    }


def _differences(
    expected: Mapping[str, Any], found: Mapping[str, Any], prefix: str = "", ignore: frozenset[str] = frozenset()
) -> list[str]:
    out = []
    for key in sorted(set(expected) | set(found)):
        if not prefix and (key in INFORMATIONAL_KEYS or key in ignore):
            continue
        a, b = expected.get(key, "<missing>"), found.get(key, "<missing>")
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out.extend(_differences(a, b, f"{prefix}{key}."))
        elif a != b:
            out.append(f"{prefix}{key}: requested {a!r}, directory has {b!r}")
    return out


def check_config(run_dir: Path, config: Mapping[str, Any], *, ignore: frozenset[str] = frozenset(),
                 write: bool = True) -> None:
    """Write ``config.json`` for a new run directory or check that it matches ``config``
    (top-level keys in ``ignore`` are not compared)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        transcripts = Path(run_dir) / TRANSCRIPTS_FILE
        if transcripts.exists() and transcripts.stat().st_size > 0:
            # config.json is written before the first transcript line: without it nothing says which cell (method,
            # options, engine) these debates belong to, so they are never adopted as this cell's
            raise RunConfigMismatch(
                f"{path}: missing, but {transcripts} holds finished debates of an unknown cell; restore "
                f"{CONFIG_FILE}, or use another --out directory (or remove {TRANSCRIPTS_FILE} to start over)"
            )
        if write:
            write_json_atomic(path, config)
        return
    found = read_config(path)
    # Round-trip the requested config through JSON so tuples/lists compare equal.
    expected = json.loads(json.dumps(config, default=str))
    legacy = "inputs" in expected and "inputs" not in found  # written before config.json recorded inputs
    differences = _differences(expected, found, ignore=ignore | ({"inputs"} if legacy else set()))
    if differences:
        hint = ""
        if any(d.startswith("inputs.") for d in differences):
            hint = (
                " An input file changed since this run started (e.g. the memory bank was rebuilt): its finished "
                "samples were debated with the old one. Restore it, or run into another --out directory."
            )
        raise RunConfigMismatch(
            f"{path} belongs to a different run cell: " + "; ".join(differences) + "." + hint
            + " Use another --out directory (the engine cache replays the generations they share)."
        )
    if legacy and write:
        logger.warning(
            "%s was written before run directories recorded their input digests; recording %s now. The samples "
            "already finished cannot be checked against them.", path, expected["inputs"],
        )
        write_json_atomic(path, {**found, "inputs": expected["inputs"]})


class _PreflightEngine:
    """The engine of the :class:`RunContext` hooks and peer selectors are built with by
    :func:`prepare_cell`: they are built before the real engine exists and must not generate then (they
    get an engine in ``prepare_round``/``select_peers``)."""

    identity = ""
    model = ""

    def generate(self, requests: Sequence[Any]) -> list[Any]:
        raise RuntimeError(
            "a round hook or peer selector tried to generate while it was built (before the run's engine exists)"
        )

    def close(self) -> None:
        pass


def preflight(
    out_dir: str | Path,
    *,
    benchmark: str,
    split: str,
    method: Method,
    seed: int,
    limit: int | None,
    sample_ids: Sequence[str],
) -> None:
    """Raise :class:`RunConfigMismatch` early (before an engine is built) when ``out_dir`` holds
    another cell; the engine part of the config is checked later by :func:`run_cell`."""
    config = cell_config(
        benchmark=benchmark,
        split=split,
        method=method,
        seed=seed,
        limit=limit,
        engine=_PreflightEngine(),  # type: ignore[arg-type]
        sample_ids=sample_ids,
        chunk_size=0,
    )
    check_config(Path(out_dir), config, ignore=frozenset({"engine"}), write=False)


def _resolve_method(method: Method | str, method_options: Mapping[str, Any] | None, seed: Any, limit: Any) -> Method:
    if isinstance(method, str):
        method = get_method(method, **dict(method_options or {}))
    elif method_options:
        raise ValueError("run_cell: method_options only apply when method is given by name")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"run_cell: seed must be an integer, found {seed!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"run_cell: limit must be a positive integer or None, found {limit!r}")
    return method.with_seed(seed)


def _select_samples(
    benchmark: str, split: str, samples: Sequence[Any] | None, limit: int | None, data_dir: str | Path | None
) -> list[Any]:
    if samples is None:
        samples = benchmarks.load(benchmark, split, data_dir=data_dir)
    samples = list(samples)
    if limit is not None:
        samples = samples[:limit]
    wrong = [s.id for s in samples if s.benchmark != benchmark]
    if wrong:
        raise ValueError(f"run_cell: samples {wrong[:3]} do not belong to benchmark {benchmark!r}")
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise ValueError("run_cell: the samples contain duplicate ids")
    return samples


def _check_hook(hook: Any, benchmark: str, samples: Sequence[Any], method: Method) -> None:
    check_run = getattr(hook, "check_run", None)
    if callable(check_run):
        check_run(benchmark, samples, method.debate)


@dataclass
class PreparedCell:
    """A run cell checked before any engine exists (:func:`prepare_cell`). Pass ``method`` and
    ``samples`` to :func:`run_cell` with the same cell arguments: its hook and peer selector are the
    ones built here (a memory bank is loaded and verified once)."""

    method: Method
    samples: list[Any]
    hook: Any
    peer_selector: Any


def _build_hook_and_selector(
    method: Method,
    benchmark: str,
    split: str,
    engine: Engine,
    seed: int,
    data_dir: str | Path | None,
    out_dir: Path,
    samples: Sequence[Any],
) -> tuple[Any, Any]:
    """The method's round hook and peer selector for this cell, the hook's ``check_run`` passed."""
    context = RunContext(
        benchmark=benchmark,
        split=split,
        engine=engine,
        seed=seed,
        data_dir=Path(data_dir) if data_dir is not None else None,
        out_dir=out_dir,
    )
    hook = method.make_hook(context) if method.make_hook is not None else None
    selector = method.make_peer_selector(context) if method.make_peer_selector is not None else None
    _check_hook(hook, benchmark, samples, method)
    return hook, selector


def prepare_cell(
    out_dir: str | Path,
    *,
    benchmark: str,
    split: str,
    method: Method | str,
    method_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    limit: int | None = None,
    samples: Sequence[Any] | None = None,
    data_dir: str | Path | None = None,
) -> PreparedCell:
    """Every check of :func:`run_cell` that needs no engine, so that a bad input is one error before
    an engine is built or a generation is spent: the method and its options, the samples (loading the
    data files), the directory's ``config.json`` (:class:`RunConfigMismatch`), the method's hook and
    peer selector built with a context whose engine refuses to generate (R2-MAD/ICL-CoT: the memory
    bank loaded and verified, ``MemoryBankError``) and ``hook.check_run``. Raises ValueError (or
    FileNotFoundError for missing data files) naming the problem; writes nothing."""
    method = _resolve_method(method, method_options, seed, limit)
    method.check_benchmark(benchmark)
    samples = _select_samples(benchmark, split, samples, limit, data_dir)
    ids = [s.id for s in samples]
    preflight(out_dir, benchmark=benchmark, split=split, method=method, seed=seed, limit=limit, sample_ids=ids)
    stored = TranscriptStore(Path(out_dir) / TRANSCRIPTS_FILE)
    if stored.path.exists():  # a corrupt line (other than a cut-off last one) or samples of another cell
        check_records(stored.path, stored.load(repair=False), ids, method=method.name, seed=seed, split=split,
                      benchmark=benchmark)
    hook, selector = _build_hook_and_selector(
        method, benchmark, split, _PreflightEngine(), seed, data_dir, Path(out_dir), samples  # type: ignore[arg-type]
    )
    prepared = replace(
        method,
        make_hook=None if method.make_hook is None else (lambda _context, _hook=hook: _hook),
        make_peer_selector=None if method.make_peer_selector is None else (lambda _context, _sel=selector: _sel),
    )
    return PreparedCell(prepared, samples, hook, selector)


# --------------------------------------------------------------------------------------------
# Running a cell
# --------------------------------------------------------------------------------------------
@dataclass
class CellResult:
    run_dir: Path
    config: dict[str, Any]
    records: list[TranscriptRecord]  # in sample order
    metrics: dict[str, Any]
    n_new: int  # samples debated by this call
    n_reused: int  # samples found finished in transcripts.jsonl


def run_cell(
    out_dir: str | Path,
    *,
    benchmark: str,
    split: str,
    engine: Engine,
    method: Method | str,
    method_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    limit: int | None = None,
    samples: Sequence[Any] | None = None,
    data_dir: str | Path | None = None,
    chunk_size: int = 32,
    progress: bool = True,
    schedule: str = "rounds",
    window: int | None = None,
    overflow_policy: str = "empty",
) -> CellResult:
    """Run (or resume) one cell into ``out_dir`` and return its records and metrics.

    ``schedule``: ``"rounds"`` (default; chunks of ``chunk_size`` questions, each debated round-synchronously)
    or ``"questions"`` (every question advances on its own over a continuous-batching engine, about ``window``
    questions' worth of engine requests in flight, default :data:`r2mad_core.debate.scheduling.DEFAULT_WINDOW`; each
    transcript line is written as soon as its question and every earlier one are done). Both send the same requests,
    so on a deterministic engine and on replay from the cache they give the same transcript file apart from the
    wall-time ``seconds`` fields (:mod:`r2mad_core.debate.scheduling`), so neither ``schedule`` nor
    ``window`` is part of the cell's config (a run may be resumed under the other). A SIGKILL loses at most a
    chunk (``rounds``) or ``HOLD_FACTOR`` x ``window`` questions (``questions``: the ones being debated and the
    finished ones waiting for an earlier one); their generations stay in the response cache.

    ``overflow_policy``: what a prompt that does not fit the model's context gives (:mod:`r2mad_core.debate.overflow`:
    ``empty``, the authors' code and the default; ``trim_experiences``; ``raise``). It changes transcripts, so a
    policy other than the default is part of the cell's config.

    ``method`` is a :class:`~r2mad_core.methods.Method` or a registered name (built with
    ``method_options``). ``samples`` overrides loading ``benchmark``/``split`` from the data
    directory (tests, notebooks with hand-made samples); ``limit`` keeps the first ``limit``
    samples of the split (the splits come shuffled, so this is a fair subset). Every input is
    checked before the first generation (see :func:`prepare_cell`).
    """
    method = _resolve_method(method, method_options, seed, limit)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"run_cell: chunk_size must be a positive integer, found {chunk_size!r}")
    try:
        check_schedule(schedule, window)
    except ValueError as exc:
        raise ValueError(f"run_cell: {exc}") from None
    method.check_benchmark(benchmark)
    samples = _select_samples(benchmark, split, samples, limit, data_dir)
    ids = [s.id for s in samples]
    run_dir = Path(out_dir)
    # The hook (R2-MAD: loading and verifying the memory bank) before anything is written, so that a bad
    # bank leaves no config.json behind.
    hook, selector = _build_hook_and_selector(method, benchmark, split, engine, seed, data_dir, run_dir, samples)

    run_dir.mkdir(parents=True, exist_ok=True)
    config = cell_config(
        benchmark=benchmark,
        split=split,
        method=method,
        seed=seed,
        limit=limit,
        engine=engine,
        sample_ids=ids,
        chunk_size=chunk_size,
    )
    if check_overflow_policy(overflow_policy) != DEFAULT_OVERFLOW_POLICY:
        config["overflow_policy"] = overflow_policy
    engine = with_overflow_policy(engine, overflow_policy)
    with locked(run_dir):
        check_config(run_dir, config)
        store = TranscriptStore(run_dir / TRANSCRIPTS_FILE)
        existing = {r.sample_id: r for r in store.load()}
        check_records(store.path, existing.values(), ids, method=method.name, seed=seed, split=split,
                      benchmark=benchmark)
        pending = [s for s in samples if s.id not in existing]
        n_reused = len(samples) - len(pending)
        if n_reused:
            logger.info("%s: %d of %d samples already finished; %d to run", run_dir, n_reused, len(samples),
                        len(pending))
        bar = None
        if progress and pending:
            bar = tqdm(total=len(samples), initial=n_reused, desc=f"{method.name} {benchmark}", unit="q")
        def on_round(t: int, n: int, _bar: Any = bar) -> None:
            if _bar is not None:
                _bar.set_postfix_str(f"round {t} ({n} active)")

        def write(states: list[DebateState]) -> None:
            """Score and append finished debates (input order), one write + fsync per call."""
            score_turns(states)
            records = [transcript_record(state, method, split=split, seed=seed) for state in states]
            store.append_many(records)
            for record in records:
                existing[record.sample_id] = record
            if bar is not None:
                bar.update(len(states))

        try:
            # rounds: chunk by chunk; questions: one stream, written as the questions finish (in input order)
            step = chunk_size if schedule == "rounds" else max(1, len(pending))
            for start in range(0, len(pending), step):
                run_scheduled(
                    pending[start : start + step], engine, method.debate, schedule=schedule, window=window,
                    benchmark=benchmark, hook=hook, peer_selector=selector, on_round=on_round, on_finished=write,
                )
        finally:
            if bar is not None:
                bar.close()
        records = [existing[i] for i in ids]
        metrics = compute_metrics(records)
        metrics["run_dir"] = str(run_dir)
        write_json_atomic(run_dir / METRICS_FILE, _json_safe(metrics))
    return CellResult(run_dir, config, records, metrics, n_new=len(pending), n_reused=n_reused)


def _json_safe(value: Any) -> Any:
    """NaN/inf -> None for metrics.json (strict JSON readers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], list[TranscriptRecord]]:
    """``(config, records)`` of a run directory, records in file order (read-only: a truncated
    last line is skipped, not repaired)."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    try:
        config = read_config(config_path)  # the same check as a run's (records.read_config), as a TranscriptError
    except RunConfigMismatch as exc:
        raise TranscriptError(str(exc)) from None
    records = TranscriptStore(run_dir / TRANSCRIPTS_FILE).load(repair=False)
    return config, records


def score_run(
    run_dir: str | Path, *, vote_rule: str | None = None, truncated_answers: str = "keep", write: bool = True
) -> dict[str, Any]:
    """Recompute a run's metrics from its transcripts (``vote_rule`` None: the stored final answers;
    ``truncated_answers``: ``"keep"`` or ``"missing"``, see :mod:`r2mad_core.debate.vote`). ``metrics.json``
    is rewritten only for the run's own scoring (no vote rule, ``"keep"``)."""
    run_dir = Path(run_dir)
    config, records = load_run(run_dir)
    metrics = compute_metrics(
        records, vote_rule=vote_rule, run_seed=int(config.get("seed", 0)), truncated_answers=truncated_answers
    )
    metrics["run_dir"] = str(run_dir)
    metrics["complete"] = len(records) == config.get("n_samples")
    if write and vote_rule is None and truncated_answers == "keep":
        write_json_atomic(run_dir / METRICS_FILE, _json_safe(metrics))
    return metrics
