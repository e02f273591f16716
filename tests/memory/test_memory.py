"""Memory banks of r2mad_core.memory.banks: built from debates, their on-disk format and its checks, poisoning."""

import json

import numpy as np
import pytest
from test_memory_cases import DEBATES

from r2mad_core.memory.banks import MemoryBankError, MemoryBankSet, build_bank_set, poison_bank
from r2mad_core.memory.cases import DebateRecord, DebateRound, format_state_text
from r2mad_core.memory.embeddings import HashingEmbedder


@pytest.fixture(scope="module")
def bank_set():
    return build_bank_set(DEBATES, HashingEmbedder(128), "truthfulqa", "train", "simulated")


def test_build_bank_set_shapes_and_embeddings(bank_set):
    assert bank_set.n_agents == 3 and [len(b) for b in bank_set.banks] == [6, 6, 6]
    bank = bank_set[1]
    assert bank.state_embeddings.shape == (6, 128) and bank.state_embeddings.dtype == np.float32
    assert bank.response_embeddings.shape == (6, 3, 128)
    np.testing.assert_allclose(np.linalg.norm(bank.state_embeddings, axis=1), 1.0, atol=1e-5)
    # response embeddings are those of the texts of Z^(t), identical across agents' banks
    embedder = HashingEmbedder(128)
    case = bank.cases[3]
    np.testing.assert_allclose(bank.response_embeddings[3], embedder.encode(list(case.responses)), atol=1e-6)
    np.testing.assert_allclose(bank.previous_response_embeddings[3], embedder.encode(list(case.previous_responses)),
                               atol=1e-6)
    np.testing.assert_array_equal(bank_set[0].response_embeddings, bank_set[2].response_embeddings)
    np.testing.assert_allclose(
        bank.state_embeddings[3], embedder.encode([format_state_text(case.state)])[0], atol=1e-6
    )
    assert bank.rewards.tolist() == [1, 1, 0, 0, 1, 1]
    assert bank.correct[:2].tolist() == [[1, 1, 0], [1, 0, 1]]


def test_round_trip(tmp_path, bank_set):
    bank_set.save(tmp_path / "bank")
    loaded = MemoryBankSet.load(tmp_path / "bank", embedder=HashingEmbedder(128), benchmark="truthfulqa")
    assert loaded.benchmark == "truthfulqa" and loaded.split == "train" and loaded.model == "simulated"
    assert loaded.embedder_name == "hashing-128" and loaded.embedding_dim == 128
    for original, copy in zip(bank_set.banks, loaded.banks, strict=False):
        assert original.cases == copy.cases
        np.testing.assert_array_equal(original.state_embeddings, copy.state_embeddings)
        np.testing.assert_array_equal(original.response_embeddings, copy.response_embeddings)
        np.testing.assert_array_equal(original.rewards, copy.rewards)
    manifest = json.loads((tmp_path / "bank" / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and manifest["n_agents"] == 3
    assert [a["cases"] for a in manifest["agents"]] == [6, 6, 6]
    assert manifest["embedder"] == {"name": "hashing-128", "dim": 128}
    assert set(manifest["files"]) == {
        f"agent_{i}/{name}" for i in range(3)
        for name in ("cases.jsonl", "state_embeddings.npy", "response_embeddings.npy",
                     "previous_response_embeddings.npy")
    }
    with pytest.raises(FileExistsError):
        bank_set.save(tmp_path / "bank")
    bank_set.save(tmp_path / "bank", overwrite=True)


def test_load_rejects_mismatches(tmp_path, bank_set):
    root = bank_set.save(tmp_path / "bank")
    with pytest.raises(MemoryBankError, match="hashing-128.*hashing-384"):
        MemoryBankSet.load(root, embedder=HashingEmbedder(384))
    with pytest.raises(MemoryBankError, match="minilm"):
        MemoryBankSet.load(root, embedder="minilm")
    with pytest.raises(MemoryBankError, match="'truthfulqa', expected 'math500'"):
        MemoryBankSet.load(root, benchmark="math500")
    with pytest.raises(MemoryBankError, match="no manifest"):
        MemoryBankSet.load(tmp_path / "nowhere")


def test_load_rejects_truncated_array(tmp_path, bank_set):
    root = bank_set.save(tmp_path / "bank")
    path = root / "agent_1" / "response_embeddings.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(MemoryBankError, match=r"agent_1/response_embeddings\.npy.*bytes.*truncated"):
        MemoryBankSet.load(root)


def test_load_rejects_corrupted_bytes_and_cases(tmp_path, bank_set):
    root = bank_set.save(tmp_path / "bank")
    path = root / "agent_0" / "state_embeddings.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    path.write_bytes(bytes(data))
    with pytest.raises(MemoryBankError, match=r"agent_0/state_embeddings\.npy: sha256"):
        MemoryBankSet.load(root)


def test_load_rejects_shape_and_unreadable_array(tmp_path, bank_set):
    # A self-consistent manifest (checksums rewritten) whose array has the wrong shape, then a non-npy file.
    root = bank_set.save(tmp_path / "bank")
    path = root / "agent_2" / "state_embeddings.npy"
    np.save(path, np.zeros((5, 128), dtype=np.float32))
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    from r2mad_core.files import file_sha256

    entry = manifest["files"]["agent_2/state_embeddings.npy"]
    entry.update(sha256=file_sha256(path), bytes=path.stat().st_size)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(MemoryBankError,
                       match=r"agent_2/state_embeddings\.npy: shape \[5, 128\], the manifest expects \[6, 128\]"):
        MemoryBankSet.load(root)
    path.write_bytes(b"not an array")
    entry.update(sha256=file_sha256(path), bytes=path.stat().st_size)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(MemoryBankError, match=r"agent_2/state_embeddings\.npy: cannot be read"):
        MemoryBankSet.load(root)


def test_poison_bank_flips_exact_fraction(bank_set):
    poisoned = poison_bank(bank_set, 0.5, seed=3)
    for original, bad in zip(bank_set.banks, poisoned.banks, strict=False):
        flipped = [k for k, (a, b) in enumerate(zip(original.cases, bad.cases, strict=False)) if a.reward != b.reward]
        assert len(flipped) == 3  # round(0.5 * 6)
        for k in flipped:
            assert bad.cases[k].correct == tuple(not c for c in original.cases[k].correct)
        np.testing.assert_array_equal(bad.rewards[flipped], 1 - original.rewards[flipped])
    assert poisoned.metadata["poisoned"]["fraction"] == 0.5
    assert poison_bank(bank_set, 0.5, seed=3).banks[0].cases == poisoned.banks[0].cases  # reproducible
    assert poison_bank(bank_set, 0.0).banks[0].cases == bank_set.banks[0].cases
    only_reward = poison_bank(bank_set[0], 1.0, fields=("reward",))
    assert only_reward.rewards.tolist() == (1 - bank_set[0].rewards).tolist()
    assert only_reward.correct.tolist() == bank_set[0].correct.tolist()
    with pytest.raises(ValueError, match="fraction"):
        poison_bank(bank_set, 1.5)


def test_build_rejects_debates_with_different_agent_counts():
    two_agents = DebateRecord("q8", "x", "A", (DebateRound(("a", "b"), ("A", "A"), (True, True), "", 1.0),) * 2, "A",
                              True)
    with pytest.raises(ValueError, match="2 agents"):
        build_bank_set([DEBATES[0], two_agents], HashingEmbedder(16), "truthfulqa")


def test_load_rejects_a_bad_case_row_naming_file_and_line(tmp_path, bank_set):
    # A self-consistent manifest (checksum rewritten) whose cases.jsonl has a row without its gold answer.
    root = bank_set.save(tmp_path / "bank")
    path = root / "agent_1" / "cases.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    del row["gold"]
    lines[1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    from r2mad_core.files import file_sha256

    manifest["files"]["agent_1/cases.jsonl"].update(sha256=file_sha256(path), bytes=path.stat().st_size)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(MemoryBankError, match=r"agent_1/cases\.jsonl:2: not a memory case \(.*'gold'\)"):
        MemoryBankSet.load(root)


def test_load_remembers_an_unchanged_folder_and_hands_out_copies(tmp_path, bank_set, monkeypatch):
    root = bank_set.save(tmp_path / "bank")
    first = MemoryBankSet.load(root)
    reads = []
    original = MemoryBankSet._read_banks
    monkeypatch.setattr(MemoryBankSet, "_read_banks", staticmethod(lambda *a: reads.append(a) or original(*a)))
    first.banks[0].state_embeddings[:] = 0.0  # a caller writing into its copy changes no later load
    second = MemoryBankSet.load(root, embedder=HashingEmbedder(128), benchmark="truthfulqa")
    assert reads == []  # remembered: no file read again
    for original_bank, loaded in zip(bank_set.banks, second.banks, strict=False):
        assert loaded.cases == original_bank.cases
        np.testing.assert_array_equal(loaded.state_embeddings, original_bank.state_embeddings)
        np.testing.assert_array_equal(loaded.previous_response_embeddings, original_bank.previous_response_embeddings)
        np.testing.assert_array_equal(loaded.rewards, original_bank.rewards)
    with pytest.raises(MemoryBankError, match="hashing-128.*hashing-384"):  # the checks still run on a hit
        MemoryBankSet.load(root, embedder=HashingEmbedder(384))


def test_load_reverifies_a_folder_changed_after_it_was_remembered(tmp_path, bank_set):
    root = bank_set.save(tmp_path / "bank")
    MemoryBankSet.load(root)  # remembered
    path = root / "agent_2" / "response_embeddings.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the file's times and the checksum tell
    path.write_bytes(bytes(data))
    with pytest.raises(MemoryBankError, match=r"agent_2/response_embeddings\.npy: sha256"):
        MemoryBankSet.load(root)
    # a rebuild in the same folder (new manifest, other cases) is read, not the remembered set
    poison_bank(bank_set, 1.0).save(root, overwrite=True)
    assert MemoryBankSet.load(root).banks[1].rewards.tolist() == (1 - bank_set.banks[1].rewards).tolist()
