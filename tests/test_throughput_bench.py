"""Smoke test of benchmarks/throughput.py (issue 17): the virtual continuous-batching engine drives run_cell under
both schedules, the transcripts agree, and the lines run_all.py reads are printed. No timing is asserted."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


throughput = load_script("throughput")


def test_tiny_virtual_run_gives_identical_transcripts_and_prints_the_gains(tmp_path, capsys):
    gains = throughput.main(["--questions", "6", "--windows", "2", "--target-window", "2", "--bank-questions", "3",
                             "--bank-cache", str(tmp_path / "banks"), "--csv", str(tmp_path / "t.csv")])
    out = capsys.readouterr().out
    assert set(gains) == {"mad", "r2mad"} and all(g > 0 for g in gains.values())
    assert out.count("transcripts identical") == 2 and "DIFFERENT" not in out
    assert out.rstrip().splitlines()[-2].startswith("questions/rounds throughput mad: ")
    assert out.rstrip().splitlines()[-1].startswith("questions/rounds throughput r2mad: ")
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["method"], r["schedule"]) for r in rows] == [
        ("mad", "rounds"), ("mad", "questions"), ("r2mad", "rounds"), ("r2mad", "questions"),
        ("r2mad (summary free)", "rounds"), ("r2mad (summary free)", "questions")]
    # the same debates cost the same tokens under both schedules; only the time they take differs
    for method in ("mad", "r2mad", "r2mad (summary free)"):
        a, b = [r for r in rows if r["method"] == method]
        assert a["generated_tokens"] == b["generated_tokens"] and a["transcripts_sha256"] == b["transcripts_sha256"]
        assert a["debate_prefill_tokens"] == b["debate_prefill_tokens"]
    # the breakdown's counterfactual runs the same debates, its summaries at no engine cost
    full, free = [r for r in rows if r["method"].startswith("r2mad") and r["schedule"] == "questions"]
    assert free["transcripts_sha256"] == full["transcripts_sha256"]
    assert int(free["summary_prefill_tokens"]) == 0 < int(full["summary_prefill_tokens"])
    assert float(free["virtual_wall_s"]) < float(full["virtual_wall_s"])
    assert "breakdown of R2-MAD's extra" in out


def test_decode_lengths_are_long_tailed_deterministic_and_capped():
    from r2mad_core.engine import Request

    model = throughput.CostModel()
    lengths = [model.decode_length(Request(messages=({"role": "user", "content": f"q{i}"},)), 10) for i in range(2000)]
    assert lengths == [model.decode_length(Request(messages=({"role": "user", "content": f"q{i}"},)), 10)
                       for i in range(2000)]
    lengths.sort()
    median = lengths[1000]
    assert 1100 <= median <= 1300  # lognormal around the 1200-token median
    assert lengths[-1] == model.max_tokens and lengths[int(0.9 * 2000)] > 2 * median  # a long tail, capped
