"""``--method-option key=value``: any option a method declares, validated against the method's signature."""

from __future__ import annotations

import json
from pathlib import Path

from r2mad_lab.cli import commands as cli


def run(tmp_path: Path, *extra: str) -> int:
    return cli.main(["run", "--benchmark", "truthfulqa", "--method", "mad_m2", "--engine", "simulated", "--limit", "1",
                     "--no-progress", "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"), *extra])


def test_a_declared_option_reaches_the_method(tmp_path: Path) -> None:
    assert run(tmp_path, "--method-option", "round0=independent", "--method-option", "objective_keep=better_half") == 0
    options = json.loads((tmp_path / "run" / "config.json").read_text())["method"]["options"]
    assert options["round0"] == "independent" and options["objective_keep"] == "better_half"


def test_an_undeclared_option_is_one_line_listing_the_declared_ones(tmp_path: Path, capsys) -> None:
    assert run(tmp_path, "--method-option", "use_confidence=false") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--method-option use_confidence do not apply to method mad_m2" in err
    assert "objective_keep" in err and "round0" in err
    assert not (tmp_path / "run").exists()


def test_an_option_given_twice_is_refused(tmp_path: Path, capsys) -> None:
    assert run(tmp_path, "--round0", "shared", "--method-option", "round0=independent") == 2
    assert "given twice" in capsys.readouterr().err


def test_a_bad_value_names_the_option(tmp_path: Path, capsys) -> None:
    assert run(tmp_path, "--method-option", "round0=paired") == 2
    assert "option round0 must be one of ('shared', 'independent'), found 'paired'" in capsys.readouterr().err
