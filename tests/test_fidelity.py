"""The real-model path as the paper specifies (issue: fidelity): per-request seeds, experiences that carry y,
MAD-M2's lowest-perplexity masking (tests/test_methods.py), round 0 shared or independent, protocol options."""

from __future__ import annotations

from pathlib import Path

import pytest
from debate_fakes import ScriptedEngine, last_user, mc_answer, mc_sample, round_of
from fake_openai_server import FakeOpenAIServer

from r2mad_core.debate import prompt_parsing, prompts
from r2mad_core.debate.loop import run_debate
from r2mad_core.engine import SEED_SCHEME, Request, SamplingParams, backend_seed
from r2mad_core.memory.banks import MemoryBankSet
from r2mad_core.memory.embeddings import HashingEmbedder
from r2mad_core.memory.hook import experience_view, reference_text
from r2mad_core.methods import get_method
from r2mad_core.theory.agents import SimulatedEngine
from r2mad_lab.engines import CachedEngine
from r2mad_lab.engines.openai_compat import OpenAICompatEngine
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import run_cell

QUESTIONS = [mc_sample(f"q{k}", question=f"Which statement about topic {k} is true?") for k in range(3)]


# ------------------------------------------------------------------------------------------------
# 1. Every request its own seed
# ------------------------------------------------------------------------------------------------
def test_a_mad_run_sends_a_distinct_seed_with_every_request() -> None:
    """3 questions x 3 agents x 3 rounds = 27 debate requests, 27 distinct seeds (v1 sent one seed to all 27)."""
    method = get_method("mad", stop_at_unanimity=False)
    with FakeOpenAIServer() as server:
        engine = OpenAICompatEngine("test-model", [server.base_url], max_concurrency=4, timeout_seconds=5.0,
                                    api_key_env="R2MAD_TEST_API_KEY")
        try:
            states = run_debate(QUESTIONS, engine, method.debate)
        finally:
            engine.close()
        bodies = list(server.bodies)
    assert sum(len(s.rounds) for s in states) == 9
    assert len(bodies) == 27
    seeds = [body["seed"] for body in bodies]
    assert len(set(seeds)) == 27, f"{27 - len(set(seeds))} requests shared a seed"


def test_seed_follows_the_request_identity() -> None:
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=64, seed=0)
    user = {"role": "user", "content": "Question?"}
    a = Request(messages=({"role": "system", "content": "persona A"}, user), params=params)
    b = Request(messages=({"role": "system", "content": "persona B"}, user), params=params)
    same_as_a = Request(messages=({"role": "system", "content": "persona A"}, dict(user)), params=params)
    assert backend_seed(a, "engine", "model") != backend_seed(b, "engine", "model")  # only the system prompt differs
    assert backend_seed(a, "engine", "model") == backend_seed(same_as_a, "engine", "model")  # a rerun replays
    assert backend_seed(a, "engine", "model") != backend_seed(a, "engine", "other-model")
    assert backend_seed(a, "engine", "model") != backend_seed(a, "other-engine", "model")
    other_seed = Request(messages=a.messages, params=SamplingParams(max_tokens=64, seed=1))
    assert backend_seed(a, "engine", "model") != backend_seed(other_seed, "engine", "model")


def test_the_seed_scheme_is_part_of_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Completions cached under the old one-seed-per-run scheme must miss, not be replayed as new draws."""
    request = Request(messages=({"role": "user", "content": "Q"},))
    key = request.key("engine", "model")
    monkeypatch.setattr("r2mad_core.engine.SEED_SCHEME", "per-run-v1")
    assert request.key("engine", "model") != key
    assert SEED_SCHEME == "request-identity-v2"


# ------------------------------------------------------------------------------------------------
# 2. Experiences carry the reference answer y
# ------------------------------------------------------------------------------------------------
LETTER = {0: "A", 1: "B", 2: "A"}  # persona 1 is always wrong (gold is A)
TRAIN = [mc_sample(f"train{k}", question=f"Which fact about topic {k} holds?") for k in range(4)]
TEST = [mc_sample(f"test{k}", question=f"Which fact about subject {k} holds?") for k in range(2)]


def scripted() -> ScriptedEngine:
    return ScriptedEngine(lambda question, persona, t, request: mc_answer(LETTER[persona]))


@pytest.fixture
def bank_dir(tmp_path: Path) -> Path:
    build_memory("truthfulqa", scripted(), HashingEmbedder(256), tmp_path / "bank", samples=TRAIN, progress=False)
    return tmp_path / "bank"


def _round1_user_turn(engine: ScriptedEngine, persona: int) -> str:
    for batch in engine.batches:
        for request in batch:
            if (request.tag == "debate" and round_of(request) == 1
                    and request.messages[0]["content"] == prompts.system_prompt("truthfulqa", persona)):
                return last_user(request)
    raise AssertionError("no round-1 request")


def _expected_experience_block(cases: list, reference_lines: list[str]) -> str:
    lines = ["Here are experiences from your past debates on related questions:", "", "<experiences>"]
    for k, (case, reference) in enumerate(zip(cases, reference_lines, strict=False)):
        lines += [
            f'<experience index="{k}">',
            f"<question>\n{case.state.question}\n</question>",
            f"<debate_summary>\n{case.state.previous_summary}\n</debate_summary>",
            f"<consensus_ratio>{case.state.consensus_ratio:.2f}</consensus_ratio>",
            f"<your_response>\n{mc_answer('B')}\n</your_response>",
            "<your_answer>B</your_answer>",
            "<your_answer_was>incorrect</your_answer_was>",
            *reference,
            "<debate_outcome>correct</debate_outcome>",
            "</experience>",
        ]
    return "\n".join(lines + ["</experiences>"]) + "\n\n"


@pytest.mark.parametrize("mode", ["answer", "solution", "none"])
def test_a_round1_r2mad_prompt_shows_the_reference_answer(bank_dir: Path, tmp_path: Path, mode: str) -> None:
    engine = scripted()
    options = {"memory": str(bank_dir)} if mode == "answer" else {"memory": str(bank_dir), "experience_reference": mode}
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
                      method_options=options, samples=TEST, progress=False)
    agent1 = result.records[0].rounds[1].agents[1]
    bank = MemoryBankSet.load(bank_dir, embedder="hashing-256", benchmark="truthfulqa")[1]
    by_id = {c.case_id: c for c in bank.cases}
    cases = [by_id[cid] for cid in agent1.retrieved["case_ids"]]
    # Multiple choice: the letter and the option text; "solution" falls back to it (no solution for MC).
    references = [[] if mode == "none" else
                  ["<reference_answer>", f"A. option A for {c.sample_id}", "</reference_answer>"] for c in cases]
    text = _round1_user_turn(engine, 1)
    assert text.startswith(_expected_experience_block(cases, references))
    parsed = prompt_parsing.parse_prompt(text)
    assert [e.reference for e in parsed.experiences] == ["" if mode == "none" else f"A. option A for {c.sample_id}"
                                                         for c in cases]


def test_math_reference_answer_and_solution(bank_dir: Path) -> None:
    case = MemoryBankSet.load(bank_dir, embedder="hashing-256", benchmark="truthfulqa")[0].cases[0]
    math_case = type(case)(**{**case.__dict__, "gold": "\\frac{1}{2}", "num_options": None, "sample_id": "m1"})
    assert reference_text(math_case, "answer") == "\\frac{1}{2}"
    assert reference_text(math_case, "solution", {"m1": "Half of it. $\\boxed{\\frac{1}{2}}$"}) == (
        "Half of it. $\\boxed{\\frac{1}{2}}$"
    )
    assert reference_text(math_case, "none") == ""
    view = experience_view(math_case, reference="solution", solutions={"m1": "Full solution."})
    block = prompts.format_experiences([view])
    assert "<reference_solution>\nFull solution.\n</reference_solution>" in block
    assert prompt_parsing.parse_prompt(block + prompts.task_prompt("math500", "Q")).experiences[0].reference_is_solution


# ------------------------------------------------------------------------------------------------
# 4. Round 0 shared (every method, MAD-M2 objective included) or independent
# ------------------------------------------------------------------------------------------------
def _round0_hits(method_name: str, tmp_path: Path, **options: object) -> tuple[int, int]:
    backend = SimulatedEngine(QUESTIONS)
    with CachedEngine(backend, tmp_path / "cache") as engine:
        run_debate(QUESTIONS, engine, get_method("mad").debate)
        before = engine.stats.hits
        method = get_method(method_name, n_rounds=1, **options)
        run_debate(QUESTIONS, engine, method.debate, peer_selector=(
            method.make_peer_selector(None) if method.make_peer_selector else None))
        return engine.stats.hits - before, engine.stats.requests


@pytest.mark.parametrize("method_name, options", [
    ("mad_m2", {"masking": "objective"}), ("mad_m2", {"masking": "subjective"}), ("mad", {"with_summaries": True}),
])
def test_round0_shared_replays_mads_round0_for_every_method(tmp_path: Path, method_name: str, options: dict) -> None:
    hits, _ = _round0_hits(method_name, tmp_path, **options)
    assert hits == 9  # 3 questions x 3 agents: all of round 0 from MAD's generations


def test_round0_independent_draws_its_own_round0(tmp_path: Path) -> None:
    hits, _ = _round0_hits("mad_m2", tmp_path, round0="independent")
    assert hits == 0
    seeds = {get_method(name, round0="independent").debate.sampling_seed for name in ("mad", "mad_m2", "cot")}
    assert len(seeds) == 3
    assert get_method("mad").debate.sampling_seed == get_method("mad_m2").debate.sampling_seed == 0
    with pytest.raises(ValueError, match="round0"):
        get_method("mad", round0="paired")


# ------------------------------------------------------------------------------------------------
# 5. Protocol options
# ------------------------------------------------------------------------------------------------
def test_task_prompt_authors_uses_the_authors_benchmark_specific_wording() -> None:
    engine = ScriptedEngine(lambda question, persona, t, request: mc_answer("A"))
    run_debate(QUESTIONS[:1], engine, get_method("cot", task_prompt="authors").debate)
    text = last_user(engine.batches[0][0])
    assert text == (
        "Please carefully evaluate the following question and select the most truthful answer:\n\n"
        f"<question>\nQuestion: {QUESTIONS[0].question}\n</question>\n\n"  # data_utils.py, format_question
        "Be wary of options that sound plausible but reflect common misconceptions. Present your analysis concisely "
        "and focus only on what is factually accurate. Provide the final answer in double parentheses at the end of "
        "your response: The answer is ((answer)).\nPlease solve the problem step by step."  # chain_of_thought.py
    )
    engine = ScriptedEngine(lambda question, persona, t, request: mc_answer("A"))
    run_debate(QUESTIONS[:1], engine, get_method("cot").debate)
    assert last_user(engine.batches[0][0]).startswith("Can you solve the following math question")  # the paper's
