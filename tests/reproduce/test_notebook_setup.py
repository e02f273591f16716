"""notebook_setup: parameters default from the profile files, quiet logging in notebooks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from r2mad_lab.experiments.profiles import ProfileError
from r2mad_lab.reproduce import load_profile, notebook_setup


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
    loggers = [logging.getLogger("r2mad_lab.experiments.cell"), logging.getLogger("r2mad_core.memory.hook")]
    before = {name: logging.getLogger(name).level for name in ("r2mad_core", "r2mad_lab")}
    try:
        notebook_setup.quiet_logging()
        with caplog.at_level(logging.NOTSET):
            for logger in loggers:
                logger.info("a wall of log lines")
                logger.warning("a warning the notebook shows from the numbers instead")
                logger.error(f"an error of {logger.name} still shows")
        assert ([r.getMessage() for r in caplog.records] == [f"an error of {logger.name} still shows"
                                                             for logger in loggers])
        assert logging.getLogger("httpx").level == logging.WARNING
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize("namespace,message", [
    ({"overrides": "{top_k: 3}"}, "notebook parameter 'overrides' is the string '{top_k: 3}' (papermill's -p passes a "
     "string), not a mapping of profile fields: write -y 'overrides: {top_k: 3}' or -p top_k 3"),
    ({"overrides": "{top_k: 3, seed: 2}"}, "write -y 'overrides: {top_k: 3, seed: 2}' or -p top_k 3 -p seed 2"),
    ({"overrides": 3}, "notebook parameter 'overrides' must be a mapping of profile fields, not int 3"),
    ({"profile": 3}, "notebook parameter 'profile' must be a profile's name or a YAML file's path, not int 3"),
    ({"cache_dir": 1.5}, "notebook parameter 'cache_dir' must be a folder's path, not float 1.5"),
    ({"In": ["", "profile = 'tiny'\nnum_trials = 5\n", "# Parameters\ntopk = 3\n"]},
     "unknown notebook parameter 'topk' (papermill -p): did you mean top_k or top_p?"),
])
def test_a_bad_notebook_parameter_is_one_line_naming_it_and_what_to_write(namespace: dict, message: str) -> None:
    """Issue 58: `papermill ... -p overrides '{top_k: 3}'` ended in a 20-line ValueError from dict()."""
    with pytest.raises(notebook_setup.NotebookParameterError) as raised:
        notebook_setup.resolve_profile({"profile": "tiny", **namespace})
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_papermills_parameters_that_the_notebook_declares_are_accepted() -> None:
    history = ["", "profile = 'tiny'\nnum_trials = 5\n", "# Parameters\nnum_trials = 7\ntop_k = 3\nprofile = 'tiny'\n"]
    loaded, _ = notebook_setup.resolve_profile({"profile": "tiny", "num_trials": 7, "top_k": 3, "In": history})
    assert loaded.spec.top_k == 3
