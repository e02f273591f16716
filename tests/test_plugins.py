"""Extensions from outside the package (r2mad_core.plugins): one module registers a method and a policy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from r2mad_core import plugins
from r2mad_core.memory import retrieval
from r2mad_core.methods import METHOD_SPECS, METHODS, get_method, unregister_method

PLUGIN = '''
from r2mad_core.debate.loop import DebateConfig
from r2mad_core.methods import Method, MethodSpec, register_method
from r2mad_core.memory.retrieval import POLICIES, PolicySpec, register_policy


def two_agent_debate(*, n_rounds: int = 2, max_tokens: int = 64) -> Method:
    return Method(name="toy_two_agents", debate=DebateConfig(n_agents=2, n_rounds=n_rounds, max_tokens=max_tokens))


register_method(MethodSpec("toy_two_agents", two_agent_debate, label="Two-agent debate"))
register_policy(PolicySpec("toy_similarity", "Toy similarity", POLICIES["similarity"].select))
'''


def test_a_plugin_file_registers_a_method_and_a_policy(tmp_path: Path) -> None:
    path = tmp_path / "toy_plugin.py"
    path.write_text(PLUGIN)
    try:
        modules = plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(path)})
        assert len(modules) == 1
        assert plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(path)}) == modules  # imported once
        assert METHOD_SPECS["toy_two_agents"].label == "Two-agent debate"
        method = get_method("toy_two_agents", n_rounds=1)
        assert method.debate.n_agents == 2 and method.options == {"n_rounds": 1, "max_tokens": 64}
        assert retrieval.parse_retrieval_policy("toy_similarity") == ("toy_similarity", None)
    finally:
        unregister_method("toy_two_agents")
        retrieval.POLICIES.pop("toy_similarity", None)
        plugins._loaded.clear()
        sys.modules.pop("r2mad_plugin_toy_plugin", None)
    assert "toy_two_agents" not in METHODS


def test_a_broken_plugin_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(plugins.PluginError, match=r"broken.py' failed to import: RuntimeError: no GPU here"):
        plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(path)})
    with pytest.raises(plugins.PluginError, match="does not exist"):
        plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(tmp_path / "missing.py")})
    with pytest.raises(plugins.PluginError, match="'no_such_module_r2mad' failed to import"):
        plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: "no_such_module_r2mad"})


TOY_PLUGIN = '''
import hashlib
import json
from pathlib import Path

import numpy as np

from r2mad_core.data.benchmarks import BenchmarkSpec, Sample, format_question, register_benchmark
from r2mad_core.debate.loop import DebateConfig
from r2mad_lab.engines import Completion, EngineSpec, register_engine
from r2mad_core.methods import Method, MethodSpec, register_method
from r2mad_core.memory.retrieval import PolicySpec, mmr_policy, register_policy

LETTERS = "ABCD"


def load_quiz(data_dir: Path) -> list[Sample]:
    rows = [json.loads(line) for line in (Path(__file__).parent / "quiz.jsonl").read_text().splitlines()]
    return [Sample(id=f"toy_quiz:{i}", benchmark="toy_quiz", question=format_question(r["q"], r["options"]),
                   gold=LETTERS[r["answer"]], choices=tuple(r["options"])) for i, r in enumerate(rows)]


PERSONAS = tuple((f"Quizzer {k}", f"You are quizzer {k}. Provide your final answer in double parentheses: "
                  "((answer)), where answer is the letter of the correct option.") for k in range(3))
register_benchmark(BenchmarkSpec("toy_quiz", "Toy quiz", "multiple_choice", load_quiz, personas=PERSONAS))


def two_agent_debate(*, n_rounds: int = 2, max_tokens: int = 64) -> Method:
    return Method(name="toy_two_agents", debate=DebateConfig(n_agents=2, n_rounds=n_rounds, max_tokens=max_tokens))


register_method(MethodSpec("toy_two_agents", two_agent_debate, label="Two-agent debate"))
# an MMR variant through the public MMR policy: only its lambda_t is its own
register_policy(PolicySpec("toy_mmr", "Toy MMR", mmr_policy,
                           tradeoff=lambda consensus, config: np.full(consensus.shape[0], 0.5, dtype=np.float32)))


class CoinEngine:
    """Answers A or B, chosen by a hash of the request (so that agents disagree and debates go on)."""

    identity = "toy-coin-v1"

    def __init__(self, model: str | None = None) -> None:
        self.model = model or "coin"

    def generate(self, requests):
        out = []
        for request in requests:
            text = request.messages[-1]["content"]
            digest = hashlib.sha256(f"{text}|{request.sample_index}|{request.params.seed}".encode()).digest()
            letter = "AB"[digest[0] % 2]
            out.append(Completion(text=f"Weighing the options, the answer is (({letter})).",
                                  prompt_tokens=len(text) // 4, completion_tokens=12,
                                  logprobs=[-(1 + digest[1] % 5) / 10] * 12 if request.params.logprobs else None))
        return out

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


register_engine(EngineSpec("toy_coin", CoinEngine, "a coin flip per request (the plugin test's engine)",
                           model_option=None))
'''


def test_a_toy_benchmark_method_and_policy_run_through_the_cli(tmp_path: Path, monkeypatch) -> None:
    import json
    import subprocess

    quiz = [{"q": f"Which number is {k}?", "options": [str(k), str(k + 1), str(k + 2), str(k + 3)], "answer": 0}
            for k in range(8)]
    (tmp_path / "quiz.jsonl").write_text("\n".join(json.dumps(row) for row in quiz))
    (tmp_path / "toy_plugin.py").write_text(TOY_PLUGIN)
    env = {**__import__("os").environ, plugins.ENVIRONMENT_VARIABLE: str(tmp_path / "toy_plugin.py")}
    command = [sys.executable, "-m", "r2mad_lab", "run", "--benchmark", "toy_quiz", "--split", "test",
               "--method", "toy_two_agents", "--engine", "toy_coin", "--no-progress", "--out", str(tmp_path / "run"),
               "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()]
    assert len(records) == 2  # test = floor(8 / 4)
    assert all(len(r["rounds"][0]["agents"]) == 2 for r in records)
    assert all(a["response"].startswith("Weighing the options") for r in records for a in r["rounds"][0]["agents"])
    help_text = subprocess.run([sys.executable, "-m", "r2mad_lab", "run", "--help"], env=env, capture_output=True,
                               text=True, timeout=120).stdout
    assert all(name in help_text for name in ("toy_quiz", "toy_two_agents", "toy_mmr", "toy_coin"))


def test_a_toy_benchmark_method_policy_and_engine_run_through_every_notebook_of_the_tiny_profile(
    tmp_path: Path) -> None:
    """The same toy plugin, used the way a researcher would: `make reproduce` of all ten notebooks with profile
    overrides. The toy benchmark is the profile's only benchmark, the toy engine its only model, the toy method a
    row of Table 1 (notebook 03), the toy MMR policy a row of the retrieval ablation (notebook 04); each table
    shows them under their registered labels."""
    import csv
    import json
    import os
    import subprocess

    quiz = [{"q": f"Which number is {k}?", "options": [str(k), str(k + 1), str(k + 2), str(k + 3)], "answer": 0}
            for k in range(8)]
    (tmp_path / "quiz.jsonl").write_text("\n".join(json.dumps(row) for row in quiz))
    (tmp_path / "toy_plugin.py").write_text(TOY_PLUGIN)
    env = {**os.environ, plugins.ENVIRONMENT_VARIABLE: str(tmp_path / "toy_plugin.py")}
    overrides = {
        "benchmarks": "[toy_quiz]", "retrieval_benchmarks": "[toy_quiz]", "icl_benchmarks": "[toy_quiz]",
        "poison_benchmarks": "[toy_quiz]", "cost_benchmark": "toy_quiz",
        "retrieval_policies": "[similarity, toy_mmr, state_aware]",
        "extra_methods": "['Two-agent debate']",
        "models": "[{label: Coin, engine: toy_coin}]", "retrieval_models": "[Coin]", "icl_models": "[Coin]",
        "large_models": "[{label: Llama-3.3-70B-Instruct, stand_in: Coin}, {label: GPT-4o-mini, stand_in: Coin}]",
    }
    # the overrides make a variant (named toy) of the tiny profile: the profile's own run first, then the variant
    command = [sys.executable, "-m", "r2mad_lab.reproduce", "--profile", "tiny", "--output-dir", str(tmp_path / "out"),
               "--variant", "toy"]
    for key, value in overrides.items():
        command += ["--set", f"{key}={value}"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(f"[{k}/10]" in result.stdout + result.stderr for k in range(1, 11))
    figures = tmp_path / "out" / "figures" / "tiny" / "variants" / "toy"

    def rows(name: str) -> list[dict[str, str]]:
        with open(figures / f"{name}.csv", newline="") as f:
            return list(csv.DictReader(f))

    main = rows("tab_main_results")
    assert {r["benchmark"] for r in main} == {"Toy quiz"}  # one benchmark: no Average column
    assert list(dict.fromkeys(r["method"] for r in main)) == ["CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD",
                                                              "Two-agent debate"]
    ablation = rows("tab_retrieval_ablation")
    assert list(dict.fromkeys(r["method"] for r in ablation)) == ["Similarity-based", "Toy MMR", "Debate-State-Aware"]
    # notebook 01: the toy benchmark's split sizes next to the paper's four (no paper size for it)
    splits = {(r["benchmark"], r["split"]): r["value"] for r in rows("tab_data_splits")}
    assert ((splits["Toy quiz", "test"], splits["Toy quiz", "train"], splits["Toy quiz", "test (paper)"])
            == ("2", "6", ""))
    assert splits["TruthfulQA", "test (paper)"] == "166"
    # the profile's own run came first, beside the variant (the simulated agents: nothing but this machine's time)
    assert (tmp_path / "out" / "figures" / "tiny" / "tab_main_results.csv").is_file()
    # every run was the toy engine's: its coin-flip text in every transcript
    every = sorted((tmp_path / "out" / "runs" / "tiny").glob("*/toy_quiz/**/transcripts.jsonl"))
    assert every and all("the answer is ((" in path.read_text() for path in every)
    # the toy method's run is a 2-agent debate of the toy benchmark's 2 test questions
    runs = sorted((tmp_path / "out" / "runs" / "tiny").glob("*/toy_quiz/toy_two_agents-*/transcripts.jsonl"))
    assert len(runs) == 1
    records = [json.loads(line) for line in runs[0].read_text().splitlines()]
    assert len(records) == 2 and all(len(r["rounds"][0]["agents"]) == 2 for r in records)
    # without the plugin the same overrides are one line naming the field
    plain = {k: v for k, v in env.items() if k != plugins.ENVIRONMENT_VARIABLE}
    failed = subprocess.run(command, env=plain, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2 and "field 'benchmarks': expected benchmark ids" in failed.stderr
    caption = (figures / "tab_main_results.md").read_text()
    assert "on Toy quiz (95% bootstrap CIs; 2 test questions)" in caption


def test_every_registry_refuses_an_incomplete_entry_with_one_line_naming_what_is_missing() -> None:
    from r2mad_core.data.benchmarks import BENCHMARK_SPECS, BenchmarkSpec, register_benchmark
    from r2mad_core.memory.retrieval import POLICIES, PolicySpec, mmr_policy, register_policy
    from r2mad_core.methods import Method, MethodSpec, register_method
    from r2mad_lab.engines import ENGINES, EngineSpec, register_engine

    def problem(register, spec) -> str:
        with pytest.raises(ValueError) as caught:
            register(spec)
        assert "\n" not in str(caught.value)
        return str(caught.value)

    load = lambda data_dir: []  # noqa: E731
    assert problem(register_benchmark, BenchmarkSpec("toy_mute", "Toy", "multiple_choice", load)) == (
        "register_benchmark: benchmark 'toy_mute' needs personas: ((name, system prompt), ...), one per agent (only "
        "the paper's math500, mmlu_pro_economics, mmlu_pro_engineering, truthfulqa have the appendix's)")
    assert problem(register_benchmark, BenchmarkSpec("toy_mute", "Toy", "math", load, personas=(("A", ""),))) == (
        "register_benchmark: benchmark 'toy_mute' personas must be a non-empty tuple of (name, system prompt) pairs "
        "of non-empty strings")
    assert problem(register_benchmark, BenchmarkSpec("toy mute", "Toy", "math", load, personas=(("A", "B"),))) == (
        "register_benchmark: benchmark 'toy mute' needs a name of letters, digits, '_' or '-'")
    assert "toy_mute" not in BENCHMARK_SPECS
    assert problem(register_policy, PolicySpec("toy_mmr2", "Toy MMR 2", mmr_policy)) == (
        "register_policy: retrieval policy 'toy_mmr2' selects with mmr_policy, which needs a tradeoff "
        "(consensus [Q], RetrievalConfig) -> lambda_t [Q]")
    assert problem(register_policy, PolicySpec("toy_rand", "Random", POLICIES["random"].select)) == (
        "register_policy: retrieval policy 'toy_rand' uses the label 'Random' of policy 'random'")
    assert problem(register_policy, PolicySpec("toy_k", "Toy K", mmr_policy, parameter="kk",
                                               tradeoff=lambda c, config: c)).startswith(
        "register_policy: retrieval policy 'toy_k' sets parameter 'kk', which is not a RetrievalConfig field (policy, "
        "k,")
    assert "toy_mmr2" not in POLICIES and "toy_rand" not in POLICIES and "toy_k" not in POLICIES

    def positional(n_rounds: int = 2) -> Method:  # options must be keyword-only
        raise AssertionError("never built")

    assert problem(register_method, MethodSpec("toy_pos", positional, "Toy positional")) == (
        "register_method: method 'toy_pos' has option 'n_rounds', which must be keyword-only "
        "(def builder(*, n_rounds=...))")
    assert problem(register_method, MethodSpec("toy_mad", positional, "MAD")) == (
        "register_method: method 'toy_mad' uses the label 'MAD' of method 'mad'")
    assert problem(register_engine, EngineSpec("toy_none", None, "no factory")).startswith(  # type: ignore[arg-type]
        "register_engine: engine 'toy_none' needs a factory")
    assert "toy_none" not in ENGINES


def test_a_registered_engine_is_a_cli_choice_and_a_profile_engine() -> None:
    from pydantic import ValidationError

    from r2mad_lab.cli.commands import build_parser
    from r2mad_lab.engines import ENGINES, EngineSpec, register_engine
    from r2mad_lab.experiments.profile_schema import ModelEntry

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--benchmark", "truthfulqa", "--method", "mad", "--out", "run", "--engine",
                                   "toy_echo"])
    with pytest.raises(ValidationError, match=r"'local', 'openai', 'vllm' or 'simulated'"):
        ModelEntry.model_validate({"label": "Echo", "engine": "toy_echo"})
    register_engine(EngineSpec("toy_echo", "r2mad_core.theory.agents:SimulatedEngine", "an echo", model_option=None))
    try:
        args = build_parser().parse_args(["run", "--benchmark", "truthfulqa", "--method", "mad", "--out", "run",
                                          "--engine", "toy_echo"])
        assert args.engine == "toy_echo"
        assert ModelEntry.model_validate({"label": "Echo", "engine": "toy_echo"}).engine == "toy_echo"
    finally:
        ENGINES.pop("toy_echo")
