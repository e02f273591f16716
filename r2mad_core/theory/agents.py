"""Simulated agents that follow the latent-concept model (Eq. estornell, Eq. joint_gen).

``SimulatedEngine`` answers every prompt the methods send without a language model: it reads the
prompt back with :func:`~r2mad_core.debate.prompt_parsing.parse_prompt`, finds the benchmark sample by its question text
and draws the agent's answer from the debate posterior of :mod:`r2mad_core.theory.model`:

    P(z_i = a | x, Z, E_i, phi_i) = sum_theta P(a | theta) P_{w,E}(theta | Z, x, E_i, phi_i),
    P_{w,E}(theta | ...) ∝ P(theta | phi_i) P(E_i | theta) prod_j P(z_j | theta)^{w_{j,i}}.

Per sample (deterministic from the sample id and ``params.difficulty_seed``, never from the run seed):
- the concept space: index 0 is the gold answer (theta*), index 1 a *misconception* (theta': another
  option letter for multiple choice; a wrong number for MATH500 that ``answers.is_correct`` rejects),
  the rest distractors (the other letters; ``math_distractors`` more wrong numbers);
- a concept prior: with probability ``shared_misconception_rate`` the sample is a *shared
  misconception* case whose prior mass on theta* is low and concentrated on theta' (most agents start
  wrong), otherwise an ordinary case. Each persona (read from the system prompt) shifts the prior's
  log-odds a little.

Per request:
- peers' answers (``answers.extract_answer`` of each peer text shown) enter the skew with weight
  ``high_confidence_weight`` / ``low_confidence_weight`` / 1 according to their annotation; the agent's
  own previous answer (its last assistant turn) enters with ``self_weight``;
- retrieved experiences correct the prior (Proposition 4.1, :func:`theory.memory_log_likelihood`):
  one whose recorded answer was correct multiplies the theta* likelihood by ``memory_ratio_correct``,
  one whose answer was incorrect divides the misconception's by ``memory_ratio_incorrect``. The lesson
  an experience teaches is its *label*; when the label is false (a poisoned memory: the engine checks the
  recorded answer against the past question's gold when it knows that question), the lesson points the
  wrong way: a wrong answer labelled correct boosts the misconception, a right answer labelled incorrect
  penalises theta* (v1 let any experience help, so 100% poisoned memory did not hurt);
- summary prompts get a two-sentence "Dynamic: ... Insight: ..." text from the consensus ratio;
- MAD-M2 judge prompts get a verdict [[YES]] / [[NO]] / [[NOT SURE]] drawn from the judge's prior
  belief in the judged answer (noisy but informative);
- ``logprobs=True`` returns per-token log-probabilities whose mean grows with the probability the
  agent gave its answer (MAD-M2 objective masking).

Randomness: every completion is drawn with a ``numpy`` Generator seeded by the request's cache key
(``Request.key(identity, model)``), so the same request always gives the same text and
``sample_index`` (or the run seed, part of ``identity``) gives distinct draws.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from r2mad_core.data import answers
from r2mad_core.data.benchmarks import MULTIPLE_CHOICE_BENCHMARKS, Sample
from r2mad_core.debate import prompts
from r2mad_core.debate.prompt_parsing import ParsedPrompt, parse_prompt
from r2mad_core.engine import Completion, Ledger, Request
from r2mad_core.theory import model as theory
from r2mad_core.theory.agent_texts import DEBATE_OPENINGS, FORMAT_FAILURES, reasoning

logger = logging.getLogger(__name__)

MODEL_VERSION = "v2"
"""Bumped whenever the simulated behaviour changes, so cached generations of older versions miss."""

TOKENS_PER_WORD = 1.3
_COMPLETIONS_KEPT = 200_000  # completions one engine remembers (SimulatedEngine._remembered), then it starts afresh

_PROFILES: dict[tuple, "SampleProfile"] = {}  # SimulatedEngine.profile's memo: sample_profile is pure


@dataclass(frozen=True)
class SimulatedAgentParams:
    """Every knob of the simulated agents (all enter the engine identity, hence the cache key).

    Concept priors (per sample, from the sample id):
        shared_misconception_rate: probability that a sample is a shared-misconception case.
        prior_true_mean: mean prior mass on the true concept theta* for ordinary samples.
        hard_prior_true_mean: mean prior mass on theta* for shared-misconception samples.
        misconception_strength: share of the wrong prior mass (1 - P(theta*)) that sits on the
            misconception theta' of ordinary samples; the rest is spread over the distractors.
        hard_misconception_strength: the same share for shared-misconception samples.
        prior_concentration: Beta concentration of the per-sample masses around their means
            (larger = samples more alike).
        persona_shift: standard deviation of each persona's shift of the theta*:theta' log-odds.
        difficulty_seed: seed of the per-sample draws (independent of the engine's run seed).
        math_distractors: number of wrong-number distractor concepts for MATH500 besides theta'.
    Likelihoods (Eq. joint_gen):
        peer_margin: kappa, log-likelihood margin of a peer answer for its own concept.
        answer_margin: margin of the generation term P(z_i | theta) (how faithfully the agent's
            answer follows its posterior).
        self_weight: weight of the agent's own previous answer (0 ignores it).
        high_confidence_weight: w for peers annotated high confidence (> 1).
        low_confidence_weight: w for peers annotated low confidence (< 1).
        memory_ratio_correct: likelihood ratio theta*:others of one experience whose answer was correct.
        memory_ratio_incorrect: likelihood ratio others:theta' of one experience whose answer was wrong.
    Output:
        reasoning_style_signal: probability that each reasoning sentence follows the style of the
            concept the answer came from (careful for theta*, shortcut for theta', guess for
            distractors) rather than a random style; 0 makes the text carry no signal.
        format_failure_rate: probability that a response has no parseable final answer.
        judge_not_sure_rate: probability that a MAD-M2 judge answers NOT SURE.
        response_words: mean number of reasoning words before the final answer.
        response_words_jitter: the word count is uniform in response_words ± this.
        logprob_scale: mean token log-probability = logprob_base + logprob_scale * log P(answer).
        logprob_base: see logprob_scale (<= 0).
    Performance benchmark:
        token_latency_ms: simulated decode time per completion token (0 = no sleep). A batch runs in
            waves of ``max_concurrency`` requests; each wave sleeps once for its longest completion.
        max_concurrency: simulated server slots.
    """

    shared_misconception_rate: float = 0.3
    prior_true_mean: float = 0.6
    hard_prior_true_mean: float = 0.2
    misconception_strength: float = 0.5
    hard_misconception_strength: float = 0.85
    prior_concentration: float = 20.0
    persona_shift: float = 0.3
    difficulty_seed: int = 0
    math_distractors: int = 2
    peer_margin: float = 1.0
    answer_margin: float = 4.0
    self_weight: float = 1.0
    high_confidence_weight: float = 1.5
    low_confidence_weight: float = 0.4
    memory_ratio_correct: float = 1.5
    memory_ratio_incorrect: float = 1.3
    reasoning_style_signal: float = 0.5
    format_failure_rate: float = 0.02
    judge_not_sure_rate: float = 0.1
    response_words: int = 40
    response_words_jitter: int = 10
    logprob_scale: float = 0.5
    logprob_base: float = -0.2
    token_latency_ms: float = 0.0
    max_concurrency: int = 16

    def __post_init__(self) -> None:
        checks = {
            "shared_misconception_rate": 0 <= self.shared_misconception_rate <= 1,
            "prior_true_mean": 0 < self.prior_true_mean < 1,
            "hard_prior_true_mean": 0 < self.hard_prior_true_mean < 1,
            "misconception_strength": 0 < self.misconception_strength <= 1,
            "hard_misconception_strength": 0 < self.hard_misconception_strength <= 1,
            "prior_concentration": self.prior_concentration > 0,
            "persona_shift": self.persona_shift >= 0,
            "math_distractors": self.math_distractors >= 0,
            "peer_margin": self.peer_margin > 0,
            "answer_margin": self.answer_margin > 0,
            "self_weight": self.self_weight >= 0,
            "high_confidence_weight": self.high_confidence_weight > 0,
            "low_confidence_weight": self.low_confidence_weight > 0,
            "memory_ratio_correct": self.memory_ratio_correct > 0,
            "memory_ratio_incorrect": self.memory_ratio_incorrect > 0,
            "reasoning_style_signal": 0 <= self.reasoning_style_signal <= 1,
            "format_failure_rate": 0 <= self.format_failure_rate < 1,
            "judge_not_sure_rate": 0 <= self.judge_not_sure_rate < 1,
            "response_words": self.response_words >= 1,
            "response_words_jitter": 0 <= self.response_words_jitter < self.response_words,
            "logprob_scale": self.logprob_scale >= 0,
            "logprob_base": self.logprob_base <= 0,
            "token_latency_ms": self.token_latency_ms >= 0,
            "max_concurrency": self.max_concurrency >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                "SimulatedAgentParams: invalid " + ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            )

    def behaviour_dict(self) -> dict:
        """The parameters that change outputs (latency and concurrency do not)."""
        d = asdict(self)
        d.pop("token_latency_ms")
        d.pop("max_concurrency")
        return d


@dataclass(frozen=True)
class SampleProfile:
    """What the simulated agents believe about one sample.

    ``concepts[k]`` is the answer string of concept k (``concepts[0]`` = gold, ``concepts[1]`` = the
    misconception); ``log_prior`` is the persona-free concept prior (log, shape (K,));
    ``shared_misconception`` says whether most agents start wrong.
    """

    sample_id: str
    benchmark: str
    concepts: tuple[str, ...]
    log_prior: np.ndarray
    shared_misconception: bool

    @property
    def gold(self) -> str:
        return self.concepts[theory.TRUE_CONCEPT]

    @property
    def misconception(self) -> str:
        return self.concepts[theory.MISCONCEPTION]


def _hash_int(*parts: object) -> int:
    blob = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big")


def _rng(*parts: object) -> np.random.Generator:
    return np.random.default_rng(_hash_int(*parts))


def _wrong_math_answers(sample: Sample, count: int, seed: int) -> list[str]:
    """``count`` distinct integers (as strings) that ``answers.is_correct`` rejects against the gold.

    A gold integer g gets plausible neighbours (g + d for small d); any other gold gets integers from
    a hash of the sample id.
    """
    rng = _rng("math-wrong", sample.id, seed)
    gold_number = None
    try:
        gold_number = int(answers.canonical_answer(sample.gold, sample.benchmark))
    except ValueError:
        pass
    out: list[str] = []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 1000:
            raise RuntimeError(f"sample {sample.id!r}: could not derive {count} wrong answers for gold {sample.gold!r}")
        if gold_number is not None and attempts <= 50:
            candidate = gold_number + int(rng.choice([-1, 1])) * int(rng.integers(1, 10))
        else:
            candidate = int(rng.integers(2, 200))
        text = str(candidate)
        if text in out:
            continue
        # distinct integers never agree; anything else goes through the checker (math-verify)
        if ((candidate == gold_number) if gold_number is not None
                else answers.is_correct(text, sample.gold, sample.benchmark)):
            continue
        out.append(text)
    return out


def sample_profile(sample: Sample, params: SimulatedAgentParams) -> SampleProfile:
    """The concepts and concept prior of ``sample`` (deterministic in sample id and params)."""
    rng = _rng("profile", sample.id, params.difficulty_seed)
    if sample.is_multiple_choice:
        letters = sample.option_letters
        others = [c for c in letters if c != sample.gold]
        misconception = others[int(rng.integers(len(others)))]
        concepts = (sample.gold, misconception, *[c for c in others if c != misconception])
    else:
        concepts = (sample.gold, *_wrong_math_answers(sample, 1 + params.math_distractors, params.difficulty_seed))
    shared = bool(rng.random() < params.shared_misconception_rate)
    mean_true = params.hard_prior_true_mean if shared else params.prior_true_mean
    strength = params.hard_misconception_strength if shared else params.misconception_strength
    c = params.prior_concentration
    p_true = float(np.clip(rng.beta(mean_true * c, (1 - mean_true) * c), 0.01, 0.98))
    K = len(concepts)
    if K == 2:
        prior = np.array([p_true, 1 - p_true])
    else:
        p_miscon = (1 - p_true) * strength
        prior = np.full(K, (1 - p_true - p_miscon) / (K - 2))
        prior[theory.TRUE_CONCEPT] = p_true
        prior[theory.MISCONCEPTION] = p_miscon
    prior = np.maximum(prior, 1e-6)
    log_prior = np.log(prior / prior.sum())
    log_prior.setflags(write=False)
    return SampleProfile(sample.id, sample.benchmark, tuple(concepts), log_prior, shared)


@functools.lru_cache(maxsize=1 << 16)  # pure: every request repeats its conversation's earlier messages
def _count_tokens(text: str) -> int:
    return int(round(TOKENS_PER_WORD * len(text.split())))


class SimulatedEngine:
    """Latent-concept agents behind the ``Engine`` protocol (see the module docstring).

    ``samples``: every sample whose questions the engine may be asked (the question text is the key).
    ``seed``: the run seed (part of the identity; changes every draw, not the samples' difficulty).

    ``generate`` may be called from several threads at once (``concurrent_generate``, see
    :mod:`r2mad_core.debate.scheduling`): every draw depends on the request alone, the sample profiles are built
    under a lock and the ledger is locked; each call sleeps its own modelled latency.
    """

    concurrent_generate = True

    def __init__(
        self,
        samples: Sequence[Sample],
        *,
        seed: int = 0,
        params: SimulatedAgentParams | None = None,
        model: str = "simulated-latent-concept",
    ) -> None:
        self.params = params or SimulatedAgentParams()
        self.seed = int(seed)
        self.model = model
        self.ledger = Ledger()
        behaviour = json.dumps(self.params.behaviour_dict(), sort_keys=True, separators=(",", ":"))
        self.identity = f"simulated:{MODEL_VERSION}:seed={self.seed}:params={behaviour}"
        self._by_question: dict[str, Sample] = {}
        for sample in samples:
            key = sample.question.strip()
            known = self._by_question.get(key)
            if known is not None and known.gold != sample.gold:
                raise ValueError(f"SimulatedEngine: samples {known.id!r} and {sample.id!r} share a question text but "
                                 f"have different gold answers ({known.gold!r} vs {sample.gold!r})")
            self._by_question.setdefault(key, sample)
        if not self._by_question:
            raise ValueError("SimulatedEngine: samples is empty; the engine identifies questions by their text")
        self._profiles: dict[str, SampleProfile] = {}
        self._distributions: dict[tuple, np.ndarray] = {}
        self._persona_priors: dict[tuple[str, int], np.ndarray] = {}  # persona_log_prior, pure in (sample, persona)
        self._completions: dict[str, Completion] = {}  # request key -> completion (_remembered)
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def worth_caching(params: Any = None, **_options: Any) -> bool:
        """A response cache saves time only with a modelled decode time (``token_latency_ms > 0``); without, a
        completion (a function of its request) costs less than keying, looking up and storing it."""
        get = params.get if isinstance(params, Mapping) else lambda name, default: getattr(params, name, default)
        return float(get("token_latency_ms", 0.0)) > 0

    # ------------------------------------------------------------------------------ public helpers
    def sample_for(self, question: str) -> Sample:
        """The sample whose question text is ``question``; ValueError when unknown."""
        sample = self._by_question.get(prompts.strip_question_prefix(question.strip()))
        if sample is None:
            preview = question.strip().replace("\n", " ")[:80]
            raise ValueError(f"SimulatedEngine: unknown question {preview!r}: not among the {len(self._by_question)} "
                             "samples the engine was built with (pass every sample the run asks about)")
        return sample

    def profile(self, sample: Sample | str) -> SampleProfile:
        """The :class:`SampleProfile` of a sample (or of a question text)."""
        if isinstance(sample, str):
            sample = self.sample_for(sample)
        with self._lock:
            cached = self._profiles.get(sample.id)
            if cached is None:
                # one process builds each profile once, whichever engine asks (the notebooks build several)
                key = (sample.id, sample.benchmark, sample.gold, tuple(sample.choices), self.params)
                cached = _PROFILES.get(key) or _PROFILES.setdefault(key, sample_profile(sample, self.params))
                self._profiles[sample.id] = cached
        return cached

    def concept_model(self, profile: SampleProfile) -> theory.LatentConceptModel:
        return theory.LatentConceptModel(
            num_concepts=len(profile.concepts),
            kappa=self.params.peer_margin,
            generation_kappa=self.params.answer_margin,
        )

    def persona_log_prior(self, profile: SampleProfile, persona: int | None) -> np.ndarray:
        """The concept prior of a persona: the sample prior with the theta*:theta' log-odds shifted by
        a per-(sample, persona) normal draw of sd ``persona_shift`` (no shift when persona is None)."""
        if persona is None or self.params.persona_shift == 0:
            return np.array(profile.log_prior)
        key = (profile.sample_id, persona)  # the engine's params are fixed: the prior is pure in the key (before,
        cached = self._persona_priors.get(key)  # it was recomputed, a new random generator each time, on every miss)
        if cached is None:
            log_prior = np.array(profile.log_prior)
            shift = self.params.persona_shift * float(
                _rng("persona", profile.sample_id, persona, self.params.difficulty_seed).standard_normal()
            )
            log_prior[theory.TRUE_CONCEPT] += shift / 2
            log_prior[theory.MISCONCEPTION] -= shift / 2
            cached = self._persona_priors[key] = log_prior - np.logaddexp.reduce(log_prior)
        return cached.copy()

    def answer_probabilities(
        self,
        sample: Sample,
        *,
        persona: int | None = None,
        peer_answers: Sequence[str | None] = (),
        peer_confidences: Sequence[str | None] | None = None,
        own_previous_answer: str | None = None,
        experiences_correct: Sequence[bool] = (),
        experiences_mislabelled: Sequence[bool] = (),
    ) -> dict[str, float]:
        """P(answer) of an agent in this state (Eq. joint_gen): concept answer string -> probability.

        ``experiences_correct`` are the labels shown; ``experiences_mislabelled[k]`` marks a label that is false."""
        profile = self.profile(sample)
        probabilities = self._answer_distribution(
            profile, persona, peer_answers, peer_confidences, own_previous_answer, experiences_correct,
            experiences_mislabelled,
        )
        return {concept: float(p) for concept, p in zip(profile.concepts, probabilities, strict=False)}

    # ------------------------------------------------------------------------------ Engine protocol
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        if self._closed:
            raise RuntimeError("SimulatedEngine: generate() called after close()")
        completions = [self._remembered(request) for request in requests]
        self._simulate_latency(completions)
        for request, completion in zip(requests, completions, strict=False):
            self.ledger.record(request, completion)
        return completions

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "SimulatedEngine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------ internals
    def _simulate_latency(self, completions: list[Completion]) -> None:
        latency = self.params.token_latency_ms / 1000.0
        if latency <= 0 or not completions:
            return
        slots = self.params.max_concurrency
        for start in range(0, len(completions), slots):
            wave = completions[start : start + slots]
            seconds = max(c.completion_tokens for c in wave) * latency
            time.sleep(seconds)
            for c in wave:
                c.seconds = seconds

    def _concept_index(self, profile: SampleProfile, answer: str | None) -> int:
        if answer is None:
            return theory.NO_ANSWER
        canonical = answers.canonical_answer(answer, profile.benchmark)
        for k, concept in enumerate(profile.concepts):
            if answers.canonical_answer(concept, profile.benchmark) == canonical:
                return k
        if profile.benchmark not in MULTIPLE_CHOICE_BENCHMARKS:
            for k, concept in enumerate(profile.concepts):
                if answers.answers_equivalent(concept, answer, profile.benchmark):
                    return k
        return theory.NO_ANSWER  # an answer outside the concept space carries no evidence

    def _answer_distribution(
        self,
        profile: SampleProfile,
        persona: int | None,
        peer_answers: Sequence[str | None],
        peer_confidences: Sequence[str | None] | None,
        own_previous_answer: str | None,
        experiences_correct: Sequence[bool],
        experiences_mislabelled: Sequence[bool] = (),
    ) -> np.ndarray:
        p = self.params
        model = self.concept_model(profile)
        confidences = list(peer_confidences) if peer_confidences is not None else [None] * len(peer_answers)
        if len(confidences) != len(peer_answers):
            raise ValueError(
                f"peer_confidences: expected {len(peer_answers)} entries (one per peer), found {len(confidences)}"
            )
        weight_of = {"high": p.high_confidence_weight, "low": p.low_confidence_weight, None: 1.0}
        codes = [self._concept_index(profile, a) for a in peer_answers]
        weights = [weight_of[c] for c in confidences]
        if own_previous_answer is not None and p.self_weight > 0:
            codes.append(self._concept_index(profile, own_previous_answer))
            weights.append(p.self_weight)
        mislabelled = list(experiences_mislabelled) or [False] * len(experiences_correct)
        if len(mislabelled) != len(experiences_correct):
            raise ValueError(
                f"experiences_mislabelled: expected {len(experiences_correct)} entries, found {len(mislabelled)}"
            )
        counts = {(label, false): 0 for label in (True, False) for false in (True, False)}
        for label, false in zip(experiences_correct, mislabelled, strict=False):
            counts[(bool(label), bool(false))] += 1
        key = (profile.sample_id, persona, tuple(codes), tuple(weights), tuple(counts.values()),
               bool(experiences_correct))
        cached = self._distributions.get(key)  # pure in the key: round 0 and unanimous rounds repeat states
        if cached is not None:
            return cached.copy()
        log_memory = None
        if experiences_correct:
            log_memory = theory.memory_log_likelihood(
                model.num_concepts, counts[(True, False)], counts[(False, False)], p.memory_ratio_correct,
                p.memory_ratio_incorrect, misleading_supporting=counts[(True, True)],
                misleading_contrastive=counts[(False, True)],
            )
        log_post = theory.debate_log_posterior(
            model,
            self.persona_log_prior(profile, persona),
            np.array(codes, dtype=int) if codes else None,
            np.array(weights, dtype=float) if codes else None,
            log_memory,
        )
        cached = self._distributions[key] = theory.answer_distribution(model, log_post)
        return cached.copy()

    def _mislabelled(self, experience: prompts.ExperienceView) -> bool:
        """Whether an experience's correctness label is false: its answer against its question's gold (False when
        the engine does not know that question: the label is then taken at its word)."""
        past = self._by_question.get(prompts.strip_question_prefix(experience.question.strip()))
        if past is None:
            return False
        truly_correct = answers.is_correct(experience.answer, past.gold, past.benchmark)
        return truly_correct != bool(experience.correct)

    def _persona(self, messages: Sequence[dict], benchmark: str) -> int | None:
        for message in messages:
            if message.get("role") == "system":
                text = message.get("content", "").replace(prompts.AUTHORS_MATH_SYSTEM_FORMAT, prompts.MATH_FORMAT)
                for index, (_, persona_text) in enumerate(prompts.personas(benchmark)):
                    if text.strip() == persona_text.strip():
                        return index
                return None
        return None

    def _remembered(self, request: Request) -> Completion:
        """``_complete(request)`` computed once per request key and engine (a completion is a function of both:
        variants of a run repeat its round-0 requests); a copy each time, never marked ``cached``."""
        key = request.key(self.identity, self.model)
        done = self._completions.get(key)
        if done is None:
            if len(self._completions) >= _COMPLETIONS_KEPT:
                self._completions.clear()
            done = self._completions[key] = self._complete(request)
        return replace(done, logprobs=None if done.logprobs is None else list(done.logprobs))

    def _complete(self, request: Request) -> Completion:
        users = [m for m in request.messages if m.get("role") == "user"]
        if not users:
            raise ValueError("SimulatedEngine: request has no user message")
        user_text = users[-1]["content"]
        try:
            parsed = parse_prompt(user_text)
        except ValueError as error:
            raise ValueError(
                f"SimulatedEngine: cannot read the prompt (tag {request.tag!r}): {error}; "
                f"it begins {user_text[:80]!r}"
            ) from error
        rng = np.random.default_rng(int(request.key(self.identity, self.model)[:16], 16))
        logprobs: list[float] | None = None
        if parsed.kind == "summary":
            text = self._summary(parsed, rng)
            belief = 1.0
        elif parsed.kind == "judge":
            text, belief = self._judgement(parsed, request, rng)
        else:
            text, belief = self._answer(parsed, request, rng)
        completion_tokens = _count_tokens(text)
        finish_reason = "stop"
        if completion_tokens > request.params.max_tokens:
            keep = max(int(request.params.max_tokens / TOKENS_PER_WORD), 0)
            text = " ".join(text.split()[:keep])
            completion_tokens = _count_tokens(text)
            finish_reason = "length"
        if request.params.logprobs:
            logprobs = self._logprobs(rng, completion_tokens, belief)
        prompt_tokens = sum(_count_tokens(m.get("content", "")) for m in request.messages)
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            logprobs=logprobs,
            finish_reason=finish_reason,
        )

    def _logprobs(self, rng: np.random.Generator, count: int, belief: float) -> list[float]:
        """Per-token log-probabilities (all <= 0) with mean logprob_base + logprob_scale * log(belief)."""
        if count <= 0:
            return []
        mean = self.params.logprob_base + self.params.logprob_scale * float(np.log(max(belief, 1e-6)))
        return [float(v) for v in mean * rng.exponential(1.0, size=count)]

    def _answer(self, parsed: ParsedPrompt, request: Request, rng: np.random.Generator) -> tuple[str, float]:
        sample = self.sample_for(parsed.question)
        profile = self.profile(sample)
        benchmark = sample.benchmark
        num_options = len(sample.choices) or None
        peer_answers = [answers.extract_answer(peer.text, benchmark, num_options) for peer in parsed.peers]
        peer_confidences = [peer.confidence for peer in parsed.peers]
        own_previous = None
        assistants = [m for m in request.messages if m.get("role") == "assistant"]
        if assistants:
            own_previous = answers.extract_answer(assistants[-1].get("content", ""), benchmark, num_options)
        distribution = self._answer_distribution(
            profile,
            self._persona(request.messages, benchmark),
            peer_answers,
            peer_confidences,
            own_previous,
            [e.correct for e in parsed.experiences],
            [self._mislabelled(e) for e in parsed.experiences],
        )
        temperature = request.params.temperature
        if temperature <= 0:
            choice = int(np.argmax(distribution))
        else:
            tempered = distribution ** (1.0 / temperature)
            choice = int(theory.sample_answers(rng, tempered / tempered.sum()))
        belief = float(distribution[choice])
        p = self.params
        words = int(rng.integers(p.response_words - p.response_words_jitter,
                                 p.response_words + p.response_words_jitter + 1))
        body = reasoning(rng, words, choice, p.reasoning_style_signal)
        if parsed.kind == "debate":
            body = f"{DEBATE_OPENINGS[int(rng.integers(len(DEBATE_OPENINGS)))]} {body[0].lower()}{body[1:]}"
        if rng.random() < p.format_failure_rate:
            return f"{body} {FORMAT_FAILURES[int(rng.integers(len(FORMAT_FAILURES)))]}", belief
        answer = profile.concepts[choice]
        if benchmark not in MULTIPLE_CHOICE_BENCHMARKS:
            return f"{body} The answer is \\boxed{{{answer}}}.", belief
        return f"{body} The answer is (({answer})).", belief

    def _judgement(self, parsed: ParsedPrompt, request: Request, rng: np.random.Generator) -> tuple[str, float]:
        sample = self.sample_for(parsed.question)
        profile = self.profile(sample)
        judged = answers.extract_answer(parsed.response or "", sample.benchmark, len(sample.choices) or None)
        code = self._concept_index(profile, judged)
        model = self.concept_model(profile)
        log_post = theory.debate_log_posterior(
            model, self.persona_log_prior(profile, self._persona(request.messages, sample.benchmark)))
        belief = 0.0 if code == theory.NO_ANSWER else float(np.exp(log_post[code]))
        if rng.random() < self.params.judge_not_sure_rate:
            verdict, reason = "NOT SURE", "The argument is hard to verify from the steps given."
        elif rng.random() < belief:
            verdict, reason = "YES", "The reasoning is consistent and the final answer follows from it."
        else:
            verdict, reason = "NO", "A step of the reasoning does not hold, so the final answer is doubtful."
        return f"{reason} [[{verdict}]]", max(belief, 1e-3)

    def _summary(self, parsed: ParsedPrompt, rng: np.random.Generator) -> str:
        ratio = parsed.consensus_ratio if parsed.consensus_ratio is not None else 0.0
        if ratio >= 0.999:
            dynamic = (
                "All agents now hold the same stance, so the debate has converged on a unanimous position.",
                "The agents agree on a single stance and no transition is pending.",
            )
            insight = (
                "The agreement rests on a shared line of reasoning that no agent has challenged on substance.",
                "Consensus pressure and a common solution strategy reinforce each other, leaving no open contention.",
            )
        elif ratio > 0.5:
            dynamic = (
                "A majority holds one stance while a minority keeps a different position.",
                "The debate is converging, with most agents aligned and one dissenting stance remaining.",
            )
            insight = (
                "The minority's persistence keeps an unresolved point of contention open against consensus pressure.",
                "The majority argument has not yet addressed the minority's objection on substance.",
            )
        else:
            dynamic = (
                "The agents are split across several distinct stances with no majority.",
                "Stances remain divided and the debate is stagnating without a clear direction.",
            )
            insight = (
                "Competing solution strategies remain unreconciled, and no argument has yet proved decisive.",
                "Each stance relies on a different reading of the problem, which sustains the disagreement.",
            )
        pick = lambda options: options[int(rng.integers(len(options)))]  # noqa: E731
        return f"Dynamic: {pick(dynamic)}\n\nInsight: {pick(insight)}"

