"""The prompts are the paper's appendix text, verbatim (modulo LaTeX markup and whitespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2mad_core.debate import prompt_parsing, prompts

PAPER = Path(__file__).resolve().parents[2].parent / "shared" / "paper" / "r2mad_paper.tex"
#: The appendix's prompt boxes, cut verbatim from the paper's source, so that a fresh clone tests the prompts too.
BOXES = Path(__file__).resolve().parents[1] / "data" / "paper_prompt_boxes.tex"


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
    parsed = prompt_parsing.parse_prompt(prompts.debate_prompt("truthfulqa", q, peers, [exp]))
    assert parsed.kind == "debate" and parsed.question == q
    assert [(p.text, p.confidence) for p in parsed.peers] == [(p.text, p.confidence) for p in peers]
    assert len(parsed.experiences) == 1
    e = parsed.experiences[0]
    assert (e.question, e.response, e.answer, e.correct, e.outcome_correct) == (
        exp.question, exp.response, "B", False, True)
    assert e.consensus_ratio == pytest.approx(0.67)

    task = prompt_parsing.parse_prompt(prompts.task_prompt("math500", "What is $1+1$?"))
    assert task.kind == "task" and task.question == "What is $1+1$?" and not task.peers

    summary = prompt_parsing.parse_prompt(prompts.summary_prompt(q, None, ["r1 ((A))", "r2 ((B))"], 0.5))
    assert summary.kind == "summary" and summary.agent_responses == ["r1 ((A))", "r2 ((B))"]
    assert summary.consensus_ratio == 0.5

    judge = prompt_parsing.parse_prompt(prompts.judge_prompt("truthfulqa", q, "answer ((A))"))
    assert judge.kind == "judge" and judge.response == "answer ((A))" and judge.question == q

    with pytest.raises(ValueError):
        prompt_parsing.parse_prompt("hello")


@pytest.mark.parametrize(
    "text,expected",
    [("Looks right. [[YES]]", "YES"), ("[[yes]] wait, [[NO]]", "NO"), ("[[ not  sure ]]", "NOT SURE"),
     ("YES", None), ("", None)],
)
def test_parse_judgement(text: str, expected: str | None) -> None:
    assert prompts.parse_judgement(text) == expected


# --------------------------------------------------------------------------------------------
# parse_prompt is memoised and reads with str.find (issue 35): the same results as the regex reading it replaced
# --------------------------------------------------------------------------------------------
# The blocks' patterns: what parse_prompt's str.find helpers must give (their definition before issue 35).
_QUESTION = re.compile(r"<question>\n(.*?)\n</question>", re.DOTALL)
_PEER = re.compile(r'<other_solution index="\d+">\n(.*?)\n</other_solution>', re.DOTALL)
_CONF = re.compile(r"\n<confidence>(.*?)</confidence>\Z", re.DOTALL)
_EXPERIENCES = re.compile(r"<experiences>\n(.*?)\n</experiences>", re.DOTALL)
_EXPERIENCE = re.compile(r'<experience index="\d+">\n(.*?)\n</experience>', re.DOTALL)
_AGENT_RESPONSE = re.compile(r'<agent_response index="\d+">\n(.*?)\n</agent_response>', re.DOTALL)
_SOLUTION = re.compile(r"<solution>\n(.*?)\n</solution>", re.DOTALL)


def _regex_tag(text: str, name: str) -> str | None:
    m = re.search(rf"<{name}>\n?(.*?)\n?</{name}>", text, re.DOTALL)
    return m.group(1) if m else None


def _regex_parse_prompt(user_text: str) -> prompt_parsing.ParsedPrompt:
    """parse_prompt as it was before issue 35 (every block read by the module's regular expressions), the reference."""
    P = prompt_parsing
    if user_text.startswith(P.SUMMARY_OPENING):
        q = _QUESTION.search(user_text)
        cons = _regex_tag(user_text, "consensus_ratio")
        block = _regex_tag(user_text, "agent_responses") or ""
        return P.ParsedPrompt(kind="summary", question=q.group(1) if q else "",
                              agent_responses=_AGENT_RESPONSE.findall(block + "\n")
                              or P._AUTHORS_AGENT.findall(block + "\n"), consensus_ratio=float(cons) if cons else None)
    if user_text.startswith(P.JUDGE_OPENING):
        q, s = _QUESTION.search(user_text), _SOLUTION.search(user_text)
        return P.ParsedPrompt(kind="judge", question=q.group(1) if q else "", response=s.group(1) if s else "")
    experiences, rest = [], user_text
    found = P._EXAMPLES.search(user_text) if user_text.startswith(P.AUTHORS_EXPERIENCES_HEADER) else None
    if found:
        for body in P._EXAMPLE.findall(found.group(1)):
            stance, question = (_regex_tag(body, "example_agent_stance_changed"),
                                _regex_tag(body, "example_question") or "")
            response = _regex_tag(body, "example_agent_response") or ""
            experiences.append(P.ExperienceView(
                question=question, response=response,
                answer=P.extract_answer(response, "truthfulqa" if question.startswith(P.AUTHORS_QUESTION_PREFIX)
                                        else "math500"),
                correct=_regex_tag(body, "example_agent_response_correctness") == P.AUTHORS_CORRECTNESS_TEXT[True],
                outcome_correct=False, reference=_regex_tag(body, "example_solution") or "",
                stance_changed={v: k for k, v in P.AUTHORS_STANCE_TEXT.items()}.get(stance or "")))
        rest = user_text[found.end():]
    elif m := _EXPERIENCES.search(user_text):
        for body in _EXPERIENCE.findall(m.group(1)):
            cons, answer, solution = (_regex_tag(body, n) for n in ("consensus_ratio", "your_answer",
                                                                    "reference_solution"))
            experiences.append(P.ExperienceView(
                question=_regex_tag(body, "question") or "", response=_regex_tag(body, "your_response") or "",
                answer=None if answer in (None, "none") else answer,
                correct=_regex_tag(body, "your_answer_was") == "correct",
                outcome_correct=_regex_tag(body, "debate_outcome") == "correct",
                summary=_regex_tag(body, "debate_summary") or "", consensus_ratio=float(cons) if cons else None,
                reference=(solution if solution is not None else _regex_tag(body, "reference_answer")) or "",
                reference_is_solution=solution is not None))
        rest = user_text[m.end():]
    peers, kind = [], "task"
    if "<other_solutions>" in rest:
        kind = "debate"
        for body in _PEER.findall(rest[rest.index("<other_solutions>"): rest.index("</other_solutions>")]):
            conf, confidence = _CONF.search(body), None
            if conf:
                body, label = body[: conf.start()], conf.group(1).strip()
                confidence = ("high" if label in (P.CONFIDENCE_TEXT["high"], P.AUTHORS_CONFIDENCE_TEXT["high"])
                              else "low")
            peers.append(P.PeerResponse(text=body, confidence=confidence))
        rest = rest[rest.index("</other_solutions>"):]
    q = _QUESTION.search(rest)
    if not q:
        raise ValueError("no question")
    return P.ParsedPrompt(kind=kind, question=q.group(1), peers=peers, experiences=experiences)


def _packaged_questions() -> list[tuple[str, str, str]]:
    """(benchmark, question, a reference text) from the packaged benchmark files: real questions and solutions."""
    import json

    from r2mad_core.data import sources

    def rows(name: str) -> list[dict]:
        text = sources._packaged_bytes(sources.PACKAGED_DATA_DIR / name).decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    out = [("math500", r["problem"], r["solution"]) for r in rows("math500/test.jsonl.gz")[:120]]
    out += [("mmlu_pro_economics", r["question"] + "\n\n" + "\n".join(f"{'ABCDEFGHIJ'[i]}. {o}"
                                                                      for i, o in enumerate(r["options"])),
             " ".join(r["options"])) for r in rows("mmlu_pro/test_economics.jsonl.gz")[:80]]
    return out


def _built_prompts() -> list[str]:
    """Prompts from every builder (both wordings, experiences with and without a reference, peers with each
    confidence, summaries in both slots) over real questions, responses and solutions."""
    import random

    rng = random.Random(35)
    questions = _packaged_questions()
    built = []
    for k, (benchmark, question, reference) in enumerate(questions):
        other = questions[(k * 7 + 3) % len(questions)]
        responses = [reference[: rng.randrange(0, 600)] + f" The answer is (({'ABCD'[k % 4]})).", other[2][:300], ""]
        views = [prompts.ExperienceView(question=other[1], response=responses[0], answer=rng.choice([None, "B", "12"]),
                                        correct=rng.random() < 0.5, outcome_correct=rng.random() < 0.5,
                                        summary=rng.choice(["", "Dynamic: split.\n\nInsight: none."]),
                                        consensus_ratio=rng.choice([None, 0.0, 1 / 3, 1.0]),
                                        reference=rng.choice(["", reference[:200]]),
                                        reference_is_solution=rng.random() < 0.5,
                                        stance_changed=rng.choice([None, True, False]))
                 for _ in range(rng.randrange(0, 4))]
        peers = [prompts.PeerResponse(r, rng.choice([None, "high", "low"])) for r in responses[: rng.randrange(1, 4)]]
        for wording in ("paper", "authors"):
            if wording == "authors" and benchmark != "math500":
                question = prompts.question_text(question, True, "authors")
            built.append(prompts.task_prompt(benchmark, question, views, rng.choice([None, 50]), wording))
            built.append(prompts.debate_prompt(benchmark, question, peers, views, None, wording,
                                               rng.choice([None, True, False])))
            for slot in prompts.SUMMARY_AGENT_SLOTS:
                built.append(prompts.summary_prompt(question, rng.choice([None, "Before: split."]), responses,
                                                    rng.random(), answers=["A", None, "B"],
                                                    previous_answers=rng.choice([None, ["A", "A", None]]),
                                                    slot=slot, wording=wording))
        built.append(prompts.judge_prompt(benchmark, question, responses[0]))
    return built


def test_parse_prompt_reads_real_prompts_as_the_regular_expressions_did() -> None:
    built = _built_prompts()
    assert len(built) > 1500
    for text in built:
        expected = _regex_parse_prompt(text)  # the reference is a function of the text: read once
        assert prompt_parsing.parse_prompt(text) == expected
        assert prompt_parsing.parse_prompt(text) == expected  # again: from the memo


def test_parse_prompt_hands_out_its_own_copy() -> None:
    """The memo's parsed prompt is never handed out: a caller that changes its lists changes nothing for the next."""
    assert {f.name for f in __import__("dataclasses").fields(prompt_parsing.ParsedPrompt)} == {
        "kind", "question", "peers", "experiences", "response", "agent_responses", "consensus_ratio"}  # all copied
    text = prompts.debate_prompt("math500", "Q?", [prompts.PeerResponse("x \\boxed{1}", "high")])
    first = prompt_parsing.parse_prompt(text)
    first.peers.append(prompts.PeerResponse("intruder"))
    first.question = "changed"
    again = prompt_parsing.parse_prompt(text)
    assert again == _regex_parse_prompt(text) and len(again.peers) == 1 and again.question == "Q?"
    with pytest.raises(ValueError):
        prompt_parsing.parse_prompt("no question here")
    with pytest.raises(ValueError):  # an error is raised again, not remembered as a result
        prompt_parsing.parse_prompt("no question here")


_FRAGMENTS = ["<question>", "</question>", "\n", "<experiences>", "</experiences>", '<experience index="',
              "</experience>",
              '<other_solution index="', "</other_solution>", '<agent_response index="', "</agent_response>", '">', "1",
              "23", "x", "<", ">", "<confidence>", "</confidence>", "<tag>", "</tag>", '"', "٣"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=40))
def test_the_find_readers_give_what_the_regular_expressions_give(parts: list[str]) -> None:
    text = "".join(parts)
    for opening, closing, pattern in (("<question>\n", "\n</question>", _QUESTION),
                                      ("<experiences>\n", "\n</experiences>", _EXPERIENCES)):
        m = pattern.search(text)
        assert prompt_parsing._between(text, opening, closing) == ((m.group(1), m.end()) if m else None)
    for name, pattern in (("experience", _EXPERIENCE), ("other_solution", _PEER),
                          ("agent_response", _AGENT_RESPONSE)):
        assert prompt_parsing._indexed_blocks(text, name) == pattern.findall(text)
    for name in ("tag", "question", "confidence"):
        assert prompt_parsing._tag(text, name) == _regex_tag(text, name)
    m = _CONF.search(text)
    assert prompt_parsing._confidence(text) == ((m.start(), m.group(1)) if m else None)
