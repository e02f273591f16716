"""One settings object from the profile to the hook (issue 46): RunSettings, the rows that carry settings, the one
flattening into a run's options, the memory settings' flags."""

from __future__ import annotations

import argparse
import inspect
import pickle

import pytest

from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_core.memory.settings import MemorySettings
from r2mad_core.methods import method_options
from r2mad_lab.cli import commands
from r2mad_lab.experiments import method_labels
from r2mad_lab.experiments.method_labels import INDEPENDENT_ROUND0, Row, resolve, with_k
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.experiments.run_settings import RunSettings
from r2mad_lab.reproduce.grid import ExperimentGrid


def test_one_replace_routes_each_flat_name_to_its_declaration() -> None:
    base = RunSettings()
    changed = base.replace(gamma=0.5, n_rounds=2, round0="independent", top_k=5, seed=7, max_experience_chars=300)
    assert (changed.memory.gamma, changed.memory.max_experience_chars) == (0.5, 300)
    assert changed.debate.n_rounds == 2 and changed.seed == 7
    assert changed.choices["round0"] == "independent" and changed.method_choices["round0"] == "independent"
    assert changed.memory.top_k == changed.choices["top_k"] == 5  # K is a protocol choice and a memory setting
    with pytest.raises(TypeError, match="a preset fills an unset choice"):  # a preset fills when settings are made
        changed.replace(top_k=None)
    with pytest.raises(TypeError, match="protocol is a preset"):
        changed.replace(protocol="authors")
    assert base == RunSettings() and base.memory.gamma == MemorySettings().gamma  # frozen: replace makes a new one
    with pytest.raises(TypeError, match="unknown setting"):
        base.replace(gama=0.5)
    with pytest.raises(ValueError, match="option gamma must be in"):  # the declaration's bound, checked once
        base.replace(gamma=1.5)
    with pytest.raises(ValueError, match="w_low"):
        base.replace(w_low=0.9)


def test_the_grid_holds_the_profiles_settings_whole(tmp_path) -> None:
    profile = load_profile("tiny", {"gamma": 0.5})
    exp = ExperimentGrid.from_profile(profile, runs_dir=tmp_path, cache_dir=tmp_path)
    assert exp.run_settings == RunSettings.from_profile(profile.spec)
    assert ((exp.run_settings.memory.gamma, exp.top_k, exp.seed, exp.choices)
            == (0.5, 1, 0, dict(exp.run_settings.choices)))
    own = [p for p in inspect.signature(ExperimentGrid.__init__).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert len(own) <= 10, [p.name for p in own]
    flat = ExperimentGrid(models=exp.models, benchmarks=exp.benchmarks, runs_dir=tmp_path, cache_dir=tmp_path,
                          run_settings=exp.run_settings, gamma=0.9)  # flat settings land by the same replace
    assert flat.run_settings == exp.run_settings.replace(gamma=0.9)
    with pytest.raises(AttributeError):
        exp.no_such_setting  # noqa: B018


def test_a_rows_settings_travel_beside_its_name_never_in_it(tmp_path) -> None:
    row = with_k("R2-MAD retrieval=Random", 3)
    assert isinstance(row, Row) and row == "R2-MAD retrieval=Random (K=3)" and row.changes == {"top_k": 3}
    independent = "MAD" + INDEPENDENT_ROUND0
    assert independent == "MAD (independent round 0)" and independent.changes == {"round0": "independent"}
    both = with_k("R2-MAD", 3) + INDEPENDENT_ROUND0
    assert both.base == "R2-MAD" and both.changes == {"top_k": 3, "round0": "independent"}
    assert pickle.loads(pickle.dumps(both)).changes == both.changes  # a notebook's results keep their rows
    name, options = resolve(both, RunSettings(), "bank")
    assert name == "r2mad" and (options["top_k"], options["round0"]) == (3, "independent")
    assert method_labels.needs_memory(both) and not method_labels.needs_memory("MAD" + INDEPENDENT_ROUND0)
    with pytest.raises(ValueError):  # the display name alone is no configuration
        resolve(str(both), RunSettings(), "bank")


def test_the_settings_are_flattened_once_and_defaults_stay_out_of_run_keys() -> None:
    settings = RunSettings()
    _, options = resolve("R2-MAD", settings, "bank")
    assert {"top_k", "gamma", "w_high", "w_low"} <= set(options)  # the settings the keys were fixed with
    assert "max_experience_chars" not in options and "fixed_lambda" not in options  # at their defaults
    _, shortened = resolve("R2-MAD", settings.replace(max_experience_chars=300), "bank")
    assert shortened == {**options, "max_experience_chars": 300}
    _, random = resolve("R2-MAD retrieval=Random", settings.replace(gamma=0.5), "bank")
    assert "gamma" not in random  # a setting the row's policy does not read is not part of its cell
    assert options["gamma"] == settings.memory.gamma == method_options("r2mad")["gamma"]


def test_every_memory_setting_has_its_generated_flag() -> None:
    parser = commands.build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    flags = {flag for action in run._actions for flag in action.option_strings}
    assert {spec.flag for spec in MEMORY_SPECS.values()} <= flags and "-K" in flags
    with pytest.raises(SystemExit):
        run.parse_args(["--benchmark", "truthfulqa", "--gamma", "1.5"])
    given = run.parse_args(["--benchmark", "truthfulqa", "--method", "r2mad", "--out", "x", "--gamma", "1"])
    assert isinstance(given.gamma, float) and given.gamma == 1.0
    assert isinstance(parser, argparse.ArgumentParser)
