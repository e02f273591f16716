"""Scoring on hand-made answers and transcripts: vote and tie rule, CI, paired test, subsets,
stance transitions, cost and completion health."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hand_transcripts import transcript, turn

from r2mad_core.debate.masking import masking_decisions
from r2mad_core.debate.vote import plurality_vote, revote, tie_break_seed, vote
from r2mad_core.memory.diagnostics import (
    AnnotationCounts,
    annotation_counts,
    lambda_by_consensus,
    peer_confidences,
    retrieval_trace,
)
from r2mad_lab.experiments.metrics import completion_health, compute_metrics, cost_per_query, summary_line
from r2mad_lab.experiments.statistics import accuracy_with_ci
from r2mad_lab.report.stances import shared_misconception_subset, stance_transitions


# ----------------------------------------------------------------------------------------------
# Vote
# ----------------------------------------------------------------------------------------------
def test_plurality_winner_and_none_never_wins():
    assert plurality_vote(["B", "A", "B"], "truthfulqa") == ("B", False, (2, 1))
    assert plurality_vote([None, None, "C"], "truthfulqa") == ("C", False, (1,))
    assert plurality_vote([None, None, None], "truthfulqa") == (None, False, ())
    v = vote([None, None, None], "A", "truthfulqa")
    assert v.answer is None and v.correct is False


def test_plurality_groups_equivalent_math_answers():
    answer, tied, sizes = plurality_vote(["3", "\\frac{1}{2}", "0.5"], "math500")
    assert answer == "\\frac{1}{2}" and not tied and sizes == (2, 1)
    assert vote(["3", "\\frac{1}{2}", "0.5"], "1/2", "math500").correct


def test_tie_is_broken_by_a_seeded_choice_reproducibly():
    values = ["A", "B", "C"]
    winners = {}
    for sample_id in [f"s{i}" for i in range(60)]:
        a1, tied, sizes = plurality_vote(values, "truthfulqa", run_seed=3, sample_id=sample_id)
        a2, _, _ = plurality_vote(values, "truthfulqa", run_seed=3, sample_id=sample_id)
        assert tied and sizes == (1, 1, 1) and a1 == a2
        # The documented rule: default_rng(sha256("seed:id")[:8]) picks among groups by lowest index.
        expected = values[int(np.random.default_rng(tie_break_seed(3, sample_id)).integers(3))]
        assert a1 == expected
        winners[sample_id] = a1
    # Every candidate wins sometimes (the rule is not "first group").
    assert set(winners.values()) == {"A", "B", "C"}


def test_tie_only_among_the_largest_groups():
    # A:2, B:2, C:1 -> C can never win.
    results = {plurality_vote(["A", "B", "A", "B", "C"], "truthfulqa", sample_id=f"x{i}")[0] for i in range(40)}
    assert results == {"A", "B"}


def test_tie_break_seed_depends_on_run_seed_and_sample():
    assert tie_break_seed(0, "a") == tie_break_seed(0, "a")
    assert tie_break_seed(0, "a") != tie_break_seed(1, "a")
    assert tie_break_seed(0, "a") != tie_break_seed(0, "b")


def test_authors_majority_correct_rule():
    # 1 correct vs 2 wrong -> wrong, even though plurality might pick the correct one on a tie.
    v = vote(["A", "B", "C"], "A", "truthfulqa", rule="authors_majority_correct")
    assert not v.correct and v.answer == "C"  # the last wrong agent's answer
    # None answers count as wrong: 1 correct vs 2 wrong.
    v = vote([None, None, "A"], "A", "truthfulqa", rule="authors_majority_correct")
    assert not v.correct
    assert vote([None, None, "A"], "A", "truthfulqa", rule="plurality").correct
    v = vote(["A", "B", "A"], "A", "truthfulqa", rule="authors_majority_correct")
    assert v.correct and v.answer == "A"
    with pytest.raises(ValueError, match="unknown vote rule 'best'"):
        vote(["A"], "A", "truthfulqa", rule="best")


# ----------------------------------------------------------------------------------------------
# Hand-made transcripts
# ----------------------------------------------------------------------------------------------
def agent(answer, correct, *, finish="stop", response=None, tokens=(10, 5), cached=False):
    return turn(response=response if response is not None else f"... (({answer}))", answer=answer, correct=correct,
                finish_reason=finish, prompt_tokens=tokens[0], completion_tokens=tokens[1], cached=cached, seconds=0.1)


def record(sample_id, rounds, *, gold="A", correct=None, final=None, seconds=1.0, extra=None):
    rounds_out = []
    for t, answers in enumerate(rounds):
        agents = [agent(a, a == gold) for a in answers]
        rounds_out.append({"round": t, "agents": agents, "extra_calls": (extra or {}).get(t, [])})
    return transcript(sample_id, rounds_out, gold=gold, final_answer=final, correct=bool(correct), seconds=seconds)


def test_shared_misconception_subset_is_a_strict_majority_wrong_at_round_zero():
    records = [
        record("all_wrong", [["B", "C", "B"]]),
        record("two_wrong", [["A", "B", "B"]]),
        record("one_wrong", [["A", "A", "B"]]),
        record("none_answers", [[None, None, "A"]]),
        record("late_wrong", [["A", "A", "A"], ["B", "B", "B"]]),
    ]
    assert shared_misconception_subset(records) == {"all_wrong", "two_wrong", "none_answers"}
    # Two agents: one wrong is not a strict majority.
    assert shared_misconception_subset([record("pair", [["A", "B"]])]) == set()


def test_stance_transitions_on_a_hand_made_transcript():
    records = [
        # agent0: C->C->W, agent1: W->C->C, agent2: W->W->C
        record("s1", [["A", "B", "C"], ["A", "A", "D"], ["B", "A", "A"]]),
        # stopped early after one round: no transitions
        record("s2", [["A", "A", "A"]]),
        # agent0: C->W, agent1: W->W, agent2: C->C
        record("s3", [["A", None, "A"], ["B", "B", "A"]]),
    ]
    rates = stance_transitions(records)
    # correct before: s1 t0 {0}, s1 t1 {0,1}, s3 t0 {0,2} -> 5; C->W: s1 agent0 t1->t2, s3 agent0 -> 2
    # wrong before: s1 t0 {1,2}, s1 t1 {2}, s3 t0 {1} -> 4; W->C: s1 agent1 t0->t1, s1 agent2 t1->t2 -> 2
    assert (rates.n_correct_before, rates.n_c_to_w, rates.n_wrong_before, rates.n_w_to_c) == (5, 2, 4, 2)
    assert rates.c_to_w == pytest.approx(2 / 5) and rates.w_to_c == pytest.approx(2 / 4)
    assert rates.n_samples == 3
    sub = stance_transitions(records, subset={"s3"})
    assert (sub.c_to_w, sub.w_to_c, sub.n_samples) == (0.5, 0.0, 1)
    empty = stance_transitions(records, subset={"s2"})
    assert math.isnan(empty.c_to_w) and math.isnan(empty.w_to_c)


def test_revote_recomputes_from_the_last_round():
    r = record("s", [["A", "B", "C"], ["B", "B", "A"]])
    v = revote(r, rule="plurality")
    assert v.answer == "B" and not v.correct
    assert revote(r, rule="authors_majority_correct").correct is False


def test_cost_per_query_by_tag_and_time():
    summary = {"tag": "summary", "prompt_tokens": 100, "completion_tokens": 20, "finish_reason": "stop",
               "cached": False, "seconds": 0.2}
    judge = {"tag": "judge", "prompt_tokens": 50, "completion_tokens": 10, "finish_reason": "length", "cached": True,
             "seconds": 0.0}
    records = [
        record("a", [["A", "B", "C"], ["A", "A", "C"]], extra={0: [summary], 1: [judge, judge]}, seconds=2.0),
        record("b", [["A", "A", "A"]], seconds=1.0),
    ]
    cost = cost_per_query(records)
    assert cost["n"] == 2
    debate = cost["tokens_per_query"]["debate"]
    assert debate["requests"] == pytest.approx(9 / 2)
    assert debate["prompt_tokens"] == pytest.approx(90 / 2) and debate["completion_tokens"] == pytest.approx(45 / 2)
    assert debate["total_tokens"] == pytest.approx(135 / 2)
    assert cost["tokens_per_query"]["summary"]["total_tokens"] == pytest.approx(120 / 2)
    assert cost["tokens_per_query"]["judge"]["total_tokens"] == pytest.approx(120 / 2)
    assert cost["tokens_per_query"]["judge"]["cached_fraction"] == 1.0
    assert cost["seconds_per_query"] == pytest.approx(1.5)


def test_completion_health_counts_truncated_and_empty_completions():
    r = record("a", [["A", "B", "C"], ["A", "A", "C"]])
    r["rounds"][0]["agents"][1].update(finish_reason="length")
    r["rounds"][1]["agents"][2].update(finish_reason="length", response="   ", answer=None, correct=False)
    r["rounds"][1]["agents"][0].update(finish_reason="error", response="", answer=None, correct=False)
    r["rounds"][0]["extra_calls"] = [{"tag": "summary", "prompt_tokens": 1, "completion_tokens": 1,
                                      "finish_reason": "length", "cached": False, "seconds": 0}]
    # Two answers stated without ((X)): one on the last line, one in the authors' "(X)" form.
    r["rounds"][0]["agents"][2].update(response="Comparing the options...\nThe answer is (C).")
    r["rounds"][1]["agents"][1].update(response="Both (B) and (C) fail, which leaves (A) as the only consistent option")
    health = completion_health([r])
    assert health == {
        "completions": 6,
        "truncated": 2,
        "error": 1,
        "empty": 2,
        "no_answer": 2,
        "answer_fallback": 2,
        "final_round_truncated": 1,
        "final_round_no_answer": 2,
        "final_round_answer_fallback": 1,
        "extra_calls_truncated": 1,
        "final_answer_none": 1,
        # issue 22: the limits apart (these records predate ``cut``: a length turn with tokens is a max_tokens cut)
        "context_overflow": 0,
        "context_capped": 0,
        "max_tokens_cut": 3,
        "unclosed_thinking": 0,
        "trimmed_prompts": 0,
    }
    metrics = compute_metrics([r], n_bootstrap=10)
    assert "answer from a fallback 2" in summary_line(metrics)


def test_compute_metrics_stored_and_recomputed_votes():
    records = [
        record("a", [["A", "A", "B"]], correct=True, final="A"),
        record("b", [["B", "B", "A"]], correct=False, final="B"),
        record("c", [["C", "A", "A"]], correct=True, final="A"),
        record("d", [["A", "B", "C"]], correct=True, final="A"),
    ]
    stored = compute_metrics(records)
    assert stored["n"] == 4 and stored["accuracy"] == 0.75
    assert stored["agent_accuracy_by_round"] == [pytest.approx(6 / 12)]
    authors = compute_metrics(records, vote_rule="authors_majority_correct")
    assert authors["accuracy"] == 0.5  # a, c correct; d (1 vs 2) wrong
    assert authors["vote_rule"] == "authors_majority_correct"
    line = summary_line(stored)
    assert line.startswith("accuracy 0.750 [95% CI ") and "(n=4)" in line and "tokens/query: debate" in line


# ----------------------------------------------------------------------------------------------
# Accuracy CI and paired test
# ----------------------------------------------------------------------------------------------
def test_bootstrap_ci_is_seeded_and_sane():
    correct = [True] * 70 + [False] * 30
    a = accuracy_with_ci(correct, seed=1)
    b = accuracy_with_ci(correct, seed=1)
    assert a == b
    assert a.accuracy == 0.7 and a.n == 100
    assert a.low < 0.7 < a.high
    # Normal approximation: half-width ~ 1.96 * sqrt(.7 * .3 / 100) = 0.0898.
    assert a.high - a.low == pytest.approx(2 * 0.0898, abs=0.03)
    narrower = accuracy_with_ci(correct, level=0.5, seed=1)
    assert a.low <= narrower.low <= narrower.high <= a.high
    assert str(a).startswith("0.700 [95% CI ")


def test_bootstrap_ci_degenerate_cases():
    # a bootstrap of all-correct answers collapses to [1, 1]; from the cutoff on it is the bootstrap's, below it exact
    assert accuracy_with_ci([True] * 20).low == 1.0
    assert accuracy_with_ci([False] * 20).high == 0.0
    assert accuracy_with_ci([True] * 5).low == pytest.approx(0.025 ** 0.2) and accuracy_with_ci([False] * 5).high < 1
    empty = accuracy_with_ci([])
    assert empty.n == 0 and math.isnan(empty.accuracy)
    with pytest.raises(ValueError, match="level"):
        accuracy_with_ci([True], level=1.5)


def test_bootstrap_matches_index_resampling_in_distribution():
    """The binomial shortcut and explicit index resampling give the same interval (up to noise)."""
    rng = np.random.default_rng(0)
    x = rng.random(200) < 0.4
    explicit = x[rng.integers(0, x.size, size=(20000, x.size))].mean(axis=1)
    low, high = np.quantile(explicit, [0.025, 0.975])
    ours = accuracy_with_ci(x, n_bootstrap=20000, seed=5)
    assert ours.low == pytest.approx(low, abs=0.011) and ours.high == pytest.approx(high, abs=0.011)


# ----------------------------------------------------------------------------------------------
# The transcript walks of notebooks 04, 05 and 09 (retrieval, confidence, masking)
# ----------------------------------------------------------------------------------------------
def _r2mad_record() -> dict:
    """Two rounds: at t = 1 agent 0 reads peers 1 (correct at t=0) and 2 (wrong at t=0)."""
    agents0 = [{"agent": 0, "answer": "A", "correct": True}, {"agent": 1, "answer": "A", "correct": True},
               {"agent": 2, "answer": "B", "correct": False}]
    turn = {"agent": 0, "answer": "A", "correct": True, "peer_confidence": {"1": "low", "2": "high"},
            "retrieved": {"lambda": 0.4, "case_ids": ["c1", "c2"], "similarities": [0.9, 0.8], "rewards": [1, 0],
                          "confidence": {"1": 0.3, "2": 0.7}, "annotation": {"1": "low", "2": "high"}}}
    plain = {"agent": 1, "answer": "A", "correct": True, "peer_confidence": {"0": None, "2": "low"},
             "retrieved": {"lambda": 0.4, "confidence": {"0": 0.5, "2": 0.2}}}
    return transcript("q1", [
        {"round": 0, "agents": agents0, "consensus_ratio": 2 / 3},
        {"round": 1, "agents": [turn, plain], "consensus_ratio": 1.0,
         "masking": {"kept": [0, 1], "verdicts": ["YES", "NO"]}},
    ])


def test_retrieval_trace_lambda_and_confidences_read_every_round() -> None:
    record = _r2mad_record()
    trace = retrieval_trace(record)
    assert [(r["round"], r["agent"], r["lambda_t"]) for r in trace] == [(1, 0, 0.4), (1, 1, 0.4)]
    assert trace[0]["retrieved"] == ["c1", "c2"] and trace[0]["annotation"] == {"1": "low", "2": "high"}
    assert lambda_by_consensus([record]) == {(0.667, 0.4): 2}
    assert sorted(peer_confidences([record])) == [0.2, 0.3, 0.5, 0.7]
    assert masking_decisions([record]) == [{"round": 1, "responses kept": 2, "verdicts": "YES,NO"}]


def test_annotation_counts_split_by_the_annotated_peers_correctness() -> None:
    counts = annotation_counts([_r2mad_record()])
    # agent 0: peer 1 (correct) low, peer 2 (wrong) high; agent 1: peer 0 (correct) none, peer 2 (wrong) low
    assert (counts.low_correct, counts.high_wrong, counts.none_correct, counts.low_wrong) == (1, 1, 1, 1)
    assert counts.total == 4 and counts.share("low") == 0.5
    assert counts.rate("high", True) == 0.0 and counts.rate("high", False) == 0.5
    assert counts.informativeness == -0.5  # here the annotations point the wrong way
    assert math.isnan(AnnotationCounts().informativeness)


def test_an_accuracy_at_small_n_has_the_exact_interval() -> None:
    one = accuracy_with_ci([False])
    assert (one.low, one.high) == (0.0, pytest.approx(0.975)) and one.n_bootstrap == 0  # not "0.000 [0.000, 0.000]"
    four = accuracy_with_ci([True, True, True, True])
    assert four.low == pytest.approx(0.025 ** 0.25) and four.high == 1.0
    assert accuracy_with_ci([True] * 10 + [False] * 10).n_bootstrap == 10_000  # bootstrap from the cutoff on
