"""Run cells: files, resume, cache replay, crash safety (truncated lines, SIGKILL), config mismatch."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from debate_fakes import ScriptedEngine, hashed_respond, samples
from hand_transcripts import transcript

from r2mad_core.methods import get_method
from r2mad_lab.engines.cache import CachedEngine
from r2mad_lab.experiments.cell import (
    METRICS_FILE,
    TRANSCRIPTS_FILE,
    RunConfigMismatch,
    RunDirectoryBusy,
    TranscriptError,
    load_run,
    locked,
    preflight,
    run_cell,
    score_run,
)
from r2mad_lab.experiments.transcripts import TranscriptStore

TESTS_DIR = Path(__file__).resolve().parents[1]


STABLE_KEYS = ("seconds",)


def stable(record: dict) -> dict:
    """A record without wall-time and cache fields (they differ between runs by design)."""
    out = json.loads(json.dumps(record.model_dump()))
    out.pop("seconds", None)
    for r in out["rounds"]:
        r.pop("seconds", None)
        for a in r["agents"]:
            a.pop("seconds", None)
            a.pop("cached", None)
        for c in r.get("extra_calls", []):
            c.pop("seconds", None)
            c.pop("cached", None)
    for c in out.get("tokens", {}).values():
        c.pop("seconds", None)
        c.pop("cached", None)
    return out


# ----------------------------------------------------------------------------------------------
# Files and resume
# ----------------------------------------------------------------------------------------------
def test_run_cell_writes_config_transcripts_and_metrics(tmp_path):
    engine = ScriptedEngine(hashed_respond)
    result = run_cell(
        tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="mad",
        samples=samples(7), chunk_size=3, progress=False, seed=5,
    )
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["benchmark"] == "truthfulqa" and config["seed"] == 5 and config["n_samples"] == 7
    assert config["method"]["name"] == "mad" and config["method"]["debate"]["seed"] == 5
    assert config["engine"] == {"identity": "scripted-v1", "model": "fake-model"}
    lines = (run / TRANSCRIPTS_FILE).read_text().splitlines()
    assert [json.loads(line)["sample_id"] for line in lines] == [f"q{i:03d}" for i in range(7)]
    assert result.n_new == 7 and result.n_reused == 0
    # Chunks of 3: ceil(7/3) = 3 debates, each 1-3 rounds: every generate call has <= 9 requests.
    assert max(len(b) for b in engine.batches) <= 9
    assert all(r.params.seed == 5 for b in engine.batches for r in b)
    metrics = json.loads((run / METRICS_FILE).read_text())
    assert metrics["n"] == 7
    assert metrics["accuracy"] == pytest.approx(sum(r.correct for r in result.records) / 7)
    first = result.records[0]
    assert first.rounds[0].agents[0].answer in "ABCD"
    assert first.tokens["debate"].requests == 3 * first.n_rounds_executed
    assert set(first.model_dump()) >= {"sample_id", "gold", "final_answer", "correct", "vote", "tokens", "seconds",
                                       "truncated_completions"}


def test_rerun_skips_finished_samples_and_gives_identical_transcripts(tmp_path):
    run = tmp_path / "run"
    first = ScriptedEngine(hashed_respond)
    r1 = run_cell(run, benchmark="truthfulqa", split="test", engine=first, method="mad", samples=samples(6),
                  progress=False)
    before = (run / TRANSCRIPTS_FILE).read_bytes()
    second = ScriptedEngine(hashed_respond)
    r2 = run_cell(run, benchmark="truthfulqa", split="test", engine=second, method="mad", samples=samples(6),
                  progress=False)
    assert second.calls == 0 and r2.n_reused == 6 and r2.n_new == 0
    assert (run / TRANSCRIPTS_FILE).read_bytes() == before
    assert r1.records == r2.records and r1.metrics["accuracy"] == r2.metrics["accuracy"]


def test_cache_replays_every_generation_into_a_new_directory(tmp_path):
    cache = tmp_path / "cache"
    backend1 = ScriptedEngine(hashed_respond)
    kwargs = dict(benchmark="truthfulqa", split="test", samples=samples(5), progress=False)
    r1 = run_cell(tmp_path / "a", engine=CachedEngine(backend1, cache), method=get_method("mad", with_summaries=True),
                  **kwargs)
    backend2 = ScriptedEngine(lambda *a: pytest.fail("the cache should answer every request"))
    r2 = run_cell(tmp_path / "b", engine=CachedEngine(backend2, cache), method=get_method("mad", with_summaries=True),
                  **kwargs)
    assert backend1.calls > 0 and backend2.calls == 0
    assert [stable(r) for r in r1.records] == [stable(r) for r in r2.records]
    assert all(a.cached for r in r2.records for rr in r.rounds for a in rr.agents)
    assert r2.metrics["tokens_per_query"]["debate"]["cached_fraction"] == 1.0


def test_config_mismatch_is_a_clear_error(tmp_path):
    run = tmp_path / "run"
    engine = ScriptedEngine(hashed_respond)
    run_cell(run, benchmark="truthfulqa", split="test", engine=engine, method="mad", samples=samples(2), progress=False)
    calls = engine.calls
    with pytest.raises(RunConfigMismatch, match=r"method\.name: requested 'cot', directory has 'mad'"):
        run_cell(run, benchmark="truthfulqa", split="test", engine=engine, method="cot", samples=samples(2),
                 progress=False)
    with pytest.raises(RunConfigMismatch, match="seed: requested 1, directory has 0"):
        run_cell(run, benchmark="truthfulqa", split="test", engine=engine, method="mad", samples=samples(2), seed=1,
                 progress=False)
    with pytest.raises(RunConfigMismatch, match="n_samples: requested 3, directory has 2"):
        run_cell(run, benchmark="truthfulqa", split="test", engine=engine, method="mad", samples=samples(3),
                 progress=False)
    other = ScriptedEngine(hashed_respond, identity="other-engine")
    with pytest.raises(RunConfigMismatch, match="engine.identity: requested 'other-engine'"):
        run_cell(run, benchmark="truthfulqa", split="test", engine=other, method="mad", samples=samples(2),
                 progress=False)
    with pytest.raises(RunConfigMismatch, match="max_tokens"):
        preflight(run, benchmark="truthfulqa", split="test", method=get_method("mad", max_tokens=7), seed=0, limit=None,
                  sample_ids=[s.id for s in samples(2)])
    assert engine.calls == calls and other.calls == 0
    # chunk_size is not part of the cell.
    run_cell(run, benchmark="truthfulqa", split="test", engine=engine, method="mad", samples=samples(2), chunk_size=1,
             progress=False)


def test_a_locked_directory_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with locked(run):
        with pytest.raises(RunDirectoryBusy, match="another process"):
            run_cell(run, benchmark="truthfulqa", split="test", engine=ScriptedEngine(hashed_respond), method="cot",
                     samples=samples(1), progress=False)


# ----------------------------------------------------------------------------------------------
# Damaged transcript files
# ----------------------------------------------------------------------------------------------
def test_truncated_last_line_is_dropped_and_the_sample_rerun(tmp_path, caplog):
    run = tmp_path / "run"
    engine = ScriptedEngine(hashed_respond)
    reference = run_cell(run, benchmark="truthfulqa", split="test", engine=engine, method="mad", samples=samples(4),
                         progress=False)
    path = run / TRANSCRIPTS_FILE
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    # Simulate a kill in the middle of writing the 4th line.
    path.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    with caplog.at_level(logging.WARNING, logger="r2mad_lab.experiments.transcripts"):
        resumed = run_cell(run, benchmark="truthfulqa", split="test", engine=ScriptedEngine(hashed_respond),
                           method="mad", samples=samples(4), progress=False)
    assert "line 4: no trailing newline" in caplog.text
    assert resumed.n_reused == 3 and resumed.n_new == 1
    assert path.read_bytes().count(b"\n") == 4
    assert [stable(r) for r in resumed.records] == [stable(r) for r in reference.records]


def _line(sample_id: str, **fields) -> bytes:
    """One complete transcript line (a typed record's JSON; hand_transcripts fills the neutral fields)."""
    return json.dumps(transcript(sample_id, **fields), separators=(",", ":")).encode() + b"\n"


def test_invalid_json_on_the_last_complete_line_is_repaired(tmp_path):
    path = tmp_path / TRANSCRIPTS_FILE
    path.write_bytes(_line("a") + b'{"sample_id": "b", "rou\n')
    store = TranscriptStore(path)
    assert [r.sample_id for r in store.load()] == ["a"]
    assert path.read_bytes() == _line("a")


def test_load_without_repair_leaves_the_file_alone(tmp_path):
    path = tmp_path / TRANSCRIPTS_FILE
    path.write_bytes(_line("a") + b'{"sample')
    assert [r.sample_id for r in TranscriptStore(path).load(repair=False)] == ["a"]
    assert path.read_bytes() == _line("a") + b'{"sample'


def test_corrupt_middle_line_and_duplicates_are_errors(tmp_path):
    path = tmp_path / TRANSCRIPTS_FILE
    path.write_bytes(_line("a") + b"not json\n" + _line("c"))
    with pytest.raises(TranscriptError, match=r"transcripts.jsonl, line 2: invalid JSON"):
        TranscriptStore(path).load()
    path.write_bytes(_line("a") + _line("a"))
    with pytest.raises(TranscriptError, match="line 2: sample_id 'a' appears twice"):
        TranscriptStore(path).load()
    path.write_bytes(_line("a") + b'{"sample_id": "b", "x": 1}\n' + _line("c"))
    with pytest.raises(TranscriptError, match="line 2: does not fit the transcript schema"):
        TranscriptStore(path).load()


def test_append_never_writes_a_sample_twice(tmp_path):
    store = TranscriptStore(tmp_path / TRANSCRIPTS_FILE)
    assert store.append(transcript("a", seed=1))
    assert not store.append(transcript("a", seed=2))
    assert [(r.sample_id, r.seed) for r in TranscriptStore(tmp_path / TRANSCRIPTS_FILE).load()] == [("a", 1)]
    with pytest.raises(ValueError, match="not a transcript record"):
        store.append({"sample_id": "b", "x": 1})  # a record that does not fit is refused at the door


def test_append_many_writes_a_chunk_with_one_fsync_and_skips_repeats(tmp_path, monkeypatch):
    import os as os_module

    store = TranscriptStore(tmp_path / TRANSCRIPTS_FILE)
    assert store.append(transcript("a", seed=0))
    synced = []
    real_fsync = os_module.fsync
    monkeypatch.setattr(os_module, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    chunk = [transcript("b", seed=1), transcript("a", seed=2), transcript("c", seed=3), transcript("b", seed=4)]
    assert store.append_many(chunk) == 2  # "a" is stored already, the second "b" repeats the first
    assert len(synced) == 1  # one fsync for the chunk (the file existed: no directory fsync)
    assert store.append_many([]) == 0 and len(synced) == 1
    assert [(r.sample_id, r.seed) for r in TranscriptStore(tmp_path / TRANSCRIPTS_FILE).load()] == [
        ("a", 0), ("b", 1), ("c", 3)
    ]
    # A crash in the middle of a chunk's write leaves whole lines and one cut-off line: load keeps the whole ones.
    path = tmp_path / TRANSCRIPTS_FILE
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b'{"sample_id":"c"') + 10])
    assert [r.sample_id for r in TranscriptStore(path).load()] == ["a", "b"]


def test_score_run_recomputes_metrics_from_transcripts(tmp_path):
    run = tmp_path / "run"
    result = run_cell(run, benchmark="truthfulqa", split="test", engine=ScriptedEngine(hashed_respond), method="mad",
                      samples=samples(8), progress=False)
    (run / METRICS_FILE).unlink()
    metrics = score_run(run)
    assert metrics["accuracy"] == result.metrics["accuracy"] and metrics["complete"]
    assert (run / METRICS_FILE).exists()
    config, records = load_run(run)
    authors = score_run(run, vote_rule="authors_majority_correct", write=False)
    expected = sum(
        sum(a.correct for a in r.rounds[-1].agents) * 2 > len(r.rounds[-1].agents) for r in records
    ) / len(records)
    assert authors["accuracy"] == pytest.approx(expected)


# ----------------------------------------------------------------------------------------------
# SIGKILL at random points, then resume
# ----------------------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from debate_fakes import ScriptedEngine, hashed_respond, samples  # not test_experiments: no pytest to import
    from r2mad_lab.experiments.cell import run_cell
    engine = ScriptedEngine(hashed_respond, latency={latency})
    engine.concurrent_generate = {schedule!r} == "questions"  # the scripted engine takes concurrent calls
    run_cell({out!r}, benchmark="truthfulqa", split="test", engine=engine, method="mad",
             samples=samples({n}), chunk_size={chunk}, progress=False, schedule={schedule!r}, window={chunk})
    """
)


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("schedule", ["rounds", "questions"])
def test_sigkill_at_random_points_then_resume_finishes_every_sample_once(tmp_path, capsys, schedule):
    """Under both schedules (``questions``: window = chunk = 2 questions in flight)."""
    n, chunk = 30, 2
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS_DIR), latency=0.02, out=str(out), n=n, chunk=chunk,
                                   schedule=schedule))
    transcripts = out / TRANSCRIPTS_FILE
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR.parent)}
    rng = random.Random(1234)
    kills = []  # (lines on disk when killed)
    for threshold in (2, 10, 18):
        child = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while _count_lines(transcripts) < threshold and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.05))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait()
            kills.append(_count_lines(transcripts))
        else:
            _, err = child.communicate()
            assert child.returncode == 0, err.decode()[-2000:]
            break
    # A torn write, as a kill in the middle of os.write would leave it.
    with open(transcripts, "ab") as f:
        f.write(b'{"sample_id": "q029", "rounds": [{"round"')
    final = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=300)
    assert final.returncode == 0, final.stderr.decode()[-2000:]
    assert b"no trailing newline" in final.stderr
    ids = [json.loads(line)["sample_id"] for line in transcripts.read_text().splitlines()]
    assert len(kills) >= 1, f"no kill landed mid-run (lines at kills: {kills})"
    assert all(k < n for k in kills), f"kills after completion: lines at kills {kills}"
    assert len(ids) == n and len(set(ids)) == n, (
        f"after {len(kills)} kills (lines on disk at each: {kills}): {len(ids)} lines, {len(set(ids))} distinct ids, "
        f"expected {n} each"
    )
    assert ids == [f"q{i:03d}" for i in range(n)]  # in input order, whatever the schedule
    # The resumed run equals an uninterrupted one.
    reference = run_cell(tmp_path / "ref", benchmark="truthfulqa", split="test", engine=ScriptedEngine(hashed_respond),
                         method="mad", samples=samples(n), chunk_size=chunk, progress=False)
    _, records = load_run(out)
    by_id = {r.sample_id: stable(r) for r in records}
    assert [by_id[r.sample_id] for r in reference.records] == [stable(r) for r in reference.records]
    metrics = json.loads((out / METRICS_FILE).read_text())
    assert metrics["n"] == n and metrics["accuracy"] == reference.metrics["accuracy"]
    lost = n - len(set(ids))
    with capsys.disabled():  # shown with or without -s
        print(f"\n[run cell, {schedule}] SIGKILLs survived: {len(kills)} (lines on disk at each: {kills}), "
              "torn writes repaired: 1, "
              f"samples lost: {lost}, duplicated: {len(ids) - len(set(ids))}, resumed run == uninterrupted run")
    assert lost == 0, f"{lost} samples lost after {len(kills)} kills"


def test_a_record_or_config_that_does_not_fit_the_schema_names_file_line_and_field(tmp_path):
    """The transcript and config schema (r2mad_core.records): a complete line whose field is wrong is an error
    naming the line and the field (not a KeyError later in scoring); the writer's own records fit."""
    from r2mad_core.records import RunConfig, TranscriptRecord, problems

    run_dir = tmp_path / "run"
    result = run_cell(run_dir, benchmark="truthfulqa", split="test", engine=ScriptedEngine(hashed_respond),
                      method="mad", seed=0, samples=samples(2), progress=False)
    assert all(problems(TranscriptRecord, r) == [] for r in result.records)
    assert problems(RunConfig, json.loads((run_dir / "config.json").read_text())) == []
    path = run_dir / TRANSCRIPTS_FILE
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["rounds"][0]["agents"][1]["completion_tokens"] = "many"
    del first["vote"]
    path.write_text(json.dumps(first) + "\n" + lines[1] + "\n")
    with pytest.raises(TranscriptError, match=r"transcripts.jsonl, line 1: does not fit the transcript schema "
                                              r"\(r2mad_core.records.TranscriptRecord\): "
                                              r"rounds.0.agents.1.completion_tokens: "
                                              r"Input should be a valid integer.*\(found 'many'\); and 1 more"):
        load_run(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    config["n_samples"] = "two"
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(TranscriptError, match=r"config.json: does not fit the run configuration schema.*n_samples"):
        load_run(run_dir)
