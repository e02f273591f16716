"""make_engine: names, option forwarding, cache wrapping."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from r2mad_lab.engines import ENGINE_NAMES, CachedEngine, Engine, EngineError, Ledger, make_engine


class RecordingSimulated:
    def __init__(self, **options: Any) -> None:
        self.options = options
        self.identity = "simulated:test"
        self.model = "latent-concept"
        self.ledger = Ledger()
        self.closed = False

    def generate(self, requests):  # pragma: no cover - not called here
        return []

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("r2mad_core.theory.agents")
    module.SimulatedEngine = RecordingSimulated  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "r2mad_core.theory.agents", module)


def test_simulated_options_are_forwarded(fake_simulated: None, tmp_path: Path) -> None:
    engine = make_engine("simulated", samples=["s1"], accuracy=0.7)
    assert isinstance(engine, RecordingSimulated) and isinstance(engine, Engine)
    assert engine.options == {"samples": ["s1"], "accuracy": 0.7}
    assert make_engine("simulated", model="m", samples=[]).options == {"samples": [], "model": "m"}
    with make_engine("simulated", cache_dir=tmp_path, samples=[]) as cached:
        assert isinstance(cached, CachedEngine)
        assert (cached.identity, cached.model) == ("simulated:test", "latent-concept")
        backend = cached.backend
    assert backend.closed
    assert (tmp_path / "responses.sqlite").is_file()


def test_unknown_names_and_missing_models_are_rejected() -> None:
    assert ENGINE_NAMES == ("local", "openai", "vllm", "simulated")
    with pytest.raises(ValueError, match=r"unknown engine name 'gpt'; expected one of \('local', 'openai'"):
        make_engine("gpt")
    with pytest.raises(ValueError, match="model is required"):
        make_engine("openai", base_urls="http://127.0.0.1:9/v1")


def test_backend_is_closed_when_the_cache_cannot_open(fake_simulated: None, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    created: list[RecordingSimulated] = []

    class Tracking(RecordingSimulated):
        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            created.append(self)

    sys.modules["r2mad_core.theory.agents"].SimulatedEngine = Tracking  # type: ignore[attr-defined]
    with pytest.raises(EngineError, match="not-a-dir"):  # one line naming the folder (issue 51)
        make_engine("simulated", cache_dir=blocker, samples=[])
    assert created and created[0].closed
