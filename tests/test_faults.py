"""Fault probes (issue 33): failing endpoints under the budget cap, a trickling or hanging server, a usage of the
wrong type, Ctrl-C during generation. Every probe asserts the one-line message and that nothing was lost or sent
over the cap. The endpoint is tests/fake_openai_server.py in one of its fault modes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from r2mad_lab.engines import EngineError, Request, SamplingParams, make_engine
from r2mad_lab.experiments.budget import BudgetCap, ForwardingGateway

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

#: Every way an endpoint can fail for good that the engine retries (and so could be sent too often).
FAILING_MODES = ["500", "usage_string", "usage_nested", "trickle", "hang", "reset", "malformed", "drop"]


def _request(text: str, max_tokens: int = 10) -> Request:
    return Request(messages=({"role": "user", "content": text},), params=SamplingParams(max_tokens=max_tokens))


def _engine(base_url: str, cache_dir: Path | None = None, **options: object) -> object:
    settings = dict(model="m", base_urls=base_url, api_key_env=None, timeout_seconds=1.0, max_retries=5,
                    initial_backoff_seconds=0.01, max_backoff_seconds=0.02, neutral_sampling=False)
    settings.update(options)
    return make_engine("openai", cache_dir=cache_dir, **settings)


@pytest.mark.parametrize("mode", FAILING_MODES)
def test_a_failing_endpoint_sees_no_more_requests_than_the_cap_and_the_count_is_what_it_saw(
        mode: str, tmp_path: Path) -> None:
    """--max-requests 5 against an endpoint that fails every request in ``mode``: the engine's retries (6 attempts
    per request, 3 requests at once) reach it at most 5 times, the cap's count of requests sent is exactly what the
    endpoint saw, and the failure is one line."""
    with FakeOpenAIServer(mode=mode, trickle_interval=0.2, hang_seconds=20) as server:
        cap = BudgetCap(max_requests=5)
        with ForwardingGateway([server.base_url], cap) as gateway:
            # a hanging or trickling attempt fails at its deadline whatever it is: half a second (not 1 s) is enough
            timeout = 0.5 if mode in ("hang", "trickle") else 1.0
            engine = _engine(gateway.base_url, tmp_path / "cache", max_concurrency=3, timeout_seconds=timeout)
            with pytest.raises(EngineError) as caught:
                engine.generate([_request(f"question {i}") for i in range(4)])
            engine.close()
            seen = server.requests_served
        assert seen <= 5
        assert cap.spent.requests == seen
        assert "\n" not in str(caught.value)
        assert "HTTP 402" in str(caught.value) or "failed after" in str(caught.value)


def test_requests_that_never_reach_the_endpoint_are_not_counted() -> None:
    cap = BudgetCap(max_requests=5)
    with ForwardingGateway(["http://127.0.0.1:9/v1"], cap) as gateway:
        engine = _engine(gateway.base_url, max_retries=2)
        with pytest.raises(EngineError, match="unreachable"):
            engine.generate([_request("q")])
        engine.close()
    assert cap.spent.requests == 0 and cap.refused == 0


def test_a_trickling_server_is_cut_off_at_the_attempts_total_deadline() -> None:
    """One byte every 0.2 s never trips a 1 s timeout on each read; the whole answer would take ~60 s. The attempt
    ends at its 1 s deadline (retried once, then one line); a generous 30 s bound stands for "not the trickle's 60
    s"."""
    with FakeOpenAIServer(mode="trickle", trickle_interval=0.2, trickle_seconds=60) as server:
        engine = _engine(server.base_url, max_retries=1)
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"failed after 2 attempts .*ReadTimeout: no answer within the "
                                              r"attempt's deadline \(timeout_seconds\)") as caught:
            engine.generate([_request("q")])
        ended = time.monotonic() - started
        engine.close()
        assert server.requests_served == 2 and server.completed == 0
    assert "\n" not in str(caught.value)
    assert ended < 30


@pytest.mark.parametrize("mode, field", [("usage_string", "field usage: expected an object"),
                                         ("usage_nested", "field usage.prompt_tokens: expected a whole number")])
def test_a_usage_of_the_wrong_type_is_retried_then_one_line(mode: str, field: str, tmp_path: Path) -> None:
    with FakeOpenAIServer(mode=mode) as server:
        engine = _engine(server.base_url, tmp_path / "cache", max_retries=2)
        with pytest.raises(EngineError, match=f"failed after 3 attempts .*{field}") as caught:
            engine.generate([_request("q")])
        engine.close()
        assert server.requests_served == 3
    assert "\n" not in str(caught.value)


def _cached(cache_dir: Path) -> int:
    """How many completions the response cache in ``cache_dir`` holds now (0 before it exists), read only."""
    import sqlite3

    path = cache_dir / "responses.sqlite"
    if not path.is_file():
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return 0
    try:
        return conn.execute("SELECT count(*) FROM responses").fetchone()[0]
    except sqlite3.Error:  # not yet a cache (being created)
        return 0
    finally:
        conn.close()


def test_ctrl_c_during_openai_generation_exits_at_once_and_keeps_every_finished_completion(tmp_path: Path) -> None:
    """``r2mad run`` on 6 questions, all sent at once: the server answers 3 and leaves the others hanging (until it
    stops, at most 600 s). Ctrl-C: exit 130 with one line, long before the hanging requests would end (a bound of
    120 s, far above a loaded machine's latency: the verdict does not hang on the load), and the response cache holds
    every completion the server finished."""
    import os
    import signal
    import subprocess

    from r2mad_lab.engines.cache import ResponseCache

    with FakeOpenAIServer(hang_after=3, hang_seconds=600) as server:
        command = [sys.executable, "-m", "r2mad_lab", "run", "--method", "cot", "--benchmark", "truthfulqa",
                   "--split", "test", "--limit", "6", "--engine", "openai", "--model", "m",
                   "--engine-option", f"base_urls=[{server.base_url}]", "--engine-option", "max_concurrency=6",
                   "--engine-option", "neutral_sampling=false", "--cache-dir", str(tmp_path / "cache"),
                   "--out", str(tmp_path / "run"), "--no-progress"]
        environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        # SIGINT's default action in the child whatever started this test: a shell without job control starts its
        # background jobs with SIGINT ignored, and a Python started so never raises KeyboardInterrupt
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=environment, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 300  # the run's start (imports) on a loaded machine
            while not (server.completed >= 3 and server.requests_served >= 6) and process.poll() is None:
                assert time.monotonic() < deadline, "the run never sent its batch"
                time.sleep(0.05)
            while _cached(tmp_path / "cache") < 3 and process.poll() is None:  # the 3 answers reach the cache
                assert time.monotonic() < deadline, "the 3 answers never reached the cache"
                time.sleep(0.02)
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        completed = server.completed
    assert process.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("r2mad run: interrupted: 0 of 6 questions are kept in ")
    assert "Traceback" not in stderr
    cache = ResponseCache(tmp_path / "cache")
    assert completed == 3 and len(cache) == 3
    cache.close()


# ----------------------------------------------------------------------------------------------
# Profiles: no secret expanded into a field, no model label that leaves runs/<profile>/
# ----------------------------------------------------------------------------------------------
def _profile_file(tmp_path: Path, edit: "Callable[[dict], None]") -> Path:
    from importlib import resources

    import yaml

    data = yaml.safe_load(resources.files("r2mad_lab").joinpath("profiles", "tiny.yaml").read_text())
    edit(data)
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _reproduce_refuses(path: Path, capsys: "pytest.CaptureFixture[str]") -> str:
    from r2mad_lab import reproduce

    code = reproduce.main(["--profile", str(path), "--output-dir", str(path.parent / "out"), "--only", "01"])
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert not (path.parent / "out").exists()  # refused before anything was written
    return "\n".join(lines)


SECRET = "sk-probe-0123456789abcdef"


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["models"][0].update(stands_in_for="${DB_PASS}"),
     "read only in the fields naming a model or an endpoint"),
    (lambda d: d["models"][0].update(label="${GH_PAT}"), "read only in the fields naming a model or an endpoint"),
    (lambda d: d.update(retrieval_models=["${DATABASE_URL}"]), "read only in the fields naming a model or an endpoint"),
    (lambda d: d["models"][0].update(model="${PROBE_API_KEY}", api_key_env="PROBE_API_KEY"), "holds an API key"),
    (lambda d: d.update(description="see ${PROBE_MODEL}"), "read only in the fields naming a model or an endpoint"),
], ids=["stands_in_for", "label", "retrieval_models", "model an api_key_env", "description"])
def test_a_variable_is_refused_outside_the_fields_naming_a_model_or_an_endpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], edit: object,
        expected: str) -> None:
    """Whatever the variable is called (issue 51: ``${DB_PASS}``, ``${GH_PAT}``, ``${DATABASE_URL}`` expanded, their
    names did not look secret): a label, stand-in or description never reads the environment."""
    for name in ("DB_PASS", "GH_PAT", "DATABASE_URL", "PROBE_API_KEY", "PROBE_MODEL"):
        monkeypatch.setenv(name, SECRET)
    message = _reproduce_refuses(_profile_file(tmp_path, edit), capsys)  # type: ignore[arg-type]
    assert expected in message and "uses ${" in message
    assert SECRET not in message  # the refusal names the variable, never its value


def test_a_model_variable_is_kept_by_name_in_the_profile_and_read_when_the_engine_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from r2mad_lab.experiments.model_specs import ModelSpec
    from r2mad_lab.experiments.profiles import load_profile

    monkeypatch.setenv("DB_PASS", SECRET)
    profile = load_profile(_profile_file(tmp_path, lambda d: d["models"][0].update(model="${DB_PASS}")))
    assert profile["models"][0]["model"] == "${DB_PASS}" and SECRET not in repr(profile.parameters({}))
    spec = ModelSpec.from_entry(profile["models"][0])
    assert spec.resolved()[0] == SECRET and SECRET not in repr(spec.describe())


@pytest.mark.parametrize("label", ["..", ".", "/", "../..", "é"])
def test_a_model_label_that_would_name_a_folder_outside_runs_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str) -> None:
    def edit(data: dict) -> None:
        data["models"][0]["label"] = label
        for entry in data["large_models"]:
            entry["stand_in"] = label
        data["retrieval_models"] = data["icl_models"] = [label]

    message = _reproduce_refuses(_profile_file(tmp_path, edit), capsys)
    assert "models[0].label" in message and "a label with a letter or digit in it" in message


# ----------------------------------------------------------------------------------------------
# End to end: reproduce --profile api --max-requests 5 against failing endpoints (slow: notebook 02 runs)
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["500", "usage_string", "trickle", "reset"])
def test_reproduce_api_under_max_requests_5_sends_at_most_5_and_prints_what_the_endpoint_saw(
        mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33's reproduction (``--only 02 --max-requests 5``, HTTP 500 sent 36): at most 5 requests reach the
    endpoint, the printed count is what it saw, the run stops with a non-zero exit, and the API key set in the
    environment is in no file of the output folder."""
    from r2mad_lab import reproduce

    with FakeOpenAIServer(mode=mode, trickle_interval=0.5, trickle_seconds=5) as server:
        monkeypatch.setenv("R2MAD_API_MODEL", "fake-model")
        monkeypatch.setenv("R2MAD_API_BASE_URL", server.base_url)
        monkeypatch.setenv("R2MAD_API_KEY", SECRET)
        out = tmp_path / "out"
        argv = ["--profile", "api", "--only", "02", "--output-dir", str(out), "--max-requests", "5", "--no-estimate",
                "--set", "train_limit=2", "--set", "embedder=hashing", "--set", "benchmarks=[truthfulqa]",
                "--set", "retrieval_benchmarks=[truthfulqa]", "--set", "icl_benchmarks=[truthfulqa]",
                "--set", "poison_benchmarks=[truthfulqa]", "--set", "cost_benchmark=truthfulqa",
                "--variant", "probe"]
        code = reproduce.main(argv)
        printed = capsys.readouterr()
        seen = server.requests_served
    assert code != 0 and 1 <= seen <= 5
    assert f"{seen} requests" in printed.err + printed.out, printed.err[-2000:]
    leaked = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


# ----------------------------------------------------------------------------------------------
# kill -9: stale temporary files, kernels that outlive their runner
# ----------------------------------------------------------------------------------------------
def test_a_temporary_file_left_by_a_kill_is_removed_by_the_next_write_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    import fcntl
    import os

    from r2mad_core.files import atomic_write, remove_stale_temporaries

    figure = tmp_path / "fig_main.png"
    stale = tmp_path / ".fig_main.k3j4h5g6.tmp.png"  # what a SIGKILL inside savefig leaves
    stale.write_bytes(b"half a png")
    other = tmp_path / ".fig_other.a1b2c3d4.tmp.pdf"  # another figure's: the write of fig_main leaves it
    other.write_bytes(b"half a pdf")
    live = tmp_path / ".fig_main.z9y8x7w6.tmp.png"  # a writer in another process, still writing
    live.write_bytes(b"being written")
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        atomic_write(figure, lambda temporary: temporary.write_bytes(b"a png"))
        assert figure.read_bytes() == b"a png"
        assert not stale.exists() and other.exists() and live.exists()
    finally:
        os.close(holder)
    # once its writer is gone (the lock with it), the folder-wide clean takes every leftover and nothing else
    assert sorted(remove_stale_temporaries(tmp_path)) == sorted([other, live])
    assert [p.name for p in tmp_path.iterdir()] == ["fig_main.png"]


def test_git_ignores_the_temporary_files() -> None:
    import subprocess

    root = Path(__file__).resolve().parents[1]
    names = ["figures/tiny/.fig_main.k3j4h5g6.tmp.png", "figures/tiny/.table_1.ab12cd34.tmp.csv",
             "runs/x/.metrics.a1b2c3d4.tmp.json"]
    result = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=root, capture_output=True, text=True)
    assert result.stdout.split() == names


def test_a_kernel_ends_when_its_runner_is_killed(tmp_path: Path) -> None:
    """The runner (a process that starts a child as jupyter_client starts a kernel: its own session,
    JPY_PARENT_PID) is killed with SIGKILL; the child, which would otherwise sleep 120 s, ends (within a generous
    30 s bound) because it ran exit_with_parent."""
    import os
    import signal
    import subprocess

    child = ("import os, time; from r2mad_core.files import exit_with_parent; exit_with_parent(); "
             "open(os.environ['PROBE_PID_FILE'], 'w').write(str(os.getpid())); time.sleep(120)")
    runner = ("import os, subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True, "
              "env={**os.environ, 'JPY_PARENT_PID': str(os.getpid())}); time.sleep(120)")
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                   "PROBE_PID_FILE": str(tmp_path / "pid")}
    process = subprocess.Popen([sys.executable, "-c", runner], env=environment)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        kernel = int((tmp_path / "pid").read_text())
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        while _alive(kernel):
            assert time.monotonic() < deadline + 30, "the child outlived its killed runner"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reaped by nobody here, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_the_notebook_kernels_run_exit_with_parent() -> None:
    from r2mad_lab.reproduce import notebook_runner

    assert "exit_with_parent()" in notebook_runner.KERNEL_EXITS_WITH_RUNNER
    assert notebook_runner.KERNEL_EXITS_WITH_RUNNER.startswith("--IPKernelApp.exec_lines=")


# ------------------------------------------------------------------------------------------------
# Failover between endpoints (issue 51): a dead endpoint is taken out, the live ones answer
# ------------------------------------------------------------------------------------------------
def _refusing_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (every connection refused at once)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _debate_transcripts(base_urls: list[str]) -> tuple[list[list[list[str]]], str]:
    """A small grid (MAD, 3 questions x 3 agents x 3 rounds = 27 requests) over ``base_urls``: every agent's
    conversation as text, and the engine's per-endpoint summary."""
    from debate_fakes import mc_sample

    from r2mad_core.debate.loop import run_debate
    from r2mad_core.methods import get_method
    from r2mad_lab.engines.openai_compat import OpenAICompatEngine

    questions = [mc_sample(f"q{k}", question=f"Which statement about topic {k} is true?") for k in range(3)]
    engine = OpenAICompatEngine("test-model", base_urls, api_key_env=None, max_concurrency=3, timeout_seconds=5.0,
                                max_retries=2, initial_backoff_seconds=0.05, max_backoff_seconds=0.2,
                                neutral_sampling=False)
    try:
        states = run_debate(questions, engine, get_method("mad", stop_at_unanimity=False).debate)
        summary = engine.endpoints.summary()
    finally:
        engine.close()
    return [[[m["content"] for m in conversation] for conversation in s.conversations] for s in states], summary


def test_two_endpoints_one_refusing_from_the_start_the_grid_completes_on_the_healthy_one() -> None:
    """Before: a refusing endpoint looked least busy (it answers at once), every retry went to it and the run ended.
    Now it is taken out for a backoff; the 27 requests all come back from the healthy one, with the same transcripts
    as that endpoint alone, and the summary counts requests per endpoint."""
    with FakeOpenAIServer() as alone:
        expected, _ = _debate_transcripts([alone.base_url])
    dead = _refusing_url()
    with FakeOpenAIServer() as healthy:
        transcripts, summary = _debate_transcripts([dead, healthy.base_url])
        served = healthy.requests_served
    assert transcripts == expected
    assert served == 27
    assert f"{healthy.base_url} 27 answered of 27 sent" in summary
    assert f"{dead} 0 answered of" in summary and "ConnectError" in summary


def test_the_run_ends_only_when_no_endpoint_is_live_saying_which_failed_and_how() -> None:
    """Two refusing endpoints: bounded attempts ((max_retries + 1) x endpoints at most), one line naming both and
    the error each gave."""
    dead = [_refusing_url(), _refusing_url()]
    engine = _engine(dead, max_retries=2, max_concurrency=1)
    with pytest.raises(EngineError) as caught:
        engine.generate([_request("question")])
    engine.close()
    message = str(caught.value)
    assert "\n" not in message and "no endpoint of 2 live" in message
    assert all(f"{url}: " in message for url in dead) and message.count("ConnectError") >= 2
    assert sum(engine.endpoints.counts().values()) <= 6


def test_the_budget_gateway_fails_over_to_the_live_upstream() -> None:
    """The api profile's path (every request through the budget gateway): a refusing upstream next to a healthy one
    costs nothing; every request is answered by the healthy one and counted once."""
    with FakeOpenAIServer() as healthy:
        cap = BudgetCap(max_requests=100)
        with ForwardingGateway([_refusing_url(), healthy.base_url], cap) as gateway:
            engine = _engine(gateway.base_url, max_retries=0, max_concurrency=2)
            completions = engine.generate([_request(f"question {i}") for i in range(8)])
            engine.close()
            summary = gateway.pool.summary()
        served = healthy.requests_served
    assert len(completions) == 8 and served == 8
    assert f"{healthy.base_url} 8 answered of 8 sent" in summary
    assert cap.spent.requests == 8


# ------------------------------------------------------------------------------------------------
# Numbers a user can type (issue 51): bounded at their one declaration, read as Python and YAML read them
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option, value", [("timeout_seconds", 0), ("timeout_seconds", -5), ("max_retries", -1),
                                           ("max_concurrency", 0), ("connect_timeout_seconds", 0.0),
                                           ("gpu_memory_utilization", 1.5), ("timeout_seconds", "ten")])
def test_an_engine_option_out_of_bounds_in_a_profile_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: object) -> None:
    """A timeout of 0 or -5 was accepted, then every request failed against a healthy server."""
    message = _reproduce_refuses(_profile_file(tmp_path, lambda d: d["models"][0].setdefault("options", {}).update(
        {option: value})), capsys)
    assert "models[0].options" in message and option in message and "expected a" in message


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_an_engine_option_out_of_bounds_on_the_command_line_is_one_line(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from r2mad_lab.cli import commands as cli

    with pytest.raises(SystemExit) as caught:
        cli.main(["run", "--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "1", "--no-cache",
                  "--engine-option", f"timeout_seconds={value}"])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and "Traceback" not in err
    assert "--engine-option.timeout_seconds: expected a number > 0" in err


def test_the_engine_refuses_a_timeout_of_zero_whoever_builds_it() -> None:
    with pytest.raises(ValueError, match=r"timeout_seconds: expected a number > 0"):
        make_engine("openai", model="m", base_urls=_refusing_url(), timeout_seconds=0, neutral_sampling=False)


@pytest.mark.parametrize("text, expected", [("gamma=5e-1", 0.5), ("top_k=1e0", 1.0),
                                            ("gamma=5E-1", 0.5), ("w_high=+6e-1", 0.6)])
def test_numbers_parse_as_python_and_yaml_read_them(text: str, expected: float) -> None:
    """``--set gamma=5e-1`` was refused with "expected a valid number, found '5e-1'" (YAML 1.1 wants 5.0e-1)."""
    from r2mad_lab.experiments.profiles import parse_override

    assert parse_override(text)[1] == expected


def test_a_profile_and_set_take_5e_minus_1(tmp_path: Path) -> None:
    from r2mad_lab.experiments.profiles import load_profile, parse_override

    assert load_profile("tiny", dict([parse_override("gamma=5e-1")])).spec.gamma == 0.5
    path = _profile_file(tmp_path, lambda d: d.update(gamma="GAMMA"))
    path.write_text(path.read_text().replace("gamma: GAMMA", "gamma: 5e-1"))
    assert load_profile(path).spec.gamma == 0.5


# ------------------------------------------------------------------------------------------------
# Secrets by construction (issue 51), end to end: a marker in every variable a profile can reference
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_marker_in_every_variable_a_profile_references_is_in_no_artifact_notebook_run_file_or_printed_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The api profile with its model named by ``${DB_PASS}`` (issue 51: DB_PASS's value was in
    figures/<profile>/MANIFEST.json and the executed 02_memory.ipynb), an API key, and a base URL carrying a password
    in its user-info part, against a healthy fake server: notebook 02 runs, and no marker is in any file under
    figures/, notebooks/, runs/ nor in any printed line."""
    from importlib import resources

    import yaml

    from r2mad_lab import reproduce

    markers = {"DB_PASS": "dbpass-marker-51a", "R2MAD_API_KEY": "apikey-marker-51b", "URL": "urlpass-marker-51c"}
    data = yaml.safe_load(resources.files("r2mad_lab").joinpath("profiles", "api.yaml").read_text())
    data["models"][0]["model"] = "${DB_PASS}"
    profile = tmp_path / "probe.yaml"
    profile.write_text(yaml.safe_dump(data))
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("DB_PASS", markers["DB_PASS"])
        monkeypatch.setenv("R2MAD_API_MODEL", "unused-model")
        monkeypatch.setenv("R2MAD_API_KEY", markers["R2MAD_API_KEY"])
        monkeypatch.setenv("R2MAD_API_BASE_URL", server.base_url.replace("http://", f"http://probe:{markers['URL']}@"))
        out = tmp_path / "out"
        code = reproduce.main(["--profile", str(profile), "--only", "02", "--output-dir", str(out), "--no-estimate",
                               "--set", "train_limit=2", "--set", "embedder=hashing", "--set",
                               "benchmarks=[truthfulqa]",
                               "--set", "retrieval_benchmarks=[truthfulqa]", "--set", "icl_benchmarks=[truthfulqa]",
                               "--set", "poison_benchmarks=[truthfulqa]", "--set", "cost_benchmark=truthfulqa"])
        printed = capsys.readouterr()
        models_sent = {body.get("model") for body in server.bodies}
    assert code == 0, (printed.out + printed.err)[-3000:]
    assert models_sent == {markers["DB_PASS"]}  # the engine read the variable when it opened
    written = [p for folder in ("figures", "notebooks", "runs") for p in (out / folder).rglob("*") if p.is_file()]
    assert any(p.name == "MANIFEST.json" for p in written) and any(p.suffix == ".ipynb" for p in written)
    for name, marker in markers.items():
        leaked = [str(p.relative_to(out)) for p in written if marker.encode() in p.read_bytes()]
        assert leaked == [], f"{name}'s value in {leaked}"
        assert marker not in printed.out + printed.err, name
    # what the records say instead: the variable's name
    named = {p.name for p in written if b"${DB_PASS}" in p.read_bytes()}
    assert {"config.json", "manifest.json"} <= named, named
