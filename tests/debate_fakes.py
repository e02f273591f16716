"""A scripted fake engine and hand-made samples for the debate/methods/experiments tests.

``ScriptedEngine`` implements the Engine protocol: it answers each request with a function of
(question, agent persona, round, request), counts its ``generate`` calls and keeps every batch.
"""

from __future__ import annotations

import hashlib
import time
from typing import Callable, Sequence

from r2mad_core.data.benchmarks import Sample, format_question
from r2mad_core.debate import prompt_parsing, prompts
from r2mad_core.engine import Completion, Ledger, Request

LETTERS = "ABCDEFGHIJ"


def persona_of(request: Request, benchmark: str) -> int | None:
    """The persona index of the request's system prompt (None without a system turn)."""
    first = request.messages[0]
    if first["role"] != "system":
        return None
    for index, (_, text) in enumerate(prompts.PERSONAS[benchmark]):
        if first["content"] in (text, prompts.system_prompt(benchmark, index, "authors")):
            return index
    raise AssertionError("unknown system prompt")


def round_of(request: Request) -> int:
    return sum(1 for m in request.messages if m["role"] == "user") - 1


def last_user(request: Request) -> str:
    return request.messages[-1]["content"]


def mc_answer(letter: str | None, reasoning: str = "I reason briefly.") -> str:
    if letter is None:
        return f"{reasoning} I cannot decide."
    return f"{reasoning} The answer is (({letter}))."


def math_answer(value: str | None) -> str:
    if value is None:
        return "Some algebra, no conclusion."
    return f"Some algebra. The answer is \\boxed{{{value}}}."


Responder = Callable[[str, "int | None", int, Request], "str | Completion"]


class ScriptedEngine:
    """Engine protocol implementation with canned answers.

    ``respond(question, persona, round, request)`` returns the text (or a full Completion).
    Summary and judge requests (no system turn) get ``summary_text`` / ``judge_text(response)``.
    """

    def __init__(
        self,
        respond: Responder,
        *,
        benchmark: str = "truthfulqa",
        summary_text: str = "Dynamic: agents split. Insight: one argument dominates.",
        judge: Callable[[str], str] | None = None,
        latency: float = 0.0,
        identity: str = "scripted-v1",
        model: str = "fake-model",
    ) -> None:
        self.respond = respond
        self.benchmark = benchmark
        self.summary_text = summary_text
        self.judge = judge or (lambda response: "Looks fine. [[YES]]")
        self.latency = latency
        self.identity = identity
        self.model = model
        self.ledger = Ledger()
        self.batches: list[list[Request]] = []

    @property
    def calls(self) -> int:
        return len(self.batches)

    def calls_by_tag(self) -> list[str]:
        return [",".join(sorted({r.tag for r in batch})) for batch in self.batches]

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        if self.latency:
            time.sleep(self.latency)
        out = []
        for request in requests:
            text = last_user(request)
            parsed = prompt_parsing.parse_prompt(text)
            if parsed.kind == "summary":
                result: str | Completion = self.summary_text
            elif parsed.kind == "judge":
                result = self.judge(parsed.response or "")
            else:
                result = self.respond(parsed.question, persona_of(request, self.benchmark), round_of(request), request)
            completion = result if isinstance(result, Completion) else Completion(
                text=result,
                prompt_tokens=sum(len(m["content"].split()) for m in request.messages),
                completion_tokens=len(result.split()),
                logprobs=[-0.5] * 3 if request.params.logprobs else None,
            )
            self.ledger.record(request, completion)
            out.append(completion)
        return out

    def close(self) -> None:
        pass


def mc_sample(sample_id: str, gold: str = "A", n_options: int = 4, question: str | None = None) -> Sample:
    choices = tuple(f"option {LETTERS[i]} for {sample_id}" for i in range(n_options))
    text = question if question is not None else f"Question {sample_id}?"
    return Sample(
        id=sample_id,
        benchmark="truthfulqa",
        question=format_question(text, choices),
        gold=gold,
        choices=choices,
    )


def math_sample(sample_id: str, gold: str, question: str | None = None) -> Sample:
    return Sample(id=sample_id, benchmark="math500", question=question or f"Compute {sample_id}.", gold=gold)


def question_key(question: str) -> str:
    """The first line of a formatted question (the text before the options)."""
    return question.split("\n", 1)[0]


def hashed_respond(question, persona, t, request):
    """Deterministic answers that depend on the question, the persona, the round and the sample index."""
    key = f"{question_key(question)}|{persona}|{t}|{request.sample_index}|{len(request.messages)}"
    letter = "ABCD"[hashlib.sha256(key.encode()).digest()[0] % 4]
    return mc_answer(letter, reasoning=f"Reasoning {key}.")


def samples(n: int):
    """``n`` multiple-choice samples q000, q001, ... with golds A, B, C, D in turn."""
    return [mc_sample(f"q{i:03d}", gold="ABCD"[i % 4]) for i in range(n)]
