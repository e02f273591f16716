"""Models of a profile: one evaluated model (:class:`ModelSpec`) and the paper's larger models (Table 9).

A :class:`ModelSpec` is a ``models`` entry of a profile (:class:`r2mad_lab.experiments.profile_schema.ModelEntry`): its
label as in the tables, its engine, model name and engine options, and the paper model it stands in for. What
identifies it in run keys (:meth:`ModelSpec.describe`) leaves out the options that only change speed
(:data:`SPEED_OPTIONS`). Its :attr:`~ModelSpec.title` says what ran (engine and model) for figures; a stand-in
is named only in captions (:attr:`~ModelSpec.stand_in_note`). The paper states no equation here: these are the
models of Section 5.1 and Appendix C.6.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from r2mad_core.theory import agents as simulated_agents

#: Engine options that change how fast generations come, never what they are: they stay out of run
#: directory keys, so tuning threads or slots keeps every finished run.
SPEED_OPTIONS = frozenset({
    "threads", "parallel_slots", "context_per_slot", "max_concurrency", "startup_timeout_seconds",
    "request_timeout_seconds", "max_retries", "server_log_verbosity", "timeout_seconds", "connect_timeout_seconds",
    "initial_backoff_seconds", "max_backoff_seconds", "tensor_parallel_size", "gpu_memory_utilization", "chunk_size",
})

#: ``${NAME}`` in a profile's model or endpoint field: the environment variable ``NAME``, read only when the engine is
#: opened (:meth:`ModelSpec.resolved`); every record keeps the text ``${NAME}``.
ENVIRONMENT_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: The engine options that may hold ``${NAME}`` (an endpoint).
ENDPOINT_OPTIONS = ("base_url", "base_urls")


def substituted(value: Any, label: str, option: str) -> Any:
    """``value`` with each ``${NAME}`` replaced by the environment variable ``NAME`` (strings, and lists of them);
    a variable that is not set is a ``RuntimeError`` naming the model, the option and the variable."""
    if isinstance(value, list):
        return [substituted(v, label, option) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def value_of(match: re.Match[str]) -> str:
        text = os.environ.get(match.group(1), "").strip()
        if not text:
            raise RuntimeError(f"model {label!r}: environment variable {match.group(1)} (its {option}) is not set; "
                               "export it before running (see the profile file)")
        return text

    return ENVIRONMENT_VARIABLE.sub(value_of, value)


#: How a figure names the engine a model ran on (``ModelSpec.title``).
ENGINE_TITLES = {"simulated": "simulated agents", "local": "local engine, llama.cpp", "vllm": "vLLM",
                 "openai": "OpenAI-compatible API", "rehearsal": "REHEARSAL stand-in, not this model's answers"}


@dataclass(frozen=True)
class ModelSpec:
    """One model of a profile: its label (as in the tables), engine, model name and engine options.

    ``stands_in_for``: the paper model whose numbers this model's are compared with.
    ``environment``: option name -> environment variable, resolved when the engine is opened
    (API models: ``model``, ``base_urls``).
    """

    label: str
    engine: str
    model: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    stands_in_for: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], models: Sequence["ModelSpec"] = ()) -> "ModelSpec":
        """A profile ``models`` or ``large_models`` entry; a ``stand_in`` entry becomes the named model
        standing in for the entry's label."""
        if "stand_in" in entry:
            by_label = {m.label: m for m in models}
            if entry["stand_in"] not in by_label:
                raise ValueError(f"model entry {entry['label']!r}: stand_in {entry['stand_in']!r} is not one of "
                                 f"{list(by_label)}")
            base = by_label[entry["stand_in"]]
            return cls(base.label, base.engine, base.model, dict(base.options), entry["label"], dict(base.environment))
        environment = {}
        if entry.get("model_env"):
            environment["model"] = entry["model_env"]
        if entry.get("base_url_env"):
            environment["base_urls"] = entry["base_url_env"]
        options = dict(entry.get("options") or {})
        if entry.get("api_key_env"):
            options["api_key_env"] = entry["api_key_env"]
        return cls(
            label=str(entry["label"]), engine=str(entry["engine"]), model=entry.get("model"),
            options=options, stands_in_for=entry.get("stands_in_for"), environment=environment,
        )

    @property
    def paper_model(self) -> str:
        return self.stands_in_for or self.label

    @property
    def title(self) -> str:
        """What ran, for axis titles and legends: ``Simulated (simulated agents)``,
        ``SmolLM2-135M-Instruct (local engine)``. The paper model it stands in for goes in captions
        (:attr:`stand_in_note`), never here."""
        return f"{self.label} ({ENGINE_TITLES.get(self.engine, self.engine + ' engine')})"

    @property
    def stand_in_note(self) -> str:
        """``"Simulated (simulated agents) stands in for Qwen2.5-7B-Instruct"`` or ``""``."""
        return f"{self.title} stands in for {self.stands_in_for}" if self.stands_in_for else ""

    def resolved(self) -> tuple[str | None, dict[str, Any]]:
        """``(model, options)`` with the environment variables filled in (error naming a missing one); a model named by
        a variable comes with ``options["recorded_model"]``, the ``${NAME}`` run records show instead of its value."""
        model = substituted(self.model, self.label, "model")
        options = {k: (substituted(v, self.label, k) if k in ENDPOINT_OPTIONS else v) for k, v in self.options.items()}
        if model != self.model:  # records name the variable (engine.recorded_model), never its value
            options["recorded_model"] = self.model
        if "model" in self.environment:
            options["recorded_model"] = f"${{{self.environment['model']}}}"
        for option, variable in self.environment.items():
            value = os.environ.get(variable)
            if not value:
                raise RuntimeError(
                    f"model {self.label!r}: environment variable {variable} (its {option}) is not set; "
                    f"export it before running (see the profile file)"
                )
            if option == "model":
                model = value
            else:
                options[option] = value
        return model, options

    def describe(self) -> dict[str, Any]:
        """What identifies the model in run configurations: engine, model, the options that can change
        its outputs (not the speed knobs of :data:`SPEED_OPTIONS`), environment variables by name."""
        options = {k: v for k, v in self.options.items() if k not in SPEED_OPTIONS}
        described = {"label": self.label, "engine": self.engine, "model": self.model,
                     "options": options, "environment": dict(self.environment)}
        if self.model and ENVIRONMENT_VARIABLE.search(self.model):
            # a model named by ``${NAME}`` is recorded by the variable's name; its value only as a digest, so runs of
            # two models under one variable never share a folder
            try:
                value = substituted(self.model, self.label, "model")
            except RuntimeError:
                value = ""
            if value:
                described["model_digest"] = hashlib.sha256(value.encode()).hexdigest()[:16]
        if self.engine == "simulated":
            # the simulated agents' behaviour version: a changed simulator gets new run directories
            # (its transcripts are not the old ones); real engines are identified by model and options

            described["simulator"] = simulated_agents.MODEL_VERSION  # looked up now (tests change it)
        return described


def large_model_plan(entries: Sequence[Mapping[str, Any]],
                     models: Sequence[ModelSpec]) -> list[tuple[str, ModelSpec | None]]:
    """The paper's larger models (Table 9) of a profile: ``(paper model, spec)`` for each ``large_models``
    entry, ``spec = None`` for an entry that only names a ``stand_in`` (the profile has no such model:
    its rows say :data:`NOT_RUN` rather than repeat another model's runs under this name)."""
    plan: list[tuple[str, ModelSpec | None]] = []
    for entry in entries:
        if "stand_in" in entry:
            ModelSpec.from_entry(entry, models)  # still validates the name it points at
            plan.append((str(entry["label"]), None))
        else:
            plan.append((str(entry["label"]), ModelSpec.from_entry(entry, models)))
    return plan
