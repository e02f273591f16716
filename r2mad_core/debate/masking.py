"""MAD-M2's peer selection (Tian et al., 2025): which previous-round responses an agent reads at round t.

Objective masking keeps the response(s) with the best mean token log-probability (the lowest perplexity: the
paper's appendix "Comparison of MAD-M2 Masking Strategies" and Tian et al.'s code, HongduanTian/MAD-MM; the better
half is ours); subjective masking asks the same model to judge each response and masks a ``NO``. Either is a
:class:`r2mad_core.debate.loop.PeerSelector`; :func:`r2mad_core.methods.mad_m2` builds the method.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from r2mad_core.debate import prompts
from r2mad_core.debate.loop import DebateConfig, DebateState, ExtraCall, PeerSelection, record_extra_call
from r2mad_core.engine import Engine, Request, SamplingParams
from r2mad_core.records import Transcript, as_transcript

logger = logging.getLogger(__name__)

JUDGE_TAG = "judge"
MASKING_STRATEGIES = ("objective", "subjective")
#: MAD-M2 objective masking: keep the lowest-perplexity response (default: the paper's appendix and Tian et
#: al.'s code) or the better half by mean log-probability (ours). Every other protocol vocabulary lives with its
#: concept: :data:`r2mad_core.debate.loop.ROUND0_MODES`, :data:`r2mad_core.memory.hook.EXPERIENCE_REFERENCES`,
#: :data:`r2mad_core.debate.prompts.TASK_PROMPT_WORDINGS`, :data:`r2mad_core.data.benchmarks.SPLIT_RULES`.
OBJECTIVE_KEEP = ("lowest_perplexity", "better_half")


def kept_by_logprob(mean_logprobs: Sequence[float | None], keep: str = "lowest_perplexity") -> list[int]:
    """Indices of the responses kept by objective masking (module docstring), in agent order."""
    n = len(mean_logprobs)
    if n == 0:
        return []
    count = math.ceil(n / 2) if keep == "better_half" else 1
    score = [(-math.inf if v is None or math.isnan(v) else v) for v in mean_logprobs]
    ranked = sorted(range(n), key=lambda i: (-score[i], i))
    return sorted(ranked[:count])


def _visible(kept: Sequence[int], n_agents: int) -> tuple[tuple[int, ...], ...]:
    kept_set = set(kept)
    return tuple(tuple(j for j in range(n_agents) if j != i and j in kept_set) for i in range(n_agents))


@dataclass(frozen=True)
class ObjectiveMasking:
    """Keep the previous-round responses with the best mean token log-probability."""

    keep: str = "lowest_perplexity"

    def select_peers(
        self, round_index: int, states: Sequence[DebateState], engine: Engine, config: Any
    ) -> list[PeerSelection]:
        selections = []
        for state in states:
            means = [t.mean_logprob for t in state.rounds[-1].turns]
            if any(m is None for m in means):
                logger.warning(
                    "objective masking, sample %s round %d: the engine returned no logprobs for agents %s; "
                    "they rank last", state.sample.id, round_index, [i for i, m in enumerate(means) if m is None]
                )
            kept = kept_by_logprob(means, self.keep)
            selections.append(
                PeerSelection(
                    visible=_visible(kept, state.n_agents),
                    record={"strategy": "objective", "keep": self.keep, "mean_logprob": means, "kept": kept},
                )
            )
        return selections


@dataclass(frozen=True)
class SubjectiveMasking:
    """The same model judges each previous-round response; ``NO`` masks it (one call per round)."""

    max_tokens: int = 512

    def select_peers(
        self, round_index: int, states: Sequence[DebateState], engine: Engine, config: DebateConfig
    ) -> list[PeerSelection]:
        params = SamplingParams(
            temperature=float(config.temperature), top_p=float(config.top_p), max_tokens=self.max_tokens,
            seed=config.sampling_seed,
        )
        requests = []
        for state in states:
            for turn in state.rounds[-1].turns:
                text = prompts.judge_prompt(state.benchmark, state.question, turn.response)
                requests.append(Request(messages=({"role": "user", "content": text},), params=params, tag=JUDGE_TAG))
        completions = engine.generate(requests) if requests else []
        if len(completions) != len(requests):
            raise RuntimeError(f"engine returned {len(completions)} judgements for {len(requests)} requests")
        selections = []
        position = 0
        for state in states:
            verdicts = []
            for _ in state.rounds[-1].turns:
                completion = completions[position]
                position += 1
                verdicts.append(prompts.parse_judgement(completion.text or ""))
                record_extra_call(state, ExtraCall.from_completion(JUDGE_TAG, completion))
            kept = [j for j, v in enumerate(verdicts) if v != "NO"]
            selections.append(
                PeerSelection(
                    visible=_visible(kept, state.n_agents),
                    record={"strategy": "subjective", "verdicts": verdicts, "kept": kept},
                )
            )
        return selections


def masking_decisions(records: Iterable[Transcript]) -> list[dict[str, Any]]:
    """MAD-M2's masking of every round t > 0: how many responses were kept and, for subjective
    masking, the judge's verdicts (comma-separated)."""
    rows = []
    for record in map(as_transcript, records):
        for rnd in record.rounds[1:]:
            info = rnd.masking or {}  # the peer selector's own record (its keys are the selector's)
            if not info:
                continue
            rows.append({"round": rnd.round, "responses kept": len(info.get("kept") or []),
                         "verdicts": ",".join(str(v) for v in info.get("verdicts", [])) or None})
    return rows
