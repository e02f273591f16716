"""The debate settings are declared once (r2mad_core/debate/settings.py) and read by the methods, the loop's config,
the grid, memory construction and the CLI."""

from __future__ import annotations

import argparse
import inspect

import pytest

from r2mad_core.debate.loop import DebateConfig
from r2mad_core.debate.settings import DEFAULTS, SPECS, DebateSettings
from r2mad_core.methods import Method, debate_keywords, get_method, method_options
from r2mad_lab.cli import commands
from r2mad_lab.cli import memory as memory_cli
from r2mad_lab.experiments import build_memory
from r2mad_lab.reproduce.grid import ExperimentGrid


def test_mad_declares_every_setting_in_declaration_order_with_its_default():
    assert list(method_options("mad")) == list(SPECS)
    assert method_options("mad") == DEFAULTS
    assert list(method_options("cot")) == ["temperature", "top_p", "max_tokens", "vote_rule", "round0", "task_prompt",
                                           "unclosed_thinking"]
    # R2-MAD: its own options, then the settings where the builder declared `settings`, then similarity_match
    r2mad = list(method_options("r2mad"))
    assert r2mad[r2mad.index("poison_seed") + 1] == "n_agents" and r2mad[-1] == "similarity_match"
    assert "with_summaries" not in r2mad


def test_loop_config_defaults_are_the_settings_defaults():
    config = DebateConfig()
    assert ({n: getattr(config, n) for n in SPECS if n != "vote_rule"}
            == {n: v for n, v in DEFAULTS.items() if n != "vote_rule"})
    built = DebateConfig.from_settings(DebateSettings(temperature=1, n_agents=2), with_summaries=True)
    assert (built.temperature == 1.0 and isinstance(built.temperature, float) and built.n_agents == 2
            and built.with_summaries)


@pytest.mark.parametrize("name, value, message", [
    ("n_agents", 0, "method 'mad': option n_agents must be >= 1, found 0"),
    ("top_p", 0.0, r"method 'mad': option top_p must be in \(0.0, 1.0\], found 0.0"),
    ("summaries", "never", "method 'mad': option summaries must be one of \\('every_round', 'before_next_round'\\)"),
])
def test_a_builder_checks_its_settings_through_the_declaration(name, value, message):
    with pytest.raises(ValueError, match=message):
        get_method("mad", **{name: value})
    with pytest.raises(ValueError, match=name):
        DebateSettings(**{name: value})


def test_a_plugin_builder_gets_the_flat_keywords():
    @debate_keywords("n_rounds", "temperature")
    def toy(*, width: int = 2, settings: DebateSettings) -> Method:
        return Method(name="toy", debate=DebateConfig.from_settings(settings, n_agents=width))

    assert list(inspect.signature(toy).parameters) == ["width", "n_rounds", "temperature"]
    method = toy(width=1, n_rounds=2)
    assert (method.debate.n_agents, method.debate.n_rounds, method.debate.temperature) == (1, 2, 1.0)
    with pytest.raises(ValueError, match="method 'toy': option n_rounds must be >= 1, found 0"):
        toy(n_rounds=0)


def _flags(add) -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser()
    add(parser)
    return {a.dest: a for a in parser._actions}


def test_run_and_build_memory_flags_come_from_the_declaration():
    run = _flags(commands.add_run_arguments)
    for name, spec in SPECS.items():
        action = run[name]
        assert spec.flag in action.option_strings and action.default is None
        assert action.help == (spec.flag_doc or spec.doc)
    assert run["round0"].choices == SPECS["round0"].choices
    build = _flags(memory_cli.add_build_memory_arguments)
    lengths = memory_cli.LENGTHS  # not given: --protocol's (authors: 6144), else the declaration's default
    assert {n: build[n].default for n in memory_cli.MEMORY_SETTINGS} == {
        n: None if n in lengths else DEFAULTS[n] for n in memory_cli.MEMORY_SETTINGS}
    parser = argparse.ArgumentParser()
    memory_cli.add_build_memory_arguments(parser)
    base = ["--benchmark", "truthfulqa", "--out", "x"]
    assert memory_cli._memory_settings(parser.parse_args(base)).values(lengths) == {n: DEFAULTS[n] for n in lengths}
    authors = memory_cli._memory_settings(parser.parse_args([*base, "--protocol", "authors"]))
    assert authors.values(lengths) == {"max_tokens": 6144, "summary_max_tokens": 6144}
    given = memory_cli._memory_settings(parser.parse_args([*base, "--protocol", "authors", "--max-tokens", "300"]))
    assert given.values(lengths) == {"max_tokens": 300, "summary_max_tokens": 6144}


def test_the_grid_carries_one_settings_object(tmp_path):
    exp = ExperimentGrid(models=[{"label": "sim", "engine": "simulated"}], benchmarks=["truthfulqa"], runs_dir=tmp_path,
                         cache_dir=tmp_path, n_agents=2, max_tokens=64, summary_max_tokens=32)
    assert exp.debate == DebateSettings(n_agents=2, max_tokens=64, summary_max_tokens=32, round0="independent",
                                        summaries="every_round", summary_agents="authors", empty_peers="drop")
    assert exp.debate == exp.run_settings.debate  # one holder: the loop's choices are the debate settings' fields
    assert (exp.n_agents, exp.sampling["max_tokens"]) == (2, 64)
    assert exp.method_options("MAD")[1] == {"n_agents": 2, "n_rounds": 3, "temperature": 1.0, "top_p": 1.0,
                                            "max_tokens": 64, "round0": "independent", "summaries": "every_round",
                                            "summary_agents": "authors", "empty_peers": "drop"}


def test_build_memory_takes_the_settings():
    parameters = inspect.signature(build_memory.build_memory).parameters
    assert "settings" in parameters and "n_agents" not in parameters
