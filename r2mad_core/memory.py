"""Experience memory: memory cases (Eq. 4), per-agent memory banks, building them from debates, save/load.

Debate state (Eq. 2), before agent i writes round t > 0:

    s_i^(t) = < x, z_i^(t-1), h^(t-1), Cons(Z^(t-1)) >

(task, agent i's previous response, the summary of the previous round, the previous round's consensus
ratio, Eq. 3). Memory case (Eq. 4), extracted for every agent i and every round t > 0 of a finished debate
(Appendix A "Memory Construction": round 0 is excluded, all rounds are forced):

    e_i^(t) = < s_i^(t), Z^(t), y, zeta_i^(t), r_i >

We store Z^(t) with every agent's parsed answer and correctness zeta_j^(t) (confidence, Eq. 7, needs agent
j's correctness in agent i's case, which Eq. 4 implies through Z^(t) and y), and also Z^(t-1) with its
correctness (for the authors'-code confidence variant, see ``confidence.py``).

**Outcome reward r_i** (``reward_definition``):

- ``"final_vote"`` (default; ours -- the paper does not define r_i operationally): 1 when the debate's final answer (majority vote over the last round) is
  correct. The paper calls r_i "the outcome reward" and says it "only requires a signal indicating whether a
  concluded debate reached a good answer" (Section 4.2), i.e. a property of the concluded debate, not of one
  agent's round.
- ``"agent_final"``: 1 when agent i's own last-round answer is correct (r indexed by i, still an outcome).
- ``"round_correctness"`` (the authors' code): r = zeta_i^(t), agent i's correctness in that round. This is
  what the authors' code ranks by in MMR (``response_correct``).

**State text** (``state_layout``), the text embedded as s (the authors embed one text per state):

- ``"full"`` (default): question, the consensus ratio, the previous summary, then the previous response.
  Eq. 2 has all four parts; putting the long response last means an embedder that truncates (MiniLM: 256
  word pieces) loses the tail of the response rather than the summary.
- ``"authors"``: question, previous response, previous summary (the authors' code; no consensus).

**State encoding** (``state_encoding``): ``"text"`` (default; one embedding of the state text, as the paper
encodes "the current debate state into an embedding vector") or ``"components"`` (the normalised sum of the
unit embeddings of question, previous response and summary: no truncation of the composite text and each
response is embedded once; the consensus ratio then enters only through lambda_t).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .embeddings import Embedder
from .files import atomic_write, file_sha256

logger = logging.getLogger(__name__)

FORMAT_NAME = "r2mad-memory-bank"
FORMAT_VERSION = 1
REWARD_DEFINITIONS = ("final_vote", "agent_final", "round_correctness")
STATE_LAYOUTS = ("full", "authors")
STATE_ENCODINGS = ("text", "components")
ARRAY_FILES = ("state_embeddings.npy", "response_embeddings.npy", "previous_response_embeddings.npy")
CASES_FILE = "cases.jsonl"
MANIFEST_FILE = "manifest.json"


class MemoryBankError(ValueError):
    """A bank folder that cannot be used: the message names the file and what was expected/found."""


# ------------------------------------------------------------------------------------------------
# Records
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentDebateState:
    """s_i^(t) = <x, z_i^(t-1), h^(t-1), Cons(Z^(t-1))> (Eq. 2)."""

    question: str
    previous_response: str
    previous_summary: str
    consensus_ratio: float


@dataclass(frozen=True)
class MemoryCase:
    """e_i^(t) = <s_i^(t), Z^(t), y, zeta_i^(t), r_i> (Eq. 4), with every agent's answers and correctness."""

    case_id: str
    sample_id: str
    agent_index: int
    round_index: int
    state: AgentDebateState
    responses: tuple[str, ...]  # Z^(t)
    answers: tuple[str | None, ...]  # a(z_j^(t))
    correct: tuple[bool, ...]  # zeta_j^(t) for every agent j
    gold: str  # y
    reward: int  # r_i
    previous_responses: tuple[str, ...] = ()  # Z^(t-1)
    previous_answers: tuple[str | None, ...] = ()
    previous_correct: tuple[bool, ...] = ()
    final_answer: str | None = None  # the debate's voted answer (for audits)
    final_correct: bool | None = None
    num_options: int | None = None  # multiple choice: the question's option count (answer re-extraction)

    @property
    def response(self) -> str:
        """z_i^(t), the agent's own response in this case."""
        return self.responses[self.agent_index]

    @property
    def answer(self) -> str | None:
        return self.answers[self.agent_index]

    @property
    def is_correct(self) -> bool:
        """zeta_i^(t)."""
        return self.correct[self.agent_index]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, row: Mapping[str, Any], where: str = "") -> "MemoryCase":
        try:
            state = AgentDebateState(**row["state"])
            values = {f.name: row[f.name] for f in dataclasses.fields(cls) if f.name != "state" and f.name in row}
            for name in ("responses", "answers", "correct", "previous_responses", "previous_answers", "previous_correct"):
                if name in values:
                    values[name] = tuple(values[name])
            case = cls(state=state, **values)
        except (KeyError, TypeError) as exc:
            raise MemoryBankError(f"{where}: not a memory case ({exc})") from exc
        n = len(case.responses)
        if not (len(case.answers) == len(case.correct) == n) or not 0 <= case.agent_index < n:
            raise MemoryBankError(
                f"{where}: responses/answers/correct must have one entry per agent and agent_index in range, "
                f"found {len(case.responses)}/{len(case.answers)}/{len(case.correct)} and {case.agent_index}"
            )
        return case


@dataclass(frozen=True)
class DebateRound:
    """What memory needs from one debate round t: Z^(t), answers, correctness, h^(t), Cons(Z^(t))."""

    responses: tuple[str, ...]
    answers: tuple[str | None, ...]
    correct: tuple[bool, ...]
    summary: str
    consensus_ratio: float


@dataclass(frozen=True)
class DebateRecord:
    """A finished debate on one training question, all rounds forced (Appendix A)."""

    sample_id: str
    question: str
    gold: str
    rounds: tuple[DebateRound, ...]
    final_answer: str | None
    final_correct: bool
    num_options: int | None = None


# ------------------------------------------------------------------------------------------------
# State text
# ------------------------------------------------------------------------------------------------
def format_state_text(state: AgentDebateState, layout: str = "full") -> str:
    """The text embedded as the debate state (see the module docstring for the layouts)."""
    if layout == "full":
        parts = [f"Question:\n{state.question}", f"Consensus ratio of the previous round: {state.consensus_ratio:.2f}"]
        if state.previous_summary:
            parts.append(f"Previous round summary:\n{state.previous_summary}")
        parts.append(f"Previous response:\n{state.previous_response}")
        return "\n\n".join(parts)
    if layout == "authors":
        parts = [state.question, state.previous_response, state.previous_summary]
        return "\n".join(p for p in parts if p).strip()
    raise ValueError(f"unknown state layout {layout!r}: expected one of {STATE_LAYOUTS}")


def encode_states(
    embedder: Embedder,
    states: Sequence[AgentDebateState],
    layout: str = "full",
    encoding: str = "text",
    batch_size: int = 32,
    show_progress: bool = False,
) -> np.ndarray:
    """Unit float32 embeddings [len(states), d] of debate states (``encoding``: "text" or "components")."""
    if encoding == "text":
        texts = [format_state_text(s, layout) for s in states]
        return embedder.encode(texts, batch_size=batch_size, show_progress=show_progress)
    if encoding != "components":
        raise ValueError(f"unknown state encoding {encoding!r}: expected one of {STATE_ENCODINGS}")
    if not states:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    texts = list(dict.fromkeys(
        t for s in states for t in (s.question, s.previous_response, s.previous_summary) if t
    ))
    vectors = embedder.encode(texts, batch_size=batch_size, show_progress=show_progress)
    row = {t: k for k, t in enumerate(texts)}
    out = np.zeros((len(states), embedder.dim), dtype=np.float32)
    for k, s in enumerate(states):
        for t in (s.question, s.previous_response, s.previous_summary):
            if t:
                out[k] += vectors[row[t]]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


# ------------------------------------------------------------------------------------------------
# Cases from debates
# ------------------------------------------------------------------------------------------------
def outcome_reward(record: DebateRecord, agent_index: int, round_index: int, reward_definition: str) -> int:
    """r_i for agent i's round-t case under ``reward_definition`` (module docstring)."""
    if reward_definition == "final_vote":
        return int(bool(record.final_correct))
    if reward_definition == "agent_final":
        return int(bool(record.rounds[-1].correct[agent_index]))
    if reward_definition == "round_correctness":
        return int(bool(record.rounds[round_index].correct[agent_index]))
    raise ValueError(f"unknown reward definition {reward_definition!r}: expected one of {REWARD_DEFINITIONS}")


def cases_from_debate(record: DebateRecord, reward_definition: str = "final_vote") -> list[list[MemoryCase]]:
    """Memory cases e_i^(t) for every agent i and round t >= 1 of one debate, grouped by agent."""
    if reward_definition not in REWARD_DEFINITIONS:
        raise ValueError(f"unknown reward definition {reward_definition!r}: expected one of {REWARD_DEFINITIONS}")
    if not record.rounds:
        raise ValueError(f"debate {record.sample_id!r} has no rounds")
    n = len(record.rounds[0].responses)
    for t, r in enumerate(record.rounds):
        if not (len(r.responses) == len(r.answers) == len(r.correct) == n):
            raise ValueError(
                f"debate {record.sample_id!r} round {t}: expected {n} responses/answers/correct, found "
                f"{len(r.responses)}/{len(r.answers)}/{len(r.correct)}"
            )
    per_agent: list[list[MemoryCase]] = [[] for _ in range(n)]
    for t in range(1, len(record.rounds)):
        prev, cur = record.rounds[t - 1], record.rounds[t]
        for i in range(n):
            state = AgentDebateState(
                question=record.question,
                previous_response=prev.responses[i],
                previous_summary=prev.summary or "",
                consensus_ratio=float(prev.consensus_ratio),
            )
            per_agent[i].append(
                MemoryCase(
                    case_id=f"{record.sample_id}#t{t}#a{i}",
                    sample_id=record.sample_id,
                    agent_index=i,
                    round_index=t,
                    state=state,
                    responses=tuple(cur.responses),
                    answers=tuple(cur.answers),
                    correct=tuple(bool(c) for c in cur.correct),
                    gold=record.gold,
                    reward=outcome_reward(record, i, t, reward_definition),
                    previous_responses=tuple(prev.responses),
                    previous_answers=tuple(prev.answers),
                    previous_correct=tuple(bool(c) for c in prev.correct),
                    final_answer=record.final_answer,
                    final_correct=bool(record.final_correct),
                    num_options=record.num_options,
                )
            )
    return per_agent


def debate_record_from_transcript(row: Mapping[str, Any], question: str) -> DebateRecord:
    """A (scored) transcript line of :mod:`r2mad_core.experiments` as the input of memory building.

    Reads ``rounds[t].agents[i].{response, answer, correct}``, ``rounds[t].{summary, consensus_ratio}``,
    ``gold``, ``final_answer``, ``correct`` (the voted answer's correctness) and ``num_options``. The
    question text is not in transcripts: pass it.
    """
    where = f"transcript of sample {row.get('sample_id')!r}"
    rounds = []
    for t, r in enumerate(row["rounds"]):
        agents = r["agents"]
        corrects = [a.get("correct") for a in agents]
        if any(c is None for c in corrects):
            raise ValueError(f"{where}, round {t}: per-agent correctness missing (transcript not scored)")
        rounds.append(
            DebateRound(
                responses=tuple(a["response"] for a in agents),
                answers=tuple(a["answer"] for a in agents),
                correct=tuple(bool(c) for c in corrects),
                summary=r.get("summary") or "",
                consensus_ratio=float(r["consensus_ratio"]),
            )
        )
    if row.get("correct") is None:
        raise ValueError(f"{where}: no final-answer correctness ('correct')")
    return DebateRecord(
        sample_id=str(row["sample_id"]),
        question=question,
        gold=str(row["gold"]),
        rounds=tuple(rounds),
        final_answer=row.get("final_answer"),
        final_correct=bool(row["correct"]),
        num_options=row.get("num_options"),
    )


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
                f"agent {self.agent_index}: state_embeddings must be [{n_cases}, d], found {self.state_embeddings.shape}"
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
        """Read and verify a bank set; ``embedder``/``benchmark`` given -> they must match the manifest."""
        root = Path(directory)
        manifest_path = root / MANIFEST_FILE
        manifest = read_manifest(root)
        embedder_name = manifest["embedder"]["name"]
        dim = int(manifest["embedder"]["dim"])
        shell = cls(banks=[], benchmark=manifest["benchmark"], split=manifest.get("split", ""),
                    model=manifest.get("model", ""), embedder_name=embedder_name, embedding_dim=dim)
        shell.check_compatible(embedder, benchmark, where=str(manifest_path))
        n_agents = int(manifest["n_agents"])
        files = manifest["files"]
        banks = []
        for entry in sorted(manifest["agents"], key=lambda a: a["agent_index"]):
            sub = entry["directory"]
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
            cases.append(MemoryCase.from_json(row, where))
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


# ------------------------------------------------------------------------------------------------
# Audit (Limitations: "we recommend auditing the memory bank before applying the framework")
# ------------------------------------------------------------------------------------------------
@dataclass
class BankAudit:
    """What :func:`audit_bank_set` found, per agent where it applies. Shares are fractions of cases."""

    benchmark: str
    embedder_name: str
    reward_definition: str
    cases_per_agent: list[int]
    positive_reward_share: list[float]
    own_correct_share: list[float]
    duplicate_states: list[int]  # cases whose state text repeats an earlier case's (same bank)
    near_duplicate_states: list[int]  # other cases (text not repeated) within the cosine threshold of an earlier one
    embeddings_checked: int = 0  # cases whose embeddings were recomputed (0: no embedder given)
    stale_state_embeddings: int = 0
    stale_response_embeddings: int = 0
    max_embedding_drift: float = 0.0  # 1 - min cosine(stored, recomputed)
    answers_reextracted_differ: int = 0  # stored answers that a(.) no longer extracts from the response
    correctness_disagree: int = 0  # cases with a stored zeta_j that is_correct(answer_j, y) contradicts
    reward_disagree: int | None = 0  # cases whose r_i contradicts the reward definition (None: not checkable)
    total_cases: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def correctness_disagree_share(self) -> float:
        return self.correctness_disagree / self.total_cases if self.total_cases else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["correctness_disagree_share"] = self.correctness_disagree_share
        return out

    def format(self) -> str:
        lines = [
            f"memory bank: {self.benchmark}, embedder {self.embedder_name}, reward {self.reward_definition}",
            f"cases per agent: {self.cases_per_agent} (total {self.total_cases})",
            "reward balance (share r=1): " + ", ".join(f"{x:.3f}" for x in self.positive_reward_share),
            "own correctness (share zeta_i=1): " + ", ".join(f"{x:.3f}" for x in self.own_correct_share),
            f"duplicate states (identical text): {self.duplicate_states}; near-duplicates: {self.near_duplicate_states}",
        ]
        if self.embeddings_checked:
            lines.append(
                f"embeddings recomputed for {self.embeddings_checked} cases: {self.stale_state_embeddings} stale state "
                f"and {self.stale_response_embeddings} stale response embeddings (max drift {self.max_embedding_drift:.2e})"
            )
        else:
            lines.append("embeddings: not recomputed (no embedder)")
        lines.append(
            f"stored answers not re-extracted from their response: {self.answers_reextracted_differ}; "
            f"cases whose correctness labels disagree with is_correct: {self.correctness_disagree} "
            f"({100 * self.correctness_disagree_share:.1f}%)"
        )
        lines.append(
            "rewards inconsistent with the reward definition: "
            + ("not checkable" if self.reward_disagree is None else str(self.reward_disagree))
        )
        if self.examples:
            lines.append("examples: " + "; ".join(self.examples[:8]))
        return "\n".join(lines)


def audit_bank_set(
    bank_set: MemoryBankSet,
    embedder: Embedder | None = None,
    sample_size: int = 32,
    seed: int = 0,
    near_duplicate_threshold: float = 0.999,
    drift_tolerance: float = 1e-3,
) -> BankAudit:
    """Check a bank set: sizes, reward balance, duplicate states, stale embeddings, label consistency.

    ``embedder`` (the bank's own) recomputes the state and response embeddings of ``sample_size`` random
    cases per agent; a cosine below ``1 - drift_tolerance`` to the stored vector counts as stale. Labels:
    every stored answer is re-extracted from its response (``answers.extract_answer``) and every zeta_j is
    re-checked with ``answers.is_correct(answer_j, y)``; rewards are re-derived for ``final_vote`` (from the
    stored final answer) and ``round_correctness`` (from zeta_i); ``agent_final`` is not checkable per case.
    """
    from r2mad_core import answers

    if embedder is not None:
        bank_set.check_compatible(embedder)
    benchmark = bank_set.benchmark
    audit = BankAudit(
        benchmark=benchmark,
        embedder_name=bank_set.embedder_name,
        reward_definition=bank_set.reward_definition,
        cases_per_agent=[len(b) for b in bank_set.banks],
        positive_reward_share=[float(b.rewards.mean()) if len(b) else 0.0 for b in bank_set.banks],
        own_correct_share=[float(b.correct[:, b.agent_index].mean()) if len(b) else 0.0 for b in bank_set.banks],
        duplicate_states=[],
        near_duplicate_states=[],
        total_cases=sum(len(b) for b in bank_set.banks),
    )
    if bank_set.reward_definition == "agent_final":
        audit.reward_disagree = None

    def correct_of(answer: str | None, gold: str) -> bool:
        return answer is not None and answers.is_correct(answer, gold, benchmark)

    rng = np.random.default_rng(seed)
    for bank in bank_set.banks:
        texts = [format_state_text(c.state, bank_set.state_layout) for c in bank.cases]
        seen: set[str] = set()
        exact = np.zeros(len(texts), dtype=bool)
        for k, text in enumerate(texts):
            exact[k] = text in seen
            seen.add(text)
        audit.duplicate_states.append(int(exact.sum()))
        near = _near_duplicates(bank.state_embeddings, near_duplicate_threshold)
        audit.near_duplicate_states.append(int((near & ~exact).sum()))

        for case in bank.cases:
            labels_ok = True
            for j, (response, answer, zeta) in enumerate(zip(case.responses, case.answers, case.correct)):
                extracted = answers.extract_answer(response, benchmark, num_options=case.num_options)
                if (extracted is None) != (answer is None) or (
                    extracted is not None and answer is not None
                    and answers.canonical_answer(extracted, benchmark) != answers.canonical_answer(answer, benchmark)
                ):
                    audit.answers_reextracted_differ += 1
                if correct_of(answer, case.gold) != bool(zeta):
                    labels_ok = False
            if not labels_ok:
                audit.correctness_disagree += 1
                if len(audit.examples) < 8:
                    audit.examples.append(f"{case.case_id}: correctness labels contradict is_correct")
            if audit.reward_disagree is not None:
                if bank_set.reward_definition == "final_vote":
                    expected = int(correct_of(case.final_answer, case.gold))
                else:  # round_correctness
                    expected = int(bool(case.is_correct))
                if expected != case.reward:
                    audit.reward_disagree += 1

        if embedder is not None and len(bank):
            rows = np.sort(rng.choice(len(bank), size=min(sample_size, len(bank)), replace=False))
            cases = [bank.cases[k] for k in rows]
            states = encode_states(embedder, [c.state for c in cases], bank_set.state_layout, bank_set.state_encoding)
            state_cos = np.einsum("kd,kd->k", states, bank.state_embeddings[rows])
            responses = embedder.encode([t for c in cases for t in c.responses]).reshape(len(rows), bank.n_agents, -1)
            response_cos = np.einsum("kjd,kjd->kj", responses, bank.response_embeddings[rows])
            audit.embeddings_checked += len(rows)
            audit.stale_state_embeddings += int((state_cos < 1 - drift_tolerance).sum())
            audit.stale_response_embeddings += int((response_cos < 1 - drift_tolerance).any(axis=1).sum())
            drift = float(1 - min(state_cos.min(), response_cos.min()))
            audit.max_embedding_drift = max(audit.max_embedding_drift, drift)
            for k, cos in zip(rows, state_cos):
                if cos < 1 - drift_tolerance and len(audit.examples) < 8:
                    audit.examples.append(f"{bank.cases[k].case_id}: stale state embedding (cos {cos:.4f})")
    return audit


def _near_duplicates(vectors: np.ndarray, threshold: float, block: int = 2048) -> np.ndarray:
    """Mask of the rows whose cosine to some earlier row is >= threshold (blocked: no N x N matrix)."""
    n = len(vectors)
    flagged = np.zeros(n, dtype=bool)
    for start in range(0, n, block):
        stop = min(n, start + block)
        sims = vectors[start:stop] @ vectors[:stop].T  # [b, stop]
        cols = np.arange(stop)
        rows = np.arange(start, stop)[:, None]
        sims = np.where(cols[None, :] < rows, sims, -np.inf)  # earlier rows only
        flagged[start:stop] = (sims >= threshold).any(axis=1)
    return flagged
