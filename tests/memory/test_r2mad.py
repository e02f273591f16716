"""R2-MAD in the debate loop: memory construction, the round hook's prompts and records, ablations,
ICL-CoT, audits and the command line (scripted and simulated engines, hashing embedder)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from debate_fakes import ScriptedEngine, last_user, mc_answer, mc_sample, round_of

from r2mad_core.data.benchmarks import BENCHMARKS, load
from r2mad_core.debate import prompt_parsing, prompts
from r2mad_core.memory.audit import audit_bank_set
from r2mad_core.memory.banks import MemoryBankError, MemoryBankSet, poison_bank
from r2mad_core.memory.embeddings import HashingEmbedder
from r2mad_core.methods import get_method
from r2mad_lab.cli import commands as cli
from r2mad_lab.engines import make_engine
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE, run_cell

# Persona 0 answers A (correct: gold is A), persona 1 answers B (wrong), persona 2 answers A, in every round.
LETTER = {0: "A", 1: "B", 2: "A"}


def scripted() -> ScriptedEngine:
    return ScriptedEngine(lambda question, persona, t, request: mc_answer(LETTER[persona]))


TRAIN = [mc_sample(f"train{k}", question=f"Which fact about topic {k} holds?") for k in range(4)]
TEST = [mc_sample(f"test{k}", question=f"Which fact about subject {k} holds?") for k in range(2)]


@pytest.fixture
def bank_dir(tmp_path):
    engine = scripted()
    build_memory("truthfulqa", engine, HashingEmbedder(256), tmp_path / "bank", samples=TRAIN, progress=False)
    return tmp_path / "bank"


def test_build_memory_scripted(bank_dir):
    bank_set = MemoryBankSet.load(bank_dir, embedder="hashing-256", benchmark="truthfulqa")
    assert [len(b) for b in bank_set.banks] == [8, 8, 8]  # 4 questions x rounds 1, 2 (round 0 excluded)
    bank = bank_set[1]
    assert bank.rewards.tolist() == [1.0] * 8  # vote A (2 of 3) is correct
    assert bank.correct[:, 1].tolist() == [0.0] * 8  # agent 1 always wrong
    case = bank.cases[0]
    assert case.state.consensus_ratio == pytest.approx(2 / 3)
    assert case.state.previous_summary.startswith("Dynamic:")  # h^(0) from the summary call
    assert case.answers == ("A", "B", "A")
    manifest = json.loads((bank_dir / "manifest.json").read_text())
    assert manifest["split"] == "train" and manifest["metadata"]["n_debates"] == 4
    assert manifest["metadata"]["method"]["debate"]["stop_at_unanimity"] is False
    assert manifest["metadata"]["method"]["debate"]["with_summaries"] is True


def test_build_memory_resumes_the_debates(tmp_path):
    engine = scripted()
    build_memory("truthfulqa", engine, HashingEmbedder(64), tmp_path / "bank", samples=TRAIN, progress=False)
    calls = engine.calls
    assert calls == 5  # rounds 0, 1, 2 + summaries after rounds 0 and 1, all questions in one batch each
    with pytest.raises(FileExistsError):
        build_memory("truthfulqa", engine, HashingEmbedder(64), tmp_path / "bank", samples=TRAIN, progress=False)
    build_memory("truthfulqa", engine, HashingEmbedder(64), tmp_path / "bank", samples=TRAIN, progress=False,
                 overwrite=True)
    assert engine.calls == calls  # the finished debates were reused


def _round1_prompts(engine: ScriptedEngine, agent_persona: int) -> list[str]:
    out = []
    for batch in engine.batches:
        for request in batch:
            if (request.tag == "debate" and round_of(request) == 1
                and request.messages[0]["content"] == prompts.system_prompt("truthfulqa", agent_persona)):
                out.append(last_user(request))
    return out


def test_r2mad_hook_prompts_and_records(bank_dir, tmp_path):
    engine = scripted()
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
                      method_options={"memory": str(bank_dir), "top_k": 3}, samples=TEST, progress=False)
    record = result.records[0]
    assert record.n_rounds_executed == 3  # B dissents: no unanimity
    round0, round1 = record.rounds[0], record.rounds[1]
    assert all(a.n_experiences == 0 and a.retrieved == {} for a in round0.agents)
    agent0 = round1.agents[0]
    retrieved = agent0.retrieved
    assert agent0.n_experiences == 3 and len(retrieved["case_ids"]) == 3
    assert all(cid.endswith("#a0") for cid in retrieved["case_ids"])
    assert retrieved["lambda"] == pytest.approx(1 - 0.9 * 2 / 3, abs=1e-6)  # Cons(Z^(0)) = 2/3
    # Eq. 7: agent 1's current response is identical to its stored (always wrong) responses -> c = 0;
    # agent 2's to its stored (always right) ones -> c = 1.
    assert retrieved["confidence"] == {"1": 0.0, "2": 1.0}
    assert agent0.peer_confidence == {1: "low", 2: "high"}
    assert retrieved["policy"] == "state_aware" and len(retrieved["scores"]) == 3
    # what agent 0 was shown at round 1
    text = _round1_prompts(engine, 0)[0]
    parsed = prompt_parsing.parse_prompt(text)
    assert [p.confidence for p in parsed.peers] == ["low", "high"]
    assert len(parsed.experiences) == 3
    assert all(e.answer == "A" and e.correct and e.outcome_correct for e in parsed.experiences)


def test_r2mad_ablations(bank_dir, tmp_path):
    engine = scripted()
    no_memory = run_cell(tmp_path / "nomem", benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
                         method_options={"memory": str(bank_dir), "top_k": 3, "use_memory": False}, samples=TEST,
                         progress=False)
    agent0 = no_memory.records[0].rounds[1].agents[0]
    assert agent0.n_experiences == 0 and len(agent0.retrieved["case_ids"]) == 3
    assert agent0.peer_confidence == {1: "low", 2: "high"}  # confidence still estimated and shown
    assert "<experiences>" not in _round1_prompts(engine, 0)[0]

    engine = scripted()
    no_conf = run_cell(tmp_path / "noconf", benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
                       method_options={"memory": str(bank_dir), "top_k": 3, "use_confidence": False}, samples=TEST,
                       progress=False)
    agent0 = no_conf.records[0].rounds[1].agents[0]
    assert agent0.n_experiences == 3 and agent0.peer_confidence == {}
    assert agent0.retrieved["confidence"] == {"1": 0.0, "2": 1.0}  # recorded, not shown
    assert "<confidence>" not in _round1_prompts(engine, 0)[0]


def test_r2mad_refuses_training_questions_and_other_benchmarks(bank_dir, tmp_path):
    with pytest.raises(ValueError, match="must not be in memory"):
        run_cell(tmp_path / "leak", benchmark="truthfulqa", split="train", engine=scripted(), method="r2mad",
                 method_options={"memory": str(bank_dir)}, samples=TRAIN[:1], progress=False)
    from debate_fakes import math_sample

    with pytest.raises(MemoryBankError, match="'truthfulqa', expected 'math500'"):
        run_cell(tmp_path / "other", benchmark="math500", split="test", engine=scripted(), method="r2mad",
                 method_options={"memory": str(bank_dir)}, samples=[math_sample("m1", "2")], progress=False)
    with pytest.raises(ValueError, match="no manifest"):
        get_method("r2mad", memory=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="w_low"):
        get_method("r2mad", memory=str(bank_dir), w_high=0.4, w_low=0.6)


def test_icl_cot_shows_distinct_training_questions(bank_dir, tmp_path):
    engine = scripted()
    result = run_cell(tmp_path / "icl", benchmark="truthfulqa", split="test", engine=engine, method="icl_cot",
                      method_options={"memory": str(bank_dir), "top_k": 2}, samples=TEST, progress=False)
    turn = result.records[0].rounds[0].agents[0]
    assert turn.n_experiences == 2
    ids = turn.retrieved["case_ids"]
    assert len({cid.split("#")[0] for cid in ids}) == 2 and all(cid.endswith("#t2#a0") for cid in ids)
    parsed = prompt_parsing.parse_prompt(last_user(engine.batches[0][0]))
    assert parsed.kind == "task" and len(parsed.experiences) == 2


def test_audit_finds_poisoned_labels_stale_embeddings_and_duplicates(bank_dir):
    bank_set = MemoryBankSet.load(bank_dir)
    embedder = HashingEmbedder(256)
    clean = audit_bank_set(bank_set, embedder, sample_size=8)
    assert clean.cases_per_agent == [8, 8, 8] and clean.total_cases == 24
    assert clean.correctness_disagree == 0 and clean.reward_disagree == 0 and clean.answers_reextracted_differ == 0
    assert clean.stale_state_embeddings == 0 and clean.embeddings_checked == 24
    assert clean.positive_reward_share == [1.0, 1.0, 1.0] and clean.own_correct_share == [1.0, 0.0, 1.0]
    # scripted agents repeat themselves: each question's round-2 state (same previous response, summary
    # and consensus) repeats its round-1 state -> 4 duplicate states per agent
    assert clean.duplicate_states == [4, 4, 4] and clean.near_duplicate_states == [0, 0, 0]

    poisoned = audit_bank_set(poison_bank(bank_set, 0.25, seed=1), embedder, sample_size=8)
    assert poisoned.correctness_disagree == 6  # round(0.25 * 8) per agent
    assert poisoned.reward_disagree == 6
    assert poisoned.correctness_disagree_share == pytest.approx(0.25)

    # cases are ordered (train0 t1, train0 t2, train1 t1, ...)
    bank_set[2].state_embeddings[3] = bank_set[2].state_embeddings[4]  # train1 t2 gets train2 t1's vector
    bank_set[0].cases[2:4] = bank_set[0].cases[0:2]  # train1's cases replaced by train0's (vectors kept)
    stale = audit_bank_set(bank_set, embedder, sample_size=8)
    assert stale.stale_state_embeddings == 3  # agent 2 row 3, agent 0 rows 2 and 3
    assert stale.duplicate_states == [5, 4, 4]  # agent 0: four copies of train0's state text
    assert stale.near_duplicate_states == [0, 0, 1]  # agent 2 row 4 now equals row 3 in embedding only
    assert "stale state embedding" in stale.format()


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_r2mad_on_every_benchmark_simulated(benchmark, tmp_path):
    train = load(benchmark, "train")[:3]
    test = load(benchmark, "test")[:2]
    engine = make_engine("simulated", samples=train + test)
    bank_set = build_memory(benchmark, engine, "hashing", tmp_path / "bank", samples=train, progress=False)
    assert [len(b) for b in bank_set.banks] == [6, 6, 6]
    result = run_cell(tmp_path / "run", benchmark=benchmark, split="test", engine=engine, method="r2mad",
                      method_options={"memory": str(tmp_path / "bank")}, samples=test, progress=False)
    assert result.metrics["n"] == 2
    for record in result.records:
        for rd in record.rounds[1:]:
            previous = record.rounds[rd.round - 1].consensus_ratio
            for agent in rd.agents:
                assert agent.retrieved["lambda"] == pytest.approx(1 - 0.9 * previous, abs=1e-6)
                assert set(agent.retrieved["confidence"]) == {str(j) for j in range(3) if j != agent.agent}


@pytest.mark.parametrize(
    "options",
    [
        {"retrieval_policy": "random"},
        {"retrieval_policy": "similarity"},
        {"retrieval_policy": "positive_only"},
        {"retrieval_policy": "diversity_only"},
        {"retrieval_policy": "fixed_lambda", "fixed_lambda": 0.25},
        {"top_k": 1},
        {"confidence_label": "retrieving_agent_correctness", "confidence_pool": "candidates",
         "peer_response_round": "state"},
        {"poison_fraction": 0.5},
    ],
)
def test_r2mad_variants_run(options, tmp_path):
    train = load("truthfulqa", "train")[:4]
    test = load("truthfulqa", "test")[:2]
    engine = make_engine("simulated", samples=train + test)
    build_memory("truthfulqa", engine, "hashing", tmp_path / "bank", samples=train, progress=False)
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
                      method_options={"memory": str(tmp_path / "bank"), "top_k": 3, **options}, samples=test,
                      progress=False)
    rounds = [rd for r in result.records for rd in r.rounds[1:]]
    banks = MemoryBankSet.load(tmp_path / "bank", embedder="hashing-384", benchmark="truthfulqa")
    for rd in rounds:
        for index, agent in enumerate(rd.agents):
            retrieved = agent.retrieved
            assert retrieved["policy"] == options.get("retrieval_policy", "state_aware")
            expected = options.get("top_k", 3)
            if options.get("retrieval_policy") == "positive_only":  # only r = 1 cases are eligible
                expected = min(expected, int(banks[index].rewards.sum()))
                assert retrieved["rewards"] == [1] * expected
            assert len(retrieved["case_ids"]) == expected
            if options.get("retrieval_policy") == "fixed_lambda":
                assert retrieved["lambda"] == 0.25


def test_cli_build_memory_audit_and_run(tmp_path, capsys):
    bank, run = tmp_path / "bank", tmp_path / "run"
    common = ["--engine", "simulated", "--cache-dir", tmp_path / "cache", "--no-progress"]
    code = cli.main([str(a) for a in ["build-memory", "--benchmark", "truthfulqa", "--limit", "3", "--out", bank,
                                      "--embedder", "hashing", *common]])
    out = capsys.readouterr().out
    assert code == 0 and "[6, 6, 6] cases per agent" in out
    code = cli.main(["audit", str(bank)])
    out = capsys.readouterr().out
    assert code == 0 and "cases per agent: [6, 6, 6]" in out and "disagree with is_correct: 0" in out
    code = cli.main([str(a) for a in ["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--memory", bank,
                                      "--retrieval-policy", "random", "-K", "2", "--no-confidence", "--limit", "2",
                                      "--out", run, *common]])
    assert code == 0, capsys.readouterr().err
    config = json.loads((run / "config.json").read_text())
    assert config["method"]["options"]["retrieval_policy"] == "random"
    assert config["method"]["options"]["top_k"] == 2 and config["method"]["options"]["use_confidence"] is False
    lines = [json.loads(line) for line in (run / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert all(a["peer_confidence"] == {} for r in lines for rd in r["rounds"][1:] for a in rd["agents"])
    code = cli.main([str(a) for a in ["run", "--benchmark", "truthfulqa", "--method", "mad", "--memory", bank,
                                      "--limit", "2", "--out", tmp_path / "mad", *common]])
    assert code == 2 and "--memory" in capsys.readouterr().err
    code = cli.main(["build-memory", "--benchmark", "truthfulqa", "--limit", "3", "--out", str(bank), "--embedder",
                     "hashing", "--engine", "simulated", "--no-cache"])
    assert code == 2 and "--overwrite" in capsys.readouterr().err


def test_experiences_can_be_shortened(bank_dir, tmp_path):
    engine = scripted()
    run_cell(tmp_path / "short", benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
             method_options={"memory": str(bank_dir), "top_k": 3, "max_experience_chars": 9}, samples=TEST,
             progress=False)
    parsed = prompt_parsing.parse_prompt(_round1_prompts(engine, 0)[0])
    # the stored response "I reason briefly. The answer is ((A))." cut after 9 characters
    assert [e.response for e in parsed.experiences] == ["I reason [...]"] * 3
    assert all(e.answer == "A" for e in parsed.experiences)  # the recorded answer is kept


def test_bank_from_an_existing_run_matches_build_memory(tmp_path):
    from r2mad_core.memory.hook import load_memory
    from r2mad_lab.experiments.build_memory import bank_set_from_run

    train = load("mmlu_pro_economics", "train")[:3]
    engine = make_engine("simulated", samples=train)
    built = build_memory("mmlu_pro_economics", engine, "hashing", tmp_path / "bank", samples=train, progress=False)
    again = bank_set_from_run(tmp_path / "bank" / "debates", "hashing")
    assert again.benchmark == "mmlu_pro_economics" and again.split == "train"
    for a, b in zip(built.banks, again.banks, strict=False):
        assert a.cases == b.cases
        np.testing.assert_array_equal(a.state_embeddings, b.state_embeddings)
    assert built.banks[0].cases[0].num_options == 10
    bank_set, embedder = load_memory(tmp_path / "bank", embedder="hashing")  # alias of hashing-384
    assert embedder.name == bank_set.embedder_name == "hashing-384"
    with pytest.raises(MemoryBankError, match="hashing-384.*hashing-64"):
        load_memory(tmp_path / "bank", embedder="hashing-64")


class RecordingEmbedder:
    """Wraps an embedder; records (thread name, texts) of every encode call that reaches it."""

    def __init__(self, inner, fail_in_background: bool = False):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.fail_in_background = fail_in_background
        self.calls: list[tuple[str, list[str]]] = []

    def encode(self, texts, batch_size=32, show_progress=False):
        import threading

        thread = threading.current_thread().name
        self.calls.append((thread, list(texts)))
        if self.fail_in_background and thread != "MainThread":
            raise RuntimeError("embedder went away")
        return self.inner.encode(texts, batch_size=batch_size)


def _distinct_responses(question, persona, t, request):
    return mc_answer(LETTER[persona], reasoning=f"Agent {persona} argues in round {t} about: {question}")


def test_r2mad_hook_embeds_the_responses_while_the_summaries_are_written(bank_dir):
    from r2mad_core.debate.loop import run_debate
    from r2mad_core.memory.hook import R2MadHook, load_memory

    method = get_method("r2mad", memory=str(bank_dir))
    runs = {}
    for overlap in (True, False):
        bank_set, embedder = load_memory(bank_dir)
        recording = RecordingEmbedder(embedder)
        hook = R2MadHook(bank_set, recording)
        if not overlap:
            hook.finish_round = None  # the loop only calls a callable finish_round
        states = run_debate(TEST, ScriptedEngine(_distinct_responses), method.debate, benchmark="truthfulqa", hook=hook)
        runs[overlap] = (states, recording.calls)
    (states, calls), (plain_states, plain_calls) = runs[True], runs[False]
    # the same experiences, scores and confidences either way
    assert [[t.retrieved for r in s.rounds for t in r.turns] for s in states] == [
        [t.retrieved for r in s.rounds for t in r.turns] for s in plain_states
    ]
    assert all(len(s.rounds) == 3 for s in states)  # agent 1 always dissents: rounds 0 and 1 go on
    responses = [[text for s in states for text in s.rounds[t].responses] for t in range(3)]
    background = [texts for thread, texts in calls if thread == "r2mad-embed-responses"]
    assert background == [responses[0], responses[1]]  # after rounds 0 and 1, in state order; none after round 2
    main = {text for thread, texts in calls if thread == "MainThread" for text in texts}
    assert main and not main & set(responses[0] + responses[1])  # prepare_round found them embedded
    assert all(thread == "MainThread" for thread, _ in plain_calls)
    plain_main = {text for _, texts in plain_calls for text in texts}
    assert set(responses[0] + responses[1]) <= plain_main


def test_r2mad_hook_reraises_a_background_embedding_error(bank_dir):
    from r2mad_core.debate.loop import run_debate
    from r2mad_core.memory.hook import R2MadHook, load_memory

    bank_set, embedder = load_memory(bank_dir)
    hook = R2MadHook(bank_set, RecordingEmbedder(embedder, fail_in_background=True))
    engine = ScriptedEngine(_distinct_responses)
    with pytest.raises(RuntimeError, match="embedder went away"):
        run_debate(TEST, engine, get_method("r2mad", memory=str(bank_dir)).debate, benchmark="truthfulqa", hook=hook)
    # stopped at round 1
    assert [sorted({r.tag for r in batch}) for batch in engine.batches] == [["debate"], ["summary"]]
