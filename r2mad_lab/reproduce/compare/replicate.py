"""Comparing seed replicates: one configuration under several run seeds, the spread across seeds beside one seed's CI.

One run's 95% bootstrap CI (Section 5's tables) measures the uncertainty over the questions for *one* draw of the
agents' samples; a second run seed draws other samples. ``reproduce --replicates N`` runs the profile (and a variant,
when one is asked for) under the run seeds ``seed, seed + 1, ..., seed + N - 1`` (each extra seed a variant
``seed=<s>`` beside the profile's run) and writes, for every table with CIs, the per-cell mean over the seeds, the
spread (standard deviation, min and max) and the first seed's CI (:func:`replicate_artifacts`). A variant compared
across replicates is compared seed by seed (the same seed shares its random draws with the profile's run: common
random numbers) and over the seeds' mean (:func:`replicate_comparison`).

The statistics are the one rule's (docs/statistics.md, :mod:`r2mad_lab.report.inference`): beside the per-seed
values, each cell's pooled value over the seeds with a 95% CI that resamples questions (each with all its seeds:
the questions are the clusters); a variant's pooled paired difference over the seeds with that CI, each question first
reduced to its mean difference over the seeds, then one stratified sign-flip test on the questions (the question is
the unit: its seeds are not independent), Holm over the table's cells; n counts questions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from r2mad_lab.report import inference
from r2mad_lab.report.artifacts import save_table
from r2mad_lab.report.tables import TIDY_SE, tidy_labels
from r2mad_lab.reproduce.compare.tables import COMPARISON_SUFFIX, cell_outcomes, point_tables, quantity_of, tidy
from r2mad_lab.reproduce.points import Point


def _cells(replicates: Sequence[Point], table: str) -> pd.DataFrame | None:
    """One row per cell, one ``seed=<s>`` column per replicate, plus the first seed's CI; None when a replicate has
    not written the table (or it has no CIs)."""
    merged = None
    for i, rep in enumerate(replicates):
        read = tidy(rep.figures_dir / f"{table}.csv")
        if read is None:
            return None
        labels = tidy_labels(read.columns) or []
        first = ["ci_low", "ci_high"] + ([TIDY_SE] if TIDY_SE in read else []) if i == 0 else []
        keep = read[labels + ["value"] + first].rename(columns={"value": f"seed={rep.seed}"})
        if i == 0:
            keep = keep.rename(columns={c: f"seed={rep.seed} {c}" for c in first})
        merged = keep if merged is None else merged.merge(keep, on=labels, how="inner")
    return merged


def _matrices(replicates: Sequence[Point], table: str) -> dict[tuple[str, ...], dict[str, np.ndarray]] | None:
    """Per cell: per stratum (benchmark) the questions' correctness, one row per question every seed answered, one
    column per seed; None when a replicate's runs are not readable."""
    cache: dict[str, dict[str, bool]] = {}
    runs = [cell_outcomes(r.figures_dir, table, cache) for r in replicates]
    if any(r is None for r in runs):
        return None
    out = {}
    for cell in runs[0]:
        if not all(cell in r for r in runs):
            continue
        strata = {}
        for stratum in runs[0][cell]:
            if not all(stratum in r[cell] for r in runs):
                continue
            common = sorted(set.intersection(*(set(r[cell][stratum]) for r in runs)))
            if common:
                strata[stratum] = np.array([[r[cell][stratum][q] for r in runs] for q in common], dtype=bool)
        if strata:
            out[cell] = strata
    return out


def _labels_of(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if not c.startswith("seed") and c not in
            ("mean", "sd", "min", "max", "seeds", "pooled", "pooled ci_low", "pooled ci_high", "pooled se", "n")]


def replicate_summary(replicates: Sequence[Point], table: str) -> pd.DataFrame | None:
    """Per cell of ``table``: the value under each seed, the mean, sd (ddof 1), min and max over the seeds, the
    first seed's 95% CI (and SE), and the pooled value over the seeds with its question-clustered 95% CI and SE
    (``pooled``, ``pooled ci_low``, ``pooled ci_high``, ``pooled se``; n the questions per seed)."""
    cells = _cells(replicates, table)
    if cells is None or cells.empty:
        return None
    matrices = _matrices(replicates, table)
    labels = _labels_of(cells)
    pooled, low, high, errors, n = [], [], [], [], []
    for key in cells[labels].astype(str).itertuples(index=False, name=None):
        strata = (matrices or {}).get(tuple(key))
        estimate = inference.clustered_mean_ci({k: v.astype(float) for k, v in strata.items()}) if strata else (
            inference.ClusteredMean(np.nan, np.nan, np.nan, np.nan))
        pooled.append(estimate.estimate)
        low.append(estimate.ci_low)
        high.append(estimate.ci_high)
        errors.append(estimate.se)
        n.append(sum(len(v) for v in strata.values()) if strata else np.nan)
    seeds = [f"seed={r.seed}" for r in replicates]
    values = cells[seeds].apply(pd.to_numeric, errors="coerce")
    cells["mean"] = values.mean(axis=1)
    cells["sd"] = values.std(axis=1, ddof=1)
    cells["min"] = values.min(axis=1)
    cells["max"] = values.max(axis=1)
    cells["seeds"] = len(replicates)
    cells["pooled"], cells["pooled ci_low"], cells["pooled ci_high"] = pooled, low, high
    cells["pooled se"], cells["n"] = errors, n
    return cells


def _tables(replicates: Sequence[Point]) -> list[str]:
    return [s for s in point_tables(replicates[0].figures_dir) if not s.startswith("tab_replicates_")]


def replicate_artifacts(replicates: Sequence[Point], out_dir: Path, profile: str, what: str) -> list[str]:
    """``tab_replicates_<table>`` for every table with CIs all replicates wrote, into ``out_dir``; the "What this
    shows" sentences (one per table: the median and the widest spread across seeds beside the single-seed CI)."""
    sentences = []
    seeds = [r.seed for r in replicates]
    for table in _tables(replicates):
        summary = replicate_summary(replicates, table)
        if summary is None:
            continue
        quantity = quantity_of(table, replicates[0].figures_dir)
        first = f"seed={seeds[0]}"
        width = (summary[f"{first} ci_high"] - summary[f"{first} ci_low"]).astype(float)
        caption = (f"{quantity} ({table}) of {what} under the run seeds {', '.join(map(str, seeds))}: per cell the "
                   f"value under each seed, the mean over the seeds, their spread (sd, min, max), the seed-{seeds[0]} "
                   f"run's 95% bootstrap CI over the questions, and the pooled value over the seeds with its 95% CI "
                   f"and SE resampling questions with all their seeds (the questions are the clusters; n: questions "
                   f"per seed; docs/statistics.md).")
        if summary["n"].notna().any() and inference.too_small(float(summary["n"].min())):
            caption += " " + inference.small_sample_line(float(summary["n"].min()))
        sd = summary["sd"].astype(float)
        if sd.notna().any():
            widest = int(sd.idxmax())
            labels = _labels_of(summary)
            where = " / ".join(str(summary.at[widest, c]) for c in labels)
            sentence = (f"{quantity} ({table}), {what}, over {len(seeds)} seeds: the median sd of a cell across seeds "
                        f"is {float(sd.median()):.3f} (the median single-seed 95% CI is {float(width.median()):.3f} "
                        f"wide); the cell that varies most is {where} (mean {float(summary.at[widest, 'mean']):.3f}, "
                        f"sd {float(sd[widest]):.3f}, range {float(summary.at[widest, 'min']):.3f}-"
                        f"{float(summary.at[widest, 'max']):.3f}).")
            sentences.append(sentence)
        else:
            sentence = ""
        save_table(summary, f"tab_replicates_{table}", out_dir, caption=caption + (" " + sentence if sentence else ""),
                   profile=profile, notebook="reproduce --replicates", float_format="{:.4g}",
                   replicates={"seeds": seeds, "what": what}, notes=sentence)
    return sentences


def replicate_comparison(profile_runs: Sequence[Point], variant_runs: Sequence[Point], out_dir: Path,
                         profile: str, variant_name: str) -> list[str]:
    """A variant against its profile across the seeds: per cell the difference under each seed (the same seed shares
    its draws), the mean difference, its sd across seeds and how many seeds moved each way;
    ``tab_replicates_<table>_vs_profile``."""
    sentences = []
    seeds = [r.seed for r in profile_runs]
    for table in _tables(profile_runs):
        mine, theirs = replicate_summary(variant_runs, table), replicate_summary(profile_runs, table)
        if mine is None or theirs is None:
            continue
        labels = _labels_of(theirs)
        merged = theirs[labels + [f"seed={s}" for s in seeds]].merge(
            mine[labels + [f"seed={s}" for s in seeds]], on=labels, suffixes=(" profile", " variant"))
        if merged.empty:
            continue
        differences = np.column_stack([pd.to_numeric(merged[f"seed={s} variant"], errors="coerce")
                                       - pd.to_numeric(merged[f"seed={s} profile"], errors="coerce") for s in seeds])
        frame = merged[labels].copy()
        for i, s in enumerate(seeds):
            frame[f"difference seed={s}"] = differences[:, i]
        frame["mean difference"] = differences.mean(axis=1)
        frame["sd"] = differences.std(axis=1, ddof=1) if len(seeds) > 1 else np.nan
        frame["seeds up"] = (differences > 1e-12).sum(axis=1)
        frame["seeds down"] = (differences < -1e-12).sum(axis=1)
        # the pooled paired estimate over the seeds and its one stratified test (seeds x benchmarks as strata)
        mine_q, theirs_q = _matrices(variant_runs, table), _matrices(profile_runs, table)
        pooled = []
        for row in merged[labels].astype(str).itertuples(index=False, name=None):
            a, b = (mine_q or {}).get(tuple(row)), (theirs_q or {}).get(tuple(row))
            if not a or not b:
                pooled.append(None)
                continue
            strata = [k for k in a if k in b and a[k].shape == b[k].shape]
            pooled.append(inference.pooled_paired({k: a[k] for k in strata}, {k: b[k] for k in strata})
                          if strata else None)
        frame["pooled difference"] = [e.difference if e else np.nan for e in pooled]
        frame["ci_low"] = [e.ci_low if e else np.nan for e in pooled]
        frame["ci_high"] = [e.ci_high if e else np.nan for e in pooled]
        frame["se"] = [e.se if e else np.nan for e in pooled]
        frame["n"] = [e.n if e else np.nan for e in pooled]
        frame["p"] = [e.p_value if e else np.nan for e in pooled]
        frame["p_holm"] = inference.holm_over(frame["p"].tolist())
        tested = int(frame["p_holm"].notna().sum())
        frame["verdict"] = [inference.verdict(p, n, f"the {tested} cells of this table") if e else "not tested"
                            for e, p, n in zip(pooled, frame["p_holm"], frame["n"], strict=False)]
        quantity = quantity_of(table, profile_runs[0].figures_dir)
        moved = frame[(frame["seeds up"] == len(seeds)) | (frame["seeds down"] == len(seeds))]
        sentence = (f"{quantity} ({table}), variant {variant_name} against profile {profile} over {len(seeds)} seeds: "
                    f"{len(moved)} of {len(frame)} cells move the same way under every seed; the largest mean "
                    f"difference is {float(frame['mean difference'].abs().max()):.3f} (sd across seeds "
                    f"{float(frame.loc[frame['mean difference'].abs().idxmax(), 'sd']):.3f}). Pooled over the seeds "
                    f"(each question reduced to its mean difference over the seeds, then the stratified sign-flip "
                    f"test on the questions, Monte Carlo): "
                    + inference.count_phrase(frame["p_holm"].tolist(), frame["n"].tolist(),
                                             f"the {tested} cells") + ".")
        if frame["n"].notna().any() and inference.too_small(float(frame["n"].min())):
            sentence += " " + inference.small_sample_line(float(frame["n"].min()))
        save_table(frame, f"tab_replicates_{table}{COMPARISON_SUFFIX}", out_dir,
                   caption=(f"{quantity} ({table}): variant {variant_name} minus profile {profile}, seed by seed (each "
                            f"seed shares its random draws with the profile's run of that seed), the mean difference "
                            f"and its sd across the seeds, and the pooled paired difference over the seeds with its "
                            "95% CI and SE (questions resampled with all their seeds), n (paired questions, each "
                            "reduced to "
                            f"its mean over the seeds), p (Monte Carlo sign-flip test on the questions), p_holm "
                            f"and the verdict of docs/statistics.md. {sentence}"),
                   profile=profile, notebook="reproduce --replicates", float_format="{:.4g}",
                   replicates={"seeds": seeds, "variant": variant_name}, notes=sentence)
        sentences.append(sentence)
    return sentences
