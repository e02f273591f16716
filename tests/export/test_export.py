"""Runs in the field's formats (r2mad_lab/export, issue 60): Inspect eval logs read back by the real inspect_ai with
the scores of metrics.json, samples_df, replicates as epochs, a paired test recomputed from two exported logs, the
tidy table, and the bad-input guarantees (one line naming the file and field, nothing written, no machine path)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from inspect_ai.analysis import samples_df
from inspect_ai.log import read_eval_log

from r2mad_lab.cli import main
from r2mad_lab.experiments.cell import load_run
from r2mad_lab.export import inspect_log, source, table
from r2mad_lab.report import inference, run_index


def export(sim_root: Path, out: Path) -> list[Path]:
    assert main(["export", "inspect", str(sim_root / "runs" / "demo"), "--out", str(out)]) == 0
    return sorted(out.glob("*.eval"))


@pytest.fixture(scope="module")
def logs(sim_root, tmp_path_factory) -> list[Path]:
    return export(sim_root, tmp_path_factory.mktemp("logs"))


def test_every_cell_reads_back_with_the_scores_and_counts_of_its_metrics(sim_root, logs):
    runs = run_index.find_runs(sim_root / "runs" / "demo")
    assert len(runs) == 5 and len(logs) == 4  # the MAD replicate is an epoch of the MAD log
    seen = set()
    for path in logs:
        log = read_eval_log(str(path))
        assert log.status == "success"
        runs_of_log = log.eval.metadata["r2mad"]["runs"]
        assert log.eval.config.epochs == len(runs_of_log)
        total = 0
        correct = 0
        for epoch, run_path in enumerate(runs_of_log, start=1):
            run_dir = sim_root / run_path
            seen.add(run_dir)
            metrics = json.loads((run_dir / "metrics.json").read_text())
            config, records = load_run(run_dir)
            assert log.eval.task == f"r2mad/{config['benchmark']}/{config['method']['name']}"
            assert log.eval.dataset.sample_ids == [r.sample_id for r in records]
            mine = {s.id: s for s in log.samples if s.epoch == epoch}
            assert len(mine) == metrics["n"] == len(records)
            for record in records:
                sample = mine[record.sample_id]
                assert sample.scores[inspect_log.SCORER].value == ("C" if record.correct else "I")
                assert sample.scores[inspect_log.SCORER].answer == record.final_answer
                assert sample.target == record.gold
                turns = [m for m in sample.messages if m.role == "assistant" and "agent" in (m.metadata or {})]
                assert [(m.metadata["round"], m.metadata["agent"]) for m in turns] == [
                    (r.round, a.agent) for r in record.rounds for a in r.agents]
                model_events = [e for e in sample.events if e.event == "model"]
                assert sum(e.output.usage.input_tokens for e in model_events) == sum(
                    t.prompt_tokens for t in record.tokens.values())
            run_correct = sum(mine[r.sample_id].scores[inspect_log.SCORER].value == "C" for r in records)
            assert run_correct / len(records) == pytest.approx(metrics["accuracy"])
            total += len(records)
            correct += run_correct
        assert log.results.total_samples == total
        assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(correct / total)
    assert seen == set(runs)


def test_r2mad_samples_carry_retrieval_lambda_and_peer_confidence(logs):
    log = read_eval_log(str(next(p for p in logs if "-r2mad-" in p.name)))
    assert log.eval.task_args["top_k"] == 3 and log.eval.task_args["memory"] == "runs/demo/bank"
    rounds = [r for s in log.samples for r in s.metadata["rounds"] if r["round"] > 0]
    assert rounds and all(r["lambda_t"] is not None for r in rounds)
    assert any(r["retrieved"] and r["retrieved"][0]["case_ids"] and r["retrieved"][0]["similarities"] for r in rounds)
    assert any(r["peer_confidence"] for r in rounds)
    spans = [e for e in log.samples[0].events if e.event == "span_begin"]
    assert {e.type for e in spans} == {"round", "agent"}


def test_replicates_are_epochs_of_one_log(logs):
    log = read_eval_log(str(next(p for p in logs if "-mad-demo" in p.name and "bank" not in p.name
                                 and read_eval_log(str(p), header_only=True).eval.dataset.name == "math500"
                                 and read_eval_log(str(p), header_only=True).eval.task_args["split"] == "test")))
    assert log.eval.metadata["r2mad"]["seeds"] == [0, 1]
    assert {s.epoch for s in log.samples} == {1, 2}


def test_samples_df_loads_them_and_a_paired_test_from_two_logs_equals_the_packages(sim_root, logs):
    frame = samples_df([str(p) for p in logs])
    assert len(frame) == sum(read_eval_log(str(p), header_only=True).results.total_samples for p in logs)
    frame["correct"] = frame["score_r2mad_vote"] == "C"
    frame["task"] = frame["eval_id"].map({read_eval_log(str(p), header_only=True).eval.eval_id:
                                          read_eval_log(str(p), header_only=True).eval.task for p in logs})
    first = frame[frame["epoch"] == 1]
    pairs = first[first["task"] == "r2mad/math500/r2mad"].merge(first[first["task"] == "r2mad/math500/cot"], on="id")
    exported_p = inference.stratified_sign_p(inference.stratum_counts(pairs["correct_x"], pairs["correct_y"]))
    demo = sim_root / "runs" / "demo" / "simulated" / "math500"
    a = {r.sample_id: r.correct for r in load_run(demo / "r2mad")[1]}
    b = {r.sample_id: r.correct for r in load_run(demo / "cot")[1]}
    ids = sorted(a)
    assert exported_p == run_index.MCNEMAR(inference.stratum_counts([a[i] for i in ids], [b[i] for i in ids]))


def test_no_machine_path_and_no_secret_reaches_an_exported_log(sim_root, tmp_path, monkeypatch):
    secret = "sk-test-0123456789abcdef-do-not-log"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("R2MAD_API_KEY", secret)
    for path in export(sim_root, tmp_path / "logs"):
        text = read_eval_log(str(path)).model_dump_json()
        for leak in (str(sim_root), str(tmp_path), os.path.expanduser("~"), os.getcwd(), secret):
            assert leak not in text, f"{path.name} holds {leak!r}"
    assert main(["export", "table", str(sim_root / "runs" / "demo"), "--out", str(tmp_path / "s.csv")]) == 0
    text = (tmp_path / "s.csv").read_text()
    assert str(sim_root) not in text and secret not in text


def test_the_table_has_a_row_per_question_and_run_and_the_same_bytes_twice(sim_root, tmp_path):
    for name in ("a.parquet", "b.parquet"):
        assert main(["export", "table", str(sim_root / "runs" / "demo"), "--out", str(tmp_path / name)]) == 0
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    frame = pd.read_parquet(tmp_path / "a.parquet")
    assert list(frame.columns) == table.COLUMNS
    runs = run_index.find_runs(sim_root / "runs" / "demo")
    assert len(frame) == sum(len(load_run(r)[1]) for r in runs)
    assert not frame.duplicated(["run", "sample_id"]).any()
    mad = frame[(frame["method_name"] == "mad") & (frame["split"] == "test")]
    assert sorted(mad["seed"].unique()) == [0, 1] and set(mad["variant"]) == {"demo", "demo/variants/seed=1"}
    for run_path, part in frame.groupby("run"):
        metrics = json.loads((sim_root / run_path / "metrics.json").read_text())
        assert part["correct"].mean() == pytest.approx(metrics["accuracy"])


def _damage(run: Path, how: str) -> str:
    """Damage ``run`` one way; the file (and field) the error must name."""
    config = run / "config.json"
    transcripts = run / "transcripts.jsonl"
    if how == "config field":
        data = json.loads(config.read_text())
        del data["n_samples"]
        config.write_text(json.dumps(data))
        return "n_samples"
    if how == "another version":
        data = json.loads(config.read_text())
        data["format"] = 2
        config.write_text(json.dumps(data))
        return "format"
    lines = transcripts.read_text().splitlines(keepends=True)
    if how == "incomplete":
        transcripts.write_text("".join(lines[:-1]))
        return "n_samples"
    if how == "damaged line":
        record = json.loads(lines[1])
        record["rounds"][0]["agents"][0]["prompt_tokens"] = "many"
        lines[1] = json.dumps(record) + "\n"
        transcripts.write_text("".join(lines))
        return "prompt_tokens"
    if how == "metrics disagree":
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["accuracy"] = 1.0 - metrics["accuracy"] + 0.01
        (run / "metrics.json").write_text(json.dumps(metrics))
        return "accuracy"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["config field", "another version", "incomplete", "damaged line", "metrics disagree"])
@pytest.mark.parametrize("fmt", ["inspect", "table"])
def test_a_damaged_run_is_one_line_naming_file_and_field_and_writes_nothing(sim_root, tmp_path, capsys, how, fmt):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(sim_root / "runs", root / "runs")
    good = root / "runs" / "demo" / "simulated" / "math500" / "cot"
    bad = root / "runs" / "demo" / "simulated" / "math500" / "mad"
    field = _damage(bad, how)
    out = tmp_path / "out" / ("logs" if fmt == "inspect" else "samples.parquet")
    capsys.readouterr()
    assert main(["export", fmt, str(good), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(bad) in err and field in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


def test_read_run_refuses_what_is_not_a_run_folder(tmp_path):
    with pytest.raises(source.ExportError, match="config.json: missing"):
        source.read_run(tmp_path)
    with pytest.raises(source.ExportError, match="no run folder"):
        source.read_runs([tmp_path])


def test_portable_paths():
    assert source.portable({"memory": "/x/y/runs/sim/bank", "n": 3}) == {"memory": "runs/sim/bank", "n": 3}
    assert source.portable(["/home/someone/banks/b1"]) == [".../banks/b1"]
    assert source.replicate_free("sim/variants/gamma=0.5,seed=2") == "sim/variants/gamma=0.5"
    assert source.replicate_free("sim/variants/seed=1") == "sim"
