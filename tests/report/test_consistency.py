"""The checker of one verdict per comparison (report/consistency.py) can fail: each planted failure is caught."""

from __future__ import annotations

import pandas as pd

from r2mad_lab.report import consistency, findings
from r2mad_lab.report.tables import Table, render_markdown

CLAIMS = pd.DataFrame([{"ordering": "R2-MAD > MAD", "n_pairs": 753, "difference": "+0.021 [-0.012, +0.055]",
                        "p": 0.219, "p_holm": 1.0}])


def _comparison(**changes) -> findings.Comparison:
    fields = dict(better="R2-MAD", worse="MAD", value_better=0.637, value_worse=0.616, n_pairs=753, better_only=93,
                  worse_only=70, p_value=0.219, scope="on average over 4 benchmarks", ci_low=-0.012, ci_high=0.055,
                  test="stratified exact sign test over 4 strata", se=0.017, n_cell=136)
    fields.update(changes)
    return findings.Comparison(**fields)


def test_a_claim_quoted_as_the_claims_table_states_it_passes() -> None:
    text = f"With Sim, R2-MAD is strictly above 1 of the 1 baselines: {_comparison().clause()}."
    assert consistency.pair_problems({"03": text}, CLAIMS) == []
    assert consistency.small_sample_problems(text) == []


def test_a_claim_with_another_p_or_ci_is_caught() -> None:
    other_p = f"Quoted: {_comparison(p_value=0.0351).clause()}."
    assert any("the claims table: p = 0.219" in p for p in consistency.pair_problems({"06": other_p}, CLAIMS))
    other_ci = f"Quoted: {_comparison(ci_low=-0.02).clause()}."
    assert any("the claims table: ('-0.012', '+0.055')" in p
               for p in consistency.pair_problems({"06": other_ci}, CLAIMS))


def test_a_claim_judged_in_a_family_of_its_own_is_caught() -> None:
    own = findings.holm_family([_comparison()], "the comparisons of this sentence")[0]
    problems = consistency.pair_problems({"06": f"Economics: {own.clause()}."}, CLAIMS)
    assert any("cites another family" in p for p in problems)


def test_one_pair_with_two_ps_in_two_outputs_is_caught() -> None:
    a = _comparison(better="X", worse="Y", p_value=0.2)
    b = _comparison(better="X", worse="Y", p_value=0.02)
    problems = consistency.pair_problems({"05": f"A: {a.clause()}.", "10": f"B: {b.clause()}."}, CLAIMS)
    assert problems and "05 states p = 0.2" in problems[0]


def test_a_verdict_phrase_below_the_cutoff_of_its_family_is_caught() -> None:
    # 20 paired questions clear n = 15 at alpha = 0.05 but not n = 24 at the Holm level of a family of 14
    fake = ("A: X 0.700 vs Y 0.300 (+0.400, 95% CI [+0.2, +0.6]; exact McNemar on 20 paired questions, p = 0.001; "
            "significant (Holm-adjusted p = 0.014 < 0.05, over the claims family of 14)).")
    assert any("below n = 24" in p for p in consistency.small_sample_problems(fake))
    assert consistency.small_sample_problems("n is fine: not distinguishable from no difference at n = 4.")
    generated = findings.holm_family([_comparison(better="X", worse="Y", n_pairs=20, n_cell=20)], "a family")[0]
    assert consistency.small_sample_problems(f"A: {generated.clause()}.") == []  # the generator never does it


def _cell(model: str, benchmark: str, correct: list[int]):
    from types import SimpleNamespace

    records = [SimpleNamespace(sample_id=f"q{i}", correct=bool(c)) for i, c in enumerate(correct)]
    return [SimpleNamespace(model=SimpleNamespace(label=model), benchmark=benchmark, records=records)]


def _table(n: int = 40) -> Table:
    """One column, three rows on the same n questions: a right on all, b and c on half (a beats both)."""
    rows = {"a": [1] * n, "b": [i % 2 for i in range(n)], "c": [(i + 1) % 2 for i in range(n)]}
    values = pd.DataFrame({"acc": [sum(v) / n for v in rows.values()]}, index=pd.Index(list(rows), name="m"))
    return Table(values=values, best="max", cells={(name, "acc"): _cell("M", "bench", v) for name, v in rows.items()})


def test_bold_without_a_test_is_caught() -> None:
    table = _table()
    assert consistency.bold_problems(render_markdown(table), table) == []
    weak = _table()
    weak.values.loc["a", "acc"] = 0.6
    weak.cells[("a", "acc")] = _cell("M", "bench", [1 if i < 25 else 0 for i in range(40)])
    planted = render_markdown(weak).replace("| 0.600 |", "| **0.600** |")
    assert any("bold without a significant Holm test" in p for p in consistency.bold_problems(planted, weak))


def test_the_committed_sim_outputs_state_one_verdict_per_comparison() -> None:
    """Every generated text and table of figures/sim and the executed sim notebooks (the artifacts as committed)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert consistency.check(root / "figures" / "sim", root / "notebooks" / "executed" / "sim") == []


def test_the_minimum_n_table_is_the_computed_one() -> None:
    from r2mad_lab.report import inference

    for m in (1, 2, 4, 7, 12, 13, 25, 26, 30):
        assert inference.computed_minimum_n(0.05 / m) == inference.MINIMUM_N_AT_HOLM[m], m


def test_one_cutoff_per_family_and_a_planted_mismatch_is_caught() -> None:
    from r2mad_lab.report import inference

    claims_line = inference.small_sample_line(4, family=14, family_name="the claims family of 14")
    caption = inference.small_sample_line(4, what="test questions per benchmark")
    poisoning = inference.verdict(1.0, 4, "notebook 09's poisoning family (clean vs poisoned, one per cell) of 4",
                                  family_size=4)
    quoted = _comparison(n_pairs=4, n_cell=4).clause()  # a claim quoted below the cutoff: no inference in any family
    generated = {"10": claims_line, "fig": caption, "09": poisoning, "03": quoted}
    assert "below n = 19, the cutoff of notebook 09's poisoning family" in poisoning
    assert "below n = 24, the cutoff of the claims family of 14" in claims_line
    assert "below n = 15, the cutoff of a single test" in caption
    assert consistency.cutoff_problems(generated) == []
    # tiny's old mismatch: the claims family stated with a single test's cutoff in another text
    planted = dict(generated, **{"04": "Small sample: n = 4 is below n = 15, the cutoff of the claims family of 14."})
    problems = consistency.cutoff_problems(planted)
    assert any("whose cutoff (Holm level alpha / 14) is n = 24" in p for p in problems)
    assert any("'the claims family of 14' has the cutoff n = 15; 10 states n = 24" in p for p in problems)
    # a cutoff that does not name its family cannot be checked, and is a problem
    assert consistency.cutoff_problems({"x": "n = 4 is below n = 15: no inference."})
