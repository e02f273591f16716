"""The committed artifacts (figures/<profile>/MANIFEST.json) were built by the code at HEAD.

Every artifact records the git commit that produced it (r2mad_lab.report.artifacts.git_commit). This test fails
when a committed manifest names a commit whose code trees (``r2mad_core``, ``r2mad_lab``) differ from HEAD's, or a
commit built from uncommitted changes (``dirty``): the figures would then show what older code did. Regenerate them
(``make reproduce PROFILE=sim``, ``PROFILE=cpu``) at a commit and commit the figures after it.

Only the committed manifests under figures/ are checked (not the output of a test run).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from r2mad_lab import CODE_PACKAGES
from r2mad_lab.report.volatile import code_tree

REPO = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def _committed_manifests() -> list[str]:
    try:
        listed = _git("ls-files", "figures/*/MANIFEST.json")
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in listed.splitlines() if line]


def _tree(commit: str) -> tuple[str, ...] | None:
    """The git trees of the code packages at ``commit``: the one reading the manifests' same-code check uses."""
    return code_tree(commit)


@pytest.mark.parametrize("manifest", _committed_manifests() or ["(none)"])
def test_committed_artifacts_were_built_by_the_code_at_head(manifest: str) -> None:
    if manifest == "(none)":
        pytest.skip("not a git checkout, or no committed figures")
    head = _tree("HEAD")
    assert head is not None, f"HEAD holds no tree for one of {CODE_PACKAGES}: commit the code first"
    committed = json.loads(_git("show", f"HEAD:{manifest}"))
    stale, dirty = {}, []
    for name, record in committed["artifacts"].items():
        git = record.get("git") or {}
        commit = git.get("commit", "unknown")
        if commit == "unknown" or _tree(commit) != head:
            stale[name] = commit[:10]
        if git.get("dirty"):
            dirty.append(name)
    assert not stale, (
        f"{manifest}: {len(stale)} artifacts were built by code whose code (r2mad_core, r2mad_lab) differs from HEAD's "
        f"(artifact: commit), e.g. {dict(list(stale.items())[:5])}; regenerate them at HEAD")
    assert not dirty, f"{manifest}: built from uncommitted changes: {dirty[:5]}"


def test_executed_notebooks_being_written_do_not_make_the_code_dirty(tmp_path: Path) -> None:
    """A reproduction writes notebooks/executed/ while it runs: that must not mark its artifacts as built from
    uncommitted code; a change to r2mad_core or a notebook's source must."""
    import subprocess

    from r2mad_lab.report.artifacts import git_commit

    repo = tmp_path / "repo"
    for folder in ("r2mad_core", "notebooks/executed/sim"):
        (repo / folder).mkdir(parents=True)
    (repo / "r2mad_core" / "m.py").write_text("x = 1\n")
    (repo / "notebooks" / "01.ipynb").write_text("{}\n")
    (repo / "notebooks" / "executed" / "sim" / "01.ipynb").write_text("{}\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "."], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-qm", "x"], cwd=repo, check=True)
    (repo / "notebooks" / "executed" / "sim" / "01.ipynb").write_text('{"cells": []}\n')
    assert git_commit(repo)["dirty"] is False
    (repo / "notebooks" / "01.ipynb").write_text('{"cells": []}\n')
    assert git_commit(repo)["dirty"] is True
