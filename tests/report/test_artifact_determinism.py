"""Byte-identical artifacts (issue 24): no creation time or software version inside PNGs and PDFs, and no table
float with more significant digits than :data:`r2mad_lab.report.artifacts.TABLE_SIGNIFICANT_DIGITS`."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from r2mad_lab.report import artifacts  # noqa: E402
from r2mad_lab.report.tables import Table, read_table  # noqa: E402

FLOAT_TOKEN = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?(?![\w.])")


def _figure():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["a", "b"], [0.25, 0.75])
    ax.set_title("two bars")
    return fig


def test_two_saves_of_a_figure_at_different_times_are_byte_identical(tmp_path, monkeypatch):
    fig = _figure()
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = artifacts.save_figure(fig, "fig_x", tmp_path / "one")
    # matplotlib stamps a PDF with SOURCE_DATE_EPOCH when set, else with the current time: another "time"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    second = artifacts.save_figure(fig, "fig_x", tmp_path / "two")
    plt.close(fig)
    assert [p.name for p in first] == ["fig_x.png", "fig_x.pdf"]
    for a, b in zip(first, second, strict=False):
        assert a.read_bytes() == b.read_bytes(), a.name
    pdf, png = first[1].read_bytes(), first[0].read_bytes()
    assert b"CreationDate" not in pdf and b"ModDate" not in pdf
    assert b"Producer" not in pdf and b"matplotlib" not in pdf.lower()
    assert b"Software" not in png and b"matplotlib" not in png.lower()


def _significant_digits(token: str) -> int:
    mantissa = token.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) if "e" not in token else len(mantissa)


def test_table_csvs_round_floats_to_the_rule(tmp_path):
    digits = artifacts.TABLE_SIGNIFICANT_DIGITS
    assert digits == 6
    flat = pd.DataFrame({"quantity": ["bound", "rate", "count"],
                         "value": [0.06877534159323767, 1 / 3, 2.0],
                         "mixed": ["n/a", 0.1234567891234, 7]})
    artifacts.save_table(flat, "table_flat", tmp_path, float_format="{:.4g}")
    text = (tmp_path / "table_flat.csv").read_text()
    assert text.splitlines() == ["quantity,value,mixed", "bound,0.0687753,n/a", "rate,0.333333,0.123457",
                                 "count,2.0,7"]
    values = pd.DataFrame([[0.7388059701492538, np.nan]], index=pd.Index(["R2-MAD"], name="method"),
                          columns=pd.Index(["MATH500", "Average"], name="benchmark"))
    table = Table(values=values, ci_low=values - 1 / 7, ci_high=values + 1 / 7)
    artifacts.save_table(table, "tab_main", tmp_path)
    tidy = (tmp_path / "tab_main.csv").read_text()
    assert "0.738806,0.595949,0.881663" in tidy
    for name in ("table_flat.csv", "tab_main.csv"):
        tokens = FLOAT_TOKEN.findall((tmp_path / name).read_text())
        assert tokens and max(_significant_digits(t) for t in tokens) <= digits, tokens
    rebuilt = read_table(tmp_path / "tab_main.csv")
    assert rebuilt.values.loc["R2-MAD", "MATH500"] == 0.738806
    assert np.isnan(rebuilt.values.loc["R2-MAD", "Average"])


def test_round_float_keeps_nan_and_infinities():
    assert artifacts.round_float(123456789.0) == 123457000.0
    assert artifacts.round_float(-2.5e-9 / 3) == -8.33333e-10
    assert np.isnan(artifacts.round_float(float("nan")))
    assert artifacts.round_float(float("inf")) == float("inf")
