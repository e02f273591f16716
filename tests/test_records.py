"""records: one transcript type for the writer (the debate loop, the run cell) and every reader (scoring, grid
results, findings, memory construction); transcripts written before it existed still load, byte for byte."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from debate_fakes import ScriptedEngine, hashed_respond, samples
from hand_transcripts import transcript

from r2mad_core.debate.loop import run_debate, score_turns
from r2mad_core.memory.diagnostics import annotation_counts
from r2mad_core.methods import get_method
from r2mad_core.records import RoundRecord, TranscriptRecord, TurnRecord, VoteRecord, as_transcript, without_seconds
from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE, run_cell, transcript_record
from r2mad_lab.experiments.metrics import compute_metrics, sample_cost
from r2mad_lab.experiments.transcripts import TranscriptStore
from r2mad_lab.report.stances import shared_misconception_subset, stance_transitions

#: Two lines written by the run cell at commit d6d199c (before the loop built these models): an R2-MAD debate of the
#: tiny profile (retrieval, confidence annotations, summaries) and a subjective MAD-M2 debate (masking, judge calls).
OLD_LINES = Path(__file__).resolve().parent / "data" / "transcripts_d6d199c.jsonl"
ROOT = Path(__file__).resolve().parent.parent


def _old(tmp_path: Path) -> list[TranscriptRecord]:
    shutil.copy(OLD_LINES, tmp_path / TRANSCRIPTS_FILE)
    return TranscriptStore(tmp_path / TRANSCRIPTS_FILE, schema=TranscriptRecord).load(repair=False)


def test_an_old_transcript_file_loads_as_records_and_writes_back_byte_for_byte(tmp_path):
    r2mad, m2 = _old(tmp_path)
    assert isinstance(r2mad, TranscriptRecord) and isinstance(r2mad.rounds[1], RoundRecord)
    assert (r2mad.method, r2mad.gold, r2mad.final_answer, r2mad.correct) == ("r2mad", "12", "15", False)
    assert [r.answers for r in r2mad.rounds] == [["12", "4", "15"], ["4", "12", "15"], ["15", "12", "15"]]
    # JSON object keys are strings; the record's peer indices are ints again (as the loop wrote them)
    assert r2mad.rounds[1].agents[0].peer_confidence == {1: "high", 2: "high"}
    assert r2mad.rounds[1].agents[0].visible_peers == (1, 2) and r2mad.vote.group_sizes == (2, 1)
    assert m2.rounds[1].masking == {"strategy": "subjective", "verdicts": ["NO", "NOT SURE", "NO"], "kept": [1]}
    assert [c.tag for r in m2.rounds for c in r.extra_calls] == ["judge"] * 6
    # writing them again (the run cell's own serialisation) gives the old lines back exactly
    out = tmp_path / "again" / TRANSCRIPTS_FILE
    out.parent.mkdir()
    assert TranscriptStore(out, schema=TranscriptRecord).append_many([r2mad, m2]) == 2
    assert out.read_bytes() == OLD_LINES.read_bytes()


def test_scoring_reads_the_old_records_by_attribute_hand_counted(tmp_path):
    r2mad, m2 = _old(tmp_path)
    # correctness per round (gold 12 / 64): r2mad T F F | F T F | F T F; mad_m2 T F F | T T F | F F F
    rates = stance_transitions([r2mad, m2])
    assert (rates.n_correct_before, rates.n_c_to_w, rates.n_wrong_before, rates.n_w_to_c) == (5, 3, 7, 2)
    assert shared_misconception_subset([r2mad, m2]) == {r2mad.sample_id, m2.sample_id}
    # the stored cost per tag is what sample_cost recomputes from the turns and extra calls
    for record in (r2mad, m2):
        assert sample_cost(record) == {tag: count.model_dump() for tag, count in record.tokens.items()}
    assert sample_cost(m2)["judge"]["requests"] == 6
    # round 1 of R2-MAD: agent 0 marks its two wrong peers high; agents 1 and 2 mark the right agent 0 low
    counts = annotation_counts([r2mad.model_copy(update={"rounds": r2mad.rounds[:2]})])
    assert (counts.high_wrong, counts.low_correct, counts.low_wrong, counts.total) == (3, 2, 1, 6)
    # a dict (the JSON object) goes through the same door and scores the same
    as_json = json.loads(OLD_LINES.read_text().splitlines()[0])
    assert compute_metrics([as_json], n_bootstrap=10) == compute_metrics([r2mad], n_bootstrap=10)


def test_the_loop_builds_the_records_the_cell_writes_and_readers_get():
    method = get_method("mad")
    states = run_debate(samples(1), ScriptedEngine(hashed_respond), method.debate)
    score_turns(states)
    round0 = states[0].rounds[0]
    assert type(round0) is RoundRecord and type(round0.agents[0]) is TurnRecord and round0.turns is round0.agents
    record = transcript_record(states[0], method, split="test", seed=0)
    assert type(record) is TranscriptRecord and record.rounds[0] is round0 and type(record.vote) is VoteRecord
    assert record.tokens["debate"].requests == 3 * len(record.rounds)
    assert TranscriptRecord.model_validate(json.loads(json.dumps(record.model_dump()))) == record


def test_a_hand_made_record_that_does_not_fit_names_the_field():
    line = transcript("q", [{"agents": [{"peer_confidence": {"1": "low"}}]}])
    assert without_seconds(as_transcript(line))["rounds"][0]["agents"][0]["peer_confidence"] == {"1": "low"}
    del line["rounds"][0]["agents"][0]["answer"]
    with pytest.raises(ValueError, match=r"^not a transcript record .*: rounds\.0\.agents\.0\.answer: Field required"):
        compute_metrics([line])


TRANSCRIPT_ONLY_KEYS = {"rounds", "agents", "sample_id", "final_answer", "extra_calls", "consensus_ratio",
                        "peer_confidence", "retrieved", "n_experiences", "finish_reason", "stopped_early", "gold",
                        "response", "answer", "correct", "vote", "masking", "summary"}


@pytest.mark.parametrize("module", ["r2mad_core/debate/vote.py", "r2mad_lab/experiments/metrics.py",
                                    "r2mad_lab/report/stances.py",
                                    "r2mad_core/memory/diagnostics.py", "r2mad_lab/report/results.py",
                                    "r2mad_lab/report/findings.py"])
def test_scoring_results_and_findings_read_transcript_fields_as_attributes(module):
    """No ``x["rounds"]``-style lookup of a transcript field is left (pandas columns such as "method" may stay)."""
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    found = [f"line {node.lineno}: [{node.slice.value!r}]" for node in ast.walk(tree)
             if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
             and node.slice.value in TRANSCRIPT_ONLY_KEYS]
    # results.py reads the "correct" column of its per-question frame; that is a pandas column, not a record
    found = [f for f in found if not (module == "r2mad_lab/report/results.py" and "'correct'" in f)]
    assert found == []


def test_a_run_cell_returns_records(tmp_path):
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=ScriptedEngine(hashed_respond),
                      method="mad", samples=samples(2), progress=False)
    assert all(type(r) is TranscriptRecord for r in result.records)
    again = TranscriptStore(tmp_path / "run" / TRANSCRIPTS_FILE, schema=TranscriptRecord).load()
    assert [without_seconds(r) for r in again] == [without_seconds(r) for r in result.records]
