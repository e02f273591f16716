"""One owner per value (issue 57): a setting has one declaration and one default, a preset fills only what is unset,
and every reader gets the run's settings back whole from config.json."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from r2mad_core.debate.loop import DebateConfig
from r2mad_core.debate.settings import DEFAULTS as DEBATE_DEFAULTS
from r2mad_core.memory import settings as memory_settings
from r2mad_core.memory.hook import IclCotHook
from r2mad_core.memory.retrieval import RetrievalConfig
from r2mad_core.memory.settings import MemorySettings
from r2mad_core.methods import METHOD_SPECS, method_options
from r2mad_lab.cli.commands import main as cli_main
from r2mad_lab.experiments import protocol
from r2mad_lab.experiments.profile_schema import ProfileSpec
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.experiments.run_settings import RunSettings, read_settings
from r2mad_lab.reproduce.grid import ExperimentGrid


def test_every_protocol_choice_has_one_default_its_declarations() -> None:
    for choice in protocol.CHOICES:
        if choice.name == "memory_model":
            continue
        default = protocol.declared_default(choice.name)  # raises when two builders disagree
        assert ProfileSpec.model_fields[choice.name].default is None, choice.name  # unset: the preset fills it
        for name in METHOD_SPECS:  # every builder that declares it has that one default
            declared = method_options(name)
            if choice.method_option in declared and choice.level == "method":
                assert declared[choice.method_option] == default, (choice.name, name)
        if choice.field == "debate" and choice.name in DebateConfig.__dataclass_fields__:  # the loop's copy reads it
            assert DebateConfig.__dataclass_fields__[choice.name].default == DEBATE_DEFAULTS[choice.name] == default
        assert read_settings({"method": {"name": "mad", "options": {}}}).choices[choice.name] == default, choice.name
        for preset in protocol.PROTOCOLS:  # a preset is an overlay: it fills what is unset, nothing else
            assert RunSettings(protocol=preset).choices[choice.name] == choice.value(preset), (choice.name, preset)
    assert RetrievalConfig().k == MemorySettings().top_k == memory_settings.DEFAULTS["top_k"] == 1
    assert "top_k" not in inspect.signature(IclCotHook).parameters  # K comes in its checked MemorySettings


def test_an_object_given_whole_is_taken_whole() -> None:
    assert RunSettings(memory=MemorySettings(top_k=5)).memory.top_k == 5
    assert RunSettings().replace(memory=MemorySettings(top_k=7, gamma=0.5)).choices["top_k"] == 7
    assert RunSettings().replace(top_k=5).memory.top_k == 5
    assert RunSettings(protocol="authors").choices["vote_rule"] == "authors_majority_correct"
    assert load_profile("tiny", {"top_k": 4}).run_settings.memory.top_k == 4
    assert load_profile("tiny", {"protocol": "authors"}).run_settings.choices["confidence_pool"] == "candidates"
    assert load_profile("tiny", {"top_k": None}).run_settings.memory.top_k == 1  # null: the preset fills it again


def _read_back(run_dir: Path) -> tuple[int, float, str]:
    settings = read_settings(json.loads((run_dir / "config.json").read_text()))
    return settings.memory.top_k, settings.memory.gamma, settings.debate.round0


def test_k_gamma_and_round0_read_back_from_config_json_each_documented_way(tmp_path: Path) -> None:
    profile = load_profile("tiny", {"test_limit": 1})
    base = profile.run_settings
    ways = {
        "RunSettings(memory=...)": (RunSettings(memory=MemorySettings(top_k=5), test_limit=1, train_limit=6,
                                                embedder=base.embedder, debate=base.debate), (5, 0.9, "independent")),
        "replace(memory=...)": (base.replace(memory=MemorySettings(top_k=2, gamma=0.5)), (2, 0.5, "independent")),
        "replace(top_k=...)": (base.replace(top_k=3, round0="shared"), (3, 0.9, "shared")),
        "a profile": (base, (1, 0.9, "independent")),
        "--set": (load_profile("tiny", {"test_limit": 1, "top_k": 4, "gamma": 0.25}).run_settings,
                  (4, 0.25, "independent")),
    }
    bank = None
    for way, (settings, expected) in ways.items():
        exp = ExperimentGrid(models=[m.model_dump() for m in profile.spec.models], benchmarks=["truthfulqa"],
                             runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache", run_settings=settings)
        outcome = exp.run(exp.models[0], "truthfulqa", "R2-MAD")
        assert _read_back(outcome.run_dir) == expected, way
        bank = exp.memory(exp.models[0], "truthfulqa")
    out = tmp_path / "cli"  # `r2mad run` flags
    assert cli_main(["run", "--benchmark", "truthfulqa", "--method", "r2mad", "--memory", str(bank), "--engine",
                     "simulated", "--limit", "1", "--no-progress", "--out", str(out), "-K", "6", "--gamma", "0.75",
                     "--round0", "independent", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert _read_back(out) == (6, 0.75, "independent")


def test_gamma_is_checked_once_per_cell_build(tmp_path: Path, monkeypatch) -> None:
    exp = ExperimentGrid.from_profile(load_profile("tiny", {"test_limit": 1}), runs_dir=tmp_path / "runs",
                                      cache_dir=tmp_path / "cache")
    exp.memory(exp.models[0], "truthfulqa")  # the bank first: its debates are cells of their own
    seen = []
    check = memory_settings.Spec.check

    def counted(self, owner, name, value):
        if name == "gamma":
            seen.append(owner)
        return check(self, owner, name, value)

    monkeypatch.setattr(memory_settings.Spec, "check", counted)
    exp.run(exp.models[0], "truthfulqa", "R2-MAD")
    assert len(seen) == 1, seen
