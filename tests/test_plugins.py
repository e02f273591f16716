"""Extensions from outside the package (r2mad_core.plugins): one module registers a method and a policy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from r2mad_core import plugins, retrieval
from r2mad_core.methods import METHOD_SPECS, METHODS, get_method, unregister_method

PLUGIN = '''
from r2mad_core.debate import DebateConfig
from r2mad_core.methods import Method, MethodSpec, register_method
from r2mad_core.retrieval import POLICIES, PolicySpec, register_policy


def two_agent_debate(*, n_rounds: int = 2, max_tokens: int = 64) -> Method:
    return Method(name="toy_two_agents", debate=DebateConfig(n_agents=2, n_rounds=n_rounds, max_tokens=max_tokens))


register_method(MethodSpec("toy_two_agents", two_agent_debate, label="Two-agent debate"))
register_policy(PolicySpec("toy_similarity", "Toy similarity", POLICIES["similarity"].select))
'''


def test_a_plugin_file_registers_a_method_and_a_policy(tmp_path: Path) -> None:
    path = tmp_path / "toy_plugin.py"
    path.write_text(PLUGIN)
    try:
        modules = plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(path)})
        assert len(modules) == 1
        assert plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(path)}) == modules  # imported once
        assert METHOD_SPECS["toy_two_agents"].label == "Two-agent debate"
        method = get_method("toy_two_agents", n_rounds=1)
        assert method.debate.n_agents == 2 and method.options == {"n_rounds": 1, "max_tokens": 64}
        assert retrieval.parse_retrieval_policy("toy_similarity") == ("toy_similarity", None)
    finally:
        unregister_method("toy_two_agents")
        retrieval.POLICIES.pop("toy_similarity", None)
        plugins._loaded.clear()
        sys.modules.pop("r2mad_plugin_toy_plugin", None)
    assert "toy_two_agents" not in METHODS


def test_a_broken_plugin_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(plugins.PluginError, match=r"broken.py' failed to import: RuntimeError: no GPU here"):
        plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(path)})
    with pytest.raises(plugins.PluginError, match="does not exist"):
        plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: str(tmp_path / "missing.py")})
    with pytest.raises(plugins.PluginError, match="'no_such_module_r2mad' failed to import"):
        plugins.load_plugins({plugins.ENVIRONMENT_VARIABLE: "no_such_module_r2mad"})
