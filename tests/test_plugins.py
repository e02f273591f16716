"""Extensions from outside the package (r2mad_core.plugins): one module registers a method and a policy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from r2mad_core import plugins

from r2mad_core.memory import retrieval
from r2mad_core.experiments.methods import METHOD_SPECS, METHODS, get_method, unregister_method

PLUGIN = '''
from r2mad_core.debate.loop import DebateConfig
from r2mad_core.experiments.methods import Method, MethodSpec, register_method
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
import json
from pathlib import Path

from r2mad_core.data.benchmarks import BenchmarkSpec, Sample, format_question, register_benchmark
from r2mad_core.debate.loop import DebateConfig
from r2mad_core.experiments.methods import Method, MethodSpec, register_method
from r2mad_core.memory.retrieval import POLICIES, PolicySpec, register_policy

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
register_policy(PolicySpec("toy_similarity", "Toy similarity", POLICIES["similarity"].select))
'''


def test_a_toy_benchmark_method_and_policy_run_through_the_cli(tmp_path: Path, monkeypatch) -> None:
    import json
    import subprocess

    quiz = [{"q": f"Which number is {k}?", "options": [str(k), str(k + 1), str(k + 2), str(k + 3)], "answer": 0}
            for k in range(8)]
    (tmp_path / "quiz.jsonl").write_text("\n".join(json.dumps(row) for row in quiz))
    (tmp_path / "toy_plugin.py").write_text(TOY_PLUGIN)
    env = {**__import__("os").environ, plugins.ENVIRONMENT_VARIABLE: str(tmp_path / "toy_plugin.py")}
    command = [sys.executable, "-m", "r2mad_core", "run", "--benchmark", "toy_quiz", "--split", "test",
               "--method", "toy_two_agents", "--engine", "simulated", "--no-progress", "--out", str(tmp_path / "run"),
               "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()]
    assert len(records) == 2  # test = floor(8 / 4)
    assert all(len(r["rounds"][0]["agents"]) == 2 for r in records)
    help_text = subprocess.run([sys.executable, "-m", "r2mad_core", "run", "--help"], env=env, capture_output=True,
                               text=True, timeout=120).stdout
    assert "toy_quiz" in help_text and "toy_two_agents" in help_text and "toy_similarity" in help_text


def test_a_toy_benchmark_method_and_policy_run_through_the_notebooks_of_the_tiny_profile(tmp_path: Path) -> None:
    """The same toy plugin, used the way a researcher would: `make reproduce` with profile overrides. The toy
    benchmark is the profile's only benchmark, the toy method a row of Table 1 (notebook 03), the toy policy a
    row of the retrieval ablation (notebook 04); each table shows them under their registered labels."""
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
        "retrieval_policies": "[similarity, toy_similarity, state_aware]",
        "extra_methods": "['Two-agent debate']",
    }
    command = [sys.executable, "-m", "r2mad_core.reproduce", "--profile", "tiny", "--only", "03,04",
               "--output-dir", str(tmp_path / "out")]
    for key, value in overrides.items():
        command += ["--set", f"{key}={value}"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = tmp_path / "out" / "figures" / "tiny"

    def rows(name: str) -> list[dict[str, str]]:
        with open(figures / f"{name}.csv", newline="") as f:
            return list(csv.DictReader(f))

    main = rows("tab_main_results")
    assert {r["benchmark"] for r in main} == {"Toy quiz"}  # one benchmark: no Average column
    assert list(dict.fromkeys(r["method"] for r in main)) == ["CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD",
                                                              "Two-agent debate"]
    ablation = rows("tab_retrieval_ablation")
    assert list(dict.fromkeys(r["method"] for r in ablation)) == ["Similarity-based", "Toy similarity", "Debate-State-Aware"]
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
