"""No answer lost in silence (issue 22, section 2): every limit that cuts a completion is counted apart, reaches the
caption and the manifest of every artifact built from the cell, and a prompt that does not fit follows a named
policy. A fake engine with a small context (one token per word) runs MAD through the notebooks' grid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from debate_fakes import mc_answer, mc_sample, round_of
from hand_transcripts import transcript

from r2mad_core.debate.overflow import OverflowPolicyEngine, with_overflow_policy
from r2mad_core.debate.prompt_parsing import drop_oldest_experience
from r2mad_core.debate.prompts import ExperienceView, debate_prompt
from r2mad_core.engine import Completion, EngineError, Ledger, Request, classify_cut
from r2mad_lab.engines import ENGINES, EngineSpec, register_engine
from r2mad_lab.engines.thinking import apply_thinking
from r2mad_lab.experiments.metrics import completion_health
from r2mad_lab.report.artifacts import limits_footnote, limits_summary, read_manifest
from r2mad_lab.reproduce.grid import ExperimentGrid

CONTEXT = 1000  # tokens (words) of the fake model's context
MAX_TOKENS = 600


def words(request: Request) -> int:
    return sum(len(m["content"].split()) for m in request.messages)


class SmallContextEngine:
    """A model with a 1000-word context. q0: agents 0 and 1 loop in round 0 (cut at max_tokens), so every round-1
    prompt holds two 600-word loops and does not fit. q1: agent 0 writes 350 words in round 0, loops in round 1 and is
    capped by the context. q2: agent 0 thinks past max_tokens in round 0 (an unclosed <think>)."""

    builds = 0
    concurrent_generate = True

    def __init__(self, model: str = "small", context: int = CONTEXT) -> None:
        type(self).builds += 1
        self.model, self.context = model, context
        self.identity = self.identity_of(model, context=context)
        self.ledger = Ledger()

    @staticmethod
    def identity_of(model: str = "small", context: int = CONTEXT, **_: object) -> str:
        return f"small-context:{context}"

    def answer(self, request: Request) -> Completion:
        prompt = words(request)
        if prompt >= self.context:  # never sent, as the vllm backend does
            return Completion("", prompt_tokens=prompt, finish_reason="length", cut="context_overflow")
        text = request.messages[-1]["content"] + " ".join(m["content"] for m in request.messages[:2])
        question = next(q for q in ("q0", "q1", "q2") if f"Question {q}?" in text)
        agent = self.agent_of(request)
        t = round_of(request)
        loop = (question == "q0" and t == 0 and agent in (0, 1)) or (question == "q1" and t == 1 and agent == 0)
        if loop:  # writes until a limit stops it
            n = min(request.params.max_tokens, self.context - prompt)
            return Completion(" ".join(["loop"] * n), prompt, n, finish_reason="length",
                              cut=classify_cut("length", prompt, n, request.params.max_tokens, self.context))
        if question == "q2" and t == 0 and agent == 0:
            n = request.params.max_tokens
            return apply_thinking(Completion("<think> " + " ".join(["hmm"] * (n - 1)), prompt, n,
                                             finish_reason="length", cut="max_tokens"))
        if question == "q1" and t == 0 and agent == 0:
            return Completion(mc_answer("A", " ".join(["because"] * 345)), prompt, 350)
        return Completion(mc_answer("AB"[agent % 2]), prompt, 8)

    @staticmethod
    def agent_of(request: Request) -> int:
        from r2mad_core.debate import prompts

        return [text for _, text in prompts.PERSONAS["truthfulqa"]].index(request.messages[0]["content"])

    def generate_iter(self, requests):
        for index, request in enumerate(requests):
            completion = self.answer(request)
            self.ledger.record(request, completion)
            yield index, completion

    def generate(self, requests):
        return [c for _, c in self.generate_iter(requests)]

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def small_engine():
    spec = EngineSpec("small_context", SmallContextEngine, "test: a 1000-word context", concurrent=True)
    register_engine(spec)
    SmallContextEngine.builds = 0
    yield
    ENGINES.pop("small_context", None)


def grid(tmp_path: Path, **changes) -> ExperimentGrid:
    options = dict(models=[{"label": "Small", "engine": "small_context", "model": "small", "options": {}}],
                   benchmarks=["truthfulqa"], runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache",
                   n_rounds=2, max_tokens=MAX_TOKENS, bootstrap_resamples=100)
    options.update(changes)
    exp = ExperimentGrid(**options)
    exp._samples[("truthfulqa", "test")] = [mc_sample("q0"), mc_sample("q1"), mc_sample("q2")]
    return exp


EXPECTED = {"context_overflow": 3, "context_capped": 1, "max_tokens_cut": 3, "unclosed_thinking": 1,
            "trimmed_prompts": 0}


def test_limits_are_counted_apart_and_reach_caption_and_manifest(tmp_path: Path) -> None:
    with grid(tmp_path) as exp:
        results = exp.grid(["MAD"])
        [outcome] = results.outcomes
        health = outcome.metrics["completion_health"]
        assert {k: health[k] for k in EXPECTED} == EXPECTED
        assert outcome.limits()["questions"] == 3
        ctx = exp.report_context("test", tmp_path / "figures", "99_test.ipynb")
        ctx.save_table(results.table(["MAD"], caption="Accuracy."), "tab_x")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        ax.plot([0, 1])
        ctx.save_figure(fig, "fig_x", caption="A figure.")
        plt.close(fig)
    manifest = read_manifest(tmp_path / "figures")["artifacts"]
    footnote = ("Limits: in 1 of 1 cells (3 questions), 3 prompts did not fit the model's context, 1 output was "
                "capped by the context, 3 outputs were cut at max_tokens and 1 output stopped inside <think> "
                "(counted apart; see the manifest).")
    for name in ("tab_x", "fig_x"):
        assert footnote in manifest[name]["caption"]
        limits = manifest[name]["limits"]
        assert {k: limits[k] for k in EXPECTED} == EXPECTED
        assert limits["cells"] == 1 and limits["cells_hit"] == 1 and limits["hit"][0]["method"] == "MAD"
    assert footnote in (tmp_path / "figures" / "tab_x.md").read_text()
    # the transcript says which turn hit which limit
    records = outcome.records
    q0 = next(r for r in records if r.sample_id == "q0")
    assert [a.cut for a in q0.rounds[0].agents] == ["max_tokens", "max_tokens", None]
    assert [a.cut for a in q0.rounds[1].agents] == ["context_overflow"] * 3
    q2 = next(r for r in records if r.sample_id == "q2")
    assert q2.rounds[0].agents[0].unclosed_thinking is True
    # written only when set: the file's line of q1's first turn has no limit keys, q0's has its cut
    lines = [json.loads(line) for run in (tmp_path / "runs").rglob("transcripts.jsonl")
             for line in run.read_text().splitlines()]
    first = {line["sample_id"]: line["rounds"][0]["agents"] for line in lines}
    assert first["q0"][0]["cut"] == "max_tokens" and "cut" not in first["q0"][2]
    assert "unclosed_thinking" not in first["q0"][0] and "trimmed_experiences" not in first["q0"][0]


def test_no_limit_no_footnote_but_the_manifest_says_zero() -> None:
    summary = limits_summary([{"model": "m", "benchmark": "b", "method": "MAD", **dict.fromkeys(EXPECTED, 0),
                               "questions": 0}])
    assert limits_footnote(summary) == ""
    assert summary["context_overflow"] == 0 and summary["cells"] == 1 and summary["hit"] == []


def test_a_fully_cached_cell_builds_no_engine(tmp_path: Path) -> None:
    with grid(tmp_path) as exp:
        exp.grid(["MAD"])
    assert SmallContextEngine.builds == 1
    for run in (tmp_path / "runs").rglob("transcripts.jsonl"):  # the cells rerun, every generation in the cache
        run.parent.joinpath("transcripts.jsonl").unlink()
    with grid(tmp_path) as exp:
        again = exp.grid(["MAD"])
        assert exp.schedule(exp.models[0]) == {}  # not a streaming engine: rounds
    assert SmallContextEngine.builds == 1
    assert again.outcomes[0].metrics["completion_health"]["context_overflow"] == 3


def test_the_grid_runs_streaming_engines_question_by_question(tmp_path: Path) -> None:
    exp = grid(tmp_path)
    vllm = exp.models[0].__class__("Q", "vllm", "Qwen/Qwen3-8B")
    assert exp.schedule(vllm) == {"schedule": "questions", "window": 64}
    assert grid(tmp_path, window=16).schedule(vllm)["window"] == 16


EXPERIENCE = ExperienceView(question="Old question?", response="old response " * 50, answer="A", correct=True,
                            summary=None, consensus_ratio=None, reference="", outcome_correct=True)


def r2mad_request(n_experiences: int) -> Request:
    text = debate_prompt("truthfulqa", "Question q9?\nA. a\nB. b", [], [EXPERIENCE] * n_experiences)
    return Request(messages=({"role": "system", "content": "You are an agent."}, {"role": "user", "content": text}))


def test_drop_oldest_experience_removes_one_block_then_the_header() -> None:
    messages = list(r2mad_request(2).messages)
    one, dropped = drop_oldest_experience(messages)
    assert dropped and one[1]["content"].count("<experience index=") == 1
    none, dropped = drop_oldest_experience(one)
    assert dropped and "<experiences>" not in none[1]["content"]
    assert none[1]["content"] == r2mad_request(0).messages[1]["content"]
    assert drop_oldest_experience(none) == (none, False)


class Tight(SmallContextEngine):
    def answer(self, request: Request) -> Completion:
        prompt = words(request)
        if prompt >= self.context:
            return Completion("", prompt_tokens=prompt, finish_reason="length", cut="context_overflow")
        return Completion(mc_answer("A"), prompt, 8)


def test_trim_experiences_keeps_the_debate_going_and_empty_is_the_default() -> None:
    base, with_three = words(r2mad_request(0)), words(r2mad_request(3))
    per = (with_three - base) // 3
    engine = Tight(context=base + per + per // 2)  # fits one experience, not two
    assert with_overflow_policy(engine, "empty") is engine
    [completion] = OverflowPolicyEngine(engine, "trim_experiences").generate([r2mad_request(3)])
    assert (completion.cut, completion.trimmed_experiences, completion.text) == (None, 2, mc_answer("A"))
    [empty] = engine.generate([r2mad_request(3)])
    assert (empty.cut, empty.text) == ("context_overflow", "")
    with pytest.raises(EngineError, match="overflow_policy raise"):
        OverflowPolicyEngine(engine, "raise").generate([r2mad_request(3)])
    # nothing left to drop: the empty completion, as under "empty"
    [still] = OverflowPolicyEngine(Tight(context=10), "trim_experiences").generate([r2mad_request(1)])
    assert (still.cut, still.trimmed_experiences) == ("context_overflow", 0)


def test_records_written_before_cut_existed_are_still_counted() -> None:
    record = transcript(rounds=[{"agents": [
        {"finish_reason": "length", "completion_tokens": 0, "response": "", "answer": None},
        {"finish_reason": "length", "completion_tokens": 512, "response": "x", "answer": None},
        {"finish_reason": "stop", "completion_tokens": 5, "response": "y", "answer": "A"},
    ]}])
    health = completion_health([record])
    assert (health["context_overflow"], health["max_tokens_cut"], health["context_capped"]) == (1, 1, 0)


def test_classify_cut() -> None:
    assert classify_cut("stop", 10, 5, 100, 200) is None
    assert classify_cut("length", 10, 0, 100, 200) == "context_overflow"
    assert classify_cut("length", 150, 50, 100, 200) == "context_capped"
    assert classify_cut("length", 10, 100, 100, 200) == "max_tokens"
