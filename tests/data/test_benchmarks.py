"""Benchmark loading and the paper's splits (Appendix A): exact counts, determinism, option shuffling,
file layouts, the Hub fallback (with a fake ``datasets``), and errors that name file, row and field."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
from benchmark_data import data_dir_for_tests

from r2mad_core.data import benchmarks
from r2mad_core.data import sources as benchmark_files
from r2mad_core.data.benchmarks import (
    BENCHMARKS,
    BenchmarkDataError,
    Sample,
    describe_splits,
    format_question,
    load,
)
from r2mad_core.data.sources import BenchmarkFilesNotFound, resolve_data_dir, verify_checksums

REPO = Path(__file__).resolve().parents[2]
PAPER = {
    "math500": (366, 134),
    "mmlu_pro_economics": (633, 211),
    "mmlu_pro_engineering": (727, 242),
    "truthfulqa": (498, 166),
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$R2MAD_DATA_DIR when set, else the packaged files unpacked in the shared folder's layout
    (tests/benchmark_data.py)."""
    return data_dir_for_tests(tmp_path_factory.mktemp("benchmark_data"))


# ---------------------------------------------------------------------------------------------------
# The paper's splits on the real files
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BENCHMARKS)
def test_split_sizes_match_the_paper(name: str, data_dir: Path) -> None:
    train, test, everything = (load(name, split, data_dir) for split in ("train", "test", "all"))
    assert (len(train), len(test)) == PAPER[name]
    assert len(everything) == sum(PAPER[name])
    train_ids, test_ids = {s.id for s in train}, {s.id for s in test}
    assert len(train_ids) == len(train) and len(test_ids) == len(test)  # ids are unique
    assert not train_ids & test_ids  # disjoint
    assert train_ids | test_ids == {s.id for s in everything}
    assert all(s.benchmark == name for s in everything)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_splits_are_deterministic(name: str, data_dir: Path) -> None:
    first = [s.id for s in load(name, "test", data_dir)]
    second = [s.id for s in load(name, "test", data_dir)]
    assert first == second
    # The order is a shuffle, not the file order, so the first k items are a fair subset.
    assert first != sorted(first, key=lambda i: (len(i), i))


def test_math500_test_is_the_level5_problems(data_dir: Path) -> None:
    test = load("math500", "test", data_dir)
    train = load("math500", "train", data_dir)
    assert {s.metadata["level"] for s in test} == {5}
    assert Counter(s.metadata["level"] for s in train) == {1: 43, 2: 90, 3: 105, 4: 128}
    assert not any(s.is_multiple_choice for s in test + train)
    sample = next(s for s in train if s.id == "math500:test/precalculus/807.json")
    assert sample.gold == r"\left( 3, \frac{\pi}{2} \right)"
    assert sample.question.startswith("Convert the point $(0,3)$ in rectangular coordinates")
    assert sample.metadata["subject"] == "Precalculus" and sample.metadata["level"] == 2
    assert Counter(s.metadata["subject"] for s in test + train)["Counting & Probability"] == 38


@pytest.mark.parametrize(
    ("name", "histogram", "id_range"),
    [
        ("mmlu_pro_economics", {3: 3, 4: 88, 5: 8, 6: 6, 7: 12, 8: 30, 9: 50, 10: 647}, (6826, 7686)),
        ("mmlu_pro_engineering", {3: 1, 4: 59, 5: 1, 6: 1, 7: 1, 8: 5, 9: 21, 10: 880}, (11285, 12256)),
    ],
)
def test_mmlu_pro_options_kept_as_published(name: str, histogram: dict, id_range: tuple, data_dir: Path) -> None:
    samples = load(name, "all", data_dir)
    assert Counter(len(s.choices) for s in samples) == histogram
    ids = [s.metadata["question_id"] for s in samples]
    assert (min(ids), max(ids)) == id_range
    for sample in samples:
        assert sample.gold == "ABCDEFGHIJ"[sample.metadata["answer_index"]]
        assert sample.option_letters == "ABCDEFGHIJ"[: len(sample.choices)]
        assert sample.metadata["n_options"] == len(sample.choices)


def test_mmlu_pro_first_economics_question(data_dir: Path) -> None:
    sample = next(s for s in load("mmlu_pro_economics", "all", data_dir) if s.id == "mmlu_pro_economics:6826")
    assert sample.gold == "G"
    assert sample.choices[6] == "$50.00 spent eating out at a restaurant"
    assert sample.question.splitlines()[:4] == [
        "Which of the following would be classified under C when calculating GDP?",
        "",
        "A. The purchase of a new car by a car rental company",
        "B. The purchase of a new construction crane by a construction company",
    ]
    assert sample.question.splitlines()[-1] == "H. A barber cutting his own hair"
    assert sample.metadata["src"] == "ori_mmlu-high_school_macroeconomics"


@pytest.mark.parametrize("name", ["mmlu_pro_economics", "mmlu_pro_engineering"])
def test_parquet_and_derived_jsonl_give_identical_samples(name: str, data_dir: Path, tmp_path: Path) -> None:
    category = benchmark_files.MMLU_PRO_CATEGORY[name]
    parquet_dir = tmp_path / "parquet" / "mmlu_pro" / "raw" / "data"
    jsonl_dir = tmp_path / "jsonl" / "mmlu_pro" / "derived"
    parquet_dir.mkdir(parents=True)
    jsonl_dir.mkdir(parents=True)
    upstream = data_dir / "mmlu_pro/raw/data" / benchmark_files.MMLU_PRO_PARQUET
    if upstream.is_file():  # the shared data folder ($R2MAD_DATA_DIR): MMLU-Pro's own parquet
        (parquet_dir / benchmark_files.MMLU_PRO_PARQUET).symlink_to(upstream)
    else:  # the packaged files: a parquet of both categories' rows, interleaved, so the category filter is tested
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [[json.loads(line) for line in (data_dir / f"mmlu_pro/derived/test_{c}.jsonl").read_text().splitlines()]
                for c in ("economics", "engineering")]
        mixed = ([row for pair in zip(*rows, strict=False) for row in pair] + rows[0][len(rows[1]):]
                 + rows[1][len(rows[0]):])
        pq.write_table(pa.Table.from_pylist(mixed), parquet_dir / benchmark_files.MMLU_PRO_PARQUET)
    (jsonl_dir / f"test_{category}.jsonl").symlink_to(data_dir / f"mmlu_pro/derived/test_{category}.jsonl")
    from_parquet = load(name, "all", tmp_path / "parquet")
    from_jsonl = load(name, "all", tmp_path / "jsonl")
    assert from_parquet == from_jsonl
    assert [s.metadata for s in from_parquet] == [s.metadata for s in from_jsonl]


def test_split_does_not_depend_on_file_row_order(data_dir: Path, tmp_path: Path) -> None:
    lines = (data_dir / "mmlu_pro/derived/test_economics.jsonl").read_text(encoding="utf-8").splitlines()
    random.Random(7).shuffle(lines)
    target = tmp_path / "mmlu_pro" / "test_economics.jsonl"  # a flat layout
    target.parent.mkdir(parents=True)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [s.id for s in load("mmlu_pro_economics", "test", tmp_path)] == [
        s.id for s in load("mmlu_pro_economics", "test", data_dir)
    ]
    math_lines = (data_dir / "math500/raw/test.jsonl").read_text(encoding="utf-8").splitlines()
    random.Random(8).shuffle(math_lines)
    (tmp_path / "math500").mkdir()
    (tmp_path / "math500" / "test.jsonl").write_text("\n".join(math_lines) + "\n", encoding="utf-8")
    assert [s.id for s in load("math500", "train", tmp_path)] == [s.id for s in load("math500", "train", data_dir)]


def test_truthfulqa_selection_and_shuffled_options(data_dir: Path) -> None:
    raw = json.loads((data_dir / "truthfulqa/raw/mc_task.json").read_text(encoding="utf-8"))
    samples = load("truthfulqa", "all", data_dir)
    assert len(samples) == 664
    assert Counter(len(s.choices) for s in samples) == {4: 219, 5: 192, 6: 135, 7: 65, 8: 36, 9: 17}
    for sample in samples:
        index = sample.metadata["index"]
        assert sample.id == f"truthfulqa:{index}"
        targets = raw[index]["mc1_targets"]
        assert sorted(sample.choices) == sorted(text.strip() for text in targets)
        correct_text = next(text for text, label in targets.items() if label == 1)
        assert sample.gold_choice == correct_text.strip()  # the gold letter points at the right option
        assert f"\n{sample.gold}. {correct_text.strip()}" in sample.question


def test_truthfulqa_gold_letter_is_roughly_uniform(data_dir: Path) -> None:
    samples = load("truthfulqa", "all", data_dir)
    golds = Counter(s.gold for s in samples)
    assert golds["A"] < 0.4 * len(samples)  # upstream lists the correct option first: 100% "A"
    # Per number of options k, the gold position should be uniform on k letters (chi-square test).
    for k in (4, 5, 6):
        positions = Counter(s.option_letters.index(s.gold) for s in samples if len(s.choices) == k)
        n = sum(positions.values())
        chi_square = sum((positions[i] - n / k) ** 2 / (n / k) for i in range(k))
        assert len(positions) == k
        assert chi_square < 20.5, (k, positions)  # 0.1% critical value for up to 5 degrees of freedom


def test_truthfulqa_option_shuffle_is_per_question_and_fixed() -> None:
    assert benchmarks.shuffle_options(3, 5) == benchmarks.shuffle_options(3, 5)
    assert sorted(benchmarks.shuffle_options(3, 5)) == [0, 1, 2, 3, 4]
    orders = {tuple(benchmarks.shuffle_options(i, 6)) for i in range(50)}
    assert len(orders) > 30


def test_describe_splits(data_dir: Path) -> None:
    table = describe_splits(data_dir)
    assert len(table) == 12
    assert list(table.columns) == ["benchmark", "split", "n", "paper_n", "authors_rule_n", "composition"]
    assert (table["n"] == table["paper_n"]).all()
    authors = {(r.benchmark, r.split): r.authors_rule_n for r in table.itertuples()}
    assert authors[("mmlu_pro_engineering", "train")] == 726 and authors[("mmlu_pro_engineering", "test")] == 243
    row = table[(table.benchmark == "math500") & (table.split == "test")].iloc[0]
    assert row["composition"] == "level 5:134"
    row = table[(table.benchmark == "truthfulqa") & (table.split == "all")].iloc[0]
    assert row["composition"] == "options 4:219 5:192 6:135 7:65 8:36 9:17"


def test_authors_split_rule_reproduces_random_seed_42(data_dir: Path) -> None:
    """split_rule="authors": Python's random.seed(42), shuffle (TruthfulQA: after one option shuffle per question),
    first int(0.75 n) train -- the authors' prepare_data.py, replayed here on the questions in file order."""
    import random

    for name, (n_train, n_test) in {"mmlu_pro_economics": (633, 211), "mmlu_pro_engineering": (726, 243),
                                    "truthfulqa": (498, 166), "math500": (366, 134)}.items():
        train = load(name, "train", data_dir, split_rule="authors")
        test = load(name, "test", data_dir, split_rule="authors")
        assert (len(train), len(test)) == (n_train, n_test), name
        assert not {s.id for s in train} & {s.id for s in test}
    in_file_order = sorted(load("mmlu_pro_engineering", "all", data_dir), key=lambda s: s.metadata["question_id"])
    rng = random.Random(42)
    rng.shuffle(in_file_order)
    assert [s.id for s in load("mmlu_pro_engineering", "train", data_dir, split_rule="authors")] == [
        s.id for s in in_file_order[:726]
    ]
    tqa = sorted(load("truthfulqa", "all", data_dir), key=lambda s: s.metadata["index"])
    rng = random.Random(42)
    for sample in tqa:
        rng.shuffle(list(sample.choices))
    rng.shuffle(tqa)
    assert [s.id for s in load("truthfulqa", "test", data_dir, split_rule="authors")] == [s.id for s in tqa[498:]]
    with pytest.raises(ValueError, match="split_rule"):
        load("truthfulqa", "test", data_dir, split_rule="ours")


def test_checksums_of_shared_files(data_dir: Path) -> None:
    """Every file present matches the shared folder's sha256; the unpacked packaged files are all but MMLU-Pro's
    upstream parquet (the package ships its two categories as jsonl)."""
    expected = {path: True for path in benchmark_files.CHECKSUMS}
    if not (data_dir / next(p for p in benchmark_files.CHECKSUMS if p.endswith(".parquet"))).is_file():
        expected = {path: (None if path.endswith(".parquet") else True) for path in expected}
    assert verify_checksums(data_dir) == expected
    # the packaged files
    assert verify_checksums(benchmark_files.PACKAGED_DATA_DIR) == {p: True for p in benchmark_files.packaged_manifest()}


def test_command_line_count(data_dir: Path) -> None:
    code = "from r2mad_core.data.benchmarks import load; print(len(load('truthfulqa','test')))"
    env = {**os.environ, "R2MAD_DATA_DIR": str(data_dir)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip() == "166"


# ---------------------------------------------------------------------------------------------------
# Sample and formatting
# ---------------------------------------------------------------------------------------------------


def test_format_question() -> None:
    assert format_question("  What is 2+2? ", ["3", " 4 ", "5"]) == "What is 2+2?\n\nA. 3\nB. 4\nC. 5"
    assert format_question("Compute $x$.") == "Compute $x$."


def test_sample_properties_and_validation() -> None:
    sample = Sample("truthfulqa:1", "truthfulqa", "Q?\n\nA. x\nB. y\nC. z", "C", ("x", "y", "z"), {"index": 1})
    assert sample.is_multiple_choice and sample.option_letters == "ABC" and sample.gold_choice == "z"
    assert hash(sample) == hash(Sample("truthfulqa:1", "truthfulqa", sample.question, "C", ("x", "y", "z")))
    math_sample = Sample("math500:a", "math500", "Compute 1+1.", "2")
    assert not math_sample.is_multiple_choice and math_sample.option_letters == "" and math_sample.gold_choice is None
    with pytest.raises(ValueError, match="gold must be one of the option letters 'ABC', found 'D'"):
        Sample("truthfulqa:1", "truthfulqa", "Q?", "D", ("x", "y", "z"))
    with pytest.raises(ValueError, match="benchmark must be one of"):
        Sample("x:1", "gsm8k", "Q?", "1")
    with pytest.raises(ValueError, match="gold must be a non-empty string"):
        Sample("math500:a", "math500", "Q?", " ")
    with pytest.raises(ValueError, match="needs at least 2 choices"):
        Sample("mmlu_pro_economics:1", "mmlu_pro_economics", "Q?", "A")
    with pytest.raises(ValueError, match="has no choices"):
        Sample("math500:a", "math500", "Q?", "A", ("x", "y"))
    assert Sample("truthfulqa:2", "truthfulqa", "Q", "A", ["x", "y"]).choices == ("x", "y")  # type: ignore[arg-type]


def test_unknown_benchmark_and_split(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown benchmark 'gsm8k'"):
        load("gsm8k", "test", tmp_path)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load("math500", "dev", tmp_path)


# ---------------------------------------------------------------------------------------------------
# Small fixture files: layouts, splits on made-up data, malformed rows
# ---------------------------------------------------------------------------------------------------


def _math_row(i: int, level: int = 1, **changes: object) -> dict:
    row = {
        "problem": f"Compute {i} + 1.",
        "solution": f"It is $\\boxed{{{i + 1}}}$.",
        "answer": str(i + 1),
        "subject": "Algebra",
        "level": level,
        "unique_id": f"test/algebra/{i}.json",
    }
    row.update(changes)
    return {k: v for k, v in row.items() if v is not None}


def _mmlu_row(question_id: int, category: str = "economics", **changes: object) -> dict:
    row = {
        "question_id": question_id,
        "question": f"Question {question_id}?",
        "options": ["alpha", "beta", "gamma", "delta"],
        "answer": "C",
        "answer_index": 2,
        "cot_content": "",
        "category": category,
        "src": "ori_mmlu-x",
    }
    row.update(changes)
    return {k: v for k, v in row.items() if v is not None}


def _tqa_row(i: int, n_options: int) -> dict:
    targets = {f"Answer {i}.{j}": int(j == 0) for j in range(n_options)}
    return {"question": f"Question {i}?", "mc1_targets": targets, "mc2_targets": targets}


def _write_jsonl(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(row) for row in rows]
    for index, text in (raw_lines or {}).items():
        lines[index] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_small_math_file_split_by_level(tmp_path: Path) -> None:
    rows = [_math_row(i, level=5 if i % 3 == 0 else 2) for i in range(12)]
    _write_jsonl(tmp_path / "math500/raw/test.jsonl", rows)
    test = load("math500", "test", tmp_path)
    assert sorted(s.id for s in test) == sorted(f"math500:test/algebra/{i}.json" for i in (0, 3, 6, 9))
    assert len(load("math500", "train", tmp_path)) == 8
    assert load("math500", "all", tmp_path)[0].metadata["solution"].startswith("It is")


def test_small_mmlu_split_is_floor_quarter_and_filters_category(tmp_path: Path) -> None:
    rows = [_mmlu_row(100 + i) for i in range(9)] + [_mmlu_row(500, category="law")]
    _write_jsonl(tmp_path / "mmlu_pro/derived/test_economics.jsonl", rows[:9])
    # floor(9 / 4) = 2 test questions, 7 train.
    assert len(load("mmlu_pro_economics", "test", tmp_path)) == 2
    assert len(load("mmlu_pro_economics", "train", tmp_path)) == 7
    sample = load("mmlu_pro_economics", "all", tmp_path)[0]
    assert sample.gold == "C" and sample.choices == ("alpha", "beta", "gamma", "delta")
    assert sample.question.endswith("\n\nA. alpha\nB. beta\nC. gamma\nD. delta")


def test_small_truthfulqa_filter_4_to_9(tmp_path: Path) -> None:
    rows = [_tqa_row(i, n) for i, n in enumerate([2, 3, 4, 9, 10, 13, 5, 6])]
    path = tmp_path / "truthfulqa/mc_task.json"  # a flat layout
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    samples = load("truthfulqa", "all", tmp_path)
    assert sorted(s.id for s in samples) == ["truthfulqa:2", "truthfulqa:3", "truthfulqa:6", "truthfulqa:7"]
    for sample in samples:
        assert sample.gold_choice == f"Answer {sample.metadata['index']}.0"


def test_data_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_DATA_DIR", str(tmp_path / "from_env"))
    assert resolve_data_dir() == tmp_path / "from_env"
    assert resolve_data_dir(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv("R2MAD_DATA_DIR")
    assert resolve_data_dir() == benchmark_files.PACKAGED_DATA_DIR  # the files shipped with the package
    _write_jsonl(tmp_path / "from_env/math500/raw/test.jsonl", [_math_row(1), _math_row(2, level=5)])
    monkeypatch.setenv("R2MAD_DATA_DIR", str(tmp_path / "from_env"))
    assert [s.id for s in load("math500", "test")] == ["math500:test/algebra/2.json"]


def test_missing_files_without_datasets_names_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(BenchmarkFilesNotFound) as raised:
        load("truthfulqa", "test", tmp_path)
    message = str(raised.value)
    assert str(tmp_path / "truthfulqa/raw/mc_task.json") in message
    assert str(tmp_path / "truthfulqa/mc_task.json") in message
    assert "'datasets' is not installed" in message and "mc_task.json" in message
    with pytest.raises(BenchmarkFilesNotFound, match="test_engineering.jsonl"):
        load("mmlu_pro_engineering", "test", tmp_path)


def test_hub_unreachable_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def load_dataset(*args: object, **kwargs: object) -> list:
        raise ConnectionError("Hub unreachable")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(BenchmarkFilesNotFound, match="ConnectionError: Hub unreachable"):
        load("math500", "test", tmp_path)


def test_hub_download_is_written_in_flat_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def load_dataset(repo: str, config: str | None, split: str) -> list:
        calls.append((repo, config, split))
        if repo == "HuggingFaceH4/MATH-500":
            return [_math_row(i, level=5 if i < 2 else 3) for i in range(6)]
        if repo == "TIGER-Lab/MMLU-Pro":
            return [_mmlu_row(i) for i in range(8)] + [_mmlu_row(100 + i, category="engineering") for i in range(4)]
        choices = {"choices": ["right", "wrong 1", "wrong 2", "wrong 3"], "labels": [1, 0, 0, 0]}
        return [{"question": f"Q{i}?", "mc1_targets": choices, "mc2_targets": choices} for i in range(4)]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert len(load("math500", "test", tmp_path)) == 2
    assert len(load("mmlu_pro_economics", "all", tmp_path)) == 8
    assert len(load("mmlu_pro_engineering", "test", tmp_path)) == 1
    tqa = load("truthfulqa", "all", tmp_path)
    assert [s.gold_choice for s in tqa] == ["right"] * 4
    assert (tmp_path / "math500/test.jsonl").is_file()
    assert (tmp_path / "mmlu_pro/test_economics.jsonl").is_file()
    assert (tmp_path / "truthfulqa/mc_task.json").is_file()
    assert calls == [
        ("HuggingFaceH4/MATH-500", None, "test"),
        ("TIGER-Lab/MMLU-Pro", None, "test"),
        ("TIGER-Lab/MMLU-Pro", None, "test"),
        ("truthful_qa", "multiple_choice", "validation"),
    ]
    # Once written, the files are read locally: no second download.
    load("math500", "train", tmp_path)
    assert len(calls) == 4


MALFORMED_MATH = [
    pytest.param([_math_row(1), _math_row(2, answer=None)], {}, 2, "answer", "missing", id="missing-answer"),
    pytest.param([_math_row(1), _math_row(2), _math_row(3)], {2: '{"problem": "x",'}, 3, None, "not valid JSON",
                 id="bad-json"),
    pytest.param([_math_row(1, level=7)], {}, 1, "level", "expected an integer 1-5, found 7", id="level-range"),
    pytest.param([_math_row(1, level="hard")], {}, 1, "level", "found 'hard'", id="level-text"),
    pytest.param([_math_row(1), _math_row(1)], {}, 2, "unique_id", "duplicate", id="duplicate-id"),
    pytest.param([_math_row(1, problem="  ")], {}, 1, "problem", "non-empty", id="empty-problem"),
    pytest.param([_math_row(1, answer=3)], {}, 1, "answer", "expected str, found int", id="answer-not-string"),
    pytest.param([_math_row(1)], {0: "[1, 2]"}, 1, None, "expected a JSON object", id="not-an-object"),
]


@pytest.mark.parametrize(("rows", "raw_lines", "row", "field", "problem"), MALFORMED_MATH)
def test_malformed_math_file(rows: list, raw_lines: dict, row: int, field: str | None, problem: str,
                             tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "math500/raw/test.jsonl", rows, raw_lines)
    with pytest.raises(BenchmarkDataError) as raised:
        load("math500", "test", tmp_path)
    error = raised.value
    assert (error.path, error.row, error.field_name) == (path, row, field)
    assert str(path) in str(error) and f"row {row}" in str(error) and problem in str(error)
    if field:
        assert f"field {field!r}" in str(error)


MALFORMED_MMLU = [
    pytest.param(_mmlu_row(1, answer="E"), "answer", "expected one of the option letters 'ABCD', found 'E'",
                 id="letter-outside-options"),
    pytest.param(_mmlu_row(1, answer_index=1), "answer_index", "expected 2 (answer 'C'), found 1", id="index-mismatch"),
    pytest.param(_mmlu_row(1, answer=None), "answer", "missing", id="missing-answer"),
    pytest.param(_mmlu_row(1, options=["only one"], answer="A", answer_index=0), "options",
                 "expected 2 to 10 options, found 1", id="one-option"),
    pytest.param(_mmlu_row(1, options=["a", ""]), "options", "option 2 must be a non-empty string", id="empty-option"),
    pytest.param({**_mmlu_row(1), "question_id": "x1"}, "question_id", "expected int, found str", id="id-type"),
    pytest.param(_mmlu_row(1, category="law"), "category", "expected 'economics' in this file, found 'law'",
                 id="wrong-category"),
]


@pytest.mark.parametrize(("bad_row", "field", "problem"), MALFORMED_MMLU)
def test_malformed_mmlu_file(bad_row: dict, field: str, problem: str, tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "mmlu_pro/derived/test_economics.jsonl", [_mmlu_row(7), _mmlu_row(8), bad_row])
    with pytest.raises(BenchmarkDataError) as raised:
        load("mmlu_pro_economics", "all", tmp_path)
    assert (raised.value.path, raised.value.row, raised.value.field_name) == (path, 3, field)
    assert problem in str(raised.value)


def test_malformed_parquet_row_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_mmlu_row(1, category="law", answer="Z"), _mmlu_row(2), _mmlu_row(3, answer="D", answer_index=0)]
    path = tmp_path / "mmlu_pro/raw/data" / benchmark_files.MMLU_PRO_PARQUET
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(BenchmarkDataError) as raised:
        load("mmlu_pro_economics", "all", tmp_path)  # row 1 is another category and is not checked
    assert (raised.value.path, raised.value.row, raised.value.field_name) == (path, 3, "answer_index")


MALFORMED_TQA = [
    pytest.param("[{\"question\": \"Q?\",", None, None, "not valid JSON", id="bad-json"),
    pytest.param(json.dumps({"question": "Q?"}), None, None, "expected a JSON list", id="not-a-list"),
    pytest.param(json.dumps([_tqa_row(0, 4), {"question": "Q1?"}]), 2, "mc1_targets", "missing", id="missing-targets"),
    pytest.param(
        json.dumps([_tqa_row(0, 4), {"question": "Q1?", "mc1_targets": {"a": 1, "b": 1, "c": 0, "d": 0}}]),
        2, "mc1_targets", "exactly one correct option", id="two-correct",
    ),
    pytest.param(
        json.dumps([{"question": "Q0?", "mc1_targets": {"a": 1, "b": 2, "c": 0, "d": 0}}]), 1, "mc1_targets",
        "labels must be 0 or 1", id="bad-label"
    ),
    pytest.param(json.dumps([_tqa_row(0, 4), _tqa_row(0, 5)]), 2, "question", "duplicate question",
                 id="duplicate-question"),
    pytest.param('[{"question": "Q?", "mc1_targets": {"a": 1, "a": 0, "b": 0, "c": 0}}]', None, None,
                 "duplicate keys ['a']", id="duplicate-option"),
    pytest.param(json.dumps([_tqa_row(0, 4), "text"]), 2, None, "expected a JSON object", id="row-not-object"),
]


@pytest.mark.parametrize(("content", "row", "field", "problem"), MALFORMED_TQA)
def test_malformed_truthfulqa_file(content: str, row: int | None, field: str | None, problem: str,
                                   tmp_path: Path) -> None:
    path = tmp_path / "truthfulqa/raw/mc_task.json"
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BenchmarkDataError) as raised:
        load("truthfulqa", "test", tmp_path)
    assert (raised.value.path, raised.value.row, raised.value.field_name) == (path, row, field)
    assert problem in str(raised.value) and str(path) in str(raised.value)


def test_split_size_mismatch_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write_jsonl(tmp_path / "math500/raw/test.jsonl", [_math_row(1), _math_row(2, level=5)])
    with caplog.at_level("WARNING", logger="r2mad_core.data.benchmarks"):
        load("math500", "test", tmp_path)
    assert "math500 test split has 1 questions, the paper's has 134" in caplog.text


def test_seed_constants_are_documented() -> None:
    assert str(benchmarks.SPLIT_SEED) and benchmarks.split_seed("truthfulqa") != benchmarks.split_seed("math500")
    assert math.floor(969 / benchmarks.TEST_FRACTION_DENOMINATOR) == 242
