"""The paper run's rehearsal, its estimate, the throughput model, calibration and pre-flight (issue 34)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from r2mad_core.engine import Completion
from r2mad_lab.engines import Request, SamplingParams, make_engine
from r2mad_lab.engines.rehearsal import LOG_ENVIRONMENT, RehearsalEngine, reply_lengths
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.reproduce.paper import calibrate, estimate, preflight, rehearsal, throughput
from r2mad_lab.reproduce.paper import command as paper_run

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def paper():
    return load_profile("paper")


def _row(label, model, benchmark, split, prompt, completion, cut=None, context=32768):
    return {"label": label, "model": model, "benchmark": benchmark, "split": split, "prompt_tokens": prompt,
            "completion_tokens": completion, "cut": cut, "context": context, "max_tokens": 6144, "tag": "debate"}


def test_estimate_scales_each_request_by_its_benchmark_and_split():
    rows = [_row("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "math500", "test", 1000, 500),
            _row("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "math500", "train", 2000, 100),
            _row("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", None, None, 30000, 10, cut="context_overflow")]
    factors = {("math500", "test"): 67.0, ("math500", "train"): 91.5, ("truthfulqa", "test"): 83.0}
    usage = estimate.estimate_from_log(rows, factors)["Qwen2.5-7B-Instruct"]
    fallback = (67.0 + 83.0) / 2  # the unplaced request: the mean test factor
    assert usage["sampled"] == 3 and usage["unplaced"] == 1 and usage["overflows"] == 1
    assert usage["longest_prompt"] == 30000
    assert usage["requests"] == pytest.approx(67 + 91.5 + fallback)
    assert usage["prompt_tokens"] == pytest.approx(67 * 1000 + 91.5 * 2000 + fallback * 30000)
    assert usage["completion_tokens"] == pytest.approx(67 * 500 + 91.5 * 100 + fallback * 10)


def test_scale_factors_are_full_split_over_rehearsed(paper):
    factors = estimate.scale_factors(paper, {"test_limit": 2, "train_limit": 4})
    assert factors[("math500", "test")] == pytest.approx(134 / 2)  # the paper's split sizes (profile description)
    assert factors[("truthfulqa", "train")] == pytest.approx(498 / 4)


def test_throughput_model_hand_computed_case():
    shape = throughput.MODELS["qwen/qwen2.5-7b-instruct"]
    assert shape.kv_bytes_per_token == 28 * 4 * 128 * 2 * 2 == 57344  # 56 KiB
    assert throughput.MODELS["qwen/qwen3-8b"].kv_bytes_per_token == 147456  # 144 KiB
    h100 = throughput.GPUS["H100"]
    # capacity at 0.8 of 80 GB: (64e9 - 15.24e9 - 3 GiB) / 57344 = 794,133 tokens
    assert throughput.kv_capacity_tokens(shape, h100, 0.8) == pytest.approx(794133.2, rel=1e-6)
    # prompt 2000, completion 600: 2300 resident per sequence, 345 fit -> batch 192 (the grid's window)
    # low: step = (15.24e9 + 192*2300*57344) / (3.35e12*0.5) = 24.218 ms -> 7,928 decode tokens/s;
    #      prefill per token = (2000/600) * 2*7.62e9 / (989e12*0.4) = 128.43 us -> 1/(126.13 us + 128.43 us) = 3,928
    low, high = throughput.rate_range("Qwen/Qwen2.5-7B-Instruct", "H100", 0.8, throughput.Workload(2000, 600))
    assert low == pytest.approx(3928, rel=2e-3)
    # high: step at 0.8 -> 15.134 ms, 12,687 tokens/s (78.82 us); prefill halved by hits at MFU 0.6: 42.80 us -> 8,222
    assert high == pytest.approx(8222, rel=2e-3)
    # Qwen3-8B's bigger KV is capacity-bound below Qwen2.5-7B's rate
    q3 = throughput.rate_range("Qwen/Qwen3-8B", "H100", 0.8, throughput.Workload(2000, 600))
    assert q3[1] < high


def test_measured_only_next_to_a_calibrated_rate(paper, tmp_path):
    rows = [_row(label, model, "math500", "test", 1500, 600) for label, model in paper_run.gpu_models(paper).items()]
    usage = estimate.estimate_from_log(rows, {("math500", "test"): 67.0})
    text = "\n".join(estimate.estimate_lines(paper, usage, gpus=8))
    assert "measured" not in text.lower()
    assert "modelled" in text and "wall-clock" in text and "on 8 GPUs" in text
    assert "H100" in text and "A100-80GB" in text and "config.json" in text
    calibration = {"models": {"Qwen3-8B": {"tokens_per_s": 4000.0, "gpu_kind": "H100",
                                           "device": "NVIDIA H100 80GB HBM3",
                                            "when": "2026-11-25"}}}
    lines = estimate.estimate_lines(paper, usage, calibration=calibration)
    measured = [line for line in lines if "measured" in line]
    assert len(measured) == 1 and "4,000 tokens/s" in measured[0] and "H100" in measured[0]


def test_calibrate_with_a_fake_engine_and_clock(paper, tmp_path):
    ticks = iter(range(0, 1000, 10))  # each clock() call: 10 s later

    class Fake:
        def generate(self, requests):
            return [Completion("x", 10, 50) for _ in requests]

        def close(self):
            pass

    requests = [Request(({"role": "user", "content": "q"},), SamplingParams())] * 600
    target = tmp_path / "calibration.json"
    lines = calibrate.calibrate(paper, target, seconds=15, engine_factory=lambda spec: Fake(),
                                requests_for=lambda profile: requests, clock=lambda: next(ticks),
                                device=lambda: "NVIDIA H100 80GB HBM3")
    stored = calibrate.read(target)["models"]
    assert set(stored) == set(paper_run.gpu_models(paper))  # the 3 evaluated + the memory model
    # start 0, loop check 10 (<15: one batch of 256), check 20 (stop), elapsed read at 30: 256*50 / 30 s
    assert stored["Qwen3-8B"]["tokens_per_s"] == pytest.approx(256 * 50 / 30, rel=1e-3)
    assert stored["Qwen3-8B"]["gpu_kind"] == "H100"
    assert any("measured" in line for line in lines)


def test_preflight_one_line_per_failure(paper, tmp_path):
    no_token = preflight.check_gated(paper, token=lambda: None, access=lambda *a: None)
    assert len(no_token) == 1 and "HF_TOKEN" in no_token[0] and "\n" not in no_token[0]
    refused = preflight.check_gated(paper, token=lambda: "hf_x", access=lambda m, r, t: "GatedRepoError: 403")
    assert len(refused) == 1 and "google/gemma-3-4b-it" in refused[0] and "403" in refused[0]
    assert preflight.check_gated(paper, token=lambda: "hf_x", access=lambda m, r, t: None) == []

    class Usage:
        free = 10e9

    disk = preflight.check_disk(paper, cache=tmp_path, disk_usage=lambda p: Usage())
    assert len(disk) == 1 and "GB of weights" in disk[0]
    Usage.free = 1e12
    assert preflight.check_disk(paper, cache=tmp_path, disk_usage=lambda p: Usage()) == []
    assert preflight.check_memory(paper) == []  # every model fits at its context on 80 GB and on the L40S
    big = load_profile("paper", {"models": [{"label": "Q", "engine": "vllm", "model": "Qwen/Qwen3-8B",
                                             "options": {"max_model_len": 1_000_000, "gpu_memory_utilization": 0.8}}],
                                 "retrieval_models": ["Q"], "icl_models": ["Q"]})
    memory = preflight.check_memory(big, gpu_kind="H100")
    assert len(memory) == 1 and "1,000,000 tokens" in memory[0]
    api = preflight.check_api(paper, environ={})
    assert len(api) == 6 and all("\n" not in line for line in api)


def test_rehearsal_engine_logs_and_overflows(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(LOG_ENVIRONMENT, str(log))
    engine = RehearsalEngine("Qwen/Qwen3-8B", label="Qwen3-8B", context=100,
                             questions={"math500": {"test": ["What is 2+2?"]}})
    short = Request(({"role": "user", "content": "Solve: What is 2+2? \\boxed{}"},), SamplingParams(max_tokens=50))
    long = Request(({"role": "user", "content": "x" * 1000},), SamplingParams(max_tokens=50))
    first, second = engine.generate([short, long])
    assert second.cut == "context_overflow" and second.completion_tokens == 0
    assert first.completion_tokens >= 1 and "\\boxed" in first.text
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["benchmark"], r["split"]) for r in rows] == [("math500", "test"), (None, None)]
    assert rows[1]["prompt_tokens"] == 1000 // 4 + 4 and rows[0]["max_tokens"] == 50
    assert reply_lengths("Qwen/Qwen3-4B-Instruct-2507").thinking is False  # the memory model does not think
    assert reply_lengths("Qwen/Qwen3-8B").thinking is True
    assert "rehearsal" not in paper_run.throughput.GPUS  # (the engine is unlisted but buildable)
    with make_engine("rehearsal", model="google/gemma-3-4b-it", context=131072) as built:
        assert built.generate([short])[0].completion_tokens > 0


@pytest.mark.slow
def test_rehearsal_of_notebooks_01_02(tmp_path):
    """The rehearsal through the runner: exits 0, labels every artifact, banks built by the memory model."""
    done = subprocess.run([sys.executable, "-m", "r2mad_lab.reproduce", "--profile", "paper", "--rehearse",
                           "--only", "01,02", "--output-dir", str(tmp_path)], cwd=REPOSITORY, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    part = Path("paper-rehearsal") / "variants" / "notebooks=01+02"  # a part goes where variants go
    figures = tmp_path / "figures" / part
    manifest = json.loads((figures / "MANIFEST.json").read_text())
    assert manifest["artifacts"] and not (tmp_path / "figures" / "paper").exists()
    assert all("REHEARSAL" in r["caption"] and r["rehearsal"]["of_profile"] == "paper"
               for r in manifest["artifacts"].values())
    record = json.loads((figures / "REHEARSAL.json").read_text())
    assert record["complete"] is False and record["rehearsed_notebooks"] == ["01", "02"]
    banks = list((tmp_path / "runs" / part).rglob("memory-*/manifest.json"))
    assert len(banks) == 4 and {json.loads(p.read_text())["model"] for p in banks} == {"Qwen/Qwen3-4B-Instruct-2507"}
    rows = [json.loads(line) for line in (tmp_path / "runs" / part / "requests.jsonl").read_text().splitlines()]
    assert rows and {r["label"] for r in rows} == {"Qwen3-4B-Instruct-2507"} and {r["split"] for r in rows} == {"train"}


def _faked_rehearsal(out: Path, paper) -> None:
    """A small faked rehearsal: its log and summary where `--rehearse` writes them."""
    runs = out / "runs" / "paper-rehearsal"
    runs.mkdir(parents=True)
    rows = [_row(label, model, "truthfulqa", "test", 1200, 400) for label, model in paper_run.gpu_models(paper).items()]
    rows.append(_row("GPT-4o-mini", "GPT-4o-mini", "truthfulqa", "test", 1200, 400, context=None))
    (runs / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures = out / "figures" / "paper-rehearsal"
    figures.mkdir(parents=True)
    notebooks = sorted((REPOSITORY / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    (figures / "REHEARSAL.json").write_text(json.dumps({
        "test_limit": 2, "train_limit": 4, "complete": True, "rehearsed_notebooks": "all",
        "inputs": rehearsal.inputs(paper, notebooks)}))


def _computed_once(function):
    """``function`` with each result kept, by the repr of its arguments, and a copy of the list handed out."""
    results: dict[str, list] = {}

    def once(*args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in results:
            results[key] = function(*args, **kwargs)
        return list(results[key])

    return once


def test_estimate_only_reads_the_rehearsal_log_and_a_calibration(paper, tmp_path, capsys, monkeypatch):
    from r2mad_lab import reproduce
    from r2mad_lab.report import power

    # Both estimates end with the paper profile's power lines, the same pure function of the same profile (solving for
    # 29 claims' MDEs, ~0.7 s of CPU; tests/report/test_power.py tests them): the second estimate prints the first's.
    monkeypatch.setattr(power, "claims_power_lines", _computed_once(power.claims_power_lines))
    _faked_rehearsal(tmp_path, paper)
    assert reproduce.main(["--profile", "paper", "--estimate-only", "--gpus", "8", "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "measured" not in printed.lower()
    # truthfulqa: 166 test questions over the 2 rehearsed -> each request counts 83 times
    assert "Qwen3-8B (Qwen/Qwen3-8B, GPU): rehearsal 1 requests" in printed and "scaled: 83 requests" in printed
    assert "on 8 GPUs: wall-clock" in printed and "not in the rehearsal's log" in printed  # Llama is absent
    cache = tmp_path / "cache" / "paper"
    cache.mkdir(parents=True)
    (cache / calibrate.FILE_NAME).write_text(json.dumps({"models": {"Qwen3-8B": {
        "tokens_per_s": 83 * 400 / 3600.0, "gpu_kind": "A100-80GB", "device": "NVIDIA A100-SXM4-80GB",
        "when": "now"}}}))
    assert reproduce.main(["--profile", "paper", "--estimate-only", "--output-dir", str(tmp_path)]) == 0
    measured = [line for line in capsys.readouterr().out.splitlines() if "measured" in line]
    assert measured == [
        "    A100-80GB: 1.0 GPU-hours at 9 tokens/s, measured on NVIDIA A100-SXM4-80GB by --calibrate (now)"]


def test_a_real_gpu_run_stops_at_the_preflight(tmp_path, capsys, monkeypatch):
    from r2mad_lab import reproduce

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(preflight, "hub_token", lambda: None)
    # what calibrate.cuda_device() finds on a machine without a GPU, without importing torch for it (2 s of CPU)
    monkeypatch.setattr(preflight, "cuda_report", lambda: "CUDA sees no GPU")
    assert reproduce.main(["--profile", "paper", "--output-dir", str(tmp_path)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("preflight: ")]
    assert any("HF_TOKEN" in line for line in lines) and any("R2MAD_LLAMA_MODEL" in line for line in lines)
    assert not (tmp_path / "notebooks").exists()  # nothing ran


def test_the_grid_keeps_enough_requests_in_flight_for_several_replicas(tmp_path):
    from r2mad_lab.experiments.model_specs import ModelSpec
    from r2mad_lab.reproduce.grid import STREAMING_WINDOW, ExperimentGrid

    exp = ExperimentGrid.from_profile(load_profile("tiny"), runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache")
    eight = ModelSpec("Q", "openai", "Qwen/Qwen2.5-7B-Instruct", {"max_concurrency": 1536})  # 192 in flight x 8 GPUs
    assert exp.schedule(eight) == {"schedule": "questions", "window": 1536 // 3}
    one = ModelSpec("Q", "openai", "Qwen/Qwen2.5-7B-Instruct", {"max_concurrency": 8})
    assert exp.schedule(one)["window"] == STREAMING_WINDOW
    exp.close()


def test_the_rehearsal_fails_on_a_prompt_over_a_context(paper, tmp_path):
    """A faked runner (no notebooks): a logged overflow is one failure line naming the model, exit 1."""
    import os

    from r2mad_lab.reproduce.command import NotebookResult, ReproductionPaths

    def run(profile, paths):
        assert profile.name == "paper-rehearsal" and all(m.engine == "rehearsal" for m in profile.spec.models)
        row = _row("Qwen3-8B", "Qwen/Qwen3-8B", "math500", "test", 41000, 0, cut="context_overflow", context=40960)
        Path(os.environ[LOG_ENVIRONMENT]).write_text(json.dumps(row) + "\n")
        return [NotebookResult("01_data", 0.1, paths.executed_dir / "01_data.ipynb", None)]

    said = []
    code = rehearsal.rehearse(paper, tmp_path, run=run,
                              paths_of=lambda out, name, data=None: ReproductionPaths(out, name),
                              only=["01"], echo=said.append)
    assert code == 1
    assert [line for line in said if "FAILED" in line] == [
        "rehearse: FAILED: Qwen3-8B: 1 of 1 prompts over its context of 40,960 tokens (longest 41,000): the real run "
        "would answer them empty"]
    assert not (tmp_path / "figures" / "paper").exists()
