"""Damaged and hand-edited files (issue 33): a run folder without config.json, config.json and bank manifests of
the wrong types, a bank whose agent folder points out of it, SQLite caches that fail after they opened. Each is one
line naming the file and what to do, a non-zero exit, and nothing adopted, written or lost."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from r2mad_core.engine import Completion
from r2mad_lab.cli import commands as cli
from r2mad_lab.engines import EngineError, Request, SamplingParams
from r2mad_lab.engines.cache import ResponseCache
from r2mad_lab.experiments.cell import CONFIG_FILE, TRANSCRIPTS_FILE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_bad_inputs import make_bank, train_samples  # noqa: E402,F401  (the module's bank builder and fixture)

RUN = ["--benchmark", "truthfulqa", "--engine", "simulated", "--limit", "3", "--no-cache", "--no-progress"]


def _cli(argv: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


# ----------------------------------------------------------------------------------------------
# Run folders
# ----------------------------------------------------------------------------------------------
def test_a_run_folder_without_config_json_does_not_adopt_another_methods_transcripts(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    code, _, err = _cli(["run", "--method", "cot", *RUN, "--out", out], capsys)
    assert code == 0, err
    transcripts = (out / TRANSCRIPTS_FILE).read_bytes()
    (out / CONFIG_FILE).unlink()
    code, printed, err = _cli(["run", "--method", "mad", *RUN, "--out", out], capsys)
    line = _one_line(err)
    assert code == 2 and printed == ""
    assert line.startswith("r2mad run: error: ") and "config.json: missing, but" in line
    assert "restore config.json, or use another --out directory" in line
    assert (out / TRANSCRIPTS_FILE).read_bytes() == transcripts and not (out / CONFIG_FILE).exists()


def test_records_of_another_method_are_refused_even_under_a_matching_config(tmp_path, capsys) -> None:
    """config.json is the first check; the records themselves say their method, and are checked too."""
    cot, mad = tmp_path / "cot", tmp_path / "mad"
    assert _cli(["run", "--method", "cot", *RUN, "--out", cot], capsys)[0] == 0
    assert _cli(["run", "--method", "mad", *RUN, "--out", mad], capsys)[0] == 0
    shutil.copy(cot / TRANSCRIPTS_FILE, mad / TRANSCRIPTS_FILE)  # CoT's debates under MAD's config
    code, _, err = _cli(["run", "--method", "mad", *RUN, "--out", mad], capsys)
    assert code == 2 and "was run with method 'cot', this cell's is 'mad'" in _one_line(err)


@pytest.mark.parametrize("config, expected", [
    ([], "config.json: does not fit the run configuration schema"),
    ("{", "config.json: not valid JSON"),
    ({"format": 1}, "config.json: does not fit the run configuration schema"),
])
def test_a_hand_edited_config_json_is_one_line(tmp_path, capsys, config: Any, expected: str) -> None:
    out = tmp_path / "run"
    assert _cli(["run", "--method", "cot", *RUN, "--out", out], capsys)[0] == 0
    (out / CONFIG_FILE).write_text(config if isinstance(config, str) else json.dumps(config))
    code, _, err = _cli(["run", "--method", "cot", *RUN, "--out", out], capsys)
    line = _one_line(err)
    assert code == 2 and expected in line and "use another --out directory" in line
    code, _, err = _cli(["score", out], capsys)
    assert code == 2 and expected.split(":")[0] in _one_line(err)


# ----------------------------------------------------------------------------------------------
# Bank manifests
# ----------------------------------------------------------------------------------------------
def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(bank: Path) -> None:
        manifest = json.loads((bank / "manifest.json").read_text())
        change(manifest)
        (bank / "manifest.json").write_text(json.dumps(manifest))
    return damage


def _first_file(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["files"][sorted(manifest["files"])[0]]


BAD_MANIFESTS = {
    "embedder a string": (_edit(lambda m: m.update(embedder="hashing-64")), "field embedder: "),
    "agent without directory": (_edit(lambda m: m["agents"][0].pop("directory")), "field agents.0.directory: "),
    "file without sha256": (_edit(lambda m: _first_file(m).pop("sha256")), ".sha256: Field required (found missing)"),
    "n_agents a word": (_edit(lambda m: m.update(n_agents="three")), "field n_agents: "),
    "agents not a list": (_edit(lambda m: m.update(agents={"0": "agent_0"})), "field agents: "),
    "agent directory out of the bank": (_edit(lambda m: m["agents"][0].update(directory="../elsewhere")),
                                        "a path inside the bank folder (like agent_0), found '../elsewhere'"),
    "agent directory absolute": (_edit(lambda m: m["agents"][0].update(directory="/etc")),
                                 "a path inside the bank folder (like agent_0), found '/etc'"),
    "file path out of the bank": (_edit(lambda m: m["files"].update({"../x.npy": _first_file(m)})),
                                  "found '../x.npy'"),
}


@pytest.fixture(scope="module")
def good_bank(tmp_path_factory, train_samples) -> Path:  # noqa: F811
    return make_bank(tmp_path_factory.mktemp("bank") / "bank", train_samples)


@pytest.mark.parametrize("name", sorted(BAD_MANIFESTS))
@pytest.mark.parametrize("command", ["audit", "run"])
def test_a_hand_edited_bank_manifest_is_one_line(tmp_path, good_bank, capsys, name: str, command: str) -> None:
    damage, expected = BAD_MANIFESTS[name]
    bank = tmp_path / "bank"
    shutil.copytree(good_bank, bank)
    damage(bank)
    argv = ["audit", bank, "--no-embeddings"] if command == "audit" else \
        ["run", "--method", "r2mad", "--memory", bank, *RUN, "--out", tmp_path / "run"]
    code, printed, err = _cli(argv, capsys)
    line = _one_line(err)
    assert code == 2 and printed == ""
    assert line.startswith(f"r2mad {command}: error: ") and "manifest.json" in line and expected in line, line
    assert not (tmp_path / "run").exists()


def test_an_agent_folder_linked_out_of_the_bank_is_refused(tmp_path, good_bank, capsys) -> None:
    bank, elsewhere = tmp_path / "bank", tmp_path / "elsewhere"
    shutil.copytree(good_bank, bank)
    shutil.move(bank / "agent_0", elsewhere)
    (bank / "agent_0").symlink_to(elsewhere)
    code, _, err = _cli(["audit", bank, "--no-embeddings"], capsys)
    assert code == 2 and "agent directory 'agent_0' leads out of the bank folder" in _one_line(err)


# ----------------------------------------------------------------------------------------------
# The response cache after it opened
# ----------------------------------------------------------------------------------------------
def _completion(text: str = "an answer") -> Completion:
    return Completion(text=text, prompt_tokens=3, completion_tokens=2)


def _key(n: int) -> str:
    return Request(messages=({"role": "user", "content": f"q{n}"},), params=SamplingParams()).key("e", "m")


def _cache_with_rows(folder: Path, rows: int) -> ResponseCache:
    cache = ResponseCache(folder)
    for n in range(rows):
        cache.put(_key(n), _completion("x" * 4000), identity="e", model="m", tag="t")
    return cache


def test_an_unwritable_cache_is_one_line_naming_the_file(tmp_path) -> None:
    cache = _cache_with_rows(tmp_path, 1)
    cache._conn.execute("PRAGMA query_only = ON")  # as a read-only file or folder answers writes (root ignores modes)
    with pytest.raises(EngineError) as caught:
        cache.put(_key(99), _completion(), identity="e", model="m", tag="t")
    message = str(caught.value)
    assert "\n" not in message and str(cache.path) in message
    assert "cannot write" in message and "R2MAD_CACHE_DIR" in message
    assert cache.get(_key(0)) is not None  # what was stored is still there
    cache.close()


def test_a_full_disk_is_one_line_naming_the_file(tmp_path) -> None:
    cache = _cache_with_rows(tmp_path, 1)
    pages = cache._conn.execute("PRAGMA page_count").fetchone()[0]
    cache._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite answers as on a full disk: SQLITE_FULL
    with pytest.raises(EngineError) as caught:
        for n in range(1, 50):
            cache.put(_key(n), _completion("y" * 4000), identity="e", model="m", tag="t")
    message = str(caught.value)
    assert "\n" not in message and str(cache.path) in message and "disk is full" in message and "free space" in message
    assert cache.get(_key(0)) is not None
    cache.close()


def test_damaged_pages_are_one_line_naming_the_file(tmp_path) -> None:
    _cache_with_rows(tmp_path, 40).close()
    path = tmp_path / "responses.sqlite"
    data = bytearray(path.read_bytes())
    page = 16384
    for start in range(2 * page, len(data) - page, page):  # every page but the first two: the rows' B-tree pages
        data[start:start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(EngineError) as caught:
        cache = ResponseCache(tmp_path)
        try:
            cache.get_many([_key(n) for n in range(40)])
            cache.put(_key(99), _completion(), identity="e", model="m", tag="t")
        finally:
            cache.close()
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "damaged" in message and "move it away" in message


def test_a_foreign_database_with_a_responses_table_is_refused_untouched(tmp_path) -> None:
    path = tmp_path / "responses.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE responses (id INTEGER PRIMARY KEY, body TEXT)")
    connection.execute("INSERT INTO responses (body) VALUES ('theirs')")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    with pytest.raises(EngineError) as caught:
        ResponseCache(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "not an r2mad response cache" in message
    assert path.read_bytes() == before
    connection = sqlite3.connect(path)
    assert [r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["responses"]
    connection.close()


# ----------------------------------------------------------------------------------------------
# Issue 51: the cache's folder, published manifests
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["folder is a file", "cache file is a folder", "folder under a file"])
def test_a_cache_folder_that_cannot_be_opened_is_one_line_naming_it(tmp_path, damage: str) -> None:
    """``sqlite3.connect`` (and the folder's mkdir) sat before the ``try``: 20 lines of traceback."""
    from r2mad_lab.engines.cache import CACHE_FILENAME

    folder = tmp_path / "cache"
    if damage == "folder is a file":
        folder.write_text("not a folder")
    elif damage == "cache file is a folder":
        (folder / CACHE_FILENAME).mkdir(parents=True)
    else:
        (tmp_path / "file").write_text("x")
        folder = tmp_path / "file" / "cache"
    with pytest.raises(EngineError) as caught:
        ResponseCache(folder)
    message = str(caught.value)
    assert "\n" not in message and str(folder) in message and "R2MAD_CACHE_DIR" in message


_SHA = "0" * 64


@pytest.mark.parametrize("manifest, field", [
    ("[]", "expected a JSON object"),
    ('"text"', "expected a JSON object"),
    ('{"rows": 3, "commit": null}', "field 'sha256' is missing"),
    ('{"sha256": 5, "rows": 3}', "field 'sha256': expected 64 hexadecimal digits"),
    ('{"sha256": "%s", "rows": -1}' % _SHA, "field 'rows': expected a whole number >= 0"),
    ('{"sha256": "%s", "rows": 1, "commit": []}' % _SHA, "field 'commit'"),
], ids=["list", "string", "no sha256", "sha256 a number", "negative rows", "commit a list"])
def test_a_damaged_published_manifest_is_one_line_naming_the_file_and_field(
        tmp_path, manifest: str, field: str) -> None:
    from r2mad_lab.engines.cache import CACHE_FILENAME
    from r2mad_lab.reproduce.published import PublishedError, seed

    published = tmp_path / "published" / "probe"
    published.mkdir(parents=True)
    _cache_with_rows(tmp_path / "made", 2).close()
    shutil.copyfile(tmp_path / "made" / CACHE_FILENAME, published / CACHE_FILENAME)
    (published / "manifest.json").write_text(manifest)
    with pytest.raises(PublishedError) as caught:
        seed("probe", tmp_path / "cache", tmp_path / "published")
    message = str(caught.value)
    assert "\n" not in message and "manifest.json" in message and field in message
    assert not (tmp_path / "cache" / CACHE_FILENAME).exists()  # nothing copied
