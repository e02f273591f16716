"""The performance benchmarks' own logic: the timing engine's decode and prefill model, the end-to-end run on a
tiny simulated setting (what it prints and writes), and run_all's parsing. No timing is asserted."""

from __future__ import annotations

import csv
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from r2mad_core.engine import Completion, Ledger, Request

BENCHMARKS_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


end_to_end = load_script("end_to_end")
run_all = load_script("run_all")


class FixedEngine:
    """Answers request k with the k-th text of a script; completion tokens = words (no sleeping)."""

    identity = "fixed"
    model = "fixed-model"

    def __init__(self, texts):
        self.texts = list(texts)
        self.ledger = Ledger()

    def generate(self, requests):
        out = []
        for request in requests:
            text = self.texts.pop(0)
            prompt = sum(end_to_end.message_tokens(m["content"]) for m in request.messages)
            out.append(Completion(text=text, prompt_tokens=prompt, completion_tokens=len(text.split())))
        return out

    def close(self):
        pass


def chat(*contents: str) -> tuple[dict, ...]:
    roles = ["system"] + ["user", "assistant"] * len(contents)
    return tuple({"role": role, "content": content} for role, content in zip(roles, contents, strict=False))


def test_timed_engine_models_decode_waves_by_their_longest_completion():
    texts = ["w " * 5, "w " * 9, "w " * 3]
    engine = end_to_end.TimedEngine(FixedEngine(texts), token_latency_ms=10.0, max_concurrency=2)
    engine.generate([Request(messages=chat("s", f"question {k}")) for k in range(3)])
    [call] = engine.calls
    # waves of 2: max(5, 9) tokens, then 3 tokens, at 10 ms per token
    assert call.modelled_seconds == pytest.approx(0.09 + 0.03)
    assert (call.requests, call.completion_tokens, call.tags) == (3, 17, "debate")
    assert engine.identity == "fixed" and engine.ledger is engine.inner.ledger


def test_prefix_caching_charges_only_the_new_messages():
    engine = end_to_end.TimedEngine(FixedEngine(["one two three"] * 4))
    system = "you are a careful agent"  # 5 words -> round(6.5) = 6 tokens (simulated engine's rule)
    first = Request(messages=chat(system, "first question here"))  # 3 words -> 4 tokens
    other = Request(messages=chat(system, "another question entirely new"))  # 4 words -> 5 tokens
    completions = engine.inner.generate([first, other])
    assert engine.prefill_tokens([first, other], completions) == (6 + 4) + 5  # the system prompt is shared
    # the agent's next turn: its own conversation (with its answer) is cached, only the new user turn is not
    follow_up = Request(messages=chat(system, "first question here", "one two three", "now debate"))
    assert engine.prefill_tokens([follow_up], engine.inner.generate([follow_up])) == 3  # "now debate" -> 2.6 -> 3
    engine.reset()
    assert engine.prefill_tokens([follow_up], [Completion(text="x")]) == 6 + 4 + 4 + 3
    uncached = end_to_end.TimedEngine(FixedEngine([]), prefix_caching=False)
    assert uncached.prefill_tokens([first, first], [Completion(text="")] * 2) == 2 * (6 + 4)


def test_end_to_end_tiny_run_prints_the_two_lines_and_writes_the_csv(tmp_path, capsys):
    out_csv = tmp_path / "e2e.csv"
    end_to_end.main(["--limit", "2", "--token-latency-ms", "0", "--bank-questions", "3", "--response-words", "20",
                     "--bank-cache", str(tmp_path / "banks"), "--csv", str(out_csv)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"r2mad/mad wall ratio: \d+\.\d\d", lines[-2])
    assert re.fullmatch(r"non-generation share: \d+\.\d%", lines[-1])
    assert len(list((tmp_path / "banks").iterdir())) == 1  # the bank was built once, under --bank-cache
    with out_csv.open() as handle:
        rows = list(csv.DictReader(handle))
    assert ([(r["engine"], r["method"], r["queries"]) for r in rows]
            == [("simulated", "mad", "2"), ("simulated", "r2mad", "2")])
    mad, r2mad = rows
    rounds = {m: float(r["rounds_per_query"]) for m, r in (("mad", mad), ("r2mad", r2mad))}
    assert (float(mad["summary_completion_tokens_per_query"]) == 0
            and float(r2mad["summary_completion_tokens_per_query"]) > 0)
    assert float(r2mad["hook_s"]) > 0 and float(mad["hook_s"]) == 0
    # one engine call per round (whole-round batches); R2-MAD adds one summary call between rounds
    assert int(mad["generate_calls"]) <= 3 and 1 <= rounds["mad"] <= 3
    assert int(r2mad["generate_calls"]) in (1, 3, 5)
    for row in rows:
        assert float(row["wall_s"]) >= float(row["generate_s"]) >= 0
        assert (float(row["non_generation_s"]) == pytest.approx(float(row["wall_s"]) - float(row["generate_s"]),
                                                                abs=2e-4))
    # a second run reuses the bank
    end_to_end.main(["--limit", "1", "--token-latency-ms", "0", "--bank-questions", "3", "--response-words", "20",
                     "--bank-cache", str(tmp_path / "banks"), "--csv", str(out_csv)])
    assert "(reused)" in capsys.readouterr().out


def test_run_all_reads_the_last_lines_and_the_retrieval_csv(tmp_path):
    output = ["noise", "r2mad/mad wall ratio: 1.50", "r2mad/mad wall ratio: 1.08", "non-generation share: 2.7%"]
    assert run_all.last_value(output, "r2mad/mad wall ratio") == 1.08
    assert run_all.last_value(output, "non-generation share") == 2.7
    assert run_all.last_value(output, "missing") is None
    path = tmp_path / "retrieval_scaling.csv"
    path.write_text(
        "n_cases,dim,queries,retrieve_best_ms,retrieve_median_ms,retrieve_confidence_best_ms,"
        "retrieve_confidence_median_ms,per_query_best_ms\n"
        "1000,384,1,0.2,0.3,0.3,0.4,0.3\n"
        "10000,384,1,0.8,1.0,1.2,1.4,1.2\n"
        "10000,384,32,9.6,13.5,9.6,13.2,0.3\n"
    )
    figures = run_all.retrieval_figures(path)
    assert figures == [
        {"dim": 384, "queries": 1, "call_ms": 1.2, "per_question_ms": 1.2},
        {"dim": 384, "queries": 32, "call_ms": 9.6, "per_question_ms": 0.3},
    ]
    assert run_all.retrieval_figures(tmp_path / "absent.csv") == []


def test_run_all_moves_a_steps_csv_aside_and_puts_the_owners_file_back(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(run_all, "RESULTS", results)
    monkeypatch.setattr(run_all, "RUN_ALL_RESULTS", results / "run_all")
    (results / "kept.csv").write_text("full-size run\n")
    script = (f"from pathlib import Path; r = Path({str(results)!r}); "
              "(r / 'kept.csv').write_text('modest run\\n'); (r / 'new.csv').write_text('fresh\\n'); print('done')")
    step = run_all.Step("fake", ["-c", script], outputs=("kept.csv", "new.csv"))
    run_all.run_step(step)
    assert step.returncode == 0 and step.output == ["done"]
    assert (results / "kept.csv").read_text() == "full-size run\n"  # the owner's file is back
    assert (results / "run_all" / "kept.csv").read_text() == "modest run\n"
    assert (results / "run_all" / "new.csv").read_text() == "fresh\n" and not (results / "new.csv").exists()
    failing = run_all.Step("broken", ["-c", "import sys; sys.exit(3)"], outputs=("kept.csv",))
    run_all.run_step(failing)
    assert failing.returncode == 3 and (results / "kept.csv").read_text() == "full-size run\n"
    assert "exit 3" in capsys.readouterr().out


def test_run_all_times_the_cpu_profile_generating_not_replaying(tmp_path):
    """Without --fresh, a cpu run with no cache replays the published generations: "from nothing" would time a
    replay."""
    steps = {step.name: step for step in run_all.timing_steps(tmp_path, cpu=True)}
    assert steps["cpu_from_nothing"].args[-3:] == ["--profile", "cpu", "--fresh"]
    assert "--fresh" not in steps["sim_from_nothing"].args  # the sim profile publishes nothing: it always generates
    assert "cpu_from_nothing" not in {step.name for step in run_all.timing_steps(tmp_path, cpu=False)}


def test_run_all_times_the_rerun_both_as_make_runs_it_and_forced(tmp_path):
    """A rerun with nothing changed executes no notebook (up_to_date.py): the replay of every run is timed apart."""
    steps = {step.name: step for step in run_all.timing_steps(tmp_path, cpu=False)}
    assert "--force" not in steps["sim_rerun"].args and steps["sim_rerun_forced"].args[-1] == "--force"
    assert steps["sim_rerun"].args[:-2] == steps["sim_rerun_forced"].args[:-3]  # the same folder and profile
    names = list(steps)
    assert names.index("sim_from_nothing") < names.index("sim_rerun") < names.index("sim_rerun_forced")
