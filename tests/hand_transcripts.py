"""Hand-made transcript lines for the scoring and report tests: complete JSON objects of
:class:`r2mad_core.records.TranscriptRecord` (the schema every reader validates at the door), with neutral values
for the fields a test does not look at. Each returns a dict a test may still edit before scoring it."""

from __future__ import annotations

from typing import Any


def turn(**fields: Any) -> dict[str, Any]:
    """One agent's turn (``rounds[t].agents[i]``)."""
    out = {"agent": 0, "response": "", "answer": None, "correct": False, "finish_reason": "stop",
           "prompt_tokens": 0, "completion_tokens": 0, "cached": False, "seconds": 0.0, **fields}
    out.setdefault("truncated", out["finish_reason"] == "length")
    out.setdefault("empty", not out["response"].strip())
    return out


def round_(index: int, agents: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """Round ``index`` with these turns (each completed by :func:`turn`)."""
    return {"round": index, "agents": [turn(**a) for a in agents], "consensus_ratio": 0.0, "unanimous": False,
            "summary": None, "masking": None, "extra_calls": [], "seconds": 0.0, **fields}


def transcript(sample_id: str = "q", rounds: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    """One transcript line; ``rounds`` are :func:`round_` dicts (or partial ones, completed here)."""
    rounds = [round_(r.get("round", t), r.get("agents", []),
                     **{k: v for k, v in r.items() if k not in ("round", "agents")})
              for t, r in enumerate(rounds or [])]
    out = {"sample_id": sample_id, "benchmark": "truthfulqa", "split": "test", "gold": "A", "num_options": None,
           "method": "mad", "seed": 0, "rounds": rounds, "n_rounds_executed": len(rounds), "stopped_early": False,
           "final_answer": None, "correct": False, "seconds": 0.0, "truncated_completions": 0, **fields}
    vote = {"answer": out["final_answer"], "correct": out["correct"], "rule": "plurality", "group_sizes": [],
            "tied": False}
    out["vote"] = {**vote, **fields.get("vote", {})}
    return out
