"""The notebooks: their parameters cells, and ALL of them executed in order through papermill with the
``tiny`` profile (simulated agents, hashing embedder, a handful of questions), then the artifacts the
manifest lists, the paper-table counterparts, and a rerun that generates nothing new."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from benchmark_data import configured_data_dir

from r2mad_lab.experiments.profile_schema import OPTIONAL_FIELDS, TOP_LEVEL_FIELDS
from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.report import run_pages
from r2mad_lab.report.artifacts import read_manifest
from r2mad_lab.report.tables import NOT_RUN, read_table
from r2mad_lab.reproduce import command as reproduce
from r2mad_lab.reproduce.notebook_runner import KERNEL_START_TIMEOUT

if TYPE_CHECKING:
    import nbformat

# nbformat and papermill are imported where used: with papermill's jupyter_client, nbclient and tornado they take
# ~0.45 s of CPU to import, which every `make test` worker paid while collecting this module (each worker collects
# every module; one runs this one's fast tests, the notebooks' runs are slow).
REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
#: The theory notebook belongs to the theory work; its grid parameters are its own.
OWN_PARAMETERS_ONLY_EXEMPT = {"08_theory"}

#: The counterpart of every table and figure of the paper (issue 7, item 2).
PAPER_ARTIFACTS = {
    "tab_main_results": "tab:main_results",
    "tab_ablation": "tab:ablation",
    "tab_retrieval_ablation": "tab:retrieval_ablation",
    "tab_flip_recovery": "tab:flip_recovery",
    "tab_flip_recovery_extra": "tab:flip_recovery_extra",
    "tab_mad_m2": "tab:mad-m2",
    "tab_sc_ablation": "tab:sc_ablation",
    "tab_large_models": "tab:large_models",
    "tab_icl_cot": "tab:icl_cot",
    "tab_cost": "tab:cost",
    "fig_shared_misconception": "fig:combined_eval",
    "fig_qwen3_eval": "fig:qwen3_eval",
}


def _data_args() -> list[str]:
    """``--data-dir $R2MAD_DATA_DIR`` when set; none (the packaged files) otherwise."""
    data_dir = configured_data_dir()
    return ["--data-dir", str(data_dir)] if data_dir else []


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob(reproduce.NOTEBOOK_GLOB))


def _parameters_cell(path: Path) -> nbformat.NotebookNode:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: expected one cell tagged 'parameters', found {len(cells)}"
    assert cells[0].cell_type == "code"
    return cells[0]


def test_the_ten_notebooks_are_there_in_order() -> None:
    numbers = [p.name[:2] for p in _notebooks()]
    assert numbers == [f"{i:02d}" for i in range(1, 11)]


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_papermill_reads_every_parameter(path: Path) -> None:
    """A parameter papermill cannot parse is silently not injected (e.g. '=' inside a string)."""
    import papermill

    cell = _parameters_cell(path)
    assigned = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    declared = set(papermill.inspect_notebook(str(path)))
    assert declared == assigned, f"{path.name}: papermill does not see {sorted(assigned - declared)}"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_parameters_cells_hold_the_profile_and_what_a_reader_edits(path: Path) -> None:
    """Issue 30: a parameters cell declares the profile, its overrides and the paths (the theory notebook its own
    grid sizes too), nothing the profile holds: the grid is built from the profile, never from copied fields."""
    import nbformat

    from r2mad_lab.reproduce.notebook_setup import NOTEBOOK_PARAMETERS

    cell = _parameters_cell(path)
    names = []
    for node in ast.parse(cell.source).body:
        if not isinstance(node, ast.Assign):
            continue
        name = node.targets[0].id  # type: ignore[attr-defined]
        names.append(name)
        if name == "profile":
            assert ast.literal_eval(node.value) == "tiny", f"{path.name}: profile defaults to tiny"
        fields = (*TOP_LEVEL_FIELDS, *OPTIONAL_FIELDS)
        assert name not in fields, f"{path.name}: {name} is a profile field (the profile holds it; use overrides)"
        if path.stem not in OWN_PARAMETERS_ONLY_EXEMPT:
            assert name in NOTEBOOK_PARAMETERS, f"{path.name}: {name} is not one of {NOTEBOOK_PARAMETERS}"
    assert names[:len(NOTEBOOK_PARAMETERS)] == list(NOTEBOOK_PARAMETERS), f"{path.name}: {names}"
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert "setup(globals()" in source, f"{path.name}: does not use notebook_setup.setup"
    assert "logging.basicConfig" not in source, f"{path.name}: configures logging itself"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reproduce")  # the packaged data unless $R2MAD_DATA_DIR (tests/benchmark_data.py)
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(out), *_data_args()])
    assert code == 0, "make reproduce PROFILE=tiny failed (see the output above)"
    return out


def test_all_notebooks_run_and_write_every_artifact_of_the_manifest(tiny_run: Path) -> None:
    import nbformat

    figures = tiny_run / "figures" / "tiny"
    manifest = read_manifest(figures)["artifacts"]
    for name, record in manifest.items():
        for file_name in record["files"]:
            path = figures / file_name
            assert path.is_file() and path.stat().st_size > 0, f"{name}: {file_name} missing or empty"
        assert record["profile"] == "tiny", name
        assert record["git"]["commit"], name
    for name, label in PAPER_ARTIFACTS.items():
        assert name in manifest, f"no counterpart of {label}"
        assert manifest[name]["paper_label"] == label
    # every executed notebook is saved, with no error output
    executed = tiny_run / "notebooks" / "executed" / "tiny"
    for path in _notebooks():
        nb = nbformat.read(executed / path.name, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.output_type == "error"]
        assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    timings = json.loads((executed / "timings.json").read_text())
    assert set(timings) == {p.stem for p in _notebooks()} and all(t["succeeded"] for t in timings.values())


def test_paper_tables_have_the_papers_shape(tiny_run: Path) -> None:
    figures = tiny_run / "figures" / "tiny"
    profile = load_profile("tiny")
    main = read_table(figures / "tab_main_results.csv")
    assert list(main.values.index) == ["CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD"]
    assert list(main.values.columns) == ["MATH500", "Economics", "Engineering", "TruthfulQA", "Average"]
    values = main.values.astype(float)
    assert ((values >= 0) & (values <= 1)).all().all()
    assert ((main.ci_low.astype(float) <= values + 1e-12).all().all()
            and (values <= main.ci_high.astype(float) + 1e-12).all().all())
    # Average is the mean of the four benchmarks
    assert values["Average"].tolist() == pytest.approx(values.iloc[:, :4].mean(axis=1).tolist())
    ablation = read_table(figures / "tab_ablation.csv")
    assert list(ablation.values.index) == ["R2-MAD", "R2-MAD w/o Confidence", "R2-MAD w/o Memory"]
    sc = read_table(figures / "tab_sc_ablation.csv")
    assert list(sc.values.index) == [f"Self-Consistency ({k})" for k in profile["sc_paths"]]
    retrieval = read_table(figures / "tab_retrieval_ablation.csv")
    assert (len(retrieval.values) == len(profile["retrieval_policies"])
            and "Debate-State-Aware" in retrieval.values.index)
    large = read_table(figures / "tab_large_models.csv")
    assert sorted(set(large.values.index.get_level_values("model"))) == ["GPT-4o-mini", "Llama-3.3-70B-Instruct"]
    # the profile names only stand-ins for them: not run, and said so (never the stand-in's numbers)
    assert (large.values == NOT_RUN).all().all()
    manifest = read_manifest(figures)["artifacts"]
    assert NOT_RUN in manifest["tab_large_models"]["caption"]
    cost = pd.read_csv(figures / "tab_cost.csv")
    assert set(cost["method"]) == {"Self-Consistency", "MAD", "R2-MAD"}
    comparison = pd.read_csv(figures / "tab_paper_comparison.csv")
    main_rows = comparison[comparison["table"] == "tab:main_results"]
    assert len(main_rows) == 25 and (main_rows["paper"] != "--").all()  # 5 methods x (4 benchmarks + Average)
    claims = pd.read_csv(figures / "tab_paper_claims.csv")
    assert "R2-MAD > MAD" in set(claims["ordering"]) and claims["holds_in_paper"].all()


def test_a_second_run_generates_nothing_new(tiny_run: Path) -> None:
    """Nothing is generated again: no transcript (run cells, memory banks' debates) is written to, no run is added.
    (The simulated agents run uncached since issue 35, so the response cache cannot count it.)"""
    runs = tiny_run / "runs" / "tiny"

    def state() -> tuple[list[tuple[str, int, int]], int]:
        transcripts = sorted((str(p.relative_to(runs)), p.stat().st_size, p.stat().st_mtime_ns)
                             for p in runs.rglob("*.jsonl"))
        return transcripts, sum(1 for _ in runs.rglob("config.json"))

    before = state()
    assert len(before[0]) > 0 and before[1] > 0
    assert not (tiny_run / "cache" / "tiny" / "responses.sqlite").exists()  # nothing to replay: all recomputed or read
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args(), "--only", "03,06"])
    assert code == 0
    assert state() == before


# --------------------------------------------------------------------------------------------
# Issue 14: every artifact of the tiny profile says exactly what ran
# --------------------------------------------------------------------------------------------

#: Tables that put reproduced and paper models side by side on purpose (their paper_model column).
COMPARISON_TABLES = {"tab_paper_comparison", "tab_paper_claims"}
RESULTS_NOTEBOOKS = ("03_main_results", "04_ablations", "05_baselines", "06_shared_misconception", "07_cost",
                     "08_theory", "09_poisoned_memory", "10_report")


def _first_number(text: str) -> float | None:
    import re

    match = re.match(r"\s*(-?[0-9][0-9,]*\.?[0-9]*)", str(text))
    return float(match.group(1).replace(",", "")) if match else None


def test_artifacts_name_only_models_that_ran_or_say_not_run(tiny_run: Path) -> None:
    """A row, column or panel for a model the profile did not run says 'not run in this profile'; no
    table or figure names a paper model the profile only stands in for (that goes in captions)."""
    figures = tiny_run / "figures" / "tiny"
    profile = load_profile("tiny")
    ran = {m["label"] for m in profile["models"]}
    stood_in_for = {m["stands_in_for"] for m in profile["models"] if m.get("stands_in_for")}
    manifest = read_manifest(figures)["artifacts"]
    checked = 0
    for name, record in sorted(manifest.items(), key=lambda item: item[1]["kind"] != "table"):  # tables first
        if record["kind"] == "table" and name not in COMPARISON_TABLES:
            frame = pd.read_csv(figures / f"{name}.csv")
            if "model" in frame.columns:
                for model, part in frame.groupby("model"):
                    if model in ran or model == "Average":
                        continue
                    values = part["value"] if "value" in part.columns else part.drop(columns=["model"]).stack()
                    assert (values.astype(str) == NOT_RUN).all(), (
                        f"{name}: rows for {model!r}, which the profile did not run, show numbers")
                    checked += 1
            text = (figures / f"{name}.md").read_text().split("\n\n")[0]  # the table, not its caption
            for paper_model in stood_in_for:
                assert paper_model not in text, f"{name}: names {paper_model} (a stand-in ran) outside its caption"
        if record["kind"] == "figure":
            labels = record["labels"]
            shown = [t for kind in ("titles", "axes", "ticks", "legends") for t in labels[kind]]
            for paper_model in stood_in_for:
                assert not any(paper_model in t for t in shown), (
                    f"{name}: a title, axis or legend names {paper_model}, which only a stand-in ran")
    assert checked >= 3  # the two large models, the two extra flip-recovery models
    # the larger models and the models of the extra figure/table are not run, and say so
    assert NOT_RUN in manifest["tab_large_models"]["caption"]
    assert any(NOT_RUN in t for t in manifest["fig_qwen3_eval"]["labels"]["annotations"])
    assert not any(t.startswith("Simulated") for t in manifest["fig_qwen3_eval"]["labels"]["titles"])
    extra = read_table(figures / "tab_flip_recovery_extra.csv")
    assert set(extra.values.index.get_level_values("model")) == {"Qwen3-8B", "Gemma-3-4B-IT"}
    assert (extra.values == NOT_RUN).all().all()


def test_figures_name_the_engine_and_what_they_cover(tiny_run: Path) -> None:
    manifest = read_manifest(tiny_run / "figures" / "tiny")["artifacts"]
    title = " ".join(manifest["fig_paper_vs_reproduced"]["labels"]["titles"])
    assert "simulated agents" in title
    assert all("simulated agents" in t for t in manifest["fig_paper_vs_reproduced"]["labels"]["legends"]
               if t.startswith("tab:"))
    assert "Simulated" in " ".join(manifest["fig_retrieval_ablation"]["labels"]["ticks"])
    caption = manifest["fig_confidence_distribution"]["caption"]
    assert all(b in caption for b in ("MATH500", "Economics", "Engineering", "TruthfulQA"))
    bound = manifest["fig_theory_bound"]["labels"]
    assert not any("Eq. joint_bound" in t or "joint_bound" in t for t in bound["axes"])


def test_every_caption_of_a_run_says_what_produced_it(tiny_run: Path) -> None:
    """Tables and figures built from runs (every notebook but the data and theory ones) name the engine and model
    in their caption, e.g. the memory audit and the paper comparison, which once did not say "simulated"."""
    manifest = read_manifest(tiny_run / "figures" / "tiny")["artifacts"]
    from_runs = {name: r for name, r in manifest.items() if r["notebook"] not in ("01_data", "08_theory")}
    assert {"tab_memory_audit", "tab_paper_claims", "tab_paper_comparison"} <= set(from_runs)
    unnamed = [name for name, r in from_runs.items() if "Simulated (simulated agents)" not in r["caption"]]
    assert not unnamed, f"captions that do not say what produced them: {unnamed}"
    assert not any("simulated" in r["caption"].lower() for r in manifest.values() if r["notebook"] == "01_data")


def test_claims_hold_only_when_strict_and_count_each_comparison_once(tiny_run: Path) -> None:
    figures = tiny_run / "figures" / "tiny"
    claims = pd.read_csv(figures / "tab_paper_claims.csv")
    for row in claims.itertuples():
        better, worse = (float(x) for x in row.reproduced.split(" vs "))
        expected = "as claimed" if better > worse else ("tie" if better == worse else "reversed")
        # shown to 3 decimals: a displayed tie may still be a strict difference, never the other way round
        if expected != "tie" and row.outcome not in ("equal by construction", "paper's design: biased, not tested"):
            assert row.outcome == expected, f"{row.ordering} on {row.benchmark}: {row.reproduced} -> {row.outcome}"
        assert not (row.significant and row.outcome != "as claimed")
        # significant is decided by p_holm (docs/statistics.md), never by the unadjusted p
        assert (not row.significant) or float(row.p_holm) < 0.05
        assert row.p_holm == "--" or float(row.p_holm) >= float(row.p) - 1e-9
    distinct = claims[claims["repeats"].isna()]
    caption = read_manifest(figures)["artifacts"]["tab_paper_claims"]["caption"]
    tested = distinct[~distinct["outcome"].isin(["equal by construction", "paper's design: biased, not tested"])]
    holds = int((tested["outcome"] == "as claimed").sum())
    assert f"Of the {len(distinct)} distinct claims" in caption
    assert f"{holds} go the claimed way here (strictly better in the point estimates)" in caption
    assert "observed power" not in caption and "discordance the run observed" not in caption  # pre-run power only
    # no claim is about a model the profile did not run
    assert not set(claims["paper_model"]) & {"Llama-3.3-70B-Instruct", "GPT-4o-mini"}


def test_every_verdict_word_in_generated_text_is_backed_by_an_adjusted_p(tiny_run: Path) -> None:
    """docs/statistics.md: the words "significant", "ranks first", "wins", "beats" are generated only from an adjusted
    p below alpha. Greps the run's tables and captions and the executed notebooks' outputs (not their sources, nor
    the outputs of a cell tagged quotes-benchmark, which prints a question and an agent's response);
    tiny's samples are below the rule's n, so every table says so."""
    import nbformat

    from r2mad_lab.report import inference

    figures = tiny_run / "figures" / "tiny"
    problems = []
    for path in sorted(figures.glob("*.md")):
        problems += [f"{path.name}: {p}" for p in inference.verdict_problems(path.read_text(encoding="utf-8"))]
    for path in sorted((tiny_run / "notebooks" / "executed" / "tiny").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if "quotes-benchmark" in cell.metadata.get("tags", []):
                continue  # prints a benchmark's question and an agent's response (04's worked state): not generated
            for output in cell.get("outputs", []):
                texts = [output.get("text", "")] + [output.get("data", {}).get(kind, "")
                                                    for kind in ("text/markdown", "text/plain")]
                for text in texts:
                    text = "".join(text) if isinstance(text, list) else text
                    problems += [f"{path.name}: {p}" for p in inference.verdict_problems(text)]
    assert not problems, "\n".join(problems[:10])
    manifest = read_manifest(figures)["artifacts"]
    assert "cannot support inference" in manifest["tab_main_results"]["caption"]
    assert "cannot support inference" in (figures / "tab_main_results.md").read_text(encoding="utf-8")
    assert manifest["tab_paper_claims"]["verdict"].startswith("Claims: ")


def test_no_bold_below_the_small_sample_n(tiny_run: Path) -> None:
    """tiny has 4 questions per benchmark cell: no row is ranked, so no cell is bold (docs/statistics.md, rule 4)."""
    figures = tiny_run / "figures" / "tiny"
    bold_seen = 0
    for path in sorted(figures.glob("tab_*.md")):
        lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
        tidy = pd.read_csv(figures / f"{path.stem}.csv")
        flat = list(tidy.columns[-3:]) != ["value", "ci_low", "ci_high"]  # a plain frame: no row labels
        levels = 0 if flat else read_table(figures / f"{path.stem}.csv").values.index.nlevels
        for column in range(levels, len(header)):
            for position, row in enumerate(rows):
                cell = row[column]
                if not cell.startswith("**"):
                    continue
                bold_seen += 1
                value = _first_number(cell.strip("*"))
                group = tuple(row[: levels - 1]) if levels > 1 else ()
                same = [r for i, r in enumerate(rows) if i != position and tuple(r[: levels - 1]) == group
                        and _first_number(r[column].strip("*")) == value]
                assert not same, f"{path.name}: bold {cell} in column {header[column]!r} ties with another row"
    assert bold_seen == 0


def test_cost_time_is_measured_at_generation_or_absent(tiny_run: Path) -> None:
    """The tiny profile runs simulated agents: tokens only, and the caption says why."""
    figures = tiny_run / "figures" / "tiny"
    cost = pd.read_csv(figures / "tab_cost.csv")
    assert not any("time" in str(q) for q in cost["quantity"].unique())
    caption = read_manifest(figures)["artifacts"]["tab_cost"]["caption"]
    assert "simulated" in caption and "bookkeeping" in caption
    labels = read_manifest(figures)["artifacts"]["fig_cost"]["labels"]
    assert not any("seconds" in t for t in labels["axes"])


def test_executed_notebooks_are_quiet_and_end_with_what_this_shows(tiny_run: Path) -> None:
    import nbformat

    executed = tiny_run / "notebooks" / "executed" / "tiny"
    for path in _notebooks():
        nb = nbformat.read(executed / path.name, as_version=4)
        # log records (and warnings) go to stderr; the only stderr a notebook may show is its progress bars
        stderr = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                         for o in c.get("outputs", []) if o.output_type == "stream" and o.get("name") == "stderr")
        lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
        noise = [line for line in lines if "%|" not in line]
        assert not noise, f"{path.name}: lines on stderr that are not a progress bar: {noise[:5]}"
        if path.stem in RESULTS_NOTEBOOKS:
            last = nb.cells[-1]
            outputs = [o for o in last.get("outputs", []) if o.output_type == "display_data"]
            assert outputs, f"{path.name}: the last cell shows nothing"
            text = outputs[-1]["data"].get("text/markdown", "")
            assert text.startswith("## What this shows"), f"{path.name}: does not end with 'What this shows'"
            assert "These numbers come from" in text or path.stem == "08_theory"


# --------------------------------------------------------------------------------------------
# Issue 23: an ablation is a variant beside the profile's artifacts, and its labels say so
# --------------------------------------------------------------------------------------------

VARIANT_NOTE = "Variant gamma=0.5 of profile tiny: gamma = 0.5 (profile tiny: 0.9)."


def test_a_rerun_from_nothing_writes_the_same_bytes(tiny_run: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 36: the profile run again from nothing (no runs, no cache: what a fresh clone does) with the same
    results leaves every file of the profile's run byte for byte as it was: the executed notebooks (papermill's
    clocks, the injected cell's id, progress bars), MANIFEST.json (created, git) and timings.json (this run's
    times go to the untracked timings.last.json). The run ends with the paper's Table 1 beside its values."""
    import shutil

    own = [tiny_run / "figures" / "tiny", tiny_run / "notebooks" / "executed" / "tiny"]
    before = {k: v for k, v in _hashes(*own).items() if not k.endswith("timings.last.json")}
    shutil.rmtree(tiny_run / "runs" / "tiny")
    shutil.rmtree(tiny_run / "cache" / "tiny")
    capsys.readouterr()
    assert reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args()]) == 0
    out = capsys.readouterr().out
    after = {k: v for k, v in _hashes(*own).items() if not k.endswith("timings.last.json")}
    assert [k for k in before if before[k] != after.get(k)] == [] and set(after) == set(before)
    assert (own[1] / "timings.last.json").is_file()
    assert "reproduce: the paper's Table 1 (accuracy; each cell: this run [95% CI] / the paper" in out
    lines = out.rstrip().splitlines()  # the headline ends with where every number is (and on tiny the small-sample
    # line), then the claims' verdict line
    assert any(line.startswith("  every number against the paper: ") for line in lines[-3:])
    assert lines[-1].startswith("  Claims: ")


def _hashes(*folders: Path) -> dict[str, str]:
    """sha256 of every file of the profile's own run (its variants/ and sweeps/ folders are not part of it)."""
    import hashlib

    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            if path.is_file() and relative.parts[0] not in ("variants", "sweeps"):
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def tiny_variant(tiny_run: Path) -> dict[str, object]:
    """``--set gamma=0.5 --only 04`` after the profile's own run, then the same through papermill ``-p``."""
    import papermill

    own = [tiny_run / "figures" / "tiny", tiny_run / "notebooks" / "executed" / "tiny"]
    before = _hashes(*own)
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args(),
                           "--only", "04", "--set", "gamma=0.5"])
    assert code == 0
    after_reproduce = _hashes(*own)
    notebook = NOTEBOOKS / "04_ablations.ipynb"
    papermill.execute_notebook(
        str(notebook), str(tiny_run / "papermill_04.ipynb"), cwd=str(NOTEBOOKS), progress_bar=False,
        start_timeout=KERNEL_START_TIMEOUT,
        parameters={"gamma": 0.5, "data_dir": str(configured_data_dir()) if configured_data_dir() else None,
                    "figures_dir": str(own[0]),
                    "runs_dir": str(tiny_run / "runs" / "tiny"), "cache_dir": str(tiny_run / "cache" / "tiny")})
    return {"before": before, "after_reproduce": after_reproduce, "after_papermill": _hashes(*own),
            "folder": own[0] / "variants" / "gamma=0.5"}


def test_a_variant_never_touches_the_profiles_own_files(tiny_variant: dict) -> None:
    assert len(tiny_variant["before"]) > 50
    assert tiny_variant["after_reproduce"] == tiny_variant["before"]
    assert tiny_variant["after_papermill"] == tiny_variant["before"]


def test_the_variant_folder_holds_the_ablation_table_naming_the_override(tiny_variant: dict) -> None:
    folder = tiny_variant["folder"]
    manifest = read_manifest(folder)["artifacts"]
    assert "gamma = 0.5 (profile tiny: 0.9)" in manifest["tab_ablation"]["caption"]
    assert (folder / "tab_ablation.md").read_text().rstrip().endswith(VARIANT_NOTE)
    assert read_table(folder / "tab_ablation.csv").values.shape == (3, 5)


def test_every_label_of_a_variant_says_what_ran_and_which_variant(tiny_variant: dict) -> None:
    """The rules of the profile's artifacts (the engine in every caption, no stand-in paper model in a table or a
    figure's text) hold for a variant, and every caption, figure and manifest entry names the override."""
    import nbformat

    folder = tiny_variant["folder"]
    manifest = read_manifest(folder)["artifacts"]
    profile = load_profile("tiny")
    stood_in_for = {m["stands_in_for"] for m in profile["models"] if m.get("stands_in_for")}
    assert {"tab_ablation", "tab_retrieval_ablation", "fig_ablation", "fig_retrieval_ablation",
            "tab_ablation_vs_profile", "tab_retrieval_ablation_vs_profile"} <= set(manifest)
    for name, record in manifest.items():
        assert "Simulated (simulated agents)" in record["caption"], name
        assert record["caption"].rstrip().endswith(VARIANT_NOTE), name
        assert record["variant"]["overrides"] == {"gamma": {"value": 0.5, "profile_value": 0.9}}, name
        assert record["profile"] == "tiny", name
        if record["kind"] == "figure":
            assert VARIANT_NOTE in record["labels"]["annotations"], name
            shown = [t for kind in ("titles", "axes", "ticks", "legends") for t in record["labels"][kind]]
            assert not any(p in t for p in stood_in_for for t in shown), name
        else:
            text = (folder / f"{name}.md").read_text().split("\n\n")[0]
            assert not any(p in text for p in stood_in_for), name
    # each table it shares with the profile is compared with it on the same questions
    comparison = pd.read_csv(folder / "tab_ablation_vs_profile.csv")
    assert len(comparison) == 15 and (comparison["pairs"].isin([4, 16])).all()
    baseline = read_table(folder.parent.parent / "tab_ablation.csv").values
    for row in comparison.itertuples():
        assert row.profile == pytest.approx(float(baseline.at[row.method, row.benchmark]))
    # the SE of the paired difference beside its CI (issue 56): present wherever the pair was compared
    assert list(comparison.columns[comparison.columns.get_loc("ci_low"):][:3]) == ["ci_low", "ci_high", "se"]
    assert comparison["se"].notna().all() and (comparison["se"] >= 0).all()
    assert manifest["tab_ablation_vs_profile"]["notes"].startswith("tab_ablation, gamma = 0.5 (profile tiny: 0.9): ")
    # the executed notebook says at its top which variant it is and where its outputs went
    executed = tiny_variant["folder"].parents[3] / "notebooks" / "executed" / "tiny" / "variants" / "gamma=0.5"
    first = nbformat.read(executed / "04_ablations.ipynb", as_version=4).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("**Variant `gamma=0.5` of profile tiny**")
    assert "figures/tiny/variants/gamma=0.5/" in first.source


def test_a_sweep_draws_the_tables_against_its_setting(tiny_variant: dict) -> None:
    tiny_run = tiny_variant["folder"].parents[3]
    # gamma is inert at tiny's K = 1 (r2mad_core.memory.inert): refused before anything runs, one line
    assert reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args(),
                           "--only", "04", "--sweep", "gamma=0.5,0.7,0.9"]) != 0
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args(),
                           "--only", "04", "--sweep", "w_high=0.5,0.55,0.6"])
    assert code == 0
    sweep = tiny_run / "figures" / "tiny" / "sweeps" / "w_high"
    manifest = read_manifest(sweep)["artifacts"]
    assert {"fig_sweep_tab_ablation", "tab_sweep_tab_ablation"} <= set(manifest)
    table = pd.read_csv(sweep / "tab_sweep_tab_ablation.csv")
    assert list(pd.unique(table["setting"])) == ["w_high=0.5", "w_high=0.55 (profile tiny)", "w_high=0.6"]
    assert len(table) == 15 * 3
    at_profile = table[table["setting"] == "w_high=0.55 (profile tiny)"].set_index(["row", "benchmark"])["value"]
    profile_table = read_table(tiny_run / "figures" / "tiny" / "tab_ablation.csv")
    profile = profile_table.values
    assert at_profile[("R2-MAD", "MATH500")] == pytest.approx(float(profile.at["R2-MAD", "MATH500"]))
    # each point's SE beside its CI, read from the point's own tidy CSV (the profile's point: the profile's SE)
    assert list(table.columns[-4:]) == ["value", "ci_low", "ci_high", "se"]
    se_at_profile = table[table["setting"] == "w_high=0.55 (profile tiny)"].set_index(["row", "benchmark"])["se"]
    assert se_at_profile[("R2-MAD", "MATH500")] == pytest.approx(float(profile_table.se.at["R2-MAD", "MATH500"]))
    paired = pd.read_csv(sweep / "tab_sweep_tab_ablation_paired.csv")
    assert {"ci_low", "ci_high", "se"} <= set(paired) and paired["se"].notna().all()
    # the title names the quantity, not the table's file name; the caption carries no console line
    assert manifest["fig_sweep_tab_ablation"]["labels"]["titles"][0].startswith("Ablation of R2-MAD against w_high")
    assert "reproduce:" not in manifest["fig_sweep_tab_ablation"]["caption"]
    assert _hashes(tiny_run / "figures" / "tiny") == {k: v for k, v in tiny_variant["before"].items()
                                                       if "/figures/" in k}


def test_two_sweep_axes_run_their_product_on_one_figure(tiny_variant: dict) -> None:
    tiny_run = tiny_variant["folder"].parents[3]
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args(),
                           "--only", "04", "--sweep", "gamma=0,0.9", "--sweep", "top_k=1,3"])
    assert code == 0
    sweep = tiny_run / "figures" / "tiny" / "sweeps" / "gamma__top_k"
    manifest = read_manifest(sweep)["artifacts"]
    figure = manifest["fig_sweep_tab_ablation"]
    assert figure["sweep"]["parameters"] == ["gamma", "top_k"]
    assert figure["sweep"]["points"] == [{"gamma": 0, "top_k": 1}, {"gamma": 0, "top_k": 3},
                                         {"gamma": 0.9, "top_k": 1}, {"gamma": 0.9, "top_k": 3}]
    table = pd.read_csv(sweep / "tab_sweep_tab_ablation.csv")
    assert list(pd.unique(table["setting"])) == ["gamma=0, top_k=1", "gamma=0, top_k=3",
                                                 "gamma=0.9, top_k=1 (profile tiny)", "gamma=0.9, top_k=3"]
    assert figure["labels"]["titles"][0].startswith("Ablation of R2-MAD against gamma and top_k")


def test_replicates_give_the_mean_and_spread_over_seeds(tiny_run: Path) -> None:
    code = reproduce.main(["--profile", "tiny", "--output-dir", str(tiny_run), *_data_args(),
                           "--only", "03", "--replicates", "3"])
    assert code == 0
    folder = tiny_run / "figures" / "tiny" / "replicates" / "seeds=0-2"
    summary = pd.read_csv(folder / "tab_replicates_tab_main_results.csv")
    assert {"seed=0", "seed=1", "seed=2", "mean", "sd", "min", "max", "seed=0 ci_low", "seed=0 ci_high",
            "seed=0 se", "pooled", "pooled ci_low", "pooled ci_high", "pooled se"} <= set(summary)
    assert summary["pooled se"].notna().all() and summary["seed=0 se"].notna().all()
    assert (summary["seeds"] == 3).all()
    profile = read_table(tiny_run / "figures" / "tiny" / "tab_main_results.csv").values
    row = summary[(summary["method"] == "R2-MAD") & (summary["benchmark"] == "MATH500")].iloc[0]
    assert row["seed=0"] == pytest.approx(float(profile.at["R2-MAD", "MATH500"]))
    assert row["mean"] == pytest.approx((row["seed=0"] + row["seed=1"] + row["seed=2"]) / 3)
    # the other seeds drew other samples: somewhere a cell differs between seeds
    assert (summary["sd"] > 0).any()


def test_a_gamma_variant_shares_every_unchanged_round0_and_says_so(tiny_variant: dict) -> None:
    """Common random numbers: every debate whose round-0 requests gamma leaves unchanged drew the very same round 0,
    the cells whose policy does not read gamma are the profile's own runs, and the sentence says both."""
    folder = tiny_variant["folder"]
    for table in ("tab_ablation", "tab_retrieval_ablation"):
        frame = pd.read_csv(folder / f"{table}_vs_profile.csv")
        assert (frame["round0_unchanged"] > 0).all() and (frame["round0_unchanged"] == frame["round0_shared"]).all()
        assert "p_holm" in frame
    retrieval = pd.read_csv(folder / "tab_retrieval_ablation_vs_profile.csv")
    not_reading_gamma = retrieval[~retrieval["method"].str.contains("Debate-State-Aware")]
    assert len(not_reading_gamma) > 0 and not_reading_gamma["same_run"].astype(bool).all()
    notes = read_manifest(folder)["artifacts"]["tab_ablation_vs_profile"]["notes"]
    assert "drew the very same generations (common random numbers)" in notes and "Holm-adjusted" in notes


def test_the_run_index_lists_every_run_of_the_manifest_with_its_debate_page(tiny_run: Path) -> None:
    """Issue 36: `r2mad runs tiny` lists every run any artifact of figures/tiny names (its manifest entry's ``runs``),
    each linking to a debate page that exists; every table a grid built names exactly its own cells."""

    from r2mad_lab.cli import main as cli_main

    assert cli_main(["runs", "tiny", "--root", str(tiny_run), "--quiet"]) == 0
    artifacts = read_manifest(tiny_run / "figures" / "tiny")["artifacts"]
    named = {run for record in artifacts.values() for run in record.get("runs", [])}
    assert artifacts["tab_main_results"]["runs_from"] == "the table's cells" and artifacts["tab_main_results"]["runs"]
    assert len(named) > 20 and all(run.startswith("runs/tiny/") for run in named)
    index = tiny_run / "runs" / "tiny" / "index.html"
    assert index.is_file()
    data = run_pages.read_script(index.parent / "_viewer" / "index.data.js")[0]  # the index's rows (issue 48)
    rows = {row["path"]: row for row in data["runs"]}
    assert named <= set(rows)
    for run in named:
        page, questions = index.parent / rows[run]["page"], index.parent / rows[run]["data"]
        assert page.resolve() == (tiny_run / run / "view.html").resolve() and questions.is_file()
