"""Published runs replay (issue 36): r2mad_lab/reproduce/published.py and its hook in ``make reproduce``.

A real-engine profile's committed tables ship with the generations that made them (published/<profile>/): a run
with no cache yet is seeded from them (a copy; the published file is never written), an existing cache is never
overwritten, ``--fresh`` seeds nothing and reports which committed tables moved, ``make publish`` writes the file
and its manifest. Unit-level with real SQLite response caches (r2mad_lab/engines/cache.py) and hand-made CSVs.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from r2mad_core.engine import Completion
from r2mad_lab import reproduce
from r2mad_lab.engines.cache import CACHE_FILENAME, ResponseCache
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.reproduce import command, published
from r2mad_lab.reproduce.command import ReproductionPaths

CPU = load_profile("cpu")


def make_cache(cache_dir: Path, texts: dict[str, str]) -> Path:
    """A real response cache in ``cache_dir`` holding ``key -> text``."""
    cache = ResponseCache(cache_dir)
    for key, text in texts.items():
        cache.put(key, Completion(text=text, prompt_tokens=3, completion_tokens=2), identity="local:smol.gguf:1",
                  model="SmolLM2", tag="debate")
    cache.close()
    return cache_dir / CACHE_FILENAME


def stored_texts(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as connection:
        return {key: json.loads(completion)["text"]
                for key, completion in connection.execute("SELECT key, completion FROM responses")}


@pytest.fixture
def published_dir(tmp_path: Path) -> Path:
    """published/cpu/ made by the publish step from a two-generation cache."""
    make_cache(tmp_path / "made" / "cache" / "cpu", {"k1": "the answer is 4", "k2": "(B)"})
    root = tmp_path / "published"
    published.publish(CPU, tmp_path / "made" / "cache" / "cpu", root, repository=tmp_path)
    return root


def test_which_profiles_publish_is_whether_an_agent_runs_a_real_engine() -> None:
    assert published.publishes(load_profile("cpu")) and published.publishes(load_profile("paper"))
    assert not published.publishes(load_profile("sim")) and not published.publishes(load_profile("tiny"))


def test_publish_writes_a_compacted_self_contained_copy_and_its_manifest(published_dir: Path, tmp_path: Path) -> None:
    target = published_dir / "cpu" / CACHE_FILENAME
    manifest = json.loads((published_dir / "cpu" / "manifest.json").read_text())
    assert manifest["profile"] == "cpu" and manifest["rows"] == 2
    assert manifest["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert manifest["bytes"] == target.stat().st_size
    assert manifest["models"] == {"local:smol.gguf:1 SmolLM2": 2}
    # the model file is not on this machine: the manifest says so rather than a checksum it could not read
    assert manifest["model_files"] == {"local:smol.gguf:1": {"file": "smol.gguf", "bytes": 1, "found": False}}
    assert set(manifest) >= {"commit", "dirty", "published", "source"}
    assert stored_texts(target) == {"k1": "the answer is 4", "k2": "(B)"}
    with sqlite3.connect(target) as connection:  # a rollback journal: the one file is the whole cache
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert sorted(p.name for p in (published_dir / "cpu").iterdir()) == ["manifest.json", CACHE_FILENAME]


def test_publish_refuses_a_simulated_profile_and_a_missing_cache(tmp_path: Path) -> None:
    make_cache(tmp_path / "cache" / "sim", {"k": "x"})
    with pytest.raises(published.PublishedError, match="simulated .*nothing to publish"):
        published.publish(load_profile("sim"), tmp_path / "cache" / "sim", tmp_path / "published")
    with pytest.raises(published.PublishedError, match="does not exist: run make reproduce PROFILE=cpu first"):
        published.publish(CPU, tmp_path / "cache" / "cpu", tmp_path / "published")
    assert not (tmp_path / "published").exists()


def test_the_publish_command_prints_one_line_and_writes_both_files(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    make_cache(tmp_path / "cache" / "cpu", {"k": "x"})
    code = published.main(["--profile", "cpu", "--output-dir", str(tmp_path), "--published-dir", str(tmp_path / "p")])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(out) == 1 and "1 generations" in out[0] and "commit them with figures/cpu/" in out[0]
    assert (tmp_path / "p" / "cpu" / CACHE_FILENAME).is_file() and (tmp_path / "p" / "cpu" / "manifest.json").is_file()
    assert published.main(["--profile", "sim", "--output-dir", str(tmp_path), "--published-dir",
                           str(tmp_path / "p")]) == 2
    assert "nothing to publish" in capsys.readouterr().err


def test_an_empty_cache_folder_is_seeded_with_a_copy_and_the_published_file_is_never_written(
        published_dir: Path, tmp_path: Path) -> None:
    source = published_dir / "cpu" / CACHE_FILENAME
    before = source.read_bytes()
    paths = ReproductionPaths(tmp_path / "out", "cpu")
    lines: list[str] = []
    replay = published.before_run(CPU, paths, echo=lines.append, published_dir=published_dir, repository=tmp_path)
    assert replay.seeded is not None and len(lines) == 1
    assert lines[0].startswith("reproduce: replaying the published generations:") and "2 generations" in lines[0]
    seeded = paths.cache_dir / CACHE_FILENAME
    assert stored_texts(seeded) == {"k1": "the answer is 4", "k2": "(B)"}
    assert json.loads((paths.cache_dir / published.SEEDED_MARKER).read_text())["rows"] == 2
    cache = ResponseCache(paths.cache_dir)  # the run then writes new generations into its own copy
    assert cache.get("k1").text == "the answer is 4"
    cache.put("k3", Completion(text="new"), identity="local:smol.gguf:1", model="SmolLM2", tag="debate")
    cache.close()
    assert source.read_bytes() == before and "k3" not in stored_texts(source)


def test_an_existing_cache_is_never_seeded_over(published_dir: Path, tmp_path: Path) -> None:
    paths = ReproductionPaths(tmp_path / "out", "cpu")
    make_cache(paths.cache_dir, {"mine": "my own generation"})
    lines: list[str] = []
    replay = published.before_run(CPU, paths, echo=lines.append, published_dir=published_dir, repository=tmp_path)
    assert replay.seeded is None and lines == []
    assert stored_texts(paths.cache_dir / CACHE_FILENAME) == {"mine": "my own generation"}
    assert not (paths.cache_dir / published.SEEDED_MARKER).exists()


def test_fresh_seeds_nothing_and_says_so(published_dir: Path, tmp_path: Path) -> None:
    paths = ReproductionPaths(tmp_path / "out", "cpu")
    lines: list[str] = []
    replay = published.before_run(CPU, paths, fresh=True, echo=lines.append, published_dir=published_dir,
                                  repository=tmp_path)
    assert replay.seeded is None and replay.fresh
    assert not published.has_cache(paths.cache_dir)
    assert len(lines) == 1 and lines[0].startswith("reproduce: --fresh: the published generations (")
    # a cache seeded earlier is still replayed by --fresh: the line says so and how to start from nothing
    published.seed("cpu", paths.cache_dir, published_dir)
    lines.clear()
    published.before_run(CPU, paths, fresh=True, echo=lines.append, published_dir=published_dir, repository=tmp_path)
    assert "(seeded from the published ones), replayed: for a run from nothing remove" in lines[0]


def test_a_simulated_profile_without_a_published_cache_is_unchanged(tmp_path: Path) -> None:
    paths = ReproductionPaths(tmp_path / "out", "sim")
    lines: list[str] = []
    replay = published.before_run(load_profile("sim"), paths, echo=lines.append, published_dir=tmp_path / "none")
    assert lines == [] and replay.seeded is None and replay.committed == {}
    assert not paths.cache_dir.exists()
    # a real-engine profile without one says that its generations are made here
    published.before_run(CPU, ReproductionPaths(tmp_path / "o2", "cpu"), echo=lines.append,
                         published_dir=tmp_path / "none")
    assert len(lines) == 1 and "has no published generations" in lines[0]


def test_a_published_file_that_does_not_match_its_manifest_is_one_line_and_seeds_nothing(
        published_dir: Path, tmp_path: Path) -> None:
    source = published_dir / "cpu" / CACHE_FILENAME
    source.write_bytes(source.read_bytes() + b"x")
    paths = ReproductionPaths(tmp_path / "out", "cpu")
    with pytest.raises(published.PublishedError, match=r"does not match its manifest .*git checkout -- .*--fresh"):
        published.before_run(CPU, paths, published_dir=published_dir, repository=tmp_path)
    assert not published.has_cache(paths.cache_dir)
    (published_dir / "cpu" / "manifest.json").unlink()
    with pytest.raises(published.PublishedError, match="manifest.json is missing"):
        published.seed("cpu", paths.cache_dir, published_dir)


MAIN_COMMITTED = ("method,benchmark,accuracy,n\nCoT,MATH500,0.0,1\nCoT,TruthfulQA,1.0,1\n"
                  "Self-Consistency,TruthfulQA,0.0,1\n")
MAIN_FRESH = "method,benchmark,accuracy,n\nCoT,MATH500,0.0,1\nCoT,TruthfulQA,0.0,1\nSelf-Consistency,TruthfulQA,1.0,1\n"
COST_COMMITTED = "model,method,quantity,value\nSmol,Self-Consistency,debate tokens / query,2658.0\n"
COST_FRESH = "model,method,quantity,value\nSmol,Self-Consistency,debate tokens / query,2796.0\n"


def write_tables(folder: Path, tables: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tables.items():
        (folder / name).write_text(text)
    return folder


def test_the_moved_numbers_report_on_two_hand_made_folders(tmp_path: Path) -> None:
    committed = write_tables(tmp_path / "committed", {"tab_main.csv": MAIN_COMMITTED, "tab_cost.csv": COST_COMMITTED,
                                                      "tab_same.csv": "a,b\nx,1\n", "tab_gone.csv": "a\n1\n",
                                                      "tab_rows.csv": "a,b\nx,1\ny,2\n"})
    fresh = write_tables(tmp_path / "fresh", {"tab_main.csv": MAIN_FRESH, "tab_cost.csv": COST_FRESH,
                                              "tab_same.csv": "a,b\nx,1\n", "tab_rows.csv": "a,b\nx,1\n"})
    read = lambda folder: {p.name: p.read_text() for p in folder.glob("*.csv")}  # noqa: E731
    lines = published.compare_tables(read(committed), read(fresh), reference="figures/cpu at abc1234",
                                     what="this fresh run")
    assert lines[0] == ("reproduce: this fresh run against figures/cpu at abc1234: 3 of 4 tables moved, 1 identical; "
                        "1 not made by this run (tab_gone.csv)")
    by_table = {line.split(":")[0].strip(): line for line in lines[1:]}
    assert set(by_table) == {"tab_main.csv", "tab_cost.csv", "tab_rows.csv"}
    assert by_table["tab_main.csv"] == ("  tab_main.csv: 2 of 12 cells changed; largest: CoT/TruthfulQA / accuracy: "
                                        "1.0 -> 0.0 (-1); Self-Consistency/TruthfulQA / accuracy: 0.0 -> 1.0 (+1)")
    assert ("1 of 4 cells changed; largest: Smol/Self-Consistency/debate tokens / query / value: "
            "2658.0 -> 2796.0 (+138)") in by_table["tab_cost.csv"]
    assert "shape changed: 2 -> 1 rows; 1 committed rows not in this run, 0 new" in by_table["tab_rows.csv"]
    # nothing moved: one line
    assert published.compare_tables(read(committed), read(committed)) == [
        "reproduce: this run against the committed tables: 0 of 5 tables moved, 5 identical"]


def test_changes_are_ranked_by_size_and_cells_with_intervals_compare_their_leading_number() -> None:
    old = 'm,value\nA,"0.500 [0.2, 0.8]"\nB,3\nC,text\nD,10\n'
    new = 'm,value\nA,"0.750 [0.5, 0.9]"\nB,3\nC,other\nD,7\n'
    changed, cells, largest = published.table_changes(old, new)
    assert (changed, cells) == (3, 8)
    assert largest == ["D / value: 10 -> 7 (-3)", "A / value: 0.500 [0.2, 0.8] -> 0.750 [0.5, 0.9] (+0.25)",
                       "C / value: text -> other"]


def test_an_added_column_is_named_and_the_other_columns_still_compared_row_by_row() -> None:
    old = "method,benchmark,value,ci_low,ci_high\nA,X,0.5,0.4,0.6\nB,X,0.25,0.1,0.4\n"
    new = "method,benchmark,value,ci_low,ci_high,se\nA,X,0.5,0.4,0.6,0.05\nB,X,0.3,0.1,0.4,0.06\n"
    assert published.table_changes(old, new) == (
        "columns added: se; on the 5 other columns 1 of 10 cells changed; largest: B/X / value: 0.25 -> 0.3 (+0.05)")
    assert published.table_changes(old, new.replace("B,X,0.3", "B,X,0.25")) == (
        "columns added: se; on the 5 other columns 0 of 10 cells changed")
    assert published.table_changes(new, old).startswith("columns dropped: se; ")


def test_committed_tables_are_read_from_git_head_not_from_the_files_a_run_overwrote(tmp_path: Path) -> None:
    import subprocess

    repository = tmp_path / "repo"
    folder = write_tables(repository / "figures" / "cpu", {"tab_main.csv": MAIN_COMMITTED})
    write_tables(repository / "figures" / "cpu" / "variants" / "x", {"tab_v.csv": "a\n1\n"})
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    (folder / "tab_main.csv").write_text(MAIN_FRESH)  # the run wrote its own
    tables, reference = published.committed_tables("cpu", repository)
    assert tables == {"tab_main.csv": MAIN_COMMITTED} and reference.startswith("figures/cpu at ")
    # no git: the files as they are before the run
    tables, reference = published.committed_tables("cpu", tmp_path / "nogit")
    assert tables == {} and reference == "figures/cpu"


def test_make_reproduce_seeds_before_the_notebooks_and_reports_after_them(
        published_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The hook in reproduce/command.py: the seeded cache is there when the notebooks start; after them, the
    committed tables are compared with the run's."""
    seen = {}

    def fake_run(profile, paths, **_):  # noqa: ANN001, ANN003
        seen["cache"] = stored_texts(paths.cache_dir / CACHE_FILENAME)
        write_tables(paths.figures_dir, {"tab_main.csv": MAIN_FRESH})
        return []

    monkeypatch.setattr(command, "run_notebooks", fake_run)
    monkeypatch.setattr(published, "PUBLISHED_DIR", published_dir)
    monkeypatch.setattr(published, "committed_tables", lambda folder, repository=None: (
        {"tab_main.csv": MAIN_COMMITTED}, "figures/cpu at abc1234"))
    monkeypatch.setattr(command.paper_run, "gpu_models", lambda profile: [])
    assert reproduce.main(["--profile", "cpu", "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert seen["cache"] == {"k1": "the answer is 4", "k2": "(B)"}
    assert "reproduce: replaying the published generations:" in out
    assert ("reproduce: this replay of the published generations against figures/cpu at abc1234: 1 of 1 tables "
            "moved, 0 identical") in out
    # --fresh on a second output folder: nothing seeded, the fresh run compared
    seen.clear()
    def fresh_run(profile, paths, **_):  # noqa: ANN001, ANN003
        seen["cache"] = published.has_cache(paths.cache_dir)
        return []

    monkeypatch.setattr(command, "run_notebooks", fresh_run)
    assert reproduce.main(["--profile", "cpu", "--fresh", "--output-dir", str(tmp_path / "fresh")]) == 0
    out = capsys.readouterr().out
    assert seen["cache"] is False and "reproduce: --fresh: the published generations (" in out
    assert "this fresh run against figures/cpu at abc1234: 0 of 0 tables moved, 0 identical; 1 not made" in out


def write_timings(executed_dir: Path, seconds: dict[str, float]) -> None:
    executed_dir.mkdir(parents=True, exist_ok=True)
    (executed_dir / "timings.json").write_text(json.dumps(
        {name: {"seconds": s, "succeeded": True, "finished": "2026-11-28T10:00:00+0000"}
         for name, s in seconds.items()}))


def test_publish_keeps_the_generating_runs_notebook_times_and_a_run_from_nothing_is_told_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 52: a replay's timings (minutes) are no estimate for a run generating anew (an hour): the manifest keeps
    the generating run's, a run from nothing starts the longest first and counts its time left from them."""
    made = tmp_path / "made"
    make_cache(made / "cache" / "cpu", {"k": "x"})
    write_timings(made / "notebooks" / "executed" / "cpu", {"04_ablations": 1833.0, "01_data": 12.5})
    assert published.main(["--profile", "cpu", "--output-dir", str(made), "--published-dir", str(tmp_path / "p")]) == 0
    manifest = json.loads((tmp_path / "p" / "cpu" / "manifest.json").read_text())
    assert manifest["generation_seconds"] == {"01_data": 12.5, "04_ablations": 1833.0}
    # a cache seeded from published/ was replayed there: its timings are not a generation's
    (made / "cache" / "cpu" / published.SEEDED_MARKER).write_text("{}")
    assert "generation_seconds" not in published.publish(CPU, made / "cache" / "cpu", tmp_path / "q",
                                                         executed_dir=made / "notebooks" / "executed" / "cpu")
    # who is told them: only a run whose cache is empty when the notebooks start
    assert (published.generation_hints(CPU, tmp_path / "empty", tmp_path / "p")
            == {"01_data": 12.5, "04_ablations": 1833.0})
    assert published.generation_hints(CPU, made / "cache" / "cpu", tmp_path / "p") == {}
    assert published.generation_hints(CPU, tmp_path / "empty", tmp_path / "nothing-published") == {}
    # through make reproduce's runner: the display gets the generating run's times, not the committed replay's
    seen: dict[str, dict[str, float]] = {}

    class Seen(Exception):
        pass

    def display(position, notebooks, hints, echo):  # noqa: ANN001, ANN202
        seen["hints"] = dict(hints)
        raise Seen

    monkeypatch.setattr(published, "PUBLISHED_DIR", tmp_path / "p")
    monkeypatch.setattr(published.generation_hints, "__defaults__", (tmp_path / "p",))
    monkeypatch.setattr(command.notebook_runner, "Display", display)
    fresh = ReproductionPaths(tmp_path / "fresh", "cpu")
    write_timings(fresh.executed_dir, {"04_ablations": 72.9})  # a replay's, as committed for cpu
    # from nothing: the generating run's times; with a cache (a resumed run): the folder's own
    for paths, expected in ((fresh, {"01_data": 12.5, "04_ablations": 1833.0}),
                            (ReproductionPaths(made, "cpu"), {"04_ablations": 1833.0, "01_data": 12.5})):
        with pytest.raises(Seen):
            command.run_notebooks(CPU, paths, only=["04_ablations"], echo=lambda line: None, up_to_date_check=None)
        assert seen["hints"] == expected
    write_timings(ReproductionPaths(made, "cpu").executed_dir, {"04_ablations": 80.0})
    with pytest.raises(Seen):
        command.run_notebooks(CPU, ReproductionPaths(made, "cpu"), only=["04_ablations"], echo=lambda line: None)
    assert seen["hints"] == {"04_ablations": 80.0}


def test_dirty_names_changes_besides_the_publication_itself(tmp_path: Path) -> None:
    """Publishing rewrites published/<profile>/, a tracked folder: that alone does not make the tree dirty."""
    import subprocess

    repository = tmp_path / "repo"
    make_cache(tmp_path / "cache" / "cpu", {"k": "x"})
    published.publish(CPU, tmp_path / "cache" / "cpu", repository / "published", repository=tmp_path)  # not a repo yet
    (repository / "code.py").write_text("x = 1\n")
    git = ["git", "-C", str(repository), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    make_cache(tmp_path / "cache" / "cpu", {"k2": "y"})  # another generation: the published file changes
    again = published.publish(CPU, tmp_path / "cache" / "cpu", repository / "published", repository=repository)
    assert again["rows"] == 2 and again["dirty"] is False
    (repository / "code.py").write_text("x = 2\n")
    assert published.publish(CPU, tmp_path / "cache" / "cpu", repository / "published",
                             repository=repository)["dirty"] is True
