"""The per-question schedule (r2mad_core.debate.scheduling): same transcripts as the round loop for every method, no
round barriers, a bounded window, input-order writes, errors, and the fallback for engines without the
``concurrent_generate`` declaration."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from debate_fakes import ScriptedEngine, mc_answer, mc_sample, round_of

from r2mad_core.data import benchmarks
from r2mad_core.debate import scheduling
from r2mad_core.debate.loop import DebateConfig
from r2mad_core.engine import EngineError, collect_in_order
from r2mad_core.records import without_seconds
from r2mad_core.theory.agents import SimulatedEngine
from r2mad_lab.engines.cache import CachedEngine
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE, load_run, run_cell

BENCHMARK = "mmlu_pro_economics"
TEST = benchmarks.load(BENCHMARK, "test")[:10]
TRAIN = benchmarks.load(BENCHMARK, "train")[:8]


def file_lines(run_dir: Path) -> list[dict]:
    return [without_seconds(json.loads(line)) for line in (run_dir / TRANSCRIPTS_FILE).read_text().splitlines()]


@pytest.fixture(scope="module")
def bank(tmp_path_factory) -> str:
    """A small R2-MAD/ICL-CoT bank from 8 training questions (simulated agents, hashing embedder)."""
    out = tmp_path_factory.mktemp("bank") / "bank"
    build_memory(BENCHMARK, SimulatedEngine(TRAIN, seed=3), "hashing", out, samples=TRAIN, progress=False)
    return str(out)


METHODS = {
    "cot": {},
    "self_consistency": {"k_paths": 3},
    "mad": {},
    "mad_summaries": {"with_summaries": True},
    "mad_m2_objective": {"masking": "objective"},
    "mad_m2_subjective": {"masking": "subjective"},
    "r2mad": {"top_k": 2},
    "icl_cot": {"top_k": 2},
}


def method_of(label: str, bank: str) -> tuple[str, dict]:
    name = {"mad_summaries": "mad", "mad_m2_objective": "mad_m2", "mad_m2_subjective": "mad_m2"}.get(label, label)
    options = dict(METHODS[label])
    if name in ("r2mad", "icl_cot"):
        options["memory"] = bank
    return name, options


@pytest.mark.parametrize("label", sorted(METHODS))
def test_every_method_writes_the_same_transcripts_under_both_schedules(label, bank, tmp_path):
    name, options = method_of(label, bank)

    def run(schedule: str, engine, directory: str):
        return run_cell(tmp_path / directory, benchmark=BENCHMARK, split="test", engine=engine, method=name,
                        method_options=options, samples=TEST, seed=1, chunk_size=4, window=3, schedule=schedule,
                        progress=False)

    # 1. The simulated engine, no cache.
    rounds = run("rounds", SimulatedEngine([*TEST, *TRAIN], seed=1), "rounds")
    questions = run("questions", SimulatedEngine([*TEST, *TRAIN], seed=1), "questions")
    assert questions.n_new == rounds.n_new == len(TEST)
    assert [without_seconds(r) for r in questions.records] == [without_seconds(r) for r in rounds.records]
    assert file_lines(tmp_path / "questions") == file_lines(tmp_path / "rounds")  # line for line, input order
    assert [r["sample_id"] for r in file_lines(tmp_path / "questions")] == [s.id for s in TEST]
    assert questions.metrics["accuracy"] == rounds.metrics["accuracy"]
    if label in ("mad", "mad_summaries", "mad_m2_objective", "mad_m2_subjective", "r2mad"):
        executed = [len(r.rounds) for r in rounds.records]
        assert 1 in executed or 2 in executed, "no question stopped early: the early stop is not exercised"
        assert 3 in executed, "no question ran every round"

    # 2. Through the response cache, each schedule filling its own cache (the cached flags agree too) ...
    fresh_rounds = run("rounds", CachedEngine(SimulatedEngine([*TEST, *TRAIN], seed=1), tmp_path / "cache-r"), "cr")
    fresh_questions = run("questions", CachedEngine(SimulatedEngine([*TEST, *TRAIN], seed=1), tmp_path / "cache-q"),
                          "cq")
    assert [without_seconds(r) for r in fresh_questions.records] == [without_seconds(r) for r in fresh_rounds.records]
    assert [without_seconds(r) for r in fresh_rounds.records] == [without_seconds(r) for r in rounds.records]

    # 3. ... and replayed from the cache the other schedule filled: nothing generated, the same transcripts.
    replay_engine = CachedEngine(SimulatedEngine([*TEST, *TRAIN], seed=1), tmp_path / "cache-r")
    replay_questions = run("questions", replay_engine, "rq")
    replay_rounds = run("rounds", CachedEngine(SimulatedEngine([*TEST, *TRAIN], seed=1), tmp_path / "cache-q"), "rr")
    assert replay_engine.stats.generated == 0
    assert all(a.cached for r in replay_questions.records for t in r.rounds for a in t.agents)
    assert [without_seconds(r) for r in replay_questions.records] == [without_seconds(r) for r in replay_rounds.records]
    assert file_lines(tmp_path / "rq") == file_lines(tmp_path / "rr")


# ----------------------------------------------------------------------------------------------
# Scripted engines that take concurrent calls
# ----------------------------------------------------------------------------------------------
def split_answers(question, persona, t, request):
    """Agents disagree at rounds 0 and 1 (so every question runs 3 rounds) and agree at round 2."""
    if t == 2:
        return mc_answer("A")
    return mc_answer("ABC"[persona or 0])


class ConcurrentScripted(ScriptedEngine):
    concurrent_generate = True


#: How long a gated or staggered question waits for another at most: a bound against a hang, never reached on a working
#: scheduler; generous, because on a loaded 2-core machine (make test on both cores, other jobs) a thread can wait
#: many seconds for the CPU, and a wait cut short lets the questions finish out of the order the test checks.
WAIT_BOUND = 120


class GatedEngine(ConcurrentScripted):
    """q001's round-0 call waits until q000's round-1 requests have arrived: only a schedule without round
    barriers can finish (under ``rounds``, q000 cannot reach round 1 before q001's round 0 is back)."""

    def __init__(self) -> None:
        super().__init__(split_answers)
        self.q000_round1 = threading.Event()

    def generate(self, requests):
        text = requests[0].messages[-1]["content"]
        if requests[0].tag == "debate":
            if "Question q000?" in text and round_of(requests[0]) == 1:
                self.q000_round1.set()
            if "Question q001?" in text and round_of(requests[0]) == 0:
                if not self.q000_round1.wait(timeout=WAIT_BOUND):
                    raise EngineError("q000 never reached round 1 while q001's round 0 was pending: a round barrier")
        return super().generate(requests)


def test_a_question_moves_to_its_next_round_while_another_is_still_in_an_earlier_one(tmp_path):
    engine = GatedEngine()
    samples = [mc_sample(f"q{i:03d}") for i in range(3)]
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="mad",
                      samples=samples, schedule="questions", window=3, progress=False)
    assert engine.q000_round1.is_set()
    assert [len(r.rounds) for r in result.records] == [3, 3, 3]
    # Each engine call holds one question's requests (3 agents), never a whole round of every question.
    assert {len(batch) for batch in engine.batches} == {3}
    assert len(engine.batches) == 3 * 3


class StaggeredEngine(ConcurrentScripted):
    """Question k's calls wait until question k+1 has finished (in reverse order of input), so the questions
    finish last to first; records which questions have started."""

    def __init__(self, n: int, window: int, head_waits_for: str | None = None) -> None:
        super().__init__(split_answers)
        self.head_waits_for = head_waits_for  # q000 also waits until this question has started
        self.started_events = {f"q{i:03d}": threading.Event() for i in range(n)}
        self.n = n
        self.window = window
        self.started: set[str] = set()
        self.finished: list[str] = []
        self.lock = threading.Lock()
        self.events = {f"q{i:03d}": threading.Event() for i in range(n)}
        self.max_unwritten = 0
        self.max_debating = 0
        self.written = 0

    def generate(self, requests):
        qid = "q" + requests[0].messages[-1]["content"].split("Question q", 1)[1][:3]
        with self.lock:
            self.started.add(qid)
            self.max_unwritten = max(self.max_unwritten, len(self.started) - self.written)
            self.max_debating = max(self.max_debating, len(self.started) - len(self.finished))
        self.started_events[qid].set()
        if qid == "q000" and self.head_waits_for:
            self.started_events[self.head_waits_for].wait(timeout=WAIT_BOUND)
        index = int(qid[1:])
        successor = f"q{index + 1:03d}"
        # the last question of each window finishes first; the others wait for their successor
        last_of_window = index % self.window == self.window - 1 or index == self.n - 1
        if not last_of_window:
            self.events[successor].wait(timeout=WAIT_BOUND)
        else:  # finish first, but only once its whole window has started: max_debating must not hang on thread timing
            for earlier in range(index - index % self.window, index):
                self.started_events[f"q{earlier:03d}"].wait(timeout=WAIT_BOUND)
        out = super().generate(requests)
        if round_of(requests[0]) == 2 and requests[0].tag == "debate":
            with self.lock:
                self.finished.append(qid)
            self.events[qid].set()
        return out


@pytest.mark.parametrize("hold_factor", [1, 4])
def test_the_window_bounds_questions_in_flight_and_writes_follow_input_order(tmp_path, monkeypatch, hold_factor):
    monkeypatch.setattr(scheduling, "HOLD_FACTOR", hold_factor)
    n, window = 7, 3
    # with room to hold finished questions, q003 starts while q000 (the head) is still debated: make sure it does
    # before q000 finishes, so that the count below does not depend on thread timing
    engine = StaggeredEngine(n, window, head_waits_for="q003" if hold_factor > 1 else None)
    samples = [mc_sample(f"q{i:03d}") for i in range(n)]
    handed: list[list[str]] = []

    def on_finished(states):
        handed.append([s.sample.id for s in states])
        with engine.lock:
            engine.written += len(states)

    config = DebateConfig(n_agents=3, n_rounds=3)
    states = scheduling.run_scheduled(samples, engine, config, schedule="questions", window=window,
                                      on_finished=on_finished)
    assert [s.sample.id for s in states] == [s.id for s in samples]
    assert engine.finished[:3] == ["q002", "q001", "q000"]  # finished last to first ...
    assert [i for batch in handed for i in batch] == [s.id for s in samples]  # ... handed over first to last
    assert handed[0][0] == "q000"  # nothing is handed over before q000, which finished last of its window
    assert engine.max_debating == window  # never more than the window debated at once
    # started and not yet written: the window's own questions only (hold 1), or more while q000 holds the head
    # (q003 starts when q002 finishes), never more than HOLD_FACTOR x window
    if hold_factor == 1:
        assert engine.max_unwritten == window
    else:
        assert window < engine.max_unwritten <= hold_factor * window


def test_an_engine_failure_stops_the_run_keeps_the_finished_questions_before_it_and_resumes(tmp_path):
    def failing(question, persona, t, request):
        if "q003" in question and t == 1:
            raise EngineError("server down (test)")
        return split_answers(question, persona, t, request)

    samples = [mc_sample(f"q{i:03d}") for i in range(8)]
    with pytest.raises(EngineError, match="server down"):
        run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=ConcurrentScripted(failing),
                 method="mad", samples=samples, schedule="questions", window=2, progress=False)
    _, records = load_run(tmp_path / "run")
    ids = [r.sample_id for r in records]
    assert ids == [f"q{i:03d}" for i in range(len(ids))] and len(ids) <= 3  # a prefix, nothing from q003 on
    resumed = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=ConcurrentScripted(split_answers),
                       method="mad", samples=samples, schedule="questions", window=2, progress=False)
    assert resumed.n_reused == len(ids) and resumed.n_new == 8 - len(ids)
    reference = run_cell(tmp_path / "ref", benchmark="truthfulqa", split="test", engine=ScriptedEngine(split_answers),
                         method="mad", samples=samples, progress=False)
    assert [without_seconds(r) for r in resumed.records] == [without_seconds(r) for r in reference.records]


def test_a_run_may_be_resumed_under_the_other_schedule(tmp_path):
    def failing(question, persona, t, request):
        if "q002" in question:
            raise EngineError("server down (test)")
        return split_answers(question, persona, t, request)

    samples = [mc_sample(f"q{i:03d}") for i in range(4)]
    with pytest.raises(EngineError):
        run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=ScriptedEngine(failing), method="mad",
                 samples=samples, chunk_size=2, schedule="rounds", progress=False)
    config = (tmp_path / "run" / "config.json").read_text()
    assert "schedule" not in config and "window" not in config  # neither is part of the cell
    resumed = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=ConcurrentScripted(split_answers),
                       method="mad", samples=samples, chunk_size=2, schedule="questions", progress=False)
    assert (resumed.n_reused, resumed.n_new) == (2, 2)
    assert [r["sample_id"] for r in file_lines(tmp_path / "run")] == [s.id for s in samples]


# ----------------------------------------------------------------------------------------------
# Engines that do not declare concurrent calls, and the declaration itself
# ----------------------------------------------------------------------------------------------
def test_an_engine_without_the_declaration_runs_rounds_with_one_warning(tmp_path, caplog):
    engine = ScriptedEngine(split_answers, identity="scripted-no-threads")
    samples = [mc_sample(f"q{i:03d}") for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="r2mad_core.debate.scheduling"):
        result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="mad",
                          samples=samples, schedule="questions", chunk_size=4, progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "scripted-no-threads" in warnings[0] and "running schedule 'rounds' instead" in warnings[0]
    assert [len(batch) for batch in engine.batches] == [12, 12, 12]  # one call per round over every question
    assert len(result.records) == 4


def test_which_engines_accept_concurrent_calls(tmp_path):
    from r2mad_lab.engines.openai_compat import OpenAICompatEngine
    from r2mad_lab.engines.vllm_backend import VLLMEngine

    simulated = SimulatedEngine(TEST, seed=0)
    assert scheduling.accepts_concurrent_calls(simulated)
    assert scheduling.accepts_concurrent_calls(CachedEngine(simulated, tmp_path / "c1"))
    assert not scheduling.accepts_concurrent_calls(ScriptedEngine(split_answers))
    assert not scheduling.accepts_concurrent_calls(CachedEngine(ScriptedEngine(split_answers), tmp_path / "c2"))
    declined = ConcurrentScripted(split_answers)
    declined.concurrent_generate = False
    assert not scheduling.accepts_concurrent_calls(declined)
    client = OpenAICompatEngine(model="m", base_urls="http://127.0.0.1:9/v1", neutral_sampling=False)
    try:
        assert scheduling.accepts_concurrent_calls(client)
        assert scheduling.accepts_concurrent_calls(CachedEngine(client, tmp_path / "c3", close_backend=False))
    finally:
        client.close()
    # the offline vLLM engine: one engine thread takes every caller's requests (tests/engines/test_vllm_streaming.py)
    assert VLLMEngine.concurrent_generate is True


@pytest.mark.parametrize(
    "kwargs, message",
    [({"schedule": "batch"}, "schedule must be one of"), ({"schedule": "questions", "window": 0}, "window must be"),
     ({"window": True}, "window must be")],
)
def test_bad_schedule_or_window_is_one_clear_error_before_any_generation(kwargs, message, tmp_path):
    engine = ConcurrentScripted(split_answers)
    with pytest.raises(ValueError, match=message):
        run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="mad",
                 samples=[mc_sample("q000")], progress=False, **kwargs)
    assert engine.calls == 0 and not (tmp_path / "run").exists()


def test_wall_time_is_shared_among_the_questions_in_a_round(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 5.0, 5.0])
    monkeypatch.setattr(scheduling.time, "perf_counter", lambda: next(clock))
    shares = scheduling.WallShares()  # t = 0
    shares.start(1)  # t = 1: question 1 alone
    shares.start(2)  # t = 3: question 1 had [1, 3) alone -> 2.0 so far
    assert shares.stop(1) == pytest.approx(2.0 + 1.0)  # t = 5: [3, 5) shared by two
    assert shares.stop(2) == pytest.approx(1.0)  # half of [3, 5)
    # the shares sum to the wall time spent in rounds, [1, 5)


# ----------------------------------------------------------------------------------------------
# The window counts engine requests: a question waiting for its slowest agent frees the others' slots
# ----------------------------------------------------------------------------------------------
def question_of(request) -> str:
    return "q" + request.messages[-1]["content"].split("Question q", 1)[1][:3]


class SlowThirdAgentEngine(ConcurrentScripted):
    """A streaming engine (``generate_iter``): each call hands back its completions one by one as they finish.
    In round 0 the third agent of q000 and of q001 comes back only once q002 has sent its first request (or
    after a 10 s fallback): q002 can start while they wait only if their finished agents' slots count as free.
    When q002 starts, the engine notes which questions had started and whose third agent was still out."""

    def __init__(self) -> None:
        super().__init__(split_answers)
        self.q002_started = threading.Event()
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.pending: set[str] = set()  # questions whose slow third agent is not back yet
        self.when_q002_started: tuple[list[str], set[str]] | None = None

    def generate_iter(self, requests):
        qid = question_of(requests[0])
        slow = qid in ("q000", "q001") and round_of(requests[0]) == 0
        with self.lock:
            if qid not in self.started:
                self.started.append(qid)
            if slow:
                self.pending.add(qid)
            if qid == "q002" and self.when_q002_started is None:
                self.when_q002_started = (list(self.started), set(self.pending))
        if qid == "q002":
            self.q002_started.set()
        completions = super().generate(requests)
        for index, completion in enumerate(completions):
            if slow and index == len(completions) - 1:
                self.q002_started.wait(timeout=10)
                with self.lock:
                    self.pending.discard(qid)
            yield index, completion

    def generate(self, requests):  # a streaming engine's generate: its stream collected in order
        return collect_in_order(self.generate_iter(requests), len(requests))


def test_a_question_waiting_for_its_slowest_agent_lets_a_new_question_use_the_free_slots(tmp_path):
    # window 2 = 6 engine requests. q000 and q001 each wait for their third agent (1 request out each): 2 of 6
    # claimed, room for q002's 3. Counting questions instead (2 in flight = the window), q002 would wait.
    engine = SlowThirdAgentEngine()
    samples = [mc_sample(f"q{i:03d}") for i in range(4)]
    result = run_cell(tmp_path / "run", benchmark="truthfulqa", split="test", engine=engine, method="mad",
                      samples=samples, schedule="questions", window=2, progress=False)
    started, pending = engine.when_q002_started
    assert pending == {"q000", "q001"}  # q002 started while both still waited for their third agent
    assert sorted(started) == ["q000", "q001", "q002"]  # and q003 had not: 1 + 1 + 3 + 3 > 6
    assert [r.sample_id for r in result.records] == ["q000", "q001", "q002", "q003"]
    assert [len(r.rounds) for r in result.records] == [3, 3, 3, 3]


class OutOfOrderStreaming(SimulatedEngine):
    """The simulated engine streaming its completions last to first (a server hands them back as they finish)."""

    concurrent_generate = True

    def generate_iter(self, requests):
        completions = self.generate(requests)
        for index in reversed(range(len(completions))):
            yield index, completions[index]


@pytest.mark.parametrize("label", ["mad", "r2mad"])
def test_completions_streamed_out_of_order_give_the_same_transcripts(label, bank, tmp_path):
    name, options = method_of(label, bank)
    runs = {}
    for schedule in ("rounds", "questions"):
        runs[schedule] = run_cell(tmp_path / schedule, benchmark=BENCHMARK, split="test",
                                  engine=OutOfOrderStreaming([*TEST, *TRAIN], seed=1), method=name,
                                  method_options=options, samples=TEST, seed=1, chunk_size=4, window=2,
                                  schedule=schedule, progress=False)
    assert file_lines(tmp_path / "questions") == file_lines(tmp_path / "rounds")
    assert runs["questions"].n_new == len(TEST)

