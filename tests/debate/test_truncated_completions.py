"""Truncated (finish reason ``length``) and empty completions: recorded per turn, counted in the
metrics and the summary line, and scored by the named option ``truncated_answers`` ("keep" | "missing"),
recomputed from transcripts without generation."""

from __future__ import annotations

import json
import math

import pytest
from debate_fakes import ScriptedEngine, mc_answer, mc_sample

from r2mad_core.debate.vote import rescore_record
from r2mad_core.engine import Completion
from r2mad_lab.cli import commands as cli
from r2mad_lab.experiments.cell import CONFIG_FILE, METRICS_FILE, TRANSCRIPTS_FILE, run_cell, score_run
from r2mad_lab.experiments.metrics import compute_metrics, summary_line
from r2mad_lab.report.stances import stance_transitions


def turn(answer, gold, truncated=False):
    return {
        "agent": 0, "response": f"... (({answer}))" if answer else "", "answer": answer, "correct": answer == gold,
        "finish_reason": "length" if truncated else "stop", "truncated": truncated, "empty": answer is None,
        "prompt_tokens": 10, "completion_tokens": 5, "cached": False, "seconds": 0.0,
    }


def transcript(sample_id, gold, rounds, final, correct):
    """``rounds``: per round, per agent (answer, truncated)."""
    return {
        "sample_id": sample_id, "benchmark": "truthfulqa", "split": "test", "gold": gold, "num_options": 4,
        "method": "mad", "seed": 0,
        "rounds": [
            {"round": t, "agents": [{**turn(a, gold, cut), "agent": i} for i, (a, cut) in enumerate(r)],
             "consensus_ratio": 0.0, "unanimous": False, "summary": None, "masking": None, "extra_calls": [],
             "seconds": 1.0}
            for t, r in enumerate(rounds)
        ],
        "n_rounds_executed": len(rounds), "stopped_early": False, "final_answer": final, "correct": correct,
        "vote": {"answer": final, "correct": correct, "rule": "plurality", "group_sizes": [], "tied": False},
        "seconds": 1.0, "truncated_completions": sum(cut for r in rounds for _, cut in r),
    }


T = True
# Hand-scored (gold in the second column):
#   s1: [A*, A*, B]  keep -> A (right)   missing -> [-, -, B] -> B (wrong)
#   s2: [B*, A, A]   keep -> A (right)   missing -> [-, A, A] -> A (right)
#   s3: [A, A, A]    gold B: wrong either way (no truncation)
#   s4: round 0 [A*, B, B], round 1 [A, A, B*]  keep -> A (right)  missing -> [A, A, -] -> A (right)
# (* = cut off at max_tokens.) Accuracy: keep 3/4, missing 2/4. Truncated: 5 of 15 completions.
RECORDS = [
    transcript("s1", "A", [[("A", T), ("A", T), ("B", False)]], "A", True),
    transcript("s2", "A", [[("B", T), ("A", False), ("A", False)]], "A", True),
    transcript("s3", "B", [[("A", False), ("A", False), ("A", False)]], "A", False),
    transcript("s4", "A", [[("A", T), ("B", False), ("B", False)], [("A", False), ("A", False), ("B", T)]], "A", True),
]


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    config = {"format": 1, "benchmark": "truthfulqa", "split": "test", "limit": None, "seed": 0,
              "method": {"name": "mad"},
              "engine": {"identity": "scripted", "model": ""}, "n_samples": 4, "sample_ids_sha256": "0" * 16,
              "r2mad_version": "test", "chunk_size": 32}
    (run / CONFIG_FILE).write_text(json.dumps(config))
    (run / TRANSCRIPTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return run


def test_keep_is_the_default_and_scores_the_written_answers():
    metrics = compute_metrics(RECORDS)
    assert metrics["accuracy"] == 0.75 and metrics["truncated_answers"] == "keep"
    assert metrics["completion_health"]["completions"] == 15
    assert metrics["completion_health"]["truncated"] == 5
    assert metrics["completion_health"]["final_round_truncated"] == 4  # s1: 2, s2: 1, s4 round 1: 1
    assert metrics["truncated_share"] == pytest.approx(5 / 15)
    assert metrics["agent_accuracy_by_round"] == [pytest.approx(5 / 12), pytest.approx(2 / 3)]
    assert metrics["completion_health"]["no_answer"] == 0


def test_missing_treats_truncated_answers_as_no_answer():
    metrics = compute_metrics(RECORDS, truncated_answers="missing")
    assert metrics["accuracy"] == 0.5 and metrics["truncated_answers"] == "missing"
    assert metrics["vote_rule"] == "plurality"
    # The counts do not depend on the policy; the missing answers do.
    assert metrics["completion_health"]["truncated"] == 5 and metrics["truncated_share"] == pytest.approx(5 / 15)
    assert metrics["completion_health"]["no_answer"] == 5
    assert metrics["agent_accuracy_by_round"] == [pytest.approx(2 / 12), pytest.approx(2 / 3)]
    s1 = rescore_record(RECORDS[0], truncated_answers="missing")
    assert [a.answer for a in s1.rounds[0].agents] == [None, None, "B"]
    assert s1.final_answer == "B" and s1.correct is False and s1.vote.group_sizes == (1,)
    # The originals are untouched (scoring is a view).
    assert RECORDS[0]["rounds"][0]["agents"][0]["answer"] == "A" and RECORDS[0]["correct"] is True
    # s4: agent 0 goes from a truncated (now missing) answer to a right one: W->C instead of C->C.
    keep, missing = stance_transitions(RECORDS[3:]), stance_transitions(
        [rescore_record(RECORDS[3], truncated_answers="missing")])
    assert (keep.n_c_to_w, keep.n_w_to_c) == (0, 1)  # agent 1 B->A
    assert (missing.n_c_to_w, missing.n_w_to_c) == (0, 2)  # agent 0 None->A, agent 1 B->A
    # With the authors' rule: s1 0/3 right, s2 2/3, s3 0/3, s4 round 1 2/3 -> 2 of 4.
    authors = compute_metrics(RECORDS, vote_rule="authors_majority_correct", truncated_answers="missing")
    assert authors["accuracy"] == 0.5 and authors["vote_rule"] == "authors_majority_correct"
    with pytest.raises(ValueError, match="truncated_answers 'drop'"):
        compute_metrics(RECORDS, truncated_answers="drop")


def test_score_run_and_the_cli_recompute_from_transcripts(run_dir, capsys):
    assert score_run(run_dir)["accuracy"] == 0.75
    stored = (run_dir / METRICS_FILE).read_text()
    missing = score_run(run_dir, truncated_answers="missing")
    assert missing["accuracy"] == 0.5 and missing["complete"]
    assert (run_dir / METRICS_FILE).read_text() == stored  # the run's own metrics stay "keep"
    assert cli.main(["score", str(run_dir), "--truncated-answers", "missing", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["accuracy"] == 0.5 and printed["truncated_answers"] == "missing"
    assert printed["completion_health"]["truncated"] == 5
    assert cli.main(["score", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "accuracy 0.750" in out and "truncated answers: keep" in out
    assert "truncated 5/15 (33.3% cut off at max_tokens; their answers count as written)" in out
    assert cli.main(["score", str(run_dir), "--truncated-answers", "missing"]) == 0
    out = capsys.readouterr().out
    assert "accuracy 0.500" in out and "their answers count as missing" in out
    with pytest.raises(SystemExit) as info:
        cli.main(["score", str(run_dir), "--truncated-answers", "drop"])
    assert info.value.code == 2


def test_the_debate_records_finish_reasons_truncated_and_empty_turns(tmp_path):
    """Persona 1 is always cut off (after writing its answer); persona 2 returns nothing at round 0."""

    def respond(question, persona, t, request):
        if persona == 1:
            return Completion(text=mc_answer("B") + " and then more", completion_tokens=7, finish_reason="length")
        if persona == 2 and t == 0:
            return Completion(text="", completion_tokens=0, finish_reason="stop")
        return mc_answer("A")

    samples = [mc_sample(f"q{i}", gold="A") for i in range(3)]
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=ScriptedEngine(respond),
                      method="mad", samples=samples, progress=False)
    lines = [json.loads(line) for line in (tmp_path / "run" / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert len(lines) == 3
    for record in lines:
        assert record["n_rounds_executed"] == 3  # never unanimous: persona 1 says B
        for r in record["rounds"]:
            flags = [(a["finish_reason"], a["truncated"], a["empty"]) for a in r["agents"]]
            empty_now = r["round"] == 0
            assert flags == [("stop", False, False), ("length", True, False), ("stop", False, empty_now)], flags
            assert r["agents"][1]["answer"] == "B"  # recorded as written (keep)
        assert record["truncated_completions"] == 3
    health = result.metrics["completion_health"]
    assert (health["completions"], health["truncated"], health["empty"]) == (27, 9, 3)
    assert result.metrics["truncated_share"] == pytest.approx(9 / 27)
    line = summary_line(result.metrics)
    assert "truncated 9/27 (33.3% cut off at max_tokens; their answers count as written)" in line
    # Scored with truncated answers missing: the last round is [A, -, A] -> A, still right; B never counted.
    missing = score_run(tmp_path / "run", truncated_answers="missing", write=False)
    assert missing["accuracy"] == result.metrics["accuracy"] == 1.0
    assert missing["completion_health"]["no_answer"] == 9 + 3  # 9 truncated + 3 empty


def test_summary_line_names_the_cause_of_the_cuts():
    """A run whose 9 cuts were all context overflows says so (metrics: max_tokens_cut 0, context_overflow 9)."""
    def metrics(**limits):
        health = {"completions": 27, "truncated": 9, "no_answer": 0, "max_tokens_cut": 0, "context_overflow": 0,
                  "context_capped": 0, **limits}
        return {"accuracy": 0.5, "ci_low": 0.3, "ci_high": 0.7, "n": 9, "seconds_per_query": 1.0,
                "tokens_per_query": {}, "completion_health": health, "truncated_answers": "keep"}

    line = summary_line(metrics(context_overflow=9))
    assert "truncated 9/27 (33.3% context overflow; their answers count as written)" in line
    assert "max_tokens" not in line
    line = summary_line(metrics(max_tokens_cut=9))
    assert "truncated 9/27 (33.3% cut off at max_tokens; their answers count as written)" in line
    line = summary_line(metrics(max_tokens_cut=6, context_overflow=3))
    assert "(33.3% by cause: cut off at max_tokens 6, context overflow 3;" in line


def test_summary_line_is_quiet_without_truncations():
    metrics = compute_metrics([RECORDS[2]])
    line = summary_line(metrics)
    assert "truncated 0/3, no answer 0" in line and "cut off" not in line
    assert math.isnan(compute_metrics([])["truncated_share"])


def test_r2mad_run_summary_mentions_truncations(tmp_path, capsys, monkeypatch):
    argv = ["run", "--benchmark", "truthfulqa", "--engine", "simulated", "--method", "cot", "--limit", "2",
            "--no-cache", "--no-progress"]
    assert cli.main([*argv, "--out", str(tmp_path / "short"), "--max-tokens", "3"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "truncated 2/2 (100.0% cut off at max_tokens; their answers count as written)" in line, line
    records = [json.loads(x) for x in (tmp_path / "short" / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert [r["rounds"][0]["agents"][0]["truncated"] for r in records] == [True, True]
    assert cli.main([*argv, "--out", str(tmp_path / "long")]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "truncated 0/2, no answer" in line and "cut off" not in line, line
