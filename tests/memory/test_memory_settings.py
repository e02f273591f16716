"""What R2-MAD adds is declared once (memory/settings.py), as the debate is (debate/settings.py): the profile schema,
the r2mad method and the method labels take their defaults and bounds from the two declarations."""

from __future__ import annotations

import pytest

from r2mad_core.debate.settings import SPECS as DEBATE_SPECS
from r2mad_core.debate.settings import DebateSettings
from r2mad_core.memory.settings import DEFAULTS, SPECS, MemorySettings
from r2mad_core.methods import method_options
from r2mad_lab.experiments.profiles import ProfileError, load_profile
from r2mad_lab.experiments.run_settings import RunSettings


def test_the_method_and_its_labels_take_the_declared_defaults() -> None:
    declared = method_options("r2mad")
    for name in ("top_k", "gamma", "fixed_lambda", "w_high", "w_low", "max_experience_chars"):
        assert declared[name] == DEFAULTS[name], name
    # the run settings carry one MemorySettings: its defaults, K the protocol preset's (a protocol choice)
    carried = RunSettings().memory
    assert carried.replace(top_k=DEFAULTS["top_k"]) == MemorySettings()
    assert carried.top_k == 1 and RunSettings().replace(top_k=5).memory.top_k == 5
    assert MemorySettings().values() == DEFAULTS


@pytest.mark.parametrize("field, specs", [("top_k", SPECS), ("gamma", SPECS), ("w_high", SPECS),
                                          ("max_experience_chars", SPECS), ("temperature", DEBATE_SPECS),
                                          ("n_agents", DEBATE_SPECS), ("max_tokens", DEBATE_SPECS)])
def test_the_profile_takes_each_bound_from_the_declaration(field: str, specs: dict) -> None:
    high = specs[field].maximum
    past = high + 1 if specs[field].kind == "int" else high + 0.5
    with pytest.raises(ProfileError, match=rf"field '{field}': expected a number <= {high}, found {past}$"):
        load_profile("tiny", {field: past})
    load_profile("tiny", {field: int(high) if specs[field].kind == "int" else high,
                          **({"w_low": 0.45} if field == "w_high" else {})})


def test_one_temperature_bound_for_the_profile_and_the_settings() -> None:
    with pytest.raises(ValueError, match="temperature"):
        DebateSettings(temperature=2.5)
    with pytest.raises(ProfileError, match="temperature"):
        load_profile("tiny", {"temperature": 2.5})
    with pytest.raises(ValueError, match="w_low"):
        MemorySettings(w_high=0.4, w_low=0.5)
