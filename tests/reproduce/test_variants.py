"""Variants (issue 23): a profile plus overrides is named from them, goes beside the profile's artifacts, says so
in every label, and is compared with the profile's run on the same questions; unchanged cells replay."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from r2mad_lab.report.artifacts import ReportContext, read_manifest  # noqa: E402
from r2mad_lab.reproduce import points  # noqa: E402
from r2mad_lab.reproduce.ablations import plan_variant, variant_overrides  # noqa: E402
from r2mad_lab.reproduce.compare import sweep as sweep_comparison  # noqa: E402
from r2mad_lab.reproduce.compare import tables
from r2mad_lab.reproduce.compare import variant as comparison
from r2mad_lab.reproduce.grid import ExperimentGrid  # noqa: E402
from r2mad_lab.reproduce.points import Variant, detect, parse_sweep, same_value, variant_name  # noqa: E402

# --------------------------------------------------------------------------------------------
# Names and detection
# --------------------------------------------------------------------------------------------


def test_the_name_is_sorted_stable_and_filesystem_safe() -> None:
    assert variant_name({"gamma": 0.5}) == "gamma=0.5"
    assert variant_name({"top_k": 5, "gamma": 0.5}) == variant_name({"gamma": 0.5, "top_k": 5}) == "gamma=0.5,top_k=5"
    assert variant_name({"retrieval_policies": ["state_aware", "fixed_lambda:0.5"]}) == (
        "retrieval_policies=state_aware+fixed_lambda_0.5")
    assert variant_name({"memory_model": None, "train_limit": 3}) == "memory_model=null,train_limit=3"
    long = variant_name({"benchmarks": ["mmlu_pro_economics"] * 10})
    assert len(long) == points.MAX_NAME and "/" not in long
    assert long == variant_name({"benchmarks": ["mmlu_pro_economics"] * 10})  # stable
    assert long != variant_name({"benchmarks": ["mmlu_pro_economics"] * 11})
    with pytest.raises(ValueError, match="--variant '../x'"):
        points.check_name("../x")


def test_an_override_equal_to_the_profiles_value_is_no_variant() -> None:
    said: list[str] = []
    assert same_value(1, 1.0) and not same_value(True, 1) and same_value([0.0, 0.5], [0, 0.5])
    # tiny leaves K to its preset (paper: K = 1): top_k=1 is its own value
    assert plan_variant("tiny", {"gamma": 0.9, "top_k": 1}, echo=said.append) is None
    assert said == ["reproduce: gamma=0.9 is the profile tiny's own value: not a variant",
                    "reproduce: top_k=1 is the profile tiny's own value: not a variant"]
    with pytest.raises(ValueError, match="--variant mine: no --set value differs from profile tiny"):
        plan_variant("tiny", {"gamma": 0.9}, "mine", echo=said.append)


def test_two_overrides_make_one_variant_and_only_real_changes_count() -> None:
    variant = plan_variant("tiny", {"top_k": 5, "gamma": 0.5, "n_rounds": 3}, echo=lambda line: None)
    assert variant.name == "gamma=0.5,top_k=5"
    assert variant.describe() == "gamma = 0.5 (profile tiny: 0.9); top_k = 5 (profile tiny: 1)"
    assert variant_overrides(variant) == {"gamma": 0.5, "top_k": 5}
    named = plan_variant("tiny", {"gamma": 0.5}, "low-gamma", echo=lambda line: None)
    assert named.name == "low-gamma" and named.note() == (
        "Variant low-gamma of profile tiny: gamma = 0.5 (profile tiny: 0.9).")


def test_the_kernel_compares_its_resolved_profile_with_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    from r2mad_lab.reproduce.notebook_setup import resolve_profile

    monkeypatch.delenv(points.ENVIRONMENT, raising=False)
    namespace = {"profile": "tiny", "overrides": {}, "pd": pd}
    assert detect(*resolve_profile(namespace)) is None  # the profile's own values (an unrelated global is ignored)
    namespace["gamma"] = 0.5  # papermill -p gamma 0.5, or a line added to the parameters cell
    assert detect(*resolve_profile(namespace)).describe() == "gamma = 0.5 (profile tiny: 0.9)"
    # reproduce passes its overrides as the notebook's ``overrides``: every one is part of the variant
    namespace = {"profile": "tiny", "overrides": {"gamma": 0.5, "n_agents": 5}}
    assert detect(*resolve_profile(namespace)).name == "gamma=0.5,n_agents=5"
    monkeypatch.setenv(points.ENVIRONMENT, points.to_environment({"gamma": 0.5}, "mine"))
    assert detect(*resolve_profile({"profile": "tiny", "overrides": {"gamma": 0.5}})).name == "mine"
    # an override equal to what the profile resolves to (tiny's protocol preset: round0 independent) is no variant
    monkeypatch.delenv(points.ENVIRONMENT, raising=False)
    assert detect(*resolve_profile({"profile": "tiny", "overrides": {"round0": "independent"}})) is None


def test_a_variant_of_a_variant_is_a_variant_of_the_profile_with_both_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rerunning a variant's executed notebook with one more edit: its folder is beside the profile's, never nested."""
    from r2mad_lab.reproduce.notebook_setup import resolve_profile

    monkeypatch.delenv(points.ENVIRONMENT, raising=False)
    figures = Path("figures/tiny/variants/gamma=0.5")  # the executed variant notebook's figures_dir
    assert points.profile_dir_of(figures) == Path("figures/tiny")
    namespace = {"profile": "tiny", "overrides": {"gamma": 0.5}, "top_k": 5, "figures_dir": str(figures)}
    variant = detect(*resolve_profile(namespace))
    assert variant.name == "gamma=0.5,top_k=5"
    assert points.variant_dir(points.profile_dir_of(figures), variant.name) == Path(
        "figures/tiny/variants/gamma=0.5,top_k=5")


def test_parse_sweep() -> None:
    assert parse_sweep("gamma=0,0.3,0.6,0.9") == ("gamma", [0, 0.3, 0.6, 0.9])
    assert parse_sweep("poison_fractions=[0.0, 0.5],[0.0, 1.0]") == ("poison_fractions", [[0.0, 0.5], [0.0, 1.0]])
    assert parse_sweep("memory_model=null,Sim") == ("memory_model", [None, "Sim"])
    for bad, message in (("gamma", "expected KEY=V1,V2"), ("gamma=0.5", "at least two"), ("gamma=1,1", "repeats")):
        with pytest.raises(ValueError, match=message):
            parse_sweep(bad)


# --------------------------------------------------------------------------------------------
# Labels: captions, figures, manifest, settings table
# --------------------------------------------------------------------------------------------


def test_every_artifact_of_a_variant_says_so(tmp_path: Path) -> None:
    variant = Variant("tiny", {"gamma": (0.5, 0.9)})
    ctx = ReportContext(profile="tiny", out_dir=tmp_path / "variants" / variant.name, notebook="04_ablations",
                        engine_titles=["Simulated (simulated agents)"], variant=variant, baseline_dir=tmp_path)
    ctx.save_table(pd.DataFrame({"a": [1.0]}), "tab_x", caption="A table.")
    fig, ax = plt.subplots()
    ax.set_title("a figure")
    ctx.save_figure(fig, "fig_x", caption="A figure.")
    plt.close(fig)
    manifest = read_manifest(ctx.out_dir)["artifacts"]
    note = "Variant gamma=0.5 of profile tiny: gamma = 0.5 (profile tiny: 0.9)."
    assert manifest["tab_x"]["caption"] == f"A table. Produced by: Simulated (simulated agents). {note}"
    assert (ctx.out_dir / "tab_x.md").read_text().rstrip().endswith(note)
    assert manifest["fig_x"]["labels"]["annotations"] == [note]  # the picture itself
    for name in ("tab_x", "fig_x"):
        assert manifest[name]["variant"]["overrides"] == {"gamma": {"value": 0.5, "profile_value": 0.9}}
    assert not (tmp_path / "MANIFEST.json").exists()  # nothing in the profile's folder


def test_the_settings_table_marks_the_overrides(tmp_path: Path) -> None:
    exp = ExperimentGrid(models=[SIM], benchmarks=["truthfulqa"], runs_dir=tmp_path, cache_dir=tmp_path, gamma=0.5)
    exp.variant = Variant("tiny", {"gamma": (0.5, 0.9)})
    table = exp.describe()["value"]
    assert table.iloc[0] == "gamma = 0.5 (profile tiny: 0.9)" and table.index[0] == "VARIANT gamma=0.5"
    assert table["K / gamma / w_l / w_h"].endswith("<- VARIANT: gamma = 0.5 (profile tiny: 0.9)")
    assert "VARIANT" not in table["agents x rounds"]


# --------------------------------------------------------------------------------------------
# Shared runs and cache; the comparison with the profile's run
# --------------------------------------------------------------------------------------------

SIM = {"label": "Sim", "engine": "simulated", "model": None, "options": {}}


def _grid(tmp_path: Path, **changes) -> ExperimentGrid:
    options = dict(models=[SIM], benchmarks=["truthfulqa", "mmlu_pro_economics"], runs_dir=tmp_path / "runs",
                   cache_dir=tmp_path / "cache", test_limit=4, train_limit=3, max_tokens=64, bootstrap_resamples=200)
    options.update(changes)
    return ExperimentGrid(**options)


def _generations(grid: ExperimentGrid) -> int:
    """Requests the grid's engines answered (the simulated agents run uncached: each one is a generation)."""
    return sum(cost.requests for engine in grid.engines.opened() for cost in engine.ledger.by_tag.values())


def test_a_cell_the_variant_does_not_change_replays_and_compares_as_the_same_run(tmp_path: Path) -> None:
    methods = ["MAD", "R2-MAD"]
    with _grid(tmp_path) as profile:
        before = profile.grid(methods)
        assert _generations(profile) > 0
    with _grid(tmp_path, gamma=0.5) as variant_grid:
        mad = variant_grid.run("Sim", "truthfulqa", "MAD")
        assert mad.n_new == 0 and _generations(variant_grid) == 0  # zero new generations
        assert mad.run_dir == before.get("Sim", "truthfulqa", "MAD").run_dir
        after = variant_grid.grid(methods)
    table = after.table(methods)
    assert set(table.cells) == {(m, c) for m in methods for c in ("TruthfulQA", "Economics", "Average")}
    variant = Variant("t", {"gamma": (0.5, 0.9)})
    frame = comparison.compare_table(table, variant, _grid(tmp_path), bootstrap_resamples=200)
    assert len(frame) == 6 and (frame["pairs"] == [4, 4, 8] * 2).all()
    mad_rows = frame[frame["method"] == "MAD"]
    assert mad_rows["same_run"].all() and (mad_rows["difference"] == 0).all() and (mad_rows["p_mcnemar"] == 1).all()
    r2 = frame[(frame["method"] == "R2-MAD") & (frame["benchmark"] == "TruthfulQA")].iloc[0]
    profile_cell = before.get("Sim", "truthfulqa", "R2-MAD")
    assert not r2["same_run"]
    assert r2["profile"] == pytest.approx(sum(profile_cell.correct) / 4)
    assert r2["difference"] == pytest.approx(r2["variant"] - r2["profile"])
    average = frame[(frame["method"] == "R2-MAD") & (frame["benchmark"] == "Average")].iloc[0]
    assert average["variant"] == pytest.approx(table.values.at["R2-MAD", "Average"])
    # the Average is tested as shown, by the sweeps' stratified estimate: the same pair gets the same p in both tables
    from r2mad_lab.report import inference
    from r2mad_lab.reproduce.compare import sweep as sweep_comparison

    strata = {f"Sim / {o.benchmark}": {r.sample_id: bool(r.correct) for r in o.records}
              for o in after.outcomes if o.method == "R2-MAD"}
    theirs = {f"Sim / {o.benchmark}": {r.sample_id: bool(r.correct) for r in o.records}
              for o in before.outcomes if o.method == "R2-MAD"}
    xs, ys, labels = sweep_comparison._paired(strata, theirs)
    swept = inference.paired_estimate(xs, ys, labels, n_bootstrap=200)
    assert (average["p_mcnemar"] == swept.p_value and (average["ci_low"], average["ci_high"])
            == (swept.ci_low, swept.ci_high))
    assert average["difference"] == pytest.approx(swept.difference)
    sentence = comparison.comparison_sentences(frame, variant, "tab_t")[0]
    assert sentence.startswith("tab_t, gamma = 0.5 (profile t: 0.9): ")
    assert "of 6 cells differ from the profile's (3 are the very same runs" in sentence
    # a cell the profile has not run: no profile value, and the one command that runs it
    fresh = comparison.compare_table(table, variant, _grid(tmp_path / "elsewhere"), bootstrap_resamples=200)
    assert fresh["profile"].isna().all()
    assert "`python -m r2mad_lab.reproduce --profile t`" in comparison.comparison_sentences(fresh, variant, "tab_t")[0]


def test_sweep_artifacts_draw_each_table_against_the_parameter(tmp_path: Path) -> None:
    from r2mad_lab.report.artifacts import save_table
    from r2mad_lab.report.tables import Table

    swept = []
    for point in points.plan_points({"gamma": 0.9}, "p", {}, [("gamma", [0.0, 0.5, 0.9])], [0]):
        value = point.value
        folder = tmp_path / str(value)
        values = pd.DataFrame({"TruthfulQA": [value, 1 - value]}, index=pd.Index(["A", "B"], name="method"))
        values.columns.name = "benchmark"
        save_table(Table(values=values, ci_low=values - 0.1, ci_high=values + 0.1), "tab_t", folder, profile="p")
        swept.append(point.at(folder))
    out = tmp_path / "sweep"
    sentences = sweep_comparison.sweep_artifacts(swept, "gamma", "p", 0.9, out)
    assert {p.name for p in out.iterdir()} >= {"fig_sweep_tab_t.png", "tab_sweep_tab_t.csv", "MANIFEST.json"}
    table = pd.read_csv(out / "tab_sweep_tab_t.csv")
    assert list(pd.unique(table["setting"])) == ["gamma=0.0", "gamma=0.5", "gamma=0.9 (profile p)"]
    assert table[table["row"] == "B"]["value"].tolist() == pytest.approx([1.0, 0.5, 0.1])
    labels = read_manifest(out)["artifacts"]["fig_sweep_tab_t"]["labels"]
    assert labels["titles"][0] == "tab_t against gamma (profile p: gamma = 0.9; dotted line)"
    assert sentences == ["tab_t: over gamma = 0.0, 0.5, 0.9, the cell that moves most is A / TruthfulQA "
                         "(0.000, 0.500, 0.900; range 0.900); the median range over the 2 cells is 0.900."]


def test_a_flat_table_with_a_flag_column_is_compared_number_by_number(tmp_path: Path) -> None:
    """A theory table (flat, with True/False columns): the flags must match as text, the numbers are differenced."""
    profile, variant = tmp_path / "p.csv", tmp_path / "v.csv"
    profile.write_text("cell,holds,slack\na,True,0.5\nb,False,0.25\n")
    variant.write_text("cell,holds,slack\na,True,0.75\nb,False,0.25\n")
    frame = tables.compare_files(profile, variant)
    assert list(frame["column"]) == ["slack", "slack"] and list(frame["difference"]) == [0.25, 0.0]
    variant.write_text("cell,holds,slack\na,False,0.75\nb,False,0.25\n")  # a flag that changed: not comparable
    assert tables.compare_files(profile, variant) is None
