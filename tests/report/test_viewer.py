"""The debate viewer (r2mad_lab.report.viewer, `r2mad view`): what a page holds, checked against the transcripts."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from r2mad_core.records import TurnRecord
from r2mad_lab.cli import main
from r2mad_lab.report import viewer
from r2mad_lab.report.stances import shared_misconception_subset

N = 12


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A simulated memory bank, then R2-MAD, MAD and MAD-M2 (subjective) runs on the same TruthfulQA questions."""
    root = tmp_path_factory.mktemp("viewer")
    cache = ["--cache-dir", str(root / "cache")]
    assert main(["build-memory", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "8",
                 "--out", str(root / "bank"), *cache]) == 0
    cells = {"r2mad": ["--method", "r2mad", "--memory", str(root / "bank")], "mad": ["--method", "mad"],
             "mad_m2": ["--method", "mad_m2", "--masking", "subjective"]}
    for name, options in cells.items():
        assert main(["run", "--benchmark", "truthfulqa", *options, "--engine", "simulated", "--limit", str(N),
                     "--out", str(root / name), *cache]) == 0
    return {"root": root, "bank": root / "bank", **{name: root / name for name in cells}}


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "transcripts.jsonl").read_text().splitlines()]


class Cells(HTMLParser):
    """Every element with data-* attributes: (tag, attrs), and the rows of the experience tables."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if any(k.startswith("data-") for k in attrs) or "class" in attrs:
            self.elements.append((tag, {k: v or "" for k, v in attrs.items()}))


def parse(text: str) -> list[tuple[str, dict[str, str]]]:
    parser = Cells()
    parser.feed(text)
    return parser.elements


def test_page_has_every_turn_of_every_round(runs, tmp_path):
    out = tmp_path / "r2.html"
    assert main(["view", str(runs["r2mad"]), "--out", str(out)]) == 0
    text = out.read_text()
    turns = [a for tag, a in parse(text) if tag == "td" and "turn" in a.get("class", "").split()]
    expected = [(r["sample_id"], rnd["round"], t["agent"], t["answer"], t["correct"])
                for r in records(runs["r2mad"]) for rnd in r["rounds"] for t in rnd["agents"]]
    assert len(turns) == len(expected) > N  # every round of every question: (round, agent) cells, no more
    found = sorted((int(a["data-round"]), int(a["data-agent"]), a["data-answer"], a["data-correct"]) for a in turns)
    assert found == sorted((t, i, ans or "", str(int(bool(ok)))) for _, t, i, ans, ok in expected)
    sections = [a["data-q"] for tag, a in parse(text) if tag == "section"]
    assert sections == [r["sample_id"] for r in records(runs["r2mad"])]
    # Self-contained: nothing is loaded from anywhere (no src/href to another file or host).
    assert not re.search(r'<(script|img|link)[^>]+(src|href)=', text)
    assert "http://" not in text and "https://" not in text


def test_retrieved_experiences_come_from_the_bank(runs, tmp_path):
    record = next(r for r in records(runs["r2mad"]) if len(r["rounds"]) > 1)
    turn = record["rounds"][1]["agents"][0]
    info = turn["retrieved"]
    cases = {}
    for line in (runs["bank"] / "agent_0" / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        cases[case["case_id"]] = case
    out = viewer.write_page([runs["r2mad"]], tmp_path / "one.html", question=record["sample_id"])
    text = out.read_text()
    assert text.count('<div class="case"') == sum(len(a["retrieved"]["case_ids"]) for rnd in record["rounds"][1:]
                                                  for a in rnd["agents"])
    for k, case_id in enumerate(info["case_ids"]):
        case = cases[case_id]
        block = re.search(rf'<div class="case" data-case="{re.escape(case_id)}">(.*?)</details></div>', text,
                          re.S).group(1)
        assert f"<pre data-question>{viewer._e(case['state']['question'])}</pre>" in block  # the case's question
        assert f"<b data-reference>{case['gold']}</b>" in block  # the reference
        answer = case["answers"][0]
        assert viewer._answer_badge(answer, case["correct"][0]) in block  # agent 0's answer then
        assert f"<b data-reward>{info['rewards'][k]}</b>" in block  # the reward the run used
        assert f"<b data-score>{info['scores'][k]:.3f}</b>" in block  # the MMR score
    assert f"λ_t = {info['lambda']:.2f}" in text
    for peer, label in turn["peer_confidence"].items():
        assert f"agent {peer}: {label} (c = {info['confidence'][peer]:.2f})" in text


def test_bank_that_moved_is_named_not_fatal(runs, tmp_path):
    config = json.loads((runs["r2mad"] / "config.json").read_text())
    moved = tmp_path / "run"
    moved.mkdir()
    config["method"]["options"]["memory"] = str(tmp_path / "gone" / "bank-x")
    (moved / "config.json").write_text(json.dumps(config))
    (moved / "transcripts.jsonl").write_text((runs["r2mad"] / "transcripts.jsonl").read_text())
    view = viewer.load_view(moved)
    assert view.cases == {} and "bank-x not found (give it with --memory)" in view.bank_note
    assert viewer.load_view(moved, memory=runs["bank"]).cases  # given explicitly


def test_stance_changes():
    def turn(answer: str, correct: bool) -> TurnRecord:
        return TurnRecord(agent=0, response=f"(({answer}))", answer=answer, correct=correct, finish_reason="stop",
                          truncated=False, empty=False, prompt_tokens=1, completion_tokens=1, cached=False, seconds=0.0)

    assert viewer._stance(turn("A", False), turn("B", True))[0] == "w2c"
    assert viewer._stance(turn("B", True), turn("A", False))[0] == "c2w"
    assert viewer._stance(turn("A", False), turn("C", False)) == ("changed", "changed from A")
    assert viewer._stance(turn("A", True), turn("A", True)) == ("", "")
    assert viewer._stance(None, turn("A", True)) == ("", "")


def test_filters_shared_misconception_and_differing(runs, tmp_path):
    mad, r2 = records(runs["mad"]), records(runs["r2mad"])
    shared = shared_misconception_subset(mad)
    differ = {a["sample_id"] for a, b in zip(r2, mad, strict=False) if a["correct"] != b["correct"]}
    assert [a["sample_id"] for a in r2] == [b["sample_id"] for b in mad]
    out = tmp_path / "shared.html"
    assert main(["view", str(runs["r2mad"]), str(runs["mad"]), "--shared-only", "--out", str(out)]) == 0
    shown = [a["data-q"] for tag, a in parse(out.read_text()) if tag == "section"]
    assert shown == [r["sample_id"] for r in r2 if r["sample_id"] in shared]
    runs_pair = [viewer.load_view(runs["r2mad"]), viewer.load_view(runs["mad"])]
    assert viewer.differing_ids(runs_pair) == differ
    if differ:
        out = tmp_path / "differ.html"
        assert main(["view", str(runs["r2mad"]), str(runs["mad"]), "--differs-only", "--out", str(out)]) == 0
        sections = [a for tag, a in parse(out.read_text()) if tag == "section"]
        assert {a["data-q"] for a in sections} == differ and all(a["data-differs"] == "1" for a in sections)
        # both debates of each question, side by side
        assert [a["data-method"] for tag, a in parse(out.read_text()) if tag == "div" and "data-method" in a] == [
            "r2mad", "mad"] * len(differ)


def test_masking_is_shown(runs, tmp_path):
    record = next(r for r in records(runs["mad_m2"]) if len(r["rounds"]) > 1)
    info = record["rounds"][1]["masking"]
    masked = [j for j in range(3) if j not in info["kept"]]
    out = viewer.write_page([runs["mad_m2"]], tmp_path / "m2.html", question=record["sample_id"])
    text = out.read_text()
    assert (f"subjective masking: masked {', '.join(map(str, masked)) or 'none'}; judge: "
            + ", ".join(f"{j}: {v}" for j, v in enumerate(info["verdicts"]))) in text


def test_inline_view_is_a_fragment(runs):
    html = viewer.show(runs["r2mad"], runs["mad"], shared_only=True).data
    assert "<html" not in html and "<script" not in html and html.startswith("<style>")
    assert html.count("<section") == 1 and "data-method=\"r2mad\"" in html and "data-method=\"mad\"" in html


def test_errors_are_one_line(runs, tmp_path, capsys):
    assert main(["view", str(runs["r2mad"]), "--question", "truthfulqa:nope"]) == 2
    assert "question 'truthfulqa:nope' is not in" in capsys.readouterr().err
    assert main(["view", str(tmp_path)]) == 2
    assert "not a run directory (no config.json)" in capsys.readouterr().err
    assert main(["view", str(runs["r2mad"]), "--differs-only"]) == 2
    assert "--differs-only needs two run directories" in capsys.readouterr().err
    assert main(["view", str(runs["r2mad"]), str(runs["mad"]), str(runs["mad_m2"])]) == 2
    assert "give one or two run directories, found 3" in capsys.readouterr().err
    assert main(["view", str(runs["r2mad"]), "--out", str(tmp_path)]) == 2


def test_fixture_has_what_the_filters_need(runs):
    """The runs above hold shared-misconception questions and questions where R2-MAD and MAD end differently,
    so the filter tests are not vacuous."""
    mad, r2 = records(runs["mad"]), records(runs["r2mad"])
    assert shared_misconception_subset(mad)
    assert any(a["correct"] != b["correct"] for a, b in zip(r2, mad, strict=False))
