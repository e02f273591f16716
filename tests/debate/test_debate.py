"""The debate loop (Eq. 1-3): one engine call per round, early stopping, conversations, hooks."""

from __future__ import annotations

import pytest
from debate_fakes import ScriptedEngine, last_user, math_answer, math_sample, mc_answer, mc_sample, question_key

from r2mad_core.debate import prompt_parsing, prompts
from r2mad_core.debate.loop import (
    AgentRoundContext,
    DebateConfig,
    consensus_ratio,
    group_answers,
    is_unanimous,
    prompt_id,
    run_debate,
    score_turns,
)


def planned(plan: dict[str, list[list[str | None]]]):
    """Responder from {question first line: [round][persona] -> letter}; the last round repeats."""

    def respond(question, persona, t, request):
        rounds = plan[question_key(question)]
        return mc_answer(rounds[min(t, len(rounds) - 1)][persona])

    return respond


DISAGREE = [["A", "B", "C"]]


# ----------------------------------------------------------------------------------------------
# Consensus ratio (Eq. 3)
# ----------------------------------------------------------------------------------------------
def test_consensus_ratio_counts_the_most_popular_answer():
    assert consensus_ratio(["A", "A", "B"], "truthfulqa") == pytest.approx(2 / 3)
    assert consensus_ratio(["A", "B", "C"], "truthfulqa") == pytest.approx(1 / 3)
    assert consensus_ratio(["C", "C", "C"], "truthfulqa") == 1.0


def test_none_answers_never_agree_not_even_with_each_other():
    assert consensus_ratio([None, None, None], "truthfulqa") == 0.0
    assert consensus_ratio([None, None, "A"], "truthfulqa") == pytest.approx(1 / 3)
    assert not is_unanimous([None, None, None], "truthfulqa")
    assert not is_unanimous(["A", "A", None], "truthfulqa")
    assert is_unanimous(["A", "A", "A"], "truthfulqa")
    assert group_answers([None, "B", None, "B"], "truthfulqa") == [[1, 3]]


def test_math_answers_are_grouped_by_checker_equivalence():
    values = ["\\frac{1}{2}", "0.5", "\\dfrac12", "3"]
    assert group_answers(values, "math500") == [[0, 1, 2], [3]]
    assert consensus_ratio(values, "math500") == pytest.approx(3 / 4)


# ----------------------------------------------------------------------------------------------
# Engine calls per round, early stopping
# ----------------------------------------------------------------------------------------------
def test_one_engine_call_per_round_over_all_samples_and_agents():
    samples = [mc_sample(f"q{i}") for i in range(5)]
    engine = ScriptedEngine(planned({f"Question q{i}?": DISAGREE for i in range(5)}))
    states = run_debate(samples, engine, DebateConfig(n_agents=3, n_rounds=3))
    assert engine.calls == 3
    assert [len(b) for b in engine.batches] == [15, 15, 15]
    assert all(r.tag == "debate" for b in engine.batches for r in b)
    assert [len(s.rounds) for s in states] == [3, 3, 3, 3, 3]
    assert not any(s.stopped_early for s in states)


def test_summaries_are_one_extra_call_per_round_except_the_last():
    samples = [mc_sample(f"q{i}") for i in range(4)]
    engine = ScriptedEngine(planned({f"Question q{i}?": DISAGREE for i in range(4)}))
    states = run_debate(samples, engine, DebateConfig(n_rounds=3, with_summaries=True, summary_max_tokens=77))
    assert engine.calls_by_tag() == ["debate", "summary", "debate", "summary", "debate"]
    summary_batches = [b for b in engine.batches if b[0].tag == "summary"]
    assert [len(b) for b in summary_batches] == [4, 4]
    assert all(r.params.max_tokens == 77 for b in summary_batches for r in b)
    assert all(len(r.messages) == 1 and r.messages[0]["role"] == "user" for b in summary_batches for r in b)
    for state in states:
        assert [r.summary is not None for r in state.rounds] == [True, True, False]
    # h^(1)'s prompt carries h^(0) as the previous summary; h^(0)'s prompt has "None".
    first, second = summary_batches[0][0].messages[0]["content"], summary_batches[1][0].messages[0]["content"]
    assert "<previous_summary>\nNone\n</previous_summary>" in first
    assert f"<previous_summary>\n{engine.summary_text}\n</previous_summary>" in second
    parsed = prompt_parsing.parse_prompt(second)
    assert parsed.kind == "summary" and len(parsed.agent_responses) == 3
    assert parsed.consensus_ratio == pytest.approx(0.33)


def test_early_stop_at_unanimity_removes_the_sample_from_later_rounds():
    plan = {
        "Question agree?": [["B", "B", "B"]],
        "Question late?": [["A", "B", "C"], ["A", "A", "A"]],
        "Question never?": DISAGREE,
    }
    samples = [mc_sample("agree"), mc_sample("late"), mc_sample("never")]
    engine = ScriptedEngine(planned(plan))
    states = run_debate(samples, engine, DebateConfig(with_summaries=True))
    assert [len(b) for b in engine.batches] == [9, 2, 6, 1, 3]  # debate, summary, debate, summary, debate
    assert [len(s.rounds) for s in states] == [1, 2, 3]
    assert [s.stopped_early for s in states] == [True, True, False]
    # A stopped sample needs no summary for its last round.
    assert states[0].rounds[0].summary is None and states[1].rounds[1].summary is None


def test_forced_full_rounds_when_early_stopping_is_off():
    engine = ScriptedEngine(planned({"Question agree?": [["B", "B", "B"]]}))
    states = run_debate([mc_sample("agree")], engine, DebateConfig(stop_at_unanimity=False))
    assert engine.calls == 3 and len(states[0].rounds) == 3 and not states[0].stopped_early


def test_all_none_answers_do_not_stop_the_debate():
    engine = ScriptedEngine(planned({"Question q?": [[None, None, None]]}))
    states = run_debate([mc_sample("q")], engine, DebateConfig())
    assert engine.calls == 3
    assert [r.consensus_ratio for r in states[0].rounds] == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------------------------
# Prompts and conversations
# ----------------------------------------------------------------------------------------------
def test_each_agent_keeps_its_conversation_and_reads_the_others_previous_responses():
    plan = {"Question q?": [["A", "B", "C"], ["D", "A", "B"], ["A", "A", "B"]]}
    engine = ScriptedEngine(planned(plan))
    run_debate([mc_sample("q")], engine, DebateConfig())
    round0, round1, round2 = engine.batches
    for agent, request in enumerate(round0):
        assert request.messages[0] == {"role": "system", "content": prompts.system_prompt("truthfulqa", agent)}
        assert prompt_parsing.parse_prompt(last_user(request)).kind == "task"
        assert len(request.messages) == 2
    agent1 = round2[1]
    roles = [m["role"] for m in agent1.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert agent1.messages[2]["content"] == mc_answer("B")  # its own round-0 response
    assert agent1.messages[4]["content"] == mc_answer("A")  # its own round-1 response
    assert agent1.messages[3]["content"] == round1[1].messages[-1]["content"]
    parsed = prompt_parsing.parse_prompt(last_user(agent1))
    assert parsed.kind == "debate"
    # Agent 1 at round 2 sees agents 0 and 2 at round 1, in agent order, without annotations.
    assert [p.text for p in parsed.peers] == [mc_answer("D"), mc_answer("B")]
    assert all(p.confidence is None for p in parsed.peers)


def test_turn_records_and_answers():
    plan = {"Question q?": [["A", None, "C"]]}
    engine = ScriptedEngine(planned(plan))
    states = run_debate([mc_sample("q", gold="C")], engine, DebateConfig(n_rounds=1))
    turns = states[0].rounds[0].turns
    assert [t.answer for t in turns] == ["A", None, "C"]
    assert [t.correct for t in turns] == [None, None, None]  # gold is not read during the loop
    score_turns(states)
    assert [t.correct for t in turns] == [False, False, True]
    assert turns[0].prompt_id == prompt_id(engine.batches[0][0].messages)
    assert len({t.prompt_id for t in turns}) == 3


def test_gold_never_steers_the_loop():
    """Two samples with the same question and different gold answers debate identically."""
    text = "Same question?"
    a, b = mc_sample("a", gold="A", question=text), mc_sample("b", gold="C", question=text)
    # Choices differ by id in the helper; use identical choices to make the prompts equal.
    b = type(b)(id="b", benchmark=b.benchmark, question=a.question, gold="C", choices=a.choices)
    plan = {text: [["A", "B", "C"], ["A", "A", "C"], ["C", "C", "C"]]}
    engine = ScriptedEngine(planned(plan))
    states = run_debate([a, b], engine, DebateConfig(with_summaries=True))
    rounds_a = [[t.response for t in r.turns] for r in states[0].rounds]
    rounds_b = [[t.response for t in r.turns] for r in states[1].rounds]
    assert rounds_a == rounds_b
    assert [r.consensus_ratio for r in states[0].rounds] == [r.consensus_ratio for r in states[1].rounds]
    batch = engine.batches[0]
    assert batch[0].messages == batch[3].messages


def test_math_debate_extracts_boxed_answers():
    def respond(question, persona, t, request):
        return math_answer(["\\frac{1}{2}", "0.5", "1/2"][persona])

    engine = ScriptedEngine(respond, benchmark="math500")
    states = run_debate([math_sample("m", gold="\\frac12")], engine, DebateConfig())
    assert engine.calls == 1  # 1/2, 0.5 and \frac{1}{2} agree: unanimous at round 0
    assert states[0].rounds[0].unanimous and states[0].stopped_early
    score_turns(states)
    assert all(t.correct for t in states[0].rounds[0].turns)


def test_request_parameters_and_sample_indices():
    engine = ScriptedEngine(planned({"Question q?": DISAGREE}))
    config = DebateConfig(n_agents=3, n_rounds=1, temperature=0.7, top_p=0.9, max_tokens=64, seed=11,
                          personas=(0, 0, 0), sample_indices=(0, 1, 2))
    run_debate([mc_sample("q")], engine, config)
    batch = engine.batches[0]
    assert [r.sample_index for r in batch] == [0, 1, 2]
    assert {(r.params.temperature, r.params.top_p, r.params.max_tokens, r.params.seed) for r in batch} == {
        (0.7, 0.9, 64, 11)
    }
    assert batch[0].messages == batch[1].messages == batch[2].messages


# ----------------------------------------------------------------------------------------------
# Hooks
# ----------------------------------------------------------------------------------------------
class RecordingHook:
    """Adds one experience and confidence annotations from round 1 on; records what it saw."""

    def __init__(self):
        self.seen: list[tuple[int, list[tuple]]] = []
        self.finished: list[int] = []

    def prepare_round(self, round_index, states):
        self.seen.append(
            (
                round_index,
                [
                    (s.sample.id, s.previous_responses, s.previous_answers, s.previous_summary,
                     s.previous_consensus_ratio)
                    for s in states
                ],
            )
        )
        if round_index == 0:
            return [None for _ in states]
        view = prompts.ExperienceView(
            question="Old question?", response="old reasoning ((B))", answer="B", correct=False, outcome_correct=True
        )
        out = []
        for s in states:
            contexts = []
            for agent in range(s.n_agents):
                confidence = {j: ("high" if j == 0 else "low") for j in range(s.n_agents) if j != agent}
                contexts.append(
                    AgentRoundContext(
                        experiences=(view,),
                        peer_confidence=confidence,
                        record={"case_ids": [f"{s.sample.id}-{round_index}-{agent}"], "scores": [0.5]},
                    )
                )
            out.append(contexts)
        return out

    def finish_round(self, round_index, states):
        self.finished.append(round_index)


def test_hook_sees_the_debate_state_and_shapes_the_prompts():
    plan = {"Question q?": [["A", "B", "C"], ["A", "B", "B"], ["B", "B", "B"]]}
    engine = ScriptedEngine(planned(plan))
    hook = RecordingHook()
    states = run_debate([mc_sample("q")], engine, DebateConfig(with_summaries=True), hook=hook)
    assert [t for t, _ in hook.seen] == [0, 1, 2]
    assert hook.finished == [0, 1, 2]
    _, [state0] = hook.seen[0]
    assert state0 == ("q", None, None, None, None)
    _, [(sid1, resp1, ans1, summ1, cons1)] = hook.seen[1]
    assert resp1 == [mc_answer("A"), mc_answer("B"), mc_answer("C")]
    assert ans1 == ["A", "B", "C"]
    assert summ1 == engine.summary_text
    assert cons1 == pytest.approx(1 / 3)
    _, [(_, _, ans2, _, cons2)] = hook.seen[2]
    assert ans2 == ["A", "B", "B"] and cons2 == pytest.approx(2 / 3)

    # Round 1, agent 2: one experience, peers 0 (high) and 1 (low).
    parsed = prompt_parsing.parse_prompt(last_user(engine.batches[2][2]))
    assert len(parsed.experiences) == 1 and parsed.experiences[0].answer == "B"
    assert [p.confidence for p in parsed.peers] == ["high", "low"]
    # Round 0 prompts are unchanged (the hook returned None).
    assert prompt_parsing.parse_prompt(last_user(engine.batches[0][0])).experiences == []
    turns = states[0].rounds[1].turns
    assert turns[2].retrieved == {"case_ids": ["q-1-2"], "scores": [0.5]}
    assert turns[2].peer_confidence == {0: "high", 1: "low"}
    assert turns[2].n_experiences == 1
    assert states[0].rounds[0].turns[0].retrieved == {}


def test_hook_returning_the_wrong_shape_is_an_error():
    class BadHook:
        def prepare_round(self, round_index, states):
            return [[None] for _ in states]  # one context, three agents

    engine = ScriptedEngine(planned({"Question q?": DISAGREE}))
    with pytest.raises(RuntimeError, match="1 agent contexts .* expected 3"):
        run_debate([mc_sample("q")], engine, DebateConfig(), hook=BadHook())


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_agents": 0}, "n_agents: expected an integer >= 1, found 0"),
        ({"n_rounds": 0}, "n_rounds: expected an integer >= 1, found 0"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": -1}, "temperature"),
        ({"n_agents": 2, "personas": (0,)}, "personas: expected 2 entries"),
        ({"n_agents": True}, "n_agents: expected an integer"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DebateConfig(**kwargs)


def test_persona_beyond_the_benchmark_is_rejected_before_any_call():
    engine = ScriptedEngine(planned({}))
    config = DebateConfig(n_agents=4)
    with pytest.raises(ValueError, match="truthfulqa has 3 personas"):
        run_debate([mc_sample("q")], engine, config)
    assert engine.calls == 0


def test_duplicate_sample_ids_are_rejected():
    engine = ScriptedEngine(planned({}))
    with pytest.raises(ValueError, match="appears twice"):
        run_debate([mc_sample("q"), mc_sample("q")], engine, DebateConfig())
    assert engine.calls == 0


# ----------------------------------------------------------------------------------------------
# With the simulated latent-concept engine
# ----------------------------------------------------------------------------------------------
class CountingEngine:
    """Wraps an engine and counts generate calls and their tags."""

    def __init__(self, inner):
        self.inner = inner
        self.identity, self.model, self.ledger = inner.identity, inner.model, inner.ledger
        self.tags: list[str] = []

    def generate(self, requests):
        self.tags.append(",".join(sorted({r.tag for r in requests})))
        return self.inner.generate(requests)

    def close(self):
        self.inner.close()


def test_simulated_engine_debate_is_round_synchronous_and_deterministic():
    from r2mad_core.theory.agents import SimulatedEngine

    samples = [mc_sample(f"s{i}", gold="ABCD"[i % 4]) for i in range(12)] + [math_sample("m0", "7")]
    by_benchmark = {"truthfulqa": samples[:12], "math500": samples[12:]}
    for benchmark, group in by_benchmark.items():
        runs = []
        for _ in range(2):
            engine = CountingEngine(SimulatedEngine(group))
            states = run_debate(group, engine, DebateConfig(with_summaries=True), benchmark=benchmark)
            rounds_run = max(len(s.rounds) for s in states)
            assert engine.tags == ["debate", "summary"] * (rounds_run - 1) + ["debate"]
            for s in states:
                # A debate stops early exactly when its last round was unanimous.
                assert s.stopped_early == (len(s.rounds) < 3)
                assert s.stopped_early == (s.rounds[-1].unanimous and len(s.rounds) < 3)
                assert all(not r.unanimous for r in s.rounds[:-1])
                assert all(r.summary for r in s.rounds[:-1])
            runs.append([[t.response for r in s.rounds for t in r.turns] for s in states])
        assert runs[0] == runs[1]
