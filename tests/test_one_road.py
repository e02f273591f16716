"""Issue 30: one road from a profile to what runs.

The runner hands every notebook the profile, its overrides and paths (:func:`reproduce.notebook_parameters`); the
kernel loads the typed profile (:func:`notebook_setup.resolve_profile`) and builds its grid with
:meth:`ExperimentGrid.from_profile`, the constructor the rehearsal that ``--estimate-only`` scales runs too
(:func:`rehearsal.write_profile`: the profile with only :data:`rehearsal.REPLACED` changed). These
tests follow that road for every packaged profile and for an override of every profile field and protocol choice,
and check that the notebooks' grid is the estimate's, that the override reached it, and that what cannot be honoured
is refused before anything runs.
"""

from __future__ import annotations

import json
import shutil
import typing
from pathlib import Path
from typing import Any

import pytest

from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_lab.experiments.profile_schema import ProfileSpec
from r2mad_lab.experiments.profiles import load_profile, profile_names
from r2mad_lab.experiments.protocol import PROFILE_CHOICES
from r2mad_lab.report.artifacts import read_manifest, update_manifest
from r2mad_lab.reproduce import command as reproduce
from r2mad_lab.reproduce import notebook_setup, points
from r2mad_lab.reproduce.compare import variant as comparison
from r2mad_lab.reproduce.grid import ExperimentGrid
from r2mad_lab.reproduce.paper import rehearsal

PROFILES_DIR = reproduce.REPOSITORY / "r2mad_lab" / "profiles"


def notebooks_grid(profile: Any, out: Path) -> ExperimentGrid:
    """The grid a notebook kernel builds from exactly what the runner passes it."""
    paths = reproduce.ReproductionPaths(out, profile.folder)
    namespace = dict(reproduce.notebook_parameters(profile, paths))
    loaded, _ = notebook_setup.resolve_profile(namespace)
    return ExperimentGrid.from_profile(loaded, runs_dir=namespace["runs_dir"], cache_dir=namespace["cache_dir"],
                                       data_dir=namespace["data_dir"])


def comparable(settings: dict[str, Any], profile: Any) -> dict[str, Any]:
    """A grid's settings without what the estimate replaces on purpose (engines, sizes, the embedder); the models
    are the profile's evaluated ones (the estimate's grid also holds the large models it charges to notebook 03)."""
    labels = [m.label for m in profile.spec.models]
    kept = {k: v for k, v in settings.items() if k not in rehearsal.REPLACED}
    kept["models"] = [(m["label"], m["memory_built_by"]) for m in settings["models"] if m["label"] in labels]
    kept["memory_models"] = [m["label"] for m in settings["memory_models"]]
    return kept


def the_two_grids(profile: Any, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    mine = notebooks_grid(profile, tmp_path / "out").settings()
    rehearsed = rehearsal.write_profile(profile, tmp_path / "scratch")
    counted = ExperimentGrid.from_profile(rehearsed, runs_dir=tmp_path / "scratch" / "runs",
                                          cache_dir=tmp_path / "scratch" / "cache").settings()
    return mine, counted


@pytest.mark.parametrize("name", profile_names())
def test_every_packaged_profile_runs_the_grid_its_estimate_counts(name: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MAD_API_MODEL", "some-model")
    profile = reproduce.load_profile(name)
    mine, counted = the_two_grids(profile, tmp_path)
    assert comparable(mine, profile) == comparable(counted, profile)
    assert mine["test_limit"] == profile.spec.test_limit and mine["seed"] == profile.spec.seed


def test_the_paper_notebooks_build_every_bank_with_the_authors_memory_model(tmp_path: Path) -> None:
    """paper.yaml: one memory-only model (Qwen3-4B-Instruct-2507) builds the bank of every evaluated model, as the
    authors did; the notebooks' grid used to drop ``memory_model`` (each model built its own bank)."""
    grid = notebooks_grid(reproduce.load_profile("paper"), tmp_path)
    assert len(grid.models) == 3
    assert {m.label: grid.memory_spec(m).label for m in grid.models} == {
        m.label: "Qwen3-4B-Instruct-2507" for m in grid.models}


def _alternatives(base: Any) -> dict[str, Any]:
    """For every field of ProfileSpec an override of tiny that validates and differs from tiny's value."""
    spec = base.spec
    values: dict[str, Any] = {
        "description": "another", "expected_runtime": "an hour", "expected_runtime_replay": "a minute",
        "expected_runtime_minutes": 60,
        "models": [{"label": "Simulated", "engine": "simulated", "model": "another-sim"}],
        "large_models": [], "embedder": "minilm",
        "benchmarks": ["mmlu_pro_economics", "truthfulqa", "math500"], "test_limit": 3, "train_limit": 5, "seed": 7,
        "n_agents": 2, "n_rounds": 2, "temperature": 0.7, "top_p": 0.9, "max_tokens": 128, "summary_max_tokens": 32,
        "max_experience_chars": 300, "top_k": 2, "gamma": 0.5, "retrieval_policy": "fixed_lambda", "fixed_lambda": 0.25,
        "w_high": 0.6, "w_low": 0.4, "sc_paths": [3],
        "retrieval_policies": ["state_aware"], "retrieval_models": ["Simulated"],
        "retrieval_benchmarks": ["truthfulqa"],
        "icl_models": ["Simulated"], "icl_benchmarks": ["truthfulqa"], "cost_benchmark": "truthfulqa",
        "poison_fractions": [0.5], "poison_benchmarks": ["mmlu_pro_economics"], "bootstrap_resamples": 200,
        "extra_parameters": {"num_trials": 50}, "api_budget": True, "protocol": "authors",
        "memory_model": "Simulated", "memory_models": [{"label": "Builder", "engine": "simulated"}],
        "extra_methods": ["R2-MAD w/o Memory"],  # a row name (a row at its own K is a Row, not a label)
    }
    for name in ProfileSpec.model_fields:
        if name in values:
            continue
        vocabulary = typing.get_args(typing.get_args(ProfileSpec.model_fields[name].annotation)[0])
        resolved = spec.choices.get(name, getattr(spec, name))
        values[name] = next(v for v in vocabulary if v != resolved)  # a protocol choice: another value
    return values


#: Fields that shape the cells a grid runs, and where its settings show them.
GRID_PLACES = {
    "models": "models", "benchmarks": "benchmarks", "test_limit": "test_limit", "train_limit": "train_limit",
    "seed": "seed", "embedder": "embedder", "protocol": "protocol", "memory_model": "models",
    "memory_models": "memory_models", "bootstrap_resamples": "bootstrap_resamples",
    **{name: "debate" for name in ("n_agents", "n_rounds", "temperature", "top_p", "max_tokens", "summary_max_tokens")},
    **{name: "memory" for name in MEMORY_SPECS},  # every MemorySettings field is a profile field
    **{name: "choices" for name in PROFILE_CHOICES},
}

TINY = load_profile("tiny")
ALTERNATIVES = _alternatives(TINY)


def test_every_field_and_protocol_choice_has_an_override_here() -> None:
    assert set(ALTERNATIVES) == set(ProfileSpec.model_fields)
    assert set(PROFILE_CHOICES) <= set(GRID_PLACES)


@pytest.mark.parametrize("field", sorted(ALTERNATIVES))
def test_each_override_on_tiny_reaches_the_notebooks_grid_and_it_is_the_estimates(field: str, tmp_path: Path) -> None:
    override = {field: ALTERNATIVES[field]}
    if field == "memory_model":
        override = {"memory_models": ALTERNATIVES["memory_models"], "memory_model": "Builder"}
    profile = reproduce.load_profile("tiny", override)
    mine, counted = the_two_grids(profile, tmp_path)
    assert comparable(mine, profile) == comparable(counted, profile)
    if field in GRID_PLACES:  # the override is in the grid the notebooks run (it used to be dropped on the way)
        base = notebooks_grid(TINY, tmp_path / "base").settings()
        place = GRID_PLACES[field]
        assert mine[place] != base[place], f"--set {field}=... did not reach the notebooks' grid ({place})"
    if field == "memory_model":
        assert {m["memory_built_by"] for m in mine["models"]} == {"Builder"}


def test_a_yaml_path_profile_reaches_the_kernel_as_its_file(tmp_path: Path) -> None:
    copy = tmp_path / "mytiny.yaml"
    shutil.copy(PROFILES_DIR / "tiny.yaml", copy)
    profile = reproduce.load_profile(str(copy))
    params = reproduce.notebook_parameters(profile, reproduce.ReproductionPaths(tmp_path / "out", profile.folder))
    assert params["profile"] == str(copy.resolve()) and params["figures_dir"].endswith("figures/mytiny")
    loaded, base = notebook_setup.resolve_profile(dict(params))
    assert loaded.name == "mytiny" and loaded.spec == TINY.spec and base is loaded


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "gama=0,0.9"], "unknown key 'gama': not a field of profile tiny, a protocol choice nor a declared "
                                "extra parameter; did you mean gamma?"),
    (["--set", "tset_limit=3"], "did you mean test_limit, train_limit?"),
    (["--set", "top_k=1000000000"], "field 'top_k': expected a number <= 64, found 1000000000"),
    (["--set", "num_trials=-100"], "field 'extra_parameters.num_trials': expected an integer between 1 and 100000"),
    (["--set", "sc_paths=[10000000]"], "field 'sc_paths[0]': expected a number <= 256"),
    (["--set", "bootstrap_resamples=1000000000"], "field 'bootstrap_resamples': expected a number <= 100000"),
    (["--sweep", "top_k=1,100"], "field 'top_k': expected a number <= 64, found 100"),
    (["--profile", "../profiles/tiny"], "unknown profile '../profiles/tiny'"),
])
def test_what_cannot_be_honoured_is_one_line_before_any_notebook_starts(
        argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = argv if "--profile" in argv else ["--profile", "tiny", *argv]
    code = reproduce.main([*argv, "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "something ran"


def test_the_theory_notebooks_own_parameters_are_valid_keys() -> None:
    keys = reproduce.extra_keys(reproduce.discover_notebooks(reproduce.default_notebooks_dir()))
    assert {"num_trials", "collapse_max_m", "additivity_grid_size", "bound_alphas"} <= keys
    assert load_profile("sim", {"num_trials": 50}, extra_keys=keys).fields["extra_parameters"] == {"num_trials": 50}


def _run_dir(root: Path, name: str, **options: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"limit": 4, "seed": 0,
                                                    "method": {"name": "r2mad", "options": options}}))
    return folder


def test_a_variants_label_is_read_back_from_the_run_configs(tmp_path: Path) -> None:
    shared = [_run_dir(tmp_path, f"r{i}", round0="shared", top_k=1) for i in range(3)]
    cot = _run_dir(tmp_path, "cot")  # a method without round0 records no round0
    overrides = {"round0": ("shared", "independent"), "top_k": (5, 1), "sc_paths": ([3], [3, 5])}
    executed = comparison.as_executed([*shared, cot], overrides)
    assert executed["round0"] == {"value": "shared", "cells": 4, "recorded_by": 3, "with_value": 3}
    assert executed["top_k"]["with_value"] == 0 and executed["sc_paths"]["recorded_by"] == 0
    sentence = comparison.executed_sentence("tab_main_results", executed)
    assert sentence.startswith("tab_main_results as executed (read back from its 4 run configs): round0 = shared in "
                               "3 of 3 runs that record it; top_k = 5: in none of the 3 runs")
    # a variant whose every recorded override is the profile's value changed nothing that ran
    update_manifest(tmp_path, "tab_a", {"variant_as_executed": comparison.as_executed(shared, {"top_k": (5, 1)})})
    assert comparison.changes_nothing(tmp_path)
    update_manifest(tmp_path, "tab_b", {"variant_as_executed": comparison.as_executed(shared,
                                                                                      {"round0": ("shared", "x")})})
    assert not comparison.changes_nothing(tmp_path)


# ------------------------------------------------------------------------------------------------------------
# End to end (slow): what the executed cells recorded
# ------------------------------------------------------------------------------------------------------------


def _recorded_options(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "config.json").read_text())["method"]["options"]


@pytest.mark.slow
def test_round0_shared_on_tiny_runs_shared_round0_as_its_label_says(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (reproduce.main(["--profile", "tiny", "--only", "03", "--set", "round0=shared", "--output-dir", str(out)])
            == 0)
    figures = out / "figures" / "tiny" / "variants" / "round0=shared"
    manifest = read_manifest(figures)["artifacts"]
    label = manifest["tab_main_results"]["variant"]["overrides"]["round0"]
    assert label == {"value": "shared", "profile_value": "independent"}
    executed = manifest["tab_main_results"]["variant_as_executed"]["round0"]  # read back from the run configs
    assert executed["recorded_by"] == executed["with_value"] > 0
    variant = reproduce.load_profile("tiny", {"round0": "shared"})
    grid = ExperimentGrid.from_profile(variant, runs_dir=out / "runs" / "tiny", cache_dir=out / "cache" / "tiny")
    from r2mad_lab.experiments.method_labels import MAIN_METHODS

    recorded = []
    for method in MAIN_METHODS:
        for benchmark in grid.benchmarks:
            options = _recorded_options(grid.run_dir(grid.models[0], benchmark, method)[0])
            if "round0" in options:
                recorded.append(options["round0"])
    assert recorded and set(recorded) == {label["value"]}  # what ran is what the label says


@pytest.mark.slow
def test_a_memory_only_model_set_on_the_command_line_builds_every_bank(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = reproduce.main(["--profile", "tiny", "--only", "02", "--output-dir", str(out),
                           "--set", "memory_models=[{label: Builder, engine: simulated, model: sim-builder}]",
                           "--set", "memory_model=Builder"])
    assert code == 0
    manifests = sorted((out / "runs" / "tiny").rglob("memory-*/manifest.json"))
    variant_banks = [m for m in manifests if m.parts[-4] == "builder"]
    assert len(variant_banks) == len(TINY.spec.benchmarks)
    assert {json.loads(m.read_text())["model"] for m in variant_banks} == {"sim-builder"}


@pytest.mark.slow
def test_a_yaml_path_profile_runs_notebooks_01_and_02(tmp_path: Path) -> None:
    copy = tmp_path / "mytiny.yaml"
    shutil.copy(PROFILES_DIR / "tiny.yaml", copy)
    out = tmp_path / "out"
    assert reproduce.main(["--profile", str(copy), "--only", "01,02", "--output-dir", str(out)]) == 0
    assert read_manifest(out / "figures" / "mytiny")["artifacts"], "no artifact written under figures/mytiny"
    assert sorted(p.name for p in (out / "notebooks" / "executed" / "mytiny").glob("*.ipynb")) == [
        "01_data.ipynb", "02_memory.ipynb"]


#: Which cell records a field (the method label whose config.json holds it); the rest: R2-MAD.
RECORDED_BY_METHOD = {"objective_keep": "MAD-M2 (O)", "icl_match": "ICL-CoT"}
#: Overrides that act only with another: a profile's fixed_lambda is the lambda of its retrieval_policy fixed_lambda
#: (under the paper's state-aware policy lambda_t is Eq. 6's; Table 3's Fixed-lambda rows state their own).
TOGETHER = {"fixed_lambda": {"retrieval_policy": "fixed_lambda"}}
#: Fields a bank's manifest records (memory construction), not a cell's config.json.
RECORDED_BY_BANK = ("reward_definition", "state_layout")
#: Fields no run records (they choose which questions or cells run, or how numbers are summarised).
NOT_RECORDED = {"description", "expected_runtime", "expected_runtime_replay", "expected_runtime_minutes", "models",
                "large_models", "embedder", "benchmarks", "train_limit", "sc_paths", "retrieval_policies",
                "retrieval_models",
                "retrieval_benchmarks", "icl_models", "icl_benchmarks", "cost_benchmark", "poison_fractions",
                "poison_benchmarks", "bootstrap_resamples", "extra_parameters", "api_budget", "protocol",
                "memory_model", "memory_models", "extra_methods", "split_rule"}


@pytest.mark.slow
@pytest.mark.parametrize("field", sorted(set(ALTERNATIVES) - NOT_RECORDED))
def test_what_one_cell_recorded_is_the_label_of_each_override(field: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """For an override of every field a run records, run one small cell on tiny the way a notebook does and read
    the label (the variant's value) back from what the cell recorded: its config.json (or its bank's manifest)."""
    monkeypatch.delenv(points.ENVIRONMENT, raising=False)
    small = {"benchmarks": ["truthfulqa"], "retrieval_benchmarks": ["truthfulqa"], "icl_benchmarks": ["truthfulqa"],
             "poison_benchmarks": ["truthfulqa"], "cost_benchmark": "truthfulqa", "test_limit": 1, "train_limit": 2}
    override = {**TOGETHER.get(field, {}), field: ALTERNATIVES[field]}
    if field == "test_limit":
        override = {field: 2}
    if field == "w_high":
        override = {"w_high": 0.6}
    profile = reproduce.load_profile("tiny", {**small, **override})
    namespace = dict(reproduce.notebook_parameters(profile, reproduce.ReproductionPaths(tmp_path, profile.folder)))
    loaded, base = notebook_setup.resolve_profile(namespace)
    variant = points.detect(loaded, base)
    label = variant.overrides[field][0]
    grid = ExperimentGrid.from_profile(loaded, runs_dir=namespace["runs_dir"], cache_dir=namespace["cache_dir"])
    outcome = grid.run(grid.models[0], "truthfulqa", RECORDED_BY_METHOD.get(field, "R2-MAD"))
    if field in RECORDED_BY_BANK:
        bank = grid.memory_dir(grid.models[0], "truthfulqa")
        recorded = json.loads((bank / "manifest.json").read_text())[field]
    else:
        config = json.loads((Path(outcome.run_dir) / "config.json").read_text())
        ok, recorded = comparison.recorded_value(config, field)
        assert ok, f"{field}: the cell's config.json does not record it"
    assert points.same_value(recorded, label), f"{field}: label {label!r}, the run recorded {recorded!r}"
