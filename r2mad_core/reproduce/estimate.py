"""The pre-flight estimate of a GPU profile: requests, tokens, context overflows and GPU-hours, on a CPU in minutes.

``make reproduce PROFILE=paper ARGS=--estimate-only`` (:func:`estimate_profile`, :func:`estimate_lines`). What it
does:

- **The cells the notebooks run** (:data:`NOTEBOOK_PLAN`, mirroring each notebook's ``exp.grid`` calls; a test
  checks every notebook's calls are in it), through the notebooks' own :class:`~r2mad_core.reproduce.grid.ExperimentGrid`
  with the profile's settings (agents, rounds, K, max_tokens, protocol choices, memory model). A cell already run by
  an earlier notebook is not counted again (the run directory is reused, as in the real run), and requests shared
  by two cells (round 0 of every method) are counted once (the response cache).
- **The prompts actually built**: every request of every debate, summary, judge and memory construction is built by
  the real debate code, for the first ``test_sample`` test and ``train_sample`` train questions of each benchmark;
  counts scale to the full splits per benchmark and split. Prompt tokens: 4 characters a token plus 4 per message
  (:func:`r2mad_core.experiments.budget.estimate_tokens`; no tokenizer offline). The memory banks are built with the
  hashing embedder (BGE-M3 is not loaded; retrieval picks other cases, the prompts have the same shape).
- **A stated completion-length model** (:class:`LengthModel`): each completion's length is lognormal, deterministic
  in the request, median ``debate_median`` tokens (``summary_median`` for summaries), sigma ``sigma``, capped at
  ``max_tokens`` and at the model's context (``max_model_len``). For a thinking model (Qwen3) the peers see the
  answer after ``</think>``: ``visible_share`` of the tokens. A share ``loop`` of completions repeats until
  ``max_tokens`` (ours, not measured: the issue's looping peer), seen by the peers (a thinking model loops inside
  ``<think>``: nothing seen, an unclosed think). Each agent answers the same (the first option or
  ``\\boxed{1}``) with probability ``agree``, else a random other answer, so debates stop early about as often as
  three agents that agree with that probability do.
- **The share of requests that would overflow** each model's context (the prompt alone does not fit: answered
  empty under ``overflow_policy: empty``) and of outputs the context would cap.
- **GPU-hours** = generated tokens / :data:`TOKENS_PER_S`, a simulated rate (benchmarks/throughput.py's virtual GPU
  with assumed step costs; not measured on any GPU) for an 8B model under the question schedule (benchmarks/throughput.py, benchmarks/README.md: 3754 tokens/s, window 64; 11.3 GPU-hours for
  Qwen3-8B's 153M tokens there). The same rate for the 4B and 7B models (an upper bound for them). API models
  (``large_models``) are counted in requests and tokens, not GPU-hours.

The printout is :func:`estimate_lines`: a function returning lines, so that later lines (e.g. power) extend it.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from statistics import NormalDist

from r2mad_core.engines import ENGINES, EngineSpec, register_engine
from r2mad_core.engines.base import Completion, Ledger, Request
from r2mad_core.experiments import method_labels
from r2mad_core.experiments import protocol as presets
from r2mad_core.experiments.budget import estimate_tokens
from r2mad_core.experiments.profiles import load_profile
from r2mad_core.experiments.model_specs import ModelSpec, large_model_plan
from r2mad_core.report.protocol_notes import LAMBDA_K
from r2mad_core.data.benchmarks import load
from r2mad_core.reproduce.grid import ExperimentGrid

#: Generated tokens per second of one GPU: simulated, not measured (benchmarks/throughput.py's virtual GPU, 8B model,
#: question schedule). ``reproduce --estimate-only`` no longer uses it (r2mad_core/reproduce/paper_run.py).
TOKENS_PER_S = 3754.0
ENGINE_NAME = "estimating"


@dataclass(frozen=True)
class LengthModel:
    """The completion-length model of the estimate (module docstring); every field is printed."""

    debate_median: float = 400.0
    summary_median: float = 150.0
    sigma: float = 0.8
    visible_share: float = 1.0  # of a completion's tokens, what the peers see (a thinking model: the answer part)
    agree: float = 0.7
    thinking: bool = False
    loop: float = 0.01  # completions that repeat until max_tokens (visible unless the model thinks: then unclosed)

    @classmethod
    def for_model(cls, model: str | None) -> "LengthModel":
        """Qwen3 thinks (benchmarks/throughput.py: median 1200 debate tokens, 400 for a summary); the others
        answer in ~400 tokens (the paper profile's estimate)."""
        if model and "qwen3" in model.lower() and "instruct-2507" not in model.lower():  # Instruct-2507: non-thinking
            return cls(debate_median=1200.0, summary_median=400.0, visible_share=0.25, thinking=True)
        return cls()

    def describe(self) -> str:
        loops = "inside <think>, unseen" if self.thinking else "seen by the peers"
        return (f"lognormal lengths, median {self.debate_median:g} tokens (summaries {self.summary_median:g}), "
                f"sigma {self.sigma:g}, capped at max_tokens and the context; peers see {self.visible_share:.0%}; "
                f"{self.loop:.0%} loop to max_tokens ({loops}); agents agree with p={self.agree:g}")


def _uniform(request: Request, salt: str) -> float:
    digest = hashlib.sha256(repr((salt, request.messages, request.sample_index, request.tag,
                                  request.params.seed)).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2.0 ** 64


def _normal(u: float) -> float:
    """The standard normal quantile of ``u``."""
    return NormalDist().inv_cdf(u)


class EstimatingEngine:
    """Answers every request at once with a completion of the :class:`LengthModel`'s length and counts what a GPU
    would do: requests, prompt and completion tokens, prompts over the context, outputs the context caps."""

    concurrent_generate = True

    def __init__(self, model: str = "", *, context: int | None = None, lengths: LengthModel | None = None,
                 **_engine_options: Any) -> None:
        self.model = model
        self.context = context
        self.lengths = lengths or LengthModel.for_model(model)
        self.identity = f"{ENGINE_NAME}:{context}:{self.lengths}"
        self.ledger = Ledger()
        self.overflows = 0
        self.capped = 0
        self.largest_prompt = 0
        self.sampled = 0  # requests built (before scaling)

    def answer(self, request: Request) -> Completion:
        prompt = estimate_tokens(request.messages)
        self.sampled += 1
        self.largest_prompt = max(self.largest_prompt, prompt)
        if self.context is not None and prompt >= self.context:
            self.overflows += 1
            return Completion("", prompt, 0, finish_reason="length", cut="context_overflow")
        median = self.lengths.summary_median if request.tag == "summary" else self.lengths.debate_median
        length = int(round(median * math.exp(self.lengths.sigma * _normal(_uniform(request, "length")))))
        limit = request.params.max_tokens
        looped = _uniform(request, "loop") < self.lengths.loop
        if looped:
            length = limit
        cut = "max_tokens" if length >= limit else None
        length = max(1, min(length, limit))
        if self.context is not None and prompt + length >= self.context:
            length, cut = self.context - prompt, "context_capped"
            self.capped += 1
        logprobs = [-1.0 - _uniform(request, "logprob")] if request.params.logprobs else None
        if looped and self.lengths.thinking:  # stopped inside <think>: nothing visible
            return Completion("", prompt, length, logprobs, finish_reason="length", cut=cut, unclosed_thinking=True)
        if looped:
            return Completion(" ".join(["tok"] * length), prompt, length, logprobs, finish_reason="length", cut=cut)
        visible = max(1, int(length * self.lengths.visible_share))
        text = " ".join(["tok"] * visible) + " " + self._answer_text(request)
        return Completion(text, prompt, length, logprobs, finish_reason="length" if cut else "stop", cut=cut)

    def _answer_text(self, request: Request) -> str:
        last = request.messages[-1]["content"]
        pick = _uniform(request, "answer")
        if "\\boxed" in last:
            value = 1 if pick < self.lengths.agree else 2 + int(pick * 97)
            return f"The answer is \\boxed{{{value}}}. [[YES]]"
        letter = "A" if pick < self.lengths.agree else "BCD"[int(pick * 3) % 3]
        return f"The answer is (({letter})). [[YES]]"

    def generate_iter(self, requests: Sequence[Request]):
        for index, request in enumerate(requests):
            completion = self.answer(request)
            self.ledger.record(request, completion)
            yield index, completion

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return [c for _, c in self.generate_iter(requests)]

    def close(self) -> None:
        pass


if ENGINE_NAME not in ENGINES:
    register_engine(EngineSpec(ENGINE_NAME, EstimatingEngine, "the pre-flight estimate's counting engine",
                               concurrent=True, listed=False))


# --------------------------------------------------------------------------------------------------------------
# What each notebook runs (its exp.grid / exp.memory calls)
# --------------------------------------------------------------------------------------------------------------
Step = tuple[str, Callable[[Mapping[str, Any]], list[str]], str | None, str | None]  # (kind, methods, models, benchmarks)


def _retrieval(p: Mapping[str, Any]) -> list[str]:
    return [method_labels.retrieval_method_label(x) for x in p["retrieval_policies"]]


def _retrieval_k3(p: Mapping[str, Any]) -> list[str]:
    """Notebook 04's second retrieval ablation: at K = 3 when the profile's K is not 3 (at K = 1 lambda_t cannot act)."""
    explicit = {k: p.get(k) for k in presets.PROFILE_CHOICES}
    if presets.resolve(p.get("protocol") or presets.DEFAULT_PROTOCOL, explicit)["top_k"] == LAMBDA_K:
        return []
    return [method_labels.with_k(m, LAMBDA_K) for m in _retrieval(p)]


def _poisoned(p: Mapping[str, Any]) -> list[str]:
    return [method_labels.poisoned_method_label(f) for f in p["poison_fractions"]] + ["MAD"]


#: notebook -> steps: ("memory", ...) builds every bank; ("grid", methods(fields), models field, benchmarks field).
NOTEBOOK_PLAN: dict[str, list[Step]] = {
    "02_memory": [("memory", lambda p: [], None, None)],
    "03_main_results": [("grid", lambda p: [*method_labels.MAIN_METHODS, *p.get("extra_methods", [])], None, None),
                        ("large", lambda p: list(method_labels.LARGE_MODEL_METHODS), None, None)],
    "04_ablations": [("grid", lambda p: list(method_labels.ABLATION_METHODS), None, None),
                     ("grid", _retrieval, "retrieval_models", "retrieval_benchmarks"),
                     ("grid", _retrieval_k3, "retrieval_models", "retrieval_benchmarks")],
    "05_baselines": [("grid", lambda p: method_labels.sc_methods(p["sc_paths"]), None, None),
                     ("grid", lambda p: list(method_labels.MAD_M2_METHODS), None, None),
                     ("grid", lambda p: list(method_labels.ICL_METHODS), "icl_models", "icl_benchmarks")],
    "06_shared_misconception": [
        ("grid", lambda p: sorted(set(method_labels.SUBSET_METHODS) | set(method_labels.TRANSITION_METHODS)), None, None),
        ("grid", lambda p: [m + method_labels.INDEPENDENT_ROUND0 for m in ("MAD", "R2-MAD")], None, None)],
    "07_cost": [("grid", lambda p: list(method_labels.COST_METHODS), None, "cost_benchmark")],
    "09_poisoned_memory": [("grid", _poisoned, None, "poison_benchmarks")],
}


@dataclass
class Usage:
    requests: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    overflows: float = 0.0
    capped: float = 0.0

    def add(self, other: "Usage", factor: float = 1.0) -> None:
        for name in ("requests", "prompt_tokens", "completion_tokens", "overflows", "capped"):
            setattr(self, name, getattr(self, name) + factor * getattr(other, name))


@dataclass
class Estimate:
    """What :func:`estimate_profile` found: usage per notebook and per model (scaled to the full splits)."""

    profile: str
    per_notebook: dict[str, Usage] = field(default_factory=dict)
    per_model: dict[str, Usage] = field(default_factory=dict)
    gpu_models: list[str] = field(default_factory=list)
    contexts: dict[str, int | None] = field(default_factory=dict)
    lengths: dict[str, LengthModel] = field(default_factory=dict)
    sample: tuple[int, int] = (0, 0)
    seconds: float = 0.0
    sampled: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # requests, overflows, capped, largest
    #: The grid it walked (:meth:`~r2mad_core.reproduce.grid.ExperimentGrid.settings`): the notebooks' grid, with the
    #: estimating engines and the sampled sizes in place of the models and the splits.
    grid_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_tokens(self) -> float:
        return sum(self.per_model[m].completion_tokens for m in self.gpu_models if m in self.per_model)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_tokens / TOKENS_PER_S / 3600.0


def _snapshot(engine: EstimatingEngine) -> Usage:
    totals = engine.ledger.as_dict().values()
    return Usage(sum(t["requests"] for t in totals), sum(t["prompt_tokens"] for t in totals),
                 sum(t["completion_tokens"] for t in totals), engine.overflows, engine.capped)


def _minus(a: Usage, b: Usage) -> Usage:
    out = Usage()
    out.add(a)
    out.add(b, -1.0)
    return out


def _stand_in(spec: ModelSpec) -> dict[str, Any]:
    """A model entry that answers through an :class:`EstimatingEngine` with the model's context."""
    return {"label": spec.label, "engine": ENGINE_NAME, "model": spec.model or spec.label,
            "options": {"context": spec.options.get("max_model_len")}}


#: What the estimate's grid replaces in the notebooks' grid: the engines and the sizes (everything else is the same).
ESTIMATE_REPLACES = ("models", "memory_models", "embedder", "test_limit", "train_limit", "bootstrap_resamples")


def estimate_grid(profile: Any, scratch: Path, *, data_dir: str | Path | None = None, test_sample: int = 8,
                  train_sample: int = 8) -> ExperimentGrid:
    """The notebooks' grid of ``profile`` from the same constructor
    (:meth:`~r2mad_core.reproduce.grid.ExperimentGrid.from_profile`), with only :data:`ESTIMATE_REPLACES` the
    estimate's: every model (evaluated, large, memory-only) behind an :class:`EstimatingEngine`, the hashing
    embedder, ``test_sample``/``train_sample`` questions, 100 bootstrap resamples; runs and cache in ``scratch``."""
    gpu = [ModelSpec.from_entry(m.model_dump()) for m in profile.spec.models]
    large = [spec for _, spec in large_model_plan([m.model_dump(exclude_none=True) for m in profile.spec.large_models], gpu)
             if spec is not None]
    builders = [ModelSpec.from_entry(m.model_dump()) for m in profile.spec.memory_models]
    return ExperimentGrid.from_profile(
        profile, runs_dir=scratch / "runs", cache_dir=scratch / "cache", data_dir=data_dir,
        models=[_stand_in(s) for s in [*gpu, *large]], memory_models=[_stand_in(s) for s in builders],
        embedder="hashing", test_limit=test_sample, train_limit=train_sample, bootstrap_resamples=100)


def estimate_profile(profile: Any, *, test_sample: int = 8, train_sample: int = 8,
                     data_dir: str | Path | None = None, progress: Callable[[str], None] | None = None) -> Estimate:
    """Walk :data:`NOTEBOOK_PLAN` for ``profile`` (a :class:`~r2mad_core.experiments.profiles.Profile` with its
    overrides, or a packaged name or YAML path) on the notebooks' own grid
    (:meth:`~r2mad_core.reproduce.grid.ExperimentGrid.from_profile`), every model replaced by an
    :class:`EstimatingEngine` (its context = the model's ``max_model_len``), on the first ``test_sample``/
    ``train_sample`` questions, and scale."""
    started = time.perf_counter()
    loaded = load_profile(profile) if isinstance(profile, (str, Path)) else profile
    fields = loaded.parameters({})
    profile = loaded.name
    gpu = [ModelSpec.from_entry(m) for m in fields["models"]]
    large = [spec for _, spec in large_model_plan(fields.get("large_models", []), gpu) if spec is not None]
    builders = [ModelSpec.from_entry(m) for m in fields.get("memory_models") or []]  # build memory only

    # the evaluated models and a memory-only model on vLLM share the GPU (the paper profile: Qwen3-4B-Instruct-2507)
    on_gpu = [m.label for m in gpu] + [m.label for m in builders if m.engine == "vllm"]
    estimate = Estimate(profile=profile, gpu_models=on_gpu, sample=(test_sample, train_sample))
    for spec in [*gpu, *large, *builders]:
        estimate.contexts[spec.label] = spec.options.get("max_model_len")
        estimate.lengths[spec.label] = LengthModel.for_model(spec.model or spec.label)
    factors: dict[tuple[str, str], float] = {}
    for benchmark in fields["benchmarks"]:
        for split, sample in (("test", test_sample), ("train", train_sample)):
            full = len(load(benchmark, split, data_dir, split_rule=loaded.spec.choices["split_rule"]))
            limit = fields.get(f"{split}_limit")
            full = min(full, limit) if limit else full
            factors[(benchmark, split)] = full / min(sample, full)
    with tempfile.TemporaryDirectory(prefix="r2mad-gpu-estimate-") as scratch:
        with estimate_grid(loaded, Path(scratch), data_dir=data_dir, test_sample=test_sample,
                           train_sample=train_sample) as exp:
            estimate.grid_settings = exp.settings()
            def engine(label: str) -> EstimatingEngine:
                spec = next((m for m in exp.memory_models if m.label == label), None) or exp.model(label)
                return exp.engine(spec).backend

            def charge(notebook: str, label: str, benchmark: str, split: str, run: Callable[[], Any]) -> None:
                before = _snapshot(engine(label))
                run()
                delta = _minus(_snapshot(engine(label)), before)
                factor = factors[(benchmark, split)]
                estimate.per_notebook.setdefault(notebook, Usage()).add(delta, factor)
                estimate.per_model.setdefault(label, Usage()).add(delta, factor)

            for notebook, steps in NOTEBOOK_PLAN.items():
                estimate.per_notebook.setdefault(notebook, Usage())
                if progress:
                    progress(notebook)
                for kind, methods, models_field, benchmarks_field in steps:
                    labels = fields[models_field] if models_field else [s.label for s in gpu]
                    if kind == "large":
                        labels = [s.label for s in large]
                    chosen = fields[benchmarks_field] if benchmarks_field else fields["benchmarks"]
                    chosen = [chosen] if isinstance(chosen, str) else list(chosen)
                    for label in labels:
                        spec = exp.model(label)
                        for benchmark in chosen:
                            if kind == "memory":
                                charge(notebook, exp.memory_spec(spec).label, benchmark, "train",
                                       lambda s=spec, b=benchmark: exp.memory(s, b))
                                continue
                            if any(exp.needs_memory(m) for m in methods(fields)):  # the bank is notebook 02's
                                charge("02_memory", exp.memory_spec(spec).label, benchmark, "train",
                                       lambda s=spec, b=benchmark: exp.memory(s, b))
                            charge(notebook, label, benchmark, "test",
                                   lambda s=spec, b=benchmark, m=methods(fields): exp.grid(m, models=[s], benchmarks=[b]))
            for spec in [*gpu, *large, *builders]:
                e = engine(spec.label)
                estimate.sampled[spec.label] = (e.sampled, e.overflows, e.capped, e.largest_prompt)
    estimate.seconds = time.perf_counter() - started
    return estimate


def _tokens(value: float) -> str:
    return f"{value / 1e6:,.1f}M" if value >= 1e6 else f"{value / 1e3:,.0f}K"


def estimate_lines(estimate: Estimate) -> list[str]:
    """The printout: per notebook, per model (with the overflow share), the total and the one GPU-hours figure with
    what it assumes. A list of lines, so that later lines extend it."""
    lines = [f"pre-flight estimate of profile {estimate.profile!r} (the requests are built by the real debate code "
             f"for {estimate.sample[0]} test / {estimate.sample[1]} train questions per benchmark and scaled to the "
             f"full splits; nothing is generated):"]
    total = Usage()
    for notebook, usage in estimate.per_notebook.items():
        total.add(usage)
        lines.append(f"  {notebook}: {usage.requests:,.0f} requests, {_tokens(usage.prompt_tokens)} prompt + "
                     f"{_tokens(usage.completion_tokens)} completion tokens")
    lines.append(f"  total: {total.requests:,.0f} requests, {_tokens(total.prompt_tokens)} prompt + "
                 f"{_tokens(total.completion_tokens)} completion tokens")
    for label, usage in estimate.per_model.items():
        where = "GPU" if label in estimate.gpu_models else "API"
        share = usage.overflows / usage.requests if usage.requests else 0.0
        capped = usage.capped / usage.requests if usage.requests else 0.0
        context = estimate.contexts.get(label)
        built, over, cap, largest = estimate.sampled.get(label, (0, 0, 0, 0))
        seen = f" ({over} and {cap} of {built:,} requests built; largest prompt {largest:,} tokens"
        seen += f", {largest / context:.0%} of the context)" if context else ")"
        lines.append(f"  {label} ({where}, context {f'{context:,}' if context else 'the server'}): {usage.requests:,.0f} "
                     f"requests, {_tokens(usage.completion_tokens)} completion tokens; would overflow the context: "
                     f"{share:.2%}, be capped by it: {capped:.2%}{seen}; lengths: {estimate.lengths[label].describe()}")
    lines.append(
        f"  GPU time: {estimate.gpu_hours:,.1f} GPU-hours (~{estimate.gpu_hours / 24:.1f} GPU-days) on one GPU for the "
        f"{len(estimate.gpu_models)} vLLM models: {_tokens(estimate.gpu_tokens)} generated tokens at "
        f"{TOKENS_PER_S:,.0f} tokens/s (simulated, not measured: benchmarks/throughput.py's virtual-GPU 8B-model rate, window 64; "
        f"the same rate for every model), every cell generated once, none in the cache")
    lines.append(f"  (estimated in {estimate.seconds:.0f} s; prompt tokens = characters/4 + 4 per message)")
    return lines
