"""Power of the claims' paired comparisons: the smallest difference a run can detect, and its power.

The power a run has
to detect the paper's own difference (the claims are
:data:`r2mad_lab.report.comparison.PAPER_ORDERING_CLAIMS`).

The test is the one notebook 10 applies (:func:`r2mad_lab.report.comparison.check_orderings`): McNemar's exact
test (McNemar 1947), the two-sided exact binomial test (``scipy.stats.binomtest``, p = 1/2) of the ``b``
questions only the better method got right among the ``d = b + c`` discordant ones; a claim counts as
significant when it holds and its Holm-adjusted p < alpha (docs/statistics.md); power is computed at alpha / m,
the level of Holm's first step over the m claims tested at once (:func:`holm_alpha`), a lower bound of the power
under Holm.

**Model.** Each of n paired questions is discordant in favour of the better method with probability p10 and
in favour of the worse with p01: the discordance is psi = p10 + p01 and the accuracy difference delta =
p10 - p01. Then D ~ Binomial(n, psi) and, given D = d, B ~ Binomial(d, (1 + delta / psi) / 2). The power of
the exact conditional test is its unconditional rejection probability (Miettinen 1968; Lachin 1992, "Power
and sample size evaluation for the McNemar test with application to matched case-control studies", Stat.
Med. 11:1239-1251), computed exactly with ``scipy.stats.binom``, no normal approximation::

    power(n, psi, delta) = sum_d Binom(d; n, psi) * P(B >= c_d | d),

c_d the smallest b > d / 2 whose two-sided exact p-value 2 P(Binomial(d, 1/2) >= b) is below alpha. Only
rejections in the claimed direction count: a significant reversal does not confirm a claim.

**Minimum detectable effect** (:func:`minimum_detectable_effect`): the smallest delta with power >= 80% at
a fixed psi (``scipy.optimize.brentq``; power rises with delta); NaN when even delta = psi (every discordant
question favours the better method) falls short, e.g. with no discordant pair at all.

**Which discordance.** Always the pre-run one (no post-hoc power from a run's outcomes; docs/statistics.md):
for the claims table (:func:`with_power`) and before a run (:func:`planned_claims`) alike, an assumption from two
accuracies p1, p2: the paired outcomes are correlated with phi = :data:`ASSUMED_CORRELATION` (ours: 0.5; the sim
profile's runs show 0.5-0.6 between its methods; a higher correlation means fewer discordant questions and a smaller
MDE), so that psi = p1 + p2 - 2 p11 with p11 = p1 p2 + phi sqrt(p1 (1 - p1) p2 (1 - p2)) (clipped to the Frechet
bounds); the MDE before a run lets psi move with delta (the better method at p2 + delta).

**Approximation (ours).** An ``Average`` claim compares means of per-benchmark accuracies, the test pools
the paired questions of all benchmarks; the paper's difference of Averages is taken as the pooled
difference (exact when the benchmarks are equally large or the differences equal). The size of the
shared-misconception subset is not in the paper: :func:`inferred_subset_size` takes the denominator its
two percentages imply (Engineering: 27.10% and 17.42% fit only 155 of 242 questions), the one nearest to
the questions MAD gets wrong when several fit.

:func:`claims_power_lines` states, for a profile before its run (``--estimate-only`` of the paper profile),
which claims its run can test with at least 80% power and which it cannot.
"""

from __future__ import annotations

import math
from importlib import import_module
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from r2mad_core.data import benchmarks as benchmark_registry
from r2mad_lab.report.comparison import (
    BOTH_MODELS,
    BOTH_MODELS_LABEL,
    PAPER_ORDERING_CLAIMS,
    UNTESTED,
    OrderingClaim,
    load_reported_results,
)
from r2mad_lab.report.mcnemar import (  # noqa: F401  (the exact McNemar power, re-exported: power.mcnemar_power)
    ALPHA,
    ASSUMED_CORRELATION,
    TARGET_POWER,
    _critical_values,
    assumed_discordance,
    mcnemar_power,
    minimum_detectable_effect,
    planned_minimum_detectable_effect,
)
from r2mad_lab.report.tables import AVERAGE_LABEL, benchmark_label

#: The metric of the shared-misconception claims (as in ``reported_results.csv``).
SUBSET_METRIC = "accuracy (shared-misconception subset)"
#: What :func:`claims_power_lines` reads of a profile (``split_rule`` and ``large_models`` are optional).
PROFILE_FIELDS_USED = ("models", "large_models", "benchmarks", "test_limit", "retrieval_models",
                       "retrieval_benchmarks", "icl_models", "icl_benchmarks", "split_rule")


# --------------------------------------------------------------------------------------------
# After a run: the claims table of check_orderings with its power
# --------------------------------------------------------------------------------------------
def holm_alpha(tests: int, alpha: float = ALPHA) -> float:
    """The level the first (most stringent) step of Holm's procedure over ``tests`` tests applies: ``alpha / tests``.
    Power at it is a lower bound of the power under Holm (a claim tested later in the order faces a higher level)."""
    return alpha / max(int(tests), 1)


def with_power(claims: pd.DataFrame, alpha: float = ALPHA, power: float = TARGET_POWER,
               correlation: float = ASSUMED_CORRELATION) -> pd.DataFrame:
    """The rows of :func:`~r2mad_lab.report.comparison.check_orderings` with their pre-run power: ``alpha_holm``
    (alpha / m, m the distinct comparisons: the level Holm's first step applies), ``assumed_discordance`` (from the
    paper's two accuracies and the assumed ``correlation``, :func:`assumed_discordance`), ``mde`` (the smallest
    difference the run's n_pairs detect with ``power`` at alpha_holm, :func:`planned_minimum_detectable_effect` over
    the worse method's paper accuracy; NaN: none), ``power_paper_difference`` (the power to detect the paper's own
    difference at alpha_holm) and ``detectable`` (that power >= ``power``). Nothing here reads the run's outcomes:
    these are the quantities a power analysis states before the run (no post-hoc power)."""
    out = claims.copy()
    columns = ("alpha_holm", "assumed_discordance", "mde", "power_paper_difference", "detectable")
    if out.empty:
        for column in columns:
            out[column] = pd.Series(dtype=float if column != "detectable" else bool)
        return out
    level = holm_alpha(len(_family(out)), alpha)
    psi, mde, paper_power = [], [], []
    for row in out.itertuples():
        n = int(row.n_pairs)
        better, worse = float(row.paper_better), float(row.paper_worse)
        paper = better - worse
        if math.isnan(paper) or getattr(row, "outcome", None) in UNTESTED:  # no test: no power
            psi.append(math.nan)
            mde.append(math.nan)
            paper_power.append(math.nan)
            continue
        discordance = assumed_discordance(better, worse, correlation)
        psi.append(discordance)
        mde.append(planned_minimum_detectable_effect(n, worse, correlation, level, power))
        # the paper shows no such ordering: nothing to detect
        paper_power.append(mcnemar_power(n, discordance, paper, level) if paper > 0.0 else math.nan)
    out["alpha_holm"] = level
    out["assumed_discordance"] = psi
    out["mde"] = mde
    out["power_paper_difference"] = paper_power
    out["detectable"] = [bool(p >= power) for p in paper_power]
    return out


# --------------------------------------------------------------------------------------------
# Before a run: the claims a profile will check, their sizes and power
# --------------------------------------------------------------------------------------------
def inferred_subset_size(rates: Sequence[float], n_test: int, proxy: float, decimals: int = 4) -> int:
    """The shared-misconception subset's size the paper's rounded percentages imply: the denominators up to
    ``n_test`` for which every rate (rounded to ``decimals``) is a count over it, the one nearest ``proxy``
    (the questions MAD gets wrong); ``round(proxy)`` when none fits."""
    tolerance = 0.5 * 10.0 ** (-decimals) + 1e-12
    fitting = [m for m in range(1, n_test + 1)
               if all(abs(round(rate * m) / m - rate) <= tolerance for rate in rates)]
    if not fitting:
        return max(1, int(round(proxy)))
    return min(fitting, key=lambda m: (abs(m - proxy), m))


def _field(profile: Any, name: str, default: Any = None) -> Any:
    if isinstance(profile, Mapping):
        return profile.get(name, default)
    return getattr(profile, name, default)


def _as_profile(profile: Any) -> Any:
    """A :class:`~r2mad_lab.experiments.profiles.Profile` (its spec), a spec, a mapping of fields, or a name."""
    if isinstance(profile, str):
        profile = import_module("r2mad_lab.experiments.profiles").load_profile(profile)
    return getattr(profile, "spec", profile)


def _entry(model: Any, name: str) -> Any:
    return model.get(name) if isinstance(model, Mapping) else getattr(model, name, None)


def _test_sizes(profile: Any) -> dict[str, int]:
    """Test questions per benchmark id of the profile: the paper's split sizes (the authors' with
    ``split_rule: authors``), capped by ``test_limit``; a benchmark without known sizes is left out."""
    rule = _field(profile, "split_rule") or "paper"
    table = benchmark_registry.AUTHORS_SPLIT_SIZES if rule == "authors" else benchmark_registry.PAPER_SPLIT_SIZES
    limit = _field(profile, "test_limit")
    sizes = {}
    for benchmark in _field(profile, "benchmarks") or ():
        size = (table.get(benchmark) or {}).get("test")
        if size is not None:
            sizes[benchmark] = min(size, limit) if limit else size
    return sizes


def _planned_pairs(claim: OrderingClaim, profile: Any, sizes: Mapping[str, int],
                   reported: pd.DataFrame) -> tuple[int, str]:
    """(paired questions, which runs) of ``claim`` in ``profile``'s run; (0, reason) when it is not checked."""
    models = list(_field(profile, "models") or ())
    paper_of = {_entry(m, "label"): (_entry(m, "stands_in_for") or _entry(m, "label")) for m in models}
    by_name = {label: label for label in paper_of}
    if claim.table == "tab:retrieval_ablation":
        labels, benchmarks = _field(profile, "retrieval_models") or (), _field(profile, "retrieval_benchmarks") or ()
    elif claim.table == "tab:icl_cot":
        labels, benchmarks = _field(profile, "icl_models") or (), _field(profile, "icl_benchmarks") or ()
    elif claim.table == "tab:large_models":
        run = [e for e in (_field(profile, "large_models") or ()) if _entry(e, "stand_in") is None]
        labels = [_entry(e, "label") for e in run]
        paper_of.update({label: label for label in labels})
        by_name.update({label: label for label in labels})
        benchmarks = list(sizes)
    else:
        labels, benchmarks = list(paper_of), list(sizes)
    wanted = BOTH_MODELS if claim.paper_model == BOTH_MODELS_LABEL else (claim.paper_model,)
    chosen = [by_name[label] for label in labels if label in paper_of and paper_of[label] in wanted]
    if claim.benchmark != AVERAGE_LABEL:
        benchmarks = [b for b in benchmarks if benchmark_label(b) == claim.benchmark]
    benchmarks = [b for b in benchmarks if b in sizes]
    if not chosen or not benchmarks:
        return 0, ""
    per_model = 0
    for benchmark in benchmarks:
        n = sizes[benchmark]
        if claim.metric == SUBSET_METRIC:
            n = _subset_size(claim, benchmark, n, reported)
        per_model += n
    return per_model * len(chosen), f"{len(chosen)} model(s) x {', '.join(benchmark_label(b) for b in benchmarks)}"


def _subset_size(claim: OrderingClaim, benchmark: str, n: int, reported: pd.DataFrame) -> int:
    """The shared-misconception subset of ``n`` test questions, from the paper's percentages
    (:func:`inferred_subset_size`)."""
    name = benchmark_label(benchmark)
    rows = reported[(reported["model"] == claim.paper_model) & (reported["benchmark"] == name)]
    rates = rows[rows["metric"] == SUBSET_METRIC]["value"].tolist()
    full = (benchmark_registry.PAPER_SPLIT_SIZES.get(benchmark) or {}).get("test", n)
    mad = rows[(rows["metric"] == "accuracy") & (rows["method"] == "MAD")
               & (rows["table"] == "tab:main_results")]["value"]
    proxy = full * (1.0 - float(mad.iloc[0])) if len(mad) else full / 2.0
    size = inferred_subset_size(rates, full, proxy) if rates else int(round(proxy))
    return max(1, int(round(size * n / full)))


def planned_claims(profile: Any, *, reported: pd.DataFrame | None = None,
                   claims: Sequence[OrderingClaim] = PAPER_ORDERING_CLAIMS, correlation: float = ASSUMED_CORRELATION,
                   alpha: float = ALPHA, power: float = TARGET_POWER) -> pd.DataFrame:
    """Before a run: one row per claim ``profile`` will check (a profile, its spec, a mapping of its fields
    or its name): table, paper_model, benchmark, better, worse, ``n_pairs`` (the paired questions its test
    will pool), ``runs``, the paper's two accuracies and ``paper_difference``, ``assumed_discordance``
    (from the paper's accuracies, :func:`assumed_discordance`), ``mde`` (:func:`planned_minimum_detectable_effect`
    over the worse method's paper accuracy), ``power_paper_difference`` and ``testable`` (>= ``power``)."""
    spec = _as_profile(profile)
    reported = load_reported_results() if reported is None else reported
    sizes = _test_sizes(spec)
    rows = []
    for claim in claims:
        n, runs = _planned_pairs(claim, spec, sizes, reported)
        if not n:
            continue
        values = []
        for method in (claim.better, claim.worse):
            match = reported[(reported["model"] == claim.paper_model) & (reported["method"] == method)
                             & (reported["benchmark"] == claim.benchmark) & (reported["metric"] == claim.metric)]
            in_table = match[match["table"] == claim.table]
            chosen = in_table if len(in_table) else match
            values.append(float(chosen["value"].iloc[0]) if len(chosen) else math.nan)
        better, worse = values
        difference = better - worse
        if math.isnan(difference):
            psi, mde, chance = math.nan, math.nan, math.nan
        else:
            psi = assumed_discordance(better, worse, correlation)
            mde = planned_minimum_detectable_effect(n, worse, correlation, alpha, power)
            chance = mcnemar_power(n, psi, difference, alpha) if difference > 0 else math.nan
        rows.append({
            "table": claim.table, "paper_model": claim.paper_model, "benchmark": claim.benchmark,
            "metric": claim.metric, "better": claim.better, "worse": claim.worse, "n_pairs": n, "runs": runs,
            "paper_better": better, "paper_worse": worse, "paper_difference": difference,
            "assumed_discordance": psi, "mde": mde, "power_paper_difference": chance,
            "testable": bool(chance >= power) if not math.isnan(chance) else False,
        })
    return pd.DataFrame(rows)


def _claim_label(row: Any) -> str:
    model = f"{row.paper_model}, "
    subset = ", shared-misconception subset" if row.metric == SUBSET_METRIC else ""
    return f"{row.better} > {row.worse}, {model}{row.benchmark}{subset} [{row.table}]"


def claims_power_lines(profile: Any, *, reported: pd.DataFrame | None = None, correlation: float = ASSUMED_CORRELATION,
                       alpha: float = ALPHA, power: float = TARGET_POWER, name: str | None = None) -> list[str]:
    """Lines saying which of the paper's claims ``profile``'s full run can test with at least ``power`` and which
    it cannot (:func:`planned_claims`): a head line with the counts and the assumption, then one line per
    claim, testable first. For the paper profile's ``--estimate-only`` and notebook 10."""
    counted = planned_claims(profile, reported=reported, correlation=correlation, alpha=alpha, power=power)
    level = holm_alpha(len(counted), alpha)  # the claims are one Holm family: power at its first step's level
    frame = planned_claims(profile, reported=reported, correlation=correlation, alpha=level, power=power) \
        if len(counted) > 1 else counted
    name = name or (profile if isinstance(profile, str) else getattr(profile, "name", None))
    who = f"a {name!r} profile" if name else "this profile's"
    if frame.empty:
        return [f"Power: {who} run checks none of the paper's claimed orderings."]
    testable = frame[frame["testable"]]
    untestable = frame[~frame["testable"]]
    lines = [
        f"Power of {who} run to confirm the paper's claims (exact McNemar test, alpha {alpha:g} Holm-adjusted over the "
        f"{len(frame)} claims: power at alpha / {len(frame)} = {level:.2g}, "
        f"{power:.0%} power; discordance assumed from the paper's accuracies with correlation {correlation:g}): "
        f"{len(testable)} of {len(frame)} claims testable, {len(untestable)} not "
        f"(the paper's difference is below the smallest difference the run can detect).",
    ]
    for title, part in (("can test", testable), ("cannot test", untestable)):
        if part.empty:
            continue
        lines.append(f"  {title} ({len(part)}):")
        for row in part.itertuples():
            mde = "none up to 100%" if math.isnan(row.mde) else f"{row.mde:+.3f}"
            chance = "--" if math.isnan(row.power_paper_difference) else f"{row.power_paper_difference:.0%}"
            lines.append(f"    {_claim_label(row)}: paper {row.paper_difference:+.3f} on {row.n_pairs} "
                         f"paired questions, smallest detectable {mde}, power {chance}")
    return lines


# --------------------------------------------------------------------------------------------
# The figure of notebook 10
# --------------------------------------------------------------------------------------------
def _figure_label(row: Any, with_models: bool) -> str:
    better = str(row.better).replace("R2-MAD retrieval=", "retrieval: ")
    worse = str(row.worse).replace("R2-MAD retrieval=", "")
    subset = " subset" if getattr(row, "metric", "") == SUBSET_METRIC else ""
    label = f"{better} > {worse} · {row.benchmark}{subset} · {row.table.split(' ')[0]}"
    if with_models:
        ran = sorted({part.split(" / ")[0] for part in str(row.runs).split("; ") if part})
        label = f"{', '.join(ran)}: {label}"
    return label


def plot_claims_power(claims: pd.DataFrame, title: str = "", power: float = TARGET_POWER) -> Any:
    """One row per distinct claim of :func:`with_power`: the smallest difference the run could detect with
    ``power`` (grey bar; hatched across when none), the paper's difference (x) and the reproduced one (dot,
    filled when significant); a claim between rows equal by construction has no bar (not tested) and says so in
    its label. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt  # lazy: matplotlib (notebooks extra) only for the figure

    rows = claims[claims["duplicate_of"].isna()] if "duplicate_of" in claims.columns else claims
    rows = rows.iloc[::-1]
    with_models = len({part.split(" / ")[0] for runs in rows["runs"] for part in str(runs).split("; ") if part}) > 1
    y = np.arange(len(rows))
    paper = (rows["paper_better"] - rows["paper_worse"]).to_numpy(dtype=float)
    reproduced = (rows["reproduced_better"] - rows["reproduced_worse"]).to_numpy(dtype=float)
    mde = rows["mde"].to_numpy(dtype=float)
    significant = rows["significant"].astype(bool).to_numpy()
    values = np.concatenate([paper, reproduced, mde[~np.isnan(mde)], [0.05, 0.0]])
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    reach = high - min(low, 0.0)
    fig, ax = plt.subplots(figsize=(8.5, 0.34 * len(rows) + 1.6))
    ax.barh(y, np.where(np.isnan(mde), 0.0, mde), height=0.6, color="0.85",
            label=f"smallest difference this run detects with {power:.0%} power")
    untested = rows["outcome"].isin(UNTESTED).to_numpy() if "outcome" in rows.columns else np.zeros(len(rows), bool)
    none = np.isnan(mde) & ~untested
    if none.any():
        ax.barh(y[none], np.full(int(none.sum()), high + 0.05 * reach), height=0.6, color="none", edgecolor="0.6",
                hatch="//", label="no difference detectable with that power")
    ax.scatter(paper, y, marker="x", color="black", zorder=3, label="the paper's difference")
    ax.scatter(reproduced[significant], y[significant], color="C0", zorder=4, label="reproduced (significant)")
    ax.scatter(reproduced[~significant], y[~significant], facecolors="none", edgecolors="C0", zorder=4,
               label="reproduced (not significant)")
    ax.axvline(0.0, color="gray", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels([_figure_label(r, with_models) + (" (equal by construction: not tested)" if u else "")
                        for r, u in zip(rows.itertuples(), untested, strict=False)], fontsize=7)
    ax.set_xlabel("accuracy difference (claimed better minus worse)")
    ax.set_xlim(min(low, 0.0) - 0.05 * reach, high + 0.08 * reach)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.9 / (0.34 * len(rows) + 1.6)), ncol=2)
    return fig


def _family(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims Holm's family holds (:func:`~r2mad_lab.report.comparison.check_orderings`): the distinct comparisons,
    less those of rows equal by construction (known from the run's K before it runs; not tested)."""
    rows = claims[claims["duplicate_of"].isna()] if "duplicate_of" in claims.columns else claims
    return rows[~rows["outcome"].isin(UNTESTED)] if "outcome" in rows.columns else rows


def power_sentence(claims: pd.DataFrame, power: float = TARGET_POWER) -> str:
    """How many claims of Holm's family (:func:`_family`) the run had ``power`` to detect at the paper's difference
    (pre-run)."""
    rows = _family(claims)
    if rows.empty:
        return ""
    detectable = int(rows["detectable"].astype(bool).sum())
    return (f"This run had at least {power:.0%} power to detect the paper's own difference for {detectable} of the "
            f"{len(rows)} distinct comparisons tested (exact McNemar power before the run, at the Holm-adjusted level "
            f"alpha / {len(rows)} and the discordance assumed from the paper's accuracies).")
