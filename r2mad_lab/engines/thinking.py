"""Thinking blocks: strip Qwen3-style ``<think>...</think>`` reasoning from a completion.

Part of the engine boundary (docs/design.md): an agent's response z_i^(t) in Eq. 1 is the text the
other agents read and the answer extractor a(.) parses (Eq. 2-3), so a reasoning model's hidden
thoughts are removed before anything else sees the text. Every backend applies
:func:`apply_thinking` to its raw output.

Rules (applied to the raw generated text):

- every closed ``<think> ... </think>`` block is removed (non-greedy; several blocks allowed);
- a ``</think>`` without an opening tag (templates that put ``<think>`` into the prompt, e.g.
  Qwen3-Thinking-2507, DeepSeek-R1) ends the reasoning: everything up to and including it is
  removed;
- an unclosed ``<think>`` means generation stopped while thinking: the response is truncated.
  The text keeps only what came before the tag (usually nothing), the finish reason becomes
  ``length`` and ``unclosed_thinking`` is set (counted apart in every run's metrics; its ``cut``
  still says which limit stopped it). The cut reasoning, from the tag on, stays in
  ``Completion.thinking_partial``: the protocol choice ``unclosed_thinking="keep"`` (the authors'
  code, whose regex removes closed blocks only) shows it as the response (:mod:`r2mad_core.debate.loop`).

The completion's token counts are left alone: thinking tokens were generated and they count
in the cost tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from r2mad_core.engine import Completion

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
_CLOSED_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass(frozen=True)
class ThinkingSplit:
    """A raw completion split into the visible answer and the removed reasoning."""

    text: str
    reasoning: str
    unclosed: bool
    partial: str = ""  # an unclosed block as generated, from <think> on


def split_thinking(raw: str) -> ThinkingSplit:
    """Split ``raw`` into visible text and reasoning (see the module docstring for the rules)."""
    reasoning: list[str] = []
    text = raw
    # A leading orphan close tag: the opening tag was part of the prompt.
    first_close = text.find(CLOSE_TAG)
    first_open = text.find(OPEN_TAG)
    if first_close != -1 and (first_open == -1 or first_close < first_open):
        reasoning.append(text[:first_close])
        text = text[first_close + len(CLOSE_TAG):]

    def _take(match: re.Match[str]) -> str:
        reasoning.append(match.group(0)[len(OPEN_TAG):-len(CLOSE_TAG)])
        return ""

    text = _CLOSED_BLOCK.sub(_take, text)
    unclosed = False
    partial = ""
    open_at = text.find(OPEN_TAG)
    if open_at != -1:
        unclosed = True
        partial = text[open_at:]
        reasoning.append(text[open_at + len(OPEN_TAG):])
        text = text[:open_at]
    # Any further stray close tags (malformed output) are dropped from the visible text.
    text = text.replace(CLOSE_TAG, "")
    return ThinkingSplit(text=text.strip(), reasoning="\n".join(r.strip() for r in reasoning), unclosed=unclosed,
                         partial=partial)


def apply_thinking(completion: Completion) -> Completion:
    """Return ``completion`` with reasoning removed; an unclosed ``<think>`` marks it ``length``."""
    if OPEN_TAG not in completion.text and CLOSE_TAG not in completion.text:
        return completion
    split = split_thinking(completion.text)
    finish_reason = "length" if split.unclosed else completion.finish_reason
    return replace(completion, text=split.text, finish_reason=finish_reason,
                   unclosed_thinking=completion.unclosed_thinking or split.unclosed, thinking_partial=split.partial)
