"""reproduce: every profile against its purpose (paper: the paper's hyperparameters), the validator's
messages, notebook discovery, and the papermill runner on small hand-made notebooks."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from r2mad_core.data.benchmarks import BENCHMARKS
from r2mad_core.memory.retrieval import parse_retrieval_policy
from r2mad_lab.experiments import profile_schema
from r2mad_lab.experiments.profile_schema import PROTOCOL_FIELDS, ProfileSpec, validate_profile
from r2mad_lab.experiments.profiles import ProfileError, load_profile, parse_override, profile_names
from r2mad_lab.report.comparison import load_reported_results
from r2mad_lab.reproduce import ReproductionPaths, api_budget, discover_notebooks, run_notebooks
from r2mad_lab.reproduce import command as reproduce

PAPER_MODELS = ["Qwen2.5-7B-Instruct", "Qwen3-8B", "Gemma-3-4B-IT"]
PAPER_POLICIES = {
    "random", "similarity", "positive_only", "diversity_only",
    "fixed_lambda:0.25", "fixed_lambda:0.5", "fixed_lambda:0.75", "state_aware",
}


def test_the_five_profiles_ship_and_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_API_MODEL", "some-model")
    assert profile_names() == ["api", "cpu", "paper", "sim", "tiny"]
    for name in profile_names():
        profile = load_profile(name)
        assert profile.name == name
        assert set(profile.fields) - set(profile_schema.OPTIONAL_FIELDS) == set(profile_schema.TOP_LEVEL_FIELDS)


def test_api_profile_is_the_papers_protocol_on_a_subset_with_the_model_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("R2MAD_API_MODEL", raising=False)
    with pytest.raises(ProfileError,
                       match=r"field 'models\[0\]\.model' uses \$\{R2MAD_API_MODEL\}, but the environment "
                       r"variable R2MAD_API_MODEL is not set"):
        load_profile("api")
    monkeypatch.setenv("R2MAD_API_MODEL", "gpt-4o-mini")
    p = load_profile("api")
    paper = load_profile("paper")
    for key in ("n_agents", "n_rounds", "temperature", "top_p", "max_tokens", "summary_max_tokens",
                "max_experience_chars", "protocol", "gamma", "w_high", "w_low", "sc_paths", "retrieval_policies",
                "benchmarks", "poison_fractions", "cost_benchmark"):
        assert p[key] == paper[key], key
    assert (p["test_limit"], p["train_limit"]) == (20, 40)
    assert p["api_budget"] is True
    [model] = p["models"]
    # the model is named by its variable in every record (issue 51: never its value); the engine reads the value, and a
    # digest of it is part of every run key
    assert (model["label"], model["model"], model["engine"]) == ("API-model", "${R2MAD_API_MODEL}", "openai")
    assert (model["base_url_env"], model["api_key_env"]) == ("R2MAD_API_BASE_URL", "R2MAD_API_KEY")
    assert [e["stand_in"] for e in p["large_models"]] == ["API-model", "API-model"]
    assert p["retrieval_models"] == p["icl_models"] == ["API-model"]
    from r2mad_lab.experiments.model_specs import ModelSpec

    monkeypatch.setenv("R2MAD_API_BASE_URL", "http://127.0.0.1:9/v1")
    spec = ModelSpec.from_entry(model)
    before = spec.describe()
    assert spec.resolved()[0] == "gpt-4o-mini" and "gpt-4o-mini" not in repr(before)
    monkeypatch.setenv("R2MAD_API_MODEL", "another-model")  # another model under the same variable: other run folders
    assert spec.describe()["model_digest"] != before["model_digest"]


def test_api_endpoints_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_API_MODEL", "m")
    monkeypatch.delenv("R2MAD_API_BASE_URL", raising=False)
    profile = load_profile("api")
    with pytest.raises(ProfileError, match="R2MAD_API_BASE_URL is not set"):
        api_budget.guarded_endpoints(profile)
    monkeypatch.setenv("R2MAD_API_BASE_URL", "http://a:1/v1, http://b:2/v1")
    assert api_budget.guarded_endpoints(profile) == {"R2MAD_API_BASE_URL": ["http://a:1/v1", "http://b:2/v1"]}
    assert api_budget.guarded_endpoints(load_profile("sim")) == {}


def test_default_profile_is_the_simulated_one_and_says_so() -> None:
    assert reproduce.build_parser().parse_args([]).profile == "sim"
    lines = reproduce.banner(load_profile("sim"))
    assert lines[0] == ("reproduce: profile sim: the agents are SIMULATED (r2mad_core.theory.agents: "
                        "latent-concept agents with shared misconceptions, no language model).")
    assert "not any LLM's accuracy" in lines[1]
    assert "PROFILE=cpu" in lines[2] and "PROFILE=api" in lines[2] and "PROFILE=paper" in lines[2]
    assert reproduce.banner(load_profile("cpu")) == [
        "reproduce: profile cpu: agents = SmolLM2-135M-Instruct (local engine, model the packaged default model, "
        "re-quantized to Q8_0, stands in for Qwen2.5-7B-Instruct)"
    ]
    makefile = (reproduce.REPOSITORY / "Makefile").read_text()
    assert "\nPROFILE ?= sim\n" in makefile


def test_paper_profile_has_the_papers_hyperparameters() -> None:
    p = load_profile("paper")
    # Appendix A "Model Configuration" and "Debate and Retrieval Procedure"
    assert (p["n_agents"], p["n_rounds"]) == (3, 3)
    assert p["temperature"] == 1.0 and p["top_p"] == 1.0
    assert p["max_tokens"] == 6144 and p["summary_max_tokens"] == 6144
    assert p["max_experience_chars"] is None  # experiences in full
    assert p["gamma"] == 0.9 and "top_k" not in p.fields and p.spec.choices["top_k"] == 1  # K: the preset's
    assert p["protocol"] == "paper" and p["memory_model"] == "Qwen3-4B-Instruct-2507"  # the authors' memory model
    assert (p["w_low"], p["w_high"]) == (0.45, 0.55)
    assert p["embedder"] == "bge-m3"
    # full splits, all four benchmarks
    assert p["test_limit"] is None and p["train_limit"] is None
    assert p["benchmarks"] == list(BENCHMARKS)
    # three open models, locally with vLLM
    assert [m["label"] for m in p["models"]] == PAPER_MODELS
    assert {m["engine"] for m in p["models"]} == {"vllm"}
    assert [m["model"] for m in p["models"]] == ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-8B", "google/gemma-3-4b-it"]
    assert all("stands_in_for" not in m for m in p["models"])
    # Appendix C.6: the larger models through OpenAI-compatible APIs configured from the environment
    assert [m["label"] for m in p["large_models"]] == ["Llama-3.3-70B-Instruct", "GPT-4o-mini"]
    for entry in p["large_models"]:
        assert entry["engine"] == "openai" and "stand_in" not in entry
        assert entry["model_env"].startswith("R2MAD_") and entry["base_url_env"].startswith("R2MAD_")
    # Table 5 (SC paths), Table 3 (retrieval ablation on Qwen2.5/Gemma x Economics/TruthfulQA),
    # Table 8 (ICL-CoT, same cells), Table 10 (cost on Economics)
    assert p["sc_paths"] == [3, 6, 9]
    assert set(p["retrieval_policies"]) == PAPER_POLICIES and len(p["retrieval_policies"]) == 8
    assert p["retrieval_models"] == ["Qwen2.5-7B-Instruct", "Gemma-3-4B-IT"]
    assert p["retrieval_benchmarks"] == ["mmlu_pro_economics", "truthfulqa"]
    assert p["icl_models"] == ["Qwen2.5-7B-Instruct", "Gemma-3-4B-IT"]
    assert p["icl_benchmarks"] == ["mmlu_pro_economics", "truthfulqa"]
    assert p["cost_benchmark"] == "mmlu_pro_economics"
    # GPU-hours, stated in the file: the --estimate-only range's H100 upper end (20.6 GPU-hours on 2026-11-25),
    # not a guess
    assert 12 * 60 < p["expected_runtime_minutes"] < 24 * 60 and "estimate-only" in p["expected_runtime"]


def test_paper_profile_models_are_the_models_of_the_reported_results() -> None:
    reported_models = set(load_reported_results()["model"])
    paper = load_profile("paper")
    for entry in [*paper["models"], *paper["large_models"]]:
        assert entry["label"] in reported_models
    for name in ("cpu", "sim", "tiny"):
        for entry in load_profile(name)["models"]:
            assert entry["stands_in_for"] in reported_models  # the comparison needs a paper model


def test_small_profiles_keep_the_debate_shape_and_stand_in_for_the_large_models() -> None:
    for name in ("cpu", "sim", "tiny"):
        p = load_profile(name)
        assert (p["n_agents"], p["n_rounds"], p.spec.choices["top_k"], p["gamma"]) == (3, 3, 1, 0.9)
        assert (p["w_low"], p["w_high"]) == (0.45, 0.55)
        assert [e["label"] for e in p["large_models"]] == ["Llama-3.3-70B-Instruct", "GPT-4o-mini"]
        labels = {m["label"] for m in p["models"]}
        assert all(e["stand_in"] in labels for e in p["large_models"])
        # cpu: the paper's comparison only (the other six policies cost 14 minutes of its run; said in cpu.yaml)
        assert set(p["retrieval_policies"]) == (PAPER_POLICIES if name != "cpu" else {"similarity", "state_aware"})
    cpu = load_profile("cpu")
    assert [m["engine"] for m in cpu["models"]] == ["local"] and cpu["embedder"] == "minilm"
    assert 1 <= cpu["test_limit"] <= 10 and cpu["max_tokens"] <= 256
    sim = load_profile("sim")
    assert sim["models"][0]["engine"] == "simulated" and sim["test_limit"] is None and sim["train_limit"] is None
    tiny = load_profile("tiny")
    assert tiny["models"][0]["engine"] == "simulated" and tiny["embedder"].startswith("hashing")
    assert tiny["test_limit"] <= 5 and tiny["train_limit"] <= 10


def _paper_fields() -> dict:
    return yaml.safe_load((reproduce.REPOSITORY / "r2mad_lab" / "profiles" / "paper.yaml").read_text())


def test_profile_schema_types_the_fields_and_derives_the_protocol_vocabularies() -> None:
    from r2mad_core import methods
    from r2mad_core.data import benchmarks
    from r2mad_core.debate import loop as debate
    from r2mad_core.debate import prompts
    from r2mad_core.memory import hook as r2mad
    from r2mad_lab.experiments import protocol

    # each protocol vocabulary is the one its concept's module defines (no second copy to drift)
    assert PROTOCOL_FIELDS["round0"] is debate.ROUND0_MODES
    assert PROTOCOL_FIELDS["experience_reference"] is r2mad.EXPERIENCE_REFERENCES
    assert PROTOCOL_FIELDS["task_prompt"] is prompts.TASK_PROMPT_WORDINGS
    assert PROTOCOL_FIELDS["split_rule"] is benchmarks.SPLIT_RULES
    assert PROTOCOL_FIELDS["objective_keep"] is methods.OBJECTIVE_KEEP
    spec = load_profile("paper").spec
    assert isinstance(spec, ProfileSpec)
    assert (spec.n_agents, spec.n_rounds, spec.max_tokens, spec.models[1].label) == (3, 3, 6144, "Qwen3-8B")
    # a choice the profile leaves out is None and takes the value of the profile's protocol preset
    assert "round0" not in load_profile("sim").fields and load_profile("sim").spec.round0 is None
    assert load_profile("sim").spec.choices["round0"] == "independent"
    assert {name: getattr(spec, name) for name in PROTOCOL_FIELDS} == dict.fromkeys(PROTOCOL_FIELDS)
    assert {name: spec.choices[name] for name in PROTOCOL_FIELDS} == {
        name: value for name, value in protocol.preset("paper").items() if name in PROTOCOL_FIELDS}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"top_p": 0}, "field 'top_p': expected a number > 0.0, found 0"),
        ({"n_agents": "3"}, "field 'n_agents': expected an integer, found '3'"),
        ({"n_rounds": True}, "field 'n_rounds': expected an integer, found True"),
        ({"w_low": 0.6}, "field 'w_low': expected a value <= w_high (0.55), found 0.6"),
        ({"gamma": 1.5}, "field 'gamma': expected a number <= 1.0, found 1.5"),
        ({"sc_paths": [9, 3]}, "field 'sc_paths': expected an increasing list of distinct path counts, found [9, 3]"),
        ({"benchmarks": ["math500", "gsm8k"]}, "field 'benchmarks': expected benchmark ids"),
        ({"retrieval_policies": ["state_aware", "fixed_lambda"]}, "fixed_lambda needs a value"),
        ({"retrieval_policies": ["random"]}, "a list containing state_aware"),
        ({"retrieval_models": ["Llama"]}, "field 'retrieval_models': expected model labels"),
        ({"cost_benchmark": "truthfulqa", "benchmarks": ["math500"]}, "field 'cost_benchmark'"),
        ({"test_limit": 0}, "field 'test_limit': expected a number >= 1, found 0"),
        ({"tempreature": 1.0}, "field 'tempreature': expected a known field"),
        ({"round0": "paired"}, "field 'round0': expected 'shared' or 'independent', found 'paired'"),
        ({"protocol": "ours"}, "field 'protocol': expected 'paper' or 'authors', found 'ours'"),
        ({"memory_model": "GPT"}, "field 'memory_models': expected a list holding memory_model 'GPT'"),
        ({"description": "  "}, "field 'description': expected a non-empty string, found '  '"),
        ({"temperature": float("inf")}, "field 'temperature'"),
        ({"extra_parameters": {"gamma": 1}}, "field 'extra_parameters.gamma'"),
    ],
)
def test_validation_names_file_field_expected_and_found(change: dict, message: str) -> None:
    data = _paper_fields()
    data.update(change)
    errors = validate_profile(data, "my.yaml")
    assert any(message in e for e in errors), errors
    assert all(e.startswith("my.yaml: ") for e in errors)


def test_validation_of_model_entries() -> None:
    data = _paper_fields()
    data["models"][0]["engine"] = "tensorrt"
    del data["models"][1]["model"]
    data["large_models"][0] = {"label": "Llama", "stand_in": "nobody"}
    data["large_models"][1]["extra"] = 1
    errors = "\n".join(validate_profile(data, "p.yaml"))
    assert "field 'models[0].engine': expected 'local', 'openai', 'vllm' or 'simulated', found 'tensorrt'" in errors
    assert "field 'models[1].model': expected a model name (engine vllm needs one), found None" in errors
    assert "field 'large_models[1].extra': expected a known field" in errors
    # once the entries themselves are valid, the stand-in must name a models entry
    data = _paper_fields()
    data["large_models"][0] = {"label": "Llama", "stand_in": "nobody"}
    assert validate_profile(data, "p.yaml") == [
        "p.yaml: field 'large_models': expected large_models[0].stand_in to be the label of a models entry "
        "(['Qwen2.5-7B-Instruct', 'Qwen3-8B', 'Gemma-3-4B-IT']), not 'nobody', found " + repr(data["large_models"])
    ]
    missing = _paper_fields()
    del missing["seed"]
    assert validate_profile(missing, "p.yaml") == ["p.yaml: field 'seed' is missing"]
    assert validate_profile([1, 2], "p.yaml") == ["p.yaml: expected a mapping of fields at the top level, found list"]


def test_load_profile_from_a_path_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(_paper_fields()))
    profile = load_profile(path, {"top_k": 5, "num_trials": 10}, extra_keys={"num_trials"})  # a notebook declares it
    assert profile.name == "mine" and profile["top_k"] == 5
    assert profile["extra_parameters"] == {"num_trials": 10}
    params = profile.parameters({"figures_dir": tmp_path / "f", "data_dir": None})
    assert params["profile"] == "mine" and params["num_trials"] == 10 and params["top_k"] == 5
    assert params["figures_dir"] == str(tmp_path / "f") and "extra_parameters" not in params
    with pytest.raises(ProfileError, match="field 'top_k': expected a number >= 1, found 0"):
        load_profile(path, {"top_k": 0})
    with pytest.raises(ProfileError, match="unknown key 'num_trials'"):  # declared by no notebook nor the profile
        load_profile(path, {"num_trials": 10})
    with pytest.raises(ProfileError,
                       match=r"unknown profile 'gpu': expected one of \['api', 'cpu', 'paper', 'sim', 'tiny'\]"):
        load_profile("gpu")
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    with pytest.raises(ProfileError, match="broken.yaml: not valid YAML"):
        load_profile(tmp_path / "broken.yaml")


def test_parse_override_and_policy() -> None:
    assert parse_override("top_k=5") == ("top_k", 5)
    assert parse_override("benchmarks=[math500, truthfulqa]") == ("benchmarks", ["math500", "truthfulqa"])
    assert parse_override("test_limit=null") == ("test_limit", None)
    with pytest.raises(ProfileError, match="expected KEY=VALUE"):
        parse_override("top_k")
    assert parse_retrieval_policy("fixed_lambda:0.25") == ("fixed_lambda", 0.25)
    assert parse_retrieval_policy("state_aware") == ("state_aware", None)
    with pytest.raises(ValueError, match="only fixed_lambda takes a value"):
        parse_retrieval_policy("random:3")
    with pytest.raises(ValueError, match="lambda must be in"):
        parse_retrieval_policy("fixed_lambda:2")


def _notebook(path: Path, parameters: str, body: list[str]) -> None:
    import nbformat  # where used, not at the top: every `make test` worker collects this module (~0.2 s to import)

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(parameters)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# test"), cell, *[nbformat.v4.new_code_cell(s) for s in body]]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_discover_notebooks_in_order_and_only(tmp_path: Path) -> None:
    for name in ("02_b.ipynb", "01_a.ipynb", "10_c.ipynb", "notes.ipynb"):
        _notebook(tmp_path / name, "x = 1", [])
    assert [p.name for p in discover_notebooks(tmp_path)] == ["01_a.ipynb", "02_b.ipynb", "10_c.ipynb"]
    assert [p.name for p in discover_notebooks(tmp_path, ["10", "1"])] == ["01_a.ipynb", "10_c.ipynb"]
    assert [p.name for p in discover_notebooks(tmp_path, ["02_b"])] == ["02_b.ipynb"]
    with pytest.raises(FileNotFoundError, match="--only '07': no such notebook"):
        discover_notebooks(tmp_path, ["07"])


def test_runner_passes_the_profile_its_overrides_and_paths_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    import nbformat

    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    _notebook(notebooks / "01_ok.ipynb", 'profile = "x"\noverrides = {}\nfigures_dir = ""',
              ["from pathlib import Path\n"
               "Path(figures_dir, 'seen.txt').write_text(f'{profile} {overrides}')"])
    _notebook(notebooks / "02_fails.ipynb", "overrides = {}",
              ["a = 1", "raise ValueError(f'bad top_k {overrides[\"top_k\"]}')"])
    _notebook(notebooks / "03_never.ipynb", "seed = 0", ["open('never-ran', 'w')"])
    profile = load_profile("tiny", {"top_k": 2})
    paths = ReproductionPaths(tmp_path / "out", profile.name)
    lines: list[str] = []
    results = run_notebooks(profile, paths, notebooks_dir=notebooks, echo=lines.append)
    assert [r.notebook for r in results] == ["01_ok", "02_fails"]
    assert (paths.figures_dir / "seen.txt").read_text() == "tiny {'top_k': 2}"  # the profile and its overrides
    assert results[0].error is None
    failure = results[1].error
    assert "cell 4 of the executed notebook (execution count 4)" in failure
    assert "ValueError: bad top_k 2" in failure and "raise ValueError(f'bad top_k" in failure
    assert any("02_fails FAILED" in line for line in lines)
    assert not any("03_never" in line for line in lines) and not (notebooks / "never-ran").exists()
    executed = nbformat.read(paths.executed_dir / "01_ok.ipynb", 4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1
    # the runner's few names, nothing copied field by field from the profile
    assert "gamma" not in injected[0].source and 'overrides = {"top_k": 2}' in injected[0].source
    assert {line.split(" = ")[0] for line in injected[0].source.splitlines() if " = " in line} == {
        "profile", "overrides", "data_dir", "figures_dir", "runs_dir", "cache_dir"}
    timings = json.loads((paths.executed_dir / "timings.json").read_text())
    assert timings["01_ok"]["succeeded"] is True and timings["02_fails"]["succeeded"] is False


def _after(path: Path, names: list[str] | None) -> None:
    import nbformat

    nb = nbformat.read(path, 4)
    if names is not None:
        nb.metadata["r2mad"] = {"after": names}
    nbformat.write(nb, path)


def test_notebooks_run_two_at_a_time_each_after_the_notebooks_it_names(tmp_path: Path) -> None:
    """01 and 02 need nothing and meet each other (each waits for the other's file: run one after the other, the
    first would give up), 03 needs 01 only, 04 names nothing and so needs every notebook before it."""
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    meet = ("import time\nfrom pathlib import Path\nPath(figures_dir, '{mine}').write_text('here')\n"
            "deadline = time.monotonic() + 60\n"
            "while not Path(figures_dir, '{other}').exists():\n"
            "    assert time.monotonic() < deadline, 'the other notebook never ran at the same time'\n"
            "    time.sleep(0.05)")
    _notebook(notebooks / "01_a.ipynb", 'figures_dir = ""', [meet.format(mine="a", other="b")])
    _notebook(notebooks / "02_b.ipynb", 'figures_dir = ""', [meet.format(mine="b", other="a")])
    _notebook(notebooks / "03_c.ipynb", 'figures_dir = ""',
              ["from pathlib import Path\nassert Path(figures_dir, 'a').exists()\n"
               "Path(figures_dir, 'c').write_text('')"])
    _notebook(notebooks / "04_d.ipynb", 'figures_dir = ""',
              ["from pathlib import Path\nassert all(Path(figures_dir, n).exists() for n in 'abc')"])
    _after(notebooks / "01_a.ipynb", [])
    _after(notebooks / "02_b.ipynb", [])
    _after(notebooks / "03_c.ipynb", ["01_a"])
    profile = load_profile("tiny")
    paths = ReproductionPaths(tmp_path / "out", profile.name)
    lines: list[str] = []
    results = run_notebooks(profile, paths, notebooks_dir=notebooks, echo=lines.append, jobs=2)
    assert [r.error for r in results] == [None] * 4, [r.error for r in results]
    assert sorted(r.notebook for r in results) == ["01_a", "02_b", "03_c", "04_d"]
    assert results[-1].notebook == "04_d"
    assert any("; 4 notebooks, 2 at a time;" in line for line in lines)
    assert lines[-1].startswith("reproduce: all 4 notebooks ran in")
    assert set(json.loads((paths.executed_dir / "timings.json").read_text())) == {"01_a", "02_b", "03_c", "04_d"}


def test_after_a_failure_nothing_new_starts_and_the_failure_is_returned_last(tmp_path: Path) -> None:
    """Scheduling, with a fake runner (no kernel: how fast one starts on a loaded machine is not under test).
    01 fails while 02 is running; 02 finishes only after 01 failed, and 03 never starts; then the same through
    ``reproduce`` with real kernels: exit code 1."""
    import threading

    from r2mad_lab.reproduce.notebook_runner import NotebookResult, run_workers

    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    _notebook(notebooks / "01_fails.ipynb", "seed = 0", ["raise RuntimeError('broken')"])
    _notebook(notebooks / "02_slow.ipynb", 'figures_dir = ""', ["pass"])
    _notebook(notebooks / "03_never.ipynb", 'figures_dir = ""', ["pass"])
    for name in ("01_fails", "02_slow", "03_never"):
        _after(notebooks / f"{name}.ipynb", [])
    started: list[str] = []
    slow_started, failure_finished = threading.Event(), threading.Event()

    def run_one(notebook: Path, kernel: object, clear: bool) -> NotebookResult:
        started.append(notebook.stem)
        if notebook.stem == "01_fails":
            assert slow_started.wait(60)  # both run at once
            return NotebookResult(notebook.stem, 0.0, notebook, "RuntimeError: broken")
        if notebook.stem == "02_slow":
            slow_started.set()
            assert failure_finished.wait(60)  # still running when 01 fails
        return NotebookResult(notebook.stem, 0.0, notebook)

    def on_finish(notebook: Path, result: NotebookResult) -> None:
        if result.error:
            failure_finished.set()

    results = run_workers(sorted(notebooks.glob("*.ipynb")), run_one, jobs=2, on_finish=on_finish)
    assert [r.notebook for r in results] == ["02_slow", "01_fails"]  # the one running finished; the failure last
    assert "RuntimeError: broken" in results[-1].error and results[0].error is None
    assert sorted(started) == ["01_fails", "02_slow"]  # 03 never started
    assert reproduce.main(["--profile", "tiny", "--notebooks-dir", str(notebooks), "--jobs", "2",
                           "--output-dir", str(tmp_path / "cli")]) == 1


def test_a_worker_reuses_its_kernel_cleared_and_shuts_it_down_at_the_end(tmp_path: Path) -> None:
    """One worker, kernels reused: 02 and 03 run in 01's kernel (same process) with nothing of 01 left: no
    variable, the execution count from 1, matplotlib's settings and open figures as in a fresh kernel. 03 fails:
    the run stops and the kernel is shut down. With fresh kernels every notebook has its own process."""
    import nbformat

    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    pid = "import os\nfrom pathlib import Path\nPath(figures_dir, '{name}').write_text(str(os.getpid()))"
    _notebook(notebooks / "01_dirty.ipynb", 'figures_dir = ""', [
        pid.format(name="01"),
        "import matplotlib as mpl, matplotlib.pyplot as plt\nleft_behind = 42\nmpl.rcParams['lines.linewidth'] = 9.0\n"
        "figure = plt.figure()"])
    _notebook(notebooks / "02_clean.ipynb", 'figures_dir = ""', [
        pid.format(name="02"),
        "assert 'left_behind' not in globals() and 'figure' not in globals()\n"
        "import matplotlib as mpl, matplotlib.pyplot as plt\n"
        "assert mpl.rcParams['lines.linewidth'] == 1.5, mpl.rcParams['lines.linewidth']\n"
        "assert plt.get_fignums() == []"])
    _notebook(notebooks / "03_fails.ipynb", 'figures_dir = ""', [pid.format(name="03"), "raise ValueError('no')"])
    _notebook(notebooks / "04_never.ipynb", 'figures_dir = ""', [pid.format(name="04")])
    profile = load_profile("tiny")
    paths = ReproductionPaths(tmp_path / "out", profile.name)
    results = run_notebooks(profile, paths, notebooks_dir=notebooks, echo=lambda line: None, jobs=1, reuse_kernels=True)
    assert [(r.notebook, r.error) for r in results[:2]] == [("01_dirty", None), ("02_clean", None)], results
    assert results[2].notebook == "03_fails" and "ValueError: no" in results[2].error and len(results) == 3
    pids = {name: (paths.figures_dir / name).read_text() for name in ("01", "02", "03")}
    assert pids["01"] == pids["02"] == pids["03"]
    with pytest.raises(ProcessLookupError):  # shut down with the run
        os.kill(int(pids["01"]), 0)
    executed = nbformat.read(paths.executed_dir / "02_clean.ipynb", 4)
    assert [c.execution_count for c in executed.cells if c.cell_type == "code"] == [1, 2, 3, 4]  # parameters injected
    # the same notebooks with a kernel each: a process each
    fresh = ReproductionPaths(tmp_path / "fresh", profile.name)
    run_notebooks(profile, fresh, notebooks_dir=notebooks, echo=lambda line: None, jobs=1, reuse_kernels=False)
    assert len({(fresh.figures_dir / name).read_text() for name in ("01", "02", "03")}) == 3


def test_prerequisites_default_to_every_earlier_notebook_and_may_only_name_earlier_ones(tmp_path: Path) -> None:
    for name in ("01_a", "02_b", "03_c"):
        _notebook(tmp_path / f"{name}.ipynb", "seed = 0", [])
    found = discover_notebooks(tmp_path)
    assert reproduce.prerequisites(found[2], found) == set(found[:2])
    _after(tmp_path / "03_c.ipynb", ["02_b", "99_not_selected"])
    assert reproduce.prerequisites(found[2], found) == {found[1]}
    assert reproduce.prerequisites(found[2], [found[0], found[2]]) == set()  # --only 01,03: 02 is not run
    _after(tmp_path / "01_a.ipynb", ["03_c"])
    with pytest.raises(ValueError, match=r"01_a.ipynb: metadata r2mad.after names 03_c, which does not come before it"):
        reproduce.prerequisites(found[0], found)
    _after(tmp_path / "02_b.ipynb", "01_a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a list of notebook names, found '01_a'"):
        reproduce.prerequisites(found[1], found)


def test_the_repository_notebooks_name_what_they_need() -> None:
    """The notebooks that read 02's memory banks wait for it, except 04, the longest, which starts at once and
    waits under a bank's lock for the bank 02 is building (the grid); 01 and 08 need nothing; 10 (the report,
    which reads every artifact's manifest entry) waits for all."""
    found = discover_notebooks(reproduce.default_notebooks_dir())
    stems = {p.stem: p for p in found}
    needs = {p.stem: {q.stem for q in reproduce.prerequisites(p, found)} for p in found}
    assert needs["01_data"] == needs["02_memory"] == needs["04_ablations"] == needs["08_theory"] == set()
    for name in ("03_main_results", "05_baselines", "06_shared_misconception", "07_cost", "09_poisoned_memory"):
        assert needs[name] == {"02_memory"}, name
    assert needs["10_report"] == set(stems) - {"10_report"}


def test_default_jobs_runs_simulated_profiles_in_parallel_and_real_models_one_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reproduce.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert reproduce.default_jobs(load_profile("sim")) == 2
    assert reproduce.default_jobs(load_profile("tiny")) == 2
    monkeypatch.setattr(reproduce.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert reproduce.default_jobs(load_profile("sim")) == reproduce.MAX_DEFAULT_JOBS
    assert reproduce.default_jobs(load_profile("cpu")) == 1
    assert reproduce.default_jobs(load_profile("paper")) == 1
    monkeypatch.setenv("R2MAD_API_MODEL", "some-model")
    assert reproduce.default_jobs(load_profile("api")) == 1


def test_the_command_line_takes_jobs_and_fresh_kernels(tmp_path: Path) -> None:
    args = reproduce.build_parser().parse_args(["--jobs", "3", "--fresh-kernels"])
    assert args.jobs == 3 and args.fresh_kernels
    with pytest.raises(SystemExit):
        reproduce.build_parser().parse_args(["--jobs", "0"])


def test_main_reports_a_bad_profile_without_running(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = reproduce.main(["--profile", "tiny", "--set", "top_p=7", "--output-dir", str(tmp_path)])
    assert code == 2
    assert "tiny.yaml: field 'top_p': expected a number <= 1.0, found 7" in capsys.readouterr().err
    assert not (tmp_path / "figures").exists()


def test_the_kernel_says_nothing_of_its_own(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The kernel's start-up warning ("running over TCP without encryption") never reaches the console."""
    import nbformat

    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    _notebook(notebooks / "01_quiet.ipynb", "seed = 0", ["print('the notebook speaks')"])
    profile = load_profile("tiny")
    paths = ReproductionPaths(tmp_path / "out", profile.name)
    results = run_notebooks(profile, paths, notebooks_dir=notebooks, echo=lambda line: None)
    assert results[0].error is None
    captured = capfd.readouterr()
    assert "without encryption" not in captured.err + captured.out
    assert "the notebook speaks" in nbformat.read(paths.executed_dir / "01_quiet.ipynb", 4).cells[-1].outputs[0].text


def test_executed_notebooks_inside_the_repository_hold_no_machine_paths(tmp_path: Path) -> None:
    """Paths passed to notebooks inside the repository are relative to the notebook's folder, and papermill's
    input/output paths are relative to the repository: committed executed notebooks hold no machine paths."""
    import nbformat

    repository = reproduce.REPOSITORY
    notebooks = repository / "notebooks"
    scratch = Path(tempfile.mkdtemp(prefix=".test-paths-", dir=repository))
    try:
        source = notebooks / "99_paths_test.ipynb"
        _notebook(source, 'figures_dir = ""\nruns_dir = ""',
                  ["from pathlib import Path\nprint(Path(figures_dir).is_dir())"])
        try:
            profile = load_profile("tiny")
            paths = ReproductionPaths(scratch, profile.name)
            results = run_notebooks(profile, paths, notebooks_dir=notebooks, only=["99"], echo=lambda line: None)
        finally:
            source.unlink()
        assert results[0].error is None
        text = (paths.executed_dir / "99_paths_test.ipynb").read_text()
        assert str(repository) not in text
        executed = nbformat.read(paths.executed_dir / "99_paths_test.ipynb", 4)
        assert executed.metadata.papermill.input_path == "notebooks/99_paths_test.ipynb"
        assert executed.metadata.papermill.parameters["figures_dir"] == f"../{scratch.name}/figures/tiny"
        assert executed.cells[-1].outputs[0].text.strip() == "True"  # the relative path still finds the folder
    finally:
        shutil.rmtree(scratch)


def test_paper_profile_runs_each_model_at_its_native_context_and_pinned_revision() -> None:
    """Issue 22: native contexts (config.json max_position_embeddings) and Hub commits, cited in the file."""
    import re

    p = load_profile("paper")
    contexts = {m["label"]: m["options"]["max_model_len"] for m in p["models"]}
    assert contexts == {"Qwen2.5-7B-Instruct": 32768, "Qwen3-8B": 40960, "Gemma-3-4B-IT": 131072}
    for m in p["models"]:
        revision = m["options"]["revision"]
        assert re.fullmatch(r"[0-9a-f]{40}", revision), m["label"]
        assert f"https://huggingface.co/{m['model']}/commit/{revision}" in _paper_text()
    # the preset: the authors' code (src/models.py)
    assert "overflow_policy" not in p.fields and p.spec.choices["overflow_policy"] == "empty"


def _paper_text() -> str:
    return (reproduce.REPOSITORY / "r2mad_lab" / "profiles" / "paper.yaml").read_text()
