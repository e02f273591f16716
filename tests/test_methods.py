"""Methods as loop configurations: registry, validation, CoT/SC/MAD cache sharing, MAD-M2 masking."""

from __future__ import annotations

import math

import pytest
from debate_fakes import ScriptedEngine, last_user, mc_answer, mc_sample

from r2mad_core.debate import prompt_parsing
from r2mad_core.debate.loop import run_debate
from r2mad_core.engine import Completion
from r2mad_core.methods import METHODS, Method, get_method, kept_by_logprob, method_options


def first_round_requests(method: Method, engine: ScriptedEngine):
    engine.batches.clear()
    run_debate([mc_sample("q")], engine, method.debate)
    return engine.batches[0]


def disagree(question, persona, t, request):
    return mc_answer("ABC"[persona if persona is not None else 0])


# ----------------------------------------------------------------------------------------------
# Registry and validation
# ----------------------------------------------------------------------------------------------
def test_registry_lists_the_baselines():
    assert {"cot", "self_consistency", "mad", "mad_m2"} <= set(METHODS)


def test_unknown_method_lists_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown method 'madd'; expected one of \[") as exc:
        get_method("madd")
    for name in METHODS:
        assert f"'{name}'" in str(exc.value)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("mad", {"n_agents": 4}, "n_agents=4 but the paper gives 3 personas"),
        ("mad", {"n_agents": 0}, "n_agents must be >= 1, found 0"),
        ("mad", {"n_rounds": 0}, "n_rounds must be >= 1, found 0"),
        ("mad", {"n_rounds": 2.5}, "n_rounds must be an integer"),
        ("self_consistency", {"k_paths": 0}, "k_paths must be >= 1, found 0"),
        ("mad", {"temperature": -0.1}, "temperature must be in"),
        ("mad", {"top_p": 0.0}, r"top_p must be in \(0.0, 1.0\]"),
        ("mad", {"max_tokens": 0}, "max_tokens must be >= 1"),
        ("mad_m2", {"masking": "random"}, "masking must be one of"),
        ("mad", {"vote_rule": "median"}, "option vote_rule must be one of"),
        ("cot", {"k_paths": 3}, r"does not take option\(s\) \['k_paths'\]"),
        ("mad", {"masking": "objective"}, r"does not take option\(s\) \['masking'\]"),
    ],
)
def test_bad_options_are_rejected_with_the_reason(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_method(name, **options)


def test_options_are_stored_with_defaults_for_the_config_file():
    method = get_method("self_consistency", k_paths=6)
    assert method.options == {"k_paths": 6, "temperature": 1.0, "top_p": 1.0, "max_tokens": 512,
                              "vote_rule": "plurality",
                              "round0": "shared", "task_prompt": "paper", "unclosed_thinking": "drop"}
    assert method.to_dict()["debate"]["personas"] == [0] * 6
    assert method.to_dict()["debate"]["sample_indices"] == [0, 1, 2, 3, 4, 5]
    assert "masking" in method_options("mad_m2")


def test_paper_defaults():
    mad = get_method("mad")
    assert (mad.debate.n_agents, mad.debate.n_rounds, mad.debate.temperature, mad.debate.top_p) == (3, 3, 1.0, 1.0)
    assert mad.debate.stop_at_unanimity and not mad.debate.with_summaries
    sc = get_method("self_consistency")
    assert sc.debate.n_agents == 9 and sc.debate.n_rounds == 1
    m2 = get_method("mad_m2")
    assert m2.debate.logprobs and m2.make_peer_selector is not None
    assert not get_method("mad_m2", masking="subjective").debate.logprobs


# ----------------------------------------------------------------------------------------------
# CoT, Self-Consistency and MAD share round-0 requests (and so the cache)
# ----------------------------------------------------------------------------------------------
def test_cot_is_sc_path_zero_is_mad_agent_zero_round_zero():
    engine = ScriptedEngine(disagree)
    cot = first_round_requests(get_method("cot"), engine)
    sc = first_round_requests(get_method("self_consistency", k_paths=3), engine)
    mad = first_round_requests(get_method("mad"), engine)
    assert len(cot) == 1 and len(sc) == 3 and len(mad) == 3
    key = cot[0].key("id", "model")
    assert sc[0].key("id", "model") == key
    assert mad[0].key("id", "model") == key
    # SC paths differ only by sample index; MAD agents by persona.
    assert len({r.key("id", "model") for r in sc}) == 3
    assert [r.sample_index for r in sc] == [0, 1, 2]
    assert len({r.messages[0]["content"] for r in mad}) == 3


def test_self_consistency_is_one_call_of_k_requests():
    engine = ScriptedEngine(disagree)
    states = run_debate([mc_sample("a"), mc_sample("b")], engine, get_method("self_consistency", k_paths=9).debate)
    assert engine.calls == 1 and len(engine.batches[0]) == 18
    assert all(len(s.rounds) == 1 for s in states)


# ----------------------------------------------------------------------------------------------
# MAD-M2 objective masking
# ----------------------------------------------------------------------------------------------
def test_kept_by_logprob_better_half_and_ties():
    half = "better_half"
    assert kept_by_logprob([-0.2, -1.5, -0.7], keep=half) == [0, 2]  # ceil(3/2) = 2 best kept
    assert kept_by_logprob([-0.2, -1.5, -0.7], keep="lowest_perplexity") == [0]
    assert kept_by_logprob([-0.2, -1.5, -0.7]) == [0]  # the paper's rule is the default
    assert kept_by_logprob([-1.0, -1.0, -1.0], keep=half) == [0, 1]  # ties -> lower agent index
    assert kept_by_logprob([-1.0, -1.0, -1.0]) == [0]
    assert kept_by_logprob([-3.0, -1.0, -1.0, -0.5], keep=half) == [1, 3]  # 2 of 4; tie at -1.0 -> agent 1
    # A response without logprobs (None) or NaN ranks last; between two of them the lower index wins.
    assert kept_by_logprob([None, -5.0, float("nan")], keep=half) == [0, 1]
    assert kept_by_logprob([None, -5.0, -6.0], keep=half) == [1, 2]
    assert kept_by_logprob([float("-inf"), -5.0, -6.0], keep=half) == [1, 2]
    assert kept_by_logprob([]) == []


def test_objective_masking_hides_the_worst_response_from_everyone():
    logprob = {0: [-0.1, -0.3], 1: [-2.0, -3.0], 2: [-0.5, -0.7]}  # means -0.2, -2.5, -0.6

    def respond(question, persona, t, request):
        assert request.params.logprobs
        text = mc_answer("ABC"[persona])
        return Completion(text=text, prompt_tokens=5, completion_tokens=2, logprobs=logprob[persona])

    engine = ScriptedEngine(respond)
    method = get_method("mad_m2", masking="objective", objective_keep="better_half", n_rounds=2)
    states = run_debate([mc_sample("q")], engine, method.debate, peer_selector=method.make_peer_selector(None))
    assert engine.calls == 2  # no extra call for objective masking
    round1 = engine.batches[1]
    seen = [[p.text for p in prompt_parsing.parse_prompt(last_user(r)).peers] for r in round1]
    # Agent 1 (mean -2.5) is masked: agent 0 sees agent 2, agent 2 sees agent 0, agent 1 sees both.
    assert seen == [[mc_answer("C")], [mc_answer("A"), mc_answer("C")], [mc_answer("A")]]
    record = states[0].rounds[1]
    assert record.masking["kept"] == [0, 2]
    assert record.masking["mean_logprob"] == pytest.approx([-0.2, -2.5, -0.6])
    assert [t.visible_peers for t in record.turns] == [(2,), (0, 2), (0,)]
    assert states[0].rounds[0].turns[1].mean_logprob == pytest.approx(-2.5)


def test_lowest_perplexity_variant_leaves_the_best_agent_alone_with_the_task_prompt():
    logprob = {0: [-0.1], 1: [-2.0], 2: [-0.5]}

    def respond(question, persona, t, request):
        return Completion(text=mc_answer("ABC"[persona]), logprobs=logprob[persona])

    engine = ScriptedEngine(respond)
    method = get_method("mad_m2", objective_keep="lowest_perplexity", n_rounds=2)
    run_debate([mc_sample("q")], engine, method.debate, peer_selector=method.make_peer_selector(None))
    kinds = [prompt_parsing.parse_prompt(last_user(r)).kind for r in engine.batches[1]]
    # Only agent 0's response is kept: agents 1 and 2 see it; agent 0 sees no peer and re-solves.
    assert kinds == ["task", "debate", "debate"]


# ----------------------------------------------------------------------------------------------
# MAD-M2 subjective masking
# ----------------------------------------------------------------------------------------------
def test_subjective_masking_one_judge_call_per_round_and_no_masks():
    def judge(response):
        return "Wrong. [[NO]]" if "((B))" in response else ("Hmm [[NOT SURE]]" if "((C))" in response else "[[YES]]")

    engine = ScriptedEngine(disagree, judge=judge)
    method = get_method("mad_m2", masking="subjective", judge_max_tokens=99)
    samples = [mc_sample("a"), mc_sample("b")]
    states = run_debate(samples, engine, method.debate, peer_selector=method.make_peer_selector(None))
    assert engine.calls_by_tag() == ["debate", "judge", "debate", "judge", "debate"]
    judge_batches = [b for b in engine.batches if b[0].tag == "judge"]
    assert [len(b) for b in judge_batches] == [6, 6]
    assert all(r.params.max_tokens == 99 and not r.params.logprobs for b in judge_batches for r in b)
    assert all(prompt_parsing.parse_prompt(last_user(r)).kind == "judge" for b in judge_batches for r in b)
    seen = [[p.text for p in prompt_parsing.parse_prompt(last_user(r)).peers] for r in engine.batches[2][:3]]
    assert seen == [[mc_answer("C")], [mc_answer("A"), mc_answer("C")], [mc_answer("A")]]
    record = states[0].rounds[1]
    assert record.masking == {"strategy": "subjective", "verdicts": ["YES", "NO", "NOT SURE"], "kept": [0, 2]}
    # Judge costs are attributed to the round they prepared.
    assert [c.tag for c in record.extra_calls] == ["judge"] * 3
    assert states[0].rounds[0].extra_calls == []


def test_unparseable_verdicts_keep_the_response():
    engine = ScriptedEngine(disagree, judge=lambda response: "I refuse to answer.")
    method = get_method("mad_m2", masking="subjective", n_rounds=2)
    states = run_debate([mc_sample("a")], engine, method.debate, peer_selector=method.make_peer_selector(None))
    assert states[0].rounds[1].masking["verdicts"] == [None, None, None]
    assert [t.visible_peers for t in states[0].rounds[1].turns] == [(1, 2), (0, 2), (0, 1)]


def test_mean_logprob_of_an_empty_completion_is_minus_infinity():
    def respond(question, persona, t, request):
        return Completion(text="" if persona == 0 else mc_answer("A"), logprobs=[] if persona == 0 else [-1.0])

    engine = ScriptedEngine(respond)
    method = get_method("mad_m2", n_rounds=2)
    states = run_debate([mc_sample("a")], engine, method.debate, peer_selector=method.make_peer_selector(None))
    assert states[0].rounds[0].turns[0].mean_logprob == -math.inf
    assert states[0].rounds[1].masking["kept"] == [1]  # agents 1 and 2 tie at -1.0: the lower index


def test_objective_masking_with_the_simulated_engine_logprobs():
    from r2mad_core.theory.agents import SimulatedEngine

    group = [mc_sample(f"s{i}", gold="ABCD"[i % 4]) for i in range(10)]
    method = get_method("mad_m2", stop_at_unanimity=False)
    states = run_debate(group, SimulatedEngine(group), method.debate, peer_selector=method.make_peer_selector(None))
    for s in states:
        for r in s.rounds[1:]:
            means = r.masking["mean_logprob"]
            assert all(m is not None and m <= 0 for m in means)
            assert r.masking["kept"] == kept_by_logprob(means)
            assert len(r.masking["kept"]) == 1
            assert [t.visible_peers for t in r.turns] == [
                tuple(j for j in r.masking["kept"] if j != i) for i in range(3)
            ]


def test_mad_m2_objective_default_keeps_only_the_lowest_perplexity_response():
    """The paper's appendix (and Tian et al.'s code): objective masking retains only the lowest-perplexity response."""
    assert get_method("mad_m2").options["objective_keep"] == "lowest_perplexity"
    logprob = {0: [-0.1, -0.3], 1: [-2.0, -3.0], 2: [-0.5, -0.7]}  # means -0.2, -2.5, -0.6

    def respond(question, persona, t, request):
        return Completion(text=mc_answer("ABC"[persona]), logprobs=logprob[persona])

    engine = ScriptedEngine(respond)
    method = get_method("mad_m2", n_rounds=2)
    states = run_debate([mc_sample("q")], engine, method.debate, peer_selector=method.make_peer_selector(None))
    assert states[0].rounds[1].masking["kept"] == [0]
    assert [t.visible_peers for t in states[0].rounds[1].turns] == [(), (0,), (0,)]
