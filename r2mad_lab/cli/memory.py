"""Command-line pieces for the experience memory (Appendix A "Memory Construction"; Eq. 4-7 options).

Registered by :mod:`r2mad_lab.cli.commands`:

- ``r2mad run`` gets the R2-MAD / ICL-CoT options (``--memory``, ``--retrieval-policy``, one flag per
  :class:`~r2mad_core.memory.settings.MemorySettings` field generated from its declaration (``-K``/``--top-k``, ...),
  ``--no-memory``, ``--no-confidence``, the authors'-code confidence variants, ``--poison-fraction``,
  ``--icl-match``, ``--embedder``), forwarded to ``methods.get_method`` like every method option.
- ``r2mad build-memory``: the memory-construction debates on the train split, then the banks
  (:func:`r2mad_lab.experiments.build_memory.build_memory`).
- ``r2mad audit BANK``: :func:`r2mad_core.memory.audit.audit_bank_set`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from r2mad_core.data import benchmarks
from r2mad_core.data.benchmarks import BENCHMARKS, SPLIT_RULES
from r2mad_core.debate.settings import DEFAULTS, PROFILE_SETTINGS, DebateSettings
from r2mad_core.memory import settings as memory_settings
from r2mad_core.memory.audit import audit_bank_set
from r2mad_core.memory.banks import MemoryBankError, MemoryBankSet
from r2mad_core.memory.cases import REWARD_DEFINITIONS, STATE_ENCODINGS, STATE_LAYOUTS
from r2mad_core.memory.embeddings import get_embedder
from r2mad_core.memory.hook import SIMILARITY_MATCHES
from r2mad_core.methods import CONFIDENCE_LABELS, CONFIDENCE_POOLS, PEER_RESPONSE_ROUNDS
from r2mad_lab import engines
from r2mad_lab.cli.common import (
    DEFAULT_CACHE_DIR,
    Interrupted,
    UsageError,
    add_engine_arguments,
    add_method_option,
    add_setting_arguments,
    check_out_dir,
    integer,
    kept_questions,
    positive_int,
    split_rule_of,
)
from r2mad_lab.experiments.build_memory import build_memory
from r2mad_lab.experiments.cell import RunConfigMismatch, RunDirectoryBusy
from r2mad_lab.experiments.protocol import PROTOCOLS, memory_options, sampling_lengths
from r2mad_lab.experiments.protocol import help_text as protocol_help

#: The debate settings ``build-memory`` takes (the rest are fixed by Appendix A: summaries, no early stop, or the
#: ``--protocol`` preset's loop choices).
MEMORY_SETTINGS = PROFILE_SETTINGS


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], found {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], found {text}")
    return value


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    """R2-MAD / ICL-CoT options of ``r2mad run``."""
    group = parser.add_argument_group("memory (methods r2mad and icl_cot)")
    add_method_option(parser, group, "--memory", dest="memory", metavar="DIR",
                      help="memory bank directory (r2mad build-memory)")
    # K, the retrieval policy, Eq. 6's tradeoff, the fixed lambda, the thresholds, the shown length: one flag per
    # MemorySettings field
    add_setting_arguments(parser, group, declaration=memory_settings, aliases={"top_k": ("-K",)})
    add_method_option(parser, group, "--no-memory", dest="use_memory", action="store_false",
                      help="R2-MAD w/o Memory: no experiences in the prompt (confidence still estimated)")
    add_method_option(parser, group, "--no-confidence", dest="use_confidence", action="store_false",
                      help="R2-MAD w/o Confidence: no confidence annotations")
    add_method_option(parser, group, "--confidence-label", dest="confidence_label", choices=CONFIDENCE_LABELS,
                      help="what Eq. 7 averages (default: peer_correctness; authors' code: "
                           "retrieving_agent_correctness)")
    add_method_option(parser, group, "--confidence-pool", dest="confidence_pool", choices=CONFIDENCE_POOLS,
                      help="cases Eq. 7 sums over (default: retrieved; authors' code: candidates)")
    add_method_option(parser, group, "--peer-response-round", dest="peer_response_round", choices=PEER_RESPONSE_ROUNDS,
                      help="stored peer response compared in Eq. 7 (default: case; authors' code: state)")
    add_method_option(parser, group, "--poison-fraction", dest="poison_fraction", type=_unit_float,
                      help="flip the labels of this share of memory cases (poisoned-memory experiment)")
    add_method_option(parser, group, "--poison-seed", dest="poison_seed", type=integer,
                      help="seed of the poisoned cases")
    add_method_option(parser, group, "--embedder", dest="embedder",
                      help="embedder of the retrieval queries (default: the bank's; another one is an error)")
    add_method_option(parser, group, "--icl-match", dest="match", choices=SIMILARITY_MATCHES,
                      help="ICL-CoT: match the question to the cases' questions (default) or to their states")


# --------------------------------------------------------------------------------------------
# build-memory
# --------------------------------------------------------------------------------------------
def add_build_memory_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("memory construction")
    group.add_argument("--benchmark", required=True, choices=BENCHMARKS, help="benchmark whose train split is debated")
    group.add_argument("--split", default="train", choices=("train", "test", "all"), help="split (default: train)")
    group.add_argument("--protocol", default=None, choices=PROTOCOLS,
                       help=protocol_help().replace("%", "%%") + ": here the split rule, reward, state layout and the "
                       "debates' summaries, prompts, empty peers and thinking (default: none, the defaults below)")
    group.add_argument("--split-rule", default=None, choices=SPLIT_RULES,
                       help="which questions form the split: paper (default; the paper's counts, our seeded "
                       "permutation) or authors (the authors' code: random.seed(42), first 75%% train)")
    group.add_argument("--out", required=True, type=Path, metavar="DIR", help="bank directory to write")
    group.add_argument("--limit", type=positive_int, default=None, help="first N questions of the split (default: all)")
    group.add_argument("--seed", type=integer, default=0, help="run seed of the debates (default: 0)")
    group.add_argument("--embedder", default=None,
                       help="minilm, bge-m3, hashing[-dim], or a model name/folder (default: follows the engine: "
                       "hashing for the simulated engine, as the sim/tiny profiles do; minilm for a real model)")
    add_setting_arguments(parser, group, MEMORY_SETTINGS, forward=False)  # r2mad_core/debate/settings.py
    # the generation lengths: given, else --protocol's (authors: 6144 for every call), else the settings' defaults
    parser.set_defaults(**{name: None for name in LENGTHS})
    group.add_argument("--reward-definition", choices=REWARD_DEFINITIONS, default=None,
                       help="outcome reward r_i: final_vote (default; ours, our reading of the paper's 'whether "
                       "a concluded debate reached a good answer'), agent_final (ours) or round_correctness (the "
                       "authors' code: zeta_i^(t)); see r2mad_core.memory.banks")
    group.add_argument("--state-layout", choices=STATE_LAYOUTS, default=None,
                       help="state text layout (default: --protocol's, else full)")
    group.add_argument("--state-encoding", choices=STATE_ENCODINGS, default="text",
                       help="state embedding (default: text)")
    group.add_argument("--debates-dir", type=Path, default=None, metavar="DIR",
                       help="run directory of the debates (default: OUT/debates; resumable)")
    group.add_argument("--overwrite", action="store_true", help="replace an existing bank set in --out")
    group.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="benchmark data (default: $R2MAD_DATA_DIR)")
    group.add_argument("--chunk-size", type=positive_int, default=32,
                       help="questions per batch of debates (default: 32)")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_arguments(parser)


def default_embedder(engine: str) -> str:
    """The embedder ``build-memory`` uses without ``--embedder``: ``hashing`` for the simulated engine
    (its responses are not language; the sim and tiny profiles use it too), ``minilm`` otherwise."""
    return "hashing" if engine == "simulated" else "minilm"


def check_top_k_fits_bank(hook: Any, method: str, memory: Any) -> None:
    """-K must not exceed what the bank can give: R2-MAD retrieves K cases from each agent's bank,
    ICL-CoT K distinct training questions (``match="question"``) or K cases (``match="state"``).
    A larger K would silently retrieve everything (and blow up the prompt); UsageError instead."""
    bank_set = getattr(hook, "bank_set", None)
    if bank_set is None:
        return
    settings = getattr(hook, "settings", None)
    if settings is not None and hasattr(settings, "retrieval"):
        k = int(settings.retrieval.k)
        available = min(len(bank) for bank in bank_set.banks)
        what = "cases per agent"
    elif hasattr(hook, "top_k") and hasattr(hook, "bank"):
        k = int(hook.top_k)
        if getattr(hook, "match", "question") == "question":
            available = len({case.sample_id for case in hook.bank.cases})
            what = "distinct training questions"
        else:
            available = len(hook.bank)
            what = "cases"
    else:
        return
    if k > available:
        raise UsageError(
            f"K = {k} (-K) is larger than the memory bank's {available} {what} ({memory}); {method} would retrieve "
            f"everything in every prompt: use -K {available} or less, or build the bank from more questions"
        )


def _make_engine(args: argparse.Namespace, samples: Any) -> Any:
    engine_options = dict(args.engine_options)
    if args.engine == "simulated":
        engine_options.setdefault("samples", samples)
    cache_dir = None
    if not args.no_cache:
        cache_dir = args.cache_dir or Path(os.environ.get("R2MAD_CACHE_DIR", DEFAULT_CACHE_DIR))
    try:
        return engines.make_engine(args.engine, model=args.model, cache_dir=cache_dir, **engine_options)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"engine {args.engine}: {exc}") from None


LENGTHS = ("max_tokens", "summary_max_tokens")


def _memory_settings(args: argparse.Namespace) -> DebateSettings:
    """The debates' settings: the flags; a length not given is ``--protocol``'s (authors: 6144), else the default."""
    preset_lengths = sampling_lengths(args.protocol) if args.protocol else {}
    values = {n: getattr(args, n) for n in MEMORY_SETTINGS}
    for name in LENGTHS:
        if values.get(name) is None:
            values[name] = preset_lengths.get(name, DEFAULTS[name])
    return DebateSettings(**values)


def build_memory_command(args: argparse.Namespace) -> int:
    if (args.out / "manifest.json").exists() and not args.overwrite:
        raise UsageError(f"{args.out} already holds a memory bank (manifest.json); pass --overwrite to rebuild it")
    check_out_dir(args.out)
    try:
        samples = benchmarks.load(args.benchmark, args.split, data_dir=args.data_dir, split_rule=split_rule_of(args))
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(f"cannot load {args.benchmark} {args.split}: {exc}") from None
    built = memory_options(args.protocol, {"split_rule": None}) if args.protocol else {
        "reward_definition": "final_vote", "state_layout": "full", "debate_options": {}}
    if args.reward_definition:
        built["reward_definition"] = args.reward_definition
    if args.state_layout:
        built["state_layout"] = args.state_layout
    if args.limit is not None:
        samples = samples[: args.limit]
    if args.embedder is None:
        args.embedder = default_embedder(args.engine)
        print(f"r2mad build-memory: embedder {args.embedder} (the default for the {args.engine} engine; "
              f"--embedder to choose another)", file=sys.stderr)
    try:
        embedder = get_embedder(args.embedder)
    except (ImportError, RuntimeError, ValueError) as exc:
        raise UsageError(f"embedder {args.embedder!r}: {exc}") from None
    engine = _make_engine(args, samples)
    try:
        bank_set = build_memory(
            args.benchmark, engine, embedder, args.out, args.limit,
            split=args.split, seed=args.seed, settings=_memory_settings(args),
            reward_definition=built["reward_definition"], state_layout=built["state_layout"],
            debate_options=built["debate_options"],
            state_encoding=args.state_encoding, run_dir=args.debates_dir, data_dir=args.data_dir,
            samples=samples, chunk_size=args.chunk_size, progress=not args.no_progress, overwrite=args.overwrite,
        )
    except (RunConfigMismatch, RunDirectoryBusy, FileExistsError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        debates = args.debates_dir or args.out / "debates"
        raise Interrupted(
            f"interrupted: {kept_questions(debates)} of {len(samples)} debates are kept in {debates} (finished "
            "generations are cached); rerun the same command to resume, the bank is built when all are done"
        ) from None
    finally:
        engine.close()
    accuracy = bank_set.metadata.get("debate_accuracy")
    print(
        f"memory bank for {args.benchmark} {args.split}: {[len(b) for b in bank_set.banks]} cases per agent "
        f"from {bank_set.metadata.get('n_debates')} debates (debate accuracy "
        f"{'n/a' if accuracy is None else f'{accuracy:.3f}'}), embedder {bank_set.embedder_name}, written to {args.out}"
    )
    return 0


# --------------------------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------------------------
def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bank", type=Path, metavar="BANK", help="memory bank directory")
    parser.add_argument("--embedder", default=None, help="embedder to recompute embeddings with (default: the bank's)")
    parser.add_argument("--no-embeddings", action="store_true", help="do not recompute embeddings")
    parser.add_argument("--sample-size", type=positive_int, default=32,
                        help="cases per agent whose embeddings are recomputed")
    parser.add_argument("--seed", type=integer, default=0, help="seed of the recomputed sample")
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")


def audit_command(args: argparse.Namespace) -> int:
    try:
        bank_set = MemoryBankSet.load(args.bank)
    except MemoryBankError as exc:
        raise UsageError(str(exc)) from None
    embedder = None
    if not args.no_embeddings:
        name = args.embedder or bank_set.embedder_name
        try:
            embedder = get_embedder(name)
            bank_set.check_compatible(embedder, where=str(args.bank))
        except (ImportError, RuntimeError, ValueError) as exc:
            raise UsageError(f"embedder {name!r}: {exc} (or pass --no-embeddings)") from None
    audit = audit_bank_set(bank_set, embedder, sample_size=args.sample_size, seed=args.seed)
    if args.json:
        print(json.dumps(audit.to_dict(), indent=2))
    else:
        print(f"bank: {args.bank}")
        print(audit.format())
    return 0
