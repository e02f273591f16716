"""Report: the paper-vs-reproduced comparison and the check of the paper's claimed orderings.

The comparison reads every number the paper reports (``r2mad_core/data/reported_results.csv``,
transcribed from the paper's tables) and puts each reproduced value beside it
(:func:`compare_with_paper`). :func:`check_orderings` tests the paper's claimed orderings (e.g.
R2-MAD > MAD on average accuracy; full > w/o Confidence > w/o Memory on Qwen2.5-7B-Instruct) on
the reproduced per-question correctness, with an exact McNemar test on the paired questions.
The numbers come from :func:`r2mad_lab.reproduce.collect.collect_reproduction` (which runs or loads the cells);
this module only compares them.

Tables are :mod:`r2mad_lab.report.tables`, files and manifest :mod:`r2mad_lab.report.artifacts`.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_core.data import benchmarks as benchmark_registry
from r2mad_lab.report import inference, intervals, multiplicity
from r2mad_lab.report.results import PAPER_DESIGN_METRIC, SUBSET_METRIC, GridResults
from r2mad_lab.report.tables import AVERAGE_LABEL, benchmark_label

REPORTED_RESULTS_RESOURCE = "reported_results.csv"
#: The paper's "(both)" rows average over Qwen2.5-7B-Instruct and Gemma-3-4B-IT.
BOTH_MODELS_LABEL = "(both)"
BOTH_MODELS = ("Qwen2.5-7B-Instruct", "Gemma-3-4B-IT")

REPORTED_COLUMNS = ("table", "model", "method", "benchmark", "metric", "value")


def load_reported_results(path: str | Path | None = None) -> pd.DataFrame:
    """Every number the paper reports: columns table, model, method, benchmark, metric, value.

    Default: the packaged ``r2mad_core/data/reported_results.csv`` (leading ``#`` lines are its
    source note).
    """
    if path is None:
        text = resources.files("r2mad_core").joinpath("data", REPORTED_RESULTS_RESOURCE).read_text(encoding="utf-8")
        source = f"r2mad_core/data/{REPORTED_RESULTS_RESOURCE}"
    else:
        text = Path(path).read_text(encoding="utf-8")
        source = str(path)
    lines = text.splitlines()
    skip = 0
    while skip < len(lines) and lines[skip].startswith("#"):
        skip += 1
    frame = pd.read_csv(io.StringIO("\n".join(lines[skip:])))
    if tuple(frame.columns) != REPORTED_COLUMNS:
        raise ValueError(f"{source}: expected columns {list(REPORTED_COLUMNS)}, found {list(frame.columns)}")
    bad = pd.to_numeric(frame["value"], errors="coerce").isna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(
            f"{source}: row {row + skip + 2}, field 'value': expected a number, found {frame['value'].iloc[row]!r}"
        )
    frame["value"] = frame["value"].astype(float)
    return frame


def compare_with_paper(
    reproduced: pd.DataFrame,
    reported: pd.DataFrame | None = None,
    *,
    stand_ins: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Put each reproduced number beside the paper's.

    ``reproduced``: columns table (paper label, e.g. ``tab:main_results``), model, method, benchmark
    (paper name: ``MATH500``, ``Economics``, ..., ``Average``), metric, value, and optionally
    ci_low, ci_high, se, n. ``stand_ins`` maps a reproduced model to the paper model it stands in for
    (the cpu profile's SmolLM2 stands in for Qwen2.5-7B-Instruct); a ``paper_model`` column, when
    present, takes precedence. Returns one row per reproduced
    number: ..., ``paper_model``, ``reproduced``, ``paper`` (NaN when the paper has no such
    number; for an ``Average`` over fewer benchmarks than the paper's, the paper's mean over the same benchmarks,
    named in ``paper_average_over``), ``difference`` (reproduced - paper) with its interval ``difference_low`` /
    ``difference_high``, its standard error ``difference_se`` and ``consistent_with_paper``
    (:func:`_difference_intervals`).
    """
    required = ["table", "model", "method", "benchmark", "metric", "value"]
    missing = [c for c in required if c not in reproduced.columns]
    if missing:
        raise ValueError(f"reproduced results: missing columns {missing}; found {list(reproduced.columns)}")
    reported = load_reported_results() if reported is None else reported
    stand_ins = dict(stand_ins or {})
    frame = reproduced.copy()
    for column in ("ci_low", "ci_high", "se", "n"):
        if column not in frame:
            frame[column] = np.nan
    mapped = pd.Series([stand_ins.get(m, m) for m in frame["model"]], index=frame.index)
    frame["paper_model"] = frame["paper_model"].fillna(mapped) if "paper_model" in frame else mapped
    paper = reported.rename(columns={"model": "paper_model", "value": "paper"})
    merged = frame.merge(paper, on=["table", "paper_model", "method", "benchmark", "metric"], how="left")
    merged = merged.rename(columns={"value": "reproduced"})
    merged = _average_over_same_benchmarks(merged, paper)
    merged["difference"] = merged["reproduced"] - merged["paper"]
    merged = _difference_intervals(merged)
    columns = [
        "table", "model", "paper_model", "method", "benchmark", "metric",
        "reproduced", "ci_low", "ci_high", "se", "n", "paper", "difference", "difference_low", "difference_high",
        "difference_se", "consistent_with_paper",
    ]
    return merged[columns + [c for c in merged.columns if c not in columns]]


def paper_test_size(benchmark: str) -> int | None:
    """The questions of the paper's test split of a benchmark (its table name: ``Economics``); None when unknown."""
    for key, sizes in benchmark_registry.PAPER_SPLIT_SIZES.items():
        if benchmark_label(key) == benchmark:
            return int(sizes["test"])
    return None


def _difference_intervals(merged: pd.DataFrame) -> pd.DataFrame:
    """``difference_low`` / ``difference_high``: the 95% interval of reproduced - paper as two independent samples of
    known sizes (the paper's test split, :func:`paper_test_size`;
    :func:`r2mad_lab.report.intervals.difference_from_paper`, an Average over its benchmarks' cells),
    ``difference_se`` (the two samples' SEs, :func:`r2mad_lab.report.intervals.accuracy_se`, in quadrature), and
    ``consistent_with_paper``: whether the interval contains 0 (NA below the small-sample n of a benchmark cell,
    :func:`r2mad_lab.report.inference.too_small`: no verdict there). A perfect reproduction is consistent about 95% of
    the time; the paper's number inside the reproduced CI alone treated it as exact and failed a perfect reproduction
    about 17% of the time (docs/statistics.md). Accuracy rows with a known n and a paper number only; NA elsewhere."""
    merged = merged.copy()
    merged["difference_low"] = np.nan
    merged["difference_high"] = np.nan
    merged["difference_se"] = np.nan
    merged["consistent_with_paper"] = pd.Series(pd.NA, index=merged.index, dtype="boolean")
    keys = ["table", "model", "paper_model", "method", "metric"]
    for index in merged.index[(merged["metric"] == "accuracy") & merged["paper"].notna()]:
        row = merged.loc[index]
        if row["benchmark"] == AVERAGE_LABEL:
            cells = merged[(merged[keys] == row[keys]).all(axis=1) & (merged["benchmark"] != AVERAGE_LABEL)]
        else:
            cells = merged.loc[[index]]
        sizes = [paper_test_size(b) for b in cells["benchmark"]]
        if cells.empty or None in sizes or cells["n"].isna().any() or cells["paper"].isna().any():
            continue
        _, low, high = intervals.difference_from_paper(
            list(zip(cells["reproduced"].astype(float), cells["n"].astype(int), strict=False)),
            list(zip(cells["paper"].astype(float), sizes, strict=False)))
        merged.at[index, "difference_low"], merged.at[index, "difference_high"] = low, high
        merged.at[index, "difference_se"] = math.hypot(
            intervals.accuracy_se(cells["reproduced"].astype(float).tolist(), cells["n"].astype(int).tolist()),
            intervals.accuracy_se(cells["paper"].astype(float).tolist(), sizes))
        if inference.too_small(int(cells["n"].min())):  # no verdict below the small-sample n (docs/statistics.md)
            continue
        merged.at[index, "consistent_with_paper"] = bool(low <= 0.0 <= high)
    return merged


def _average_over_same_benchmarks(merged: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Like with like: where a reproduced ``Average`` covers fewer benchmarks than the paper's (the cpu profile runs
    MATH500 and TruthfulQA), its ``paper`` value becomes the mean of the paper's numbers over those same benchmarks
    (CoT on the cpu profile: 0.603, not the four-benchmark 0.565). ``paper_average_over`` names them."""
    merged = merged.copy()
    merged["paper_average_over"] = ""
    keys = ["table", "paper_model", "method", "metric"]
    for index in merged.index[merged["benchmark"] == AVERAGE_LABEL]:
        row = merged.loc[index]
        mine = merged[(merged[keys] == row[keys]).all(axis=1) & (merged["benchmark"] != AVERAGE_LABEL)
                      & (merged["model"] == row["model"])]
        theirs = paper[(paper[keys] == row[keys]).all(axis=1) & (paper["benchmark"] != AVERAGE_LABEL)]
        ran, reported = set(mine["benchmark"]), set(theirs["benchmark"])
        if not ran or not reported or ran == reported or not ran < reported:
            continue
        values = mine["paper"].astype(float)
        merged.at[index, "paper"] = float(values.mean()) if values.notna().all() else float("nan")
        merged.at[index, "paper_average_over"] = ", ".join(sorted(ran))
    return merged


#: Reproduced values closer than this are a tie (an ordering that is not strict is not in the claimed direction).
TIE_TOLERANCE = 1e-12
#: The outcome of a claim whose reproduced ordering is strict in the claimed direction (a point estimate, no verdict).
AS_CLAIMED = "as claimed"
#: The outcome of a claim comparing two rows the recorded configuration makes the same computation (never tested).
EQUAL_BY_CONSTRUCTION = "equal by construction"
#: The outcome of a claim read on the paper's subset design (selected on the MAD run's own round 0 while R2-MAD draws
#: its own): biased toward R2-MAD by regression to the mean (docs/statistics.md, "Subsets"); shown, never tested.
BIASED_DESIGN = "paper's design: biased, not tested"
#: Outcomes that are no test and stay out of the Holm family.
UNTESTED = (EQUAL_BY_CONSTRUCTION, BIASED_DESIGN)
#: Retrieval policies that pick the same case as the debate-state-aware one at K = 1 (lambda_t only rescales it).
SAME_AT_K1 = ("Debate-State-Aware", "Fixed-lambda (0.25)", "Fixed-lambda (0.50)", "Fixed-lambda (0.75)")
RETRIEVAL_PREFIX = "R2-MAD retrieval="


def equal_by_construction(better: str, worse: str, top_k: int | None) -> bool:
    """Whether two methods of a claim are the same computation under the run's recorded K: at K = 1 the
    debate-state-aware and fixed-lambda policies retrieve the same cases (the MMR redundancy term is empty)."""
    names = [m[len(RETRIEVAL_PREFIX):] for m in (better, worse) if m.startswith(RETRIEVAL_PREFIX)]
    return top_k == 1 and len(names) == 2 and all(n in SAME_AT_K1 for n in names)


@dataclass(frozen=True)
class OrderingClaim:
    """A claimed ordering of the paper: ``better`` beats ``worse`` on ``metric`` for ``paper_model``
    on ``benchmark`` (``Average`` = the mean of the per-benchmark values, as in the paper's tables).
    ``table`` is where the paper reports the numbers; ``text`` cites the paper."""

    table: str
    paper_model: str
    benchmark: str
    better: str
    worse: str
    metric: str = "accuracy"
    higher_is_better: bool = True
    text: str = ""


def _main_claims() -> list[OrderingClaim]:
    claims = []
    for model in ("Qwen2.5-7B-Instruct", "Qwen3-8B", "Gemma-3-4B-IT"):
        for baseline in ("CoT", "Self-Consistency", "MAD", "MAD-M2"):
            claims.append(OrderingClaim(
                "tab:main_results", model, AVERAGE_LABEL, "R2-MAD", baseline,
                text="RQ1: R2-MAD achieves the highest average accuracy on all three models.",
            ))
        claims.append(OrderingClaim(
            "tab:sc_ablation", model, AVERAGE_LABEL, "Self-Consistency (9)", "Self-Consistency (3)",
            text="App. C.2: average accuracy increases monotonically with the number of paths.",
        ))
    claims += [
        OrderingClaim("tab:ablation", "Qwen2.5-7B-Instruct", AVERAGE_LABEL, "R2-MAD", "R2-MAD w/o Confidence",
                      text="RQ2: removing confidence weighting drops 0.607 to 0.585."),
        OrderingClaim("tab:ablation", "Qwen2.5-7B-Instruct", AVERAGE_LABEL, "R2-MAD w/o Confidence",
                      "R2-MAD w/o Memory", text="RQ2: removing memory retrieval further drops it to 0.576."),
    ]
    for policy in ("Random", "Similarity-based", "Positive-only", "Diversity-only",
                   "Fixed-lambda (0.25)", "Fixed-lambda (0.50)", "Fixed-lambda (0.75)"):
        claims.append(OrderingClaim(
            "tab:retrieval_ablation", BOTH_MODELS_LABEL, AVERAGE_LABEL,
            "R2-MAD retrieval=Debate-State-Aware", f"R2-MAD retrieval={policy}",
            text="RQ3: the debate-state-aware policy attains the highest average accuracy (0.663).",
        ))
    for benchmark in ("Economics", "Engineering"):
        claims.append(OrderingClaim(
            "fig:combined_eval (text)", "Qwen2.5-7B-Instruct", benchmark, "R2-MAD", "MAD",
            metric=SUBSET_METRIC,
            text="RQ4: on the shared-misconception subset R2-MAD outperforms MAD (tested with a shared round 0).",
        ))
    claims += [
        OrderingClaim("tab:icl_cot", BOTH_MODELS_LABEL, AVERAGE_LABEL, "R2-MAD", "ICL-CoT",
                      text="App. C.5: R2-MAD matches or exceeds ICL-CoT."),
    ]
    for model in ("Llama-3.3-70B-Instruct", "GPT-4o-mini"):
        claims.append(OrderingClaim(
            "tab:large_models", model, AVERAGE_LABEL, "R2-MAD", "MAD",
            text="App. C.6: R2-MAD attains the best average accuracy on both larger models.",
        ))
    return claims


#: The orderings the paper claims in its text, checked by :func:`check_orderings`.
PAPER_ORDERING_CLAIMS: tuple[OrderingClaim, ...] = tuple(_main_claims())
#: RQ4 read on the paper's own subset design, shown beside the tested rows, labelled biased, never tested.
PAPER_DESIGN_CLAIMS: tuple[OrderingClaim, ...] = tuple(
    OrderingClaim(c.table, c.paper_model, c.benchmark, c.better, c.worse, metric=PAPER_DESIGN_METRIC,
                  text="RQ4 on the paper's design (subset selected on MAD's own round 0): biased toward R2-MAD.")
    for c in PAPER_ORDERING_CLAIMS if c.metric == SUBSET_METRIC)
#: Every row of the claims table.
CLAIMS_TABLE: tuple[OrderingClaim, ...] = PAPER_ORDERING_CLAIMS + PAPER_DESIGN_CLAIMS


def paper_metric(metric: str) -> str:
    """The metric of ``reported_results.csv`` a claim's metric reads the paper's number from."""
    return SUBSET_METRIC if metric == PAPER_DESIGN_METRIC else metric


def _paper_value(reported: pd.DataFrame, claim: OrderingClaim, method: str) -> float:
    base = reported[
        (reported["model"] == claim.paper_model)
        & (reported["method"] == method)
        & (reported["benchmark"] == claim.benchmark)
        & (reported["metric"] == paper_metric(claim.metric))
    ]
    in_table = base[base["table"] == claim.table]
    chosen = in_table if len(in_table) else base
    return float(chosen["value"].iloc[0]) if len(chosen) else float("nan")


def check_orderings(
    per_question: pd.DataFrame,
    claims: Sequence[OrderingClaim] = CLAIMS_TABLE,
    *,
    reported: pd.DataFrame | None = None,
    stand_ins: Mapping[str, str] | None = None,
    alpha: float = 0.05,
    n_bootstrap: int = 1000,
    top_k: int | None = None,
) -> pd.DataFrame:
    """Test the paper's claimed orderings on the reproduced per-question correctness.

    ``per_question``: one row per (model, method, benchmark, sample_id) with a boolean
    ``correct``; ``benchmark`` uses the paper's names; an optional ``metric`` column (default
    ``accuracy``) lets the shared-misconception subset be passed as
    ``accuracy (shared-misconception subset)`` rows. A claim is checked on the reproduced models
    that are (or stand in for) its paper model (``(both)``: those standing for Qwen2.5-7B-Instruct
    or Gemma-3-4B-IT), pairing the
    two methods on the questions both answered. The reproduced values are the mean of the
    per-benchmark accuracies for ``Average`` (as in the paper) and the accuracy otherwise; the test is
    the one rule's (:func:`r2mad_lab.report.inference.paired_estimate`, docs/statistics.md): exact McNemar on one
    benchmark, and for ``Average`` the stratified exact sign test of the same mean of per-benchmark paired
    differences (strata: model / benchmark), with a stratified bootstrap CI.

    Returns one row per claim that could be checked: claim fields, ``paper_better``,
    ``paper_worse``, ``holds_in_paper``, ``reproduced_better``, ``reproduced_worse``,
    ``outcome`` (``as claimed``: the reproduced ordering is strict in the claimed direction; ``tie``: equal
    values; ``reversed``; ``equal by construction``: at the run's recorded ``top_k`` = 1 the two retrieval policies
    are the same computation, so the claim is not tested and not in the Holm family),
    ``holds_here`` (outcome is ``holds``), ``n_pairs``, ``better_only``, ``worse_only``,
    ``difference`` / ``ci_low`` / ``ci_high`` (the paired estimate and its 95% CI), ``test`` (its name),
    ``p_value``, ``p_holm`` (Holm-adjusted over the distinct comparisons: the family), ``significant`` (holds here,
    p_holm < alpha and n_pairs at least :func:`r2mad_lab.report.inference.minimum_n`), ``runs`` (the reproduced (model,
    benchmark) cells the comparison read) and ``duplicate_of`` (the index of an earlier row that
    compared the very same runs: two paper claims checked on one comparison, e.g. two paper models
    with one stand-in; :func:`claims_summary` counts it once).
    """
    required = ["model", "method", "benchmark", "sample_id", "correct"]
    missing = [c for c in required if c not in per_question.columns]
    if missing:
        raise ValueError(f"per-question results: missing columns {missing}; found {list(per_question.columns)}")
    reported = load_reported_results() if reported is None else reported
    stand_ins = dict(stand_ins or {})
    frame = per_question.copy()
    if "metric" not in frame:
        frame["metric"] = "accuracy"
    mapped = pd.Series([stand_ins.get(m, m) for m in frame["model"]], index=frame.index)
    frame["paper_model"] = frame["paper_model"].fillna(mapped) if "paper_model" in frame else mapped
    frame["correct"] = frame["correct"].astype(bool)
    rows: list[dict[str, Any]] = []
    seen: dict[tuple, int] = {}
    for claim in claims:
        if not claim.metric.startswith("accuracy"):
            raise ValueError(f"check_orderings: claim metric must be an accuracy, found {claim.metric!r}")
        part = frame[frame["metric"] == claim.metric]
        if claim.paper_model == BOTH_MODELS_LABEL:
            part = part[part["paper_model"].isin(BOTH_MODELS)]
        else:
            part = part[part["paper_model"] == claim.paper_model]
        if claim.benchmark != AVERAGE_LABEL:
            part = part[part["benchmark"] == claim.benchmark]
        better = part[part["method"] == claim.better]
        worse = part[part["method"] == claim.worse]
        if better.empty or worse.empty:
            continue
        keys = ["model", "paper_model", "benchmark", "sample_id"]
        paired = better[keys + ["correct"]].merge(worse[keys + ["correct"]], on=keys, suffixes=("_better", "_worse"))
        if paired.empty:
            continue
        per_benchmark = paired.groupby(["model", "paper_model", "benchmark"], sort=False)[
            ["correct_better", "correct_worse"]].mean()
        reproduced_better = float(per_benchmark["correct_better"].mean())
        reproduced_worse = float(per_benchmark["correct_worse"].mean())
        strata = paired["model"].astype(str) + " / " + paired["benchmark"].astype(str)
        test = inference.paired_estimate(paired["correct_better"].to_numpy(), paired["correct_worse"].to_numpy(),
                                         strata.to_numpy(), n_bootstrap=n_bootstrap)
        better_only, worse_only, p_value = test.a_only, test.b_only, test.p_value
        paper_better = _paper_value(reported, claim, claim.better)
        paper_worse = _paper_value(reported, claim, claim.worse)
        sign = 1.0 if claim.higher_is_better else -1.0
        holds_in_paper = (
            bool(sign * (paper_better - paper_worse) > 0)
            if not (math.isnan(paper_better) or math.isnan(paper_worse)) else pd.NA
        )
        difference = sign * (reproduced_better - reproduced_worse)
        outcome = AS_CLAIMED if difference > TIE_TOLERANCE else ("reversed" if difference < -TIE_TOLERANCE else "tie")
        if equal_by_construction(claim.better, claim.worse, top_k):
            outcome, p_value = EQUAL_BY_CONSTRUCTION, math.nan  # the same computation: no test, not in the family
        if claim.metric == PAPER_DESIGN_METRIC:
            outcome, p_value = BIASED_DESIGN, math.nan  # selects on one arm's outcomes: shown, never tested
        holds_here = outcome == AS_CLAIMED
        runs = tuple(sorted({(m, b) for m, b in zip(paired["model"], paired["benchmark"], strict=False)}))
        n_cell = int(paired.groupby(["model", "benchmark"]).size().min())  # the cutoff applies per benchmark cell
        key = (claim.metric, claim.better, claim.worse, claim.benchmark == AVERAGE_LABEL, runs)
        duplicate_of = seen.setdefault(key, len(rows))
        rows.append({
            "table": claim.table, "paper_model": claim.paper_model, "benchmark": claim.benchmark,
            "metric": claim.metric, "better": claim.better, "worse": claim.worse,
            "paper_better": paper_better, "paper_worse": paper_worse, "holds_in_paper": holds_in_paper,
            "reproduced_better": reproduced_better, "reproduced_worse": reproduced_worse,
            "outcome": outcome, "holds_here": holds_here, "n_pairs": len(paired), "n_cell": n_cell,
            "better_only": better_only,
            "worse_only": worse_only, "difference": test.difference, "ci_low": test.ci_low, "ci_high": test.ci_high,
            "se": test.se,
            "test": test.test, "draws": test.draws, "p_value": p_value, "p_holm": math.nan, "significant": False,
            "claim": claim.text, "runs": "; ".join(f"{m} / {b}" for m, b in runs),
            "duplicate_of": None if duplicate_of == len(rows) else duplicate_of,
        })
    frame = pd.DataFrame(rows)
    if not frame.empty:
        # Every distinct comparison is tested at once: significant only by its Holm-adjusted p (report/multiplicity.py);
        # a repeated claim (same runs) is no further test and takes its first row's adjusted p.
        distinct = frame["duplicate_of"].isna().to_numpy()
        adjusted = multiplicity.holm(frame["p_value"].where(distinct))  # NaN (equal by construction): no test
        frame["p_holm"] = [adjusted[i] if distinct[i] else adjusted[int(frame.at[i, "duplicate_of"])]
                           for i in range(len(frame))]
        family = int((distinct & frame["p_value"].notna().to_numpy()).sum())
        # the cutoff at the family's Holm level, per benchmark cell (docs/statistics.md, rule 6)
        frame["significant"] = [bool(h) and inference.decides(p, n, alpha, family)
                                for h, p, n in zip(frame["holds_here"], frame["p_holm"], frame["n_cell"], strict=False)]
    return frame



@dataclass(frozen=True)
class ClaimsSummary:
    """The claim counts of :func:`check_orderings`, each distinct comparison once."""

    checked: int  # distinct tested comparisons (a claim repeating an earlier comparison's runs is not counted)
    holds: int  # strict reproduced ordering in the claimed direction
    significant: int  # of those, Holm-adjusted exact McNemar p < alpha
    ties: int
    reversed: int
    repeated: int  # claim rows that repeat an earlier comparison
    holds_in_paper: int  # of the distinct comparisons, how many the paper's own numbers order as claimed
    alpha: float = 0.05

    largest_n: int = 0  # the most paired questions of a distinct comparison (0: unknown); below minimum_n: no inference
    equal: int = 0  # claims comparing rows equal by construction (not tested, not counted in checked)
    biased: int = 0  # claims read on the paper's biased subset design (shown, not tested, not counted in checked)

    @property
    def total(self) -> int:
        """Every distinct claim row: tested, equal by construction and on the biased design (the counts sum to it)."""
        return self.checked + self.equal + self.biased

    @property
    def family(self) -> str:
        """The Holm family every claim's verdict is adjusted over, as generated text names it."""
        return f"the claims family of {self.checked} (the distinct tested comparisons of the claims table)"

    @property
    def family_short(self) -> str:
        """The family's name with its size, as a cutoff is stated for it (``the claims family of 14``)."""
        return f"the claims family of {self.checked}"

    def _untested(self) -> str:
        parts = []
        if self.equal:
            parts.append(f"{self.equal} equal by construction")
        if self.biased:
            parts.append(f"{self.biased} on the paper's biased subset design")
        return (", " + ", ".join(parts) + " (not tested)") if parts else ""

    def sentence(self) -> str:
        """One sentence built from the counts (notebook 10, the headline and the README use it); its counts sum to
        :attr:`total`."""
        if not self.checked:
            return "No claimed ordering could be checked with the methods this profile ran."
        small = bool(self.largest_n) and inference.too_small(self.largest_n, self.alpha, self.checked)
        text = (f"Of the {self.total} distinct claims the paper makes and this profile could check, "
                f"{self.holds} go the claimed way here (strictly better in the point estimates), {self.reversed} "
                f"reversed, {self.ties} tied"
                + self._untested())
        if small:
            text += ("; none is tested: " + inference.small_sample_line(
                self.largest_n, self.alpha, what="paired questions per benchmark cell", family=self.checked,
                family_name=self.family_short).rstrip("."))
        else:
            text += (f"; {self.significant} of the {self.holds} with p_holm < {self.alpha:g} "
                     f"({multiplicity.RULE}-adjusted over {self.family}; exact McNemar per benchmark, the stratified "
                     f"sign test for an Average, exact or Monte Carlo as the table's p_is says)")
        text += "."
        if self.repeated:
            text += (f" {self.repeated} further claim{'s' if self.repeated != 1 else ''} of the paper "
                     f"{'reads' if self.repeated == 1 else 'read'} the same runs as one above and "
                     f"{'is' if self.repeated == 1 else 'are'} not counted again.")
        return text

    def verdict_line(self) -> str:
        """The claims table's one-line verdict (the headline ends with it); its counts sum to :attr:`total`."""
        if not self.checked:
            return "Claims: none of the paper's claimed orderings could be checked with what this profile ran."
        head = f"Claims: {self.holds} of {self.total} go the claimed way"
        tail = f", {self.reversed} reversed, {self.ties} tied" + self._untested()
        if self.largest_n and inference.too_small(self.largest_n, self.alpha, self.checked):
            return (head + tail + f"; n = {self.largest_n} per benchmark cell is "
                    f"{inference.cutoff_phrase(self.alpha, self.checked, self.family_short)}: no inference.")
        return (head + f" ({self.significant} of them with p_holm < {self.alpha:g}, {multiplicity.RULE} "
                f"over the claims family of {self.checked})" + tail + ".")


def claims_summary(claims: pd.DataFrame, alpha: float = 0.05) -> ClaimsSummary:
    """Count the rows of :func:`check_orderings`: each distinct comparison once (rows with a
    ``duplicate_of``, rows equal by construction and rows on the biased subset design are counted apart), "as
    claimed" only for a strict ordering, significance separately."""
    if claims.empty:
        return ClaimsSummary(0, 0, 0, 0, 0, 0, 0, alpha, 0, 0)
    distinct = claims[claims["duplicate_of"].isna()]
    repeated = len(claims) - len(distinct)
    equal = int((distinct["outcome"] == EQUAL_BY_CONSTRUCTION).sum())
    biased = int((distinct["outcome"] == BIASED_DESIGN).sum())
    distinct = distinct[~distinct["outcome"].isin(UNTESTED)]
    if distinct.empty:
        return ClaimsSummary(0, 0, 0, 0, 0, repeated, 0, alpha, 0, equal, biased)
    return ClaimsSummary(
        checked=len(distinct),
        holds=int((distinct["outcome"] == AS_CLAIMED).sum()),
        significant=int(distinct["significant"].sum()),
        ties=int((distinct["outcome"] == "tie").sum()),
        reversed=int((distinct["outcome"] == "reversed").sum()),
        repeated=repeated,
        holds_in_paper=int(distinct["holds_in_paper"].fillna(False).astype(bool).sum()),
        alpha=alpha,
        largest_n=int(distinct["n_cell" if "n_cell" in distinct else "n_pairs"].max()),
        equal=equal,
        biased=biased,
    )


def one_point_per_run(comparison: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`compare_with_paper` with each reproduced run once: a run that fills
    several paper tables (R2-MAD of Table 1 is also Table 2's full model) keeps its first row."""
    return comparison.drop_duplicates(["model", "method", "benchmark", "metric"], keep="first")


def pooled_average_rows(results: GridResults, methods: Sequence[str], table_label: str) -> pd.DataFrame:
    """The paper's ``(both)`` rows: for each method, the mean accuracy over every (model, benchmark)
    cell of ``results`` with a bootstrap CI (Tables 3 and 8 average two models)."""
    rows = []
    questions = results.per_question()
    for method in methods:
        mine = questions[questions["method"] == method]
        if mine.empty:
            continue
        groups = [part["correct"].to_numpy() for _, part in mine.groupby(["model", "benchmark"], sort=False)]
        mean, low, high, se = intervals.average_accuracy(groups, n_bootstrap=results.bootstrap_resamples,
                                                         seed=results.seed)
        rows.append({"table": table_label, "model": ", ".join(pd.unique(mine["model"])),
                     "paper_model": BOTH_MODELS_LABEL,
                     "method": method, "benchmark": AVERAGE_LABEL, "metric": "accuracy", "value": mean,
                     "ci_low": low, "ci_high": high, "se": se, "n": len(mine)})
    return pd.DataFrame(rows)
