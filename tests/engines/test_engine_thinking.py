"""Thinking-block stripping (r2mad_lab.engines.thinking)."""

from __future__ import annotations

import pytest

from r2mad_core.engine import Completion
from r2mad_lab.engines.thinking import apply_thinking, split_thinking


@pytest.mark.parametrize(
    ("raw", "text", "reasoning", "unclosed"),
    [
        ("The answer is \\boxed{4}.", "The answer is \\boxed{4}.", "", False),
        ("<think>\n2+2=4\n</think>\n\nThe answer is 4.", "The answer is 4.", "2+2=4", False),
        ("<think>a</think>First. <think>b</think>Second.", "First. Second.", "a\nb", False),
        # Template put <think> in the prompt: only the closing tag is generated.
        ("reasoning here\n</think>\nFinal: ((B))", "Final: ((B))", "reasoning here", False),
        # Truncated while thinking: nothing visible.
        ("<think>\nLet me compute 17*23 = 3", "", "Let me compute 17*23 = 3", True),
        # Text before an unclosed block is kept.
        ("Draft answer ((C)). <think>hmm, maybe", "Draft answer ((C)).", "hmm, maybe", True),
        # Closed block, then an unclosed one.
        ("<think>x</think>Answer A <think>y", "Answer A", "x\ny", True),
        # Empty think block (Qwen3 with thinking disabled echoes it sometimes).
        ("<think>\n\n</think>\n\n((A))", "((A))", "", False),
    ],
)
def test_split_thinking(raw: str, text: str, reasoning: str, unclosed: bool) -> None:
    split = split_thinking(raw)
    assert (split.text, split.reasoning, split.unclosed) == (text, reasoning, unclosed)


def test_apply_thinking_marks_unclosed_as_length_and_keeps_tokens() -> None:
    raw = Completion(text="<think>long reasoning", prompt_tokens=11, completion_tokens=99, finish_reason="stop")
    out = apply_thinking(raw)
    assert out.text == ""
    assert out.finish_reason == "length"
    assert out.truncated
    assert (out.prompt_tokens, out.completion_tokens) == (11, 99)


def test_apply_thinking_closed_block_keeps_finish_reason() -> None:
    out = apply_thinking(Completion(text="<think>r</think> ok", finish_reason="stop"))
    assert (out.text, out.finish_reason) == ("ok", "stop")
    out = apply_thinking(Completion(text="<think>r</think> partial", finish_reason="length"))
    assert (out.text, out.finish_reason) == ("partial", "length")


def test_apply_thinking_leaves_plain_text_untouched() -> None:
    plain = Completion(text="  spaced answer \n", finish_reason="stop")
    assert apply_thinking(plain) is plain
