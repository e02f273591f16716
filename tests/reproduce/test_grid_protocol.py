"""The profile's protocol choices reach every cell of the notebooks' grid (issue 12 item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2mad_lab.report import findings
from r2mad_lab.reproduce import load_profile
from r2mad_lab.reproduce.grid import INDEPENDENT_ROUND0, SHARED_ROUND0, ExperimentGrid, with_k

SIM_A = {"label": "Sim A", "engine": "simulated", "model": None, "options": {}}
SIM_B = {"label": "Sim B", "engine": "simulated", "model": None, "options": {"seed": 7}}


def experiment(tmp_path: Path, **changes) -> ExperimentGrid:
    options = dict(models=[SIM_A, SIM_B], benchmarks=["mmlu_pro_engineering"], runs_dir=tmp_path / "runs",
                   cache_dir=tmp_path / "cache", test_limit=None, train_limit=2, max_tokens=64)
    options.update(changes)
    return ExperimentGrid(**options)


def test_the_preset_reaches_every_method_and_an_individual_choice_beats_it(tmp_path: Path) -> None:
    exp = experiment(tmp_path)  # protocol: paper (the default)
    assert exp.top_k == 1
    _, options = exp.method_options("MAD", memory=None)
    assert (options["round0"], options["empty_peers"]) == ("independent", "drop")
    assert "unclosed_thinking" not in options  # paper: drop (ours: the authors' keep is a bug), the method's default
    _, options = exp.method_options("R2-MAD", memory=tmp_path / "bank")
    assert (options["top_k"], options["summaries"], options["summary_agents"], options["experience_reference"],
            options["similarity_match"]) == (1, "every_round", "authors", "solution", "question")
    assert "confidence_label" not in options  # the paper's reading is the method's default: no option, same key
    _, options = exp.method_options("ICL-CoT", memory=tmp_path / "bank")
    assert options["top_k"] == 1 and "match" not in options and "round0" not in options
    authors = experiment(tmp_path, protocol="authors", top_k=3, summaries="before_next_round")
    _, options = authors.method_options("R2-MAD", memory=tmp_path / "bank")
    assert (options["top_k"], options["confidence_label"], options["vote_rule"], options["task_prompt"]) == (
        3, "retrieving_agent_correctness", "authors_majority_correct", "authors")
    assert "summaries" not in options  # set back to the method's default by hand: beats the preset
    assert authors.memory_options() == {"reward_definition": "round_correctness", "state_layout": "authors",
                                        "debate_options": {"summaries": "before_next_round",
                                                           "summary_agents": "authors",
                                                           "empty_peers": "drop", "unclosed_thinking": "keep",
                                                           "task_prompt": "authors",
                                                           "consensus_rule": "authors_reads_gold"}}
    assert (authors.samples("mmlu_pro_engineering", "test") and len(authors.samples("mmlu_pro_engineering", "test"))
            == 243)
    # a row's own settings travel beside its name (a Row), never parsed out of it
    row = with_k("R2-MAD retrieval=Random", 3)
    assert row == "R2-MAD retrieval=Random (K=3)"
    _, options = exp.method_options(row, memory=tmp_path / "bank")
    assert (options["top_k"], options["retrieval_policy"]) == (3, "random")
    _, options = exp.method_options("MAD" + SHARED_ROUND0, memory=None)
    assert options["round0"] == "shared"
    with pytest.raises(ValueError, match=r"unknown retrieval policy label .Random \(K=3\)"):  # a name sets nothing
        exp.method_options("R2-MAD retrieval=Random (K=3)", memory=tmp_path / "bank")
    with pytest.raises(ValueError, match="does not take top_k"):
        exp.method_options(with_k("MAD", 3))


def test_protocol_choices_reach_the_methods_that_declare_them(tmp_path: Path) -> None:
    exp = experiment(tmp_path, round0="independent", experience_reference="solution", task_prompt="authors",
                     objective_keep="better_half")
    name, options = exp.method_options("MAD-M2", memory=None)
    assert name == "mad_m2"
    assert (options["round0"], options["task_prompt"], options["objective_keep"]) == ("independent", "authors",
                                                                                       "better_half")
    assert "experience_reference" not in options
    _, options = exp.method_options("R2-MAD w/o Memory", memory=tmp_path / "bank")
    assert options["experience_reference"] == "solution" and options["use_memory"] is False
    _, options = exp.method_options("ICL-CoT", memory=tmp_path / "bank")
    assert "round0" not in options and options["task_prompt"] == "authors"


def test_split_rule_authors_changes_the_questions(tmp_path: Path) -> None:
    assert len(experiment(tmp_path).samples("mmlu_pro_engineering", "test")) == 242
    assert len(experiment(tmp_path, protocol="authors").samples("mmlu_pro_engineering", "test")) == 243
    assert len(experiment(tmp_path, split_rule="authors").samples("mmlu_pro_engineering", "test")) == 243


def test_memory_model_builds_one_bank_for_every_evaluated_model(tmp_path: Path) -> None:
    own = experiment(tmp_path)
    assert own.memory_dir(own.model("Sim B"), "mmlu_pro_engineering") != own.memory_dir(own.model("Sim A"),
                                                                                           "mmlu_pro_engineering")
    shared = experiment(tmp_path, memory_model="Sim A")
    a = shared.memory_dir(shared.model("Sim A"), "mmlu_pro_engineering")
    assert shared.memory_dir(shared.model("Sim B"), "mmlu_pro_engineering") == a
    assert a == own.memory_dir(own.model("Sim A"), "mmlu_pro_engineering")
    assert shared.memory_config(shared.model("Sim B"), "mmlu_pro_engineering")["model"]["label"] == "Sim A"
    with pytest.raises(ValueError, match="memory_model 'GPT'"):
        experiment(tmp_path, memory_model="GPT")
    only = experiment(tmp_path, models=[SIM_B], memory_models=[SIM_A], memory_model="Sim A")
    assert [m.label for m in only.models] == ["Sim B"]  # the memory model is never evaluated
    assert only.memory_dir(only.model("Sim B"), "mmlu_pro_engineering") == a


def test_profile_fields_and_the_k1_note() -> None:
    profile = load_profile("paper")
    assert profile.fields["memory_model"] == "Qwen3-4B-Instruct-2507" and "round0" not in profile.fields
    assert profile.spec.memory_models[0].model == "Qwen/Qwen3-4B-Instruct-2507"
    assert profile.spec.choices["round0"] == "independent" and profile.spec.choices["top_k"] == 1
    assert "noise" in findings.k_note(1) and findings.k_note(3) == ""


def test_an_independent_round0_stream_depends_on_the_bank_content_not_its_folder(tmp_path: Path) -> None:
    """The same memory bank in two folders (another clone, another --output-dir) gives the same sampling stream;
    it once held the bank's absolute path, so the same code drew different samples in different folders."""
    import json
    import shutil

    from r2mad_core.methods import get_method
    from r2mad_lab.experiments.cell import RunConfigMismatch

    exp = experiment(tmp_path, models=[SIM_A], benchmarks=["truthfulqa"], test_limit=2, train_limit=4, n_rounds=2,
                     max_tokens=48, embedder="hashing")
    bank = exp.memory("Sim A", "truthfulqa")
    copy = tmp_path / "elsewhere" / "bank"
    shutil.copytree(bank, copy)
    first = get_method("r2mad", memory=str(bank), round0="independent")
    second = get_method("r2mad", memory=str(copy), round0="independent")
    assert first.debate.stream == second.debate.stream and str(tmp_path) not in first.debate.stream
    # the stream names the row, not the bank (what a request retrieves from the bank is in its own bytes)
    assert "memory_bank_digest" not in first.debate.stream
    assert get_method("r2mad", memory=str(bank), round0="independent", use_confidence=False).debate.stream != (
        first.debate.stream)
    # a finished run directory made with another stream is not silently reused
    outcome = exp.run("Sim A", "truthfulqa", "R2-MAD" + INDEPENDENT_ROUND0)
    assert len(outcome.records) == 2
    config_path = outcome.run_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["method"]["debate"]["stream"] = "r2mad:{\"memory\": \"/somewhere/else/bank\"}"
    config_path.write_text(json.dumps(config))
    with pytest.raises(RunConfigMismatch, match="stream"):
        exp.run("Sim A", "truthfulqa", "R2-MAD" + INDEPENDENT_ROUND0)


def test_a_cell_or_bank_another_process_is_building_is_waited_for_then_loaded(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """make reproduce runs two notebooks at once: a cell whose directory another process holds (its .lock) is
    waited for and then run or loaded, not refused; so is a memory bank another process is building. The holder
    lets go once the run waits for the lock (a blocking flock on that very file), not after a fixed time."""
    import fcntl
    import os
    import threading
    import types

    from r2mad_core import files
    from r2mad_core.files import locked
    from r2mad_lab.experiments.cell import LOCK_FILE

    exp = experiment(tmp_path, models=[SIM_A], test_limit=3)
    run_dir, _, _ = exp.run_dir(exp.models[0], "mmlu_pro_engineering", "MAD")
    bank = exp.memory_dir(exp.models[0], "mmlu_pro_engineering")
    run_dir.mkdir(parents=True)
    held, waiting = threading.Event(), threading.Event()
    holding: list[Path] = []
    runner = threading.current_thread()

    def flock(descriptor: int, operation: int) -> None:
        if (operation == fcntl.LOCK_EX and threading.current_thread() is runner
                and os.fstat(descriptor).st_ino == holding[0].stat().st_ino):
            waiting.set()  # the run waits for the lock the holder holds
        fcntl.flock(descriptor, operation)

    monkeypatch.setattr(files, "fcntl", types.SimpleNamespace(flock=flock, LOCK_EX=fcntl.LOCK_EX,
                                                              LOCK_NB=fcntl.LOCK_NB))

    def hold(path: Path) -> None:
        with locked(path):
            held.set()
            waiting.wait(60)

    for path in (run_dir / LOCK_FILE, bank.parent / f".{bank.name}.lock"):
        held.clear()
        waiting.clear()
        holding[:] = [path]
        thread = threading.Thread(target=hold, args=(path,))
        thread.start()
        held.wait()
        if path.name == LOCK_FILE:
            outcome = exp.run("Sim A", "mmlu_pro_engineering", "MAD")  # RunDirectoryBusy before
            assert len(outcome.records) == 3 and outcome.n_new == 3
        else:
            assert (exp.memory("Sim A", "mmlu_pro_engineering") / "manifest.json").exists()
        waited = waiting.is_set()
        waiting.set()  # the holder lets go in any case
        thread.join()
        assert waited, f"the run did not wait for {path.name}, which another process held"


def _hold_lock(path: Path) -> int:
    """Another process's lock on ``path`` (flock belongs to an open file: a second open of it conflicts)."""
    import fcntl
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    return descriptor


def test_cells_whose_bank_another_process_builds_go_last_and_the_results_keep_their_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: notebook 04 no longer waits ~52 s on the bank 02 is building while cells it could run wait: a cell
    whose bank another process holds is put off while another cell can run; the results come in the declared order."""
    import os

    from r2mad_lab.experiments.waiting import held_elsewhere

    exp = experiment(tmp_path, models=[SIM_A], benchmarks=["truthfulqa", "mmlu_pro_economics"], test_limit=2)
    bank = exp.memory_dir(exp.models[0], "truthfulqa")
    lock = bank.parent / f".{bank.name}.lock"
    assert not held_elsewhere(lock)
    descriptor = _hold_lock(lock)
    assert held_elsewhere(lock)
    order: list[tuple[str, str]] = []
    run = exp.cells.run

    def recording_run(model: str, benchmark: str, method: str):
        order.append((benchmark, method))
        assert (benchmark, method) != ("truthfulqa", "R2-MAD") or len(order) > 3, f"waits on the held bank: {order}"
        if len(order) == 3:  # the other process is done with the bank (without building it: this grid then does)
            os.close(descriptor)
        return run(model, benchmark, method)

    monkeypatch.setattr(exp.cells, "run", recording_run)
    results = exp.grid(["R2-MAD", "MAD"])
    assert order == [("truthfulqa", "MAD"), ("mmlu_pro_economics", "R2-MAD"), ("mmlu_pro_economics", "MAD"),
                     ("truthfulqa", "R2-MAD")]
    assert [(o.benchmark, o.method) for o in results.outcomes] == [
        ("truthfulqa", "R2-MAD"), ("truthfulqa", "MAD"), ("mmlu_pro_economics", "R2-MAD"),
        ("mmlu_pro_economics", "MAD")]
    assert all(len(o.records) == 2 for o in results.outcomes)


def test_memories_builds_the_banks_nobody_else_is_building_first(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Notebooks 02 and 04 both need the four banks: each builds those the other is not building."""
    import os

    exp = experiment(tmp_path, models=[SIM_A], benchmarks=["truthfulqa", "mmlu_pro_economics", "math500"])
    bank = exp.memory_dir(exp.models[0], "truthfulqa")
    descriptor = _hold_lock(bank.parent / f".{bank.name}.lock")
    built: list[str] = []
    memory = exp.banks.memory

    def recording_memory(spec, benchmark: str) -> Path:
        built.append(benchmark)
        assert benchmark != "truthfulqa" or len(built) > 2, f"waits on the bank another process builds: {built}"
        if len(built) == 2:
            os.close(descriptor)
        return memory(spec, benchmark)

    monkeypatch.setattr(exp.banks, "memory", recording_memory)
    pairs = [("Sim A", b) for b in ("truthfulqa", "mmlu_pro_economics", "math500")]
    directories = exp.memories(pairs)
    assert built == ["mmlu_pro_economics", "math500", "truthfulqa"]
    assert list(directories) == [("Sim A", "truthfulqa"), ("Sim A", "mmlu_pro_economics"), ("Sim A", "math500")]
    assert all((d / "manifest.json").exists() for d in directories.values())


def test_a_finished_cell_is_read_once_per_process_until_its_files_change(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The report asks for 93 cells of 56 directories: a directory this process ran or read and that has not changed
    is not read again, and its metrics are the same numbers; a changed transcript file is read again."""
    import os

    from r2mad_lab.experiments import run_reader
    from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE

    exp = experiment(tmp_path, models=[SIM_A], test_limit=3)
    first = exp.run("Sim A", "mmlu_pro_engineering", "MAD")
    assert first.n_new == 3
    reads = []
    real_load_run = run_reader.load_run
    monkeypatch.setattr(run_reader, "load_run", lambda run_dir: reads.append(run_dir) or real_load_run(run_dir))
    again = exp.run("Sim A", "mmlu_pro_engineering", "MAD")
    assert reads == [] and again.n_new == 0
    assert [r.model_dump() for r in again.records] == [r.model_dump() for r in first.records]
    assert again.metrics == first.metrics and again.metrics is not first.metrics
    again.metrics["accuracy"] = -1.0  # a caller's change does not reach the next caller
    assert exp.run("Sim A", "mmlu_pro_engineering", "MAD").metrics == first.metrics
    transcripts = first.run_dir / TRANSCRIPTS_FILE
    stat = transcripts.stat()
    os.utime(transcripts, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    third = exp.run("Sim A", "mmlu_pro_engineering", "MAD")
    assert reads == [first.run_dir] and third.metrics == first.metrics


def test_the_simulated_agents_run_uncached_unless_they_model_a_latency(tmp_path: Path) -> None:
    """Issue 35: the response cache was 9% of the default run's CPU in front of agents that compute a completion
    faster than the cache keys, looks up and stores it; they run uncached, so nothing they answer is "cached"."""
    from r2mad_core.theory.agents import SimulatedAgentParams, SimulatedEngine
    from r2mad_lab.engines import CachedEngine

    assert not SimulatedEngine.worth_caching() and not SimulatedEngine.worth_caching(params={})
    assert SimulatedEngine.worth_caching(params=SimulatedAgentParams(token_latency_ms=5.0))
    assert SimulatedEngine.worth_caching(params={"token_latency_ms": 5.0})
    exp = experiment(tmp_path, models=[SIM_A], test_limit=2)
    assert not isinstance(exp.engine(exp.models[0]), CachedEngine)
    outcome = exp.run("Sim A", "mmlu_pro_engineering", "MAD")
    turns = [item for record in outcome.records for rnd in record.rounds for item in rnd.agents]
    assert len(turns) >= 6 and not any(item.cached for item in turns)
    assert not (tmp_path / "cache" / "responses.sqlite").exists()
