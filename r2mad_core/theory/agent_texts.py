"""The texts the simulated agents write (:mod:`r2mad_core.theory.agents`).

Reasoning sentences in the style of the
concept an answer came from, and the fixed phrases of a debate reply or a format failure.

Reasoning styles: the text of a response carries a weak signature of the concept the agent followed (careful
derivation for theta*, a familiar shortcut for the misconception theta', a rough guess for the distractors), so that
text-similarity confidence (Eq. 7) has something to measure.
"""

from __future__ import annotations

import numpy as np

CAREFUL_STYLE = (
    "First, restate what the question asks and list the given conditions.",
    "The key step is to identify the principle that connects these quantities.",
    "Applying it step by step gives an intermediate result that we can check.",
    "A quick estimate confirms that the intermediate value has the right size.",
    "Edge cases and units deserve a second look before committing.",
    "Checking the arithmetic once more shows no slip in the computation.",
    "A different route through the problem leads to the same conclusion.",
    "Every condition stated in the problem is satisfied by this result.",
)
SHORTCUT_STYLE = (
    "This looks like a familiar textbook situation, so the usual rule applies directly.",
    "The intuitive reading of the question points to the standard answer.",
    "Most people would approach it the common way, and that seems right here.",
    "Relying on the well-known rule of thumb gives the answer quickly.",
    "There is no need to recheck the setup since the pattern is obvious.",
    "The popular interpretation matches the wording closely enough.",
    "Recalling the typical result for this kind of problem settles it.",
    "The obvious choice fits, so further verification seems unnecessary.",
)
GUESS_STYLE = (
    "Part of the computation is unclear, so an approximate value will have to do.",
    "Some of the information seems to be missing, which makes this a rough guess.",
    "Combining the numbers in a plausible way gives a candidate result.",
    "It is hard to be sure, but one option seems slightly more likely.",
    "Without a complete derivation, the best available estimate is used.",
    "The details are ambiguous, so a reasonable assumption fills the gap.",
)
REASONING_STYLES = (CAREFUL_STYLE, SHORTCUT_STYLE, GUESS_STYLE)
FORMAT_FAILURES = ("I could not settle on a single final result with enough certainty.",
                   "Several candidate results remain plausible and I cannot decide between them.",
                   "The computation is inconclusive without further information.")
DEBATE_OPENINGS = ("Taking the other solutions into account,", "After comparing the other agents' reasoning with mine,",
                   "Weighing the arguments presented,")


def style_of(concept: int) -> int:
    return min(concept, len(REASONING_STYLES) - 1)


def reasoning(rng: np.random.Generator, words: int, concept: int, signal: float) -> str:
    """About ``words`` words of reasoning sentences: each one comes from the style of ``concept`` with
    probability ``signal``, otherwise from a uniformly drawn style (distinct sentences)."""
    own = style_of(concept)
    picked: list[str] = []
    used: set[str] = set()
    count = 0
    while count < words:
        style = own if rng.random() < signal else int(rng.integers(len(REASONING_STYLES)))
        pool = [t for t in REASONING_STYLES[style] if t not in used]
        if not pool:
            pool = [t for bank in REASONING_STYLES for t in bank if t not in used]
            if not pool:
                break
        sentence = pool[int(rng.integers(len(pool)))]
        used.add(sentence)
        picked.append(sentence)
        count += len(sentence.split())
    return " ".join(picked)
