"""findings: the "What this shows" sentences are built from the numbers (change a number, the sentence
changes), a tie never goes "the claimed way", verdict words come only from an adjusted p on a sample large enough
(docs/statistics.md), and the simulated-agent explanations carry measured values."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hand_transcripts import transcript

from r2mad_core.records import TranscriptRecord, as_transcript
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.report import findings
from r2mad_lab.report.results import CellOutcome, GridResults

SIM = ModelSpec("Sim", "simulated", None, stands_in_for="Qwen2.5-7B-Instruct")


def _outcome(method: str, benchmark: str, outcomes: list[int], spec: ModelSpec = SIM) -> CellOutcome:
    records = [as_transcript(transcript(f"{benchmark}-{i}", correct=bool(c))) for i, c in enumerate(outcomes)]
    accuracy = sum(outcomes) / len(outcomes)
    return CellOutcome(spec, benchmark, method, Path("/runs"), records,
                       {"accuracy": accuracy, "ci_low": accuracy, "ci_high": accuracy, "n": len(outcomes)})


def test_compare_pools_benchmarks_like_the_papers_average_with_an_exact_mcnemar() -> None:
    results = GridResults([_outcome("R2-MAD", "math500", [1] * 9 + [0]), _outcome("MAD", "math500", [0] * 9 + [1]),
                           _outcome("R2-MAD", "truthfulqa", [1, 0]), _outcome("MAD", "truthfulqa", [1, 0])])
    c = findings.compare(results, "R2-MAD", "MAD")
    assert (c.value_better, c.value_worse) == (0.7, 0.3)  # (0.9 + 0.5) / 2 vs (0.1 + 0.5) / 2
    # 12 pairs are below the smallest n with 80% power for any difference (15): no verdict, whatever the p
    assert (c.n_pairs, c.better_only, c.worse_only) == (12, 9, 1) and c.outcome == "holds" and not c.significant
    assert "R2-MAD 0.700 vs MAD 0.300 (+0.400, 95% CI" in c.clause() and "stratified exact sign test" in c.clause()
    assert "no inference at n = 2 per benchmark cell" in c.clause() and "significant" not in c.clause()
    # the same split at 4x the questions: the rule speaks, with the adjusted p beside the word
    big = GridResults([_outcome("R2-MAD", "math500", ([1] * 9 + [0]) * 4),
                       _outcome("MAD", "math500", ([0] * 9 + [1]) * 4),
                       _outcome("R2-MAD", "truthfulqa", [1, 0] * 8), _outcome("MAD", "truthfulqa", [1, 0] * 8)])
    c = findings.compare(big, "R2-MAD", "MAD")
    # a bare comparison is a paper claim's: verdict: the claims family's, never this text's
    assert not c.significant and "verdict: the claims family" in c.clause() and "significant" not in c.clause()
    c = findings.holm_family([c], "a test family")[0]
    assert c.significant and "; significant (Holm-adjusted p = " in c.clause() and "a test family of 1" in c.clause()
    tie = findings.compare(results, "R2-MAD", "MAD", benchmarks=["TruthfulQA"])
    assert tie.outcome == "tie" and not tie.significant and tie.scope == "on TruthfulQA"


def test_main_results_sentences_follow_the_numbers() -> None:
    def sentences(r2: list[int]) -> list[str]:
        results = GridResults([_outcome("R2-MAD", "math500", r2), _outcome("MAD", "math500", [1, 1, 0, 0])])
        return findings.main_results(results, [SIM], ["MAD"], large_not_run=["GPT-4o-mini"])

    better = sentences([1, 1, 1, 0])
    assert "Sim (simulated agents), standing in for Qwen2.5-7B-Instruct" in better[0]
    assert "strictly above 1 of the 1 baselines" in better[1] and "R2-MAD 0.750 vs MAD 0.500" in better[1]
    # 4 questions: the point estimate goes the claimed way, no verdict word; a claim's verdict is the claims family's
    assert "tested once, in the claims family" in better[1] and "no inference at n = 4 per benchmark cell" in better[1]
    assert "significant" not in " ".join(better[1:])
    tied = sentences([1, 1, 0, 0])
    assert "strictly above 0 of the 1 baselines" in tied[1] and "do not go the way" in tied[2]
    assert "GPT-4o-mini) are not run in this profile" in tied[-2] and tied[-1].startswith("Small sample: n = 4")


def test_retrieval_sentence_names_the_winner_and_the_simulator_mechanism() -> None:
    table = pd.DataFrame({"Average": [0.70, 0.69, 0.65]}, index=pd.Index(
        ["Diversity-only", "Debate-State-Aware", "Random"]))
    text = findings.retrieval(table, [SIM])
    # no test between rows here: an order of point estimates, never "ranks first"
    assert text[0].startswith("By average accuracy, in the order of the point estimates (an order, not a ranking")
    assert "Diversity-only (0.700), Debate-State-Aware (0.690), Random (0.650)" in text[0]
    assert "Debate-State-Aware (0.690) is not above every other policy (the best other: Diversity-only" in text[1]
    assert "multiplies the true concept's likelihood by 1.5" in text[-1]
    assert not any(word in " ".join(text) for word in ("ranks first", "significant", "wins", "beats"))
    table.loc["Debate-State-Aware", "Average"] = 0.71
    assert "is strictly above every other policy" in findings.retrieval(table, [SIM])[1]


def test_rows_equal_by_construction_are_never_ranked() -> None:
    table = pd.DataFrame({"Average": [0.70, 0.667, 0.69, 0.65]},
                         index=pd.Index(["Fixed-lambda (0.25)", "Debate-State-Aware", "Fixed-lambda (0.50)", "Random"]))
    text = findings.retrieval(table, [SIM], top_k=1)
    assert ("Fixed-lambda (0.25) = Debate-State-Aware = Fixed-lambda (0.50) (equal by construction, K = 1: the same "
            "retrieved cases; 0.667-0.700, the spread is sampling noise), Random (0.650)") in text[0]
    assert "cannot be read from this table at K = 1" in " ".join(text) and "ranks first" not in " ".join(text)
    # at K = 3 the policies differ: each its own entry
    assert "equal by construction" not in findings.retrieval(table, [SIM], top_k=3)[0]


def test_poisoning_that_does_not_hurt_is_explained_as_a_simulation_limit() -> None:
    fractions = {"R2-MAD poisoned=0": 0.0, "R2-MAD poisoned=1": 1.0}
    outcomes = [_outcome("R2-MAD poisoned=0", "truthfulqa", [1, 0, 1, 0]),
                _outcome("R2-MAD poisoned=1", "truthfulqa", [1, 1, 1, 0]), _outcome("MAD", "truthfulqa", [0, 0, 1, 0])]
    poisoned = GridResults(outcomes)
    frame = poisoned.accuracy()
    frame["poisoned fraction"] = frame["method"].map(fractions)
    text = " ".join(findings.poisoned_memory(frame, poisoned, [SIM]))
    assert "accuracy 0.500 with clean memory and 0.750 with f = 1" in text and "MAD without memory: 0.250" in text
    assert "too small to say whether poisoning hurts" in text and "Small sample: n = 4" in text
    hurt = GridResults([_outcome("R2-MAD poisoned=0", "truthfulqa", [1] * 12),
                        _outcome("R2-MAD poisoned=1", "truthfulqa", [0] * 12)])
    frame = hurt.accuracy()
    frame["poisoned fraction"] = frame["method"].map(fractions)
    text = " ".join(findings.poisoned_memory(frame, hurt, [SIM]))
    assert "no inference at n = 12" in text and "not distinguishable" not in text  # 12 questions: no inference
    hurt = GridResults([_outcome("R2-MAD poisoned=0", "truthfulqa", [1] * 20),
                        _outcome("R2-MAD poisoned=1", "truthfulqa", [0] * 20)])
    frame = hurt.accuracy()
    frame["poisoned fraction"] = frame["method"].map(fractions)
    text = " ".join(findings.poisoned_memory(frame, hurt, [SIM]))
    assert "Poisoning hurts on TruthfulQA" in text and "teaches the opposite lesson" in text
    assert "significant (Holm-adjusted p = " in text


def test_claims_sentences_list_what_fails() -> None:
    from r2mad_lab.report.comparison import claims_summary

    claims = pd.DataFrame([
        {"table": "tab:ablation", "paper_model": "Qwen2.5-7B-Instruct", "benchmark": "Average", "better": "R2-MAD",
         "worse": "R2-MAD w/o Confidence", "paper_better": 0.607, "paper_worse": 0.585, "holds_in_paper": True,
         "reproduced_better": 0.71, "reproduced_worse": 0.734, "outcome": "reversed", "holds_here": False,
         "p_value": 0.01, "p_holm": 0.01, "significant": False, "duplicate_of": None, "n_pairs": 377},
    ])
    text = findings.claims(claims, claims_summary(claims), [SIM])
    assert text[1].startswith("Of the 1 distinct claims") and "0 go the claimed way here" in text[1]
    assert "1 reversed, 0 tied" in text[1] and "Holm-adjusted over the claims family of 1" in text[1]
    assert "Does not go the claimed way (reversed): R2-MAD > R2-MAD w/o Confidence on Average" in text[2]
    assert "reproduced 0.710 vs 0.734; the paper 0.607 vs 0.585" in text[2]


def test_claims_sentences_separate_does_not_hold_from_could_not_be_detected() -> None:
    from r2mad_lab.report import power
    from r2mad_lab.report.comparison import claims_summary

    def row(better_only: int, worse_only: int, reproduced: tuple[float, float], outcome: str, p: float,
            significant: bool, worse: str) -> dict:
        return {"table": "tab:main_results", "paper_model": "Qwen2.5-7B-Instruct", "benchmark": "Average",
                "better": "R2-MAD",
                "worse": worse, "paper_better": 0.607, "paper_worse": 0.501 if worse == "MAD-M2" else 0.593,
                "holds_in_paper": True, "reproduced_better": reproduced[0], "reproduced_worse": reproduced[1],
                "outcome": outcome, "holds_here": outcome == "as claimed", "n_pairs": 753, "better_only": better_only,
                "worse_only": worse_only, "p_value": p, "p_holm": min(1.0, 2 * p), "significant": significant,
                "duplicate_of": None}

    claims = power.with_power(pd.DataFrame([
        # the paper's +0.106 over MAD-M2: ~100% power (pre-run, at alpha / 2) on 753 pairs, yet a tie here
        row(68, 68, (0.62, 0.62), "tie", 1.0, False, "MAD-M2"),
        # the paper's +0.014 over Self-Consistency: low power before the run -> could not have been detected
        row(85, 80, (0.70, 0.693), "as claimed", 0.76, False, "Self-Consistency"),
    ]))
    assert claims["detectable"].tolist() == [True, False] and (claims["alpha_holm"] == 0.025).all()
    text = findings.claims(claims, claims_summary(claims), [SIM])
    assert text[2].startswith(
        "This run had at least 80% power to detect the paper's own difference for 1 of the 2 distinct")
    assert "0 of those have p_holm below 0.05, and 0 more despite lower power" in text[2]
    assert (text[3].startswith("Not as the paper says: R2-MAD > MAD-M2 on Average")
            and "does not go the claimed way (tie)" in text[3])
    assert "before the run it had 100% power to detect the paper's difference (+0.106" in text[3]
    assert text[4].startswith("Could not have been detected at this size (1 claim;")
    assert ("R2-MAD > Self-Consistency (tab:main_results, Average): as claimed here (+0.007, p = 0.76, p_holm = 1), "
            "smallest detectable 0.") in text[4]
    low = claims["power_paper_difference"][1]
    assert f"power {low:.0%} for the paper's +0.014" in text[4] and 0.0 < low < 0.2


def test_round0_sentences_count_how_often_the_independent_round_0_was_also_wrong() -> None:
    def record(sample: str, round0: list[bool], correct: bool) -> TranscriptRecord:
        return as_transcript(transcript(sample, [{"round": 0, "agents": [{"correct": c} for c in round0]}],
                                        correct=correct))

    def cell(method: str, records: list[TranscriptRecord]) -> CellOutcome:
        accuracy = sum(r.correct for r in records) / len(records)
        return CellOutcome(SIM, "truthfulqa", method, Path("/runs"), records,
                           {"accuracy": accuracy, "ci_low": accuracy, "ci_high": accuracy, "n": len(records)})

    wrong, right = [False, False, True], [True, True, False]
    paired = GridResults([cell("MAD", [record("a", wrong, False), record("b", wrong, False)]),
                          cell("R2-MAD", [record("a", wrong, True), record("b", wrong, False)])])
    suffix = " (independent round 0)"
    independent = GridResults([cell("MAD" + suffix, [record("a", wrong, False), record("b", wrong, False)]),
                               cell("R2-MAD" + suffix, [record("a", right, True), record("b", wrong, True)])])
    text = findings.round0_comparison(paired, independent, [SIM], suffix)
    assert (text[0].startswith("TruthfulQA (Sim), with a shared round 0")
            and "R2-MAD 0.500 vs MAD 0.000 (+0.500" in text[0])
    assert "no inference at n = 2" in text[0]
    assert ("On the paper's design (the subset from the independent MAD run's own round 0) the difference is +1.000 "
            "on 2 questions: biased toward R2-MAD, shown, not tested.") in text[0]
    assert "majority-wrong on 1 of the 2 questions of MAD's subset (50%)" in text[-1]
