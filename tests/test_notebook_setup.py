"""notebook_setup: parameters default from the profile files, quiet logging in notebooks."""

from __future__ import annotations

import logging

import pytest

from r2mad_core.reproduce import notebook_setup
from r2mad_core.reproduce import load_profile


def test_ellipsis_parameters_are_filled_from_the_named_profile() -> None:
    namespace = {"profile": "sim", "models": ..., "test_limit": ..., "figures_dir": ..., "data_dir": ...,
                 "num_trials": 7, "seed": 3}
    filled = notebook_setup.fill_parameters(namespace)
    sim = load_profile("sim")
    assert namespace["models"] == sim["models"] and namespace["test_limit"] is None  # sim: the full split
    assert namespace["figures_dir"] == "../figures/sim" and namespace["data_dir"] is None
    assert (namespace["num_trials"], namespace["seed"]) == (7, 3)  # given values are kept
    assert set(filled) == {"models", "test_limit", "figures_dir", "data_dir"}
    tiny = {"profile": "tiny", "num_trials": ...}
    notebook_setup.fill_parameters(tiny)
    assert tiny["num_trials"] == load_profile("tiny")["extra_parameters"]["num_trials"]


def test_an_unknown_parameter_names_the_profile_file() -> None:
    with pytest.raises(KeyError, match="r2mad_core/profiles/tiny.yaml has no field 'nonsense'"):
        notebook_setup.fill_parameters({"profile": "tiny", "nonsense": ...})


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
