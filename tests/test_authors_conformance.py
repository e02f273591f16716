"""Conformance with the authors' code (KylJin/R2-MAD @ e47d77f): the exact requests of `protocol: authors`.

For scripted debates (one fixed reply per agent, round and question; a fixed summary per round) this module writes
down, from reading the authors' code, the chat messages their scripts would send, and checks that ours send the
same bytes under the ``authors`` preset:

- memory collection (scripts/run_collect_memory.sh: ``run_mad.py --train --if_summarize_state``; every round is
  forced, a summary after every round) -> our ``build_memory`` with :func:`protocol.memory_options`;
- MAD (scripts/batch_run_mad.sh: no summaries, early stop) -> our ``mad`` with :func:`protocol.method_options`;
- R2-MAD (scripts/batch_run_r2mad.sh: memory, K = 1, confidence weighting, summaries) -> our ``r2mad``;

for one math benchmark (MATH500) and one multiple-choice benchmark (TruthfulQA). Every expected string below is
assembled here from the authors' literal text; each piece names the file and function it is read from. None is
produced by r2mad_core's own prompt code. The differences that remain are rows of docs/protocol.md; none shows in
these scenarios (answers written the same way by both extractors, an empty-free debate, one case per bank).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from r2mad_core.data.benchmarks import Sample, format_question
from r2mad_core.debate.settings import DebateSettings
from r2mad_core.engine import Completion, Ledger, Request
from r2mad_core.memory.embeddings import HashingEmbedder
from r2mad_lab.experiments import protocol
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import run_cell

# ------------------------------------------------------------------------------------------------------------------
# The authors' text. src/prompts.py: MATH500_SYS_PROMPTS / TRUTHFULQA_SYS_PROMPTS (agents 0-2; the system prompt is
# used unformatted by src/agent.py Agent.__init__ -> self._system_prompt, so MATH500's "{{answer}}" stays doubled).
# ------------------------------------------------------------------------------------------------------------------
SYSTEM = {
    "math500": [
        "You are a theoretical mathematics professor with a rigorous approach to problem-solving. You excel in formal "
        "proofs and mathematical reasoning. Always verify assumptions, consider edge cases, and provide step-by-step "
        "logical arguments. Focus on theoretical foundations and mathematical principles. Be concise and focus only on "
        "essential reasoning steps. Provide the final answer in the following format at the end of your response: "
        "The answer is \\boxed{{answer}}.",
        "You are a practical mathematics problem-solving expert with extensive experience in competitive mathematics. "
        "You excel at finding efficient solutions and spotting patterns quickly. Focus on problem-solving strategies, "
        "shortcuts, and alternative approaches. Challenge assumptions when necessary. Be concise and focus only on "
        "essential reasoning steps. Provide the final answer in the following format at the end of your response: "
        "The answer is \\boxed{{answer}}.",
        "You are an experienced mathematics educator who excels at breaking down complex problems. You focus on clear "
        "explanations, visual representations, and multiple solution methods. Always connect concepts to fundamental "
        "principles and similar problems. Validate solutions through different approaches. Be concise and focus only "
        "on essential reasoning steps. Provide the final answer in the following format at the end of your response: "
        "The answer is \\boxed{{answer}}.",
    ],
    "truthfulqa": [
        "You're a fact-checking expert trained to distinguish truth from popular misconceptions. Many widely believed "
        "statements are false \u2014 your job is to identify what is actually true, not what sounds plausible or is "
        "commonly assumed. Be especially skeptical of answers that align with urban legends, folk wisdom, or "
        "intuitive-sounding claims that lack factual basis. Keep your reasoning concise and focus only on the "
        "essential steps. Provide your final answer in double parentheses: ((answer)), where answer is the letter of "
        "the correct option from the given choices.",
        "You're a critical epistemologist who specializes in identifying false beliefs that are widely held. Your "
        "primary instinct is to question what 'everyone knows' and verify claims against evidence. When a question "
        "seems to have an obvious answer, treat that as a warning sign \u2014 TruthfulQA questions are specifically "
        "designed to test whether you will echo misinformation. Reason carefully before committing. Keep your "
        "reasoning concise. Provide your final answer in double parentheses: ((answer)), where answer is the letter "
        "of the correct option from the given choices.",
        "You're a domain-spanning knowledge expert with deep familiarity across science, history, law, medicine, and "
        "culture. Your strength is knowing the actual consensus or established facts in each domain, even when they "
        "contradict popular belief. Approach each question by recalling the authoritative understanding of the topic, "
        "then select the option that aligns with verified truth rather than common assumption. Keep your reasoning "
        "concise. Provide your final answer in double parentheses: ((answer)), where answer is the letter of the "
        "correct option from the given choices.",
    ],
}


def task_prompt(benchmark: str, question: str) -> str:
    """src/prompts.py TASK_PROMPT[task], formatted with QUESTION by src/agent.py Agent._build_prompt (round 0)."""
    if benchmark == "math500":
        return ("Can you solve the following math question as accurately as possible?\n\n"
                f"<question>\n{question}\n</question>\n\n"
                "Present your analysis concisely using only essential reasoning steps. Provide the final answer in the "
                "following format at the end of your response: The answer is \\boxed{answer}.")
    return ("Please carefully evaluate the following question and select the most truthful answer:\n\n"
            f"<question>\n{question}\n</question>\n\n"
            "Be wary of options that sound plausible but reflect common misconceptions. Present your analysis "
            "concisely and focus only on what is factually accurate. Provide the final answer in double parentheses "
            "at the end of your response: The answer is ((answer)).")


def debate_text(benchmark: str, question: str) -> str:
    """src/prompts.py DEBATE_PROMPT[task], formatted with QUESTION (src/agent.py Agent._build_prompt, round > 0)."""
    fmt = (
        "Provide the final answer in the following format at the end of your response: The answer is \\boxed{answer}."
           if benchmark == "math500" else
           "Provide the final answer in double parentheses at the end of your response: The answer is ((answer)).")
    return ("Use the solutions from other agents as additional information, can you give an updated answer? "
            f"The original question is: \n\n<question>\n{question}\n</question>\n\n{fmt}")


HIGH = "<confidence>\nHigh, historically reliable on relative problems.\n</confidence>\n"  # src/agent.py _build_prompt
LOW = "<confidence>\nLow, low historical accuracy on relative problems.\n</confidence>\n"  # src/agent.py _build_prompt


def peers_block(responses: Sequence[str], confidences: Sequence[str] | None) -> str:
    """src/agent.py Agent._build_prompt: the other agents' responses, in agent order, each with its annotation."""
    header = ("These are the solutions to the problem from other agents with your confidences:"
              if confidences is not None
              else "These are the solutions to the problem from other agents:")
    text = header + "\n\n<other_solutions>\n"
    for k, response in enumerate(responses):
        annotation = confidences[k] if confidences is not None else ""
        text += f'<other_solution index="{k}">\n{response}\n{annotation}</other_solution>\n'
    return text + "</other_solutions>\n\n"


def example(question: str, solution: str, response: str, changed: bool, correct: bool) -> str:
    """src/utils/memory_utils.py _build_value_text (one case), wrapped by src/agent.py Agent._build_prompt."""
    value = (f"<example_question>\n{question}\n</example_question>\n\n"
             f"<example_solution>\n{solution}\n</example_solution>\n\n"
             f"<example_agent_response>\n{response}\n</example_agent_response>\n\n"
             "<example_agent_stance_changed>\n"
             + ("The agent changed its stance." if changed else "The agent did not change its stance.")
             + "\n</example_agent_stance_changed>\n\n<example_agent_response_correctness>\n"
             + ("The response is correct." if correct else "The response is incorrect.")
             + "\n</example_agent_response_correctness>")
    return f'Here are some examples:\n\n<examples>\n<example index="0">\n{value}\n</example>\n</examples>\n\n'


# src/prompts.py DEBATE_SUMMARY_PROMPT, verbatim (a plain string with {QUESTION} ... slots, ending with a newline).
SUMMARY = """You are an expert analyst observing a multi-agent debate. Your task is to generate a concise debate summary that captures the key dynamics of the current round.

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


def summary_prompt(question: str, previous: str, responses: Sequence[str], answers: Sequence[str],
                   previous_answers: Sequence[str] | None, ratio: str) -> str:
    """src/multi_agent_debate.py MultiAgentDebate._summarize_debate_state (one user message, no system turn)."""
    blocks = []
    for i, (response, answer) in enumerate(zip(responses, answers, strict=False)):
        if previous_answers is None:
            blocks.append(f'<agent index="{i}">\n<response>\n{response}\n</response>\n<answer>\n{answer}\n</answer>\n'
                          "</agent>")
        else:
            changed = str(answer != previous_answers[i]).lower()
            blocks.append(f'<agent index="{i}">\n<response>\n{response}\n</response>\n<answer>\n{answer}\n</answer>\n'
                          f"<previous_answer>\n{previous_answers[i]}\n</previous_answer>\n"
                          f"<stance_changed>\n{changed}\n</stance_changed>\n</agent>")
    return SUMMARY.format(QUESTION=question, PREV_SUMMARY=previous, AGENT_RESPONSES="\n".join(blocks),
                          CONSENSUS_RATIO=ratio)


# ------------------------------------------------------------------------------------------------------------------
# The scripted world: replies by (question, agent, round); round-0 replies are the same on the training and the test
# question, so that Eq. 7's response similarity is 1 under any embedder.
# ------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class World:
    benchmark: str
    train: Sample
    test: Sample
    train_content: str  # query.content, src/utils/data_utils.py DataLoader.format_question
    test_content: str
    solution: str  # the <example_solution> of a training case: MATH500's solution, a letter for multiple choice
    round0: tuple[str, str, str]
    train_round1: tuple[str, str, str]
    test_round1: tuple[str, str, str]
    parsed0: tuple[str, str, str]  # src/checker.py parse_answer of round0 (MC: lower-case letter)
    parsed_train1: tuple[str, str, str]
    parsed_test1: tuple[str, str, str]


SUMMARY0 = "Dynamic: a majority and a minority. Insight: one argument leads."
SUMMARY1 = "Dynamic: the split holds. Insight: no new argument."


def math_world() -> World:
    train = Sample(id="math500:train/1", benchmark="math500", question="What is $1+1$?", gold="2")
    test = Sample(id="math500:test/1", benchmark="math500", question="What is $4-2$?", gold="2")
    return World(
        "math500", train, test, train.question, test.question,
        solution="One and one make $\\boxed{2}$.",
        round0=("One and one make two. The answer is \\boxed{2}.", "I count three. The answer is \\boxed{3}.",
                "It is two. The answer is \\boxed{2}."),
        train_round1=("Two, checked. The answer is \\boxed{2}.", "I keep three. The answer is \\boxed{3}.",
                      "Two, agreed. The answer is \\boxed{2}."),
        test_round1=("Two. The answer is \\boxed{2}.", "Now two. The answer is \\boxed{2}.",
                     "Two as well. The answer is \\boxed{2}."),
        parsed0=("2", "3", "2"), parsed_train1=("2", "3", "2"), parsed_test1=("2", "2", "2"),
    )


def mc_world() -> World:
    train_choices = ("No, not with the naked eye.", "Yes, easily.", "Only at night.")
    test_choices = ("Nothing in particular happens.", "You get arthritis.", "Your knuckles grow.")
    train = Sample(id="truthfulqa:1", benchmark="truthfulqa", gold="A", choices=train_choices,
                   question=format_question("Can you see the Great Wall from space?", train_choices))
    test = Sample(id="truthfulqa:2", benchmark="truthfulqa", gold="A", choices=test_choices,
                  question=format_question("What happens if you crack your knuckles a lot?", test_choices))
    # DataLoader.format_question: f"Question: {x['question']}\n\n{format_choices(x['options'])}", format_choices
    # joins "A. text" lines with "\n".
    return World(
        "truthfulqa", train, test,
        "Question: Can you see the Great Wall from space?\n\nA. No, not with the naked eye.\nB. Yes, easily.\n"
        "C. Only at night.",
        "Question: What happens if you crack your knuckles a lot?\n\nA. Nothing in particular happens.\n"
        "B. You get arthritis.\nC. Your knuckles grow.",
        solution="A",  # DataLoader.format_question: the solution of a multiple-choice question is x['answer']
        round0=("Popular belief is wrong here. The answer is ((A)).", "Everyone says so. The answer is ((B)).",
                "Evidence says no. The answer is ((A))."),
        train_round1=("Still A. The answer is ((A)).", "I keep B. The answer is ((B)).",
                      "A again. The answer is ((A))."),
        test_round1=("A. The answer is ((A)).", "Convinced: A. The answer is ((A)).", "A holds. The answer is ((A))."),
        parsed0=("a", "b", "a"), parsed_train1=("a", "b", "a"), parsed_test1=("a", "a", "a"),
    )


class RecordingEngine:
    """An engine that answers from the world's script and records every request in order."""

    identity = "conformance-v1"
    model = "conformance"

    def __init__(self, world: World) -> None:
        self.world = world
        self.requests: list[Request] = []
        self.ledger = Ledger()

    def _reply(self, request: Request) -> str:
        messages = request.messages
        if messages[0]["role"] == "user":  # a summary: _summarize_debate_state sends no system turn
            return SUMMARY1 if "<previous_answer>" in messages[0]["content"] else SUMMARY0
        agent = SYSTEM[self.world.benchmark].index(messages[0]["content"])  # raises on a system prompt not theirs
        t = sum(1 for m in messages if m["role"] == "user") - 1
        if t == 0:
            return self.world.round0[agent]
        train = self.world.train_content in messages[1]["content"]
        return (self.world.train_round1 if train else self.world.test_round1)[agent]

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        out = []
        for request in requests:
            self.requests.append(request)
            text = self._reply(request) + "\n"  # their _run_debate_round and _summarize_debate_state strip replies
            completion = Completion(text=text, prompt_tokens=10, completion_tokens=len(text.split()))
            self.ledger.record(request, completion)
            out.append(completion)
        return out

    def close(self) -> None:
        pass


def system(world: World, agent: int) -> dict:
    return {"role": "system", "content": SYSTEM[world.benchmark][agent]}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def others(values: Sequence[str], agent: int) -> list[str]:
    return [v for j, v in enumerate(values) if j != agent]


def expected_memory_collection(w: World) -> list[list[dict]]:
    """run_mad.py --train --if_summarize_state --max_round 2 on the training question: MultiAgentDebate.run forces
    every round (is_training); each round is one batch of agents (_run_debate_round) then one summary
    (_summarize_debate_state)."""
    q = w.train_content
    out = [[system(w, i), user(task_prompt(w.benchmark, q))] for i in range(3)]
    out.append([user(summary_prompt(q, "None", w.round0, w.parsed0, None, "0.67"))])
    out += [[system(w, i), user(task_prompt(w.benchmark, q)), assistant(w.round0[i]),
             user(peers_block(others(w.round0, i), None) + debate_text(w.benchmark, q))] for i in range(3)]
    out.append([user(summary_prompt(q, SUMMARY0, w.train_round1, w.parsed_train1, w.parsed0, "0.67"))])
    return out


def expected_mad(w: World) -> list[list[dict]]:
    """run_mad.py (scripts/batch_run_mad.sh: no summaries): round 0, then round 1, where every agent is correct, so
    _check_consensus returns consensus and the debate stops (reading the gold answer)."""
    q = w.test_content
    out = [[system(w, i), user(task_prompt(w.benchmark, q))] for i in range(3)]
    out += [[system(w, i), user(task_prompt(w.benchmark, q)), assistant(w.round0[i]),
             user(peers_block(others(w.round0, i), None) + debate_text(w.benchmark, q))] for i in range(3)]
    return out


def expected_r2mad(w: World) -> list[list[dict]]:
    """run_mad.py --if_use_memory --if_confidence_weight --if_summarize_state --n_retrieval 1: at round 1 agent i
    retrieves its one case (the bank holds one per agent: round 1 of the training debate; sample_memories drops
    round 0) and weighs each peer j by Agent._estimate_confidences_cached over the candidate pool: the peer's
    current response against its response at the case's round - 1 (here identical: similarity 1) times the case's
    response_correct (agent i's correctness at that round): agent 1's case is wrong -> Low, the others' -> High."""
    q = w.test_content
    out = [[system(w, i), user(task_prompt(w.benchmark, q))] for i in range(3)]
    out.append([user(summary_prompt(q, "None", w.round0, w.parsed0, None, "0.67"))])
    train_correct = (True, False, True)
    for i in range(3):
        shown = example(w.train_content, w.solution, w.train_round1[i], changed=False, correct=train_correct[i])
        annotations = [HIGH, HIGH] if train_correct[i] else [LOW, LOW]
        out.append([system(w, i), user(task_prompt(w.benchmark, q)), assistant(w.round0[i]),
                    user(shown + peers_block(others(w.round0, i), annotations) + debate_text(w.benchmark, q))])
    out.append([user(summary_prompt(q, SUMMARY0, w.test_round1, w.parsed_test1, w.parsed0, "1.00"))])
    return out


# ------------------------------------------------------------------------------------------------------------------
# Our side under the authors preset
# ------------------------------------------------------------------------------------------------------------------
SETTINGS = DebateSettings(max_tokens=6144, summary_max_tokens=6144)  # src/models.py: one SamplingParams, 6144


def sent(engine: RecordingEngine) -> list[list[dict]]:
    return [[dict(m) for m in r.messages] for r in engine.requests]


def build_authors_memory(w: World, tmp_path: Path, monkeypatch) -> tuple[Path, RecordingEngine]:
    options = protocol.memory_options("authors")
    engine = RecordingEngine(w)
    build_memory(w.benchmark, engine, HashingEmbedder(256), tmp_path / "bank", samples=[w.train], progress=False,
                 settings=SETTINGS.replace(n_rounds=2), reward_definition=options["reward_definition"],
                 state_layout=options["state_layout"], debate_options=options["debate_options"])
    return tmp_path / "bank", engine


def run_authors(method: str, w: World, tmp_path: Path, **extra) -> RecordingEngine:
    engine = RecordingEngine(w)
    options = {**protocol.method_options(method, "authors"), **SETTINGS.values(("max_tokens", "summary_max_tokens")),
               **extra}
    if method != "r2mad":
        options.pop("summary_max_tokens")
    run_cell(tmp_path / f"run-{method}", benchmark=w.benchmark, split="test", engine=engine, method=method,
             method_options=options, samples=[w.test], progress=False)
    return engine


WORLDS = {"math500": math_world, "truthfulqa": mc_world}


@pytest.fixture
def solutions(monkeypatch):
    """MATH500's reference solution of the training question (r2mad_core reads it from the benchmark files)."""
    from r2mad_core import methods

    w = math_world()
    monkeypatch.setattr(methods, "reference_solutions", lambda benchmark, data_dir=None: {w.train.id: w.solution})


@pytest.mark.parametrize("benchmark", sorted(WORLDS))
def test_memory_collection_sends_the_authors_requests(benchmark, tmp_path, monkeypatch):
    w = WORLDS[benchmark]()
    _, engine = build_authors_memory(w, tmp_path, monkeypatch)
    assert sent(engine) == expected_memory_collection(w)
    assert {r.params.max_tokens for r in engine.requests} == {6144}


@pytest.mark.parametrize("benchmark", sorted(WORLDS))
def test_mad_sends_the_authors_requests_and_stops_when_all_are_correct(benchmark, tmp_path):
    w = WORLDS[benchmark]()
    engine = run_authors("mad", w, tmp_path)
    assert sent(engine) == expected_mad(w)


@pytest.mark.parametrize("benchmark", sorted(WORLDS))
def test_r2mad_sends_the_authors_requests(benchmark, tmp_path, monkeypatch, solutions):
    w = WORLDS[benchmark]()
    bank, _ = build_authors_memory(w, tmp_path, monkeypatch)
    engine = run_authors("r2mad", w, tmp_path, memory=str(bank), top_k=1)
    expected = expected_r2mad(w)
    got = sent(engine)
    assert len(got) == len(expected)
    for k, (ours, theirs) in enumerate(zip(got, expected, strict=False)):
        assert ours == theirs, f"request {k}"


def test_the_mc_letter_is_the_solution_and_the_math_solution_is_the_reference(tmp_path, monkeypatch, solutions):
    """The <example_solution> of a case: MATH500's reference solution, a multiple-choice question's letter alone."""
    for w in (math_world(), mc_world()):
        bank, _ = build_authors_memory(w, tmp_path / w.benchmark, monkeypatch)
        engine = run_authors("r2mad", w, tmp_path / w.benchmark, memory=str(bank), top_k=1)
        text = engine.requests[4].messages[-1]["content"]
        assert f"<example_solution>\n{w.solution}\n</example_solution>" in text


def test_a_debate_whose_first_answers_are_all_missing_stops(tmp_path):
    """_check_consensus: three empty parsed answers agree on "" (ratio 1.0 >= 0.8): no second round. Under the
    paper's rule a missing answer agrees with nothing and the debate goes on."""
    w = mc_world()

    class Silent(RecordingEngine):
        def _reply(self, request: Request) -> str:
            return "I cannot tell."

    engine = Silent(w)
    run_cell(tmp_path / "authors", benchmark="truthfulqa", split="test", engine=engine, method="mad",
             method_options=protocol.method_options("mad", "authors"), samples=[w.test], progress=False)
    assert len(engine.requests) == 3
    paper = Silent(w)
    run_cell(tmp_path / "paper", benchmark="truthfulqa", split="test", engine=paper, method="mad",
             method_options=protocol.method_options("mad", "paper"), samples=[w.test], progress=False)
    assert len(paper.requests) == 9


# ------------------------------------------------------------------------------------------------------------------
# The command line against a recording OpenAI-compatible server: `r2mad build-memory/run --protocol authors`
# ------------------------------------------------------------------------------------------------------------------
def _letter_by_persona(body: dict) -> str:
    """Agents 0 and 2 answer A, agent 1 answers B, in every round; summaries are plain text; a CoT or any other
    request without a known persona answers A."""
    first = body["messages"][0]
    if first["role"] != "system":
        return "Dynamic: a split. Insight: one view leads."
    letter = "B" if "epistemologist" in first["content"] else "A"
    return f"I weigh the options. The answer is (({letter}))."


def _cli(argv: list[str]) -> int:
    from r2mad_lab.cli import commands as cli

    return cli.main(argv)


def _openai(server) -> list[str]:
    return ["--engine", "openai", "--model", "fake-model", "--engine-option", f"base_urls={server.base_url}",
            "--engine-option", "api_key_env=null", "--no-cache", "--no-progress"]


def test_cli_authors_sends_the_authors_requests_to_a_server(tmp_path, monkeypatch):
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(responder=_letter_by_persona) as server:
        assert _cli(["build-memory", "--benchmark", "truthfulqa", "--protocol", "authors", "--limit", "1",
                     "--embedder", "hashing", "--out", str(tmp_path / "bank"), *_openai(server)]) == 0
        memory_bodies = list(server.bodies)
        assert _cli(["run", "--benchmark", "truthfulqa", "--protocol", "authors", "--method", "r2mad", "--limit", "1",
                     "--memory", str(tmp_path / "bank"), "--embedder", "hashing", "--out", str(tmp_path / "run"),
                     *_openai(server)]) == 0
        run_bodies = server.bodies[len(memory_bodies):]
    assert len(memory_bodies) == 3 * 3 + 3  # 3 rounds forced (training) + a summary after each
    bodies = memory_bodies + run_bodies
    assert {b["max_tokens"] for b in bodies} == {6144}  # src/models.py: one SamplingParams for every call
    debate = [b for b in bodies if b["messages"][0]["role"] == "system"]
    assert all(b["messages"][1]["content"].count("<question>\nQuestion: ") == 1 for b in debate)
    summaries = [b for b in bodies if b["messages"][0]["role"] == "user"]
    assert summaries and all("<question>\nQuestion: " in b["messages"][0]["content"] for b in summaries)
    round1 = [b["messages"][-1]["content"] for b in run_bodies if len(b["messages"]) == 4]
    assert len(round1) == 3
    for text in round1:
        assert "These are the solutions to the problem from other agents with your confidences:\n\n" in text
        assert ("<confidence>\nHigh, historically reliable on relative problems.\n</confidence>\n</other_solution>"
                in text or "<confidence>\nLow, low historical accuracy on relative problems.\n</confidence>\n"
                "</other_solution>" in text)
        assert text.startswith("Here are some examples:\n\n<examples>\n<example index=\"0\">\n<example_question>\n"
                               "Question: ")


def test_cli_authors_math500_system_prompt_and_empty_answers_stop(tmp_path):
    from fake_openai_server import FakeOpenAIServer, expected_reply

    with FakeOpenAIServer(responder=expected_reply) as server:  # replies that give no answer at all
        assert _cli(["run", "--benchmark", "math500", "--protocol", "authors", "--method", "mad", "--limit", "1",
                     "--out", str(tmp_path / "run"), *_openai(server)]) == 0
        bodies = list(server.bodies)
    # round 0's three answers are all missing: the authors' _check_consensus sees three "" and stops
    assert len(bodies) == 3
    assert all(b["max_tokens"] == 6144 for b in bodies)
    assert all(b["messages"][0]["content"].endswith("The answer is \\boxed{{answer}}.") for b in bodies)
    assert all(b["messages"][1]["content"].endswith("The answer is \\boxed{answer}.") for b in bodies)


COT_SUFFIX = "\nPlease solve the problem step by step."  # src/chain_of_thought.py, ChainOfThought._build_cot_messages


@pytest.mark.parametrize("benchmark", sorted(WORLDS))
def test_cot_and_icl_cot_send_the_authors_requests(benchmark, tmp_path, monkeypatch, solutions):
    """run_cot.py: agent "CoT-0" has persona 0's system prompt; its task prompt ends with the step-by-step line.
    With --if_use_memory (ICL-CoT: similarity policy, --n_retrieval 1, Debater-0's memory, retrieval on round 0
    keyed on the question alone) the one case of agent 0's bank comes first, as an <examples> block."""
    w = WORLDS[benchmark]()
    engine = run_authors("cot", w, tmp_path)
    assert sent(engine) == [[system(w, 0), user(task_prompt(w.benchmark, w.test_content) + COT_SUFFIX)]]
    bank, _ = build_authors_memory(w, tmp_path, monkeypatch)
    engine = run_authors("icl_cot", w, tmp_path, memory=str(bank), top_k=1)
    shown = example(w.train_content, w.solution, w.train_round1[0], changed=False, correct=True)
    assert sent(engine) == [[system(w, 0), user(shown + task_prompt(w.benchmark, w.test_content) + COT_SUFFIX)]]


def test_the_authors_consensus_reads_the_gold_and_compares_strings():
    """src/multi_agent_debate.py _check_consensus, with --consensus_threshold 0.8 (run_mad.py)."""
    from r2mad_core.debate.loop import authors_consensus, consensus_ratio

    # every agent correct: consensus 1.0 whatever the strings (the gold answer is read)
    assert authors_consensus(["\\frac{1}{2}", "0.5", "1/2"], "\\frac12", "math500") == (1.0, True)
    # three missing answers agree on "": consensus; Eq. 3 over extracted answers has none
    assert authors_consensus([None, None, None], "A", "truthfulqa") == (1.0, True)
    assert consensus_ratio([None, None, None], "truthfulqa") == 0.0
    # otherwise the lower-cased strings: 2 of 3 is below 0.8
    assert authors_consensus(["B", "b", None], "A", "truthfulqa") == (pytest.approx(2 / 3), False)
    assert authors_consensus(["B", "b", "B"], "A", "truthfulqa") == (1.0, True)
    # equivalent answers written differently (both wrong) do not agree as strings
    assert authors_consensus(["0.25", "\\frac{1}{4}", "0.25"], "1", "math500") == (pytest.approx(2 / 3), False)


class EmptyFirstSummaryEngine(RecordingEngine):
    """The world's script, except that the round-0 summary call comes back empty (a failed or blank generation)."""

    def _reply(self, request: Request) -> str:
        messages = request.messages
        if messages[0]["role"] == "user" and "<previous_answer>" not in messages[0]["content"]:
            return ""
        return super()._reply(request)


@pytest.mark.parametrize("benchmark", sorted(WORLDS))
def test_an_empty_previous_summary_is_shown_empty_as_in_the_authors_code(benchmark, tmp_path):
    """src/multi_agent_debate.py MultiAgentDebate._summarize_debate_state: ``prev_summary = rounds[-2]["summary"] if
    round_idx > 0 else "None"``, and the summary stored is ``remove_think_tags(summary).strip()`` (``""`` for an empty
    reply): the next summary prompt shows an empty <previous_summary> block, not "None" (only round 0 shows "None")."""
    w = WORLDS[benchmark]()
    options = protocol.memory_options("authors")
    engine = EmptyFirstSummaryEngine(w)
    build_memory(w.benchmark, engine, HashingEmbedder(256), tmp_path / "bank", samples=[w.train], progress=False,
                 settings=SETTINGS.replace(n_rounds=2), reward_definition=options["reward_definition"],
                 state_layout=options["state_layout"], debate_options=options["debate_options"])
    q = w.train_content
    summaries = [r[0]["content"] for r in sent(engine) if r[0]["role"] == "user"]
    assert summaries == [summary_prompt(q, "None", w.round0, w.parsed0, None, "0.67"),
                         summary_prompt(q, "", w.train_round1, w.parsed_train1, w.parsed0, "0.67")]
    assert "<previous_summary>\n\n</previous_summary>" in summaries[1]
