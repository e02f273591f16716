"""Per-agent memory banks M_i: the cases of Eq. 4 with their embeddings; build, poison a copy, save and load.

Agent i's bank M_i holds its memory cases e_i^(t) = < s_i^(t), Z^(t), y, zeta_i^(t), r_i > (Eq. 4,
``eq:memory_case`` of the paper; the records, the debate state s_i^(t) of Eq. 2, its text and encoding and the
outcome reward r_i are :mod:`r2mad_core.memory.cases`) and, row for row, the embeddings retrieval (Eq. 5-6)
and confidence (Eq. 7) compare against: the state s_i^(t), every response of Z^(t) and of Z^(t-1). The bank
options (``reward_definition``, ``state_layout``, ``state_encoding``) are described in
:mod:`r2mad_core.memory.cases`; the audit of a bank is :mod:`r2mad_core.memory.audit`.

On disk, a bank set is one folder: ``manifest.json`` (format version, benchmark, split, model, embedder name
and dimension, n_agents, the options above, case counts per agent, sha256/shape/dtype of every file) and,
per agent, ``agent_<i>/cases.jsonl`` plus ``state_embeddings.npy`` [N, d], ``response_embeddings.npy``
[N, n, d] (embeddings of Z^(t)) and ``previous_response_embeddings.npy`` [N, n, d] (Z^(t-1)), float32, unit
rows. :meth:`MemoryBankSet.load` verifies all of it. :func:`bank_digest` identifies a bank set by its
content (the manifest without its creation time and free-form metadata: it lists the sha256 of every file), so
a run's ``config.json`` can tell a rebuilt bank from the one the run started with.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from r2mad_core.files import atomic_write, file_sha256, file_stamps
from r2mad_core.memory.cases import (
    STATE_ENCODINGS,
    STATE_LAYOUTS,
    DebateRecord,
    MemoryCase,
    cases_from_debate,
    encode_states,
)
from r2mad_core.memory.embeddings import Embedder

logger = logging.getLogger(__name__)

FORMAT_NAME = "r2mad-memory-bank"
FORMAT_VERSION = 1
ARRAY_FILES = ("state_embeddings.npy", "response_embeddings.npy", "previous_response_embeddings.npy")
CASES_FILE = "cases.jsonl"
MANIFEST_FILE = "manifest.json"


class MemoryBankError(ValueError):
    """A bank folder that cannot be used: the message names the file and what was expected/found."""


# ------------------------------------------------------------------------------------------------
# Banks
# ------------------------------------------------------------------------------------------------
@dataclass
class MemoryBank:
    """Agent i's memory bank M_i: cases and their contiguous float32 embedding matrices.

    ``state_embeddings`` [N, d]; ``response_embeddings`` [N, n, d] (z_j(e), every agent's response in Z^(t));
    ``previous_response_embeddings`` [N, n, d] (Z^(t-1)). ``rewards`` [N], ``correct`` [N, n] and
    ``previous_correct`` [N, n] are float32 arrays derived from the cases.
    """

    agent_index: int
    cases: list[MemoryCase]
    state_embeddings: np.ndarray
    response_embeddings: np.ndarray
    previous_response_embeddings: np.ndarray
    rewards: np.ndarray = field(init=False, repr=False)
    correct: np.ndarray = field(init=False, repr=False)
    previous_correct: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n_cases = len(self.cases)
        self.state_embeddings = np.ascontiguousarray(self.state_embeddings, dtype=np.float32)
        self.response_embeddings = np.ascontiguousarray(self.response_embeddings, dtype=np.float32)
        self.previous_response_embeddings = np.ascontiguousarray(self.previous_response_embeddings, dtype=np.float32)
        if self.state_embeddings.ndim != 2 or self.state_embeddings.shape[0] != n_cases:
            raise MemoryBankError(
                f"agent {self.agent_index}: state_embeddings must be [{n_cases}, d], "
                f"found {self.state_embeddings.shape}"
            )
        d = self.state_embeddings.shape[1]
        n_agents = len(self.cases[0].responses) if self.cases else self.response_embeddings.shape[1]
        for name in ("response_embeddings", "previous_response_embeddings"):
            arr = getattr(self, name)
            if arr.shape != (n_cases, n_agents, d):
                raise MemoryBankError(
                    f"agent {self.agent_index}: {name} must be [{n_cases}, {n_agents}, {d}], found {arr.shape}"
                )
        for k, case in enumerate(self.cases):
            if case.agent_index != self.agent_index:
                raise MemoryBankError(
                    f"agent {self.agent_index}: case {k} ({case.case_id}) belongs to agent {case.agent_index}"
                )
        self.refresh_labels()

    def refresh_labels(self) -> None:
        """Recompute ``rewards``/``correct``/``previous_correct`` from the cases."""
        n_agents = self.response_embeddings.shape[1]
        self.rewards = np.array([c.reward for c in self.cases], dtype=np.float32).reshape(-1)
        self.correct = np.array([c.correct for c in self.cases], dtype=np.float32).reshape(-1, n_agents)
        self.previous_correct = np.array(
            [c.previous_correct or (False,) * n_agents for c in self.cases], dtype=np.float32
        ).reshape(-1, n_agents)

    def __len__(self) -> int:
        return len(self.cases)

    @property
    def dim(self) -> int:
        return int(self.state_embeddings.shape[1])

    @property
    def n_agents(self) -> int:
        return int(self.response_embeddings.shape[1])

    def evidence(self, evidence_label: str, peer_response_round: str) -> tuple[np.ndarray, np.ndarray]:
        """(historical response embeddings [N, n, d], labels [N, n]) for the confidence options (Eq. 7)."""
        if peer_response_round not in ("case", "state"):
            raise ValueError(f"unknown peer_response_round {peer_response_round!r}: expected 'case' or 'state'")
        history = self.response_embeddings if peer_response_round == "case" else self.previous_response_embeddings
        if evidence_label == "peer_correctness":
            labels = self.correct if peer_response_round == "case" else self.previous_correct
        elif evidence_label == "retrieving_agent_correctness":
            labels = np.repeat(self.correct[:, self.agent_index : self.agent_index + 1], self.n_agents, axis=1)
        elif evidence_label == "outcome_reward":
            labels = np.repeat(self.rewards[:, None], self.n_agents, axis=1)
        else:
            raise ValueError(f"unknown evidence_label {evidence_label!r}")
        return history, labels


@dataclass
class MemoryBankSet:
    """The memory banks M_1..M_n of one (benchmark, split, model, embedder), with their provenance."""

    banks: list[MemoryBank]
    benchmark: str
    split: str
    model: str
    embedder_name: str
    embedding_dim: int
    reward_definition: str = "final_vote"
    state_layout: str = "full"
    state_encoding: str = "text"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k, bank in enumerate(self.banks):
            if bank.agent_index != k:
                raise MemoryBankError(f"bank {k} is agent {bank.agent_index}'s: banks must be ordered by agent")
            if len(bank) and bank.dim != self.embedding_dim:
                raise MemoryBankError(f"bank {k} has dimension {bank.dim}, the set declares {self.embedding_dim}")

    @property
    def n_agents(self) -> int:
        return len(self.banks)

    def __getitem__(self, agent_index: int) -> MemoryBank:
        return self.banks[agent_index]

    def check_compatible(self, embedder: Embedder | str | None = None, benchmark: str | None = None,
                         where: str = "memory bank") -> None:
        """Raise MemoryBankError when the bank was built with another embedder or for another benchmark."""
        if embedder is not None:
            name = embedder if isinstance(embedder, str) else embedder.name
            if name != self.embedder_name:
                raise MemoryBankError(
                    f"{where}: built with embedder {self.embedder_name!r} (dim {self.embedding_dim}), "
                    f"but {name!r} was requested: rebuild the bank or use the same embedder"
                )
            if not isinstance(embedder, str) and embedder.dim != self.embedding_dim:
                raise MemoryBankError(
                    f"{where}: embedding dimension {self.embedding_dim}, the embedder gives {embedder.dim}"
                )
        if benchmark is not None and benchmark != self.benchmark:
            raise MemoryBankError(f"{where}: built for benchmark {self.benchmark!r}, expected {benchmark!r}")

    # ---------------------------------------------------------------------------- save / load
    def save(self, directory: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write the bank set to ``directory`` (manifest last, so a crash leaves no valid manifest)."""
        root = Path(directory)
        manifest_path = root / MANIFEST_FILE
        if manifest_path.exists() and not overwrite:
            raise FileExistsError(f"{manifest_path} exists: pass overwrite=True to replace the bank set")
        root.mkdir(parents=True, exist_ok=True)
        if manifest_path.exists():
            manifest_path.unlink()
        files: dict[str, dict[str, Any]] = {}
        agents = []
        for bank in self.banks:
            sub = f"agent_{bank.agent_index}"
            (root / sub).mkdir(exist_ok=True)
            cases_path = root / sub / CASES_FILE
            with cases_path.open("w", encoding="utf-8") as fh:
                for case in bank.cases:
                    fh.write(json.dumps(case.to_json(), ensure_ascii=False) + "\n")
            files[f"{sub}/{CASES_FILE}"] = {"sha256": file_sha256(cases_path), "bytes": cases_path.stat().st_size,
                                             "rows": len(bank.cases)}
            arrays = {
                "state_embeddings.npy": bank.state_embeddings,
                "response_embeddings.npy": bank.response_embeddings,
                "previous_response_embeddings.npy": bank.previous_response_embeddings,
            }
            for name, array in arrays.items():
                path = root / sub / name
                np.save(path, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)
                files[f"{sub}/{name}"] = {"sha256": file_sha256(path), "bytes": path.stat().st_size,
                                          "shape": list(array.shape), "dtype": "float32"}
            agents.append({"agent_index": bank.agent_index, "directory": sub, "cases": len(bank),
                           "positive_rewards": int(bank.rewards.sum())})
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "benchmark": self.benchmark,
            "split": self.split,
            "model": self.model,
            "embedder": {"name": self.embedder_name, "dim": self.embedding_dim},
            "n_agents": self.n_agents,
            "reward_definition": self.reward_definition,
            "state_layout": self.state_layout,
            "state_encoding": self.state_encoding,
            "agents": agents,
            "files": files,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "metadata": self.metadata,
        }
        atomic_write(manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        logger.info("saved memory bank set (%s, %s cases) to %s", self.benchmark, [len(b) for b in self.banks], root)
        return root

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str],
        embedder: Embedder | str | None = None,
        benchmark: str | None = None,
    ) -> "MemoryBankSet":
        """Read and verify a bank set; ``embedder``/``benchmark`` given -> they must match the manifest.

        Verified banks are remembered per process (:data:`_LOADED`): a second load of an unchanged folder copies
        them instead of re-reading and re-hashing every file (the ablation notebook loads the same four sets for
        each of its 42 cells). "Unchanged" is the same manifest and, for every file it lists, the same inode,
        size, modification and change time; anything else reads and verifies the folder again."""
        root = Path(directory)
        manifest_path = root / MANIFEST_FILE
        manifest = read_manifest(root)
        embedder_name = manifest["embedder"]["name"]
        dim = int(manifest["embedder"]["dim"])
        shell = cls(banks=[], benchmark=manifest["benchmark"], split=manifest.get("split", ""),
                    model=manifest.get("model", ""), embedder_name=embedder_name, embedding_dim=dim)
        shell.check_compatible(embedder, benchmark, where=str(manifest_path))
        key = _load_key(root, manifest)
        with _LOADED_LOCK:
            remembered = _LOADED.get(key) if key is not None else None
        if remembered is not None:
            banks = _copies(remembered)
        else:
            banks = cls._read_banks(root, manifest)
            if key is not None:
                with _LOADED_LOCK:
                    _LOADED[key] = _copies(banks)
                    while len(_LOADED) > _LOADED_MAX:
                        del _LOADED[next(iter(_LOADED))]
        return cls(
            banks=banks,
            benchmark=manifest["benchmark"],
            split=manifest.get("split", ""),
            model=manifest.get("model", ""),
            embedder_name=embedder_name,
            embedding_dim=dim,
            reward_definition=manifest.get("reward_definition", "final_vote"),
            state_layout=manifest.get("state_layout", "full"),
            state_encoding=manifest.get("state_encoding", "text"),
            metadata=manifest.get("metadata", {}),
        )

    @staticmethod
    def _read_banks(root: Path, manifest: Mapping[str, Any]) -> list[MemoryBank]:
        """The verified banks of the folder ``root`` whose parsed manifest is ``manifest``."""
        manifest_path = root / MANIFEST_FILE
        dim = int(manifest["embedder"]["dim"])
        n_agents = int(manifest["n_agents"])
        files = manifest["files"]
        banks = []
        for entry in sorted(manifest["agents"], key=lambda a: a["agent_index"]):
            sub = entry["directory"]
            if not (root / sub).resolve().is_relative_to(root.resolve()):  # a symbolic link out of the folder
                raise MemoryBankError(f"{manifest_path}: agent directory {sub!r} leads out of the bank folder "
                                      f"(to {(root / sub).resolve()}); a bank's files stay inside it")
            for name in (CASES_FILE, *ARRAY_FILES):
                rel = f"{sub}/{name}"
                if rel not in files:
                    raise MemoryBankError(f"{manifest_path}: no checksum entry for {rel}")
                _verify_file(root / rel, files[rel])
            cases = _read_cases(root / sub / CASES_FILE, files[f"{sub}/{CASES_FILE}"].get("rows"))
            arrays = {name: _read_array(root / sub / name, files[f"{sub}/{name}"]) for name in ARRAY_FILES}
            expected = {
                "state_embeddings.npy": (len(cases), dim),
                "response_embeddings.npy": (len(cases), n_agents, dim),
                "previous_response_embeddings.npy": (len(cases), n_agents, dim),
            }
            for name, shape in expected.items():
                if arrays[name].shape != shape:
                    raise MemoryBankError(
                        f"{root / sub / name}: shape {arrays[name].shape}, expected {shape} "
                        f"({len(cases)} cases, {n_agents} agents, dim {dim})"
                    )
            if len(cases) != entry["cases"]:
                raise MemoryBankError(
                    f"{root / sub / CASES_FILE}: {len(cases)} cases, the manifest says {entry['cases']}"
                )
            banks.append(MemoryBank(
                agent_index=int(entry["agent_index"]),
                cases=cases,
                state_embeddings=arrays["state_embeddings.npy"],
                response_embeddings=arrays["response_embeddings.npy"],
                previous_response_embeddings=arrays["previous_response_embeddings.npy"],
            ))
        if len(banks) != n_agents:
            raise MemoryBankError(f"{manifest_path}: {len(banks)} agent banks listed, n_agents is {n_agents}")
        return banks


#: Verified banks by :func:`_load_key` (the last few bank folders this process loaded; copies are handed out).
_LOADED: dict[tuple, list[MemoryBank]] = {}
_LOADED_MAX = 8
_LOADED_LOCK = threading.Lock()


def _load_key(root: Path, manifest: Mapping[str, Any]) -> tuple | None:
    """What identifies a loaded bank folder: its resolved path, its manifest and the :func:`file_stamps` of the
    manifest and each file it lists. None when a file is missing (the full load names it)."""
    names = (MANIFEST_FILE, *sorted(manifest["files"]))
    stamps = file_stamps(root / name for name in names)
    return None if stamps is None else (str(root.resolve()), json.dumps(manifest, sort_keys=True), names, stamps)


def _copies(banks: Sequence[MemoryBank]) -> list[MemoryBank]:
    """Banks a caller may change without touching the remembered ones (new case lists, copied arrays)."""
    return [MemoryBank(b.agent_index, list(b.cases), b.state_embeddings.copy(), b.response_embeddings.copy(),
                       b.previous_response_embeddings.copy()) for b in banks]


def _inside(relative: str) -> str:
    """A path inside the bank folder: relative, no ``..``, no empty part (a hand-edited manifest must not read or
    stat files elsewhere)."""
    parts = relative.replace("\\", "/").split("/")
    if not relative or relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"a path inside the bank folder (like agent_0), found {relative!r}")
    return relative


class _ManifestRecord(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _EmbedderEntry(_ManifestRecord):
    name: str
    dim: int = Field(ge=1)


class _AgentEntry(_ManifestRecord):
    agent_index: int = Field(ge=0)
    directory: str
    cases: int = Field(ge=0)

    @field_validator("directory")
    @classmethod
    def _folder(cls, value: str) -> str:
        return _inside(value)


class _FileEntry(_ManifestRecord):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int | None = Field(default=None, ge=0)
    rows: int | None = Field(default=None, ge=0)
    shape: list[int] | None = None


class BankManifest(_ManifestRecord):
    """The schema of a bank folder's ``manifest.json`` (the fields loading reads; others are kept as written)."""

    format: str
    format_version: int
    benchmark: str
    embedder: _EmbedderEntry
    n_agents: int = Field(ge=1)
    agents: list[_AgentEntry]
    files: dict[str, _FileEntry]

    @field_validator("files")
    @classmethod
    def _files_inside(cls, value: dict[str, _FileEntry]) -> dict[str, _FileEntry]:
        for relative in value:
            _inside(relative)
        return value


def _manifest_problem(error: Mapping[str, Any]) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "(the manifest)"
    if error["type"] == "value_error":  # the validator's message says what it found
        return f"field {where}: expected {str(error['msg']).removeprefix('Value error, ')}"
    found = "missing" if error["type"] == "missing" else repr(error["input"])[:80]
    message = "expected an object" if error["type"] in ("model_type", "dict_type") else error["msg"]
    return f"field {where}: {message} (found {found})"


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a bank folder (no array is read); MemoryBankError when unusable."""
    manifest_path = Path(directory) / MANIFEST_FILE
    if not manifest_path.is_file():
        raise MemoryBankError(f"{manifest_path}: no manifest (not a memory bank folder, or its build did not finish)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MemoryBankError(f"{manifest_path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict):
        raise MemoryBankError(f"{manifest_path}: expected a JSON object")
    for key in ("format", "format_version", "benchmark", "embedder", "n_agents", "agents", "files"):
        if key not in manifest:
            raise MemoryBankError(f"{manifest_path}: missing field {key!r}")
    if manifest["format"] != FORMAT_NAME or manifest["format_version"] != FORMAT_VERSION:
        raise MemoryBankError(
            f"{manifest_path}: format {manifest['format']!r} version {manifest['format_version']}, "
            f"expected {FORMAT_NAME!r} version {FORMAT_VERSION}"
        )
    try:
        BankManifest.model_validate(manifest)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise MemoryBankError(
            f"{manifest_path}: {_manifest_problem(errors[0])}"
            + (f"; and {len(errors) - 1} more" if len(errors) > 1 else "")
            + " (a hand-edited or damaged manifest: rebuild the bank with r2mad build-memory)"
        ) from None
    return manifest


# Manifest fields that do not describe the banks' content (a rebuild with identical files keeps the digest).
DIGEST_EXCLUDED_FIELDS = frozenset({"created", "metadata"})


def bank_digest(directory: str | os.PathLike[str]) -> str:
    """The content digest of the bank set in ``directory``: SHA-256 of its manifest's canonical JSON without
    :data:`DIGEST_EXCLUDED_FIELDS`. The manifest holds the sha256 of every case and embedding file, so equal
    digests mean equal banks; a rebuild that changes any case, embedding or option changes the digest.
    MemoryBankError when the manifest is unusable (no array is read)."""
    manifest = read_manifest(directory)
    content = {k: v for k, v in manifest.items() if k not in DIGEST_EXCLUDED_FIELDS}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _verify_file(path: Path, entry: Mapping[str, Any]) -> None:
    if not path.is_file():
        raise MemoryBankError(f"{path}: file missing (listed in the manifest)")
    size = path.stat().st_size
    if "bytes" in entry and size != entry["bytes"]:
        raise MemoryBankError(
            f"{path}: {size} bytes, the manifest expects {entry['bytes']} (truncated or modified file)"
        )
    found = file_sha256(path)
    if found != entry["sha256"]:
        raise MemoryBankError(f"{path}: sha256 {found}, the manifest expects {entry['sha256']} (corrupted or modified)")


def _read_array(path: Path, entry: Mapping[str, Any]) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError/EOFError/OSError on damaged files
        raise MemoryBankError(f"{path}: cannot be read as a .npy array ({exc})") from exc
    if "shape" in entry and list(array.shape) != list(entry["shape"]):
        raise MemoryBankError(f"{path}: shape {list(array.shape)}, the manifest expects {entry['shape']}")
    if array.dtype != np.float32:
        raise MemoryBankError(f"{path}: dtype {array.dtype}, expected float32")
    return array


def _read_cases(path: Path, expected_rows: int | None) -> list[MemoryCase]:
    cases = []
    with path.open(encoding="utf-8") as fh:
        for line_number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MemoryBankError(f"{where}: not valid JSON ({exc})") from exc
            try:
                cases.append(MemoryCase.from_json(row, where))
            except ValueError as exc:  # the message names the file and line already
                raise MemoryBankError(str(exc)) from exc
    if expected_rows is not None and len(cases) != expected_rows:
        raise MemoryBankError(f"{path}: {len(cases)} cases, the manifest expects {expected_rows}")
    return cases


# ------------------------------------------------------------------------------------------------
# Building
# ------------------------------------------------------------------------------------------------
def build_bank_set(
    records: Iterable[DebateRecord],
    embedder: Embedder,
    benchmark: str,
    split: str = "train",
    model: str = "",
    reward_definition: str = "final_vote",
    state_layout: str = "full",
    state_encoding: str = "text",
    batch_size: int = 32,
    show_progress: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> MemoryBankSet:
    """Memory banks from finished debates: cases (Eq. 4) + embeddings, computed once and in batches.

    Each distinct response text is embedded once (responses recur across agents' banks and across the
    Z^(t)/Z^(t-1) of consecutive rounds); states are embedded in one batch per agent.
    """
    if state_layout not in STATE_LAYOUTS:
        raise ValueError(f"unknown state layout {state_layout!r}: expected one of {STATE_LAYOUTS}")
    if state_encoding not in STATE_ENCODINGS:
        raise ValueError(f"unknown state encoding {state_encoding!r}: expected one of {STATE_ENCODINGS}")
    records = list(records)
    per_agent: list[list[MemoryCase]] | None = None
    for record in records:
        cases = cases_from_debate(record, reward_definition)
        if per_agent is None:
            per_agent = [[] for _ in cases]
        if len(cases) != len(per_agent):
            raise ValueError(
                f"debate {record.sample_id!r} has {len(cases)} agents, earlier debates have {len(per_agent)}"
            )
        for i, agent_cases in enumerate(cases):
            per_agent[i].extend(agent_cases)
    if per_agent is None:
        raise ValueError("no debates to build memory from")
    n_agents = len(per_agent)
    texts = list(dict.fromkeys(
        t for agent_cases in per_agent for c in agent_cases for t in (*c.responses, *c.previous_responses)
    ))
    logger.info("embedding %d distinct responses with %s", len(texts), embedder.name)
    vectors = embedder.encode(texts, batch_size=batch_size, show_progress=show_progress)
    row = {t: k for k, t in enumerate(texts)}
    banks = []
    for i, agent_cases in enumerate(per_agent):
        states = encode_states(embedder, [c.state for c in agent_cases], state_layout, state_encoding,
                               batch_size, show_progress)
        responses = np.zeros((len(agent_cases), n_agents, embedder.dim), dtype=np.float32)
        previous = np.zeros_like(responses)
        for k, c in enumerate(agent_cases):
            responses[k] = vectors[[row[t] for t in c.responses]]
            previous[k] = vectors[[row[t] for t in c.previous_responses]]
        banks.append(MemoryBank(i, agent_cases, states, responses, previous))
    return MemoryBankSet(
        banks=banks,
        benchmark=benchmark,
        split=split,
        model=model,
        embedder_name=embedder.name,
        embedding_dim=embedder.dim,
        reward_definition=reward_definition,
        state_layout=state_layout,
        state_encoding=state_encoding,
        metadata=dict(metadata or {}),
    )


def poison_bank(
    bank: MemoryBank | MemoryBankSet,
    fraction: float,
    seed: int = 0,
    fields: Sequence[str] = ("reward", "correct"),
) -> MemoryBank | MemoryBankSet:
    """A copy of a bank (or of every bank of a set) where a ``fraction`` of the cases has flipped labels.

    Exactly ``round(fraction * N)`` cases per bank are drawn without replacement (seeded by ``seed`` and the
    agent index). ``fields``: "reward" flips r_i, "correct" flips every zeta_j^(t) of Z^(t),
    "previous_correct" flips those of Z^(t-1). Embeddings are shared with the original (treat them as
    read-only). For the poisoned-memory experiment (Limitations: "a memory bank built from systematically
    mistaken trajectories could reinforce an erroneous consensus").
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"poison fraction must be in [0, 1], found {fraction}")
    unknown = set(fields) - {"reward", "correct", "previous_correct"}
    if unknown:
        raise ValueError(f"unknown fields to poison {sorted(unknown)}: use reward, correct, previous_correct")
    if isinstance(bank, MemoryBankSet):
        metadata = dict(bank.metadata)
        metadata["poisoned"] = {"fraction": fraction, "seed": seed, "fields": list(fields)}
        banks = [poison_bank(b, fraction, seed, fields) for b in bank.banks]
        return dataclasses.replace(bank, banks=banks, metadata=metadata)
    rng = np.random.default_rng(np.random.SeedSequence([seed, bank.agent_index]))
    count = int(round(fraction * len(bank)))
    flipped = set(rng.choice(len(bank), size=count, replace=False).tolist()) if count else set()
    cases = []
    for k, case in enumerate(bank.cases):
        if k in flipped:
            changes: dict[str, Any] = {}
            if "reward" in fields:
                changes["reward"] = 1 - case.reward
            if "correct" in fields:
                changes["correct"] = tuple(not c for c in case.correct)
            if "previous_correct" in fields:
                changes["previous_correct"] = tuple(not c for c in case.previous_correct)
            case = dataclasses.replace(case, **changes)
        cases.append(case)
    return MemoryBank(bank.agent_index, cases, bank.state_embeddings, bank.response_embeddings,
                      bank.previous_response_embeddings)
