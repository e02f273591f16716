"""The debate settings: ONE declaration of every knob of the debate loop (Section 5.1, Appendix A; Eqs. 1-3).

:class:`DebateSettings` is a frozen dataclass; each field is declared once with :func:`setting`: its default, its
bounds or vocabulary and a one-line doc (citing the paper where it speaks). Everything else reads it:

- the method builders of :mod:`r2mad_core.methods` take their shared keywords from it
  (:func:`r2mad_core.methods.debate_keywords` writes them into each builder's signature, so
  ``get_method(name, **options)`` and ``method_options(name)`` see the same flat names as before), and validate
  them with :meth:`DebateSettings.check` (also the checks behind the methods' own ``_int_option``/``_choice_option``:
  :func:`check_int`, :func:`check_float`, :func:`check_choice`);
- :meth:`r2mad_core.debate.loop.DebateConfig.from_settings` builds the loop's configuration (whose defaults and
  checks are these);
- the grid (:class:`r2mad_lab.reproduce.grid.ExperimentGrid`) carries one settings object, memory construction
  (:func:`r2mad_lab.experiments.build_memory.build_memory`) takes it;
- the command line generates its flags from the fields (``flag``, help text = ``doc``;
  :func:`r2mad_lab.cli.common.add_setting_arguments`).

Which settings a profile sets is :data:`PROFILE_SETTINGS`; the protocol choices among them (``round0``,
``task_prompt``, ``summaries``, ...) have their per-preset values and evidence in
:mod:`r2mad_lab.experiments.protocol`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from r2mad_core.debate import prompts

#: Round 0 (option ``round0``): shared (default; ours, the paper is silent) replays one round 0 across methods
#: (a paired comparison); independent draws a per-method round 0 (the paper's separate runs).
ROUND0_MODES = ("shared", "independent")
#: Summaries (option ``summaries``): after every executed round (the paper and the authors' code) or only before a
#: next round (ours). The other vocabularies: the summary prompt's agent slot, empty peers, unclosed thinking.
SUMMARY_SCHEDULES = ("every_round", "before_next_round")
SUMMARY_AGENT_SLOTS = prompts.SUMMARY_AGENT_SLOTS
EMPTY_PEER_MODES = ("drop", "show")
UNCLOSED_THINKING_MODES = ("drop", "keep")
#: Consensus ratio and early stop (option ``consensus_rule``): Eq. 3 over checker-equivalent answers, stop at unanimity
#: (the paper), or the authors' ``_check_consensus``, which reads the gold answer (:mod:`r2mad_core.debate.loop`).
CONSENSUS_RULES = ("equivalent_answers", "authors_reads_gold")
#: How the final answer is taken from the last round (:mod:`r2mad_core.debate.vote`).
VOTE_RULES = ("plurality", "authors_majority_correct")


# --------------------------------------------------------------------------------------------
# Checks (one wording for every option of every method)
# --------------------------------------------------------------------------------------------
def check_int(owner: str, name: str, value: Any, minimum: int | None = 1, maximum: int | None = None) -> int:
    """``value`` if it is an integer within the bounds, else ValueError ``"<owner>: option <name> must be ..."``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}: option {name} must be an integer, found {value!r}")
    if minimum is not None and value < minimum:  # the bound it breaks, as the profile's messages name it
        raise ValueError(f"{owner}: option {name} must be >= {minimum}, found {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{owner}: option {name} must be <= {maximum}, found {value}")
    return value


def check_float(owner: str, name: str, value: Any, low: float, high: float, low_open: bool = False) -> float:
    """``float(value)`` if it is a number in ``[low, high]`` (``(low, high]`` with ``low_open``), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise ValueError(f"{owner}: option {name} must be a number, found {value!r}")
    v = float(value)
    if v > high or v < low or (low_open and v == low):
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{owner}: option {name} must be in {interval}, found {value}")
    return v


def check_choice(owner: str, name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``, else ValueError."""
    if value not in choices:
        raise ValueError(f"{owner}: option {name} must be one of {tuple(choices)}, found {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# The declaration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """What a field of :class:`DebateSettings` accepts: ``kind`` int, float, bool or choice; bounds or vocabulary;
    ``doc`` (one line, the CLI help); ``flag`` (the command-line flag; for a bool the flag that sets the non-default
    value, ``flag_doc`` its help)."""

    kind: str
    doc: str
    flag: str
    flag_doc: str = ""
    minimum: float | None = None
    maximum: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] = ()

    def check(self, owner: str, name: str, value: Any) -> Any:
        """``value`` checked (not converted: what a method records in ``config.json`` is what it was given)."""
        if self.kind == "int":
            return check_int(owner, name, value, None if self.minimum is None else int(self.minimum),
                             None if self.maximum is None else int(self.maximum))
        if self.kind == "float":
            check_float(owner, name, value, float(self.minimum or 0.0), float(self.maximum or math.inf), self.low_open)
            return value
        if self.kind == "choice":
            return check_choice(owner, name, value, self.choices)
        return value  # bool: any value, read by truth (as the builders always did)


def setting(default: Any, doc: str, *, kind: str | None = None, flag: str | None = None, **bounds: Any) -> Any:
    """One field of :class:`DebateSettings`: its default and :class:`Spec` (kind from the default unless given)."""
    if kind is None:
        kind = "bool" if isinstance(default, bool) else "int" if isinstance(default, int) else (
            "float" if isinstance(default, float) else "choice")
    return dataclasses.field(default=default, metadata={"spec": Spec(kind=kind, doc=doc, flag=flag or "", **bounds)})


@dataclass(frozen=True)
class DebateSettings:
    """Every setting of the debate loop, with the paper's values as defaults where it gives them (Section 5.1:
    3 agents, 3 rounds, temperature 1.0, top_p 1.0; max_tokens 6144 in the paper, 512 here, the profile sets it)."""

    n_agents: int = setting(3, "agents n, one persona each (Section 5.1; paper: 3; at most 64)", flag="--n-agents",
                            minimum=1, maximum=64)
    n_rounds: int = setting(3, "rounds t = 0..T-1 (Section 5.1; paper: 3; at most 64)", flag="--n-rounds", minimum=1,
                            maximum=64)
    temperature: float = setting(1.0, "sampling temperature (Appendix A; paper: 1.0; at most 2, as OpenAI-compatible "
                                 "servers accept)", flag="--temperature", minimum=0.0, maximum=2.0)
    top_p: float = setting(1.0, "nucleus sampling top_p (Appendix A; paper: 1.0)", flag="--top-p", minimum=0.0,
                           maximum=1.0, low_open=True)
    max_tokens: int = setting(512, "max new tokens per response (default: 512, sized for a CPU; --protocol "
                              "authors sets 6144, the authors' SamplingParams; --protocol paper keeps 512; the "
                              "paper profile sets 6144, Section 5.1's; at most 1M)",
                              flag="--max-tokens", minimum=1, maximum=1_048_576)
    stop_at_unanimity: bool = setting(True, "stop a debate when all agents agree (Cons = 1, Eq. 3; memory "
                                      "construction debates all rounds, Appendix A)", flag="--no-early-stop",
                                      flag_doc="debate all rounds even when the agents agree (MAD methods)")
    with_summaries: bool = setting(False, "generate debate summaries h^(t) (Eq. 2; R2-MAD and memory construction "
                                   "always do)", flag="--with-summaries",
                                   flag_doc="generate debate summaries h^(t) (MAD; Eq. 2)")
    summary_max_tokens: int = setting(128, "max tokens of a debate summary h^(t) (default: 128; under --protocol "
                                      "authors: 6144; the paper does not say)", flag="--summary-max-tokens", minimum=1,
                                      maximum=1_048_576)
    vote_rule: str = setting("plurality", "final answer rule: plurality over equivalent answers (Appendix A, "
                             "default) or authors_majority_correct (the authors' code)", flag="--vote-rule",
                             choices=VOTE_RULES)
    round0: str = setting("shared", "round 0: shared (default; ours, the paper is silent) = every method replays "
                          "MAD's round-0 generations (paired comparison); independent = this run draws its own round 0 "
                          "(the paper's separate runs)", flag="--round0", choices=ROUND0_MODES)
    task_prompt: str = setting("paper", "task/debate prompt wording: paper (default; the appendix's one prompt, "
                               "'math question' for every benchmark) or authors (the authors' code's "
                               "benchmark-specific wording)", flag="--task-prompt",
                               choices=prompts.TASK_PROMPT_WORDINGS)
    summaries: str = setting("before_next_round", "when summaries h^(t) are written: every_round (the paper's "
                             "Limitations and the authors' code) or before_next_round (ours: only when round t+1 "
                             "follows)", flag="--summaries", choices=SUMMARY_SCHEDULES)
    summary_agents: str = setting("responses", "the summary prompt's agent slot: responses (ours) or authors (the "
                                  "authors' code: response, answer, previous answer, stance change)",
                                  flag="--summary-agents", choices=SUMMARY_AGENT_SLOTS)
    empty_peers: str = setting("show", "a peer's empty response at round t > 0: show (ours, an empty block) or drop "
                               "(the authors' code)", flag="--empty-peers", choices=EMPTY_PEER_MODES)
    unclosed_thinking: str = setting("drop", "a response whose <think> never closed: drop (ours: the text before the "
                                     "tag) or keep (the authors' code: the partial reasoning)",
                                     flag="--unclosed-thinking", choices=UNCLOSED_THINKING_MODES)
    consensus_rule: str = setting("equivalent_answers", "consensus ratio and early stop: equivalent_answers (Eq. 3 "
                                  "over checker-equivalent answers, stop at unanimity) or authors_reads_gold (the "
                                  "authors' code: answer strings, ratio >= 0.8, or every agent correct by the gold "
                                  "answer)", flag="--consensus-rule", choices=CONSENSUS_RULES)

    def __post_init__(self) -> None:
        for name, spec in specs():
            spec.check("DebateSettings", name, getattr(self, name))

    # -- the declaration, read -------------------------------------------------------------------
    @staticmethod
    def check(owner: str, name: str, value: Any) -> Any:
        """Check one setting's value for ``owner`` (e.g. ``"method 'mad'"``); ValueError names the option."""
        return SPECS[name].check(owner, name, value)

    def values(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """``{name: value}`` of ``names`` (default: every setting), in declaration order when ``names`` is None."""
        return {name: getattr(self, name) for name in (names if names is not None else SPECS)}

    def replace(self, **changes: Any) -> "DebateSettings":
        unknown = sorted(set(changes) - set(SPECS))
        if unknown:
            raise TypeError(f"DebateSettings: unknown setting(s) {unknown}; expected some of {list(SPECS)}")
        return dataclasses.replace(self, **changes)


def specs() -> Iterator[tuple[str, Spec]]:
    """``(name, spec)`` of every setting, in declaration order."""
    for f in dataclasses.fields(DebateSettings):
        yield f.name, f.metadata["spec"]


#: name -> :class:`Spec`, in declaration order.
SPECS: dict[str, Spec] = dict(specs())
#: Every setting's default.
DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(DebateSettings)}
SAMPLING = ("temperature", "top_p", "max_tokens")
#: The settings a profile states (the notebooks' parameters); the protocol choices come from the preset.
PROFILE_SETTINGS = ("n_agents", "n_rounds", "temperature", "top_p", "max_tokens", "summary_max_tokens")
#: The settings that only matter when the debate writes summaries h^(t) (Eq. 2).
SUMMARY_SETTINGS = ("with_summaries", "summary_max_tokens", "summaries", "summary_agents")
#: The loop choices of :mod:`r2mad_lab.experiments.protocol` (method level) among the settings.
LOOP_CHOICES = ("summaries", "summary_agents", "empty_peers", "unclosed_thinking", "consensus_rule")
