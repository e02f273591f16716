"""What the protocol preset changed, in the notebooks' generated text.

Every sentence is built from the run's resolved protocol choices (:attr:`ExperimentGrid.choices
<r2mad_lab.reproduce.grid.ExperimentGrid>`, read from :mod:`r2mad_lab.experiments.protocol`, the one declaration of
the presets and their evidence) and from the numbers of the run: notebook 04 (the retrieval ablation at the preset's
K and at K = 3), 06 (round 0 per method, the paired analysis kept), 07 (summaries after every executed round: the
summary requests per query against the rounds per query) and 10 (which choices the report's numbers ran under).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from r2mad_lab.experiments import protocol as presets
from r2mad_lab.experiments.model_specs import ModelSpec
from r2mad_lab.report import findings
from r2mad_lab.report.tables import AVERAGE_LABEL

#: The K at which the retrieval ablation also runs when the preset's K leaves lambda_t nothing to do.
LAMBDA_K = 3
PAPER_POLICY = "Debate-State-Aware"


def _preset(exp: Any) -> str:
    explicit = [k for k, v in exp.choices.items() if v != presets.BY_NAME[k].value(exp.protocol_name)]
    return f"Protocol preset '{exp.protocol_name}'" + (f" (set explicitly: {', '.join(explicit)})" if explicit else "")


def _averages(table: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(table[AVERAGE_LABEL], errors="coerce")


def _lambda_rows(values: pd.Series) -> pd.Series:
    return values[[name for name in values.index if name == PAPER_POLICY or name.startswith("Fixed-lambda")]]


def retrieval(exp: Any, table: pd.DataFrame, table_k3: pd.DataFrame | None, models: Sequence[ModelSpec]) -> list[str]:
    """Notebook 04: the retrieval ablation at the protocol's K and, when that K is not 3, at K = 3 too."""
    k = exp.top_k
    sentences = [f"{_preset(exp)}. " + presets.changed(exp.protocol_name, exp.choices, ("top_k",))[0]]
    first = findings.retrieval(table, models, top_k=k)
    sentences += [f"At K = {k}: " + first[0]] + first[1:]
    if table_k3 is None:
        return sentences
    second = findings.retrieval(table_k3, models, top_k=LAMBDA_K)
    sentences += [f"At K = {LAMBDA_K}, where the redundancy term of Eq. 5 is not empty and lambda_t acts: " + second[0]]
    sentences += second[1:]
    at_k, at_3 = _lambda_rows(_averages(table)), _lambda_rows(_averages(table_k3))
    if len(at_k) and len(at_3):
        spread_k, spread_3 = float(at_k.max() - at_k.min()), float(at_3.max() - at_3.min())
        sentences.append(
            f"The lambda policies (Debate-State-Aware and the Fixed-lambda rows) span {spread_k:.3f} in average "
            f"accuracy at K = {k} and {spread_3:.3f} at K = {LAMBDA_K}; Debate-State-Aware averages "
            f"{float(at_k.get(PAPER_POLICY, math.nan)):.3f} at K = {k} and "
            f"{float(at_3.get(PAPER_POLICY, math.nan)):.3f} at K = {LAMBDA_K}."
            + (f" At K = {k} their picks are the same cases, so that spread is sampling noise alone." if k == 1
               else ""))
    return sentences


def round0(exp: Any, paired_suffix: str) -> list[str]:
    """Notebook 06: how round 0 was drawn in the main runs and in the paired analysis."""
    mode = exp.choices["round0"]
    other = "shared with MAD's (a paired comparison)" if paired_suffix else "drawn per method"
    return [f"{_preset(exp)}. " + presets.changed(exp.protocol_name, exp.choices, ("round0",))[0]
            + f" The comparison runs of the last table have their round 0 {other}"
            + (" (labels ending in '" + paired_suffix.strip() + "')." if paired_suffix else ".")
            + (" The subset above is therefore taken from a MAD run whose round 0 is its own, as in the paper's "
               "separate runs." if mode == "independent" else "")]


def cost(exp: Any, frame: pd.DataFrame) -> list[str]:
    """Notebook 07: summaries after every executed round: the summary requests per query against the rounds."""
    sentences = [f"{_preset(exp)}. "
                 + presets.changed(exp.protocol_name, exp.choices, ("summaries", "summary_agents"))[0]]
    rows = frame[frame["method"] == "R2-MAD"]
    for row in rows.to_dict("records"):
        rounds = float(row.get("debate_requests", math.nan)) / exp.n_agents
        summaries = float(row.get("summary_requests", math.nan))
        if math.isnan(rounds) or math.isnan(summaries):
            continue
        every = exp.choices["summaries"] == "every_round"
        sentences.append(
            f"{row['model']}: R2-MAD ran {rounds:.2f} rounds and wrote {summaries:.2f} summaries per query, so its "
            f"summary tokens ({float(row.get('summary_tokens', math.nan)):,.0f} per query) count "
            + ("every executed round, the last one and round 0 of a debate that stopped there included (the paper's "
               "Summary Tok. column counts them so)." if every else
               "only the rounds a next round followed (ours: about a third of the paper's Summary Tok. count)."))
    return sentences


def report(exp: Any) -> list[str]:
    """Notebook 10: what this report ran under, the choices where the two presets differ and those they share."""
    differ = [c.name for c in presets.CHOICES if c.paper != c.authors]
    same = [f"{c.name} = {exp.choices[c.name]}" for c in presets.CHOICES
            if c.paper == c.authors and c.name in exp.choices]
    return [f"{_preset(exp)}: every reproduced number ran under it (docs/protocol.md holds the evidence of each "
            f"choice). The two presets differ in {len(differ)} choices ({', '.join(differ)}) and share the others; "
            f"this run: {'; '.join(same)}."]
