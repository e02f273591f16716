"""Protocol presets: every choice the paper's text leaves open or where the authors' code differs, decided by evidence.

The paper (Sections 4-5, Appendix A and its prompts) is the spec where its text speaks. Where it is silent, the
authors' public code (GitHub KylJin/R2-MAD, the code that produced the paper's numbers) is the best evidence of what
was run. Our own choice only where neither says, and labelled ours. Two presets bundle every choice:

- ``paper``: the paper's text where it speaks; where it is silent, the authors' code, unless that code has a bug
  (then ours, and the row says which bug);
- ``authors``: the authors' code everywhere, also where it contradicts the paper's text.

:data:`CHOICES` is the table of evidence: one :class:`Choice` per row, with the value under each preset and the
evidence, printed by ``docs/protocol.md`` (:func:`markdown_table`, ``python -m r2mad_lab.experiments.protocol``). It
declares no setting and no default: each choice names the one declared field it sets (:attr:`Choice.field`: a
:class:`~r2mad_core.debate.settings.DebateSettings` or :class:`~r2mad_core.memory.settings.MemorySettings` field, a
method builder's option, the bank builder's, a profile field), whose declaration holds its one default
(:func:`declared_default`). A preset is an overlay (:func:`overlay`): it fills only the choices a user left unset,
by the profile loader (:meth:`r2mad_lab.experiments.run_settings.RunSettings.from_profile`: a choice null or left out
of a profile) and by ``r2mad run --protocol`` (an option not given), never after; a choice set explicitly (a profile
field, ``--set``, a method option) is kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from r2mad_core.data.benchmarks import SPLIT_RULES
from r2mad_core.debate.overflow import OVERFLOW_POLICIES
from r2mad_core.debate.settings import DEFAULTS as DEBATE_DEFAULTS
from r2mad_core.debate.settings import SPECS as DEBATE_SPECS
from r2mad_core.memory.hook import SIMILARITY_MATCHES
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_core.methods import method_options as declared

PROTOCOLS = ("paper", "authors")
DEFAULT_PROTOCOL = "paper"
AUTHORS_REPO = "KylJin/R2-MAD"


@dataclass(frozen=True)
class Choice:
    """One protocol choice.

    ``name``: the profile field (and, by default, the method option) it sets; ``option``: the method option name when
    it differs (``icl_match`` sets ICL-CoT's ``match``); ``level``: ``method`` (a method option, passed to every
    method that declares it), ``memory`` (how the memory banks are built), ``profile`` (which questions / which
    model, read by the grid); ``values``: every allowed value (None: any, e.g. K); ``paper``/``authors``: the
    value under each preset; ``basis``: where the ``paper`` value comes from (``paper``, ``authors``, ``ours``);
    ``evidence``: the paper's section or its silence; ``code``: the authors' file; ``note``: why, when not obvious.
    """

    name: str
    what: str
    paper: Any
    authors: Any
    basis: str
    evidence: str
    code: str
    values: tuple[Any, ...] | None = None
    level: str = "method"
    option: str | None = None
    note: str = ""

    @property
    def method_option(self) -> str:
        return self.option or self.name

    @property
    def field(self) -> str:
        """Where the one declared field this choice sets lives: ``debate`` (a
        :class:`~r2mad_core.debate.settings.DebateSettings` field), ``memory`` (a
        :class:`~r2mad_core.memory.settings.MemorySettings` field), ``method`` (the option of every method builder
        that declares it), ``bank`` (the bank builder's, :func:`r2mad_core.memory.banks.build_bank_set`) or
        ``profile`` (a profile field only)."""
        if self.name in DEBATE_SPECS:
            return "debate"
        if self.name in MEMORY_SPECS:
            return "memory"
        return {"method": "method", "memory": "bank", "profile": "profile"}[self.level]

    def value(self, protocol: str) -> Any:
        return self.paper if check_protocol(protocol) == "paper" else self.authors


CHOICES: tuple[Choice, ...] = (
    Choice(
        "top_k", "K, cases retrieved per agent and round (Eq. 5)", 1, 1, "authors",
        "silent; Table 10 fits K = 1 (R2-MAD minus MAD debate tokens: +0.97K / +0.88K per query on Qwen2.5-7B / "
        "Gemma-3-4B; with our prompts about +1.2K at K = 1, +3.5K at K = 3)",
        "scripts/batch_run_r2mad.sh (--n_retrieval 1; run_cot.py's ICL-CoT default --n_retrieval 1)",
        note="also the declaration's one default (MemorySettings.top_k): a method built without a preset and "
             "`r2mad run` without --protocol run K = 1 too; at K = 1 the MMR redundancy term is empty and lambda_t > 0 "
             "scales every score alike: lambda_t cannot change the pick (notebook 04 also runs K = 3)",
    ),
    Choice(
        "summaries", "debate summaries h^(t): after which rounds", "every_round", "every_round", "paper",
        "Limitations: 'Each round requires summarizing the current debate state'; Table 10 Summary Tok. "
        "(2.25K per query on Qwen2.5-7B) counts every executed round",
        "src/multi_agent_debate.py (_run_debate_round ends with _summarize_debate_state, the last round too, when "
        "--if_summarize_state: memory collection and R2-MAD; MAD runs without summaries)",
        values=("every_round", "before_next_round"),
        note="before_next_round (ours, earlier default): only when a round t+1 follows; same accuracy, a third of "
             "the summary tokens",
    ),
    Choice(
        "summary_agents", "the summary prompt's `{AGENT_RESPONSES}` slot", "authors", "authors", "authors",
        "silent (Appendix 'Debate Summary Prompt' shows the slot, not its content)",
        "src/multi_agent_debate.py (_summarize_debate_state: response, answer, previous answer, stance changed)",
        values=("authors", "responses"),
        note="responses (ours, earlier default): each agent's response only",
    ),
    Choice(
        "empty_peers", "a peer's empty response at round t > 0", "drop", "drop", "authors",
        "silent", "src/agent.py (_build_prompt keeps a peer only `if ... and resp`)",
        values=("drop", "show"), note="show (ours, earlier default): an empty `<other_solution>` block",
    ),
    Choice(
        "unclosed_thinking", "a response whose `<think>` block never closes (cut by max_tokens)", "drop", "keep",
        "ours",
        "silent", "src/multi_agent_debate.py (remove_think_tags removes closed `<think>...</think>` only)",
        values=("drop", "keep"),
        note="the authors' behaviour is a bug under 'paper': remove_think_tags is meant to hide the reasoning, but its "
             "regex misses a block cut by max_tokens, so peers read raw partial reasoning and an answer is parsed "
             "from it; drop (ours) keeps only the text before `<think>` (usually nothing)",
    ),
    Choice(
        "round0", "round 0: one draw shared by every method, or each method its own", "independent", "independent",
        "authors", "silent (each method is a separate run, Section 5.1)",
        "run_cot.py, run_mad.py (one run per method; nothing is shared)",
        values=("shared", "independent"),
        note="shared (ours): a paired comparison, kept as notebook 06's paired analysis. As executed under both "
             "presets: the debates (CoT, Self-Consistency, MAD, MAD-M2, R2-MAD) run and record independent; "
             "ICL-CoT takes no round0 option and runs and records shared (its one round on the run seed's stream); "
             "the bank debates run and record shared (MAD's one stream on the training questions, which no other "
             "run asks; the bank's manifest holds their config.json's record)",
    ),
    Choice(
        "experience_reference", "y (Eq. 4) as shown in a retrieved experience", "solution", "solution", "authors",
        "silent (Eq. 4 holds y; no rendering is given)",
        "src/utils/memory_utils.py (_build_value_text: `<example_solution>` holds query.solution: MATH500's solution "
        "field; for multiple choice src/utils/data_utils.py format_question sets the solution to the answer letter)",
        values=("answer", "solution", "none"),
        note="solution: MATH500's reference solution; multiple choice has none: the letter with its option text "
             "(ours; under task_prompt=authors the letter alone, as the authors' code); answer is ours",
    ),
    Choice(
        "reward_definition", "the reward r_i(e) that MMR weighs (Eq. 5)", "final_vote", "round_correctness", "paper",
        "Section 4.2: r_i is 'the outcome reward', 'whether a concluded debate reached a good answer', beside "
        "zeta_i^(t), the round's correctness",
        "src/retrieval_policy.py (mmr_select and PositiveOnlyPolicy's filter read response_correct, which "
        "memory_utils._build_meta_data sets to the case's own round correctness is_current_correct = zeta_i^(t); "
        "final_correct, the gold-reading 'more agents right than wrong' of run(), is stored and never read)",
        values=("final_vote", "agent_final", "round_correctness"), level="memory",
        note="the text names the concluded debate's outcome; the code uses zeta_i^(t) instead. final_vote (ours): "
             "the plurality vote of the last round is correct",
    ),
    Choice(
        "state_layout", "the text embedded as the debate state s_i^(t)", "full", "authors", "paper",
        "Eq. 2: s_i^(t) = <x, z_i^(t-1), h^(t-1), Cons(Z^(t-1))>; Appendix A encodes 'the current debate state'",
        "src/agent.py (_build_query_text) and src/utils/memory_utils.py (_build_embedding_text): question, previous "
        "response, previous summary, one per line; no consensus",
        values=("full", "authors"), level="memory",
        note="authors leaves out an empty part; the authors' query text keeps an empty previous response as an empty "
             "line (_build_query_text tests `is not None`), their memory side drops it (one newline, listed below)",
    ),
    Choice(
        "similarity_match", "the Similarity-based policy of Table 3: what is compared", "question", "state", "paper",
        "Section 5.2 RQ3: 'similarity-based selection on task similarity alone'",
        "src/retrieval_policy.py (SimilarityPolicy: the top K of the 3K candidates by the debate-state embedding)",
        values=SIMILARITY_MATCHES,
    ),
    Choice(
        "icl_match", "ICL-CoT: what the question is compared with", "question", "state", "paper",
        "Appendix A Baselines: 'retrieval here is keyed on task similarity'",
        "run_cot.py, src/chain_of_thought.py, src/agent.py (retrieve_first_round: _build_query_text of the question "
        "alone against Debater-0's stored debate-state embeddings, similarity policy, --n_retrieval 1)",
        values=SIMILARITY_MATCHES, option="match",
    ),
    Choice(
        "vote_rule", "the final answer", "plurality", "authors_majority_correct", "paper",
        "Appendix A: 'majority voting is performed over the responses of all agents'",
        "src/multi_agent_debate.py (run: correct when more agents are right than wrong; reads the gold answer; "
        "Self-Consistency in src/chain_of_thought.py uses another rule, listed below)",
        values=("plurality", "authors_majority_correct"),
    ),
    Choice(
        "confidence_label", "the correctness averaged in c_{j,i} (Eq. 7)", "peer_correctness",
        "retrieving_agent_correctness", "paper", "Eq. 7: zeta_j(e_{i,k}), agent j's correctness in the experience",
        "src/agent.py (_estimate_confidences_cached: the case's response_correct, the retrieving agent i's round "
        "correctness)",
        values=("peer_correctness", "retrieving_agent_correctness", "outcome_reward"),
    ),
    Choice(
        "confidence_pool", "the cases c_{j,i} averages over", "retrieved", "candidates", "paper",
        "Eq. 7: k = 1..K over the retrieved E_i^(t)",
        "src/agent.py (batch_retrieve_all: the whole 3K candidate pool the policy returns)",
        values=("retrieved", "candidates"),
    ),
    Choice(
        "peer_response_round", "which past response of peer j is compared (Eq. 7)", "case", "state", "paper",
        "Eq. 7: z_j(e_{i,k}), j's response in the experience",
        "src/agent.py (_estimate_confidences_cached: peer j's stored response at the case's current_round - 1, "
        "the round of the case's state; similarity clipped at 0)", values=("case", "state"),
    ),
    Choice(
        "task_prompt", "the prompts' words and layout: system, task, debate, summary prompts, the question, the peers "
        "header, the confidence annotations, the retrieved experiences", "paper", "authors", "paper",
        "Appendix 'Prompts': the system, task, debate and summary prompts ('identical except for the required output "
        "format', `\\boxed{[answer]}`); Section 4.3 and Appendix A: the annotation's meaning and its "
        "`<confidence></confidence>` tags; silent on the question's layout, the peers header and an experience's "
        "rendering",
        "src/prompts.py (MAD_SYS_PROMPTS: MATH500's `\\boxed{{answer}}` never formatted; TASK_PROMPT, DEBATE_PROMPT, "
        "DEBATE_SUMMARY_PROMPT); src/utils/data_utils.py (format_question: `Question: {question}\\n\\n{options}`); "
        "src/agent.py (_build_prompt: the peers header 'with your confidences', the annotations, the `<examples>` "
        "block); src/utils/memory_utils.py (_build_value_text); src/multi_agent_debate.py (_summarize_debate_state: "
        "answers as src/checker.py parses them, lower-case letters, '' for none); src/chain_of_thought.py (CoT's "
        "step-by-step line)",
        values=("paper", "authors"),
        note="paper: the appendix's prompts verbatim; where it is silent ours, kept from before (the question as the "
             "benchmark gives it, the peers header 'with your confidence in each', annotations worded after "
             "Section 4.3, our experience tags with the debate summary, consensus ratio, parsed answer and outcome)",
    ),
    Choice(
        "consensus_rule", "the consensus ratio Cons(Z) (Eq. 3, lambda_t, the summary prompt) and the early stop",
        "equivalent_answers", "authors_reads_gold", "paper",
        "Eq. 3: the fraction agreeing on the most frequent extracted answer; Appendix A: 'early stopping is applied "
        "if all agents reach consensus'",
        "src/multi_agent_debate.py (_check_consensus: reads the gold answer -- every agent correct is consensus 1.0; "
        "else the lower-cased answer strings, a missing answer is '' and agrees with the other missing ones, "
        "consensus at ratio >= 0.8)",
        values=("equivalent_answers", "authors_reads_gold"),
        note="equivalent_answers: checker-equivalent answers agree, a missing answer agrees with nothing, stop at "
             "unanimity; the gold answer is never read during a debate",
    ),
    Choice(
        "split_rule", "which questions are train and test", "paper", "authors", "paper",
        "Section 5.1 and Appendix A: MATH500 level 5 = test; the counts of the benchmark table (Engineering 727/242)",
        "prepare_data.py (random.seed(42), first 75% train: Engineering 726/243)", values=("paper", "authors"),
        level="profile",
    ),
    Choice(
        "objective_keep", "MAD-M2 objective masking: what is kept", "lowest_perplexity", "lowest_perplexity", "paper",
        "Appendix 'Comparison of MAD-M2 Masking Strategies': 'retains only the response with the lowest perplexity'",
        "none (the repository has no MAD-M2; Tian et al.'s code, HongduanTian/MAD-MM _objective_prune, keeps the "
        "responses above the round's median perplexity value, a count its stored versions differ on)",
        values=("lowest_perplexity", "better_half"),
    ),
    Choice(
        "overflow_policy", "a prompt longer than the model's context", "empty", "empty", "authors",
        "silent", "src/models.py (LanguageModel: a prompt longer than max_model_len, 24576 in configs.yaml, is skipped "
        "before generation and its response is ''; OpenRouterLanguageModel: a failed request gives '')",
        values=OVERFLOW_POLICIES, level="profile",
        note="counted apart in every caption and manifest (context_overflow); trim_experiences (ours) leaves out the "
             "oldest retrieved experiences until the prompt fits, raise (ours) stops the run",
    ),
    Choice(
        "memory_model", "the model whose debates fill the memory banks", "shared", "shared", "authors",
        "silent ('running the full debate procedure on the training set')",
        "scripts/run_collect_memory.sh, scripts/batch_run_r2mad.sh (Qwen3-4B-Instruct-2507 for every model)",
        level="profile",
        note="shared: the profile's memory_model (a label of models or memory_models; the paper profile: "
             "Qwen3-4B-Instruct-2507, not evaluated); a profile with memory_model null builds one bank per model "
             "(ours)",
    ),
)

#: The generation lengths a preset sets where no profile does (``r2mad run`` / ``r2mad build-memory``): the authors'
#: code generates every call, debate turns and summaries alike, with one ``SamplingParams(max_tokens=6144)``
#: (src/models.py, ``LanguageModel.__init__``; configs.yaml sets no max_tokens). ``paper``: the command's own
#: defaults (512 / 128, sized for a CPU; the paper profile sets 6144 / 6144).
AUTHORS_MAX_TOKENS = 6144
SAMPLING_LENGTHS: dict[str, dict[str, int]] = {
    "paper": {},
    "authors": {"max_tokens": AUTHORS_MAX_TOKENS, "summary_max_tokens": AUTHORS_MAX_TOKENS},
}


def sampling_lengths(protocol: str) -> dict[str, int]:
    """The max_tokens / summary_max_tokens a preset sets on the command line (:data:`SAMPLING_LENGTHS`)."""
    return dict(SAMPLING_LENGTHS[check_protocol(protocol)])


BY_NAME: dict[str, Choice] = {choice.name: choice for choice in CHOICES}
#: Choices a profile sets as its own fields (None in a profile: the preset's value).
PROFILE_CHOICES = tuple(c.name for c in CHOICES if c.name != "memory_model")


def check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol: expected one of {PROTOCOLS}, found {protocol!r}")
    return protocol


def preset(protocol: str) -> dict[str, Any]:
    """Every choice's value under ``protocol`` (``memory_model`` excluded: the profile names the model)."""
    check_protocol(protocol)
    return {c.name: c.value(protocol) for c in CHOICES if c.name in PROFILE_CHOICES}


def overlay(protocol: str, explicit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every choice: the one set explicitly (not None), else the preset's (a preset fills only what is unset)."""
    values = preset(protocol)
    for key, value in (explicit or {}).items():
        if key not in BY_NAME:
            raise ValueError(f"unknown protocol choice {key!r}: expected one of {list(BY_NAME)}")
        if value is not None:
            values[key] = value
    return values


#: The former name of :func:`overlay`.
resolve = overlay


def declared_default(name: str) -> Any:
    """The one default of choice ``name``, read from the declaration of the field it sets (:attr:`Choice.field`):
    what runs where no preset fills it (a method built without one, ``r2mad run`` without ``--protocol``, a run's
    ``config.json`` read back without the option)."""
    choice = BY_NAME[name]
    if choice.field == "debate":
        return DEBATE_DEFAULTS[name]
    if choice.field == "memory":
        return MEMORY_DEFAULTS[name]
    if choice.field == "method":
        from r2mad_core.methods import METHOD_SPECS

        found = {declared(m)[choice.method_option] for m in METHOD_SPECS if choice.method_option in declared(m)}
        if len(found) != 1:
            raise ValueError(f"choice {name}: the methods that declare {choice.method_option} give defaults {found}")
        return found.pop()
    if choice.field == "bank":
        import inspect

        from r2mad_core.memory.banks import build_bank_set

        return inspect.signature(build_bank_set).parameters[name].default
    return PROFILE_DEFAULTS[name]


#: The defaults of the choices that are profile fields only (which questions, a prompt over the context, the model
#: whose debates fill the banks): the first of each vocabulary, what the data loader, the cell runner and the grid take.
PROFILE_DEFAULTS: dict[str, Any] = {"split_rule": SPLIT_RULES[0], "overflow_policy": OVERFLOW_POLICIES[0],
                                    "memory_model": None}


def method_options(method_name: str, protocol: str, explicit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The method options a preset sets for a registered method: every ``method``-level choice the method declares
    (``summaries`` and ``summary_agents`` only where it writes summaries), under its option name."""
    accepted = declared(method_name)
    values = overlay(protocol, explicit)
    options = {}
    for choice in CHOICES:
        if choice.level == "method" and choice.method_option in accepted:
            options[choice.method_option] = values[choice.name]
    return options


def memory_options(protocol: str, explicit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """How the memory banks are built under a preset: the bank options (reward, state layout) and the options of
    the memory-construction debates (summaries, prompts, empty peers, thinking)."""
    values = overlay(protocol, explicit)
    debate = {k: values[k] for k in ("summaries", "summary_agents", "empty_peers", "unclosed_thinking", "task_prompt")}
    if values["consensus_rule"] != BY_NAME["consensus_rule"].paper:  # a later choice: the paper's keeps bank keys
        debate["consensus_rule"] = values["consensus_rule"]
    return {
        "reward_definition": values["reward_definition"],
        "state_layout": values["state_layout"],
        "debate_options": debate,
    }


def help_text() -> str:
    """One line for ``--protocol``."""
    differ = [c.name for c in CHOICES if c.paper != c.authors]
    return (f"protocol preset: paper (the paper's text where it speaks, else the authors' code {AUTHORS_REPO} "
            f"unless a bug, else ours) or authors (the authors' code everywhere); they differ in {', '.join(differ)}; "
            "see docs/protocol.md. An option given explicitly beats the preset")


def _cell(value: Any) -> str:
    return f"`{value}`"


def markdown_table() -> str:
    """The preset table of ``docs/protocol.md``: one row per choice, its value under each preset, the evidence."""
    lines = [
        "| choice | what | `paper` | `authors` | basis of `paper` | the paper | the authors' code ("
        + AUTHORS_REPO + ") |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in CHOICES:
        basis = c.basis + (f" ({c.note})" if c.note else "")
        lines.append(
            f"| `{c.name}` | {c.what} | {_cell(c.paper)} | {_cell(c.authors)} | {basis} | {c.evidence} | {c.code} |"
        )
    return "\n".join(lines) + "\n"


TABLE_BEGIN = "<!-- protocol table: generated by `python -m r2mad_lab.experiments.protocol docs/protocol.md` -->"
TABLE_END = "<!-- end of the protocol table -->"


def render_into(text: str) -> str:
    """``text`` with the part between :data:`TABLE_BEGIN` and :data:`TABLE_END` replaced by :func:`markdown_table`."""
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start == -1 or end == -1 or end < start:
        raise ValueError(f"expected the markers {TABLE_BEGIN!r} and {TABLE_END!r} around the table")
    return text[: start + len(TABLE_BEGIN)] + "\n" + markdown_table() + text[end:]


def reason(choice: Choice, protocol: str) -> str:
    """Why ``choice`` has its value under ``protocol``: the paper's words, the authors' file, or ours and why."""
    if check_protocol(protocol) == "authors":
        return f"the authors' code, {choice.code}"
    if choice.basis == "paper":
        return f"the paper: {choice.evidence}"
    if choice.basis == "authors":
        return f"the paper is silent; the authors' code, {choice.code}"
    return f"ours: {choice.note}"


def changed(protocol: str, choices: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """One sentence per named choice: its value in this run and why (for a notebook's generated text)."""
    sentences = []
    for name in names:
        c = BY_NAME[name]
        value = choices.get(name, c.value(protocol))
        why = (f"set explicitly, overriding the {protocol} preset's {c.value(protocol)}" if value != c.value(protocol)
               else f"the {protocol} preset; {reason(c, protocol)}")
        sentences.append(f"{c.what[0].upper() + c.what[1:]}: {value} ({why}).")
    return sentences


def main(argv: list[str] | None = None) -> int:
    """``python -m r2mad_lab.experiments.protocol [FILE]``: print the table, or rewrite it inside FILE."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stdout.write(markdown_table())
        return 0

    path = Path(args[0])
    path.write_text(render_into(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
