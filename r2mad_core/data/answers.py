"""Answer extraction a(.) and answer equivalence (Section 3 "Preliminary", Eq. 1-3; Appendix "Prompts").

The paper writes an agent's answer as a(r) for a response r: the debate's consensus (Eq. 2-3), the
majority vote and the memory's correctness labels (Eq. 4) all compare a(r) across agents and with
the gold answer. The prompts fix the formats: MATH500 responses end with ``The answer is \\boxed{X}``;
multiple-choice responses give ``((X))`` with X an option letter.

Extraction (:func:`extract_answer`):

* MATH500: the content of the **last** ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces (nested
  braces, ``\\boxed {x}``, ``\\boxed 5``), ignoring empty boxes and echoed placeholders such as
  ``\\boxed{[answer]}``. A final answer boxed in parts (``\\boxed{-2} and \\boxed{1}``,
  ``\\boxed{1},\\boxed{2},\\boxed{3}``, one box per line) is read as one list: the last box and the
  boxes before it that only separators divide from it (spaces, ``$``, commas, "and"/"or", ``\\quad``),
  repeats dropped, joined by ", "; a word between boxes (``\\boxed{2}, actually \\boxed{3}``) keeps
  the last box alone. With no box, a "The answer is X" statement on the last line. The answer is
  cleaned: ``\\text{}`` wrappers, units (``\\text{ cm}``, ``^\\circ``, degrees), ``\\%``, ``\\$`` and a
  trailing period are removed.
* Multiple choice: the **last** ``((X))`` (any case, full-width parentheses, spaces inside, or
  ``((B. text))`` / ``((B) text))``), restricted to the question's option letters; an out-of-range last
  letter gives None. With no ``((X))`` and unless ``strict_format=True``, three fallbacks in turn:
  a "The answer is (B)" / ``\\boxed{B}`` on the last line; the last such statement anywhere (a long last
  line, an explanation after it); the last single-parenthesised capital letter ``(X)``, X in A-J, anywhere:
  the rule of the authors' checker (KylJin/R2-MAD ``src/checker.py``, ``MMLUProChecker.parse_answer``),
  except that a lower-case ``(a)`` there is an enumeration or a mention, not an answer
  (``Option (a) is wrong because ...; I am unsure.`` has none; theirs reads ``a``).
* :func:`extract_answer_with_source` also says which rule gave the answer (:data:`ANSWER_SOURCES`);
  answers from a fallback are counted per run cell (``completion_health``: ``answer_fallback``).
* Text after a closing ``</think>`` is searched first; the whole text only if it holds no answer.

The authors' checker (KylJin/R2-MAD ``src/checker.py``) used a greedy one-line regex
``\\\\boxed\\{(.*)\\}`` (so ``\\boxed{2}, actually \\boxed{3}`` gives ``2}, actually \\boxed{3``), no
option-range check, and an *unordered* tuple comparison (so ``(1,2)`` equals ``(2,1)`` and ``[1,2)``
equals ``(1,2]``). This module does none of those; the tests show each case. Its single-parenthesis
fallback ``(X)`` anywhere in the text is kept, last and counted, for capital letters: without it a response
that states its letter without ``((X))`` would count as unanswered here and as answered in the paper's
numbers; a lower-case "option (a)" in hedging prose is not read as an answer.

Equivalence (:func:`answers_equivalent`, :func:`is_correct`): a cheap normal form
(:func:`canonical_answer`) first, then ``math_verify`` (parse + verify; ``\\frac{1}{2}``, ``0.5`` and
``\\dfrac12`` agree; ordered tuples and intervals keep their order); two plain integers (``-12``, ``841``) are
equivalent only as the same string, which is math-verify's verdict on them, given without it. Results are memoised
with ``functools.lru_cache`` (the symbolic steps, cleaning and normal forms, and the public functions, which are pure
in their string arguments; both extraction functions share one memo; :func:`clear_caches` empties them all).

Pathological expressions cannot hang a run. (1) A screen (:func:`safe_for_symbolic`): answers longer
than :data:`MAX_ANSWER_CHARS`, power towers, exponents or factorials of four digits or more and deep nesting
are compared by normal form only (sums, products, integrals and limits are compared symbolically, under the
deadline). (2) Every math-verify parse and comparison has a deadline of
:data:`SYMBOLIC_TIMEOUT_SECONDS` of CPU time (so a verdict does not depend on the machine's load).
math-verify's own timeouts use ``signal.alarm`` and raise ValueError outside the main thread, so they are switched off
(``parsing_timeout=None``, ``timeout_seconds=None``) and replaced by a deadline that works in any thread
(:func:`r2mad_core.data.deadline.with_deadline`: a worker process that the kernel ends at the deadline, which
keeps the parsed expressions); out of time is "not equivalent".
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata

from r2mad_core.data import verdicts
from r2mad_core.data.benchmarks import BENCHMARKS, MULTIPLE_CHOICE_BENCHMARKS
from r2mad_core.data.deadline import renew_deadline as _renew_deadline
from r2mad_core.data.deadline import with_deadline as _with_deadline

logger = logging.getLogger(__name__)


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeouts are off; they are, on purpose (see _with_deadline)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())

#: Longest answer (characters, after cleaning) that is compared symbolically.
MAX_ANSWER_CHARS = 200
#: Longest text scanned for an answer: a longer response is cut to its last this-many characters.
MAX_RESPONSE_CHARS = 200_000
#: Time limit (CPU seconds of the worker process, not wall time) of one symbolic parse and of one symbolic
#: comparison, in any thread (r2mad_core.data.deadline).
SYMBOLIC_TIMEOUT_SECONDS = 5.0
#: Letters the multiple-choice prompts allow when the number of options is not given (A-J).
DEFAULT_NUM_OPTIONS = 10
#: Deepest bracket nesting accepted for symbolic comparison.
MAX_NESTING = 12
#: Size of the memo tables of parsing and of equivalence.
CACHE_SIZE = 1 << 16

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Where an extracted answer came from: the prompts' format (``\\boxed{}``, ``((X))``), the last line's
#: statement, a statement anywhere (multiple choice), or the authors' single-parenthesis rule.
ANSWER_SOURCES = ("format", "final_line", "statement", "parenthesis")
#: The sources that are a fallback (not the format the prompt asked for).
FALLBACK_SOURCES = frozenset(ANSWER_SOURCES[1:])
_PLACEHOLDERS = {"", "answer", "[answer]", "{answer}", "...", "\\ldots", "\\dots", "final answer"}
_TEXT_COMMANDS = ("text", "textbf", "textit", "textrm", "textnormal", "mbox", "mathrm", "mathbf", "operatorname")
# Words that can follow a number as a unit. Inside \text{...} any word(s) after a number are dropped;
# bare words (no \text) only from this list and only after a space, so "2m" or "5s" stay algebra.
_PLAIN_UNIT_WORDS = (
    "square units|sq units|units|square inches|square feet|square meters|square centimeters|square cm|"
    "sq ft|sq in|inches|inch|feet|foot|ft|yards|yard|miles|mph|meters|centimeters|cm|millimeters|mm|"
    "kilometers|km|kg|grams|pounds|lbs|ounces|liters|degrees|degree|radians|dollars|dollar|cents|cent|"
    "hours|hrs|minutes|mins|seconds|secs|days|weeks|years|people|students|ways|times|percent"
)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
_BOX_START = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_DOUBLE_PARENS = re.compile(r"\(\(([^\n]{0,160}?)\)\)")
_TRAILING_UNIT_TEXT = re.compile(
    r"(?<=[\d}])\s*(?:\\[,;:! ]|~)?\s*\\(?:" + "|".join(_TEXT_COMMANDS) + r")\s*\{\s*[A-Za-z][A-Za-z .]*\}"
    r"\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$"
)
_TRAILING_UNIT_WORD = re.compile(
    r"(?<=[\d}])(?:\s+|\s*\\[,;:! ]\s*|\s*~\s*)(?:" + _PLAIN_UNIT_WORDS + r")\.?(?:\s*\^\s*\{?\s*[23]\s*\}?)?\s*$",
    re.IGNORECASE,
)
_ANSWER_STATEMENT = re.compile(r"\banswer\s*(?:is|:|=)\s*:?\s*", re.IGNORECASE)
# "the answer is (C)", "Answer: C.", "the correct answer is option C": a letter in parentheses or
# brackets, or a bare capital followed by punctuation or the end of the line (not "the answer is a ...").
_CHOICE_STATEMENT = re.compile(
    r"(?i:\banswer\s*(?:is|:|=)\s*:?\s*(?:option|choice)?\s*[:\-]?\s*)"
    r"(?:\(\s*([A-Za-z])\s*\)|\[\s*([A-Za-z])\s*\]|([A-Z])(?=[ \t]*(?:[.):,;]|$)))",
    re.MULTILINE,
)
# The last resort: an upper-case letter in single parentheses. A lower-case "(a)" with no answer statement is an
# enumeration or a mention ("Option (a) is wrong because ...; I am unsure."), not a final answer.
_PARENTHESISED_LETTER = re.compile(r"\(([A-J])\)")
# What may stand between two boxes of one answer: spaces, math delimiters, LaTeX spacing, commas,
# "and"/"or" (bare or in \text{}), alignment marks.
_BOX_SEPARATOR = re.compile(
    r"\s+|\$|\\[()\[\]]|\\q?quad(?![A-Za-z])|\\[,;:! ]|\\\\|&|[,;.]|\b(?:and|or)\b"
    r"|\\(?:text|textrm|mbox|mathrm)\s*\{\s*(?:and|or|,)?\s*\}"
)
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
# The patterns below are compiled once here (re's per-call cache lookup, and the pattern built by string
# concatenation in _strip_text_command, cost more than the matching on the simulated run's short answers).
_BOX_TOKEN = re.compile(r"[^\s$\\{}]+")
_BRACED_COMMAND = re.compile(r"\\[A-Za-z]+\s*\{[^{}]*\}")
_LEADING_MATH_DELIMITER = re.compile(r"^(?:\$+|\\\(|\\\[)")
_TRAILING_MATH_DELIMITER = re.compile(r"(?:\$+|\\\)|\\\])?[.\s]*$")
_WHOLE_TEXT_COMMAND = re.compile(r"\\(?:" + "|".join(_TEXT_COMMANDS) + r")\s*\{(.*)\}", re.DOTALL)
_OPTION_WORD = re.compile(r"^(?:option|choice|answer)\s*[:\-]?\s*", re.IGNORECASE)
_ONE_LETTER = re.compile(r"[A-Za-z]")
_LETTER_AND_TEXT = re.compile(r"([A-Za-z])\s*[.):：]\s*\S.*", re.DOTALL)
_EDGE_DOLLARS = re.compile(r"^\$+|\$+$")
_EDGE_MATH_BRACKETS = re.compile(r"^\\[(\[]|\\[)\]]$")
_LEADING_DISPLAYSTYLE = re.compile(r"^\\displaystyle\s*")
_THOUSANDS_SPACING = re.compile(r",\s*\\!\s*")
_LATEX_SPACING = re.compile(r"\\\\|\\[!,;: ]")
_LATEX_SPACING_AS = {"\\\\": "\\\\", "\\!": ""}  # a row break \\ is kept, \! dropped, the others are a space
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree")
_EMPTY_TEXT = re.compile(r"(?i)\\text\s*\{\s*\}")
_SPACES = re.compile(r"\s+")
_SIZING = re.compile(r"\\left|\\right|\\displaystyle|\\limits")
_DT_FRAC = re.compile(r"\\[dt]frac")
_FRAC_DIGIT_DIGIT = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_GROUP_DIGIT = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_FRAC_DIGIT_GROUP = re.compile(r"\\frac\s*(\d)\s*\{")
_SQRT_DIGITS = re.compile(r"\\sqrt\s*(\d+)")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL = re.compile(r"-?\d*\.\d+")
_BARE_POINT = re.compile(r"^(-?)\.")
_PARENTHESISED_ONE_LETTER = re.compile(r"\(([A-Za-z])\)")
_WORDS = re.compile(r"[A-Za-z][A-Za-z ]{2,}")
_RISKY_FACTORIAL = re.compile(r"\d{4,}\s*!|[)}\]]\s*!|!\s*!")
_CARET = re.compile(r"\^\s*")
_EXPONENT_TOKEN = re.compile(r"-?\d+|\S?")
_DIGITS = re.compile(r"\d+")
_DIGIT_PRODUCT = re.compile(r"\d\s*(?:\\cdot|\\times|\*)\s*\d")
#: An integer written plainly (ASCII digits, no sign on zero, no leading zeros, no separators): math-verify parses it
#: to a sympy Integer and its text, and two such answers are equivalent only when they are the same string.
_PLAIN_INTEGER = re.compile(r"0|-?[1-9][0-9]*")


class UnknownBenchmark(ValueError):
    """The benchmark name is not one of :data:`r2mad_core.data.benchmarks.BENCHMARKS`."""


def _check_benchmark(benchmark: str) -> bool:
    """True for a multiple-choice benchmark, False for MATH500; raises for unknown names."""
    if benchmark not in BENCHMARKS:
        raise UnknownBenchmark(f"unknown benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    return benchmark in MULTIPLE_CHOICE_BENCHMARKS


# ----------------------------------------------------------------------------------------------------
# Extraction
# ----------------------------------------------------------------------------------------------------


def extract_answer(
    text: str | None, benchmark: str, num_options: int | None = None, *, strict_format: bool = False
) -> str | None:
    """a(r): the answer a response gives, or None when it gives none.

    MATH500 answers are cleaned LaTeX strings (e.g. ``"\\frac{1}{2}"``); multiple-choice answers are
    an upper-case option letter among the first ``num_options`` letters (default A-J).
    ``strict_format=True`` accepts only the prompts' formats (``\\boxed{}``; ``((X))``) and no
    "The answer is ..." fallback.
    """
    return _extracted(text, benchmark, num_options, strict_format)[0]


def extract_answer_with_source(
    text: str | None, benchmark: str, num_options: int | None = None, *, strict_format: bool = False
) -> tuple[str | None, str | None]:
    """``(a(r), source)``: the answer as :func:`extract_answer` gives it and where it came from.

    ``source`` is one of :data:`ANSWER_SOURCES` (None when the text gives no answer at all); every
    source but ``"format"`` is a fallback (:data:`FALLBACK_SOURCES`), counted per run cell by
    :func:`r2mad_lab.experiments.metrics.completion_health`. The answer can be None with a source, e.g.
    ``((K))`` of options A-J: the response answered, with a letter that is not an option.
    """
    return _extracted(text, benchmark, num_options, strict_format)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _extracted(
    text: str | None, benchmark: str, num_options: int | None, strict_format: bool
) -> tuple[str | None, str | None]:
    """:func:`extract_answer_with_source`, memoised (pure in its arguments: the simulator asks again and
    again, and the metrics of every run cell re-read each response's source). One memo for both public functions,
    keyed by positional arguments: ``num_options=10`` and ``10`` were two keys of two memos, and the
    debate loop, the simulated agents and the metrics, which spell it differently, extracted each response 2-3 times."""
    multiple_choice = _check_benchmark(benchmark)
    letters = _letters(num_options) if multiple_choice else ""
    if not isinstance(text, str) or not text.strip():
        return None, None
    if len(text) > MAX_RESPONSE_CHARS:
        text = text[-MAX_RESPONSE_CHARS:]
    for region in _search_regions(text):
        if multiple_choice:
            found = _extract_choice(region, letters, strict_format)
        else:
            found = _extract_math(region, strict_format)
        if found is not _NOT_FOUND:
            return found  # type: ignore[return-value]
    return None, None


class _NotFound:
    """Marks 'no answer in this region' (unlike None: 'the answer found is invalid')."""


_NOT_FOUND: object = _NotFound()


def _search_regions(text: str) -> list[str]:
    """The text after the last ``</think>`` first (if any), then the whole text."""
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        return [text[closes[-1].end() :], text]
    return [text]


def _letters(num_options: int | None) -> str:
    if num_options is None:
        return OPTION_LETTERS[:DEFAULT_NUM_OPTIONS]
    if not isinstance(num_options, int) or not 1 <= num_options <= len(OPTION_LETTERS):
        raise ValueError(f"num_options must be an integer from 1 to {len(OPTION_LETTERS)}, found {num_options!r}")
    return OPTION_LETTERS[:num_options]


def _balanced_group(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``text[start] == "{"`` and the index after it."""
    depth = 0
    position = start
    while position < len(text):
        char = text[position]
        if char == "\\":
            position += 2  # an escaped character, e.g. \{ or \}, does not count
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : position], position + 1
        position += 1
    return None


def _boxes(text: str, *, nested: bool = True) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every complete ``\\boxed``/``\\fbox`` in order (braced, or a single
    token); ``nested=False`` skips a box that starts inside an earlier one."""
    boxes: list[tuple[int, int, str]] = []
    for match in _BOX_START.finditer(text):
        if not nested and boxes and match.start() < boxes[-1][1]:
            continue
        position = match.end()
        while position < len(text) and text[position] in " \t":
            position += 1
        if position < len(text) and text[position] == "{":
            group = _balanced_group(text, position)
            if group is not None:
                boxes.append((match.start(), group[1], group[0]))
        else:
            token = _BOX_TOKEN.match(text, position)  # \boxed 5: one plain token
            if token:
                boxes.append((match.start(), token.end(), token.group(0).rstrip(".,;:")))
    return boxes


def _boxed_contents(text: str) -> list[str]:
    """Contents of every complete ``\\boxed``/``\\fbox`` in order (braced, or a single token)."""
    return [content for _, _, content in _boxes(text)]


def _joins_boxes(gap: str) -> bool:
    """Whether the text between two boxes only separates them (``, and $``), i.e. both belong to one
    final answer; any other word (``\\boxed{2}, actually \\boxed{3}``) makes the boxes alternatives."""
    return not _BOX_SEPARATOR.sub("", gap).strip()


def _distinct_answers(parts: list[str]) -> list[str]:
    """``parts`` without repeats (an answer boxed twice, or once as ``\\frac12`` and once as 0.5)."""
    kept: list[str] = []
    for part in parts:
        if not any(_canonical_math(part) == _canonical_math(other) for other in kept) and not any(
            answers_equivalent(part, other, "math500") for other in kept
        ):
            kept.append(part)
    return kept


def _extract_math(text: str, strict_format: bool) -> tuple[str | None, str] | object:
    found: list[tuple[int, int, str]] = []
    for start, end, content in _boxes(text, nested=False):
        inner = _boxed_contents(content)
        if inner:
            content = inner[-1]
        cleaned = clean_math_answer(content)
        if cleaned and cleaned.lower() not in _PLACEHOLDERS:
            found.append((start, end, cleaned))
    if found:
        # The last box, with the boxes just before it that only a separator divides from it: one answer
        # boxed in parts (\boxed{-2} and \boxed{1}) is read as the list "-2, 1".
        first = len(found) - 1
        while first > 0 and _joins_boxes(text[found[first - 1][1] : found[first][0]]):
            first -= 1
        parts = [cleaned for _, _, cleaned in found[first:]]
        if len(parts) > 1:
            parts = _distinct_answers(parts)
        return ", ".join(parts), "format"
    if strict_format:
        return _NOT_FOUND
    statement = _final_statement(text)
    if statement is not None and not _BOX_START.search(statement):  # an echoed "\\boxed{[answer]}"
        cleaned = clean_math_answer(statement)
        prose = len(_PROSE_WORD.findall(_BRACED_COMMAND.sub("", cleaned)))
        if cleaned and cleaned.lower() not in _PLACEHOLDERS and len(cleaned) <= MAX_ANSWER_CHARS and prose < 2:
            return cleaned, "final_line"
    return _NOT_FOUND


def _last_line(text: str) -> str | None:
    for line in reversed(text.splitlines()):
        stripped = line.strip().strip("*#_ ").strip()
        if stripped:
            return stripped
    return None


def _final_statement(text: str) -> str | None:
    """X from "The (final) answer is X" / "Answer: X" when it is the last line of the text."""
    line = _last_line(text)
    if line is None or len(line) > 400:
        return None
    line = line.replace("**", "")
    matches = list(_ANSWER_STATEMENT.finditer(line))
    if not matches:
        return None
    answer = line[matches[-1].end() :].strip()
    answer = _LEADING_MATH_DELIMITER.sub("", answer)
    answer = _TRAILING_MATH_DELIMITER.sub("", answer).strip()
    return answer or None


def _strip_text_command(content: str) -> str:
    """``\\text{B}`` -> ``B`` when the whole content is one text command."""
    match = _WHOLE_TEXT_COMMAND.fullmatch(content)
    if match and _balanced_group("{" + match.group(1) + "}", 0) == (match.group(1), len(match.group(1)) + 2):
        return match.group(1)
    return content


@functools.lru_cache(maxsize=CACHE_SIZE)  # pure; a few distinct spans (``B``, ``answer``) recur in every response
def _letter_in(content: str) -> str | None:
    """The single option letter an answer span names, or None if it names none or is ambiguous."""
    span = content.strip().strip("*_`$ ").strip()
    span = _strip_text_command(span).strip()
    span = span.strip("()[]{} ").strip("*_`$ ").strip()
    span = _OPTION_WORD.sub("", span)
    if _ONE_LETTER.fullmatch(span):
        return span.upper()
    # "B. text", "B) text", "B: text" name B unambiguously.
    match = _LETTER_AND_TEXT.fullmatch(span)
    if match:
        return match.group(1).upper()
    return None


def _extract_choice(text: str, letters: str, strict_format: bool) -> tuple[str | None, str] | object:
    normalized = unicodedata.normalize("NFKC", text)  # full-width （（Ｂ）） -> ((B))
    for match in reversed(list(_DOUBLE_PARENS.finditer(normalized))):
        content = match.group(1)
        letter = _letter_in(content)
        if letter is None:
            continue  # placeholder "((answer))", prose in double parentheses, "((A or B))"
        if letter in letters:
            return letter, "format"
        if content.strip().strip("*_`$ ()")[:1].isupper():
            return None, "format"  # the final answer names a letter that is not an option, e.g. ((K)) of A-J
        # a lower-case out-of-range letter such as f((x)) is notation, not an answer: keep looking
    if strict_format:
        return _NOT_FOUND
    # Fallback 1, the last line: \boxed{B}, "The answer is (B)", "Answer: B".
    line = _last_line(normalized)
    if line is not None:
        candidates = [*_boxed_contents(line)[-1:], *filter(None, [_final_statement(line)])]
        for candidate in candidates:
            letter = _letter_in(candidate)
            if letter is not None:
                return (letter if letter in letters else None), "final_line"
    # Fallback 2, anywhere: the last "the answer is (C)" / "Answer: C." / \boxed{C} (a long last line,
    # or an explanation after the statement).
    plain = normalized.replace("**", "").replace("__", "")
    stated = [(m.start(), next(g for g in m.groups() if g)) for m in _CHOICE_STATEMENT.finditer(plain)]
    stated += [(start, letter) for start, _, content in _boxes(plain) if (letter := _letter_in(content))]
    if stated:
        letter = max(stated)[1].upper()
        return (letter if letter in letters else None), "statement"
    # Fallback 3, after the authors' checker (KylJin/R2-MAD src/checker.py, MMLUProChecker.parse_answer):
    # the last single-parenthesised letter A-J anywhere in the text; upper case only (theirs takes a-j too).
    bare = _PARENTHESISED_LETTER.findall(normalized)
    if bare:
        letter = bare[-1].upper()
        return (letter if letter in letters else None), "parenthesis"
    return _NOT_FOUND


# ----------------------------------------------------------------------------------------------------
# Cleaning and canonical forms
# ----------------------------------------------------------------------------------------------------


def _latex_spacing(match: re.Match) -> str:
    return _LATEX_SPACING_AS.get(match.group(0), " ")


@functools.lru_cache(maxsize=CACHE_SIZE)  # pure; the same answers are cleaned for extraction, votes and grading
def clean_math_answer(answer: str) -> str:
    """Remove what is not part of a MATH answer's value: delimiters, text wrappers, units, %, $, period."""
    text = answer.strip()
    for _ in range(3):  # wrappers can nest: $\text{(C)}$.
        before = text
        text = _EDGE_DOLLARS.sub("", text).strip()
        text = _EDGE_MATH_BRACKETS.sub("", text).strip()
        text = _LEADING_DISPLAYSTYLE.sub("", text).strip()
        text = _strip_text_command(text).strip()
        text = text.rstrip(".,;:").strip()
        if text == before:
            break
    # ",\!" is MATH's thousands separator (11,\! 111,\! 100), whatever spacing follows it: one comma, no space.
    text = _THOUSANDS_SPACING.sub(",", text)
    # LaTeX spacing: \! disappears, \, \; \: and "\ " become a space; a row break \\ is kept.
    text = _LATEX_SPACING.sub(_latex_spacing, text)
    text = _DEGREES.sub("", text)
    text = text.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    text = _EMPTY_TEXT.sub("", text)
    for _ in range(2):
        text = _TRAILING_UNIT_TEXT.sub("", text).strip()
        text = _TRAILING_UNIT_WORD.sub("", text).strip()
    text = _strip_text_command(text).strip()
    text = text.rstrip(".,;").strip()
    return _SPACES.sub(" ", text)


@functools.lru_cache(maxsize=CACHE_SIZE)  # pure, as above
def _canonical_math(answer: str) -> str:
    text = clean_math_answer(answer)
    text = _SIZING.sub("", text)
    text = _DT_FRAC.sub(r"\\frac", text)
    text = _FRAC_DIGIT_DIGIT.sub(r"\\frac{\1}{\2}", text)
    text = _FRAC_GROUP_DIGIT.sub(r"\\frac{\1}{\2}", text)
    text = _FRAC_DIGIT_GROUP.sub(r"\\frac{\1}{", text)
    text = _SQRT_DIGITS.sub(r"\\sqrt{\1}", text)
    text = text.replace("{,}", ",")
    # A thousands separator: no space after its comma, groups of exactly three digits ("32, 349" is a list).
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    text = _SPACES.sub("", text)
    if _DECIMAL.fullmatch(text):
        text = text.rstrip("0").rstrip(".") if "." in text else text
        text = _BARE_POINT.sub(r"\g<1>0.", text) or "0"
    match = _PARENTHESISED_ONE_LETTER.fullmatch(text)
    if match:
        text = match.group(1)
    if _WORDS.fullmatch(text):
        text = text.lower()
    return text


@functools.lru_cache(maxsize=CACHE_SIZE)
def canonical_answer(answer: str | None, benchmark: str) -> str:
    """A cheap normal form for grouping votes: equal forms are equivalent answers (not conversely).

    Multiple choice: the upper-case letter. MATH500: the cleaned answer without spaces, ``\\left``/
    ``\\right``, with ``\\dfrac``/``\\tfrac`` as ``\\frac``, braced ``\\frac12``, no thousands
    separators, no trailing decimal zeros, words lower-cased.
    """
    multiple_choice = _check_benchmark(benchmark)
    if answer is None:
        return ""
    if multiple_choice:
        normalized = unicodedata.normalize("NFKC", str(answer))
        letter = _letter_in(normalized)
        return letter if letter is not None else normalized.strip().upper()
    return _canonical_math(str(answer))


# ----------------------------------------------------------------------------------------------------
# Equivalence
# ----------------------------------------------------------------------------------------------------


def safe_for_symbolic(answer: str) -> bool:
    """False for answers whose symbolic evaluation could take unbounded time or memory.

    Rejects long answers, power towers (an exponent holding ``^``), exponents above 10**4, factorials
    of more than three digits or of an expression, and nesting deeper than :data:`MAX_NESTING`. Sums, products,
    integrals and limits are compared, under the deadline (``F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}`` equals the
    same sum with the factors swapped).
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return False
    if _RISKY_FACTORIAL.search(answer):
        return False
    for match in _CARET.finditer(answer):
        position = match.end()
        if position < len(answer) and answer[position] == "{":
            group = _balanced_group(answer, position)
            exponent = group[0] if group else answer[position:]
        else:
            exponent = _EXPONENT_TOKEN.match(answer[position:]).group(0)  # type: ignore[union-attr]
        if "^" in exponent or "**" in exponent or "!" in exponent:
            return False
        digits = _DIGITS.findall(exponent)
        if any(len(number) > 4 for number in digits):
            return False
        if len(digits) > 1 and _DIGIT_PRODUCT.search(exponent):
            return False
    depth = deepest = 0
    for char in answer:
        if char in "({[":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")}]":
            depth -= 1
    return deepest <= MAX_NESTING


@functools.lru_cache(maxsize=CACHE_SIZE)
def _parsed_here(cleaned: str) -> tuple:
    """math-verify's parse of a cleaned answer (in the worker process: the parsed expressions stay there)."""
    from math_verify import parse  # lazy: math_verify (sympy, antlr) takes seconds to import; MATH500 only

    try:
        # parsing_timeout=None: no signal.alarm; the worker's CPU deadline guards the time instead.
        return tuple(parse("\\boxed{" + cleaned + "}", parsing_timeout=None))  # type: ignore[arg-type]
    except Exception:  # math-verify reports most errors itself; anything else means "cannot parse"
        logger.debug("math-verify could not parse %r", cleaned, exc_info=True)
        return ()


def _parses_in_worker(cleaned: str) -> bool:
    """A job of the worker: whether math-verify parses ``cleaned`` to something (kept there for the comparisons)."""
    return bool(_parsed_here(cleaned))


def _verify_in_worker(gold: str, predicted: str) -> bool:
    """A job of the worker: math-verify's verdict on two answers that parse (a parse again, in a worker replaced since,
    and the comparison get a budget of their own, as separate jobs did)."""
    from math_verify import verify  # lazy: as above

    parsed_gold, _ = _parsed_here(gold), _renew_deadline()
    parsed_predicted, _ = _parsed_here(predicted), _renew_deadline()
    if not parsed_gold or not parsed_predicted:
        return False
    try:
        return bool(verify(list(parsed_gold), list(parsed_predicted), timeout_seconds=None))
    except Exception:
        logger.debug("math-verify failed on %r vs %r", gold, predicted, exc_info=True)
        return False


def warm_worker() -> None:
    """Run once in the worker's zygote before it forks (r2mad_core.data.deadline): loads math-verify's LaTeX grammar
    (0.7 CPU s, which the first comparison would pay), so that an executor replacing one after an overrun does not."""
    _verify_in_worker("\\frac{1}{2}", "0.5")


@functools.lru_cache(maxsize=CACHE_SIZE)
def _parse(cleaned: str) -> bool:
    """Whether math-verify parses ``cleaned`` (in the worker, under the deadline); :data:`_TIMED_OUT` when it ran out
    of time (memoised: not tried again in this process)."""
    return _with_deadline(functools.partial(_parses_in_worker, cleaned), SYMBOLIC_TIMEOUT_SECONDS, _TIMED_OUT)


class _TimedOut(tuple):
    """The outcome of a parse that ran out of time (falsy like a failed parse, but told apart: never memoised on
    disk)."""


_TIMED_OUT = _TimedOut()


@functools.lru_cache(maxsize=CACHE_SIZE)
def _verified(gold: str, predicted: str) -> bool | None:
    """math-verify's verdict on cleaned answers (``gold`` in the gold role: verify is asymmetric).

    None when the comparison ran out of time (then the answers count as different).
    """
    if not (safe_for_symbolic(gold) and safe_for_symbolic(predicted)):
        return False
    if _PLAIN_INTEGER.fullmatch(gold) and _PLAIN_INTEGER.fullmatch(predicted):
        # math-verify's verdict without math-verify: it parses each to [Integer(n), "n"] and compares every
        # pair; Integer(a) == Integer(b), simplify(a - b) == 0 and "a" == "b" all hold only when the strings are equal.
        # Two thirds of the default run's comparisons are of two integers (the simulated agents' wrong answers).
        return gold == predicted
    remembered = verdicts.lookup(gold, predicted)  # another process's verdict (make reproduce's kernels share them)
    if remembered is not None:
        return remembered  # before the worker starts (slow): a rerun whose verdicts are all remembered starts none
    parsed_gold = _parse(gold)
    parsed_predicted = _parse(predicted)
    if not parsed_gold or not parsed_predicted:
        if parsed_gold is not _TIMED_OUT and parsed_predicted is not _TIMED_OUT:
            verdicts.store(gold, predicted, False)
        return False

    verdict = _with_deadline(functools.partial(_verify_in_worker, gold, predicted), SYMBOLIC_TIMEOUT_SECONDS, None)
    if verdict is not None:
        verdicts.store(gold, predicted, verdict)
    return verdict


def _math_equivalent(gold: str, predicted: str) -> bool | None:
    """True/False, or None when the symbolic comparison ran out of time."""
    canonical_gold = _canonical_math(gold)
    if canonical_gold == _canonical_math(predicted):
        return bool(canonical_gold)
    return _verified(clean_math_answer(gold), clean_math_answer(predicted))


@functools.lru_cache(maxsize=CACHE_SIZE)
def answers_equivalent(a: str | None, b: str | None, benchmark: str) -> bool:
    """Whether two extracted answers are the same answer (symmetric; for votes and consensus).

    For MATH500 math-verify is asked both ways round (its ``verify`` is asymmetric, e.g. ``x=5`` as
    gold accepts ``5``); either verdict suffices.
    """
    multiple_choice = _check_benchmark(benchmark)
    if a is None or b is None:
        return False
    if multiple_choice:
        first, second = canonical_answer(a, benchmark), canonical_answer(b, benchmark)
        return len(first) == 1 and first == second
    if not a.strip() or not b.strip():
        return False
    first, second = sorted((a, b))
    verdict = _math_equivalent(first, second)
    if verdict is None:  # timed out: do not spend the time a second time
        return False
    return verdict or bool(_math_equivalent(second, first))


@functools.lru_cache(maxsize=CACHE_SIZE)
def is_correct(predicted: str | None, gold: str, benchmark: str) -> bool:
    """Whether an extracted answer matches the gold answer; a missing answer (None) is never correct."""
    multiple_choice = _check_benchmark(benchmark)
    if predicted is None or not str(predicted).strip():
        return False
    if multiple_choice:
        return canonical_answer(predicted, benchmark) == canonical_answer(gold, benchmark) and len(
            canonical_answer(gold, benchmark)
        ) == 1
    return bool(_math_equivalent(gold, predicted))


def clear_caches() -> None:
    """Empty the memo tables (e.g. between experiments that change the cleaning options)."""
    _parse.cache_clear()
    _verified.cache_clear()
    _parsed_here.cache_clear()  # used here only where there is no worker; the worker's parses are pure in the text
    for memoised in (_extracted, _letter_in, clean_math_answer, _canonical_math, canonical_answer, answers_equivalent,
                     is_correct):
        memoised.cache_clear()
