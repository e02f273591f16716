"""The ``r2mad`` command line: run/score end to end on the simulated engine, errors before generation."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import r2mad_lab.engines
from r2mad_core.data.benchmarks import BENCHMARKS
from r2mad_lab.cli import commands as cli
from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE

REPO = Path(__file__).resolve().parents[2]
# The benchmark files are the ones shipped with the package (or $R2MAD_DATA_DIR when set).


def run_main(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_engine(monkeypatch):
    """Fail the test if an engine is built (errors must come before any generation)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("an engine was built although the input was invalid")

    monkeypatch.setattr(r2mad_lab.engines, "make_engine", forbidden)


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
            assert action.help and action.help != argparse.SUPPRESS, (
                f"r2mad {name} {action.option_strings or action.dest}")


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
    code, _, err = run_main([*BASE, "--method", "mad", "--out", tmp_path / "run", "--data-dir", tmp_path / "nowhere"],
                            capsys)
    assert code == 2 and err.count("\n") == 1 and "cannot load truthfulqa test" in err


def test_another_cell_in_the_directory_is_exit_2_before_generation(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    cache = tmp_path / "cache"
    code, out, _ = run_main([*BASE, "--method", "mad", "--out", run, "--cache-dir", cache, "--no-progress"], capsys)
    assert code == 0
    monkeypatch.setattr(r2mad_lab.engines, "make_engine", lambda *a, **k: pytest.fail("engine built"))
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
    result = subprocess.run([sys.executable, "-m", "r2mad_lab", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "run" in result.stdout and "score" in result.stdout


def test_key_value_parsing():
    assert cli.key_value("threads=1") == ("threads", 1)
    assert (cli.key_value("base-urls=[http://a:1/v1, http://b:2/v1]")
            == ("base_urls", ["http://a:1/v1", "http://b:2/v1"]))
    assert cli.key_value("flag=true") == ("flag", True)
    assert cli.key_value("name=") == ("name", "")
    with pytest.raises(argparse.ArgumentTypeError, match="not a valid identifier"):
        cli.key_value("1x=2")


# ----------------------------------------------------------------------------------------------
# Rough edges (issue 15): --out, Ctrl-C, -K, the default embedder, the README's command
# ----------------------------------------------------------------------------------------------
def test_out_that_is_a_file_is_one_line_exit_2(tmp_path, capsys, no_engine):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    code, _, err = run_main([*BASE, "--method", "mad", "--out", a_file], capsys)
    assert (code, err) == (2, f"r2mad run: error: --out {a_file}: is a file, expected a directory\n")
    code, _, err = run_main([*BASE, "--method", "mad", "--out", a_file / "run"], capsys)
    assert (code, err) == (2, f"r2mad run: error: --out {a_file / 'run'}: cannot be created, {a_file} is a file\n")
    assert a_file.read_text() == "not a directory"


def test_unwritable_out_is_one_line_exit_2(tmp_path, capsys, no_engine, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = cli.os.access
    # root ignores file modes, so the unwritable directory is simulated at os.access
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False if Path(path) == locked else real_access(path, mode))
    code, _, err = run_main([*BASE, "--method", "mad", "--out", locked], capsys)
    assert (code, err) == (2, f"r2mad run: error: --out {locked}: the directory is not writable\n")
    code, _, err = run_main([*BASE, "--method", "mad", "--out", locked / "new" / "run"], capsys)
    assert (code, err) == (
        2, f"r2mad run: error: --out {locked / 'new' / 'run'}: cannot be created, {locked} is not writable\n")
    assert list(locked.iterdir()) == []


def test_an_os_error_later_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    from r2mad_lab.experiments import cell as experiments

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "run" / "config.json"))

    monkeypatch.setattr(experiments, "run_cell", denied)
    code, _, err = run_main([*BASE, "--method", "cot", "--out", tmp_path / "run", "--no-cache"], capsys)
    assert (code, err) == (2, f"r2mad run: error: {tmp_path / 'run' / 'config.json'}: Permission denied\n")


def test_ctrl_c_keeps_finished_questions_and_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """A KeyboardInterrupt injected in the engine during the second chunk: the first chunk's question is
    kept, one line says so, exit 130; the rerun resumes from it."""
    real_make_engine = r2mad_lab.engines.make_engine
    calls = {"generate": 0}

    def make_engine(*args, **kwargs):
        engine = real_make_engine(*args, **kwargs)
        real_generate = engine.generate

        def generate(requests):
            calls["generate"] += 1
            if calls["generate"] == 4:  # chunk 1 (question 1) is written after its rounds; Ctrl-C in chunk 2
                raise KeyboardInterrupt
            return real_generate(requests)

        engine.generate = generate
        return engine

    monkeypatch.setattr(r2mad_lab.engines, "make_engine", make_engine)
    run = tmp_path / "run"
    argv = ["run", "--benchmark", "truthfulqa", "--engine", "simulated", "--method", "mad", "--limit", "3",
            "--chunk-size", "1", "--no-early-stop", "--out", run, "--cache-dir", tmp_path / "cache", "--no-progress"]
    code, out, err = run_main(argv, capsys)
    assert code == 130
    assert err == (f"r2mad run: interrupted: 1 of 3 questions are kept in {run} (finished generations are cached); "
                   "rerun the same command to resume\n")
    assert len((run / TRANSCRIPTS_FILE).read_text().splitlines()) == 1
    monkeypatch.setattr(r2mad_lab.engines, "make_engine", real_make_engine)
    code, out, err = run_main(argv, capsys)
    assert code == 0 and "(2 new, 1 reused)" in out


def test_ctrl_c_before_the_run_is_one_line_exit_130(tmp_path, capsys, monkeypatch):
    from r2mad_core.data import benchmarks

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(benchmarks, "load", interrupted)
    code, _, err = run_main([*BASE, "--method", "mad", "--out", tmp_path / "run"], capsys)
    assert code == 130
    assert err == "r2mad run: interrupted (nothing finished is lost: rerun the same command to resume)\n"


@pytest.fixture(scope="module")
def small_bank(tmp_path_factory):
    """A truthfulqa bank from 2 training debates of the simulated engine: 4 cases per agent, 2 questions."""
    out = tmp_path_factory.mktemp("bank") / "bank"
    code = cli.main(["build-memory", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "2",
                     "--out", str(out), "--no-progress", "--no-cache"])
    assert code == 0
    return out


def test_build_memory_default_embedder_follows_the_engine(small_bank, capsys):
    from r2mad_core.memory.banks import MemoryBankSet
    from r2mad_lab.cli.memory import default_embedder

    bank = MemoryBankSet.load(small_bank)
    assert bank.embedder_name.startswith("hashing")
    assert [len(b) for b in bank.banks] == [4, 4, 4]
    assert default_embedder("simulated") == "hashing"
    assert default_embedder("local") == default_embedder("openai") == default_embedder("vllm") == "minilm"
    parser = cli.build_parser()
    assert parser.parse_args(["build-memory", "--benchmark", "truthfulqa", "--out", "x"]).embedder is None


def test_build_memory_says_which_embedder_it_chose(tmp_path, capsys):
    code, out, err = run_main(["build-memory", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "1",
                               "--out", tmp_path / "bank", "--no-progress", "--no-cache"], capsys)
    assert code == 0
    assert err == ("r2mad build-memory: embedder hashing (the default for the simulated engine; "
                   "--embedder to choose another)\n")


@pytest.mark.parametrize(
    ("method", "k", "message"),
    [
        ("r2mad", "5", "K = 5 (-K) is larger than the memory bank's 4 cases per agent"),
        ("icl_cot", "3", "K = 3 (-K) is larger than the memory bank's 2 distinct training questions"),
    ],
)
def test_top_k_larger_than_the_bank_is_exit_2_before_generation(small_bank, method, k, message, tmp_path, capsys,
                                                                 no_engine):
    code, _, err = run_main(["run", "--benchmark", "truthfulqa", "--method", method, "--memory", small_bank, "-K", k,
                             "--engine", "simulated", "--limit", "2", "--out", tmp_path / "run"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"r2mad run: error: {message} ({small_bank}); {method} would retrieve everything")


def test_top_k_that_fits_the_bank_runs(small_bank, tmp_path, capsys):
    code, out, err = run_main(["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--memory", small_bank,
                               "-K", "4", "--engine", "simulated", "--limit", "2", "--out", tmp_path / "run",
                               "--no-cache", "--no-progress"], capsys)
    assert code == 0, err
    assert "(2 new, 0 reused)" in out


def test_readme_calls_the_command_from_the_venv():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert ".venv/bin/r2mad run" in readme and "source .venv/bin/activate" in readme
    assert (REPO / ".venv" / "bin" / "r2mad").exists() or not (REPO / ".venv").exists()
