"""The dress rehearsal's stand-in engine: a model's context limit and reply lengths, no language model.

``python -m r2mad_lab.reproduce --profile paper --rehearse`` (:mod:`r2mad_lab.reproduce.paper.rehearsal`) runs every
notebook of a GPU profile with each model (evaluated, memory-only, API) behind a :class:`RehearsalEngine`. It
answers every request at once, as the real engine would shape it, and writes one JSON line per request into the
log named by ``$R2MAD_REHEARSAL_LOG``: the model, its label, the request's tag, prompt tokens, ``max_tokens``,
completion tokens, the cut, the context, and which benchmark and split the question came from (found by its text),
so the estimate (:mod:`r2mad_lab.reproduce.paper.command`) scales what the rehearsal sent. Nothing it writes is a
model's answer: the answer is the first option (``\\boxed{1}``) with probability ``agree``, else another one.

- **Prompt tokens**: 4 characters a token plus 4 per message (as :func:`r2mad_lab.experiments.budget.estimate_tokens`;
  no tokenizer offline). A prompt of ``context`` tokens or more is not generated: empty, ``cut="context_overflow"``,
  as the vLLM backend answers it (``context_overflow="raise"`` fails instead, as there).
- **Completion tokens**: lognormal, deterministic in the request, with the mean per reply of :data:`REPLY_LENGTHS`
  (the paper's cost table, Tab. cost, where it gives the model), sigma :data:`SIGMA`, capped at ``max_tokens`` and the
  context. The visible reply is that many tokens of filler (4 characters each) before the answer, so the next
  round's prompts grow as the real ones do; for a thinking model only ``visible_share`` is shown (the rest is the
  stripped ``<think>`` part).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, Mapping, Sequence

from r2mad_core.engine import Completion, Ledger, Request

ENGINE_NAME = "rehearsal"
LOG_ENVIRONMENT = "R2MAD_REHEARSAL_LOG"
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
SIGMA = 0.8  # spread of the lognormal reply length (ours, assumed)


@dataclass(frozen=True)
class ReplyLengths:
    """Mean completion tokens per debate reply and per summary, and what the peers see of a reply."""

    debate_mean: float
    summary_mean: float
    thinking: bool = False
    visible_share: float = 1.0
    source: str = ""

    def median(self, tag: str) -> float:
        mean = self.summary_mean if tag == "summary" else self.debate_mean
        return mean / math.exp(SIGMA ** 2 / 2)  # a lognormal's mean is its median times exp(sigma^2 / 2)


_COST_TABLE = ("the paper's Tab. cost (Economics): Self-Consistency debate tokens per query / 9 paths, R2-MAD summary "
               "tokens per query / 9 (3 agents x 3 rounds)")
#: Mean reply lengths by model (a substring of the Hugging Face id, lower case), with where each comes from.
REPLY_LENGTHS: dict[str, ReplyLengths] = {
    "qwen2.5-7b": ReplyLengths(5750 / 9, 2250 / 9, source=_COST_TABLE + ": 5,750 and 2,250"),
    "qwen3-8b": ReplyLengths(14670 / 9, 1850 / 9, thinking=True, visible_share=0.25,
                             source=_COST_TABLE + ": 14,670 and 1,850; thinking on: the peers see 25% "
                             "(the answer after </think>; ours, assumed)"),
    "gemma-3-4b": ReplyLengths(6090 / 9, 2760 / 9, source=_COST_TABLE + ": 6,090 and 2,760"),
    # not in the cost table: a non-thinking instruct model, counted as Qwen2.5-7B-Instruct's replies (assumed)
    "qwen3-4b-instruct-2507": ReplyLengths(5750 / 9, 2250 / 9, source="not in the paper's cost table; non-thinking "
                                           "(Instruct-2507): Qwen2.5-7B-Instruct's lengths, assumed"),
}
DEFAULT_LENGTHS = ReplyLengths(5750 / 9, 2250 / 9, source="not in the paper's cost table: Qwen2.5-7B-Instruct's "
                               "lengths, assumed (an API model's own length is unknown here)")


def reply_lengths(model: str | None) -> ReplyLengths:
    """The :class:`ReplyLengths` of a model by its Hugging Face id (else :data:`DEFAULT_LENGTHS`)."""
    name = (model or "").lower()
    for key, lengths in sorted(REPLY_LENGTHS.items(), key=lambda item: -len(item[0])):
        if key in name:
            return lengths
    return DEFAULT_LENGTHS


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(math.ceil(len(str(m.get("content") or "")) / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE for m in messages)


def _uniform(request: Request, salt: str) -> float:
    digest = hashlib.sha256(repr((salt, request.messages, request.sample_index, request.tag,
                                  request.params.seed)).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2.0 ** 64


class RehearsalEngine:
    """A stand-in with ``model``'s context (``context``: its ``max_model_len``; None: the server's) and reply lengths
    (:func:`reply_lengths`); logs every request (module docstring). ``label``: the profile's label of the model.
    ``questions``: ``{benchmark: {split: [question texts]}}`` to name each request's benchmark and split."""

    concurrent_generate = True

    def __init__(self, model: str = "", *, label: str = "", context: int | None = None, agree: float = 0.7,
                 context_overflow: str = "record", questions: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                 **_options: Any) -> None:
        self.model = model
        self.label = label or model
        self.context = int(context) if context else None
        self.lengths = reply_lengths(model)
        self.agree = agree
        self.context_overflow = context_overflow
        self.identity = f"{ENGINE_NAME}:{self.model}:{self.context}:{self.lengths.debate_mean:.1f}:{agree}"
        self.ledger = Ledger()
        self._questions = [(benchmark, split, text[:200]) for split in ("test", "train")
                           for benchmark, splits in (questions or {}).items() for text in splits.get(split, ())]
        self._lock = threading.Lock()
        log = os.environ.get(LOG_ENVIRONMENT)
        self.log_path = Path(log) if log else None

    def _where(self, request: Request) -> tuple[str | None, str | None]:
        text = "\n".join(str(m.get("content") or "") for m in request.messages)
        for benchmark, split, question in self._questions:  # test first: a test prompt may quote train cases
            if question and question in text:
                return benchmark, split
        return None, None

    def answer(self, request: Request) -> Completion:
        prompt = prompt_tokens(request.messages)
        limit = request.params.max_tokens
        if self.context is not None and prompt >= self.context:
            if self.context_overflow == "raise":
                raise ValueError(f"rehearsal: a {request.tag} prompt of {prompt:,} tokens does not fit "
                                 f"{self.label}'s context of {self.context:,}")
            return Completion("", prompt, 0, finish_reason="length", cut="context_overflow")
        median = self.lengths.median(request.tag)
        length = int(round(median * math.exp(SIGMA * NormalDist().inv_cdf(_uniform(request, "length")))))
        cut = "max_tokens" if length >= limit else None
        length = max(1, min(length, limit))
        if self.context is not None and prompt + length >= self.context:
            length, cut = self.context - prompt, "context_capped"
        logprobs = [-1.0 - _uniform(request, "logprob")] if request.params.logprobs else None
        visible = max(1, int(length * self.lengths.visible_share))
        text = "tok " * visible + self._answer_text(request)
        return Completion(text, prompt, length, logprobs, finish_reason="length" if cut else "stop", cut=cut)

    def _answer_text(self, request: Request) -> str:
        last = str(request.messages[-1].get("content") or "")
        pick = _uniform(request, "answer")
        if "\\boxed" in last:
            value = 1 if pick < self.agree else 2 + int(pick * 97)
            return f"The answer is \\boxed{{{value}}}. [[YES]]"
        letter = "A" if pick < self.agree else "BCD"[int(pick * 3) % 3]
        return f"The answer is (({letter})). [[YES]]"

    def _log(self, rows: list[dict[str, Any]]) -> None:
        if self.log_path is None or not rows:
            return
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        with self._lock, open(self.log_path, "a", encoding="utf-8") as handle:  # one append per batch
            handle.write(text)

    def generate_iter(self, requests: Sequence[Request]):
        rows = []
        try:
            for index, request in enumerate(requests):
                completion = self.answer(request)
                self.ledger.record(request, completion)
                benchmark, split = self._where(request)
                rows.append({"model": self.model, "label": self.label, "tag": request.tag,
                             "prompt_tokens": completion.prompt_tokens, "max_tokens": request.params.max_tokens,
                             "completion_tokens": completion.completion_tokens, "cut": completion.cut,
                             "context": self.context, "benchmark": benchmark, "split": split, "pid": os.getpid()})
                yield index, completion
        finally:
            self._log(rows)

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return [c for _, c in self.generate_iter(requests)]

    def close(self) -> None:
        pass

    def __enter__(self) -> "RehearsalEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
