"""\
Prompts read back: the inverse of :mod:`r2mad_core.debate.prompts`' builders, and a prompt with an experience left out.

:func:`parse_prompt` recovers the structure of a user turn the builders wrote (the simulated engine reads every
prompt through it): the kind of turn, the question, the peers' responses with their confidence annotations, the
retrieved experiences (the paper's layout and the authors'), a summary's agent responses, a judged response.
:func:`drop_oldest_experience` edits a written prompt for the ``trim_experiences`` overflow policy.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from r2mad_core.data.answers import extract_answer
from r2mad_core.debate.authors_prompts import (
    AUTHORS_CONFIDENCE_TEXT,
    AUTHORS_CORRECTNESS_TEXT,
    AUTHORS_EXPERIENCES_HEADER,
    AUTHORS_QUESTION_PREFIX,
    AUTHORS_STANCE_TEXT,
)
from r2mad_core.debate.prompts import (
    CONFIDENCE_TEXT,
    EXPERIENCES_HEADER,
    JUDGE_OPENING,
    SUMMARY_OPENING,
    ExperienceView,
    PeerResponse,
)


@dataclass
class ParsedPrompt:
    kind: Literal["task", "debate", "summary", "judge"]
    question: str
    peers: list[PeerResponse] = field(default_factory=list)
    experiences: list[ExperienceView] = field(default_factory=list)
    response: str | None = None  # judge: the response under evaluation
    agent_responses: list[str] = field(default_factory=list)  # summary: Z^(t)
    consensus_ratio: float | None = None  # summary


# Blocks are read with str.find (the lazy ``.*?`` of the patterns that read them stepped through each prompt a
# character at a time, ~10x slower); each helper gives what its docstring's pattern gives (tests/debate/test_prompts.py
# checks).
_AUTHORS_AGENT = re.compile(r'<agent index="\d+">\n<response>\n(.*?)\n</response>\n<answer>\n', re.DOTALL)
_INDEXED_OPENINGS = {name: re.compile(rf'<{name} index="\d+">\n')
                     for name in ("experience", "other_solution", "agent_response")}


def _between(text: str, opening: str, closing: str) -> tuple[str, int] | None:
    """``(group, end)`` of ``re.search(re.escape(opening) + "(.*?)" + re.escape(closing), text, re.DOTALL)``, or
    None."""
    start = text.find(opening)
    end = -1 if start < 0 else text.find(closing, start + len(opening))
    return None if end < 0 else (text[start + len(opening) : end], end + len(closing))


def _indexed_blocks(text: str, name: str) -> list[str]:
    """``re.findall(rf'<{name} index="\\d+">\\n(.*?)\\n</{name}>', text, re.DOTALL)``: e.g. every peer's solution."""
    opening, prefix, closing, found, position = _INDEXED_OPENINGS[name], f'<{name} index="', f"\n</{name}>", [], 0
    while (start := text.find(prefix, position)) >= 0:
        header = opening.match(text, start)
        if header is None:  # e.g. '<peer index="x">': not a block; a later one may be
            position = start + 1
            continue
        end = text.find(closing, header.end())
        if end < 0:  # no closing after this opening: none after a later one either
            break
        found.append(text[header.end() : end])
        position = end + len(closing)
    return found


def _tag(text: str, name: str) -> str | None:
    """``re.search(rf"<{name}>\\n?(.*?)\\n?</{name}>", text, re.DOTALL)``'s group, or None."""
    start = text.find(f"<{name}>")
    start = -1 if start < 0 else start + len(name) + 2 + text.startswith("\n", start + len(name) + 2)  # one \n in
    end = -1 if start < 0 else text.find(f"</{name}>", start)
    if end < 0:
        return None
    return text[start : end - 1] if end > start and text[end - 1] == "\n" else text[start:end]


def _confidence(body: str) -> tuple[int, str] | None:
    """``(start, group)`` of ``re.search(r"\\n<confidence>(.*?)</confidence>\\Z", body, re.DOTALL)``, or None."""
    start, end = body.find("\n<confidence>"), len(body) - len("</confidence>")
    ok = body.endswith("</confidence>") and 0 <= start and start + len("\n<confidence>") <= end
    return (start, body[start + len("\n<confidence>") : end]) if ok else None


_EXAMPLES = re.compile(r"<examples>\n(.*?)</examples>", re.DOTALL)
_EXAMPLE = re.compile(r'<example index="\d+">\n(.*?)\n</example>\n', re.DOTALL)
#: Size of the parsing memos (task prompts and retrieved experiences recur; frozen views are shared).
PARSE_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _authors_experience_view(body: str) -> ExperienceView:
    stance, question = _tag(body, "example_agent_stance_changed"), _tag(body, "example_question") or ""
    response = _tag(body, "example_agent_response") or ""  # the layout shows no parsed answer: read it
    mc = question.startswith(AUTHORS_QUESTION_PREFIX)  # the authors' multiple-choice questions
    return ExperienceView(
        question=question, response=response, answer=extract_answer(response, "truthfulqa" if mc else "math500"),
        correct=_tag(body, "example_agent_response_correctness") == AUTHORS_CORRECTNESS_TEXT[True],
        outcome_correct=False, reference=_tag(body, "example_solution") or "",
        stance_changed={v: k for k, v in AUTHORS_STANCE_TEXT.items()}.get(stance or ""))


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _experience_view(body: str) -> ExperienceView:
    cons, answer, solution = _tag(body, "consensus_ratio"), _tag(body, "your_answer"), _tag(body, "reference_solution")
    return ExperienceView(
        question=_tag(body, "question") or "", response=_tag(body, "your_response") or "",
        answer=None if answer in (None, "none") else answer, correct=_tag(body, "your_answer_was") == "correct",
        outcome_correct=_tag(body, "debate_outcome") == "correct", summary=_tag(body, "debate_summary") or "",
        consensus_ratio=float(cons) if cons else None, reference_is_solution=solution is not None,
        reference=(solution if solution is not None else _tag(body, "reference_answer")) or "")


def _parse_experiences(text: str) -> tuple[list[ExperienceView], str]:
    if text.startswith(AUTHORS_EXPERIENCES_HEADER):
        found = _EXAMPLES.search(text)
        if found:
            return [_authors_experience_view(body) for body in _EXAMPLE.findall(found.group(1))], text[found.end():]
    block = _between(text, "<experiences>\n", "\n</experiences>")
    if block is None:
        return [], text
    return [_experience_view(body) for body in _indexed_blocks(block[0], "experience")], text[block[1]:]


def parse_prompt(user_text: str) -> ParsedPrompt:
    """Recover the structure of a user turn built by :mod:`r2mad_core.debate.prompts` (used by the simulated engine);
    raises ValueError when the text was not built by one of its builders."""
    # copied, lists too (every field, in order; tests check): the memo's is never handed out
    p = _parsed_prompt(user_text)
    return ParsedPrompt(p.kind, p.question, list(p.peers), list(p.experiences), p.response, list(p.agent_responses),
                        p.consensus_ratio)


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parsed_prompt(user_text: str) -> ParsedPrompt:
    """:func:`parse_prompt`, memoised (pure in its text; a ValueError is raised again, never memoised)."""
    if user_text.startswith(SUMMARY_OPENING):
        cons, responses_block = _tag(user_text, "consensus_ratio"), (_tag(user_text, "agent_responses") or "") + "\n"
        return ParsedPrompt(kind="summary", question=(_between(user_text, "<question>\n", "\n</question>") or ("",))[0],
                            consensus_ratio=float(cons) if cons else None,
                            agent_responses=(_indexed_blocks(responses_block, "agent_response")
                                             or _AUTHORS_AGENT.findall(responses_block)))
    if user_text.startswith(JUDGE_OPENING):
        return ParsedPrompt(kind="judge", question=(_between(user_text, "<question>\n", "\n</question>") or ("",))[0],
                            response=(_between(user_text, "<solution>\n", "\n</solution>") or ("",))[0])
    experiences, rest = _parse_experiences(user_text)
    peers: list[PeerResponse] = []
    kind: Literal["task", "debate"] = "task"
    if "<other_solutions>" in rest:
        kind = "debate"
        block = rest[rest.index("<other_solutions>") : rest.index("</other_solutions>")]
        for body in _indexed_blocks(block, "other_solution"):
            conf_match, confidence = _confidence(body), None
            if conf_match:
                body, label = body[: conf_match[0]], conf_match[1].strip()
                confidence = "high" if label in (CONFIDENCE_TEXT["high"], AUTHORS_CONFIDENCE_TEXT["high"]) else "low"
            peers.append(PeerResponse(text=body, confidence=confidence))
        rest = rest[rest.index("</other_solutions>") :]
    q = _between(rest, "<question>\n", "\n</question>")
    if not q:
        raise ValueError("prompt has no <question>...</question> block: not built by r2mad_core.debate.prompts")
    return ParsedPrompt(kind=kind, question=q[0], peers=peers, experiences=experiences)


_ONE_EXPERIENCE = re.compile(r'<experience index="\d+">\n.*?\n</experience>\n', re.DOTALL)
_EMPTY_EXPERIENCES = re.compile(re.escape(EXPERIENCES_HEADER) + r"\n\n<experiences>\n</experiences>\n\n")


def drop_oldest_experience(messages: Sequence[Mapping[str, str]]) -> tuple[list[dict[str, str]], bool]:
    """``messages`` with their oldest retrieved experience left out (the first ``<experience>`` of the earliest
    user turn that shows any; an experiences block left empty goes with its header), and whether one was.
    The ``trim_experiences`` overflow policy (:mod:`r2mad_core.debate.overflow`) calls it until a prompt fits."""
    out = [dict(m) for m in messages]
    for message in out:
        if message.get("role") != "user":
            continue
        content = message.get("content", "")
        trimmed, n = _ONE_EXPERIENCE.subn("", content, count=1)
        if n:
            message["content"] = _EMPTY_EXPERIENCES.sub("", trimmed, count=1)
            return out, True
    return out, False
