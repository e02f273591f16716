"""The ``r2mad`` command line: run/score end to end on the simulated engine, errors before generation."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import r2mad_core.engines
from r2mad_core import cli
from r2mad_core.benchmarks import BENCHMARKS
from r2mad_core.experiments import TRANSCRIPTS_FILE

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def data_dir(monkeypatch):
    import os

    if "R2MAD_DATA_DIR" not in os.environ:
        monkeypatch.setenv("R2MAD_DATA_DIR", str(DATA_DIR))


def run_main(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_engine(monkeypatch):
    """Fail the test if an engine is built (errors must come before any generation)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("an engine was built although the input was invalid")

    monkeypatch.setattr(r2mad_core.engines, "make_engine", forbidden)


# ----------------------------------------------------------------------------------------------
# Help
# ----------------------------------------------------------------------------------------------
def test_every_option_is_documented():
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"run", "score"} <= set(subparsers.choices)
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"r2mad {name} {action.option_strings or action.dest}"


def test_run_help_lists_the_options(capsys):
    code, out, _ = run_main(["run", "--help"], capsys)
    assert code == 0
    for flag in ("--benchmark", "--split", "--method", "--engine", "--limit", "--out", "--seed", "--n-agents",
                 "--n-rounds", "--max-tokens", "--temperature", "--k-paths", "--masking", "--cache-dir",
                 "--data-dir", "--engine-option"):
        assert flag in out


# ----------------------------------------------------------------------------------------------
# Bad inputs: one line, exit code 2, no engine
# ----------------------------------------------------------------------------------------------
BASE = ["run", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "2"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--method", "mad", "--benchmark", "gsm8k"], "argument --benchmark: invalid choice: 'gsm8k'"),
        (["--method", "debate"], "argument --method: invalid choice: 'debate'"),
        (["--method", "mad", "--n-agents", "4"], "n_agents=4 but the paper gives 3 personas"),
        (["--method", "mad", "--n-rounds", "0"], "argument --n-rounds: expected a positive integer, found 0"),
        (["--method", "mad", "--limit", "-3"], "argument --limit: expected a positive integer, found -3"),
        (["--method", "mad", "--temperature", "hot"], "argument --temperature: expected a number >= 0, found 'hot'"),
        (["--method", "mad", "--top-p", "1.5"], "argument --top-p: expected a number in (0, 1], found 1.5"),
        (["--method", "self_consistency", "--k-paths", "0"], "argument --k-paths: expected a positive integer"),
        (["--method", "mad", "--k-paths", "3"], "option(s) --k-paths do not apply to method mad"),
        (["--method", "cot", "--masking", "subjective"], "option(s) --masking do not apply to method cot"),
        (["--method", "mad", "--engine-option", "threads"], "argument --engine-option: expected key=value"),
        (["--method", "mad", "--engine", "gpt"], "argument --engine: invalid choice: 'gpt'"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(extra, message, tmp_path, capsys, no_engine):
    code, out, err = run_main([*BASE, "--out", tmp_path / "run", *extra], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert message in lines[0]
    assert lines[0].startswith("r2mad run: error: ")
    assert not (tmp_path / "run" / TRANSCRIPTS_FILE).exists()


@pytest.fixture
def parse_errors_are_exit_codes(monkeypatch):
    """Turn argparse's SystemExit into a return value so parametrized tests read one code."""
    original = cli.main

    def main(argv):
        try:
            return original(argv)
        except SystemExit as exc:
            return exc.code

    monkeypatch.setattr(cli, "main", main)


@pytest.fixture(autouse=True)
def _exit_codes(parse_errors_are_exit_codes):
    yield


def test_missing_data_dir_is_exit_2(tmp_path, capsys, no_engine):
    code, _, err = run_main([*BASE, "--method", "mad", "--out", tmp_path / "run", "--data-dir", tmp_path / "nowhere"], capsys)
    assert code == 2 and err.count("\n") == 1 and "cannot load truthfulqa test" in err


def test_another_cell_in_the_directory_is_exit_2_before_generation(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    cache = tmp_path / "cache"
    code, out, _ = run_main([*BASE, "--method", "mad", "--out", run, "--cache-dir", cache, "--no-progress"], capsys)
    assert code == 0
    monkeypatch.setattr(r2mad_core.engines, "make_engine", lambda *a, **k: pytest.fail("engine built"))
    code, _, err = run_main([*BASE, "--method", "mad", "--out", run, "--seed", "4", "--cache-dir", cache], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "seed: requested 4, directory has 0" in err and "Use another --out directory" in err


# ----------------------------------------------------------------------------------------------
# Every method on every benchmark with the simulated engine
# ----------------------------------------------------------------------------------------------
METHOD_ARGS = {
    "cot": ["--method", "cot"],
    "sc3": ["--method", "self_consistency", "--k-paths", "3"],
    "mad": ["--method", "mad"],
    "mad_m2_objective": ["--method", "mad_m2", "--masking", "objective"],
    "mad_m2_subjective": ["--method", "mad_m2", "--masking", "subjective"],
}


@pytest.mark.parametrize("benchmark", BENCHMARKS)
@pytest.mark.parametrize("variant", sorted(METHOD_ARGS))
def test_run_every_method_on_every_benchmark(benchmark, variant, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["run", "--benchmark", benchmark, "--engine", "simulated", "--limit", "3", "--out", run,
            "--cache-dir", tmp_path / "cache", "--no-progress", *METHOD_ARGS[variant]]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    last = out.strip().splitlines()[-1]
    method = METHOD_ARGS[variant][1]
    assert last.startswith(f"{method} on {benchmark} test (3 new, 0 reused): accuracy ")
    assert "95% CI" in last and "tokens/query: debate" in last
    records = [json.loads(line) for line in (run / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert len(records) == 3
    judged = [c["tag"] == "judge" for r in records for rr in r["rounds"] for c in rr["extra_calls"]]
    debated = sum(r["n_rounds_executed"] - 1 for r in records)  # rounds t > 0 that were run
    assert len(judged) == (3 * debated if variant == "mad_m2_subjective" else 0)
    expected_agents = {"cot": 1, "sc3": 3}.get(variant, 3)
    assert all(len(rr["agents"]) == expected_agents for r in records for rr in r["rounds"])


def test_rerun_reuses_and_score_prints_metrics(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [*BASE, "--method", "mad", "--out", run, "--cache-dir", tmp_path / "cache", "--no-progress"]
    code, first, _ = run_main(argv, capsys)
    assert code == 0
    code, second, _ = run_main(argv, capsys)
    assert code == 0 and "(0 new, 2 reused)" in second
    assert first.split(": ", 1)[1].split(" | ")[0] == second.split(": ", 1)[1].split(" | ")[0]
    code, out, _ = run_main(["score", run], capsys)
    assert code == 0
    assert out.splitlines()[1].startswith("accuracy ") and "agent accuracy by round" in out
    code, out, _ = run_main(["score", run, "--json"], capsys)
    metrics = json.loads(out)
    assert metrics["n"] == 2 and "tokens_per_query" in metrics
    code, out, _ = run_main(["score", run, "--vote-rule", "authors_majority_correct", "--json"], capsys)
    assert json.loads(out)["vote_rule"] == "authors_majority_correct"
    code, _, err = run_main(["score", tmp_path / "nothing"], capsys)
    assert code == 2 and "not a run directory" in err


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "r2mad_core", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "run" in result.stdout and "score" in result.stdout


def test_key_value_parsing():
    assert cli.key_value("threads=1") == ("threads", 1)
    assert cli.key_value("base-urls=[http://a:1/v1, http://b:2/v1]") == ("base_urls", ["http://a:1/v1", "http://b:2/v1"])
    assert cli.key_value("flag=true") == ("flag", True)
    assert cli.key_value("name=") == ("name", "")
    with pytest.raises(argparse.ArgumentTypeError, match="not a valid identifier"):
        cli.key_value("1x=2")
