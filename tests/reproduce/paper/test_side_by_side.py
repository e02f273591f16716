"""``--gpus N`` side by side: the notebooks' grids of every served model at once, and the estimate's wall-clock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from fake_openai_server import FakeOpenAIServer, expected_reply

from r2mad_lab.experiments.profiles import load_profile
from r2mad_lab.reproduce.paper import estimate, together

REPOSITORY = Path(__file__).resolve().parents[3]

MODELS = {"Qwen3-8B": "Qwen/Qwen3-8B", "Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct"}


class Recording:
    """A fake server's responder: the time of each request; the first waits (at most ``wait`` s) until every other
    model's server has a request too, so both meet only if the models run at once."""

    def __init__(self, label: str, seen: dict[str, threading.Event], wait: float = 30.0) -> None:
        self.label, self.seen, self.wait = label, seen, wait
        self.times: list[float] = []
        self.met: bool | None = None

    def __call__(self, body):
        self.times.append(time.monotonic())
        if self.met is None:
            self.seen[self.label].set()
            self.met = all(event.wait(self.wait) for event in self.seen.values())
        return expected_reply(body)


def _profile(tmp_path, urls):
    fields = yaml.safe_load((REPOSITORY / "r2mad_lab" / "profiles" / "tiny.yaml").read_text())
    first = next(iter(MODELS))
    fields.update(
        models=[{"label": label, "engine": "openai", "model": model,
                 "options": {"base_urls": [urls[label]], "api_key_env": None, "max_concurrency": 4}}
                for label, model in MODELS.items()],
        large_models=[{"label": e["label"], "stand_in": first} for e in fields["large_models"]],
        benchmarks=["truthfulqa"], retrieval_models=[first], retrieval_benchmarks=["truthfulqa"],
        icl_models=[first], icl_benchmarks=["truthfulqa"], cost_benchmark="truthfulqa",
        poison_benchmarks=["truthfulqa"], test_limit=3, n_rounds=2)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return load_profile(path)


def test_every_models_servers_get_requests_at_once_and_the_cells_run_once(tmp_path):
    seen = {label: threading.Event() for label in MODELS}
    recorders = {label: Recording(label, seen) for label in MODELS}
    servers = {label: FakeOpenAIServer(delay_seconds=0.02, owned_by="vllm", responder=recorders[label]).start()
               for label in MODELS}
    try:
        profile = _profile(tmp_path, {label: s.base_url for label, s in servers.items()})
        said = []
        errors = together.run_side_by_side(profile, list(MODELS), runs_dir=tmp_path / "runs",
                                           cache_dir=tmp_path / "cache", methods=["CoT", "MAD"], echo=said.append)
        assert errors == {label: None for label in MODELS}
        assert all(r.met for r in recorders.values())  # each model's first request waited for the other's
        spans = [(min(r.times), max(r.times)) for r in recorders.values()]
        assert max(start for start, _ in spans) < min(end for _, end in spans)  # the intervals overlap
        assert all(s.requests_served > 3 for s in servers.values())
        before = {label: s.requests_served for label, s in servers.items()}
        again = together.run_side_by_side(profile, list(MODELS), runs_dir=tmp_path / "runs",
                                          cache_dir=tmp_path / "cache", methods=["CoT", "MAD"], echo=said.append)
        assert again == errors and {label: s.requests_served for label, s in servers.items()} == before  # cached
        assert any("2 models side by side" in line for line in said)
    finally:
        for server in servers.values():
            server.stop()


def test_the_notebooks_grids_are_in_the_notebooks_order_each_method_once():
    methods = together.methods_in_order()
    assert methods[:5] == ["CoT", "Self-Consistency", "MAD", "MAD-M2", "R2-MAD"]
    assert len(methods) == len(set(methods)) and "MAD-M2 (S)" in methods and "R2-MAD w/o Memory" in methods


def test_the_estimates_wall_clock_is_the_slowest_model_on_its_share_of_the_gpus():
    # 5 GPUs for A, B, C: GPUs 0..4 run A, B, C, A, B -> A 2, B 2, C 1 (serve.plan's rule)
    hours = {"A": (10.0, 20.0), "B": (6.0, 12.0), "C": (4.0, 8.0)}
    models = ["A", "B", "C"]
    # A: 10/2 = 5 and 20/2 = 10; B: 3 and 6; C on its one GPU: 4 and 8 -> (5, 10), not the total / 5 = (4, 8)
    assert estimate.wall_clock(hours, models, 5) == pytest.approx((5.0, 10.0))
    assert estimate.wall_clock(hours, models, 6) == pytest.approx((5.0, 10.0))  # 2 GPUs each: A's 10/2, 20/2
    assert estimate.wall_clock(hours, models, 1) == pytest.approx((20.0, 40.0))  # in-process, one after another
    assert estimate.wall_clock(hours, models, 2) is None  # the run refuses 1 < N < M
    line = estimate.wall_clock_line(hours, models, 5)
    assert "wall-clock 5.0-10.0 h" in line and "A 2, B 2, C 1" in line and "the slowest, A" in line
    assert "no run" in estimate.wall_clock_line(hours, models, 2)


def test_served_run_runs_the_models_side_by_side_before_the_notebooks(tmp_path, monkeypatch):
    """The hook in the paper run: ``--gpus 2`` on two vLLM models (fake servers, a process per GPU), the phase before
    ``run``: both models' cells are on disk when the notebooks' run starts."""
    import argparse

    from r2mad_lab.reproduce.command import ReproductionPaths
    from r2mad_lab.reproduce.grid import slug
    from r2mad_lab.reproduce.paper import command
    from tests.reproduce.paper.test_gpu_day import _fake_command, _free_port_base

    _profile(tmp_path, {label: "http://127.0.0.1:1/v1" for label in MODELS})  # the shape, then vLLM engines
    fields = yaml.safe_load((tmp_path / "tiny.yaml").read_text())
    for entry in fields["models"]:
        entry.update(engine="vllm", options={"max_model_len": 4096})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(fields, sort_keys=False))
    profile = load_profile(tmp_path / "tiny.yaml")
    monkeypatch.setattr(together, "methods_in_order", lambda: ["CoT", "MAD"])
    base = _free_port_base(2)
    monkeypatch.setattr(command.serve, "plan", lambda entries, gpus, command=None, _plan=command.serve.plan:
                        _plan(entries, gpus, base_port=base, command=command))
    found = []

    def run(args, served, only):  # the notebooks' run: every model's cells already finished
        runs = ReproductionPaths(args.output_dir, served.folder).runs_dir
        found.append({label: sorted(p.name.split("-")[0] for p in (runs / slug(label) / "truthfulqa").iterdir()
                                    if (p / "metrics.json").is_file()) for label in MODELS})
        return 0

    args = argparse.Namespace(output_dir=tmp_path / "out", gpus=2, skip_api_models=False, data_dir=None)
    assert command.served_run(args, profile, None, ReproductionPaths, run, command=_fake_command) == 0
    assert found == [{label: ["cot", "mad"] for label in MODELS}]
