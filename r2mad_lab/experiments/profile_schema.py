"""The profile schema: every field of ``r2mad_lab/profiles/<name>.yaml``, typed, bounded and checked (``ProfileSpec``).

A profile holds every parameter of a reproduction (:mod:`r2mad_lab.reproduce` feeds its fields to the
notebooks as papermill parameters): the models and their engines, the embedder, the benchmarks and how
many of their questions to use, the debate hyperparameters of the paper's Section 5.1 (N = 3 agents,
T = 3 rounds, temperature 1.0, top_p 1.0, max_tokens), the retrieval and confidence hyperparameters
(:class:`~r2mad_core.memory.settings.MemorySettings`: K, Eq. 6's tradeoff, Eq. 7's thresholds; defaults declared) and
which variants each table needs.

:class:`ProfileSpec` is the schema, a pydantic model: types, ranges and the cross-field rules (labels
that must name a model, benchmarks that must be the profile's own, w_l <= w_h) live on its fields, and
every problem becomes one line naming the file, the field, what was expected and what was found
(:func:`validate_profile`). The protocol choices the paper leaves open (or where the authors' code
differs) are optional fields whose vocabularies are defined once, next to their concepts
(:data:`PROTOCOL_FIELDS`). A profile's ``protocol`` (``paper``, the default, or ``authors``) is an overlay: it fills
every such choice the profile leaves unset, once, when the profile is loaded
(:meth:`~r2mad_lab.experiments.run_settings.RunSettings.from_profile`); a choice the profile states explicitly (or
``--set``) is kept. Each choice's one default is its declaration's
(:func:`r2mad_lab.experiments.protocol.declared_default`).
:attr:`ProfileSpec.choices` is the overlaid bundle.

How a profile is found, loaded and overridden is :mod:`r2mad_lab.experiments.profiles`.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal, Mapping

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)

from r2mad_core.data import benchmarks
from r2mad_core.data.benchmarks import SPLIT_RULES
from r2mad_core.debate.loop import (
    EMPTY_PEER_MODES,
    ROUND0_MODES,
    SUMMARY_AGENT_SLOTS,
    SUMMARY_SCHEDULES,
    UNCLOSED_THINKING_MODES,
)
from r2mad_core.debate.overflow import OVERFLOW_POLICIES
from r2mad_core.debate.prompts import TASK_PROMPT_WORDINGS
from r2mad_core.debate.settings import CONSENSUS_RULES, VOTE_RULES, Spec
from r2mad_core.debate.settings import SPECS as DEBATE_SPECS
from r2mad_core.engine import option_problems
from r2mad_core.memory.cases import REWARD_DEFINITIONS, STATE_LAYOUTS
from r2mad_core.memory.confidence import EVIDENCE_LABELS, EVIDENCE_POOLS, PEER_RESPONSE_ROUNDS
from r2mad_core.memory.hook import EXPERIENCE_REFERENCES, SIMILARITY_MATCHES
from r2mad_core.memory.retrieval import parse_retrieval_policy
from r2mad_core.memory.settings import DEFAULTS as MEMORY_DEFAULTS
from r2mad_core.memory.settings import SPECS as MEMORY_SPECS
from r2mad_core.methods import OBJECTIVE_KEEP
from r2mad_core.theory.checks import GRID_PARAMETERS
from r2mad_lab.engines import ENGINES, engine_names
from r2mad_lab.experiments import method_labels
from r2mad_lab.experiments import protocol as protocol_presets
from r2mad_lab.experiments.profile_text import ProfileError

#: Notebook parameters that are paths or the profile's name, set by the runner, never by a profile field.
PATH_PARAMETERS = ("profile", "data_dir", "figures_dir", "runs_dir", "cache_dir")

#: Protocol choices the paper leaves open (or where the authors' code differs): optional profile fields (null or
#: left out: the value of the profile's ``protocol`` preset). Each vocabulary is defined once, in the module of its
#: concept; K (``top_k``) is a number.
PROTOCOL_FIELDS: dict[str, tuple[str, ...]] = {
    "round0": ROUND0_MODES,
    "experience_reference": EXPERIENCE_REFERENCES,
    "task_prompt": TASK_PROMPT_WORDINGS,
    "split_rule": SPLIT_RULES,
    "objective_keep": OBJECTIVE_KEEP,
    "overflow_policy": OVERFLOW_POLICIES,
    "summaries": SUMMARY_SCHEDULES,
    "summary_agents": SUMMARY_AGENT_SLOTS,
    "empty_peers": EMPTY_PEER_MODES,
    "unclosed_thinking": UNCLOSED_THINKING_MODES,
    "consensus_rule": CONSENSUS_RULES,
    "reward_definition": REWARD_DEFINITIONS,
    "state_layout": STATE_LAYOUTS,
    "similarity_match": SIMILARITY_MATCHES,
    "icl_match": SIMILARITY_MATCHES,
    "vote_rule": VOTE_RULES,
    "confidence_label": EVIDENCE_LABELS,
    "confidence_pool": EVIDENCE_POOLS,
    "peer_response_round": PEER_RESPONSE_ROUNDS,
}


# --------------------------------------------------------------------------------------------
# The schema
# --------------------------------------------------------------------------------------------

Text = Annotated[str, Field(strict=True, pattern=r"\S")]  # a string with something in it
#: Bounds a run can honour: a number past them is refused before anything runs, naming the bound.
MAX_QUESTIONS = 1_000_000  # test_limit / train_limit (the largest split has a few thousand questions)
MAX_SEED = 2**32 - 1  # numpy's seeds
MAX_SC_PATHS = 256  # Self-Consistency paths per question (Table 5: up to 9)
MAX_BOOTSTRAP = 100_000  # bootstrap resamples of a CI (the paper's profile: 10,000)
PositiveInt = Annotated[StrictInt, Field(ge=1)]
QuestionCount = Annotated[StrictInt, Field(ge=1, le=MAX_QUESTIONS)]
Number = StrictInt | StrictFloat
Probability = Annotated[Number, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def declared(spec: Spec) -> Any:
    """The pydantic type of a profile field declared by a setting (:class:`~r2mad_core.debate.settings.Spec` of
    :class:`~r2mad_core.debate.settings.DebateSettings` or :class:`~r2mad_core.memory.settings.MemorySettings`):
    its kind and its bounds, taken from the one declaration."""
    bounds: dict[str, Any] = {}
    if spec.minimum is not None:
        bounds["gt" if spec.low_open else "ge"] = spec.minimum
    if spec.maximum is not None:
        bounds["le"] = spec.maximum
    if spec.kind == "int":
        return Annotated[StrictInt, Field(**bounds)]
    if spec.kind == "choice":  # its vocabulary read when checked (a registry a plugin adds to: retrieval_policy)
        def one_of(value: str) -> str:
            if value not in spec.choices:
                raise ValueError(f"one of {tuple(spec.choices)}")
            return value
        return Annotated[StrictStr, AfterValidator(one_of)]
    return Annotated[Number, Field(allow_inf_nan=False, **bounds)]


def _registered_engine(name: str) -> str:
    """A name in the engine registry as it is when the profile is validated (built-ins and plugins' engines)."""
    if name not in ENGINES:
        quoted = [repr(n) for n in engine_names()]
        raise ValueError(", ".join(quoted[:-1]) + " or " + quoted[-1])
    return name


EngineName = Annotated[StrictStr, AfterValidator(_registered_engine)]


def _not_a_field(name: str) -> str:
    if name in ProfileSpec.model_fields or name in PATH_PARAMETERS:
        raise ValueError("a name that is not a profile field or path")
    return name


ExtraName = Annotated[str, AfterValidator(_not_a_field)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _label(text: str) -> str:
    """A model label: its folder under ``runs/<profile>/`` is its slug (lower-case letters, digits and dots), so it
    needs a letter or digit: a label of dots and signs only (``..``) would name a folder outside the profile's."""
    if not re.search(r"[0-9A-Za-z]", text):
        raise ValueError(f"a label with a letter or digit in it (it names the model's run folder), found {text!r}")
    return text


Label = Annotated[Text, AfterValidator(_label)]


class ModelEntry(_Record):
    """One evaluated model (``models[i]``): its table label, engine, model name and engine options;
    ``stands_in_for`` names the paper model it replaces in a small profile (shown as a stand-in, never
    under that name)."""

    label: Label
    engine: EngineName
    model: Annotated[Text | None, Field(validate_default=True)] = None
    options: dict[str, Any] = {}
    stands_in_for: Text | None = None
    base_url_env: Text | None = None
    api_key_env: Text | None = None

    @field_validator("options")
    @classmethod
    def _bounded_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        problems = option_problems(value)
        if problems:
            raise ValueError(problems[0].removeprefix("options."))
        return value

    @field_validator("model")
    @classmethod
    def _named_for_servers(cls, value: str | None, info: ValidationInfo) -> str | None:
        spec = ENGINES.get(info.data.get("engine", ""))
        if value is None and spec is not None and spec.needs_model:
            raise ValueError(f"a model name (engine {info.data['engine']} needs one)")
        return value


class LargeModelEntry(_Record):
    """A row of the large-model table (``large_models[i]``): a model of its own, or ``stand_in``, the
    label of a ``models`` entry whose runs fill the row in a small profile (shown as not run)."""

    label: Label
    stand_in: Text | None = None
    engine: Annotated[EngineName | None, Field(validate_default=True)] = None
    model: Text | None = None
    model_env: Annotated[Text | None, Field(validate_default=True)] = None
    base_url_env: Annotated[Text | None, Field(validate_default=True)] = None
    api_key_env: Text | None = None
    options: dict[str, Any] = {}
    prices: dict[str, float | Text] | None = None  # USD per million tokens and source (reproduce/paper/estimate.py)

    @field_validator("engine")
    @classmethod
    def _engine_or_stand_in(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("stand_in") is not None and value is not None:
            raise ValueError("no engine next to stand_in")
        if "stand_in" in info.data and info.data["stand_in"] is None and value is None:
            raise ValueError(f"one of {engine_names()} (or a stand_in)")
        return value

    @field_validator("model_env")
    @classmethod
    def _model_named(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("engine") is not None and value is None and info.data.get("model") is None:
            raise ValueError("a model name or model_env (an environment variable)")
        return value

    @field_validator("base_url_env")
    @classmethod
    def _url_for_openai(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("engine") == "openai" and value is None:
            raise ValueError("the environment variable holding the base URL")
        return value


def _labels(info: ValidationInfo) -> list[str] | None:
    """The models' labels, or None when ``models`` itself failed (its errors are reported already)."""
    return [m.label for m in info.data["models"]] if "models" in info.data else None


def _subset_of(value: list[str], allowed: list[str] | None, what: str) -> list[str]:
    if allowed is None:  # what it must be a subset of failed validation: reported there
        return value
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise ValueError(f"{what} from {allowed}; unknown: {unknown}")
    if len(set(value)) != len(value):
        raise ValueError("no duplicates")
    return value


#: What R2-MAD adds (Eqs. 5-7): a field per MemorySettings setting, as declared (no profile file changes); K's
#: null: preset's
_MemoryFields = create_model("_MemoryFields", __base__=_Record, **{
    name: (declared(spec) | None, None) if name in protocol_presets.PROFILE_CHOICES or MEMORY_DEFAULTS[name] is None
    else (declared(spec), MEMORY_DEFAULTS[name]) for name, spec in MEMORY_SPECS.items()})


class ProfileSpec(_MemoryFields):  # type: ignore[misc,valid-type]
    """Every field of a profile (the docstring of each group says what it feeds)."""

    # What the profile is and what it costs
    description: Text
    expected_runtime: Text
    expected_runtime_replay: Text | None = None  # a run that replays published generations (docs/performance.md)
    expected_runtime_minutes: Annotated[Number, Field(gt=0, allow_inf_nan=False)]
    # Who debates
    models: Annotated[list[ModelEntry], Field(min_length=1)]
    large_models: list[LargeModelEntry]
    embedder: Text
    # Which questions
    benchmarks: Annotated[list[str], Field(min_length=1)]
    test_limit: QuestionCount | None
    train_limit: QuestionCount | None
    seed: Annotated[StrictInt, Field(ge=0, le=MAX_SEED)]
    # The debate (Section 5.1): kinds and bounds from DebateSettings, the one declaration
    n_agents: declared(DEBATE_SPECS["n_agents"])  # type: ignore[valid-type]
    n_rounds: declared(DEBATE_SPECS["n_rounds"])  # type: ignore[valid-type]
    temperature: declared(DEBATE_SPECS["temperature"])  # type: ignore[valid-type]
    top_p: declared(DEBATE_SPECS["top_p"])  # type: ignore[valid-type]
    max_tokens: declared(DEBATE_SPECS["max_tokens"])  # type: ignore[valid-type]
    summary_max_tokens: declared(DEBATE_SPECS["summary_max_tokens"])  # type: ignore[valid-type]
    # What R2-MAD adds (Eqs. 5-7): _MemoryFields'
    # What each table varies
    sc_paths: Annotated[list[Annotated[StrictInt, Field(ge=1, le=MAX_SC_PATHS)]], Field(min_length=1, max_length=32)]
    retrieval_policies: Annotated[list[str], Field(min_length=1)]
    retrieval_models: Annotated[list[str], Field(min_length=1)]
    retrieval_benchmarks: Annotated[list[str], Field(min_length=1)]
    icl_models: Annotated[list[str], Field(min_length=1)]
    icl_benchmarks: Annotated[list[str], Field(min_length=1)]
    cost_benchmark: str
    poison_fractions: Annotated[list[Probability], Field(min_length=1)]
    poison_benchmarks: Annotated[list[str], Field(min_length=1)]
    bootstrap_resamples: Annotated[StrictInt, Field(ge=100, le=MAX_BOOTSTRAP)]
    extra_parameters: dict[ExtraName, Any]  # more notebook parameters (e.g. the theory notebook's grid sizes)
    # Optional: the API budget guard (r2mad_lab.experiments.budget), the protocol preset and its choices (null or
    # left out: the preset's value), the memory model
    api_budget: StrictBool = False
    protocol: Literal[protocol_presets.PROTOCOLS] = protocol_presets.DEFAULT_PROTOCOL  # type: ignore[valid-type]
    memory_model: Text | None = None  # null: one bank per evaluated model (ours); a label: that model's bank
    # models that only build memory (never evaluated), e.g. the authors' Qwen3-4B
    memory_models: Annotated[list[ModelEntry], Field(validate_default=True)] = []
    round0: Literal[ROUND0_MODES] | None = None  # type: ignore[valid-type]
    experience_reference: Literal[EXPERIENCE_REFERENCES] | None = None  # type: ignore[valid-type]
    task_prompt: Literal[TASK_PROMPT_WORDINGS] | None = None  # type: ignore[valid-type]
    split_rule: Literal[SPLIT_RULES] | None = None  # type: ignore[valid-type]
    objective_keep: Literal[OBJECTIVE_KEEP] | None = None  # type: ignore[valid-type]
    summaries: Literal[SUMMARY_SCHEDULES] | None = None  # type: ignore[valid-type]
    summary_agents: Literal[SUMMARY_AGENT_SLOTS] | None = None  # type: ignore[valid-type]
    empty_peers: Literal[EMPTY_PEER_MODES] | None = None  # type: ignore[valid-type]
    unclosed_thinking: Literal[UNCLOSED_THINKING_MODES] | None = None  # type: ignore[valid-type]
    consensus_rule: Literal[CONSENSUS_RULES] | None = None  # type: ignore[valid-type]
    reward_definition: Literal[REWARD_DEFINITIONS] | None = None  # type: ignore[valid-type]
    state_layout: Literal[STATE_LAYOUTS] | None = None  # type: ignore[valid-type]
    similarity_match: Literal[SIMILARITY_MATCHES] | None = None  # type: ignore[valid-type]
    icl_match: Literal[SIMILARITY_MATCHES] | None = None  # type: ignore[valid-type]
    vote_rule: Literal[VOTE_RULES] | None = None  # type: ignore[valid-type]
    confidence_label: Literal[EVIDENCE_LABELS] | None = None  # type: ignore[valid-type]
    confidence_pool: Literal[EVIDENCE_POOLS] | None = None  # type: ignore[valid-type]
    peer_response_round: Literal[PEER_RESPONSE_ROUNDS] | None = None  # type: ignore[valid-type]
    # a prompt over the context (r2mad_core.debate.overflow): empty (authors' code), trim_experiences, raise
    overflow_policy: Literal[OVERFLOW_POLICIES] | None = None  # type: ignore[valid-type]
    # Optional: methods added to Table 1's rows after the paper's, by label (a registered method's, e.g. a plugin's)
    extra_methods: list[Text] = []

    @field_validator("extra_methods")
    @classmethod
    def _resolvable(cls, value: list[str]) -> list[str]:
        for label in value:
            if label in method_labels.MAIN_METHODS:
                raise ValueError(f"{label!r} is already one of Table 1's rows {list(method_labels.MAIN_METHODS)}")
            method_labels.resolve(label, method_labels.RunSettings(), memory="<memory bank>")  # names the problem
        if len(set(value)) != len(value):
            raise ValueError("no duplicates")
        return value

    @property
    def choices(self) -> dict[str, Any]:
        """Every protocol choice resolved: the preset of ``protocol`` with the profile's explicit choices on top."""
        return protocol_presets.overlay(self.protocol,
                                        {name: getattr(self, name) for name in protocol_presets.PROFILE_CHOICES})

    @field_validator("memory_models")
    @classmethod
    def _memory_models_known(cls, value: list[ModelEntry], info: ValidationInfo) -> list[ModelEntry]:
        labels = _labels(info)
        if labels is None:
            return value
        extra = [m.label for m in value]
        clash = [label for label in extra if label in labels]
        if clash or len(set(extra)) != len(extra):
            raise ValueError(f"labels distinct from the evaluated models' and from each other, found {extra}")
        named = info.data.get("memory_model")
        if named is not None and named not in labels + extra:
            raise ValueError(f"a list holding memory_model {named!r} (it is not one of the models {labels})")
        return value

    @field_validator("models")
    @classmethod
    def _distinct_labels(cls, value: list[ModelEntry]) -> list[ModelEntry]:
        labels = [m.label for m in value]
        if len(set(labels)) != len(labels):
            raise ValueError(f"distinct labels, found {labels}")
        return value

    @field_validator("large_models")
    @classmethod
    def _stand_ins_exist(cls, value: list[LargeModelEntry], info: ValidationInfo) -> list[LargeModelEntry]:
        labels = _labels(info)
        for position, entry in enumerate(value):
            if labels is not None and entry.stand_in is not None and entry.stand_in not in labels:
                raise ValueError(
                    f"large_models[{position}].stand_in to be the label of a models entry ({labels}), not "
                    f"{entry.stand_in!r}"
                )
        return value

    @field_validator("benchmarks")
    @classmethod
    def _known_benchmarks(cls, value: list[str]) -> list[str]:
        return _subset_of(value, list(benchmarks.BENCHMARKS), "benchmark ids")

    @field_validator("w_low")
    @classmethod
    def _thresholds_ordered(cls, value: float, info: ValidationInfo) -> float:
        high = info.data.get("w_high")
        if high is not None and value > high:
            raise ValueError(f"a value <= w_high ({high})")
        return value

    @field_validator("sc_paths")
    @classmethod
    def _increasing(cls, value: list[int]) -> list[int]:
        if list(value) != sorted(set(value)):
            raise ValueError("an increasing list of distinct path counts")
        return value

    @field_validator("retrieval_policies")
    @classmethod
    def _policies(cls, value: list[str]) -> list[str]:
        for policy in value:
            parse_retrieval_policy(policy)  # its ValueError names the problem
        if "state_aware" not in value:
            raise ValueError("a list containing state_aware (the paper's policy)")
        return value

    @field_validator("retrieval_models", "icl_models")
    @classmethod
    def _model_labels(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return _subset_of(value, _labels(info), "model labels")

    @field_validator("retrieval_benchmarks", "icl_benchmarks", "poison_benchmarks")
    @classmethod
    def _profile_benchmarks(cls, value: list[str], info: ValidationInfo) -> list[str]:
        own = info.data.get("benchmarks")
        return _subset_of(value, None if own is None else list(own), "benchmarks of this profile")

    @field_validator("cost_benchmark")
    @classmethod
    def _cost_benchmark(cls, value: str, info: ValidationInfo) -> str:
        own = info.data.get("benchmarks")
        if own is not None and value not in own:
            raise ValueError(f"one of the profile's benchmarks {own}")
        return value



#: Fields every profile states, and the ones it may leave out (their defaults are the schema's).
OPTIONAL_FIELDS = tuple(name for name, f in ProfileSpec.model_fields.items() if not f.is_required())
TOP_LEVEL_FIELDS = tuple(name for name, f in ProfileSpec.model_fields.items() if f.is_required())
MODEL_FIELDS = tuple(ModelEntry.model_fields)
LARGE_MODEL_FIELDS = tuple(LargeModelEntry.model_fields)
assert set(PROTOCOL_FIELDS) <= set(OPTIONAL_FIELDS)


def _where(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _expected(error: Mapping[str, Any]) -> str:
    message = str(error["msg"])
    for prefix in ("Value error, ", "Input should be "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    bound = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if error["type"] in bound:
        limit = next(iter((error.get("ctx") or {}).values()), "")
        return f"a number {bound[error['type']]} {limit}"
    if error["type"] == "string_pattern_mismatch":
        return "a non-empty string"
    if error["type"] in ("int_type", "int_from_float") and error.get("loc", ("",))[-1] != "":
        return "an integer"
    return message


def validated_spec(data: Any, source: str) -> tuple[ProfileSpec | None, list[str]]:
    """``(spec, [])`` for a valid profile, ``(None, problems)`` otherwise (see :func:`validate_profile`)."""
    if not isinstance(data, dict):
        return None, [f"{source}: expected a mapping of fields at the top level, found {type(data).__name__}"]
    extras = data.get("extra_parameters")
    for name, (low, high) in GRID_PARAMETERS.items():  # the theory notebook's grid sizes, within their bounds
        number = extras.get(name, low) if isinstance(extras, dict) else low
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            return None, [f"{source}: field 'extra_parameters.{name}': expected an integer between {low} and {high}, "
                          f"found {number!r}"]
    try:
        return ProfileSpec.model_validate(data), []
    except ValidationError as exc:
        return None, problem_lines(exc, source)


def problem_lines(exc: ValidationError, source: str, field_name: str | None = None) -> list[str]:
    """One line per problem of a validation (of the whole profile, or of one field: ``field_name``)."""
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        loc = (field_name, *error["loc"]) if field_name is not None else tuple(error["loc"])
        where = _where(tuple(p for p in loc
                             if not (isinstance(p, str)
                                     and (p.startswith(("function-", "constrained-")) or p == "[key]"))))
        if error["type"] == "missing":
            lines.append(f"{source}: field {where!r} is missing")
        elif error["type"] == "extra_forbidden":
            if len(loc) == 1:
                known = TOP_LEVEL_FIELDS + OPTIONAL_FIELDS
            else:
                known = MODEL_FIELDS if loc[0] == "models" else LARGE_MODEL_FIELDS
            lines.append(f"{source}: field {where!r}: expected a known field (one of {', '.join(known)}), found an "
                         "unknown field")
        else:
            lines.append(f"{source}: field {where!r}: expected {_expected({**error, 'loc': loc})}, found "
                         f"{error['input']!r}")
    return list(dict.fromkeys(lines))


@functools.cache
def field_type(name: str) -> TypeAdapter:
    """The declared type of one profile field (for a run setting: generated from its declaration, :func:`declared`)."""
    info = ProfileSpec.model_fields[name]
    return TypeAdapter(Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation)  # type: ignore[valid-type]


def invalid_profile(errors: list[str]) -> ProfileError:
    return ProfileError("invalid profile: " + errors[0] if len(errors) == 1 else
                        "invalid profile:\n  " + "\n  ".join(errors))


def validate_profile(data: Any, source: str) -> list[str]:
    """Every problem of a profile's fields (:class:`ProfileSpec`), one line each naming the file, the
    field, what was expected and what was found; ``[]`` when the profile is valid."""
    return validated_spec(data, source)[1]
