"""Benchmarks and the paper's train/test splits (Section 5.1 and Appendix A "Benchmark Details").

Each benchmark question becomes a :class:`Sample`. The *test* split is what a method is evaluated on;
the *train* split is what the memory bank is built from (the memory cases of Eq. 4 come only from
train questions, so no test question leaks into an agent's memory).

The splits reproduce the paper's counts exactly:

============================  =====  =====  ==========================================================
benchmark                     train  test   rule
============================  =====  =====  ==========================================================
``math500``                   366    134    test = the Level-5 problems (no randomness)
``mmlu_pro_economics``        633    211    ``category == "economics"``; test = floor(n/4) at random
``mmlu_pro_engineering``      727    242    ``category == "engineering"``; test = floor(n/4) at random
``truthfulqa``                498    166    MC1 targets with 4..9 options (664); test = floor(n/4)
============================  =====  =====  ==========================================================

Determinism: the items of a benchmark are sorted by a stable id (MATH ``unique_id``, MMLU-Pro
``question_id``, TruthfulQA position in ``mc_task.json``) and permuted by
``numpy.random.default_rng(seed)`` with a seed derived from :data:`SPLIT_SEED` and the benchmark
name. The test split is the first ``floor(n/4)`` items of that permutation (for MATH500: the Level-5
items, in permutation order); the train split is the rest. Every split therefore comes in a shuffled
order, so its first ``k`` items are a fair subset. The split does not depend on the file's row order.

TruthfulQA's ``mc1_targets`` always list the correct answer first, so each question's options are
shuffled with a per-question generator seeded from :data:`OPTION_SEED` and the question's index.
MMLU-Pro questions keep their options (3 to 10 of them) in the published order.

Data source: the benchmark files and their integrity are :mod:`r2mad_core.data.sources` (by default
the files shipped inside the package, sha256-checked at every load; overrides: ``--data-dir``, else
``$R2MAD_DATA_DIR``, with the Hugging Face Hub as the last resort). This module parses their rows into
:class:`Sample` s, splits them and keeps the registry of benchmarks (:class:`BenchmarkSpec`).
:func:`resolve_data_dir`, :func:`describe_data_source`, :func:`verify_checksums`,
:class:`BenchmarkFilesNotFound` and :class:`BenchmarkDataError` stay importable from here (notebook 01,
the command lines and callers of :func:`load` use them).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import string
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from r2mad_core.data.sources import (  # noqa: F401
    MMLU_PRO_CATEGORY,
    BenchmarkDataError,
    BenchmarkFilesNotFound,
    describe_data_source,
    locate,
    open_text,
    resolve_data_dir,
    verify_checksums,
)

# Re-exported: notebook 01 (resolve_data_dir, verify_checksums), the fresh-clone check (describe_data_source)
# and callers of load() that catch its errors use them from here.
from r2mad_core.plugins import entry_problem

logger = logging.getLogger(__name__)

#: The registered benchmarks (live: :func:`register_benchmark` appends; the paper's four come first).
BENCHMARKS: list[str] = []
SPLITS: tuple[str, ...] = ("train", "test", "all")
#: The registered multiple-choice benchmarks (live, like :data:`BENCHMARKS`).
MULTIPLE_CHOICE_BENCHMARKS: set[str] = set()

#: Seed of the random train/test permutation (combined with a CRC32 of the benchmark name).
SPLIT_SEED = 20250501
#: Seed of the per-question option shuffle of TruthfulQA (combined with the question's index).
OPTION_SEED = 20250502
#: Fraction of each randomly split benchmark that goes to the test set: test = floor(n / 4).
TEST_FRACTION_DENOMINATOR = 4
#: TruthfulQA MC1 questions kept: number of options between these bounds, inclusive (paper: 664).
TRUTHFULQA_MIN_OPTIONS = 4
TRUTHFULQA_MAX_OPTIONS = 9
#: MATH500 problems of this level form the test set (paper: the 134 hardest problems).
MATH500_TEST_LEVEL = 5

#: The split sizes reported in the paper (Appendix A); a mismatch is logged as a warning.
PAPER_SPLIT_SIZES: dict[str, dict[str, int]] = {
    "math500": {"train": 366, "test": 134, "all": 500},
    "mmlu_pro_economics": {"train": 633, "test": 211, "all": 844},
    "mmlu_pro_engineering": {"train": 727, "test": 242, "all": 969},
    "truthfulqa": {"train": 498, "test": 166, "all": 664},
}

OPTION_LETTERS = string.ascii_uppercase


@dataclass(frozen=True)
class Sample:
    """One benchmark question.

    ``question`` is ready for the prompts' ``{QUESTION}`` slot: the question text, and for multiple
    choice a blank line then one lettered line per option (``A. ...``). ``gold`` is the option letter
    for multiple choice and the reference answer string for MATH500. ``metadata`` holds source
    fields (level/subject, question_id/src, n_options, ...); it is excluded from hashing.
    """

    id: str
    benchmark: str
    question: str
    gold: str
    choices: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.benchmark not in BENCHMARKS:
            raise ValueError(f"Sample {self.id!r}: benchmark must be one of {tuple(BENCHMARKS)}, "
                             f"found {self.benchmark!r}")
        if not self.id or not isinstance(self.id, str):
            raise ValueError(f"Sample of {self.benchmark}: id must be a non-empty string, found {self.id!r}")
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"Sample {self.id!r}: question must be a non-empty string, found {self.question!r}")
        if not isinstance(self.gold, str) or not self.gold.strip():
            raise ValueError(f"Sample {self.id!r}: gold must be a non-empty string, found {self.gold!r}")
        if not isinstance(self.choices, tuple):
            object.__setattr__(self, "choices", tuple(self.choices))
        multiple_choice = self.benchmark in MULTIPLE_CHOICE_BENCHMARKS
        if multiple_choice and len(self.choices) < 2:
            raise ValueError(f"Sample {self.id!r}: {self.benchmark} needs at least 2 choices, "
                             f"found {len(self.choices)}")
        if not multiple_choice and self.choices:
            raise ValueError(f"Sample {self.id!r}: {self.benchmark} has no choices, found {len(self.choices)}")
        if len(self.choices) > len(OPTION_LETTERS):
            raise ValueError(f"Sample {self.id!r}: at most {len(OPTION_LETTERS)} choices, found {len(self.choices)}")
        if multiple_choice and self.gold not in self.option_letters:
            raise ValueError(
                f"Sample {self.id!r}: gold must be one of the option letters {self.option_letters!r}, "
                f"found {self.gold!r}"
            )

    @property
    def is_multiple_choice(self) -> bool:
        """True for MMLU-Pro and TruthfulQA questions."""
        return bool(self.choices)

    @property
    def option_letters(self) -> str:
        """The letters of the options, e.g. ``"ABCD"`` for four choices ("" for MATH500)."""
        return OPTION_LETTERS[: len(self.choices)]

    @property
    def gold_choice(self) -> str | None:
        """The text of the correct option (None for MATH500)."""
        if not self.choices:
            return None
        return self.choices[self.option_letters.index(self.gold)]


def format_question(question: str, choices: Sequence[str] = ()) -> str:
    """The text for the prompts' {QUESTION}: the question, a blank line, then ``A. option`` lines."""
    text = question.strip()
    if not choices:
        return text
    lines = [f"{OPTION_LETTERS[i]}. {str(choice).strip()}" for i, choice in enumerate(choices)]
    return text + "\n\n" + "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# Reading and validating rows
# ----------------------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line."""
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise BenchmarkDataError(
                    path, line_number, None, f"not valid JSON ({error.msg} at column {error.colno})"
                ) from None
            if not isinstance(row, dict):
                raise BenchmarkDataError(path, line_number, None, f"expected a JSON object, found {type(row).__name__}")
            yield line_number, row


def _read_parquet(path: Path, category: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number, row) of a parquet file; only rows of ``category`` when it is given."""
    import pyarrow as pa  # lazy: pyarrow only when a parquet file is read (the data layer loads with every command)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as error:
        raise BenchmarkDataError(path, None, None, f"cannot be read as parquet ({error})") from error
    if category is not None and "category" in table.column_names:
        keep = pc.fill_null(pc.equal(table["category"], category), False)
        row_numbers = [int(i) + 1 for i in pc.indices_nonzero(keep).to_pylist()]
        table = table.take(pa.array([n - 1 for n in row_numbers], type=pa.int64()))
    else:
        row_numbers = list(range(1, table.num_rows + 1))
    yield from zip(row_numbers, table.to_pylist(), strict=True)


def _require(row: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path, row_number: int) -> Any:
    if key not in row:
        raise BenchmarkDataError(path, row_number, key, "missing")
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BenchmarkDataError(path, row_number, key,
                                 f"expected {expected}, found {type(value).__name__} {value!r:.80}")
    if isinstance(value, str) and not value.strip():
        raise BenchmarkDataError(path, row_number, key, "expected a non-empty string, found an empty one")
    return value


def _math500_samples(path: Path) -> list[Sample]:
    samples: list[Sample] = []
    seen: dict[str, int] = {}
    for row_number, row in _read_jsonl(path):
        problem = _require(row, "problem", str, path, row_number)
        answer = _require(row, "answer", str, path, row_number)
        subject = _require(row, "subject", str, path, row_number)
        unique_id = _require(row, "unique_id", str, path, row_number)
        level = _require(row, "level", (int, str), path, row_number)
        try:
            level = int(str(level).removeprefix("Level ").strip())
        except ValueError:
            raise BenchmarkDataError(path, row_number, "level", f"expected an integer 1-5, found {level!r}") from None
        if not 1 <= level <= 5:
            raise BenchmarkDataError(path, row_number, "level", f"expected an integer 1-5, found {level}")
        if unique_id in seen:
            raise BenchmarkDataError(
                path, row_number, "unique_id", f"duplicate {unique_id!r} (first seen in row {seen[unique_id]})"
            )
        seen[unique_id] = row_number
        samples.append(
            Sample(
                id=f"math500:{unique_id}",
                benchmark="math500",
                question=format_question(problem),
                gold=answer.strip(),
                metadata={
                    "unique_id": unique_id,
                    "level": level,
                    "subject": subject,
                    "solution": row.get("solution", ""),
                },
            )
        )
    return samples


def _mmlu_pro_samples(name: str, path: Path, file_format: str) -> list[Sample]:
    category = MMLU_PRO_CATEGORY[name]
    rows = _read_parquet(path, category) if file_format == "mmlu_pro_parquet" else _read_jsonl(path)
    samples: list[Sample] = []
    seen: dict[int, int] = {}
    for row_number, row in rows:
        row_category = _require(row, "category", str, path, row_number)
        if row_category != category:
            if file_format == "mmlu_pro_jsonl":
                raise BenchmarkDataError(
                    path, row_number, "category", f"expected {category!r} in this file, found {row_category!r}"
                )
            continue
        question_id = _require(row, "question_id", int, path, row_number)
        question = _require(row, "question", str, path, row_number)
        options = _require(row, "options", (list, tuple), path, row_number)
        answer = _require(row, "answer", str, path, row_number)
        if not 2 <= len(options) <= 10:
            raise BenchmarkDataError(path, row_number, "options", f"expected 2 to 10 options, found {len(options)}")
        for position, option in enumerate(options, start=1):
            if not isinstance(option, str) or not option.strip():
                raise BenchmarkDataError(
                    path, row_number, "options", f"option {position} must be a non-empty string, found {option!r}"
                )
        letters = OPTION_LETTERS[: len(options)]
        if len(answer) != 1 or answer not in letters:
            raise BenchmarkDataError(
                path, row_number, "answer", f"expected one of the option letters {letters!r}, found {answer!r}"
            )
        if "answer_index" in row and row["answer_index"] is not None:
            answer_index = _require(row, "answer_index", int, path, row_number)
            if answer_index != letters.index(answer):
                raise BenchmarkDataError(
                    path,
                    row_number,
                    "answer_index",
                    f"expected {letters.index(answer)} (answer {answer!r}), found {answer_index}",
                )
        if question_id in seen:
            raise BenchmarkDataError(
                path, row_number, "question_id", f"duplicate {question_id} (first seen in row {seen[question_id]})"
            )
        seen[question_id] = row_number
        choices = tuple(option.strip() for option in options)
        samples.append(
            Sample(
                id=f"{name}:{question_id}",
                benchmark=name,  # type: ignore[arg-type]
                question=format_question(question, choices),
                gold=answer,
                choices=choices,
                metadata={
                    "question_id": question_id,
                    "src": row.get("src", ""),
                    "category": row_category,
                    "n_options": len(choices),
                    "answer_index": letters.index(answer),
                },
            )
        )
    return samples


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise _DuplicateKeys(duplicates)
    return dict(pairs)


class _DuplicateKeys(ValueError):
    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        super().__init__(f"duplicate keys {keys}")


def shuffle_options(index: int, n_options: int, seed: int = OPTION_SEED) -> list[int]:
    """The option order shown for TruthfulQA question ``index``: a permutation of ``range(n_options)``."""
    return [int(i) for i in np.random.default_rng([seed, index]).permutation(n_options)]


def _truthfulqa_samples(path: Path) -> list[Sample]:
    try:
        with open_text(path) as handle:
            text = handle.read()
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as error:
        raise BenchmarkDataError(
            path, None, None, f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    except _DuplicateKeys as error:
        raise BenchmarkDataError(path, None, None, f"an object has duplicate keys {error.keys}") from None
    if not isinstance(data, list):
        raise BenchmarkDataError(path, None, None, f"expected a JSON list of questions, found {type(data).__name__}")
    samples: list[Sample] = []
    seen: dict[str, int] = {}
    for index, row in enumerate(data):
        row_number = index + 1
        if not isinstance(row, dict):
            raise BenchmarkDataError(path, row_number, None, f"expected a JSON object, found {type(row).__name__}")
        question = _require(row, "question", str, path, row_number)
        targets = _require(row, "mc1_targets", dict, path, row_number)
        if len(targets) < 2:
            raise BenchmarkDataError(path, row_number, "mc1_targets",
                                     f"expected at least 2 options, found {len(targets)}")
        labels = list(targets.values())
        if any(label not in (0, 1) or isinstance(label, float) for label in labels):
            raise BenchmarkDataError(path, row_number, "mc1_targets", f"labels must be 0 or 1, found {labels}")
        if labels.count(1) != 1:
            raise BenchmarkDataError(
                path, row_number, "mc1_targets",
                f"expected exactly one correct option (label 1), found {labels.count(1)}"
            )
        if question in seen:
            raise BenchmarkDataError(path, row_number, "question",
                                     f"duplicate question (first seen in row {seen[question]})")
        seen[question] = row_number
        n_options = len(targets)
        if not TRUTHFULQA_MIN_OPTIONS <= n_options <= TRUTHFULQA_MAX_OPTIONS:
            continue
        texts = [str(text).strip() for text in targets]
        correct_position = labels.index(1)
        order = shuffle_options(index, n_options)
        choices = tuple(texts[i] for i in order)
        gold = OPTION_LETTERS[order.index(correct_position)]
        samples.append(
            Sample(
                id=f"truthfulqa:{index}",
                benchmark="truthfulqa",
                question=format_question(question, choices),
                gold=gold,
                choices=choices,
                metadata={"index": index, "n_options": n_options, "source_order": order},
            )
        )
    return samples


# ----------------------------------------------------------------------------------------------------
# Splits
# ----------------------------------------------------------------------------------------------------


def split_seed(name: str) -> int:
    """The seed of ``name``'s permutation: :data:`SPLIT_SEED` combined with a CRC32 of the name."""
    return SPLIT_SEED ^ zlib.crc32(name.encode("utf-8"))


def _permuted(name: str, samples: list[Sample]) -> list[Sample]:
    ordered = sorted(samples, key=BENCHMARK_SPECS[name].stable_key)
    permutation = np.random.default_rng(split_seed(name)).permutation(len(ordered))
    return [ordered[int(i)] for i in permutation]


def _split(name: str, permuted: list[Sample], split: str) -> list[Sample]:
    """The paper's rule: the benchmark's own test rule (MATH500: Level 5), else the first floor(n/4) of the
    permutation."""
    if split == "all":
        return permuted
    rule = BENCHMARK_SPECS[name].is_test
    if rule is not None:
        is_test = [rule(s) for s in permuted]
    else:
        n_test = len(permuted) // TEST_FRACTION_DENOMINATOR
        is_test = [position < n_test for position in range(len(permuted))]
    want_test = split == "test"
    return [sample for sample, test in zip(permuted, is_test, strict=True) if test == want_test]


# The authors' split procedure (their prepare_data.py): Python's random.seed(42); TruthfulQA first shuffles each
# question's options with that stream, then the question list; MMLU-Pro shuffles the category's questions; the first
# int(0.75 n) are train. MATH500 is split by level as in the paper.
SPLIT_RULES: tuple[str, ...] = ("paper", "authors")
AUTHORS_SPLIT_SEED = 42
AUTHORS_TRAIN_FRACTION = 0.75
AUTHORS_SPLIT_SIZES: dict[str, dict[str, int]] = {
    "math500": {"train": 366, "test": 134, "all": 500},
    "mmlu_pro_economics": {"train": 633, "test": 211, "all": 844},
    "mmlu_pro_engineering": {"train": 726, "test": 243, "all": 969},
    "truthfulqa": {"train": 498, "test": 166, "all": 664},
}


def _authors_split(name: str, samples: list[Sample], split: str) -> list[Sample]:
    """``split_rule="authors"``: the authors' ``random.seed(42)`` procedure on the questions in file order.

    Only which question lands in which split (and the order) follows the authors; the option order shown for
    TruthfulQA stays ours (:func:`shuffle_options`), though their per-question option shuffles are replayed on the
    random stream because they move it before the question shuffle.
    """
    spec = BENCHMARK_SPECS[name]
    ordered = sorted(samples, key=spec.stable_key)
    if spec.is_test is not None:
        return _split(name, ordered, split)
    rng = random.Random(AUTHORS_SPLIT_SEED)
    if spec.authors_shuffle_options:
        for sample in ordered:
            rng.shuffle(list(range(len(sample.choices))))
    rng.shuffle(ordered)
    if split == "all":
        return ordered
    n_train = int(len(ordered) * AUTHORS_TRAIN_FRACTION)
    return ordered[:n_train] if split == "train" else ordered[n_train:]


def load(
    name: str, split: str, data_dir: str | os.PathLike[str] | None = None, split_rule: str = "paper"
) -> list[Sample]:
    """The samples of benchmark ``name`` (one of :data:`BENCHMARKS`) in ``split`` (train, test or all).

    ``split_rule="paper"`` (default): the paper's counts with our seeded permutation (see the module docstring;
    the paper does not give its items). ``split_rule="authors"``: the authors' code's procedure
    (:func:`_authors_split`; Engineering then has 726/243 questions, the paper says 727/242). Raises
    :class:`BenchmarkFilesNotFound` when no data file can be found or downloaded and
    :class:`BenchmarkDataError` (naming file, row and field) when a file is malformed.
    """
    if name not in BENCHMARK_SPECS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {tuple(BENCHMARKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for {name}; expected one of {SPLITS}")
    if split_rule not in SPLIT_RULES:
        raise ValueError(f"unknown split_rule {split_rule!r}; expected one of {SPLIT_RULES}")
    spec = BENCHMARK_SPECS[name]
    directory = resolve_data_dir(data_dir)
    samples = spec.load_questions(directory)
    if not samples:
        raise BenchmarkDataError(directory, None, None, f"no {name} questions found")
    if split_rule == "authors":
        selected = _authors_split(name, samples, split)
        expected = AUTHORS_SPLIT_SIZES.get(name, {}).get(split)
        whose = "the authors' procedure"
    else:
        selected = _split(name, _permuted(name, samples), split)
        expected = (spec.paper_split_sizes or {}).get(split)
        whose = "the paper's"
    if expected is not None and len(selected) != expected:
        logger.warning("%s %s split has %d questions, %s has %d (data %s)", name, split, len(selected), whose, expected,
                       describe_data_source(data_dir))
    logger.debug("loaded %d %s %s questions", len(selected), name, split)
    return selected


#: Parsed questions per (benchmark, format, file, its size and mtime): a file is parsed once per process (a notebook
#: loads each benchmark's splits several times; re-reading them was a visible part of the default run's CPU). A file
#: changed on disk has another key. Samples are frozen; each caller gets its own list.
_PARSED: dict[tuple[Any, ...], tuple[Sample, ...]] = {}


def _read_packaged_or_local(name: str, directory: Path) -> list[Sample]:
    """The paper's four benchmarks: find the file (packaged, local layouts, else the Hub) and parse it."""
    file_format, path = locate(name, directory)
    try:
        stat = path.stat()
        memo_key: tuple[Any, ...] | None = (name, file_format, str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError:
        memo_key = None
    if memo_key is not None and memo_key in _PARSED:
        return list(_PARSED[memo_key])
    if file_format == "math500_jsonl":
        samples = _math500_samples(path)
    elif file_format == "truthfulqa_json":
        samples = _truthfulqa_samples(path)
    else:
        samples = _mmlu_pro_samples(name, path, file_format)
    if memo_key is not None:
        _PARSED[memo_key] = tuple(samples)
    return samples


# ----------------------------------------------------------------------------------------------------
# The registry: one entry per benchmark
# ----------------------------------------------------------------------------------------------------
ANSWER_FORMATS = ("math", "multiple_choice")


@dataclass(frozen=True)
class BenchmarkSpec:
    """Everything a benchmark needs, in one entry (register it with :func:`register_benchmark`).

    ``load_questions(data_dir)`` returns every question as :class:`Sample` s (ids stable across runs);
    ``answer_format`` is ``math`` (``\\boxed{}`` answers, math equivalence) or ``multiple_choice`` (``((X))``);
    ``display_name`` heads table columns; ``stable_key`` orders the questions before the seeded permutation
    (so a split never depends on the file's row order); ``is_test`` is a fixed test rule (MATH500: Level 5),
    else the test split is the first floor(n/4) of the permutation; ``paper_split_sizes`` (train/test/all)
    are checked with a warning; ``personas`` are the agents' (name, system prompt) pairs (None: the paper's
    appendix personas, :data:`r2mad_core.debate.prompts.PERSONAS`); ``authors_shuffle_options`` replays the
    authors' per-question option shuffles before their question shuffle (TruthfulQA).
    """

    name: str
    display_name: str
    answer_format: str
    load_questions: Callable[[Path], list[Sample]]
    stable_key: Callable[[Sample], tuple[Any, ...]] = lambda sample: (sample.id,)
    is_test: Callable[[Sample], bool] | None = None
    paper_split_sizes: Mapping[str, int] | None = None
    personas: tuple[tuple[str, str], ...] | None = None
    authors_shuffle_options: bool = False

    def __post_init__(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"benchmark {self.name!r}: answer_format must be one of {ANSWER_FORMATS}, "
                             f"found {self.answer_format!r}")

    @property
    def multiple_choice(self) -> bool:
        return self.answer_format == "multiple_choice"


#: name -> spec, in registration order. :data:`BENCHMARKS` and :data:`MULTIPLE_CHOICE_BENCHMARKS` are live views.
BENCHMARK_SPECS: dict[str, BenchmarkSpec] = {}


#: The benchmarks whose agents' personas are the paper's appendix ones (:data:`r2mad_core.debate.prompts.PERSONAS`);
#: any other benchmark brings its own (``BenchmarkSpec.personas``).
APPENDIX_PERSONA_BENCHMARKS = tuple(PAPER_SPLIT_SIZES)


def _registration_problem(spec: BenchmarkSpec) -> str | None:
    """What ``spec`` lacks to be debated, scored and tabled (None: nothing)."""
    problem = entry_problem(spec.name, BENCHMARK_SPECS, label=spec.display_name, label_field="display_name",
                            label_role="its column name in the tables")
    if problem is not None:
        return problem
    for field_name in ("load_questions", "stable_key"):
        if not callable(getattr(spec, field_name)):
            return (f"needs {field_name}: a function "
                    f"({'data_dir -> list[Sample]' if field_name == 'load_questions' else 'Sample -> sort key'})")
    if spec.is_test is not None and not callable(spec.is_test):
        return "is_test must be a function Sample -> bool, or None"
    if spec.personas is None:
        if spec.name not in APPENDIX_PERSONA_BENCHMARKS:
            return ("needs personas: ((name, system prompt), ...), one per agent (only the paper's "
                    f"{', '.join(APPENDIX_PERSONA_BENCHMARKS)} have the appendix's)")
    elif not spec.personas or not all(
        isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) and x.strip() for x in p) for p in spec.personas
    ):
        return "personas must be a non-empty tuple of (name, system prompt) pairs of non-empty strings"
    return None


def register_benchmark(spec: BenchmarkSpec) -> BenchmarkSpec:
    """Add a benchmark: it then shows up in the CLI's ``--benchmark``, the profiles, the prompts, answer
    extraction and the tables (under ``spec.display_name``). A spec that lacks something is refused here, with one
    line naming it (not a ``KeyError`` at the first debate)."""
    problem = _registration_problem(spec)
    if problem is not None:
        raise ValueError(f"register_benchmark: benchmark {getattr(spec, 'name', spec)!r} {problem}")
    BENCHMARK_SPECS[spec.name] = spec
    BENCHMARKS.append(spec.name)
    if spec.multiple_choice:
        MULTIPLE_CHOICE_BENCHMARKS.add(spec.name)
    return spec


def unregister_benchmark(name: str) -> None:
    """Remove a registered benchmark (tests and one-off experiments)."""
    BENCHMARK_SPECS.pop(name, None)
    if name in BENCHMARKS:
        BENCHMARKS.remove(name)
    MULTIPLE_CHOICE_BENCHMARKS.discard(name)


def display_name(name: str) -> str:
    """The column name of a benchmark in the tables (``mmlu_pro_economics`` -> ``Economics``)."""
    spec = BENCHMARK_SPECS.get(name)
    return spec.display_name if spec else name


for _spec in (
    BenchmarkSpec("math500", "MATH500", "math", functools.partial(_read_packaged_or_local, "math500"),
                  stable_key=lambda s: (s.metadata["unique_id"],),
                  is_test=lambda s: s.metadata["level"] == MATH500_TEST_LEVEL,
                  paper_split_sizes=PAPER_SPLIT_SIZES["math500"]),
    BenchmarkSpec("mmlu_pro_economics", "Economics", "multiple_choice",
                  functools.partial(_read_packaged_or_local, "mmlu_pro_economics"),
                  stable_key=lambda s: (s.metadata["question_id"],),
                  paper_split_sizes=PAPER_SPLIT_SIZES["mmlu_pro_economics"]),
    BenchmarkSpec("mmlu_pro_engineering", "Engineering", "multiple_choice",
                  functools.partial(_read_packaged_or_local, "mmlu_pro_engineering"),
                  stable_key=lambda s: (s.metadata["question_id"],),
                  paper_split_sizes=PAPER_SPLIT_SIZES["mmlu_pro_engineering"]),
    BenchmarkSpec("truthfulqa", "TruthfulQA", "multiple_choice",
                  functools.partial(_read_packaged_or_local, "truthfulqa"),
                  stable_key=lambda s: (s.metadata["index"],),
                  paper_split_sizes=PAPER_SPLIT_SIZES["truthfulqa"], authors_shuffle_options=True),
):
    register_benchmark(_spec)


def describe_splits(data_dir: str | os.PathLike[str] | None = None, names: Sequence[str] | None = None) -> Any:
    """A table (pandas DataFrame) of every benchmark (or of ``names``) and split: size, the paper's size (None for
    a benchmark the paper does not use), the size under the authors' split rule, composition.

    ``composition`` is the level histogram of a math benchmark whose questions carry a ``level`` (MATH500) and the
    histogram of the number of options of a multiple-choice benchmark, e.g. ``"options 4:88 5:8 10:647"``.
    """
    import pandas as pd  # lazy: pandas only for the split table (the data layer loads with every command)

    records = []
    for name in BENCHMARKS if names is None else names:
        spec = BENCHMARK_SPECS[name]
        for split in SPLITS:
            samples = load(name, split, data_dir)
            if spec.multiple_choice:
                counts = Counter(len(s.choices) for s in samples)
                composition = "options " + " ".join(f"{k}:{counts[k]}" for k in sorted(counts))
            elif samples and all("level" in s.metadata for s in samples):
                counts = Counter(s.metadata["level"] for s in samples)
                composition = "level " + " ".join(f"{k}:{counts[k]}" for k in sorted(counts))
            else:
                composition = ""
            records.append(
                {
                    "benchmark": name,
                    "split": split,
                    "n": len(samples),
                    "paper_n": (spec.paper_split_sizes or {}).get(split),
                    "authors_rule_n": len(load(name, split, data_dir, split_rule="authors")),
                    "composition": composition,
                }
            )
    return pd.DataFrame.from_records(records)


