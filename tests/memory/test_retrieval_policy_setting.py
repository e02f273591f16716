"""A profile's ``retrieval_policy`` and ``fixed_lambda`` act (issue 46): the R2-MAD rows run the policy the settings
name, at the settings' lambda, read back from what the cells recorded (config.json and the transcripts' lambda_t);
Table 3's rows keep the policy and the lambda they state. Set through the real command line, ``--set``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from r2mad_lab.experiments.cell import load_run
from r2mad_lab.experiments.profiles import ProfileError, load_profile
from r2mad_lab.reproduce import command as reproduce
from r2mad_lab.reproduce import notebook_setup, points
from r2mad_lab.reproduce.grid import ExperimentGrid

SMALL = {"benchmarks": ["truthfulqa"], "retrieval_benchmarks": ["truthfulqa"], "icl_benchmarks": ["truthfulqa"],
         "poison_benchmarks": ["truthfulqa"], "cost_benchmark": "truthfulqa", "test_limit": 2, "train_limit": 2,
         "top_k": 3}  # K = 3: at K = 1 lambda_t cannot change the pick, but it is recorded all the same


def _kernel_grid(overrides: dict[str, Any], out: Path) -> ExperimentGrid:
    """The grid a notebook kernel builds from what ``reproduce --set ...`` hands it."""
    profile = reproduce.load_profile("tiny", overrides)
    namespace = dict(reproduce.notebook_parameters(profile, reproduce.ReproductionPaths(out, profile.folder)))
    loaded, _ = notebook_setup.resolve_profile(namespace)
    return ExperimentGrid.from_profile(loaded, runs_dir=namespace["runs_dir"], cache_dir=namespace["cache_dir"])


def _lambdas(run_dir: Path) -> list[float]:
    """lambda_t of every retrieval the cell's transcripts record (none: the test cannot pass)."""
    _, records = load_run(run_dir)
    return [turn.retrieved["lambda"] for record in records for round_ in record.rounds for turn in round_.agents
            if turn.retrieved.get("case_ids")]


def _all(values: list[float], expected: float) -> bool:
    return bool(values) and all(v == pytest.approx(expected) for v in values)


def test_the_settings_policy_and_lambda_reach_the_r2mad_rows_and_table_3_keeps_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(points.ENVIRONMENT, raising=False)
    grid = _kernel_grid({**SMALL, "retrieval_policy": "fixed_lambda", "fixed_lambda": 0.3}, tmp_path)
    model = grid.models[0]
    r2mad = grid.run(model, "truthfulqa", "R2-MAD")
    options = json.loads((Path(r2mad.run_dir) / "config.json").read_text())["method"]["options"]
    assert (options["retrieval_policy"], options["fixed_lambda"]) == ("fixed_lambda", 0.3)
    assert "gamma" not in options  # Eq. 6's gamma is not read by a fixed lambda: not part of the cell
    assert _all(_lambdas(Path(r2mad.run_dir)), 0.3)  # what retrieval used, question by question
    # Table 3's rows state their policy and lambda, whatever the settings say
    fixed = grid.run(model, "truthfulqa", "R2-MAD retrieval=Fixed-lambda (0.75)")
    assert _all(_lambdas(Path(fixed.run_dir)), 0.75)
    paper_row = grid.run_dir(model, "truthfulqa", "R2-MAD retrieval=Debate-State-Aware")[0]
    profile_grid = _kernel_grid(SMALL, tmp_path)  # the profile's own R2-MAD: state-aware, the same cell
    assert paper_row == profile_grid.run_dir(model, "truthfulqa", "R2-MAD")[0] != Path(r2mad.run_dir)
    state_aware = grid.run(model, "truthfulqa", "R2-MAD retrieval=Debate-State-Aware")
    recorded = json.loads((Path(state_aware.run_dir) / "config.json").read_text())["method"]["options"]
    assert recorded["retrieval_policy"] == "state_aware" and "fixed_lambda" not in recorded


def test_the_profiles_fixed_lambda_alone_changes_no_cell_of_the_paper_policy(tmp_path: Path) -> None:
    """Under the paper's state-aware policy lambda_t is Eq. 6's: a fixed lambda is no part of any of its cells."""
    base, changed = _kernel_grid(SMALL, tmp_path), _kernel_grid({**SMALL, "fixed_lambda": 0.3}, tmp_path)
    model = base.models[0]
    for row in ("R2-MAD", "R2-MAD w/o Confidence", "R2-MAD retrieval=Fixed-lambda (0.25)"):
        assert base.run_dir(model, "truthfulqa", row)[0] == changed.run_dir(model, "truthfulqa", row)[0], row


@pytest.mark.parametrize("argv, message", [
    (["--set", "retrival_policy=fixed_lambda"], "unknown key 'retrival_policy': not a field of profile tiny, a "
                                                 "protocol choice nor a declared extra parameter; did you mean "
                                                 "retrieval_policy, "),
    (["--set", "retrieval_policy=fixed"], "field 'retrieval_policy': expected one of ('state_aware', 'fixed_lambda'"),
    (["--set", "retrieval_policy=fixed_lambda", "--set", "fixed_lambda=1.5"],
     "field 'fixed_lambda': expected a number <= 1.0, found 1.5"),
])
def test_a_bad_policy_override_is_one_line_naming_it(argv: list[str], message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = reproduce.main(["--profile", "tiny", "--only", "04", *argv, "--dry-run", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_the_command_line_names_the_policy_and_its_lambda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = reproduce.main(["--profile", "tiny", "--only", "04", "--set", "retrieval_policy=fixed_lambda",
                           "--set", "fixed_lambda=0.3", "--dry-run", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "fixed_lambda = 0.3 (profile tiny: 0.5); retrieval_policy = fixed_lambda (profile tiny: state_aware)" in out
    with pytest.raises(ProfileError, match="retrieval_policy"):
        load_profile("tiny", {"retrieval_policy": "fixed_lambda:0.3"})  # the lambda is its own setting
