"""notebook_setup: parameters default from the profile files, quiet logging in notebooks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from r2mad_core.experiments.profiles import ProfileError

from r2mad_core.reproduce import notebook_setup
from r2mad_core.reproduce import load_profile


def test_setup_fills_the_namespace_from_the_profile_and_reads_overrides(tmp_path: Path) -> None:
    """The profile's values become the notebook's names; ``overrides`` and a profile field assigned in the notebook
    (papermill -p) are overrides; the notebook's own extra parameters stay unless the profile sets them."""
    namespace = {"profile": "sim", "overrides": {"test_limit": 2}, "num_trials": 7, "seed": 3,
                 "figures_dir": str(tmp_path / "figures" / "sim"), "runs_dir": str(tmp_path / "runs"),
                 "cache_dir": str(tmp_path / "cache")}
    session = notebook_setup.setup(namespace, "01_data", experiment=False)
    sim = load_profile("sim")
    assert namespace["models"] == sim["models"] and namespace["test_limit"] == 2 and namespace["seed"] == 3
    assert namespace["num_trials"] == 7  # sim sets no extra_parameters: the notebook's own value
    assert session.variant.name == "seed=3,test_limit=2" and session.loaded.spec.seed == 3
    tiny = {"profile": "tiny", "num_trials": 2000, "figures_dir": str(tmp_path / "figures" / "tiny")}
    notebook_setup.setup(tiny, "08_theory", experiment=False, benchmarks=False)
    assert tiny["num_trials"] == load_profile("tiny")["extra_parameters"]["num_trials"]
    # a rerun of the setup cell reads back nothing it wrote itself: still the profile, no variant
    assert notebook_setup.setup(tiny, "08_theory", experiment=False).variant is None


def test_an_unknown_override_names_the_nearest_fields() -> None:
    with pytest.raises(ProfileError, match=r"unknown key 'tset_limit'.*did you mean test_limit, train_limit\?"):
        notebook_setup.resolve_profile({"profile": "tiny", "overrides": {"tset_limit": 3}})


def test_quiet_logging_silences_the_core_below_error(caplog: pytest.LogCaptureFixture) -> None:
    core = logging.getLogger("r2mad_core.experiments.cell")
    before = logging.getLogger("r2mad_core").level
    try:
        notebook_setup.quiet_logging()
        with caplog.at_level(logging.NOTSET):
            core.info("a wall of log lines")
            core.warning("a warning the notebook shows from the numbers instead")
            core.error("an error still shows")
        assert [r.getMessage() for r in caplog.records] == ["an error still shows"]
        assert logging.getLogger("httpx").level == logging.WARNING
    finally:
        logging.getLogger("r2mad_core").setLevel(before)
