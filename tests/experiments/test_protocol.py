"""Protocol presets (issue 22 section 1): one declaration, the doc table derived from it, and what a preset does to
an R2-MAD run (exactly one case per agent and round at K = 1, a summary after every executed round, the authors'
summary slot, empty peers dropped, unclosed thinking kept), each individual choice beating the preset."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from debate_fakes import ScriptedEngine, mc_answer, mc_sample, question_key

from r2mad_core.debate import prompt_parsing, prompts
from r2mad_core.debate.loop import DebateConfig, run_debate
from r2mad_core.debate.scheduling import run_scheduled
from r2mad_core.engine import Completion
from r2mad_core.memory.embeddings import HashingEmbedder
from r2mad_core.methods import RunContext, get_method
from r2mad_lab.engines.thinking import apply_thinking
from r2mad_lab.experiments import protocol
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.profile_schema import PROTOCOL_FIELDS
from r2mad_lab.experiments.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_the_doc_table_is_the_declaration() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert protocol.render_into(text) == text, (
        "docs/protocol.md is stale: python -m r2mad_lab.experiments.protocol docs/protocol.md")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [c.name for c in protocol.CHOICES]
    for choice, row in zip(protocol.CHOICES, rows, strict=False):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert (cells[2], cells[3]) == (f"`{choice.paper}`", f"`{choice.authors}`")


def test_every_preset_value_is_in_its_vocabulary_and_k_is_one_under_both() -> None:
    for choice in protocol.CHOICES:
        vocabulary = PROTOCOL_FIELDS.get(choice.name) or choice.values
        if vocabulary is not None:
            assert choice.paper in vocabulary and choice.authors in vocabulary, choice.name
            assert tuple(vocabulary) == tuple(choice.values), choice.name  # one vocabulary, not two to drift
        assert choice.basis in ("paper", "authors", "ours") and choice.evidence and choice.code
    assert protocol.preset("paper")["top_k"] == protocol.preset("authors")["top_k"] == 1
    differ = {c.name for c in protocol.CHOICES if c.paper != c.authors}
    assert differ == {"unclosed_thinking", "reward_definition", "state_layout", "similarity_match", "icl_match",
                      "vote_rule", "confidence_label", "confidence_pool", "peer_response_round", "task_prompt",
                      "split_rule", "consensus_rule"}


def test_an_individual_choice_beats_the_preset() -> None:
    assert protocol.resolve("authors", {"top_k": 3, "round0": None})["top_k"] == 3
    assert protocol.resolve("authors", {"round0": None})["round0"] == "independent"
    profile = load_profile("tiny", {"protocol": "authors", "summaries": "before_next_round"})
    assert profile.spec.choices["summaries"] == "before_next_round"
    assert profile.spec.choices["vote_rule"] == "authors_majority_correct"
    assert protocol.method_options("r2mad", "authors", {"top_k": 2})["top_k"] == 2
    assert "top_k" not in protocol.method_options("mad", "paper")  # only the choices a method declares
    with pytest.raises(ValueError, match="protocol: expected one of"):
        protocol.preset("ours")


# Agents 0 and 2 answer A, agent 1 answers B (never unanimous: 3 rounds); on "Which fact about agreement holds?"
# every agent answers A at round 0, so that debate stops there.
def _respond(question: str, persona: int | None, t: int, request) -> str:
    if question_key(question).endswith("agreement holds?"):
        return mc_answer("A")
    return mc_answer("B" if persona == 1 else "A")


TRAIN = [mc_sample(f"train{k}", question=f"Which fact about topic {k} holds?") for k in range(4)]
TEST = [mc_sample("split", question="Which fact about a split holds?"),
        mc_sample("agree", question="Which fact about agreement holds?")]


@pytest.fixture
def bank_dir(tmp_path: Path) -> Path:
    build_memory("truthfulqa", ScriptedEngine(_respond), HashingEmbedder(256), tmp_path / "bank", samples=TRAIN,
                 progress=False)
    return tmp_path / "bank"


@pytest.mark.parametrize("schedule", ["rounds", "questions"])
@pytest.mark.parametrize("preset", protocol.PROTOCOLS)
def test_an_r2mad_run_retrieves_one_case_per_agent_and_round_and_summarises_every_executed_round(
    preset: str, schedule: str, bank_dir: Path
) -> None:
    engine = ScriptedEngine(_respond)
    method = get_method("r2mad", memory=str(bank_dir), max_tokens=64, **protocol.method_options("r2mad", preset))
    hook = method.make_hook(RunContext(benchmark="truthfulqa", split="test", engine=engine))
    states = run_scheduled(TEST, engine, method.debate, schedule=schedule, hook=hook)
    executed = {state.sample.id: len(state.rounds) for state in states}
    assert executed == {"split": 3, "agree": 1}  # the unanimous debate stops after round 0
    tags = Counter(request.tag for batch in engine.batches for request in batch)
    assert tags == {"debate": 3 * (3 + 1), "summary": 3 + 1}  # h^(t) after every executed round, round 0 of "agree" too
    for state in states:
        assert all(rd.summary for rd in state.rounds)
        for rd in state.rounds:
            for turn in rd.turns:
                assert turn.n_experiences == (0 if rd.index == 0 else 1)
                assert len(turn.retrieved.get("case_ids", [])) == (0 if rd.index == 0 else 1)


def test_the_summary_slot_of_the_authors_code_exact_text() -> None:
    engine = ScriptedEngine(_respond)
    config = DebateConfig(n_agents=3, n_rounds=2, max_tokens=64, with_summaries=True, summaries="every_round",
                          summary_agents="authors")
    run_debate(TEST[:1], engine, config)
    summaries = [request.messages[0]["content"] for batch in engine.batches for request in batch
                 if request.tag == "summary"]
    assert len(summaries) == 2
    a, b = mc_answer("A"), mc_answer("B")
    round0 = ('<agent index="0">\n<response>\n' + a + '\n</response>\n<answer>\nA\n</answer>\n</agent>\n'
              '<agent index="1">\n<response>\n' + b + '\n</response>\n<answer>\nB\n</answer>\n</agent>\n'
              '<agent index="2">\n<response>\n' + a + '\n</response>\n<answer>\nA\n</answer>\n</agent>')
    assert "<agent_responses>\n" + round0 + "\n</agent_responses>" in summaries[0]
    assert "<previous_summary>\nNone\n</previous_summary>" in summaries[0]
    block1 = ('<agent index="1">\n<response>\n' + b + '\n</response>\n<answer>\nB\n</answer>\n'
              '<previous_answer>\nB\n</previous_answer>\n<stance_changed>\nfalse\n</stance_changed>\n</agent>')
    assert block1 in summaries[1]
    assert summaries[1] == prompts.summary_prompt(
        TEST[0].question, engine.summary_text, [a, b, a], 2 / 3, answers=["A", "B", "A"],
        previous_answers=["A", "B", "A"], slot="authors")
    assert prompt_parsing.parse_prompt(summaries[1]).agent_responses == [a, b, a]
    # ours: the raw responses only, and only before a next round
    engine = ScriptedEngine(_respond)
    run_debate(TEST[:1], engine, DebateConfig(n_agents=3, n_rounds=2, max_tokens=64, with_summaries=True))
    ours = [request.messages[0]["content"] for batch in engine.batches for request in batch if request.tag == "summary"]
    assert len(ours) == 1 and f'<agent_response index="1">\n{b}\n</agent_response>' in ours[0]
    assert prompts.summary_prompt("Q", None, ["x"], 1.0, answers=[None], slot="authors").count("<answer>\nNone\n") == 1


def test_empty_peer_responses_are_dropped_and_unclosed_thinking_is_kept_as_the_authors_do() -> None:
    def respond(question: str, persona: int | None, t: int, request):
        if persona == 1 and t == 0:
            return apply_thinking(Completion(text="<think>\nthe option is ((B)) maybe", finish_reason="length"))
        return mc_answer("B" if persona == 1 else "A")

    for empty, thinking, peers_of_agent0, first_response in [
        ("drop", "drop", 1, ""), ("show", "drop", 2, ""),
        ("drop", "keep", 2, "<think>\nthe option is ((B)) maybe"),
    ]:
        engine = ScriptedEngine(respond)
        config = DebateConfig(n_agents=3, n_rounds=2, max_tokens=64, empty_peers=empty, unclosed_thinking=thinking)
        state = run_debate(TEST[:1], engine, config)[0]
        assert state.rounds[0].turns[1].response == first_response
        assert state.rounds[0].turns[1].answer == ("B" if thinking == "keep" else None)
        round1 = [r for r in engine.batches[1] if r.tag == "debate"]
        parsed = prompt_parsing.parse_prompt(round1[0].messages[-1]["content"])
        assert parsed.kind == "debate" and len(parsed.peers) == peers_of_agent0, (empty, thinking)
        assert state.rounds[1].turns[0].visible_peers == ((1, 2) if peers_of_agent0 == 2 else (2,))


def test_r2mad_run_protocol_sets_the_method_options_and_a_flag_beats_it(bank_dir: Path, tmp_path: Path) -> None:
    from r2mad_lab.cli import commands as cli

    parser = cli.build_parser()
    base = ["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--out", str(tmp_path / "run"),
            "--memory", str(bank_dir)]
    method = cli.build_method(parser.parse_args(base + ["--protocol", "authors"]))
    assert (method.options["top_k"], method.options["confidence_pool"], method.debate.summaries,
            method.debate.task_prompt) == (1, "candidates", "every_round", "authors")
    method = cli.build_method(parser.parse_args(base + ["--protocol", "paper", "-K", "3",
                                                        "--method-option", "summaries=before_next_round"]))
    assert (method.options["top_k"], method.debate.summaries, method.options["similarity_match"]) == (
        3, "before_next_round", "question")
    # no --protocol: the declaration, one default
    assert cli.build_method(parser.parse_args(base)).options["top_k"] == 1
    assert cli.split_rule_of(parser.parse_args(base + ["--protocol", "authors"])) == "authors"
    assert cli.split_rule_of(parser.parse_args(base + ["--protocol", "authors", "--split-rule", "paper"])) == "paper"


def test_the_similarity_policy_compares_questions_under_paper_and_debate_states_under_authors(bank_dir: Path) -> None:
    probe = dataclasses.replace(TRAIN[2], id="probe")  # the text of train2 (options included), not its id
    def respond(question: str, persona: int | None, t: int, request) -> str:  # words the bank's debates never used
        return mc_answer("B" if persona == 1 else "A", reasoning="Zebras cross wide oceans on quiet evenings.")

    for preset, match in (("paper", "question"), ("authors", "state")):
        engine = ScriptedEngine(respond, summary_text="Dynamic: zebras. Insight: oceans.")
        options = {**protocol.method_options("r2mad", preset), "retrieval_policy": "similarity", "top_k": 2}
        method = get_method("r2mad", memory=str(bank_dir), max_tokens=64, **options)
        assert method.options["similarity_match"] == match
        hook = method.make_hook(RunContext(benchmark="truthfulqa", split="test", engine=engine))
        state = run_debate([probe], engine, method.debate, hook=hook)[0]
        retrieved = state.rounds[1].turns[0].retrieved
        assert retrieved["policy"] == "similarity" and retrieved["similarity_match"] == match
        if match == "question":  # both picks are train2's cases (its rounds 1 and 2): the same question, cosine 1
            assert all(case.startswith("train2") for case in retrieved["case_ids"]), retrieved["case_ids"]
            assert retrieved["similarities"] == pytest.approx([1.0, 1.0], abs=1e-5)
        else:  # the state (question, response, summary) differs from every stored state: below 1
            assert max(retrieved["similarities"]) < 0.999


def test_a_later_choice_at_its_default_keeps_the_run_keys() -> None:
    """consensus_rule came after the runs were keyed: at the paper's value it is neither in a method's recorded
    options (config.json, the bank manifest, the sampling stream) nor in the memory-construction options (the bank
    directory's key), so a paper run keeps its folder, draws and bank digest; the authors' value is recorded."""
    from r2mad_core.methods import get_method

    assert "consensus_rule" not in protocol.memory_options("paper")["debate_options"]
    assert protocol.memory_options("authors")["debate_options"]["consensus_rule"] == "authors_reads_gold"
    paper, explicit = get_method("mad"), get_method("mad", consensus_rule="equivalent_answers")
    assert "consensus_rule" not in paper.options and paper.to_dict() == explicit.to_dict()
    assert paper.debate.sampling_seed == explicit.debate.sampling_seed
    authors = get_method("mad", consensus_rule="authors_reads_gold", round0="independent")
    assert authors.options["consensus_rule"] == "authors_reads_gold"
    # a protocol choice is a setting every row shares, not another row: it never names the random stream (common
    # random numbers, methods.stream_identity); the requests it changes say so in their own bytes
    assert authors.debate.sampling_seed == get_method("mad", round0="independent").debate.sampling_seed
