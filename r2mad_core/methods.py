"""Methods as configurations of the debate loop (Section 5.1 "Baselines"; Appendix A "Baseline Details").

Every method is a :class:`Method`: a :class:`~r2mad_core.debate.loop.DebateConfig` (agents, personas,
rounds, sampling), a vote rule for the final answer (:mod:`r2mad_core.debate.vote`), and optional
factories for a :class:`~r2mad_core.debate.loop.RoundHook` (R2-MAD, ICL-CoT) and a
:class:`~r2mad_core.debate.loop.PeerSelector` (MAD-M2 masking). The loop is Eq. 1-3 in
:mod:`r2mad_core.debate.loop`.

Paper defaults: 3 agents, 3 rounds (t = 0, 1, 2), temperature 1.0, top_p 1.0; ``max_tokens`` comes
from the profile (the paper uses 6144; the default here, 512, suits the CPU profile).

- ``cot``: one agent (persona 0), one round; the answer is extracted directly.
- ``self_consistency``: ``k_paths`` samples (paper: 9, also 3 and 6) of persona 0's round-0 request
  with ``sample_index`` 0..k-1, plurality vote. CoT == SC path 0 == MAD agent 0 round 0 (same request,
  shared cache).
- ``mad``: Du et al.; ``n_agents`` personas debate ``n_rounds`` rounds, each agent sees every other
  agent's previous response; early stop at unanimity (``stop_at_unanimity``); plurality vote over the
  last executed round. Memory construction uses ``mad(stop_at_unanimity=False, with_summaries=True)``.
- ``mad_m2``: MAD with memory masking (Tian et al.), before each round t > 0:
  ``masking="objective"`` ranks the previous-round responses by mean token log-probability (higher
  = lower perplexity; the engine returns logprobs because the debate requests set
  ``SamplingParams(logprobs=True)``). ``objective_keep="lowest_perplexity"`` (default; the paper's
  Appendix "Comparison of MAD-M2 Masking Strategies": "retains only the response with the lowest
  perplexity", as Tian et al.'s code does) keeps only the best one; ``objective_keep="better_half"``
  (ours, an option) keeps the top ``ceil(n/2)`` responses (2 of 3). Ties in mean log-probability go to the lower
  agent index; a response without logprobs (an engine that cannot return them) or an empty one
  ranks last. ``masking="subjective"``: the same model judges each previous response with
  ``prompts.judge_prompt`` (one batched call per round, tag ``judge``); a ``NO`` verdict masks it,
  ``YES``, ``NOT SURE`` and unparseable verdicts keep it. A masked response is hidden from every
  agent; agent i sees the kept responses of the other agents; an agent that sees none re-solves
  with the task prompt (see :mod:`r2mad_core.debate.loop`).

All methods take ``vote_rule`` (``"plurality"`` or ``"authors_majority_correct"``). Every method but
ICL-CoT takes ``round0`` (``shared``, default, ours: every method starts from MAD's round-0 generations, a
paired comparison; ``independent``: the run draws its own samples, as the paper's separate runs do; see
:class:`~r2mad_core.debate.loop.DebateConfig`). R2-MAD and ICL-CoT take ``experience_reference`` (what of y,
Eq. 4, an experience shows: ``answer``, default, ours; ``solution``, the authors' code; ``none``, ablation).
Every method takes ``task_prompt``: ``paper`` (default, the appendix's single task prompt) or ``authors``
(the authors' code's benchmark-specific wording, :data:`r2mad_core.debate.prompts.AUTHORS_TASK_TEMPLATES`).

Registering a method (from this module or from outside the package): write a builder with keyword-only
options (each with a default, values JSON-serialisable: they go to ``config.json``) that returns a
:class:`Method`, and register it once::

    def my_method(*, n_rounds: int = 3, max_tokens: int = 512) -> Method:
        return Method(name="my_method", debate=DebateConfig(n_agents=3, n_rounds=n_rounds, max_tokens=max_tokens))

    register_method(MethodSpec("my_method", my_method, label="My method"))

The debate settings (:class:`~r2mad_core.debate.settings.DebateSettings`: agents, rounds, sampling, summaries, the
loop's protocol choices) are declared once; a builder takes the ones it uses by name with :func:`debate_keywords`,
which puts them, with their defaults, where the builder declares ``settings`` and checks them::

    @debate_keywords("n_rounds", "temperature", "max_tokens")
    def my_method(*, width: int = 3, settings: DebateSettings) -> Method:
        return Method(name="my_method", debate=DebateConfig.from_settings(settings, n_agents=width))

From outside the package, put the registration in a module and name it in ``R2MAD_PLUGINS`` (see
:mod:`r2mad_core.plugins`): the CLI and the notebooks import it before they read the registry.

``get_method(name, **options)`` checks the option names against the builder's signature, fills in
the defaults and stores them in ``Method.options``; ``make_hook``/``make_peer_selector`` receive a
:class:`RunContext` (benchmark, split, engine, seed, data directory, run directory). A hook is built
before any generation (``experiments.prepare_cell`` builds it even before the engine exists, so its
constructor must not generate) and may define ``check_run`` to refuse a run it cannot serve. A method
that reads files sets ``Method.inputs`` to their content digests (R2-MAD, ICL-CoT: the memory bank's),
which the run directory records.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from r2mad_core.debate import prompts
from r2mad_core.debate.loop import (
    DebateConfig,
    PeerSelector,
    RoundHook,
)
from r2mad_core.debate.masking import (  # noqa: F401  (MAD-M2's peer selection; names kept importable from here)
    JUDGE_TAG,
    MASKING_STRATEGIES,
    OBJECTIVE_KEEP,
    ObjectiveMasking,
    SubjectiveMasking,
    kept_by_logprob,
)
from r2mad_core.debate.settings import (
    DEFAULTS,
    SPECS,
    SUMMARY_SETTINGS,
    VOTE_RULES,
    DebateSettings,
    check_choice,
    check_float,
    check_int,
)
from r2mad_core.engine import Engine
from r2mad_core.memory import retrieval
from r2mad_core.memory.banks import bank_digest, read_manifest
from r2mad_core.memory.confidence import EVIDENCE_LABELS, EVIDENCE_POOLS, PEER_RESPONSE_ROUNDS
from r2mad_core.memory.hook import (
    EXPERIENCE_REFERENCES,
    SIMILARITY_MATCHES,
    IclCotHook,
    R2MadHook,
    R2MadSettings,
    load_memory,
    reference_solutions,
)
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import RECORDED as MEMORY_RECORDED
from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_core.memory.settings import MemorySettings
from r2mad_core.plugins import entry_problem

logger = logging.getLogger(__name__)

#: Options that name a file or folder; a method that reads one records its content digest in ``Method.inputs``.
FILE_OPTIONS = frozenset({"memory"})


@dataclass(frozen=True)
class RunContext:
    """What hook and peer-selector factories may need about the run they serve."""

    benchmark: str
    split: str
    engine: Engine
    seed: int = 0
    data_dir: Path | None = None
    out_dir: Path | None = None


@dataclass(frozen=True)
class Method:
    """A method = a debate-loop configuration + vote rule + optional plug-in factories."""

    name: str
    debate: DebateConfig
    vote_rule: str = "plurality"
    options: Mapping[str, Any] = field(default_factory=dict)
    make_hook: Callable[[RunContext], RoundHook | None] | None = None
    make_peer_selector: Callable[[RunContext], PeerSelector | None] | None = None
    # Content digests of the files the method reads (R2-MAD, ICL-CoT: {"memory_bank_digest": ...}, see
    # memory.bank_digest). A run's config.json records them, so resuming a run after its memory bank was
    # rebuilt is a RunConfigMismatch instead of a transcript that mixes two banks.
    inputs: Mapping[str, str] = field(default_factory=dict)
    # Options this configuration does not read (R2-MAD's Eq. 6 tradeoff under a policy that does not use it): not
    # recorded in config.json, so changing one leaves the run the very same run (:func:`get_method`).
    unread_options: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.vote_rule not in VOTE_RULES:
            raise ValueError(f"method {self.name!r}: unknown vote_rule {self.vote_rule!r}; "
                             f"expected one of {VOTE_RULES}")

    def with_seed(self, seed: int) -> "Method":
        """The same method with the run seed set (``SamplingParams.seed`` of every request)."""
        return replace(self, debate=replace(self.debate, seed=seed))

    def check_benchmark(self, benchmark: str) -> None:
        self.debate.check_benchmark(benchmark)

    def to_dict(self) -> dict[str, Any]:
        """What identifies the method in ``config.json``."""
        return {
            "name": self.name,
            "options": dict(self.options),
            "vote_rule": self.vote_rule,
            "debate": self.debate.to_dict(),
        }


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------
def max_agents() -> int:
    """The number of personas every benchmark has (the most agents a debate can have)."""
    return min(len(personas) for personas in prompts.PERSONAS.values())


def _int_option(method: str, name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    return check_int(f"method {method!r}", name, value, minimum, maximum)


def _float_option(method: str, name: str, value: Any, low: float, high: float, low_open: bool = False) -> float:
    return check_float(f"method {method!r}", name, value, low, high, low_open)


def _choice_option(method: str, name: str, value: Any, choices: Sequence[str]) -> str:
    return check_choice(f"method {method!r}", name, value, choices)


def _check_agents(method: str, settings: DebateSettings) -> None:
    limit = max_agents()
    if settings.n_agents > limit:
        raise ValueError(
            f"method {method!r}: n_agents={settings.n_agents} but the paper gives {limit} personas per benchmark "
            f"(one per agent); use n_agents <= {limit}"
        )


def debate_keywords(*names: str) -> Callable[[Callable[..., Method]], "MethodBuilder"]:
    """Give a builder the debate settings ``names`` (:class:`~r2mad_core.debate.settings.DebateSettings` fields) as
    keyword options, each with the settings' default.

    The builder declares ``settings: DebateSettings`` where those keywords go in its signature (the order of a
    method's options is the order ``config.json`` records them); the decorated builder takes the flat keywords,
    checks each against the one declaration (:meth:`DebateSettings.check`: ``method 'mad': option n_agents must be
    >= 1, found 0``) and calls the builder with one settings object. ``inspect.signature`` of the result lists the
    flat keywords, so :func:`get_method` and :func:`method_options` see them like any other option."""
    return _setting_keywords(DebateSettings, DEFAULTS, "settings", names)


def memory_keywords(*names: str) -> Callable[[Callable[..., Method]], "MethodBuilder"]:
    """The twin of :func:`debate_keywords` for what R2-MAD adds (:class:`~r2mad_core.memory.settings.MemorySettings`
    fields: K, Eq. 6's tradeoff, the thresholds, ...): the builder declares ``memory_settings: MemorySettings`` where
    the keywords go and receives one checked object (bounds checked by the declaration, once). A setting the builder
    names itself with the default ``...`` is placed there instead (``max_experience_chars: int | None = ...``:
    where ``config.json`` has always recorded it); a setting added to the declaration lands at ``memory_settings``."""
    return _setting_keywords(MemorySettings, MEMORY_DEFAULTS, "memory_settings", names)


def _setting_keywords(declaration: Any, defaults: Mapping[str, Any], marker: str,
                      names: Sequence[str]) -> Callable[[Callable[..., Method]], "MethodBuilder"]:
    kind = declaration.__name__
    unknown = [n for n in names if n not in defaults]
    if unknown:
        raise ValueError(f"{kind}: {unknown} are not settings of {kind} ({list(defaults)})")

    def keyword(name: str) -> inspect.Parameter:
        default = defaults[name]
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=type(default).__name__ if default is not None else "None")

    def decorate(builder: Callable[..., Method]) -> MethodBuilder:
        signature = inspect.signature(builder)
        if marker not in signature.parameters:
            raise ValueError(f"{kind} keywords: {builder.__name__} must declare a keyword-only `{marker}` parameter")
        placed = {p.name for p in signature.parameters.values() if p.name in names and p.default is ...}
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name in placed:
                parameters.append(keyword(parameter.name))
            elif parameter.name == marker:
                parameters.extend(keyword(n) for n in names if n not in placed)
            else:
                parameters.append(parameter)

        @functools.wraps(builder)
        def build(**options: Any) -> Method:
            owner = f"method {builder.__name__!r}"
            shared = {n: options.pop(n, defaults[n]) for n in names}
            try:  # checked once, by the declaration, when the object is made
                settings = declaration(**shared)
            except ValueError as exc:
                raise ValueError(str(exc).replace(f"{kind}:", f"{owner}:", 1)) from None
            return builder(**{marker: settings}, **options)

        build.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return build

    return decorate


#: The debate settings each built-in method declares (in :data:`SPECS` order, the order of ``config.json``).
ALL_SETTINGS = tuple(SPECS)
ONE_AGENT_SETTINGS = ("temperature", "top_p", "max_tokens", "vote_rule", "round0", "task_prompt", "unclosed_thinking")
MASKING_SETTINGS = tuple(n for n in SPECS if n not in SUMMARY_SETTINGS)
R2MAD_SETTINGS = tuple(n for n in SPECS if n != "with_summaries")


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------
def _cot_suffix(settings: DebateSettings) -> str:
    """The authors' prompts end a CoT task prompt with a step-by-step line (``task_prompt="authors"``)."""
    return prompts.AUTHORS_COT_SUFFIX if settings.task_prompt == "authors" else ""


@debate_keywords(*ONE_AGENT_SETTINGS)
def cot(*, settings: DebateSettings) -> Method:
    """Chain of Thought: one agent (persona 0), one round."""
    debate = DebateConfig.from_settings(settings, n_agents=1, n_rounds=1, personas=(0,), sample_indices=(0,),
                                        task_suffix=_cot_suffix(settings))
    return Method(name="cot", debate=debate, vote_rule=settings.vote_rule)


@debate_keywords(*ONE_AGENT_SETTINGS)
def self_consistency(*, k_paths: int = 9, settings: DebateSettings) -> Method:
    """Self-Consistency: k samples of persona 0's task prompt (sample_index 0..k-1), one vote."""
    k = _int_option("self_consistency", "k_paths", k_paths, 1)
    debate = DebateConfig.from_settings(settings, n_agents=k, n_rounds=1, personas=(0,) * k,
                                        sample_indices=tuple(range(k)), task_suffix=_cot_suffix(settings))
    return Method(name="self_consistency", debate=debate, vote_rule=settings.vote_rule)


@debate_keywords(*ALL_SETTINGS)
def mad(*, settings: DebateSettings) -> Method:
    """Multi-Agent Debate (Du et al.); ``summaries``/``summary_agents`` apply with ``with_summaries`` (memory
    construction)."""
    _check_agents("mad", settings)
    return Method(name="mad", debate=DebateConfig.from_settings(settings), vote_rule=settings.vote_rule)


@debate_keywords(*MASKING_SETTINGS)
def mad_m2(
    *,
    masking: str = "objective",
    objective_keep: str = "lowest_perplexity",
    judge_max_tokens: int | None = None,
    settings: DebateSettings,
) -> Method:
    """MAD with memory masking (Tian et al.); ``masking`` is ``objective`` or ``subjective``."""
    masking = _choice_option("mad_m2", "masking", masking, MASKING_STRATEGIES)
    objective_keep = _choice_option("mad_m2", "objective_keep", objective_keep, OBJECTIVE_KEEP)
    _check_agents("mad_m2", settings)
    judge_tokens = settings.max_tokens if judge_max_tokens is None else _int_option(
        "mad_m2", "judge_max_tokens", judge_max_tokens, 1
    )
    debate = DebateConfig.from_settings(settings, logprobs=masking == "objective")
    selector: PeerSelector
    if masking == "objective":
        selector = ObjectiveMasking(keep=objective_keep)
    else:
        selector = SubjectiveMasking(max_tokens=judge_tokens)
    return Method(name="mad_m2", debate=debate, vote_rule=settings.vote_rule,
                  make_peer_selector=lambda context: selector)


# --------------------------------------------------------------------------------------------
# R2-MAD and ICL-CoT (the hooks live in r2mad_core.memory.hook)
# --------------------------------------------------------------------------------------------
CONFIDENCE_LABELS, CONFIDENCE_POOLS = EVIDENCE_LABELS, EVIDENCE_POOLS  # the vocabularies of memory/confidence.py


def _memory_option(method: str, memory: Any) -> str:
    """A bank directory whose manifest reads (arrays are verified when the run starts)."""
    if not isinstance(memory, (str, Path)) or not str(memory):
        raise ValueError(f"method {method!r}: option memory must be a memory bank directory, found {memory!r}")
    read_manifest(memory)  # MemoryBankError (a ValueError) names the problem
    return str(memory)


def _memory_inputs(memory: str) -> dict[str, str]:
    """``Method.inputs`` of a method that reads the memory bank in ``memory``."""
    return {"memory_bank_digest": bank_digest(memory)}


@debate_keywords(*R2MAD_SETTINGS)
@memory_keywords(*MEMORY_SPECS)
def r2mad(
    *,
    memory: str,
    use_memory: bool = True,
    use_confidence: bool = True,
    retrieval_policy: str = ...,  # type: ignore[assignment]  # a memory setting, placed where config.json records it
    memory_settings: MemorySettings,
    confidence_label: str = "peer_correctness",
    confidence_pool: str = "retrieved",
    peer_response_round: str = "case",
    embedder: str | None = None,
    max_experience_chars: int | None = ...,  # type: ignore[assignment]  # placed where config.json records it
    experience_reference: str = "answer",
    poison_fraction: float = 0.0,
    poison_seed: int = 0,
    settings: DebateSettings,
    similarity_match: str = "state",
) -> Method:
    """R2-MAD (Section 4): MAD with debate summaries + the memory/confidence round hook.

    ``memory``: a bank directory (``r2mad build-memory``). ``use_memory=False`` is "w/o Memory" (no
    experiences shown, confidence still estimated), ``use_confidence=False`` "w/o Confidence".
    ``memory_settings``: K, the retrieval policy (one of Table 3's), Eq. 6's tradeoff, the fixed lambda,
    the thresholds, how much of a past response is shown, every setting of
    :class:`~r2mad_core.memory.settings.MemorySettings` (its defaults, bounds and docs), as flat options;
    ``confidence_label``/``confidence_pool``/``peer_response_round`` select the authors'-code
    confidence variants (see r2mad_core.memory.confidence); ``embedder`` None = the bank's own;
    ``experience_reference`` what of y (Eq. 4) each experience shows (``answer``: ours, default; ``solution``:
    the authors' code, MATH500's full reference solution; ``none``: y hidden, an ablation);
    ``round0`` see the module docstring; ``poison_fraction`` flips the labels of that share of the cases
    (poisoned-memory experiment). ``similarity_match``: what the Similarity-based policy compares (``question``: the
    paper's "task similarity alone", the question against the cases' questions; ``state``: the authors' code, the debate
    state). ``summaries``, ``summary_agents``, ``empty_peers``, ``unclosed_thinking``: see
    :mod:`r2mad_core.debate.loop`; every protocol choice and its evidence: :mod:`r2mad_lab.experiments.protocol`.
    """
    name = "r2mad"
    memory = _memory_option(name, memory)
    _check_agents(name, settings)
    policy = memory_settings.retrieval_policy
    confidence = {
        "evidence_label": _choice_option(name, "confidence_label", confidence_label, CONFIDENCE_LABELS),
        "evidence_pool": _choice_option(name, "confidence_pool", confidence_pool, CONFIDENCE_POOLS),
        "peer_response_round": _choice_option(name, "peer_response_round", peer_response_round, PEER_RESPONSE_ROUNDS),
    }
    reference = _choice_option(name, "experience_reference", experience_reference, EXPERIENCE_REFERENCES)
    poison = _float_option(name, "poison_fraction", poison_fraction, 0.0, 1.0)
    poison_seed = _int_option(name, "poison_seed", poison_seed, 0)
    debate = DebateConfig.from_settings(settings, with_summaries=True)
    match = _choice_option(name, "similarity_match", similarity_match, SIMILARITY_MATCHES)

    def make_hook(context: RunContext) -> RoundHook:
        bank_set, bank_embedder = load_memory(memory, context.benchmark, embedder, poison, poison_seed)
        hook_settings = R2MadSettings.from_settings(
            memory_settings, seed=context.seed, policy=policy, confidence=confidence, use_memory=bool(use_memory),
            use_confidence=bool(use_confidence), experience_reference=reference, similarity_match=match)
        solutions = reference_solutions(context.benchmark, context.data_dir) if reference == "solution" else None
        return R2MadHook(bank_set, bank_embedder, hook_settings, solutions=solutions)

    return Method(name=name, debate=debate, vote_rule=settings.vote_rule, make_hook=make_hook,
                  inputs=_memory_inputs(memory), unread_options=frozenset(retrieval.POLICIES[policy].unread))


@debate_keywords(*(n for n in ONE_AGENT_SETTINGS if n != "round0"))
@memory_keywords("top_k", "max_experience_chars")
def icl_cot(
    *,
    memory: str,
    memory_settings: MemorySettings,
    match: str = "question",
    embedder: str | None = None,
    max_experience_chars: int | None = ...,  # type: ignore[assignment]  # placed where config.json records it
    experience_reference: str = "answer",
    settings: DebateSettings,
) -> Method:
    """ICL-CoT (Appendix, Table 7): CoT (persona 0, one round) with ``top_k`` experiences of agent 0's bank
    retrieved by question similarity as in-context examples (``match="state"``: the authors' variant,
    question vs stored state embeddings). ``experience_reference`` as for R2-MAD."""
    name = "icl_cot"
    memory = _memory_option(name, memory)
    reference = _choice_option(name, "experience_reference", experience_reference, EXPERIENCE_REFERENCES)
    match = _choice_option(name, "match", match, SIMILARITY_MATCHES)
    debate = DebateConfig.from_settings(settings, n_agents=1, n_rounds=1, personas=(0,), sample_indices=(0,),
                                        task_suffix=_cot_suffix(settings))

    def make_hook(context: RunContext) -> RoundHook:
        bank_set, bank_embedder = load_memory(memory, context.benchmark, embedder)
        solutions = reference_solutions(context.benchmark, context.data_dir) if reference == "solution" else None
        return IclCotHook(bank_set, bank_embedder, memory_settings, match=match, experience_reference=reference,
                          solutions=solutions)

    return Method(name=name, debate=debate, vote_rule=settings.vote_rule, make_hook=make_hook,
                  inputs=_memory_inputs(memory))


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
MethodBuilder = Callable[..., Method]


@dataclass(frozen=True)
class MethodSpec:
    """One registered method: its builder (keyword-only options, each with a default), the name the paper's tables
    use (``label``) and one line on what it is. The builder's signature is the method's declared options: the CLI
    (``--method-option key=value``), the profiles and the notebooks validate against it."""

    name: str
    builder: MethodBuilder
    label: str
    summary: str = ""
    #: The options that make a run another method, a row of the paper's tables (R2-MAD's ``use_confidence``,
    #: ``retrieval_policy``, ...), as opposed to the settings every row of a profile shares (the debate settings, K,
    #: what R2-MAD adds, the protocol choices, the files): they name the run's random stream under
    #: ``round0="independent"`` (:func:`stream_identity`). None: every option that is not a debate setting, a file
    #: or one of :data:`SHARED_SETTINGS` (a registered method's own options).
    stream_options: tuple[str, ...] | None = None


#: name -> spec; :data:`METHODS` is the same registry as name -> builder.
METHOD_SPECS: dict[str, MethodSpec] = {}
METHODS: dict[str, MethodBuilder] = {}


def _registration_problem(spec: MethodSpec) -> str | None:
    """What ``spec`` lacks to be run by name and shown in the tables (None: nothing)."""
    problem = entry_problem(spec.name, METHOD_SPECS, label=spec.label, label_role="its row name in the tables",
                            kind="method")
    if problem is not None:
        return problem
    if not callable(spec.builder):
        return "needs a builder: a function (**options) -> Method"
    for parameter in inspect.signature(spec.builder).parameters.values():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            return f"has option {parameter.name!r}, which must be keyword-only (def builder(*, {parameter.name}=...))"
    return None


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method: it then shows up in ``r2mad run --method``, :func:`get_method`, and the notebooks' grid under
    ``spec.label`` (see :mod:`r2mad_lab.reproduce.grid`)."""
    problem = _registration_problem(spec)
    if problem is not None:
        raise ValueError(f"register_method: method {getattr(spec, 'name', spec)!r} {problem}")
    METHOD_SPECS[spec.name] = spec
    METHODS[spec.name] = spec.builder
    return spec


def unregister_method(name: str) -> None:
    """Remove a registered method (tests and notebooks that add a method for one experiment)."""
    METHOD_SPECS.pop(name, None)
    METHODS.pop(name, None)


for _spec in (
    MethodSpec("cot", cot, "CoT", "Chain of Thought: one agent, one round", stream_options=()),
    MethodSpec("self_consistency", self_consistency, "Self-Consistency", "k samples of one agent, plurality vote",
               stream_options=("k_paths",)),
    MethodSpec("mad", mad, "MAD", "multi-agent debate (Du et al.)", stream_options=()),
    MethodSpec("mad_m2", mad_m2, "MAD-M2", "MAD with memory masking (Tian et al.)",
               stream_options=("masking", "objective_keep")),
    MethodSpec("r2mad", r2mad, "R2-MAD", "MAD + experience memory + confidence (Section 4)",
               stream_options=("use_memory", "use_confidence", "retrieval_policy", "poison_fraction", "poison_seed")),
    MethodSpec("icl_cot", icl_cot, "ICL-CoT", "CoT with retrieved experiences as in-context examples",
               stream_options=()),
):
    register_method(_spec)


def method_options(name: str) -> dict[str, Any]:
    """The options of method ``name`` and their defaults (``inspect.Parameter.empty`` if required)."""
    builder = _builder(name)
    return {p.name: p.default for p in inspect.signature(builder).parameters.values()}


def _builder(name: str) -> MethodBuilder:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; expected one of {sorted(METHODS)}") from None


#: Options added after the run keys were fixed: at their default they stay out of a run's stream and of its recorded
#: options (config.json, a memory bank's manifest), so the runs that do not set them keep their keys, their draws
#: and their banks' digests; set to another value they count like every option. A memory setting added to the
#: declaration after :data:`~r2mad_core.memory.settings.RECORDED` is one too.
STREAM_NEUTRAL_DEFAULTS = ("consensus_rule",)


def get_method(name: str, **options: Any) -> Method:
    """Build method ``name`` with ``options`` (unknown names and bad values raise ValueError)."""
    builder = _builder(name)
    signature = inspect.signature(builder)
    accepted = [p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"method {name!r} does not take option(s) {unknown}; its options are {accepted}")
    try:
        bound = signature.bind(**options)
    except TypeError as exc:
        raise ValueError(f"method {name!r}: {exc}") from None
    bound.apply_defaults()
    method = builder(**bound.arguments)
    if method.debate.round0 == "independent":
        # The run's own sampling stream, named by the method and the options that make it another method (its row:
        # R2-MAD and each ablation draw different samples, as the paper's separate runs do), never by a setting the
        # rows share: a variant (w_low=0.4) draws what the profile's run drew wherever it sends the same request
        # (common random numbers, docs/ablations.md).
        stream = name + ":" + json.dumps(stream_identity(name, bound.arguments), sort_keys=True, default=str)
        method = replace(method, debate=replace(method.debate, stream=stream))
    # recorded: every option but those the configuration does not read and a later protocol choice at its default
    options = {k: v for k, v in bound.arguments.items() if k not in method.unread_options
               and not (k in STREAM_NEUTRAL_DEFAULTS and v == DEFAULTS[k])
               and not (k in MEMORY_DEFAULTS and k not in MEMORY_RECORDED and v == MEMORY_DEFAULTS[k])}
    return replace(method, options=options)


#: Options every row of a profile shares (the profile's settings and protocol choices, not a row of a table): they
#: never name a random stream, also for a registered method that declares them.
#: Every memory setting is one, but the retrieval policy and a policy's own value (the Fixed-lambda row's lambda counts
#: with its row).
SHARED_SETTINGS = (frozenset(MEMORY_SPECS) - {p.parameter for p in retrieval.POLICIES.values()}
                   - {"retrieval_policy"}) | frozenset({
    "embedder", "experience_reference", "confidence_label", "confidence_pool", "peer_response_round",
    "similarity_match", "match", "judge_max_tokens",
})


def stream_identity(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that name a run's random stream under ``round0="independent"``: those that make it another
    method (:attr:`MethodSpec.stream_options`; a retrieval policy's own value, e.g. the Fixed-lambda row's lambda,
    counts with its policy), never a shared setting (:data:`SHARED_SETTINGS`), a debate setting (temperature,
    max_tokens, n_rounds, ...: a request that depends on one says so in its own bytes) or a file (the memory bank:
    what a request retrieves from it is in its bytes).

    So two runs draw the same samples exactly when they are the same row of the paper's tables, and a variant's
    request that equals the profile run's request gets the same generation: the rule of docs/ablations.md."""
    spec = METHOD_SPECS[name]
    if spec.stream_options is None:
        keys = [k for k in options if k not in SPECS and k not in FILE_OPTIONS and k not in SHARED_SETTINGS]
    else:
        keys = list(spec.stream_options)
    identity = {k: options[k] for k in keys if k in options}
    policy = options.get("retrieval_policy")
    parameter = retrieval.POLICIES[policy].parameter if policy in retrieval.POLICIES else None
    if parameter is not None and parameter in options:
        identity[parameter] = options[parameter]
    return identity
