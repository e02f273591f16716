"""findings: the "What this shows" sentences are built from the numbers (change a number, the sentence
changes), a tie is never "holds", and the simulated-agent explanations carry measured values."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hand_transcripts import transcript
from r2mad_core.records import TranscriptRecord, as_transcript
from r2mad_core.report import findings
from r2mad_core.report.results import CellOutcome, GridResults
from r2mad_core.experiments.model_specs import ModelSpec

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
    assert (c.n_pairs, c.better_only, c.worse_only) == (12, 9, 1) and c.outcome == "holds" and c.significant
    assert "R2-MAD 0.700 vs MAD 0.300 (+0.400; p = 0.0215, exact McNemar on 12 paired questions, significant" in c.clause()
    tie = findings.compare(results, "R2-MAD", "MAD", benchmarks=["TruthfulQA"])
    assert tie.outcome == "tie" and not tie.significant and tie.scope == "on TruthfulQA"


def test_main_results_sentences_follow_the_numbers() -> None:
    def sentences(r2: list[int]) -> list[str]:
        results = GridResults([_outcome("R2-MAD", "math500", r2), _outcome("MAD", "math500", [1, 1, 0, 0])])
        return findings.main_results(results, [SIM], ["MAD"], large_not_run=["GPT-4o-mini"])

    better = sentences([1, 1, 1, 0])
    assert "Sim (simulated agents), standing in for Qwen2.5-7B-Instruct" in better[0]
    assert "strictly above 1 of the 1 baselines" in better[1] and "R2-MAD 0.750 vs MAD 0.500" in better[1]
    assert better[2].startswith("The paper's RQ1 claim (R2-MAD has the highest average accuracy) holds")
    tied = sentences([1, 1, 0, 0])
    assert "strictly above 0 of the 1 baselines" in tied[1] and "does not hold" in tied[2]
    assert "GPT-4o-mini) are not run in this profile" in tied[-1]


def test_retrieval_sentence_names_the_winner_and_the_simulator_mechanism() -> None:
    table = pd.DataFrame({"Average": [0.70, 0.69, 0.65]}, index=pd.Index(["Diversity-only", "Debate-State-Aware", "Random"]))
    text = findings.retrieval(table, [SIM])
    assert text[0].startswith("By average accuracy, Diversity-only (0.700) ranks first")
    assert "does not hold here: Diversity-only has the highest average (0.700); Debate-State-Aware ranks 2 of 3" in text[1]
    assert "multiplies the true concept's likelihood by 1.5" in text[-1]
    table.loc["Debate-State-Aware", "Average"] = 0.71
    assert "holds here" in findings.retrieval(table, [SIM])[1]


def test_poisoning_that_does_not_hurt_is_explained_as_a_simulation_limit() -> None:
    fractions = {"R2-MAD poisoned=0": 0.0, "R2-MAD poisoned=1": 1.0}
    outcomes = [_outcome("R2-MAD poisoned=0", "truthfulqa", [1, 0, 1, 0]),
                _outcome("R2-MAD poisoned=1", "truthfulqa", [1, 1, 1, 0]), _outcome("MAD", "truthfulqa", [0, 0, 1, 0])]
    poisoned = GridResults(outcomes)
    frame = poisoned.accuracy()
    frame["poisoned fraction"] = frame["method"].map(fractions)
    text = " ".join(findings.poisoned_memory(frame, poisoned, [SIM]))
    assert "accuracy 0.500 with clean memory and 0.750 with f = 1" in text and "MAD without memory: 0.250" in text
    assert "Poisoning does not measurably hurt on TruthfulQA: the difference is reversed" in text
    hurt = GridResults([_outcome("R2-MAD poisoned=0", "truthfulqa", [1] * 12), _outcome("R2-MAD poisoned=1", "truthfulqa", [0] * 12)])
    frame = hurt.accuracy()
    frame["poisoned fraction"] = frame["method"].map(fractions)
    text = " ".join(findings.poisoned_memory(frame, hurt, [SIM]))
    assert "Poisoning hurts on TruthfulQA" in text and "teaches the opposite lesson" in text


def test_claims_sentences_list_what_fails() -> None:
    from r2mad_core.report.comparison import claims_summary

    claims = pd.DataFrame([
        {"table": "tab:ablation", "paper_model": "Qwen2.5-7B-Instruct", "benchmark": "Average", "better": "R2-MAD",
         "worse": "R2-MAD w/o Confidence", "paper_better": 0.607, "paper_worse": 0.585, "holds_in_paper": True,
         "reproduced_better": 0.71, "reproduced_worse": 0.734, "outcome": "reversed", "holds_here": False,
         "p_value": 0.01, "significant": False, "duplicate_of": None},
    ])
    text = findings.claims(claims, claims_summary(claims), [SIM])
    assert text[1].startswith("Of the 1 distinct comparisons") and "0 hold here" in text[1] and "1 is reversed" in text[1]
    assert "Does not hold (reversed): R2-MAD > R2-MAD w/o Confidence on Average" in text[2]
    assert "reproduced 0.710 vs 0.734; the paper 0.607 vs 0.585" in text[2]


def test_claims_sentences_separate_does_not_hold_from_could_not_be_detected() -> None:
    from r2mad_core.report import power
    from r2mad_core.report.comparison import claims_summary

    def row(better_only: int, worse_only: int, reproduced: tuple[float, float], outcome: str, p: float, significant: bool,
            worse: str) -> dict:
        return {"table": "tab:main_results", "paper_model": "Qwen2.5-7B-Instruct", "benchmark": "Average", "better": "R2-MAD",
                "worse": worse, "paper_better": 0.607, "paper_worse": 0.501 if worse == "MAD-M2" else 0.593,
                "holds_in_paper": True, "reproduced_better": reproduced[0], "reproduced_worse": reproduced[1],
                "outcome": outcome, "holds_here": outcome == "holds", "n_pairs": 753, "better_only": better_only,
                "worse_only": worse_only, "p_value": p, "significant": significant, "duplicate_of": None}

    claims = power.with_power(pd.DataFrame([
        # the paper's +0.106 over MAD-M2: 100% power at 136 discordant of 753, yet a tie here -> does not hold
        row(68, 68, (0.62, 0.62), "tie", 1.0, False, "MAD-M2"),
        # the paper's +0.014 over Self-Consistency: about 10% power at 165 discordant -> could not have been detected
        row(85, 80, (0.70, 0.693), "holds", 0.76, False, "Self-Consistency"),
    ]))
    assert claims["detectable"].tolist() == [True, False]
    text = findings.claims(claims, claims_summary(claims), [SIM])
    assert text[2].startswith("This run had at least 80% power to detect the paper's own difference for 1 of the 2 distinct")
    assert "it confirmed 0 of those significantly, and 0 more despite lower power" in text[2]
    assert text[3].startswith("Does not hold as the paper says: R2-MAD > MAD-M2 on Average") and "does not hold (tie)" in text[3]
    assert "this run had 100% power to detect the paper's difference (+0.106" in text[3]
    assert text[4].startswith("Could not have been detected at this size (1 claim;")
    assert "R2-MAD > Self-Consistency (tab:main_results, Average): holds here (+0.007, p = 0.76), smallest detectable 0.0" in text[4]
    low = claims["power_paper_difference"][1]
    assert f"power {low:.0%} for the paper's +0.014" in text[4] and 0.05 < low < 0.2


def test_round0_sentences_count_how_often_the_independent_round_0_was_also_wrong() -> None:
    def record(sample: str, round0: list[bool], correct: bool) -> TranscriptRecord:
        return as_transcript(transcript(sample, [{"round": 0, "agents": [{"correct": c} for c in round0]}], correct=correct))

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
    assert text[0] == ("TruthfulQA (Sim): R2-MAD minus MAD on the subset is +0.500 with a shared round 0 (p = 1, 2 questions) "
                       "and +1.000 with independent round-0 draws (p = 0.5, 2 questions).")
    assert "majority-wrong on 1 of the 2 questions of MAD's subset (50%)" in text[-1]
