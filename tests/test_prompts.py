"""The prompts are the paper's appendix text, verbatim (modulo LaTeX markup and whitespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from r2mad_core.debate import prompts

PAPER = Path(__file__).resolve().parents[1].parent / "shared" / "paper" / "r2mad_paper.tex"
#: The appendix's prompt boxes, cut verbatim from the paper's source, so that a fresh clone tests the prompts too.
BOXES = Path(__file__).resolve().parent / "data" / "paper_prompt_boxes.tex"


def _paper() -> str:
    """The prompt boxes of the paper (tests/data/paper_prompt_boxes.tex; the paper itself is not shipped)."""
    return BOXES.read_text(encoding="utf-8")


def _boxes() -> list[str]:
    text = _paper()
    starts = [i for i in range(len(text)) if text.startswith("\\begin{tcolorbox}", i)]
    return [text[i:text.index("\\end{tcolorbox}", i) + len("\\end{tcolorbox}")] for i in starts]


def test_the_packaged_prompt_boxes_are_the_papers_verbatim() -> None:
    """Each box of tests/data is a verbatim part of the paper's source, when it is beside the repository."""
    boxes = _boxes()
    assert len(boxes) == 7
    if not PAPER.exists():
        pytest.skip("the paper's source is not shipped (../shared/paper beside the repository, as in CI)")
    paper = PAPER.read_text(encoding="utf-8")
    assert all(box in paper for box in boxes)


def _plain(latex: str) -> str:
    """LaTeX box text -> comparable words."""
    s = re.sub(r"\\verb\|([^|]*)\|", r"\1", latex)
    s = re.sub(r"\\textbf\{([^}]*)\}", r"\1", s)
    s = re.sub(r"\\texttt\{([^}]*)\}", r"\1", s)
    s = s.replace(r"\textless ", "<").replace(r"\textgreater", ">").replace(r"\textless", "<")
    s = s.replace(r"\_", "_").replace(r"\{", "{").replace(r"\}", "}")
    s = re.sub(r"\\(quad|newline|vspace\{[^}]*\}|\\\[[^\]]*\]|\\)", " ", s)
    s = s.replace("\\\\", " ")
    s = s.replace("---", "\u2014")
    return " ".join(s.split())


def _box(tex: str, title: str) -> str:
    start = tex.index(title)
    body_start = tex.index("]", start) + 1
    end = tex.index(r"\end{tcolorbox}", body_start)
    return tex[body_start:end]


def _norm(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    "benchmark,title",
    [
        ("math500", "System Prompts: \\texttt{MATH500}"),
        ("mmlu_pro_engineering", "System Prompts: \\texttt{Engineering}"),
        ("mmlu_pro_economics", "System Prompts: \\texttt{Economics}"),
        ("truthfulqa", "System Prompts: \\texttt{TruthfulQA}"),
    ],
)
def test_personas_match_paper_verbatim(benchmark: str, title: str) -> None:
    box = _box(_paper(), title)
    paragraphs = re.findall(r"\\textbf\{\[(\d)\] ([^}]*)\}\\\\\[0\.5ex\]\s*(.*?)(?=\\vspace|\Z)", box, re.DOTALL)
    assert len(paragraphs) == 3 == prompts.num_personas(benchmark)
    for index, name, text in paragraphs:
        i = int(index)
        assert prompts.persona_name(benchmark, i) == name.strip()
        assert _norm(prompts.system_prompt(benchmark, i)) == _plain(text), f"persona {i} of {benchmark}"


def test_task_prompt_matches_paper() -> None:
    box = _plain(_box(_paper(), "Task Prompt: \\texttt{MATH500}"))
    built = _norm(prompts.task_prompt("math500", "{QUESTION}"))
    assert built == box


def test_task_prompts_differ_only_in_answer_format() -> None:
    math = prompts.task_prompt("math500", "Q")
    for b in ("mmlu_pro_economics", "mmlu_pro_engineering", "truthfulqa"):
        other = prompts.task_prompt(b, "Q")
        assert other.replace(prompts.MC_FORMAT, prompts.MATH_FORMAT) == math
        assert "((answer))" in other and "boxed" not in other


def test_debate_prompt_contains_paper_text_after_peers() -> None:
    box = _plain(_box(_paper(), "Debate Prompt: \\texttt{MATH500}"))
    built = prompts.debate_prompt("math500", "{QUESTION}", [prompts.PeerResponse("peer says 3")])
    head, _, tail = built.partition("</other_solutions>")
    assert "peer says 3" in head
    assert _norm(tail) == box


def test_summary_prompt_matches_paper_verbatim() -> None:
    box = _box(_paper(), "Debate Summary Prompt")
    built = prompts.summary_prompt("{QUESTION}", "{PREV_SUMMARY}", ["{AGENT_RESPONSES}"], 0.5)
    built = built.replace('<agent_response index="0">\n{AGENT_RESPONSES}\n</agent_response>', "{AGENT_RESPONSES}")
    built = built.replace("0.50", "{CONSENSUS_RATIO}")
    plain_box = _plain(box).replace('" ', '"').replace(' "', '"')
    assert _norm(built).replace('" ', '"').replace(' "', '"') == plain_box


def test_more_agents_than_personas_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="3 personas"):
        prompts.system_prompt("truthfulqa", 3)
    with pytest.raises(ValueError, match="unknown benchmark"):
        prompts.system_prompt("gsm8k", 0)


def test_parse_prompt_inverts_the_builders() -> None:
    q = "Which is true?\n\nA. one\nB. two"
    exp = prompts.ExperienceView(
        question="Old question?\n\nA. x\nB. y", response="I think ((B)).", answer="B", correct=False,
        outcome_correct=True, summary="Dynamic: split. Insight: none.", consensus_ratio=2 / 3,
    )
    peers = [prompts.PeerResponse("I pick ((A)).", "high"), prompts.PeerResponse("Surely ((B))", None),
             prompts.PeerResponse("Hmm ((B))", "low")]
    parsed = prompts.parse_prompt(prompts.debate_prompt("truthfulqa", q, peers, [exp]))
    assert parsed.kind == "debate" and parsed.question == q
    assert [(p.text, p.confidence) for p in parsed.peers] == [(p.text, p.confidence) for p in peers]
    assert len(parsed.experiences) == 1
    e = parsed.experiences[0]
    assert (e.question, e.response, e.answer, e.correct, e.outcome_correct) == (
        exp.question, exp.response, "B", False, True)
    assert e.consensus_ratio == pytest.approx(0.67)

    task = prompts.parse_prompt(prompts.task_prompt("math500", "What is $1+1$?"))
    assert task.kind == "task" and task.question == "What is $1+1$?" and not task.peers

    summary = prompts.parse_prompt(prompts.summary_prompt(q, None, ["r1 ((A))", "r2 ((B))"], 0.5))
    assert summary.kind == "summary" and summary.agent_responses == ["r1 ((A))", "r2 ((B))"]
    assert summary.consensus_ratio == 0.5

    judge = prompts.parse_prompt(prompts.judge_prompt("truthfulqa", q, "answer ((A))"))
    assert judge.kind == "judge" and judge.response == "answer ((A))" and judge.question == q

    with pytest.raises(ValueError):
        prompts.parse_prompt("hello")


@pytest.mark.parametrize(
    "text,expected",
    [("Looks right. [[YES]]", "YES"), ("[[yes]] wait, [[NO]]", "NO"), ("[[ not  sure ]]", "NOT SURE"),
     ("YES", None), ("", None)],
)
def test_parse_judgement(text: str, expected: str | None) -> None:
    assert prompts.parse_judgement(text) == expected
