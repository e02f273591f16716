"""Ablations that measure the change (issue 32): a variant draws the profile run's samples wherever it sends the
same request (common random numbers), a cell the change does not reach is the very same run, and a comparison of
many cells calls a cell significant only after Holm's adjustment (report/multiplicity.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from r2mad_core.data.benchmarks import load
from r2mad_core.methods import get_method
from r2mad_lab.engines import make_engine
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import run_cell
from r2mad_lab.experiments.method_labels import resolve
from r2mad_lab.experiments.run_settings import RunSettings
from r2mad_lab.report import inference, multiplicity
from r2mad_lab.reproduce.compare.variant import comparison_sentences, round0_sharing
from r2mad_lab.reproduce.points import Variant


@pytest.fixture(scope="module")
def banks(tmp_path_factory) -> tuple[str, str]:
    """Two memory banks of different content (simulated agents, hashing embedder)."""
    root = tmp_path_factory.mktemp("banks")
    train = load("truthfulqa", "train")[:6]
    engine = make_engine("simulated", samples=train)
    for name, part in (("bank", train[:3]), ("another-bank", train[3:])):
        build_memory("truthfulqa", engine, "hashing", root / name, samples=part, progress=False)
    return str(root / "bank"), str(root / "another-bank")


def _stream(name: str, **options) -> str:
    return get_method(name, round0="independent", **options).debate.stream


def test_the_stream_is_named_by_the_row_not_by_the_settings_the_rows_share(banks) -> None:
    bank, another = banks  # a stream does not depend on the bank (what a request retrieves is in its bytes)
    r2mad = _stream("r2mad", memory=bank)
    # settings every row of a profile shares: the same draws (a variant of the row)
    for setting in ({"gamma": 0.5}, {"top_k": 1}, {"w_high": 0.7}, {"max_tokens": 64}, {"n_rounds": 2},
                    {"confidence_pool": "candidates"}, {"memory": another}):
        assert _stream("r2mad", **{"memory": bank, **setting}) == r2mad, setting
    # options that make the run another row of the paper's tables: its own draws, as the paper's separate runs
    rows = [r2mad, _stream("r2mad", memory=bank, use_confidence=False), _stream("r2mad", memory=bank, use_memory=False),
            _stream("r2mad", memory=bank, retrieval_policy="random"),
            _stream("r2mad", memory=bank, retrieval_policy="fixed_lambda", fixed_lambda=0.25),
            _stream("r2mad", memory=bank, retrieval_policy="fixed_lambda", fixed_lambda=0.75),
            _stream("r2mad", memory=bank, poison_fraction=0.5), _stream("mad"), _stream("cot"),
            _stream("mad_m2"), _stream("mad_m2", masking="subjective"), _stream("self_consistency", k_paths=3),
            _stream("self_consistency", k_paths=9)]
    assert len(set(rows)) == len(rows)
    # a policy's value counts only with its policy: the fixed lambda does not name a state-aware run's stream
    assert _stream("r2mad", memory=bank, fixed_lambda=0.25) == r2mad
    assert _stream("mad", temperature=0.7) == _stream("mad")


def test_a_setting_the_policy_does_not_read_is_not_recorded(banks) -> None:
    bank = banks[0]
    random_9 = get_method("r2mad", memory=bank, retrieval_policy="random", gamma=0.9)
    random_5 = get_method("r2mad", memory=bank, retrieval_policy="random", gamma=0.5)
    assert random_9.to_dict() == random_5.to_dict() and "gamma" not in random_9.options
    state = get_method("r2mad", memory=bank, gamma=0.5)
    assert state.options["gamma"] == 0.5 and "fixed_lambda" not in state.options
    fixed = get_method("r2mad", memory=bank, retrieval_policy="fixed_lambda", fixed_lambda=0.25)
    assert fixed.options["fixed_lambda"] == 0.25 and "gamma" not in fixed.options
    # the grid's cell key agrees: the Random row's options are the same under gamma 0.9 and 0.5
    rows = {g: resolve("R2-MAD retrieval=Random", RunSettings().replace(gamma=g), "bank")[1] for g in (0.9, 0.5)}
    assert rows[0.9] == rows[0.5] and "gamma" not in rows[0.9]
    assert resolve("R2-MAD", RunSettings().replace(gamma=0.5), "bank")[1]["gamma"] == 0.5


def test_a_gamma_variant_draws_the_profile_runs_round0_and_moves_only_what_gamma_reaches(tmp_path) -> None:
    train, test = load("truthfulqa", "train")[:6], load("truthfulqa", "test")[:4]
    engine = make_engine("simulated", samples=train + test)
    build_memory("truthfulqa", engine, "hashing", tmp_path / "bank", samples=train, progress=False)

    def run(name: str, **options):
        return run_cell(tmp_path / name, benchmark="truthfulqa", split="test", engine=engine, method="r2mad",
                        method_options={"memory": str(tmp_path / "bank"), "round0": "independent", "top_k": 3,
                                        **options}, samples=test, progress=False).records

    profile, variant = run("gamma-0.9", gamma=0.9), run("gamma-0.0", gamma=0.0)
    compared, unchanged, shared = round0_sharing(variant, profile)
    assert compared == unchanged == shared == len(test)  # every round-0 request and generation the same
    # at K = 3 gamma reaches the later rounds: a later request differs somewhere (the change acts)
    later = lambda records: [t.prompt_id for r in records for rd in r.rounds[1:] for t in rd.turns]  # noqa: E731
    assert later(profile) != later(variant)
    # another row (w/o Confidence) draws its own round 0, as the paper's separate runs
    other = run("no-confidence", gamma=0.9, use_confidence=False)
    assert round0_sharing(other, profile)[2] < len(test)


def test_holm_on_a_hand_computed_example() -> None:
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, max(0.06, 0.04*1) = 0.06
    assert multiplicity.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = multiplicity.holm([0.2, math.nan, 0.01])
    assert math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02) and adjusted[0] == pytest.approx(0.2)
    assert multiplicity.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])


def test_null_comparisons_call_a_cell_significant_at_most_at_the_stated_level() -> None:
    """The same configuration under two run seeds, many cells at once: with Holm's adjustment the share of
    comparisons that call any cell significant stays at or under alpha; without it, it does not (the check bites)."""
    from scipy.stats import binom

    rng = np.random.default_rng(2026)
    trials, cells, questions = 400, 20, 80
    difficulty = rng.uniform(0.2, 0.8, size=(trials, cells, questions))
    a = rng.random(difficulty.shape) < difficulty  # the same configuration under two run seeds: no effect
    b = rng.random(difficulty.shape) < difficulty
    only_a, only_b = (a & ~b).sum(axis=2), (~a & b).sum(axis=2)
    # the exact McNemar p of report/inference.paired_estimate, vectorised (checked on the first trial's cells)
    p = np.minimum(1.0, 2.0 * binom.cdf(np.minimum(only_a, only_b), only_a + only_b, 0.5))
    p[(only_a + only_b) == 0] = 1.0
    for cell in range(cells):
        exact = inference.paired_estimate(a[0, cell], b[0, cell], n_bootstrap=2).p_value
        assert p[0, cell] == pytest.approx(exact)
    any_raw = float((p.min(axis=1) < multiplicity.ALPHA).mean())
    any_adjusted = float((multiplicity.holm_array(p, axis=1).min(axis=1) < multiplicity.ALPHA).mean())
    assert any_adjusted <= multiplicity.ALPHA
    assert any_raw > 2 * multiplicity.ALPHA


def test_generated_text_never_calls_an_unadjusted_p_significant() -> None:
    rows = [{"method": f"m{i}", "benchmark": "TruthfulQA", "variant": 0.5, "profile": 0.6, "difference": -0.1,
             "ci_low": -0.2, "ci_high": -0.01, "p_mcnemar": 0.01 if i == 0 else 0.5, "pairs": 100,
             "same_run": False, "round0_unchanged": 100, "round0_shared": 100} for i in range(20)]
    frame = pd.DataFrame(rows)
    frame["p_holm"] = multiplicity.holm(frame["p_mcnemar"])  # as compare_table writes it
    variant = Variant(profile="tiny", overrides={"gamma": (0.5, 0.9)}, name="gamma=0.5")
    text = comparison_sentences(frame, variant, "tab_ablation")[0]
    assert "20 of 20 cells differ" in text and "0 of 20 significant (p_holm < 0.05" in text
    assert "Holm-adjusted over the 20" in text and inference.verdict_problems(text) == []
    small = frame.assign(pairs=4)  # below the rule's n: no verdict word at all
    assert "no inference for any of the 20" in comparison_sentences(small, variant, "tab_ablation")[0]
    assert "Round 0: 2000 of the 2000 debates" in text


def test_a_change_that_cannot_act_is_said_before_the_run() -> None:
    from r2mad_lab.reproduce.ablations import plan_variant

    lines: list[str] = []
    variant = plan_variant("sim", {"gamma": 0.5}, echo=lines.append)  # sim's K is the protocol's 1
    assert variant is not None and len(lines) == 1 and "at K = 1 cannot change the pick" in lines[0]
    lines.clear()
    plan_variant("sim", {"gamma": 0.5, "top_k": 3}, echo=lines.append)
    assert lines == []


def _tidy_table(folder, name: str, values: dict, caption: str = "Main results: accuracy") -> None:
    from r2mad_lab.report.artifacts import save_table
    from r2mad_lab.report.tables import Table

    frame = pd.DataFrame(values, index=pd.Index(list(next(iter(values.values())).keys()), name="method")).T
    frame = pd.DataFrame({b: {m: values[m][b] for m in values} for b in next(iter(values.values()))})
    frame.index.name, frame.columns.name = "method", "benchmark"
    save_table(Table(values=frame, ci_low=frame - 0.1, ci_high=frame + 0.1, caption=caption), name, folder,
               caption=caption, profile="tiny")


def test_sweep_points_are_the_cartesian_product_and_a_repeated_axis_is_refused() -> None:
    from r2mad_lab.reproduce.points import sweep_points

    assert sweep_points([("gamma", [0, 0.9]), ("top_k", [1, 3])]) == [
        {"gamma": 0, "top_k": 1}, {"gamma": 0, "top_k": 3}, {"gamma": 0.9, "top_k": 1}, {"gamma": 0.9, "top_k": 3}]
    with pytest.raises(ValueError, match="--sweep gamma is given twice"):
        sweep_points([("gamma", [0, 0.9]), ("gamma", [0.5, 1])])


def test_a_two_axis_sweep_draws_every_point_on_one_figure(tmp_path) -> None:
    from r2mad_lab.report.artifacts import read_manifest
    from r2mad_lab.reproduce.compare.sweep import sweep_artifacts
    from r2mad_lab.reproduce.points import plan_points

    points = []
    planned = plan_points({"gamma": 0.9, "top_k": 1}, "tiny", {}, [("gamma", [0, 0.9]), ("top_k", [1, 3])], [0])
    assert [p.setting for p in planned] == [{"gamma": 0, "top_k": 1}, {"gamma": 0, "top_k": 3},
                                            {"gamma": 0.9, "top_k": 1}, {"gamma": 0.9, "top_k": 3}]
    for i, point in enumerate(planned):
        folder = tmp_path / f"p{i}"
        _tidy_table(folder, "tab_main_results", {"MAD": {"MATH500": 0.5, "TruthfulQA": 0.4},
                                                 "R2-MAD": {"MATH500": 0.5 + 0.1 * i, "TruthfulQA": 0.4}})
        points.append(point.at(folder))
    out = tmp_path / "sweep"
    sentences = sweep_artifacts(points, ["gamma", "top_k"], "tiny", {"gamma": 0.9, "top_k": 1}, out)
    record = read_manifest(out)["artifacts"]["fig_sweep_tab_main_results"]
    assert (record["labels"]["titles"][0]
            == "Main results against gamma and top_k (profile tiny: gamma = 0.9; top_k = 1; dotted line)")
    assert "R2-MAD (top_k=3)" in record["labels"]["legends"] and "R2-MAD (top_k=1)" in record["labels"]["legends"]
    table = pd.read_csv(out / "tab_sweep_tab_main_results.csv")
    assert list(pd.unique(table["setting"])) == ["gamma=0, top_k=1", "gamma=0, top_k=3",
                                                 "gamma=0.9, top_k=1 (profile tiny)", "gamma=0.9, top_k=3"]
    assert "R2-MAD / MATH500 (0.500, 0.600, 0.700, 0.800; range 0.300)" in sentences[0]


def test_replicates_report_mean_spread_and_the_seed_by_seed_comparison(tmp_path) -> None:
    from r2mad_lab.reproduce.compare.replicate import replicate_artifacts, replicate_comparison
    from r2mad_lab.reproduce.points import Point, replicate_seeds

    assert replicate_seeds(3, 3) == [3, 4, 5]
    with pytest.raises(ValueError, match="--replicates"):
        replicate_seeds(0, 0)
    profile, variant = [], []
    for seed, (p, v) in enumerate([(0.5, 0.6), (0.6, 0.65), (0.7, 0.9)]):
        _tidy_table(tmp_path / f"profile{seed}", "tab_main_results", {"R2-MAD": {"MATH500": p}})
        _tidy_table(tmp_path / f"variant{seed}", "tab_main_results", {"R2-MAD": {"MATH500": v}})
        profile.append(Point(seed=seed).at(tmp_path / f"profile{seed}"))
        variant.append(Point(seed=seed).at(tmp_path / f"variant{seed}"))
    sentences = replicate_artifacts(profile, tmp_path / "out", "tiny", "profile tiny")
    summary = pd.read_csv(tmp_path / "out" / "tab_replicates_tab_main_results.csv").iloc[0]
    assert summary["mean"] == pytest.approx(0.6) and summary["sd"] == pytest.approx(0.1)
    assert (summary["min"], summary["max"]) == pytest.approx((0.5, 0.7))
    assert (summary["seed=0 ci_low"], summary["seed=0 ci_high"]) == pytest.approx((0.4, 0.6))
    assert "median sd of a cell across seeds is 0.100" in sentences[0]
    compared = replicate_comparison(profile, variant, tmp_path / "out", "tiny", "gamma=0.5")
    row = pd.read_csv(tmp_path / "out" / "tab_replicates_tab_main_results_vs_profile.csv").iloc[0]
    assert row["mean difference"] == pytest.approx((0.1 + 0.05 + 0.2) / 3, abs=1e-5) and row["seeds up"] == 3
    assert "1 of 1 cells move the same way under every seed" in compared[0]


def test_a_variant_folder_is_marked_incomplete_until_it_finishes_and_a_name_is_not_reused(tmp_path) -> None:
    from r2mad_lab.report.artifacts import save_table
    from r2mad_lab.reproduce.ablations import run_ablation
    from r2mad_lab.reproduce.points import INCOMPLETE_MARKER, variant_dir

    profile_dir = tmp_path / "figures" / "tiny"
    seen: list[bool] = []

    def run(values, variant, only, fail: bool = False):
        folder = profile_dir if variant is None else variant_dir(profile_dir, variant.name)
        if variant is not None:
            seen.append((folder / INCOMPLETE_MARKER).is_file())  # marked while it runs
            save_table(pd.DataFrame({"x": [1]}), "tab_x", folder, profile="tiny", variant=variant.record())
        else:
            save_table(pd.DataFrame({"x": [1]}), "tab_x", folder, profile="tiny", notebook="04_ablations")
        return None if fail else folder

    assert run_ablation(run, "tiny", profile_dir, ["04_ablations"], {"gamma": 0.5}, name="mine",
                        echo=lambda line: None) == 0
    assert seen == [True] and not (profile_dir / "variants" / "mine" / INCOMPLETE_MARKER).exists()
    with pytest.raises(ValueError, match="already holds variant mine with other overrides"):
        run_ablation(run, "tiny", profile_dir, ["04_ablations"], {"gamma": 0.7}, name="mine", echo=lambda line: None)
    failing = lambda values, variant, only: run(values, variant, only, fail=True)  # noqa: E731
    assert run_ablation(failing, "tiny", profile_dir, ["04_ablations"], {"gamma": 0.3}, echo=lambda line: None) == 1
    assert (profile_dir / "variants" / "gamma=0.3" / INCOMPLETE_MARKER).is_file()
