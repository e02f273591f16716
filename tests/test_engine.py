"""The request key and the prompt id hash remembered message bytes (issue 35): the bytes must be json.dumps' own.

Every cache key (and so every seed a simulated or replayed completion is drawn from) is the SHA-256 of this JSON:
one byte different and every published cache misses and every table changes.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from r2mad_core import engine as base
from r2mad_core.debate.loop import prompt_id
from r2mad_core.engine import Request, SamplingParams, hash_messages

TEXTS = [
    "",
    "plain",
    'quotes " and \\ backslashes \\boxed{12}',
    "newlines\nand\ttabs\r and a form feed \f and \x00 \x1f controls",
    "unicode: é ü 中文 🙂 \u2028 \u2029",
    "a lone surrogate \ud800",
    "A" * 5000,
]


def _reference_key(request: Request, identity: str, model: str) -> str:
    """The key as json.dumps writes it (the code before issue 35's change)."""
    payload = {
        "seed_scheme": base.SEED_SCHEME,
        "engine": identity,
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in request.messages],
        "params": {name: getattr(request.params, name) for name in
                   ("temperature", "top_p", "max_tokens", "seed", "logprobs")},
        "sample_index": request.sample_index,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _conversations() -> list[list[dict]]:
    out = [[{"role": "user", "content": text}] for text in TEXTS]
    out.append([{"role": "system", "content": TEXTS[4]}, {"role": "user", "content": TEXTS[2]},
                {"role": "assistant", "content": TEXTS[3]}, {"role": "user", "content": TEXTS[2]}])
    out.append([{"role": "user", "content": ["a list", {"type": "text"}], "name": "ignored"}])  # not a str
    out.append([{"role": "user", "content": None}])
    return out


class _Bytes:
    """A stand-in digest that keeps what it is fed."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def update(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def fed(self) -> bytes:
        return b"".join(self.parts)


def _fed(messages, sort_keys=False) -> bytes:
    digest = _Bytes()
    hash_messages(digest, messages, sort_keys=sort_keys)
    return digest.fed()


@pytest.mark.parametrize("sort_keys", [False, True])
def test_hash_messages_feeds_the_bytes_of_json_dumps(sort_keys):
    for messages in _conversations():
        expected = json.dumps([{"role": m["role"], "content": m["content"]} for m in messages],
                              ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
        try:
            expected_bytes = expected.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8: hashing fails as json.dumps' bytes did
            with pytest.raises(UnicodeEncodeError):
                _fed(messages, sort_keys)
            continue
        assert _fed(messages, sort_keys) == expected_bytes
        assert _fed(messages, sort_keys) == expected_bytes  # again, from the memo
    assert _fed([]) == b"[]"


def test_the_request_key_is_the_sha256_of_json_dumps():
    params = [SamplingParams(), SamplingParams(temperature=0.7, top_p=0.95, max_tokens=6144, seed=3, logprobs=True),
              SamplingParams(temperature=0.0),
              # equal to the first and to the third, written apart in JSON ("1" and "1.0"): two keys, as before
              SamplingParams(temperature=1, top_p=1), SamplingParams(temperature=0)]
    for messages in _conversations():
        for p in params:
            for sample_index in (0, 7, True):  # True == 1 and is written "true"
                request = Request(messages=tuple(messages), params=p, sample_index=sample_index)
                for identity, model in (("simulated:v1", "simulated-latent-concept"), ("local:é\"x", "m")):
                    try:
                        expected = _reference_key(request, identity, model)
                    except UnicodeEncodeError:  # a lone surrogate has no UTF-8: the key fails as it did
                        with pytest.raises(UnicodeEncodeError):
                            request.key(identity, model)
                        continue
                    assert request.key(identity, model) == expected


def test_a_known_key_and_prompt_id_are_unchanged():
    """Two values computed with json.dumps before the change (at 49cac8b): a published cache stays valid."""
    messages = ({"role": "system", "content": "You are a careful solver."},
                {"role": "user", "content": "What is 2 + 2? Answer as \\boxed{x}. Ünïcode \"quoted\""})
    request = Request(messages=messages, params=SamplingParams(temperature=1.0, max_tokens=512), sample_index=2)
    assert request.key("simulated:0", "simulated-latent-concept") == (
        "c4f118ff2881895ad097ea5dfb32444df81066b27deb04eadc9d27a675297056")
    assert prompt_id(messages) == "b7e6206eddc9fb56"


def test_the_memo_keeps_two_generations_of_texts(monkeypatch):
    monkeypatch.setattr(base, "_texts", {})
    monkeypatch.setattr(base, "_older_texts", {})
    monkeypatch.setattr(base, "_texts_bytes", 0)
    monkeypatch.setattr(base, "_TEXTS_MAX_BYTES", 100)
    for index in range(20):
        messages = [{"role": "user", "content": f"text {index} \"q\" " + "x" * 30}]
        assert _fed(messages) == json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        assert _fed(messages, sort_keys=True) == json.dumps(messages, ensure_ascii=False, separators=(",", ":"),
                                                            sort_keys=True).encode("utf-8")
    assert base._texts_bytes <= 100 + 50  # the newer generation: full at ~100 bytes, then it becomes the older
    assert 0 < len(base._older_texts) <= 4
    assert "user" in base._texts or "user" in base._older_texts


def test_a_growing_conversations_keys_resume_from_its_last_prefix_and_equal_json_dumps(monkeypatch):
    """Issue 52: a debate's conversation grows a turn a round; its key resumes the SHA-256 state of the shorter
    conversation hashed before instead of hashing from the start. The keys are json.dumps' own at every length, for
    two engines at once (two heads), after the stored states are dropped, and with a turn changed in the middle."""
    monkeypatch.setattr(base, "_PREFIX_STATES_KEPT", 5)
    conversation = [{"role": "system", "content": TEXTS[2]}]
    for turn, text in enumerate([t for t in TEXTS if "\ud800" not in t] * 2):  # no JSON text encodes a lone surrogate
        conversation.append({"role": "user" if turn % 2 == 0 else "assistant", "content": f"{text} {turn}"})
        request = Request(messages=tuple(conversation), params=SamplingParams(max_tokens=8, seed=turn))
        for identity in ("engine-a", "engine-b"):
            assert request.key(identity, "m") == _reference_key(request, identity, "m")
    assert any(len(pairs) > 1 for _, pairs in base._prefix_states)  # states were stored and resumed
    changed = conversation[:3] + [{"role": "user", "content": "another turn"}] + conversation[4:]
    request = Request(messages=tuple(changed), params=SamplingParams(max_tokens=8))
    assert request.key("engine-a", "m") == _reference_key(request, "engine-a", "m")
