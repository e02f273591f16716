"""The checker of the one inference rule across outputs (docs/statistics.md): one verdict per comparison.

:func:`r2mad_lab.report.inference.verdict_problems` checks that a verdict word stands beside an adjusted p below
alpha; this module checks what it cannot see from one sentence:

- **one record per comparison** (:func:`pair_problems`): every comparison a generated text quotes
  (``findings.Comparison.clause``: ``A 0.637 vs B 0.616 (+0.021, 95% CI [...]; <test> on 753 paired questions, p =
  0.219; ...)``) that is also a row of the claims table (the registry of the paper's claims: ordering, n, difference)
  carries that row's p and CI and cites the claims family, never a family of its own;
- **no verdict below the cutoff** (:func:`small_sample_problems`): no verdict phrase ("significant", "not
  distinguishable from no difference") on fewer paired questions than the cutoff of its family's Holm level;
- **one cutoff per family** (:func:`cutoff_problems`): every stated no-inference cutoff names its family and is
  that family's (at its Holm level), so no two texts give one family two cutoffs;
- **no bold without a test** (:func:`bold_problems`): a table's bold cells are exactly those its rule bolds
  (:meth:`r2mad_lab.report.tables.Table.best_mask`, recomputed from the per-question cells).

:func:`check` runs all three over a profile's ``figures/<profile>`` and executed notebooks.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from r2mad_lab.report import inference

_NUMBER = r"[+-]?[0-9.]+(?:e[-+]?[0-9]+)?"
#: A generated comparison clause (findings.Comparison.clause).
CLAUSE = re.compile(
    rf"(?P<better>[^;:]+?) (?P<vb>[0-9]\.[0-9]{{3}}) vs (?P<worse>[^;:]+?) (?P<vw>[0-9]\.[0-9]{{3}}) "
    rf"\((?P<diff>[+-][0-9]\.[0-9]{{3}})(?:, 95% CI \[(?P<lo>{_NUMBER}), (?P<hi>{_NUMBER})\])?(?:, SE [0-9.]+)?; "
    rf"(?P<test>[^;]+?) on (?P<n>[0-9]+) paired questions, p (?:(?:=|<=) (?P<p>{_NUMBER})|< "
    r"1/(?P<floor>[0-9,]+))[^;]*; (?P<verdict>[^)]*(?:\([^)]*\))?[^)]*)\)")
_VERDICT = re.compile(r"\b(significant|not distinguishable from no difference)\b")


@dataclass(frozen=True)
class Quoted:
    """One comparison as an output states it."""

    where: str
    better: str
    worse: str
    n: int
    difference: str
    ci: tuple[str, str] | None
    p: float
    verdict: str


def clauses(text: str, where: str = "") -> list[Quoted]:
    """The comparison clauses of a generated text."""
    out = []
    for m in CLAUSE.finditer(text):
        ci = (m["lo"], m["hi"]) if m["lo"] is not None else None
        out.append(Quoted(where, m["better"].strip(), m["worse"].strip(), int(m["n"]), m["diff"], ci,
                          float(m["p"]) if m["p"] is not None else 1.0 / int(m["floor"].replace(",", "")),
                          m["verdict"]))
    return out


def claims_records(claims: pd.DataFrame) -> dict[tuple[str, str, int, str], Mapping[str, Any]]:
    """The claims table (``tab_paper_claims.csv``) as the registry of the claimed comparisons: (better, worse,
    n_pairs, difference as shown) -> the row."""
    out = {}
    for row in claims.to_dict("records"):
        if str(row.get("outcome", "")) in ("equal by construction", "paper's design: biased, not tested"):
            continue  # no test: not a record a quoted verdict can cite
        better, _, worse = str(row["ordering"]).partition(" > ")
        shown = str(row["difference"])
        out[(better.strip(), worse.strip(), int(row["n_pairs"]), shown.split(" ")[0])] = row
    return out


def _same_p(a: float, b: Any) -> bool:
    try:
        value = float(b)
    except (TypeError, ValueError):
        return False
    return math.isclose(a, value, rel_tol=0.006, abs_tol=1e-12)  # as printed: 3 significant digits


def pair_problems(texts: Mapping[str, str], claims: pd.DataFrame) -> list[str]:
    """Each quoted comparison that is a claims-table row must carry the row's p and CI and cite the claims family
    (its verdict is given once, there); the same comparison quoted twice must carry the same p and CI."""
    registry = claims_records(claims)
    problems, seen = [], {}
    for where, text in texts.items():
        for q in clauses(text, where):
            key = (q.better, q.worse, q.n, q.difference)
            first = seen.setdefault(key, q)
            if first is not q and (not _same_p(q.p, first.p) or q.ci != first.ci):
                problems.append(f"{where}: {q.better} > {q.worse} (n = {q.n}) has p = {q.p:g}, CI {q.ci}; "
                                f"{first.where} states p = {first.p:g}, CI {first.ci}")
            row = registry.get(key)
            if row is None:
                continue
            shown = str(row["difference"])
            ci = re.findall(_NUMBER, shown[shown.find("["):]) if "[" in shown else []
            if not _same_p(q.p, row["p"]):
                problems.append(f"{where}: {q.better} > {q.worse} has p = {q.p:g}; the claims table: p = {row['p']}")
            if q.ci is not None and len(ci) == 2 and tuple(ci) != q.ci:
                problems.append(f"{where}: {q.better} > {q.worse} has CI {q.ci}; the claims table: {tuple(ci)}")
            if "claims family" not in q.verdict and "no inference" not in q.verdict:
                problems.append(f"{where}: {q.better} > {q.worse} is a claim of the claims table but its verdict "
                                f"cites another family: {q.verdict!r}")
    return problems


def small_sample_problems(text: str, where: str = "", alpha: float = inference.ALPHA) -> list[str]:
    """Verdict phrases on fewer paired questions than the cutoff of their family's Holm level (the family's size read
    from its name, "... of 14"; one test when unnamed)."""
    problems = []
    for q in clauses(text, where):
        if not _VERDICT.search(q.verdict):
            continue
        family = inference.family_size_of(q.verdict)
        if inference.too_small(q.n, alpha, family):
            problems.append(f"{where}: a verdict phrase at n = {q.n}, {inference.cutoff_phrase(alpha, family)} "
                            f"(a family of {family}): {q.verdict!r}")
    for m in re.finditer(r"not distinguishable from no difference at n = ([0-9]+)", text):
        if inference.too_small(int(m.group(1)), alpha):
            problems.append(f"{where}: the null phrase at n = {m.group(1)}, {inference.cutoff_phrase(alpha)}")
    return problems


#: A stated no-inference cutoff (:func:`r2mad_lab.report.inference.cutoff_phrase`): ``below n = 24, the cutoff of
#: the claims family of 14``; the family's name runs to the next parenthesis, colon, semicolon or sentence end.
CUTOFF = re.compile(r"below n = (?P<n>[0-9]+), the cutoff of (?P<family>[^:;()]*?(?:\([^)]*\)[^:;()]*?)*)"
                    r"(?=[:;)]|\.(?:\s|$)| \(the smallest|, the smallest|, so of any|$)")


def cutoff_problems(texts: Mapping[str, str], alpha: float = inference.ALPHA) -> list[str]:
    """Every stated cutoff must be its family's (:func:`~r2mad_lab.report.inference.cutoff` at the Holm level of the
    size the family's name states), so every text of one family states the same n; and one family named in two texts
    with two cutoffs is reported once more as such. A cutoff stated without its family (``below n = 15`` alone) is a
    problem: which family's it is cannot be checked."""
    problems, stated = [], {}
    for where, text in texts.items():
        for m in CUTOFF.finditer(text):
            family, n = m["family"].strip(), int(m["n"])
            size = 1 if family == "a single test" else inference.family_size_of(family)
            expected = inference.cutoff(alpha, size)
            if n != expected:
                problems.append(f"{where}: 'below n = {n}' for {family!r}, whose cutoff (Holm level alpha / {size}) "
                                f"is n = {expected}")
            first = stated.setdefault(family, (where, n))
            if first[1] != n:
                problems.append(f"{where}: {family!r} has the cutoff n = {n}; {first[0]} states n = {first[1]}")
        for m in re.finditer(r"below n = ([0-9]+)\b(?!, the cutoff of )", text):
            problems.append(f"{where}: a cutoff without its family: ...{text[max(0, m.start() - 60):m.end() + 40]}...")
    return problems


def bold_cells(markdown: str) -> set[tuple[int, int]]:
    """(body row, column) of every bold cell of a Markdown pipe table."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    out = set()
    for r, line in enumerate(lines[2:]):
        for c, cell in enumerate(line.strip().strip("|").split(" | ")):
            if cell.strip().startswith("**") and cell.strip().endswith("**"):
                out.add((r, c))
    return out


def bold_problems(markdown: str, table: Any, where: str = "") -> list[str]:
    """The bold cells of ``markdown`` (a rendering of ``table``) that the rule does not bold, and the reverse
    (:meth:`~r2mad_lab.report.tables.Table.best_mask` from the table's per-question cells)."""
    mask = table.best_mask()
    offset = table.values.index.nlevels if table.show_index else 0
    expected = {(r, c + offset) for r in range(mask.shape[0]) for c in range(mask.shape[1]) if bool(mask.iat[r, c])}
    found = bold_cells(markdown)
    return ([f"{where}: bold without a significant Holm test against every other row: body row {r}, column {c}"
             for r, c in sorted(found - expected)]
            + [f"{where}: the rule bolds body row {r}, column {c}, the table does not"
               for r, c in sorted(expected - found)])


def notebook_texts(paths: Iterable[Path]) -> dict[str, str]:
    """The generated Markdown and text outputs of executed notebooks, by file name."""
    out = {}
    for path in paths:
        cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
        parts = []
        for cell in cells:
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                text = data.get("text/markdown") or output.get("text") or data.get("text/plain") or ""
                parts.append("".join(text) if isinstance(text, list) else str(text))
        out[Path(path).name] = "\n".join(parts)
    return out


def check(figures_dir: str | Path, executed_dir: str | Path | None = None) -> list[str]:
    """Every problem of a profile's outputs: :func:`pair_problems` and :func:`small_sample_problems` over the tables'
    Markdown, the manifest's captions and the executed notebooks, against ``tab_paper_claims.csv``."""
    figures = Path(figures_dir)
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(figures.glob("*.md"))}
    if executed_dir is not None:
        texts.update(notebook_texts(sorted(Path(executed_dir).glob("*.ipynb"))))
    claims_path = figures / "tab_paper_claims.csv"
    claims = pd.read_csv(claims_path) if claims_path.exists() else pd.DataFrame(
        columns=["ordering", "n_pairs", "difference", "p"])
    problems = pair_problems(texts, claims) + cutoff_problems(texts)
    for where, text in texts.items():
        problems += small_sample_problems(text, where)
        if "over this one comparison" in text:
            problems.append(f"{where}: a family of one ('over this one comparison'): a comparison's family is named")
    return problems
