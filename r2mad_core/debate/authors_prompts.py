"""The prompt text of the authors' code (KylJin/R2-MAD @ e47d77f), verbatim: what ``task_prompt="authors"`` sends.

Each constant names the file and function of the authors' code it is read from. :mod:`r2mad_core.debate.prompts`
builds the prompts from these under ``task_prompt="authors"`` and from the paper's appendix under ``"paper"``;
``tests/test_authors_conformance.py`` checks the requests built from them against the authors' code.
"""

from __future__ import annotations

# ``task_prompt="authors"``: the benchmark-specific wording of the authors' public code (KylJin/R2-MAD,
# src/prompts.py, TASK_PROMPT and DEBATE_PROMPT), verbatim. The paper's appendix gives one task prompt ("math
# question" for every benchmark, only the answer format differs): that is the default, ``task_prompt="paper"``.
TASK_PROMPT_WORDINGS = ("paper", "authors")
_AUTHORS_MC_FORMAT = (
    "Provide the final answer in double parentheses at the end of your response: The answer is ((answer))."
)
_AUTHORS_MATH_FORMAT = (
    "Provide the final answer in the following format at the end of your response: The answer is \\boxed{{answer}}."
)
AUTHORS_TASK_TEMPLATES: dict[str, str] = {
    "math500": (
        "Can you solve the following math question as accurately as possible?\n\n"
        "<question>\n{QUESTION}\n</question>\n\n"
        "Present your analysis concisely using only essential reasoning steps. " + _AUTHORS_MATH_FORMAT
    ),
    "mmlu_pro_engineering": (
        "Please analyze the following engineering question:\n\n"
        "<question>\n{QUESTION}\n</question>\n\n"
        "Present your analysis concisely using only essential reasoning steps and select the correct answer. "
        + _AUTHORS_MC_FORMAT
    ),
    "mmlu_pro_economics": (
        "Please analyze the following economics question:\n\n"
        "<question>\n{QUESTION}\n</question>\n\n"
        "Present your analysis concisely using only essential reasoning steps and select the correct answer. "
        + _AUTHORS_MC_FORMAT
    ),
    "truthfulqa": (
        "Please carefully evaluate the following question and select the most truthful answer:\n\n"
        "<question>\n{QUESTION}\n</question>\n\n"
        "Be wary of options that sound plausible but reflect common misconceptions. Present your analysis concisely "
        "and focus only on what is factually accurate. " + _AUTHORS_MC_FORMAT
    ),
}
_AUTHORS_DEBATE_OPENING = (
    "Use the solutions from other agents as additional information, can you give an updated answer? "
    "The original question is: \n\n<question>\n{QUESTION}\n</question>\n\n"
)
AUTHORS_DEBATE_TEMPLATES: dict[str, str] = {
    "math500": _AUTHORS_DEBATE_OPENING + _AUTHORS_MATH_FORMAT,
    "mmlu_pro_engineering": _AUTHORS_DEBATE_OPENING
    + "Provide the final answer in the following format at the end of your response: The answer is ((answer)).",
    "mmlu_pro_economics": _AUTHORS_DEBATE_OPENING
    + "Provide the final answer in the following format at the end of your response: The answer is ((answer)).",
    "truthfulqa": _AUTHORS_DEBATE_OPENING + _AUTHORS_MC_FORMAT,
}


#: ``task_prompt="authors"``: the MATH500 personas of the authors' code end with this sentence, a plain string that is
#: never formatted (src/prompts.py, MATH500_SYS_PROMPTS; src/agent.py, ``self._system_prompt``), so the model reads
#: the doubled braces. The paper's appendix (and ``task_prompt="paper"``) writes ``\boxed{[answer]}``.
AUTHORS_MATH_SYSTEM_FORMAT = (
    "Provide the final answer in the following format at the end of your response: The answer is \\boxed{{answer}}."
)
#: ``task_prompt="authors"``: every multiple-choice question is written ``Question: {question}\n\n{options}``
#: (src/utils/data_utils.py, ``DataLoader.format_question``), in every prompt and in the embedded state text.
AUTHORS_QUESTION_PREFIX = "Question: "
#: ``task_prompt="authors"``: the peers header and the confidence annotations of src/agent.py (``_build_prompt``).
AUTHORS_PEERS_HEADER_WITH_CONFIDENCE = "These are the solutions to the problem from other agents with your confidences:"
AUTHORS_CONFIDENCE_TEXT = {
    "high": "High, historically reliable on relative problems.",
    "low": "Low, low historical accuracy on relative problems.",
}
#: ``task_prompt="authors"``: the block of retrieved experiences (src/agent.py, ``_build_prompt``) and each
#: experience's text (src/utils/memory_utils.py, ``_build_value_text``).
AUTHORS_EXPERIENCES_HEADER = "Here are some examples:"
#: ``task_prompt="authors"``: CoT, Self-Consistency and ICL-CoT append this line to the task prompt
#: (src/chain_of_thought.py, ``ChainOfThought._build_cot_messages``).
AUTHORS_COT_SUFFIX = "\nPlease solve the problem step by step."
AUTHORS_STANCE_TEXT = {None: "N/A (initial round)", True: "The agent changed its stance.",
                       False: "The agent did not change its stance."}
AUTHORS_CORRECTNESS_TEXT = {True: "The response is correct.", False: "The response is incorrect."}


# ``task_prompt="authors"``: the summary prompt of the authors' code (src/prompts.py, DEBATE_SUMMARY_PROMPT),
# verbatim: the appendix's words with other line breaks and indentation, ending with a newline.
AUTHORS_SUMMARY_TEMPLATE = """You are an expert analyst observing a multi-agent debate. Your task is to generate a concise debate summary that captures the key dynamics of the current round.

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
- Only output the debate summary.
"""


def authors_experience_text(question: str, solution: str, response: str, stance_changed: bool | None,
                            correct: bool) -> str:
    """One retrieved case as the authors' code writes it (src/utils/memory_utils.py, ``_build_value_text``): the
    question, y as ``<example_solution>``, the agent's response, the stance change, the response's correctness."""
    return (
        f"<example_question>\n{question}\n</example_question>\n\n"
        f"<example_solution>\n{solution}\n</example_solution>\n\n"
        f"<example_agent_response>\n{response}\n</example_agent_response>\n\n"
        f"<example_agent_stance_changed>\n{AUTHORS_STANCE_TEXT[stance_changed]}\n</example_agent_stance_changed>\n\n"
        f"<example_agent_response_correctness>\n{AUTHORS_CORRECTNESS_TEXT[correct]}\n"
        "</example_agent_response_correctness>"
    )


def strip_question_prefix(question: str) -> str:
    """The sample's question from a ``{QUESTION}`` slot, with or without the authors' ``Question: `` prefix."""
    return question[len(AUTHORS_QUESTION_PREFIX):] if question.startswith(AUTHORS_QUESTION_PREFIX) else question
