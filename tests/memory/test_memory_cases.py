"""Memory cases (Eq. 4) and debate states (Eq. 2) of r2mad_core.memory.cases: cases and rewards from a debate,
state text and encoding, case rows, transcripts as debate records."""

import dataclasses

import numpy as np
import pytest
from hand_transcripts import transcript

from r2mad_core.memory.cases import (
    AgentDebateState,
    DebateRecord,
    DebateRound,
    MemoryCase,
    cases_from_debate,
    debate_record_from_transcript,
    encode_states,
    format_state_text,
)
from r2mad_core.memory.embeddings import HashingEmbedder


def _debate(sample_id: str, question: str, final_correct: bool = True) -> DebateRecord:
    # 3 agents, 3 rounds; gold "B". Agent 2 is wrong in round 0 and 1, right in round 2; agent 1 is
    # wrong in the last round.
    rounds = (
        DebateRound((f"{question} r0 a0 says B", f"{question} r0 a1 says B", f"{question} r0 a2 says C"),
                    ("B", "B", "C"), (True, True, False), f"summary 0 of {sample_id}", 2 / 3),
        DebateRound((f"{question} r1 a0 says B", f"{question} r1 a1 says B", f"{question} r1 a2 says C"),
                    ("B", "B", "C"), (True, True, False), f"summary 1 of {sample_id}", 2 / 3),
        DebateRound((f"{question} r2 a0 says B", f"{question} r2 a1 says A", f"{question} r2 a2 says B"),
                    ("B", "A", "B"), (True, False, True), f"summary 2 of {sample_id}", 2 / 3),
    )
    return DebateRecord(sample_id, question, "B", rounds, "B" if final_correct else "A", final_correct)


DEBATES = [
    _debate("q1", "Which planet is largest"),
    _debate("q2", "What is the boiling point of water", final_correct=False),
    _debate("q3", "Who wrote Hamlet"),
]


def test_cases_from_debate_states_and_rewards():
    per_agent = cases_from_debate(DEBATES[0])
    assert [len(c) for c in per_agent] == [2, 2, 2]  # rounds 1 and 2; round 0 excluded
    case = per_agent[2][0]  # agent 2, round 1
    assert case.round_index == 1 and case.case_id == "q1#t1#a2"
    # s_2^(1) = <x, z_2^(0), h^(0), Cons(Z^(0))>
    assert case.state == AgentDebateState("Which planet is largest", "Which planet is largest r0 a2 says C",
                                     "summary 0 of q1", 2 / 3)
    assert case.responses == DEBATES[0].rounds[1].responses  # Z^(1)
    assert case.correct == (True, True, False) and case.is_correct is False
    assert case.previous_responses == DEBATES[0].rounds[0].responses
    assert case.reward == 1  # final vote correct
    # reward definitions, agent 2 round 1: final_vote 1; agent_final (round 2 correct) 1; round_correctness 0
    assert cases_from_debate(DEBATES[0], "agent_final")[2][0].reward == 1
    assert cases_from_debate(DEBATES[0], "round_correctness")[2][0].reward == 0
    # agent 1: last round wrong
    assert [c.reward for c in cases_from_debate(DEBATES[0], "agent_final")[1]] == [0, 0]
    assert [c.reward for c in cases_from_debate(DEBATES[0], "round_correctness")[1]] == [1, 0]
    assert [c.reward for c in cases_from_debate(DEBATES[1])[0]] == [0, 0]
    with pytest.raises(ValueError, match="reward definition"):
        cases_from_debate(DEBATES[0], "gold")


def test_state_text_layouts():
    state = AgentDebateState("Q?", "my answer", "they agree", 2 / 3)
    assert format_state_text(state) == (
        "Question:\nQ?\n\nConsensus ratio of the previous round: 0.67\n\n"
        "Previous round summary:\nthey agree\n\nPrevious response:\nmy answer"
    )
    assert format_state_text(state, "authors") == "Q?\nmy answer\nthey agree"
    assert format_state_text(AgentDebateState("Q?", "r", "", 1.0), "authors") == "Q?\nr"
    with pytest.raises(ValueError, match="layout"):
        format_state_text(state, "json")


def test_component_state_encoding():
    embedder = HashingEmbedder(64)
    state = AgentDebateState("alpha beta", "gamma delta", "", 1.0)
    vec = encode_states(embedder, [state], encoding="components")[0]
    parts = embedder.encode(["alpha beta", "gamma delta"])
    expected = parts.sum(0) / np.linalg.norm(parts.sum(0))
    np.testing.assert_allclose(vec, expected, atol=1e-6)


def test_inconsistent_debates_are_rejected():
    bad = DebateRecord("q9", "x", "A", (DebateRound(("a", "b"), ("A",), (True, False), "", 1.0),), "A", True)
    with pytest.raises(ValueError, match="q9.*round 0"):
        cases_from_debate(bad)


def test_case_json_round_trip_and_errors_name_the_row():
    case = cases_from_debate(DEBATES[0])[1][1]
    assert MemoryCase.from_json(case.to_json()) == case
    row = case.to_json()
    del row["gold"]
    with pytest.raises(ValueError, match=r"^cases\.jsonl:7: not a memory case \(.*'gold'\)$"):
        MemoryCase.from_json(row, "cases.jsonl:7")
    row = dict(case.to_json(), agent_index=3)
    with pytest.raises(ValueError, match=r"^row 2: .*agent_index in range, found 3/3/3 and 3$"):
        MemoryCase.from_json(row, "row 2")
    old_row = {k: v for k, v in case.to_json().items() if k not in ("previous_responses", "num_options")}
    assert MemoryCase.from_json(old_row) == dataclasses.replace(case, previous_responses=(), num_options=None)


def test_debate_record_from_a_scored_transcript():
    row = transcript("q5", gold="B", final_answer="B", correct=True, num_options=4, rounds=[
        {"agents": [{"response": "r0 a0", "answer": "B", "correct": True},
                    {"response": "r0 a1", "answer": None, "correct": False}],
         "summary": None, "consensus_ratio": 0.5},
        {"agents": [{"response": "r1 a0", "answer": "B", "correct": True},
                    {"response": "r1 a1", "answer": "B", "correct": True}],
         "summary": "both B", "consensus_ratio": 1.0},
    ])
    record = debate_record_from_transcript(row, "Which letter?")
    assert record == DebateRecord(
        "q5", "Which letter?", "B",
        (DebateRound(("r0 a0", "r0 a1"), ("B", None), (True, False), "", 0.5),
         DebateRound(("r1 a0", "r1 a1"), ("B", "B"), (True, True), "both B", 1.0)),
        "B", True, 4,
    )
    row["rounds"][1]["agents"][1]["correct"] = None
    with pytest.raises(ValueError, match=r"sample 'q5'.*round 1: per-agent correctness missing"):
        debate_record_from_transcript(row, "Which letter?")
