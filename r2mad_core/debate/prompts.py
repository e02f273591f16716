"""The paper's prompts (Appendix "Prompts"), verbatim, and the blocks R2-MAD adds to them.

- Three personas (system prompts) per benchmark, each ending with the benchmark's answer format.
- The task prompt (round 0, CoT, Self-Consistency): the appendix gives it for MATH500 and states that
  the other benchmarks' task prompts are *identical except for the required output format*; we take
  that literally and substitute only the answer-format sentence.
- The debate prompt (round t > 0): the appendix text, preceded by the other agents' round t-1
  responses Z^(t-1) (Eq. 1; Du et al.'s layout), each optionally carrying the confidence annotation
  enclosed by ``<confidence></confidence>`` (Appendix A, "Debate and Retrieval Procedure"; the
  annotation realises the weight w_{j,i} of Eq. joint_gen / Eq. 7 at the prompt level).
- Retrieved experiences E_i^(t) (Eq. 4-6) are placed before the task/debate text of the agent's user turn
  ("w/o Memory removes retrieved experiences from the task prompt", Table 2 caption).
- The debate summary prompt that produces h^(t) of the debate state (Eq. 2), verbatim.
- A judge prompt for MAD-M2's subjective masking (not in the paper; documented below).

:func:`r2mad_core.debate.prompt_parsing.parse_prompt` inverts the builders (the simulated engine reads prompts
through it); the layout is written here and read back there, the two tested against each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

from r2mad_core.data import benchmarks
from r2mad_core.debate.authors_prompts import (  # noqa: F401  (the authors' text, importable from here as before)
    _AUTHORS_DEBATE_OPENING,
    _AUTHORS_MATH_FORMAT,
    _AUTHORS_MC_FORMAT,
    AUTHORS_CONFIDENCE_TEXT,
    AUTHORS_CORRECTNESS_TEXT,
    AUTHORS_COT_SUFFIX,
    AUTHORS_DEBATE_TEMPLATES,
    AUTHORS_EXPERIENCES_HEADER,
    AUTHORS_MATH_SYSTEM_FORMAT,
    AUTHORS_PEERS_HEADER_WITH_CONFIDENCE,
    AUTHORS_QUESTION_PREFIX,
    AUTHORS_STANCE_TEXT,
    AUTHORS_SUMMARY_TEMPLATE,
    AUTHORS_TASK_TEMPLATES,
    TASK_PROMPT_WORDINGS,
    authors_experience_text,
    strip_question_prefix,
)

# --------------------------------------------------------------------------------------------
# Answer formats (the sentences the appendix uses)
# --------------------------------------------------------------------------------------------
MATH_FORMAT = (
    "Provide the final answer in the following format at the end of your response: "
    "The answer is \\boxed{[answer]}."
)
MC_FORMAT = (
    "Provide the final answer in the following format at the end of your response: "
    "The answer is ((answer))."
)
_MMLU_PERSONA_FORMAT = (
    "Provide your final answer in double parentheses: ((answer)), "
    "where answer can be A, B, C, D, E, F, G, H, I, or J."
)
_TQA_PERSONA_FORMAT = (
    "Provide your final answer in double parentheses: ((answer)), "
    "where answer is the letter of the correct option from the given choices."
)

# --------------------------------------------------------------------------------------------
# Personas: Appendix "Prompts", "System Prompts: <benchmark>", verbatim
# --------------------------------------------------------------------------------------------
PERSONAS: dict[str, tuple[tuple[str, str], ...]] = {
    "math500": (
        (
            "Theoretical Mathematics Professor",
            "You are a theoretical mathematics professor with a rigorous approach to problem-solving. "
            "You excel in formal proofs and mathematical reasoning. Always verify assumptions, consider "
            "edge cases, and provide step-by-step logical arguments. Focus on theoretical foundations and "
            "mathematical principles. Be concise and focus only on essential reasoning steps. " + MATH_FORMAT,
        ),
        (
            "Competitive Mathematics Expert",
            "You are a practical mathematics problem-solving expert with extensive experience in competitive "
            "mathematics. You excel at finding efficient solutions and spotting patterns quickly. Focus on "
            "problem-solving strategies, shortcuts, and alternative approaches. Challenge assumptions when "
            "necessary. Be concise and focus only on essential reasoning steps. " + MATH_FORMAT,
        ),
        (
            "Experienced Mathematics Educator",
            "You are an experienced mathematics educator who excels at breaking down complex problems. You "
            "focus on clear explanations, visual representations, and multiple solution methods. Always connect "
            "concepts to fundamental principles and similar problems. Validate solutions through different "
            "approaches. Be concise and focus only on essential reasoning steps. " + MATH_FORMAT,
        ),
    ),
    "mmlu_pro_engineering": (
        (
            "Theoretical Engineering Expert",
            "You're a theoretical engineering expert with deep knowledge in engineering principles, physics, and "
            "mathematical modeling. Focus on fundamental laws, governing equations, and conceptual frameworks "
            "when analyzing problems. Always ground your answers in established engineering theories and first "
            "principles. Keep your reasoning concise and focus only on the essential steps necessary to reach "
            "the conclusion. " + _MMLU_PERSONA_FORMAT,
        ),
        (
            "Hands-on Engineering Practitioner",
            "You're a hands-on engineering practitioner with extensive experience in design, troubleshooting, "
            "and real-world systems. Focus on practical constraints, material properties, manufacturing "
            "considerations, and industry standards when analyzing problems. Draw on engineering experience and "
            "domain-specific heuristics to identify the most feasible solution. Keep your reasoning concise and "
            "focus only on the essential steps necessary to reach the conclusion. " + _MMLU_PERSONA_FORMAT,
        ),
        (
            "Engineering Consultant",
            "You're a multidisciplinary engineering consultant with expertise spanning mechanical, electrical, "
            "civil, and systems engineering. Approach problems by integrating cross-domain knowledge and "
            "considering interactions between subsystems. Balance theoretical rigor with practical engineering "
            "judgment in your analysis. Keep your reasoning concise and focus only on the essential steps "
            "necessary to reach the conclusion. " + _MMLU_PERSONA_FORMAT,
        ),
    ),
    "mmlu_pro_economics": (
        (
            "Theoretical Economics Expert",
            "You're a theoretical economics expert with deep knowledge in economic principles and models. Focus "
            "on fundamental theories, mathematical relationships, and conceptual frameworks when analyzing "
            "problems. Always support your answers with established economic theories. Keep your reasoning "
            "concise and focus only on the essential steps necessary to reach the conclusion. "
            + _MMLU_PERSONA_FORMAT,
        ),
        (
            "Empirical Economics Researcher",
            "You're an empirical economics researcher specializing in data analysis and real-world economic "
            "phenomena. Focus on historical examples, empirical evidence, and practical applications when "
            "analyzing problems. Consider real market behaviors and outcomes in your reasoning. Keep your "
            "reasoning concise and focus only on the essential steps necessary to reach the conclusion. "
            + _MMLU_PERSONA_FORMAT,
        ),
        (
            "Comprehensive Economics Consultant",
            "You're a comprehensive economics consultant with expertise in both theoretical and applied "
            "economics. Approach problems by considering multiple perspectives, including behavioral economics "
            "insights and institutional factors. Balance theoretical principles with practical implications in "
            "your analysis. Keep your reasoning concise and focus only on the essential steps necessary to reach "
            "the conclusion. " + _MMLU_PERSONA_FORMAT,
        ),
    ),
    "truthfulqa": (
        (
            "Fact-Checking Expert",
            "You're a fact-checking expert trained to distinguish truth from popular misconceptions. Many widely "
            "believed statements are false \u2014 your job is to identify what is actually true, not what sounds "
            "plausible or is commonly assumed. Be especially skeptical of answers that align with urban legends, "
            "folk wisdom, or intuitive-sounding claims that lack factual basis. Keep your reasoning concise and "
            "focus only on the essential steps. " + _TQA_PERSONA_FORMAT,
        ),
        (
            "Critical Epistemologist",
            "You're a critical epistemologist who specializes in identifying false beliefs that are widely held. "
            "Your primary instinct is to question what 'everyone knows' and verify claims against evidence. When "
            "a question seems to have an obvious answer, treat that as a warning sign \u2014 TruthfulQA questions "
            "are specifically designed to test whether you will echo misinformation. Reason carefully before "
            "committing. Keep your reasoning concise. " + _TQA_PERSONA_FORMAT,
        ),
        (
            "Domain-Spanning Knowledge Expert",
            "You're a domain-spanning knowledge expert with deep familiarity across science, history, law, "
            "medicine, and culture. Your strength is knowing the actual consensus or established facts in each "
            "domain, even when they contradict popular belief. Approach each question by recalling the "
            "authoritative understanding of the topic, then select the option that aligns with verified truth "
            "rather than common assumption. Keep your reasoning concise. " + _TQA_PERSONA_FORMAT,
        ),
    ),
}

# --------------------------------------------------------------------------------------------
# Task / debate / summary prompts (Appendix "Prompts"), verbatim
# --------------------------------------------------------------------------------------------
TASK_TEMPLATE = (
    "Can you solve the following math question as accurately as possible?\n\n"
    "<question>\n{QUESTION}\n</question>\n\n"
    "Present your analysis concisely using only essential reasoning steps. {FORMAT}"
)
DEBATE_TEMPLATE = (
    "Use the solutions from other agents as additional information, can you give an updated answer? \n\n"
    "The original question is: \n\n"
    "<question>\n{QUESTION}\n</question>\n\n"
    "{FORMAT}"
)
def question_text(question: str, multiple_choice: bool, wording: str = "paper") -> str:
    """The text of the prompts' ``{QUESTION}`` slot: the sample's question (``paper``), or under ``authors`` a
    multiple-choice question prefixed ``Question: `` (:data:`AUTHORS_QUESTION_PREFIX`)."""
    if _wording(wording) == "authors" and multiple_choice:
        return AUTHORS_QUESTION_PREFIX + question
    return question


def _authors_template(templates: dict[str, str], benchmark: str) -> str:
    if benchmark not in templates:
        raise ValueError(f"task_prompt='authors': the authors' code has no wording for {benchmark!r} "
                         f"(only {sorted(templates)}); use task_prompt='paper'")
    return templates[benchmark]


def _wording(wording: str) -> str:
    if wording not in TASK_PROMPT_WORDINGS:
        raise ValueError(f"task_prompt must be one of {TASK_PROMPT_WORDINGS}, found {wording!r}")
    return wording


SUMMARY_TEMPLATE = """You are an expert analyst observing a multi-agent debate. Your task is to generate a concise debate summary that captures the key dynamics of the current round.

Given Information:
<question>
{QUESTION}
</question>

<previous_summary>
{PREV_SUMMARY}
</previous_summary>

<agent_responses>
{AGENT_RESPONSES}
</agent_responses>

<consensus_ratio>
{CONSENSUS_RATIO}
</consensus_ratio>

Analysis Framework:

1. Stance Dynamics:
    - Identify the current stance distribution: how many distinct positions exist and how many agents hold each
    - If any agent shifted stance from the previous round, determine what argument or reasoning drove the change
    - If no agent shifted, analyze what sustains the current agreement or disagreement

2. Debate Direction:
    - Assess whether the debate is converging (consensus forming), diverging (new disagreements emerging), or stagnating (no movement)
    - Distinguish between shifts driven by substantive arguments (an agent adopted a position after being presented with stronger reasoning) and shifts driven by consensus pressure (an agent abandoned a unique position without being refuted on substance)
    - Identify the most influential argument or unresolved point of contention shaping the current trajectory

Output Requirements:

Generate a debate summary in exactly this format:

"Dynamic: [1 sentence on stance distribution, consensus pattern, and any stance transitions since the previous round]

Insight: [1 sentence on the most influential argument, unresolved contention, or social dynamic driving the debate's current trajectory]"

Each sentence must be:

- Objective (describe what happened without judging which side is correct)

- Abstract, Strategy-focused (describe reasoning strategies and debate patterns, never mention specific numbers, formulas, variable names, or answer values from the task)

- Stance-neutral (use "majority/minority" or descriptive stance labels instead of agent IDs)

Note:

- CRITICAL: Do not include any problem-specific content such as numbers, equations, formulas, variable names, answer choices, or concrete solution details. Describe reasoning approaches abstractly.

- Do not judge or speculate on which stance is correct.

- If a previous summary is provided, do not repeat information already covered in it.

- Do not include any preamble or explanation.

- Only output the debate summary."""

SUMMARY_OPENING = "You are an expert analyst observing a multi-agent debate."
NO_PREVIOUS_SUMMARY = "None"  # round 0 only: src/multi_agent_debate.py _summarize_debate_state, rounds[-2]["summary"]

# The blocks R2-MAD adds. The annotation wording follows Section 4.3: "marked ... as high confidence,
# signaling that this stance has been historically reliable in similar debate states" / "marked as low
# confidence, indicating limited historical support".
PEERS_HEADER = "These are the solutions to the problem from other agents:"
PEERS_HEADER_WITH_CONFIDENCE = "These are the solutions to the problem from other agents, with your confidence in each:"
CONFIDENCE_TEXT = {
    "high": "High confidence: this stance has been historically reliable in similar debate states.",
    "low": "Low confidence: this stance has limited historical support in similar debate states.",
}
EXPERIENCES_HEADER = "Here are experiences from your past debates on related questions:"

# MAD-M2 subjective masking (Tian et al.): the same model judges each previous-round response.
# Not given in the paper; our wording, with a fixed three-way label set.
JUDGE_OPENING = "You are evaluating a solution written by another agent for the question below."
JUDGE_TEMPLATE = (
    JUDGE_OPENING + "\n\n"
    "<question>\n{QUESTION}\n</question>\n\n"
    "<solution>\n{RESPONSE}\n</solution>\n\n"
    "Check the reasoning and the final answer of this solution. Is the solution correct? "
    "Reply with a brief justification, then end with exactly one verdict in double brackets: "
    "[[YES]], [[NO]] or [[NOT SURE]]."
)

Confidence = Literal["high", "low"]


@dataclass(frozen=True)
class PeerResponse:
    """Agent j's previous-round response z_j^(t-1), optionally annotated by agent i (Eq. 7 thresholds)."""

    text: str
    confidence: Confidence | None = None


@dataclass(frozen=True)
class ExperienceView:
    """A retrieved memory case e = <s, Z, y, zeta, r> (Eq. 4) as shown to the agent.

    ``response``/``answer``/``correct`` are the agent's own z_i and zeta_i in that past debate;
    ``outcome_correct`` is the debate's outcome reward r_i; ``summary`` and ``consensus_ratio`` are h and Cons
    of the past debate state (Eq. 2); ``reference`` is y, the question's reference answer (multiple choice:
    the letter and the option text; MATH500: the final answer) or, with ``reference_is_solution``, the full
    reference solution (the authors' code shows it). Empty: y is not shown (the ``experience_reference="none"``
    ablation). The paper gives no rendering of an experience; the tags below are ours.
    """

    question: str
    response: str
    answer: str | None
    correct: bool
    outcome_correct: bool
    summary: str = ""
    consensus_ratio: float | None = None
    reference: str = ""
    reference_is_solution: bool = False
    stance_changed: bool | None = None  # a(z_i^(t)) != a(z_i^(t-1)); None: unknown (the authors' layout shows it)


def _check_benchmark(benchmark: str) -> benchmarks.BenchmarkSpec:
    spec = benchmarks.BENCHMARK_SPECS.get(benchmark)
    if spec is None:
        raise ValueError(f"unknown benchmark {benchmark!r}: expected one of {sorted(benchmarks.BENCHMARK_SPECS)}")
    return spec


def answer_format(benchmark: str) -> str:
    """The answer-format sentence of the task and debate prompts."""
    return MATH_FORMAT if _check_benchmark(benchmark).answer_format == "math" else MC_FORMAT


def personas(benchmark: str) -> tuple[tuple[str, str], ...]:
    """The (name, system prompt) pairs of a benchmark's agents: the paper's appendix personas, or a registered
    benchmark's own (:class:`r2mad_core.data.benchmarks.BenchmarkSpec`)."""
    spec = _check_benchmark(benchmark)
    return tuple(spec.personas) if spec.personas is not None else PERSONAS[benchmark]


def num_personas(benchmark: str) -> int:
    return len(personas(benchmark))


def persona_name(benchmark: str, agent_index: int) -> str:
    index = _persona_index(benchmark, agent_index)
    return personas(benchmark)[index][0]


def _persona_index(benchmark: str, agent_index: int) -> int:
    n = len(personas(benchmark))
    if not 0 <= agent_index < n:
        raise ValueError(
            f"agent index {agent_index} has no persona for {benchmark}: the paper gives {n} personas "
            f"(agents 0..{n - 1}); use at most {n} agents"
        )
    return agent_index


def system_prompt(benchmark: str, agent_index: int, wording: str = "paper") -> str:
    """Agent i's persona phi_i (Appendix "System Prompts"). ``wording="authors"``: a MATH500 persona ends with the
    authors' unformatted ``\\boxed{{answer}}`` sentence (:data:`AUTHORS_MATH_SYSTEM_FORMAT`)."""
    index = _persona_index(benchmark, agent_index)
    text = personas(benchmark)[index][1]
    if _wording(wording) == "authors" and benchmark == "math500" and text.endswith(MATH_FORMAT):
        text = text[: -len(MATH_FORMAT)] + AUTHORS_MATH_SYSTEM_FORMAT
    return text


def format_experiences(experiences: Sequence[ExperienceView], max_response_chars: int | None = None,
                       wording: str = "paper") -> str:
    """The block of retrieved experiences E_i^(t) shown before the task/debate text (``wording="authors"``: the
    authors' ``<examples>`` block, src/agent.py ``_build_prompt``; :func:`authors_experience_text`)."""
    if _wording(wording) == "authors":
        text = AUTHORS_EXPERIENCES_HEADER + "\n\n<examples>\n"
        for k, e in enumerate(experiences):
            response = e.response
            if max_response_chars is not None and len(response) > max_response_chars:
                response = response[: max_response_chars].rstrip() + " [...]"
            body = authors_experience_text(e.question, e.reference, response, e.stance_changed, bool(e.correct))
            text += f'<example index="{k}">\n{body}\n</example>\n'
        return text + "</examples>\n\n"
    lines = [EXPERIENCES_HEADER, "", "<experiences>"]
    for k, e in enumerate(experiences):
        response = e.response
        if max_response_chars is not None and len(response) > max_response_chars:
            response = response[: max_response_chars].rstrip() + " [...]"
        lines.append(f'<experience index="{k}">')
        lines.append(f"<question>\n{e.question}\n</question>")
        if e.summary:
            lines.append(f"<debate_summary>\n{e.summary}\n</debate_summary>")
        if e.consensus_ratio is not None:
            lines.append(f"<consensus_ratio>{e.consensus_ratio:.2f}</consensus_ratio>")
        lines.append(f"<your_response>\n{response}\n</your_response>")
        lines.append(f"<your_answer>{e.answer if e.answer is not None else 'none'}</your_answer>")
        lines.append(f"<your_answer_was>{'correct' if e.correct else 'incorrect'}</your_answer_was>")
        if e.reference:
            tag = "reference_solution" if e.reference_is_solution else "reference_answer"
            lines.append(f"<{tag}>\n{e.reference}\n</{tag}>")
        lines.append(
            f"<debate_outcome>{'correct' if e.outcome_correct else 'incorrect'}</debate_outcome>"
        )
        lines.append("</experience>")
    lines.append("</experiences>")
    return "\n".join(lines) + "\n\n"


def task_prompt(
    benchmark: str,
    question: str,
    experiences: Sequence[ExperienceView] = (),
    max_response_chars: int | None = None,
    wording: str = "paper",
) -> str:
    """Round-0 / CoT user turn (Appendix "Task Prompt"); ICL-CoT passes ``experiences`` as in-context examples.

    ``wording="authors"``: the authors' code's benchmark-specific task prompt (:data:`AUTHORS_TASK_TEMPLATES`)."""
    if _wording(wording) == "authors":
        _check_benchmark(benchmark)
        text = _authors_template(AUTHORS_TASK_TEMPLATES, benchmark).format(QUESTION=question)
    else:
        text = TASK_TEMPLATE.format(QUESTION=question, FORMAT=answer_format(benchmark))
    if experiences:
        text = format_experiences(experiences, max_response_chars, wording) + text
    return text


def format_peers(peers: Sequence[PeerResponse], wording: str = "paper", weighted: bool | None = None) -> str:
    """The peers' responses Z^(t-1) with their annotations. The confidence header: ``paper``, when a peer is
    annotated; ``authors`` (src/agent.py, ``_build_prompt``), when confidences were estimated (``weighted``: the
    agent weights its peers and has a confidence for them), annotated or not."""
    authors, annotated = _wording(wording) == "authors", any(p.confidence is not None for p in peers)
    with_confidence = (annotated if weighted is None else weighted) if authors else annotated
    header = PEERS_HEADER if not with_confidence else (
        AUTHORS_PEERS_HEADER_WITH_CONFIDENCE if authors else PEERS_HEADER_WITH_CONFIDENCE)
    lines = [header, "", "<other_solutions>"]
    for k, p in enumerate(peers):
        lines.append(f'<other_solution index="{k}">')
        lines.append(p.text)
        if p.confidence is not None:
            if p.confidence not in CONFIDENCE_TEXT:
                raise ValueError(f"confidence annotation must be 'high', 'low' or None, found {p.confidence!r}")
            if authors:
                lines.append(f"<confidence>\n{AUTHORS_CONFIDENCE_TEXT[p.confidence]}\n</confidence>")
            else:
                lines.append(f"<confidence>{CONFIDENCE_TEXT[p.confidence]}</confidence>")
        lines.append("</other_solution>")
    lines.append("</other_solutions>")
    return "\n".join(lines) + "\n\n"


def debate_prompt(
    benchmark: str,
    question: str,
    peers: Sequence[PeerResponse],
    experiences: Sequence[ExperienceView] = (),
    max_response_chars: int | None = None,
    wording: str = "paper",
    weighted: bool | None = None,
) -> str:
    """Round-t user turn (t > 0): [experiences] + peers' responses Z^(t-1) (+ annotations) + the appendix text
    (``wording="authors"``: :data:`AUTHORS_DEBATE_TEMPLATES`; ``weighted``: :func:`format_peers`)."""
    if _wording(wording) == "authors":
        _check_benchmark(benchmark)
        text = _authors_template(AUTHORS_DEBATE_TEMPLATES, benchmark).format(QUESTION=question)
    else:
        text = DEBATE_TEMPLATE.format(QUESTION=question, FORMAT=answer_format(benchmark))
    text = format_peers(peers, wording, weighted) + text
    if experiences:
        text = format_experiences(experiences, max_response_chars, wording) + text
    return text


SUMMARY_AGENT_SLOTS = ("authors", "responses")


def _authors_agent_block(k: int, response: str, answer: str | None, previous: str | None, first_round: bool) -> str:
    """One agent in the authors' slot (src/multi_agent_debate.py, _summarize_debate_state): a missing answer prints
    as ``None`` and the stance changed when the answer string differs from the previous round's."""
    lines = [f'<agent index="{k}">', f"<response>\n{response}\n</response>", f"<answer>\n{answer}\n</answer>"]
    if not first_round:
        lines.append(f"<previous_answer>\n{previous}\n</previous_answer>")
        lines.append(f"<stance_changed>\n{str(answer != previous).lower()}\n</stance_changed>")
    lines.append("</agent>")
    return "\n".join(lines)


def summary_prompt(
    question: str,
    previous_summary: str | None,
    agent_responses: Sequence[str],
    consensus_ratio: float,
    *,
    answers: Sequence[str | None] | None = None,
    previous_answers: Sequence[str | None] | None = None,
    slot: str = "responses",
    wording: str = "paper",
) -> str:
    """The debate summary prompt producing h^(t) (Eq. 2), verbatim from the appendix.

    The appendix shows the ``{AGENT_RESPONSES}`` slot, not what fills it (protocol choice ``summary_agents``):
    ``authors`` (the authors' code) gives each agent's response, its extracted answer and, after round 0, its
    previous answer and whether its stance changed; ``responses`` (ours) the responses only. ``wording="authors"``: the
    authors' template. "None" only at round 0 (``previous_summary`` None); an empty summary shows empty, as theirs."""
    if slot not in SUMMARY_AGENT_SLOTS:
        raise ValueError(f"summary_agents must be one of {SUMMARY_AGENT_SLOTS}, found {slot!r}")
    if slot == "authors":
        given = list(answers) if answers is not None else [None] * len(agent_responses)
        before = list(previous_answers) if previous_answers is not None else None
        if len(given) != len(agent_responses) or (before is not None and len(before) != len(agent_responses)):
            raise ValueError("summary_prompt: one answer (and previous answer) per agent response")
        responses = "\n".join(
            _authors_agent_block(k, r, given[k], None if before is None else before[k], before is None)
            for k, r in enumerate(agent_responses)
        )
    else:
        responses = "\n".join(
            f'<agent_response index="{k}">\n{r}\n</agent_response>' for k, r in enumerate(agent_responses)
        )
    template = AUTHORS_SUMMARY_TEMPLATE if _wording(wording) == "authors" else SUMMARY_TEMPLATE
    return template.format(
        QUESTION=question,
        PREV_SUMMARY=NO_PREVIOUS_SUMMARY if previous_summary is None else previous_summary,
        AGENT_RESPONSES=responses,
        CONSENSUS_RATIO=f"{consensus_ratio:.2f}",
    )


def judge_prompt(benchmark: str, question: str, response: str) -> str:
    """MAD-M2 subjective masking: ask the model whether a previous-round response is correct."""
    _check_benchmark(benchmark)
    return JUDGE_TEMPLATE.format(QUESTION=question, RESPONSE=response)


_VERDICT = re.compile(r"\[\[\s*(YES|NO|NOT\s+SURE)\s*\]\]", re.IGNORECASE)


def parse_judgement(text: str) -> Literal["YES", "NO", "NOT SURE"] | None:
    """The last ``[[YES]]``/``[[NO]]``/``[[NOT SURE]]`` verdict of a judge response, or None."""
    found = _VERDICT.findall(text or "")
    if not found:
        return None
    return " ".join(found[-1].upper().split())  # type: ignore[return-value]
