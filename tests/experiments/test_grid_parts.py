"""The parts of the experiment grid on their own: the engine pool, the run reader, the waiting order."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from r2mad_lab import engines
from r2mad_lab.engines import EngineSpec
from r2mad_lab.experiments import run_reader
from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE
from r2mad_lab.experiments.engine_pool import EnginePool
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.experiments.waiting import least_waiting
from r2mad_lab.reproduce.grid import ExperimentGrid


class FakeEngine:
    """An engine that counts its closes; ``fail`` makes its close raise."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.closes = name, fail, 0

    def close(self) -> None:
        self.closes += 1
        if self.fail:
            raise RuntimeError(f"{self.name}: close failed")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any], FakeEngine]]:
    """Every engine the pool makes, as ``(backend, make_engine's keywords, engine)``; "vllm" stands in unbuilt."""
    made: list[tuple[str, dict[str, Any], FakeEngine]] = []

    def make_engine(name: str, **options: Any) -> FakeEngine:
        engine = FakeEngine(f"{name}-{len(made)}", fail=options.get("fail", False))
        made.append((name, options, engine))
        return engine

    monkeypatch.setattr(engines, "make_engine", make_engine)
    monkeypatch.setitem(engines.ENGINES, "vllm", EngineSpec("vllm", FakeEngine, "a stand-in"))
    return made


def _pool(tmp_path: Path) -> EnginePool:
    return EnginePool(tmp_path / "cache", benchmarks=[], data_dir=None, seed=3)


def test_one_engine_per_model_and_close_closes_each_once_even_when_one_fails(tmp_path: Path, made: list) -> None:
    pool = _pool(tmp_path)
    a, again = ModelSpec("A", "simulated", None, {"samples": []}), ModelSpec("A", "simulated", None, {"samples": []})
    b = ModelSpec("B", "simulated", None, {"samples": [], "fail": True})
    c = ModelSpec("C", "simulated", None, {"samples": [], "seed": 9})
    first = pool.engine(a)
    assert pool.engine(again) is first and pool.engine(a) is first  # equal specs share one engine
    pool.engine(b)
    pool.engine(c)
    assert [name for name, _, _ in made] == ["simulated"] * 3 and pool.opened() == [e for _, _, e in made]
    # the simulated agents draw from the grid's seed unless their options name one; they are not worth caching
    assert [(options["seed"], options["cache_dir"]) for _, options, _ in made] == [(3, None), (3, None), (9, None)]
    pool.close()
    assert [engine.closes for _, _, engine in made] == [1, 1, 1] and pool.opened() == []
    pool.close()  # nothing open: nothing closed twice
    assert [engine.closes for _, _, engine in made] == [1, 1, 1]


def test_opening_a_vllm_engine_closes_the_previous_one(tmp_path: Path, made: list) -> None:
    pool = _pool(tmp_path)
    first = pool.engine(ModelSpec("Q", "vllm", "qwen", {}))
    sim = pool.engine(ModelSpec("S", "simulated", None, {"samples": []}))
    second = pool.engine(ModelSpec("G", "vllm", "gemma", {}))
    assert (first.closes, sim.closes, second.closes) == (1, 0, 0)
    assert pool.opened() == [sim, second]
    assert made[0][1]["cache_dir"] == tmp_path / "cache" and made[0][1]["lazy"] is True  # cached, loaded on a miss
    pool.close()
    assert (first.closes, sim.closes, second.closes) == (1, 1, 1)


def test_the_grid_closes_its_pool_on_exit(tmp_path: Path, made: list) -> None:
    with ExperimentGrid(models=[{"label": "Sim", "engine": "simulated", "model": None, "options": {"samples": []}}],
                        benchmarks=["truthfulqa"], runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache") as exp:
        engine = exp.engine(exp.models[0])
        assert exp.engines.opened() == [engine]
    assert engine.closes == 1 and exp.engines.opened() == []


def test_least_waiting_puts_off_the_busy_and_goes_in_order_when_all_are() -> None:
    busy = {"b", "d"}
    assert list(least_waiting("abcde", lambda item: item in busy)) == ["a", "c", "e", "b", "d"]
    assert list(least_waiting("xyz", lambda item: True)) == ["x", "y", "z"]
    freed: list[str] = []

    def busy_until_a_went(item: str) -> bool:  # b waits only while a has not gone
        return item == "b" and "a" not in freed

    order = []
    for item in least_waiting("ba", busy_until_a_went):
        order.append(item)
        freed.append(item)
    assert order == ["a", "b"]


@pytest.fixture
def finished(tmp_path: Path) -> tuple[ExperimentGrid, Any]:
    """One finished cell (simulated agents, 3 questions), the memo emptied after it."""
    exp = ExperimentGrid(models=[{"label": "Sim", "engine": "simulated", "model": None, "options": {}}],
                         benchmarks=["mmlu_pro_economics"], runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache",
                         test_limit=3, train_limit=2, max_tokens=64, bootstrap_resamples=50)
    outcome = exp.run("Sim", "mmlu_pro_economics", "MAD")
    run_reader.FINISHED.clear()
    yield exp, outcome
    run_reader.FINISHED.clear()


def test_the_run_reader_reads_a_finished_run_once_until_a_file_changes(finished: tuple, monkeypatch) -> None:
    _, outcome = finished
    reads: list[Path] = []
    real_load_run = run_reader.load_run
    monkeypatch.setattr(run_reader, "load_run", lambda run_dir: reads.append(run_dir) or real_load_run(run_dir))
    assert run_reader.finished_records(outcome.run_dir, 4) is None  # not all the samples asked for: not finished
    first = run_reader.finished_records(outcome.run_dir, 3)
    again = run_reader.finished_records(outcome.run_dir, 3)
    assert len(reads) == 2 and [r.model_dump() for r in again] == [r.model_dump() for r in first]
    # a transcript file rewritten (its stamp changes) is read again
    transcripts = outcome.run_dir / TRANSCRIPTS_FILE
    stat = transcripts.stat()
    os.utime(transcripts, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    run_reader.finished_records(outcome.run_dir, 3)
    assert len(reads) == 3
    assert run_reader.finished_records(outcome.run_dir.parent / "missing", 3) is None  # no config: no run


def test_the_run_readers_metrics_are_computed_once_per_resamples_and_handed_out_as_copies(finished: tuple,
                                                                                          monkeypatch) -> None:
    _, outcome = finished
    records = run_reader.finished_records(outcome.run_dir, 3)
    computed: list[int] = []
    real = run_reader.compute_metrics
    monkeypatch.setattr(run_reader, "compute_metrics",
                        lambda rs, n_bootstrap: computed.append(n_bootstrap) or real(rs, n_bootstrap=n_bootstrap))
    remembered = run_reader.FINISHED[str(outcome.run_dir)][1]
    one = run_reader.finished_metrics(outcome.run_dir, remembered, 50)
    one["accuracy"] = -1.0
    two = run_reader.finished_metrics(outcome.run_dir, remembered, 50)
    run_reader.finished_metrics(outcome.run_dir, remembered, 20)
    assert computed == [50, 20] and two["accuracy"] == outcome.metrics["accuracy"]
    # records that are not the remembered ones are scored afresh, every time
    run_reader.finished_metrics(outcome.run_dir, [r.model_copy() for r in records], 50)
    assert computed == [50, 20, 50]


def test_the_run_readers_memo_drops_the_oldest_beyond_its_record_cap(finished: tuple, monkeypatch) -> None:
    _, outcome = finished
    records = run_reader.finished_records(outcome.run_dir, 3)
    other = outcome.run_dir.parent / "copy"
    other.mkdir()
    for name in ("config.json", TRANSCRIPTS_FILE):
        (other / name).write_bytes((outcome.run_dir / name).read_bytes())
    monkeypatch.setattr(run_reader, "MAX_RECORDS", 5)
    run_reader.remember_finished(other, records)
    assert list(run_reader.FINISHED) == [str(other)]  # 6 records > 5: the older directory went
    run_reader.remember_finished(outcome.run_dir.parent / "gone", records)  # files missing: nothing remembered
    assert list(run_reader.FINISHED) == [str(other)]


def test_the_grid_notes_say_the_questions_and_benchmarks_of_what_they_are_given() -> None:
    from types import SimpleNamespace

    from r2mad_lab.report.grid_notes import GridNotes

    counts = {"math500": 211, "truthfulqa": 500, "mmlu_pro_economics": 500}
    exp = SimpleNamespace(test_limit=None, benchmarks=list(counts),
                          sample_counts=lambda benchmarks=None: {b: counts[b] for b in (benchmarks or counts)})
    notes = GridNotes(exp)
    assert notes.questions_note() == "211-500 test questions per benchmark (the full test splits)"
    assert notes.questions_note(["truthfulqa"]) == "500 test questions (the full test splits)"
    exp.test_limit = 4
    assert notes.questions_note(["truthfulqa", "mmlu_pro_economics"]) == "500 test questions per benchmark"
    assert notes.benchmarks_note() == "MATH500, TruthfulQA and Economics"
    assert notes.benchmarks_note(["truthfulqa"]) == "TruthfulQA"
