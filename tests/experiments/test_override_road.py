"""One road for an override (issue 46): the profile file is read and validated once; ``--set``, a sweep point, a
variant, a replicate's seed and a notebook's ``overrides`` of a run setting land in its ``RunSettings`` by one
``replace`` (:meth:`Profile.with_overrides`); an override of any other field takes the file's road."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from r2mad_lab.experiments import profiles
from r2mad_lab.experiments.profiles import ProfileError, load_profile
from r2mad_lab.experiments.run_settings import PROFILE_FIELDS, RunSettings
from r2mad_lab.reproduce import command as reproduce
from r2mad_lab.reproduce import notebook_setup
from r2mad_lab.reproduce.grid import ExperimentGrid
from r2mad_lab.reproduce.point_cache import executed_configuration


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every validation of a whole profile (its file's fields), by source."""
    seen: list[str] = []
    real = profiles.validated_spec

    def counted(data: Any, source: str) -> Any:
        seen.append(source)
        return real(data, source)

    monkeypatch.setattr(profiles, "validated_spec", counted)
    return seen


def test_a_run_setting_override_lands_by_one_replace_without_reading_the_file(validations: list[str]) -> None:
    base = load_profile("tiny")
    assert len(validations) == 1
    changes = {"gamma": 0.5, "seed": 3, "n_rounds": 2, "round0": "shared", "test_limit": 3, "top_k": 2}
    assert set(changes) <= set(PROFILE_FIELDS)
    changed = base.with_overrides(changes)
    assert len(validations) == 1, "a run setting re-validated the profile file"
    assert changed.run_settings == base.run_settings.replace(**changes)
    assert changed.run_settings == RunSettings.from_profile(changed.spec)  # the spec the notebooks read agrees
    assert {k: getattr(changed.spec, k) for k in changes} == changes and changed.overrides == changes
    assert changed.parameters({})["gamma"] == 0.5  # the notebooks' namespace
    grid = ExperimentGrid.from_profile(changed, {"w_low": 0.4}, runs_dir="runs", cache_dir="cache")
    assert len(validations) == 1 and grid.run_settings == changed.run_settings.replace(w_low=0.4)
    assert load_profile("tiny", changes).run_settings == changed.run_settings and len(validations) == 2


def test_another_field_takes_the_files_road_with_the_run_settings_on_top(validations: list[str]) -> None:
    base = load_profile("tiny", {"gamma": 0.5})
    changed = base.with_overrides({"benchmarks": ["truthfulqa"], "retrieval_benchmarks": ["truthfulqa"],
                                   "icl_benchmarks": ["truthfulqa"], "poison_benchmarks": ["truthfulqa"],
                                   "cost_benchmark": "truthfulqa"})
    assert len(validations) == 2  # the file with the new benchmarks, validated once
    assert changed.spec.benchmarks == ["truthfulqa"] and changed.run_settings.memory.gamma == 0.5


def test_the_kernel_loads_the_profile_once_and_applies_the_overrides(validations: list[str], tmp_path: Path) -> None:
    profile = load_profile("tiny")
    namespace = dict(reproduce.notebook_parameters(profile, reproduce.ReproductionPaths(tmp_path, profile.folder)))
    namespace["overrides"] = {"gamma": 0.5, "seed": 1}
    validations.clear()
    loaded, base = notebook_setup.resolve_profile(namespace)
    assert len(validations) == 1 and base.spec.gamma == 0.9 and loaded.run_settings.seed == 1
    assert executed_configuration(base, {"top_k": 3}) == executed_configuration("tiny", {"top_k": 3})


@pytest.mark.parametrize("overrides, message", [
    ({"gamma": 1.5}, "field 'gamma': expected a number <= 1.0, found 1.5"),
    ({"seed": -1}, "field 'seed': expected a number >= 0, found -1"),
    ({"round0": "paired"}, "field 'round0': expected 'shared' or 'independent', found 'paired'"),
    ({"w_low": 0.9}, "w_low (0.9) must be <= w_high (0.55)"),
    ({"gama": 0.5}, "unknown key 'gama': not a field of profile tiny, a protocol choice nor a declared extra "
                    "parameter; did you mean gamma?"),
])
def test_a_bad_override_is_one_line_naming_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile("tiny").with_overrides(overrides)
    assert message in str(caught.value) and len(str(caught.value).splitlines()) == 1, str(caught.value)


@pytest.mark.parametrize("argv, message", [
    (["--set", "gamma=0.5", "--set", "n_round=2"], "unknown key 'n_round': not a field of profile tiny, a protocol "
                                                   "choice nor a declared extra parameter; did you mean n_rounds"),
    (["--set", "w_high=0.4"], "w_low (0.45) must be <= w_high (0.4)"),
    (["--sweep", "seed=1,-2"], "field 'seed': expected a number >= 0, found -2"),
])
def test_a_mistyped_or_bad_set_is_one_line_before_anything_runs(argv: list[str], message: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = reproduce.main(["--profile", "tiny", "--only", "04", *argv, "--dry-run", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "something ran"
