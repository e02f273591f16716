"""Answer extraction a(.) and equivalence: real model-output failure modes, the authors' checker bugs,
math-verify equivalence, thread safety, the deadline, and a property test on random text."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2mad_core.data import answers
from r2mad_core.data.answers import (
    UnknownBenchmark,
    answers_equivalent,
    canonical_answer,
    clean_math_answer,
    extract_answer,
    is_correct,
    safe_for_symbolic,
)

MATH = "math500"
ECON = "mmlu_pro_economics"
TQA = "truthfulqa"


# ---------------------------------------------------------------------------------------------------
# MATH500 extraction
# ---------------------------------------------------------------------------------------------------

MATH_EXTRACTION_CASES = [
    # (model output, expected extracted answer)
    pytest.param(r"So $x=2$, giving \boxed{2}, actually \boxed{3}.", "3", id="last-box-wins-same-line"),
    pytest.param("First \\boxed{2}.\nRechecking the arithmetic...\nThe answer is \\boxed{3}", "3", id="last-box-wins"),
    pytest.param(r"The answer is \boxed{\frac{\sqrt{3}}{2}}.", r"\frac{\sqrt{3}}{2}", id="nested-braces"),
    pytest.param(r"\boxed{\frac{1}{1+\frac{1}{x}}}", r"\frac{1}{1+\frac{1}{x}}", id="nested-fraction"),
    pytest.param(r"The answer is \boxed {7}", "7", id="space-before-brace"),
    pytest.param(r"The answer is \boxed 5", "5", id="box-without-braces"),
    pytest.param(r"The answer is \boxed 5.", "5", id="box-without-braces-period"),
    pytest.param(r"Thus \fbox{12}", "12", id="fbox"),
    pytest.param(r"$\boxed{\boxed{4}}$", "4", id="double-box"),
    pytest.param(r"The answer is \boxed{\text{Evelyn}}", "Evelyn", id="text-wrapper"),
    pytest.param(r"The answer is \boxed{\text{(C)}}", "(C)", id="text-wrapped-choice"),
    pytest.param(r"The area is \boxed{15\text{ cm}^2}.", "15", id="unit-text-squared"),
    pytest.param(r"\boxed{864 \mbox{ inches}^2}", "864", id="unit-mbox"),
    pytest.param(r"\boxed{5\text{ apples}}", "5", id="unit-any-text-word"),
    pytest.param(r"\boxed{45^\circ}", "45", id="degrees-circ"),
    pytest.param(r"\boxed{45^{\circ}}", "45", id="degrees-circ-braced"),
    pytest.param(r"\boxed{45 degrees}", "45", id="degrees-word"),
    pytest.param(r"\boxed{12 \text{ square units}}", "12", id="square-units"),
    pytest.param(r"\boxed{25\%}", "25", id="percent"),
    pytest.param(r"\boxed{\$18.90}", "18.90", id="dollar-sign"),
    pytest.param(r"\boxed{10,\!080}", "10,080", id="thousands-thin-space"),
    pytest.param(r"\boxed{[1,2)}", "[1,2)", id="half-open-interval"),
    pytest.param(r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)", id="left-right-tuple"),
    pytest.param(
        r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}",
        id="matrix-row-break-kept"
    ),
    pytest.param(r"\boxed{2m}", "2m", id="variable-not-unit"),
    pytest.param(r"\boxed{\{1,2\}}", r"\{1,2\}", id="escaped-braces-set"),
    pytest.param(r"\boxed{x = 5}", "x = 5", id="equation-kept"),
    pytest.param("We get 12.\nThe answer is 12.", "12", id="answer-is-fallback-last-line"),
    pytest.param("The answer is $\\frac{3}{4}$.", r"\frac{3}{4}", id="answer-is-fallback-dollars"),
    pytest.param("**Final Answer:** 42", "42", id="markdown-final-answer"),
    pytest.param("The answer is 12. Then I checked more\nand more text follows", None, id="answer-is-not-at-end"),
    pytest.param("The answer is 12 because the sum of the digits is even", None, id="answer-is-followed-by-prose"),
    pytest.param(r"The answer is \boxed{[answer]}", None, id="echoed-placeholder"),
    pytest.param(r"\boxed{7} ... format: \boxed{[answer]}", "7", id="placeholder-after-real-box"),
    pytest.param(r"\boxed{}", None, id="empty-box"),
    pytest.param(r"so \boxed{5", None, id="unbalanced-truncated-box"),
    pytest.param("<think>maybe \\boxed{4}</think>\nThe answer is \\boxed{5}", "5", id="after-think-preferred"),
    pytest.param("<think>Let me see, is it \\boxed{4}? yes</think>\nSo the result follows.", "4",
                 id="think-only-answer"),
    pytest.param("", None, id="empty-text"),
    pytest.param("   \n\t ", None, id="whitespace-only"),
    pytest.param("I'm sorry, I can't help with that.", None, id="refusal"),
    pytest.param("}}}{{{\\boxed\\boxed{{", None, id="brace-garbage"),
]


@pytest.mark.parametrize(("text", "expected"), MATH_EXTRACTION_CASES)
def test_extract_math(text: str, expected: str | None) -> None:
    assert extract_answer(text, MATH) == expected


def test_extract_math_strict_format_ignores_answer_is_statement() -> None:
    assert extract_answer("The answer is 12.", MATH, strict_format=True) is None
    assert extract_answer("The answer is \\boxed{12}.", MATH, strict_format=True) == "12"


def test_extract_none_for_non_string() -> None:
    assert extract_answer(None, MATH) is None
    assert extract_answer(None, ECON) is None


def test_unknown_benchmark_is_an_error() -> None:
    with pytest.raises(UnknownBenchmark, match="gsm8k"):
        extract_answer("\\boxed{1}", "gsm8k")
    with pytest.raises(UnknownBenchmark):
        is_correct("1", "1", "MATH")


# ---------------------------------------------------------------------------------------------------
# Multiple-choice extraction
# ---------------------------------------------------------------------------------------------------

CHOICE_EXTRACTION_CASES = [
    # (model output, num_options, expected letter)
    pytest.param("I pick ((A)). Hmm, on reflection the answer is ((C))", 10, "C", id="last-wins"),
    pytest.param("((b))", 10, "B", id="lowercase"),
    pytest.param("((K))", 10, None, id="K-beyond-ten-options"),
    pytest.param("((E))", 4, None, id="E-beyond-four-options"),
    pytest.param("((D))", 4, "D", id="last-of-four"),
    pytest.param("（（Ｂ））", 10, "B", id="full-width-everything"),
    pytest.param("（（B））", 10, "B", id="full-width-parens"),
    pytest.param("(( B ))", 10, "B", id="spaces-inside"),
    pytest.param("((B. Increase in demand))", 10, "B", id="letter-dot-text"),
    pytest.param("((B) Increase in demand))", 10, "B", id="letter-paren-text"),
    pytest.param("((\\text{B}))", 10, "B", id="latex-text-letter"),
    pytest.param("((**B**))", 10, "B", id="markdown-bold-letter"),
    pytest.param("(((B)))", 10, "B", id="triple-parens"),
    pytest.param("Final answer: ((B)).", 10, "B", id="trailing-period"),
    pytest.param("Format: ((answer)). I think ((D)).", 10, "D", id="placeholder-before"),
    pytest.param("((D)). Remember to answer as ((answer))", 10, "D", id="placeholder-after"),
    pytest.param("((A or B))", 10, None, id="ambiguous"),
    pytest.param("f((x)) = 2 so ((B)), and g((t)) = 1", 10, "B", id="function-notation-skipped"),
    pytest.param("Option (a) is wrong.\nThe answer is (C).", 10, "C", id="fallback-answer-is-last-line"),
    pytest.param("**Answer: (c)**", 10, "C", id="fallback-markdown"),
    pytest.param("Reasoning...\n\\boxed{E}", 10, "E", id="fallback-boxed-letter"),
    pytest.param("Reasoning...\n\\boxed{E}", 4, None, id="fallback-boxed-out-of-range"),
    # The authors' last-resort rule (any "(X)") for capitals only: lower-case letters in prose are mentions.
    pytest.param("Option (a) and option (b) are both plausible, I need more facts.", 10, None,
                 id="single-parens-in-prose"),
    pytest.param("Option (a) is wrong because ...; I am unsure.", 10, None, id="hedge-names-no-answer"),
    pytest.param("Options (A) and (B) fail, so it must be (D)", 10, "D", id="single-parens-capital"),
    pytest.param("The answer is a bit tricky to pin down", 10, None, id="article-a-not-an-answer"),
    pytest.param("<think>((A)) no wait</think>((C))", 10, "C", id="after-think"),
    pytest.param("", 10, None, id="empty"),
    pytest.param("nothing here at all", 10, None, id="no-answer"),
]


@pytest.mark.parametrize(("text", "num_options", "expected"), CHOICE_EXTRACTION_CASES)
def test_extract_choice(text: str, num_options: int, expected: str | None) -> None:
    assert extract_answer(text, ECON, num_options) == expected
    assert extract_answer(text, TQA, num_options) == expected


def test_extract_choice_default_allows_a_to_j() -> None:
    assert extract_answer("((J))", ECON) == "J"
    assert extract_answer("((K))", ECON) is None


def test_extract_choice_strict_format() -> None:
    assert extract_answer("The answer is (C).", ECON, 10, strict_format=True) is None
    assert extract_answer("The answer is ((C)).", ECON, 10, strict_format=True) == "C"


def test_num_options_is_validated() -> None:
    with pytest.raises(ValueError, match="num_options"):
        extract_answer("((A))", ECON, 0)
    with pytest.raises(ValueError, match="num_options"):
        extract_answer("((A))", ECON, 27)


# ---------------------------------------------------------------------------------------------------
# The authors' checker (KylJin/R2-MAD src/checker.py): its patterns, reduced to what is compared here
# ---------------------------------------------------------------------------------------------------


def _greedy_boxed(text: str) -> str | None:
    """The greedy same-line box pattern of the authors' checker (reference for the failure modes)."""
    found = re.findall(r"\\boxed\{(.*)\}", text)
    return found[-1] if found else None


def _single_paren_fallback(text: str) -> str | None:
    """The authors' multiple-choice rule: ((X)) with X in A-J, else any (X) anywhere."""
    found = re.findall(r"\(\(([Ａ-ＪA-Ja-j])\)\)", text) or re.findall(r"\(([Ａ-ＪA-Ja-j])\)", text)
    return found[-1].upper() if found else None


@pytest.mark.parametrize(
    ("text", "ours"),
    [
        (r"\boxed{2}, actually \boxed{3}", "3"),
        (r"We get \boxed{5} and the other root {6} is rejected", "5"),
        (r"\boxed{\frac{1}{2}} (since $x \neq 0$, the set {0} is excluded)", r"\frac{1}{2}"),
    ],
)
def test_greedy_box_bug_not_reproduced(text: str, ours: str) -> None:
    assert _greedy_boxed(text) != ours
    assert extract_answer(text, MATH) == ours


@pytest.mark.parametrize(
    ("text", "ours"),
    [
        ("((C)) is my answer. Note that (e) was a distractor.", "C"),  # theirs: ((C)) found, fine
        ("(( C ))", "C"),  # theirs: no space allowed -> falls back to nothing / wrong
        ("（（B））", "B"),  # theirs: full-width parentheses not matched
        ("I choose ((B. Supply shifts))", "B"),  # theirs: only a bare letter inside
    ],
)
def test_single_paren_fallback_bugs_not_reproduced(text: str, ours: str | None) -> None:
    assert extract_answer(text, ECON, 10) == ours


def test_authors_fallback_takes_prose_letters_we_do_not() -> None:
    text = "Option (a) is wrong and (b) too, so I am unsure."
    assert _single_paren_fallback(text) == "B"  # theirs: an answer
    assert answers.extract_answer_with_source(text, ECON, 10) == (None, None)
    assert _single_paren_fallback("Option (a) is wrong because ...; I am unsure.") == "A"
    assert extract_answer("Option (a) is wrong because ...; I am unsure.", ECON, 10) is None
    assert answers.extract_answer_with_source("So (C) holds, (A) fails", ECON, 10) == ("A", "parenthesis")
    assert _single_paren_fallback("(( C ))") is None and extract_answer("(( C ))", ECON, 10) == "C"


def test_order_matters_unlike_authors_unordered_tuples() -> None:
    # The authors compared tuples as sorted parts, so (1,2) == (2,1) and [1,2) == (1,2].
    assert not is_correct("(2,1)", "(1,2)", MATH)
    assert not is_correct("(1,2]", "[1,2)", MATH)
    assert not is_correct("(31,6,-1)", "(6,31,-1)", MATH)
    assert is_correct("(6, 31, -1)", "(6,31,-1)", MATH)


# ---------------------------------------------------------------------------------------------------
# Equivalence and correctness
# ---------------------------------------------------------------------------------------------------

MATH_EQUIVALENCE_CASES = [
    # (gold, predicted, expected is_correct)
    pytest.param(r"\frac{1}{2}", "0.5", True, id="fraction-decimal"),
    pytest.param(r"\frac{1}{2}", r"\dfrac12", True, id="dfrac-unbraced"),
    pytest.param(r"\frac{14}{3}", "14/3", True, id="slash-fraction"),
    pytest.param(r"3\sqrt{13}", r"\sqrt{117}", True, id="surd"),
    pytest.param("x=5", "5", True, id="assignment-gold"),
    pytest.param("1,-2", "-2, 1", True, id="solution-set-unordered"),
    pytest.param(r"\left( 3, \frac{\pi}{2} \right)", r"(3, \pi/2)", True, id="tuple-left-right"),
    pytest.param("(3,4]", "(3,4)", False, id="interval-closedness"),
    pytest.param(r"(-\infty, 0]", r"(-\infty,0)", False, id="interval-infinity"),
    pytest.param(r"\text{(C)}", "C", True, id="choice-letter"),
    pytest.param(r"\text{(C)}", "(C)", True, id="choice-letter-parens"),
    pytest.param(r"\text{(C)}", "B", False, id="choice-letter-wrong"),
    pytest.param(r"90^\circ", "90", True, id="degrees"),
    pytest.param(r"\$32,\!348", "32348", True, id="dollars-thousands"),
    pytest.param(r"10,\!080", "10080", True, id="thousands"),
    pytest.param(r"1 \pm \sqrt{19}", r"1+\sqrt{19}, 1-\sqrt{19}", True, id="plus-minus"),
    pytest.param("p - q", "-q + p", True, id="commutative"),
    pytest.param("2k+2", "2(k+1)", True, id="factored"),
    pytest.param(r"\frac{270}7\text{ degrees}", r"\frac{270}{7}", True, id="unit-in-gold"),
    pytest.param(r"5.4 \text{ cents}", "5.4", True, id="cents"),
    pytest.param(r"\text{Evelyn}", "evelyn", True, id="name-case"),
    pytest.param(r"\text{Evelyn}", "Navin", False, id="name-wrong"),
    pytest.param(r"x \in [-2,7]", "[-2, 7]", True, id="membership-interval"),
    pytest.param(
        r"\begin{pmatrix} -1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 2 \\ -1 \end{pmatrix}", False, id="vector-order"
    ),
    pytest.param(r"\begin{pmatrix} -1/3 \\ 2/3 \end{pmatrix}", r"\begin{pmatrix} -\frac13 \\ \frac23 \end{pmatrix}",
                 True, id="vector"),
    pytest.param("6 - 5i", "6-5i", True, id="complex"),
    pytest.param("2", "3", False, id="different-integers"),
    pytest.param(r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt{3}}{3}", False, id="different-surds"),
]


@pytest.mark.parametrize(("gold", "predicted", "expected"), MATH_EQUIVALENCE_CASES)
def test_math_is_correct(gold: str, predicted: str, expected: bool) -> None:
    assert is_correct(predicted, gold, MATH) is expected
    # Equivalence for votes is symmetric and agrees with correctness on these pairs.
    assert answers_equivalent(gold, predicted, MATH) is expected
    assert answers_equivalent(predicted, gold, MATH) is expected


def test_missing_answer_is_never_correct() -> None:
    for benchmark, gold in ((MATH, "5"), (ECON, "A"), (TQA, "A")):
        assert not is_correct(None, gold, benchmark)
        assert not is_correct("", gold, benchmark)
        assert not answers_equivalent(None, None, benchmark)
        assert not answers_equivalent(None, gold, benchmark)


def test_choice_correctness() -> None:
    assert is_correct("b", "B", ECON)
    assert is_correct("（Ｂ）", "B", TQA)
    assert not is_correct("C", "B", ECON)
    assert answers_equivalent("b", "B", ECON)
    assert not answers_equivalent("A", "B", TQA)
    assert not is_correct("AB", "A", ECON)


@pytest.mark.parametrize(
    ("answer", "canonical"),
    [
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\frac12", r"\frac{1}{2}"),
        (r"\tfrac{3}{4}", r"\frac{3}{4}"),
        ("0.50", "0.5"),
        (".5", "0.5"),
        ("18.90", "18.9"),
        ("1,000", "1000"),
        (r"10,\!080", "10080"),
        ("(C)", "C"),
        (r"\text{Evelyn}", "evelyn"),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"),
        (r"\sqrt2", r"\sqrt{2}"),
        ("x = 5", "x=5"),
        ("2m", "2m"),
    ],
)
def test_canonical_math(answer: str, canonical: str) -> None:
    assert canonical_answer(answer, MATH) == canonical


def test_canonical_choice() -> None:
    assert canonical_answer("b", ECON) == "B"
    assert canonical_answer("（Ｂ）", TQA) == "B"
    assert canonical_answer(None, ECON) == ""


def test_clean_math_answer_keeps_whole_text_answers_and_strips_wrappers() -> None:
    assert clean_math_answer(r"$\text{east}$") == "east"
    assert clean_math_answer(r"\(\frac{1}{2}\).") == r"\frac{1}{2}"
    assert clean_math_answer(r"\text{a} + \text{b}") == r"\text{a} + \text{b}"


# ---------------------------------------------------------------------------------------------------
# Real data: every MATH500 reference solution is parsed back to its own answer
# ---------------------------------------------------------------------------------------------------


def _math500_rows() -> list[dict]:
    """MATH500's 500 rows: from $R2MAD_DATA_DIR when set, else the file shipped in the package (sha256-checked)."""
    from r2mad_core.data import sources

    data_dir = sources.resolve_data_dir()
    _, path = sources.locate("math500", data_dir)
    with sources.open_text(path) as handle:
        return [json.loads(line) for line in handle.read().splitlines() if line.strip()]


def test_every_math500_solution_yields_its_answer() -> None:
    rows = _math500_rows()
    assert len(rows) == 500
    failures = []
    for row in rows:
        extracted = extract_answer(row["solution"], MATH)
        if not is_correct(extracted, row["answer"], MATH):
            failures.append((row["unique_id"], extracted, row["answer"]))
    assert failures == []
    # And no two different integer answers are ever judged equal.
    integers = sorted({row["answer"] for row in rows if re.fullmatch(r"-?\d+", row["answer"])}, key=int)
    assert not any(is_correct(a, b, MATH) for a, b in zip(integers, integers[1:], strict=False))


# ---------------------------------------------------------------------------------------------------
# Pathological expressions, the deadline, threads (the deadline itself: tests/data/test_deadline.py)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [r"9^{9^{9^{9}}}", r"2^{2^{30}}", r"1000000!", r"(10^{100})!", r"\sum_{k=1}^{10^9} k", r"10^{100000}",
     "(" * 30 + "1" + ")" * 30, "1+" * 150 + "1"],
)
def test_pathological_answers_skip_symbolic_comparison(answer: str) -> None:
    assert not safe_for_symbolic(answer)
    assert not is_correct(answer, "1", MATH)
    assert is_correct(answer, answer, MATH)  # identical strings still agree by normal form


@pytest.mark.parametrize("answer", [r"\frac{\sqrt{3}}{2}", "x^{2}+1", "2^{10}", r"\left( 3, \frac{\pi}{2} \right)",
                                    "120!"])
def test_ordinary_answers_are_safe(answer: str) -> None:
    assert safe_for_symbolic(answer)


def test_slow_symbolic_comparison_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "SYMBOLIC_TIMEOUT_SECONDS", 0.3)
    answers.clear_caches()
    try:
        slow = r"(\sqrt{2}+\sqrt{3}+\sqrt{5}+\sqrt{7})^{100}"  # minutes of sympy without a deadline
        assert safe_for_symbolic(slow)
        assert answers_equivalent(slow, "1", MATH) is False
    finally:
        answers.clear_caches()


def test_equivalence_from_worker_threads() -> None:
    """math-verify's signal timeouts raise ValueError outside the main thread; ours must not."""
    answers.clear_caches()
    pairs = [(r"\frac{1}{2}", "0.5", True), ("(1,2)", "(2,1)", False), (r"3\sqrt{13}", r"\sqrt{117}", True),
             ("2k+2", "2(k+1)", True)]
    results: list[bool] = []

    def check(pair: tuple[str, str, bool]) -> bool:
        assert threading.current_thread() is not threading.main_thread()
        return is_correct(pair[1], pair[0], MATH)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(check, pairs))
    assert results == [expected for _, _, expected in pairs]


# ---------------------------------------------------------------------------------------------------
# Property test
# ---------------------------------------------------------------------------------------------------

_ALPHABET = st.sampled_from(list("\\{}()（）[]$^_ .,:;!?%ABCDEFGHIJKabcxyz0123456789\n\t") + [
    "\\boxed", "\\fbox", "((", "))", "\\text{", "</think>", "answer is ", "\\frac", "\\left(", "\\right)", "^\\circ"])


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=300), st.lists(_ALPHABET, max_size=80).map("".join)),
    st.sampled_from(["math500", "mmlu_pro_economics", "mmlu_pro_engineering", "truthfulqa"]),
    st.one_of(st.none(), st.integers(min_value=1, max_value=26)),
)
def test_extract_answer_never_raises(text: str, benchmark: str, num_options: int | None) -> None:
    result = extract_answer(text, benchmark, num_options)
    assert result is None or (isinstance(result, str) and result.strip() == result and result)
    if result is not None and benchmark != "math500":
        assert result in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: num_options or 10]


# ---------------------------------------------------------------------------------------------------
# Issue 22 section 3: answers graded as the paper means (each case failed before the fix)
# ---------------------------------------------------------------------------------------------------

# A Qwen-style MATH500 ending for "Find all real x with x^2 + x - 2 = 0" (gold "1,-2").
_TWO_ROOTS = (
    "We factor the quadratic: $x^2 + x - 2 = (x + 2)(x - 1)$.\n\n"
    "Setting each factor equal to zero gives $x = -2$ or $x = 1$.\n\n"
    "**Final Answer**\nThe solutions are $\\boxed{-2}$ and $\\boxed{1}$."
)


@pytest.mark.parametrize(
    ("response", "gold", "extracted"),
    [
        pytest.param(_TWO_ROOTS, "1,-2", "-2, 1", id="two-roots-and"),
        pytest.param(
            "The positive divisors of 6 that are less than 4 are 1, 2 and 3.\n\nThe answer is "
            "$\\boxed{1},\\boxed{2},\\boxed{3}$",
            "\\{1,2,3\\}",
            "1, 2, 3",
            id="comma-separated-boxes",
        ),
        pytest.param(
            "Both orders satisfy the system, so the ordered pairs are\n$$\\boxed{(1, 2)}$$\n$$\\boxed{(2, 1)}$$",
            "(1,2),(2,1)",
            "(1, 2), (2, 1)",
            id="boxed-pairs-one-per-line",
        ),
        pytest.param(
            "so $x = \\boxed{3} \\text{ or } x = \\boxed{-5}$ -- no: the roots are $\\boxed{3}$ \\quad $\\boxed{-5}$",
            "3, -5",
            "3, -5",
            id="quad-separated",
        ),
    ],
)
def test_several_boxes_of_one_final_answer_are_read_together(response: str, gold: str, extracted: str) -> None:
    assert extract_answer(response, MATH) == extracted
    assert is_correct(extract_answer(response, MATH), gold, MATH)


@pytest.mark.parametrize(
    ("response", "extracted"),
    [
        pytest.param(r"So $x=2$, giving \boxed{2}, actually \boxed{3}.", "3", id="correction-keeps-last"),
        pytest.param("Thus $a = \\boxed{3}$, and so $a + 4 = \\boxed{7}$.", "7", id="intermediate-box"),
        pytest.param("The answer is $\\boxed{5}$.\n\n$$\\boxed{5}$$", "5", id="same-answer-boxed-twice"),
        pytest.param("The answer is $\\boxed{\\frac{1}{2}}$, or $\\boxed{0.5}$.", r"\frac{1}{2}",
                     id="same-value-two-forms"),
    ],
)
def test_boxes_divided_by_words_or_repeats_stay_one_answer(response: str, extracted: str) -> None:
    assert extract_answer(response, MATH) == extracted


@pytest.mark.parametrize(
    ("predicted", "gold"),
    [("32, 349", "32349"), ("2, 128", "2128"), ("1, 000", "1000"), ("12,34", "1234"), ("1,0000", "10000")],
)
def test_a_list_is_not_a_number_with_thousands_separators(predicted: str, gold: str) -> None:
    # From "\boxed{32, 349}" (two answers) against the gold 32349: a comma with a space after it, or
    # groups that are not exactly three digits, separate list items.
    assert not is_correct(predicted, gold, MATH)
    assert not answers_equivalent(predicted, gold, MATH)
    assert canonical_answer(predicted, MATH) != canonical_answer(gold, MATH)


@pytest.mark.parametrize(("predicted", "gold"), [(r"11,\! 111,\! 111,\! 100", "11111111100"), (r"32,\! 349", "32349"),
                                                 (r"32,\!349", "32349"), (r"1,\!000", "1000")])
def test_a_comma_with_a_negative_space_is_a_thousands_separator_whatever_follows(predicted: str, gold: str) -> None:
    # MATH's notation: ",\!" marks a thousands separator, also with a space after the \! (the grader's own cases).
    assert is_correct(predicted, gold, MATH)
    assert answers_equivalent(predicted, gold, MATH)
    assert canonical_answer(predicted, MATH) == gold
    assert is_correct(extract_answer(rf"The answer is $\boxed{{{predicted}}}$.", MATH), gold, MATH)


def test_thousands_separators_still_read_as_one_number() -> None:
    assert extract_answer(r"The total is $\boxed{32,349}$ dollars.", MATH) == "32,349"
    assert is_correct("32,349", "32349", MATH)
    assert is_correct(r"32{,}349", "32349", MATH)
    assert is_correct(r"-1,000,000", "-1000000", MATH)
    assert canonical_answer("1,234.50", MATH) == "1234.5"


@pytest.mark.parametrize(
    "answer",
    [
        r"\sum_{k=1}^{n} k^2",
        r"\prod_{k=1}^{5} \left(1 + \frac{1}{k}\right)",
        r"\int_0^1 x^2 \, dx",
        r"\lim_{x \to 0} \frac{\sin x}{x}",
        r"\sum\limits_{n=1}^{\infty} \frac{1}{n^2}",
    ],
)
def test_sums_products_integrals_limits_are_compared_under_the_deadline(answer: str) -> None:
    assert safe_for_symbolic(answer)  # no screen: the symbolic comparison has a deadline (SYMBOLIC_TIMEOUT_SECONDS)
    assert is_correct(answer, answer, MATH)
    assert not is_correct(answer, "x + 7", MATH)


def test_a_sum_with_its_factors_swapped_is_the_same_answer() -> None:
    ours = r"F_n = \sum_{k=0}^{n-1} F_k F_{n-k-1}"
    assert answers_equivalent(ours, r"F_n = \sum_{k=0}^{n-1} F_{n-k-1} F_k", MATH)
    assert is_correct(r"F_n = \sum_{k=0}^{n-1} F_{n-k-1} F_k", ours, MATH)
    assert not answers_equivalent(ours, r"F_n = \sum_{k=0}^{n-1} F_{n-k} F_k", MATH)


# An MMLU-Pro Economics response that names its letter without ((X)), the explanation on the same line.
_LONG_LAST_LINE = (
    "Let's think step by step. A price floor set above the equilibrium price makes the quantity supplied "
    "exceed the quantity demanded.\n\n"
    "The answer is (C) because a binding price floor creates a persistent surplus: producers are willing "
    "to sell more at the higher legal price than consumers are willing to buy, and since the price cannot "
    "fall to clear the market, the excess supply remains, which is exactly what option (C) describes, "
    "whereas options (A), (B) and (D) describe a shortage, a shift in demand, or an effect on the "
    "equilibrium quantity that a floor below the equilibrium price would have, not one above it."
)
_STATEMENT_THEN_EXPLANATION = (
    "The marginal propensity to consume is 0.8, so the multiplier is 1 / (1 - 0.8) = 5.\n\n"
    "The correct answer is C.\n\n"
    "Explanation: an increase in government spending of $10 billion raises equilibrium output by "
    "5 x 10 = $50 billion; the other options use the tax multiplier or forget the induced consumption."
)


@pytest.mark.parametrize(
    ("response", "source", "authors"),
    [
        # The authors' checker takes the last "(X)" of the text, here "(D)" from "options (A), (B) and (D)";
        # the statement "The answer is (C)" comes first here (ours).
        pytest.param(_LONG_LAST_LINE, "statement", "D", id="long-last-line"),
        # The authors' checker needs parentheses; a bare "C." is accepted here too (ours).
        pytest.param(_STATEMENT_THEN_EXPLANATION, "statement", None, id="explanation-after-statement"),
        pytest.param(
            "Working through the options, (A) and (B) fail; the one that holds is (C)", "parenthesis", "C",
            id="authors-parenthesis"
        ),
    ],
)
def test_choice_stated_without_double_parentheses_is_accepted_and_counted(response: str, source: str,
                                                                          authors: str | None) -> None:
    assert _single_paren_fallback(response) == authors
    assert extract_answer(response, ECON, 10) == "C"
    assert answers.extract_answer_with_source(response, ECON, 10) == ("C", source)
    assert answers.extract_answer_with_source(response, ECON, 10, strict_format=True) == (None, None)
    assert source in answers.FALLBACK_SOURCES


def test_answer_sources_of_the_prompt_format_and_the_last_line() -> None:
    assert answers.extract_answer_with_source("so the answer is ((B))", ECON, 10) == ("B", "format")
    assert answers.extract_answer_with_source("Reasoning...\nThe answer is (B).", ECON, 10) == ("B", "final_line")
    assert answers.extract_answer_with_source("The answer is \\boxed{12}", MATH) == ("12", "format")
    assert answers.extract_answer_with_source("We get 12.\nThe answer is 12.", MATH) == ("12", "final_line")
    assert answers.extract_answer_with_source("((K))", ECON, 10) == (None, "format")
    assert answers.extract_answer_with_source("no letter here", ECON, 10) == (None, None)
    # A statement naming a letter beyond the options is an invalid answer, not a reason to look further.
    assert (answers.extract_answer_with_source("The answer is (E), clearly, given all of the above.\nDone.", TQA, 4)
            == (None, "statement"))


def test_answer_sources_are_memoised_and_cleared_with_the_others() -> None:
    """extract_answer and extract_answer_with_source share one memo, whatever the spelling of their arguments (the
    debate loop, the simulated agents and the metrics pass num_options by keyword or by position; issue 35)."""
    answers.clear_caches()
    text = "Reasoning...\nThe answer is (B)."
    direct = answers._extracted.__wrapped__(text, ECON, 10, False)
    assert answers.extract_answer_with_source(text, ECON, 10) == direct == ("B", "final_line")
    assert answers.extract_answer_with_source(text, ECON, num_options=10) == direct
    assert (answers.extract_answer(text, ECON, 10) == answers.extract_answer(text, ECON, num_options=10,
                                                                             strict_format=False) == "B")
    assert answers._extracted.cache_info().hits == 3 and answers._extracted.cache_info().misses == 1
    assert answers.extract_answer_with_source(text, ECON, 10, strict_format=True) == (None, None)  # another key
    answers.clear_caches()
    assert answers._extracted.cache_info().currsize == 0
    with pytest.raises(ValueError):  # errors are raised on every call, not remembered
        answers.extract_answer(text, ECON, num_options=0)
    with pytest.raises(answers.UnknownBenchmark):
        answers.extract_answer_with_source(text, "nope")


_INTEGER_PAIRS = [("5", "2"), ("-7", "4"), ("841", "842"), ("0", "1"), ("0", "-1"), ("1", "-1"), ("100", "1"),
                  ("5", "50"), ("9", "90"), ("2107", "2103"), ("25165", "2516"), ("7", "7"), ("-7", "-7"), ("0", "0"),
                  (str(2 ** 53), str(2 ** 53 + 1)), (str(10 ** 15), str(10 ** 15 + 1)),
                  ("123456789012345678901234567890", "123456789012345678901234567891"),
                  ("123456789012345678901234567890", "123456789012345678901234567890")]


@pytest.mark.parametrize("gold,predicted", _INTEGER_PAIRS)
def test_two_plain_integers_get_math_verifys_own_verdict_without_it(gold: str, predicted: str) -> None:
    """Two plain integers are compared as strings (issue 35: two thirds of the default run's comparisons): the verdict
    is math-verify's, which parses each to [Integer(n), "n"] (checked here) and compares every pair."""
    import sympy
    from math_verify import verify

    assert answers._PLAIN_INTEGER.fullmatch(gold) and answers._PLAIN_INTEGER.fullmatch(predicted)
    for text in (gold, predicted):
        parsed = answers._parsed_here(text)  # the worker's parse, here
        assert len(parsed) == 2 and isinstance(parsed[0], sympy.Integer) and parsed[1] == text
    real = bool(verify(list(answers._parsed_here(gold)), list(answers._parsed_here(predicted)), timeout_seconds=None))
    answers._verified.cache_clear()
    assert answers._verified(gold, predicted) is real is (gold == predicted)


@pytest.mark.parametrize("text", ["007", "-0", "+5", "1,000", "1 000", "5.0", "٣", "10^3", "2!", ""])
def test_what_is_not_a_plain_integer_goes_to_math_verify(text: str) -> None:
    assert not answers._PLAIN_INTEGER.fullmatch(text)


def _grading_corpus_outputs() -> list:
    """Extraction, cleaning, normal forms and the screen on texts made from the packaged benchmark files (MATH500
    solutions and answers, MMLU-Pro and TruthfulQA options) in many formats: the public functions only."""
    import json
    import random

    from r2mad_core.data import sources

    def rows(name: str) -> list:
        text = sources._packaged_bytes(sources.PACKAGED_DATA_DIR / name).decode("utf-8")
        return (json.loads(text) if name.endswith(".json.gz")
                else [json.loads(line) for line in text.splitlines() if line.strip()])

    rng = random.Random(35)
    out: list = []
    math_rows = rows("math500/test.jsonl.gz")
    for row in math_rows:
        gold, solution = row["answer"], row["solution"]
        texts = [solution, f"The answer is \\boxed{{{gold}}}.", f"So we get {gold}.\nThe answer is ${gold}$",
                 f"\\boxed{{{gold}}} and \\boxed{{{gold}}}", f"We find \\fbox{{{gold}}} \\text{{ cm}}.",
                 f"<think>\\boxed{{1}}</think> The final answer: {gold}", f"$\\boxed{{\\text{{{gold}}}}}$ units",
                 solution[: len(solution) // 2], f"**Answer:** {gold}%"]
        for text in texts:
            for strict in (False, True):
                out.append(answers.extract_answer_with_source(text, MATH, strict_format=strict))
            for benchmark, options in ((ECON, 10), (TQA, 4), (ECON, None)):
                out.append(answers.extract_answer_with_source(text, benchmark, options))
        extracted = answers.extract_answer(solution, MATH)
        out.append((answers.clean_math_answer(gold), answers.canonical_answer(gold, MATH),
                    answers.safe_for_symbolic(gold),
                    answers.canonical_answer(extracted, MATH), answers.is_correct(gold, gold, MATH)))
    letters = "ABCDEFGHIJ"
    for name in ("mmlu_pro/test_economics.jsonl.gz", "mmlu_pro/test_engineering.jsonl.gz"):
        for row in rows(name)[:300]:
            options, gold = row["options"], row["answer"]
            letter = rng.choice(letters[: len(options)])
            option = options[letters.index(letter)]
            texts = [f"{option}. The answer is (({letter})).", f"The answer is (({letter}. {option}))",
                     f"I think (({letter.lower()}))", f"（（{letter}））", f"Answer: {letter}.\nDone, {option}",
                     f"The correct answer is option {letter} because {option}",
                     f"Option ({letter}) fits; (a) does not.",
                     f"{row['question']}\n\\boxed{{{letter}}}", f"(({letter} or {gold}))", f"((K)) {option}"]
            for text in texts:
                for options_count in (None, len(options), 4):
                    out.append(answers.extract_answer_with_source(text, ECON, options_count))
                out.append(answers.extract_answer_with_source(text, ECON, len(options), strict_format=True))
            out.append((answers.canonical_answer(f"(({letter}))", ECON), answers.is_correct(letter, gold, ECON),
                        answers.answers_equivalent(letter, gold, ECON), answers.canonical_answer(option, ECON)))
    for row in rows("truthfulqa/mc_task.json.gz")[:200]:
        for k, choice in enumerate(list(row["mc1_targets"])[:5]):
            out.append(answers.extract_answer_with_source(f"{choice} So (({letters[k]})).", TQA,
                                                          len(row["mc1_targets"])))
    return out


#: sha256 of repr(_grading_corpus_outputs()) as the implementation before issue 35 gave it (r2mad_core at 615825d, run
#: with this function): precompiled patterns and the memos must not change a single answer, source or normal form.
_GRADING_CORPUS = (48487, "ee64a4f778cdb45f129ab3eee228cad8bd216d32f1eae54d224239fbea38f9bd")


def test_grading_a_corpus_of_real_texts_gives_what_it_gave_before_issue_35() -> None:
    import hashlib

    answers.clear_caches()
    outputs = _grading_corpus_outputs()
    digest = hashlib.sha256(repr(outputs).encode("utf-8")).hexdigest()
    assert (len(outputs), digest) == _GRADING_CORPUS
    assert _grading_corpus_outputs() == outputs  # again, from the memos
