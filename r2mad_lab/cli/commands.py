"""The ``r2mad`` command line: run a cell of the paper's experiments (Section 5) and score it.

``r2mad run``   debate one (benchmark, split, method, engine, seed, limit) cell into ``--out``
                (resumable: a rerun skips finished samples; see :mod:`r2mad_lab.experiments.cell`).
``r2mad score`` recompute and print the metrics of a run directory.

Bad inputs (unknown benchmark/method, invalid numbers, options that do not apply to the method, a
run directory that holds another cell) end with one error line and exit code 2 before any
generation.

Extending (e.g. ``build-memory``, ``audit``, R2-MAD options): the parser is assembled from
:data:`COMMANDS` (name, help, ``add_arguments(parser)``, ``handler(args) -> exit code``) and
``run``'s arguments from :data:`RUN_ARGUMENT_GROUPS` (functions adding an argument group). An
argument added with :func:`add_method_option` is forwarded to ``methods.get_method`` under its
``dest`` name when the user gives it (its default must be None), so a new method option needs one
line, e.g.::

    def add_memory_arguments(parser):
        group = parser.add_argument_group("R2-MAD memory")
        add_method_option(parser, group, "--memory", dest="memory", metavar="DIR", help="memory bank directory")

    RUN_ARGUMENT_GROUPS.append(add_memory_arguments)   # or list it in the literal below
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from r2mad_core.data import benchmarks
from r2mad_core.data.benchmarks import BENCHMARKS, SPLIT_RULES
from r2mad_core.debate.scheduling import SCHEDULES
from r2mad_core.debate.settings import VOTE_RULES
from r2mad_core.debate.vote import TRUNCATED_ANSWER_POLICIES
from r2mad_core.memory.hook import EXPERIENCE_REFERENCES
from r2mad_core.methods import MASKING_STRATEGIES, METHODS, OBJECTIVE_KEEP, get_method, method_options
from r2mad_core.plugins import PluginError, load_plugins
from r2mad_lab import engines  # engines.make_engine looked up at call time (tests replace it)
from r2mad_lab.cli import memory as memory_cli
from r2mad_lab.cli import runs as runs_cli
from r2mad_lab.cli.common import (  # noqa: F401  (re-exported: the command-line vocabulary)
    DEFAULT_CACHE_DIR,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    METHOD_OPTION_DESTS,
    Interrupted,
    Parser,
    RunFailure,
    UsageError,
    add_engine_arguments,
    add_method_option,
    add_setting_arguments,
    check_out_dir,
    integer,
    kept_questions,
    key_value,
    non_negative_float,
    positive_int,
    probability,
    split_rule_of,
)
from r2mad_lab.engines import EngineError
from r2mad_lab.experiments import cell as experiments
from r2mad_lab.experiments.metrics import summary_line
from r2mad_lab.experiments.protocol import PROTOCOLS, sampling_lengths
from r2mad_lab.experiments.protocol import help_text as protocol_help
from r2mad_lab.experiments.protocol import method_options as preset_options
from r2mad_lab.report import viewer

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------
def add_cell_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run cell")
    group.add_argument("--benchmark", required=True, choices=BENCHMARKS, help="benchmark to run")
    group.add_argument("--split", default="test", choices=("test", "train", "all"), help="split (default: test)")
    group.add_argument(
        "--protocol",
        default=None,
        choices=PROTOCOLS,
        help=protocol_help().replace("%", "%%") + " (default: none: each option its declaration's one default, "
        "e.g. K = 1; a preset fills only the options not given)",
    )
    group.add_argument(
        "--split-rule",
        default=None,
        choices=SPLIT_RULES,
        help="which questions form the split: paper (default; the paper's counts, our seeded permutation: the paper "
        "does not list its items) or authors (the authors' code: random.seed(42), shuffle, first 75%% train; "
        "Engineering 726/243 instead of the paper's 727/242); default: --protocol's, else paper",
    )
    group.add_argument("--method", required=True, choices=sorted(METHODS), help="method (see r2mad_core.methods)")
    group.add_argument("--limit", type=positive_int, default=None, help="first N questions of the split (default: all)")
    group.add_argument("--seed", type=integer, default=0,
                       help="run seed: sampling seed and vote tie-breaks (default: 0)")
    group.add_argument("--out", required=True, type=Path, metavar="DIR",
                       help="run directory (created; resumed if it exists)")
    group.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="benchmark data (default: $R2MAD_DATA_DIR, else data/)")
    group.add_argument("--chunk-size", type=positive_int, default=32,
                       help="questions per batch of debates (default: 32)")
    group.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=SCHEDULES[0],
        help="rounds (default; each round is one batch over a chunk of questions, as the authors' code) or "
        "questions (ours: each question advances on its own over a continuous-batching engine, no round barriers; "
        "the same requests and seeds, so the same transcripts on the simulated engine and on replay from the cache; a "
        "live batched server, llama.cpp or vLLM, samples differently with what shares a batch; an engine that "
        "cannot take concurrent calls runs rounds)",
    )
    group.add_argument(
        "--window", type=positive_int, default=None, metavar="N",
        help="--schedule questions: engine requests in flight, N questions' worth (N x agents, as a rounds chunk "
        "of N; default: 64); a crash loses at most 4 x N questions, whose generations the response cache keeps",
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_method_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("method options (default: the method's paper default)")
    group.add_argument(
        "--method-option",
        dest="method_option_pairs",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="any option the method declares (repeatable; the value is read as YAML), e.g. "
        "experience_reference=none or use_confidence=false; the flags below are shortcuts for the common ones",
    )
    add_setting_arguments(parser, group)  # the debate settings, one flag each (r2mad_core/debate/settings.py)
    add_method_option(parser, group, "--k-paths", dest="k_paths", type=positive_int,
                      help="Self-Consistency paths (paper: 9)")
    add_method_option(parser, group, "--masking", dest="masking", choices=MASKING_STRATEGIES,
                      help="MAD-M2 masking (default: objective)")
    add_method_option(
        parser,
        group,
        "--objective-keep",
        dest="objective_keep",
        choices=OBJECTIVE_KEEP,
        help="MAD-M2 objective masking: keep the single lowest-perplexity response (default; the paper's appendix: "
        "'retains only the response with the lowest perplexity') or the better half by mean log-probability (ours, an "
        "option). Tian et al.'s code (HongduanTian/MAD-MM, _objective_prune) keeps the responses whose recorded "
        "perplexity value is above the round's median, and its stored versions differ in how many that keeps "
        "(one of them 2 of 3): the default follows the paper's text, not that code",
    )
    add_method_option(
        parser,
        group,
        "--experience-reference",
        dest="experience_reference",
        choices=EXPERIENCE_REFERENCES,
        help="R2-MAD/ICL-CoT: what of the reference y (Eq. 4) each experience shows: answer (default; ours: the "
        "letter and option text, or MATH500's final answer), solution (the authors' code: MATH500's full reference "
        "solution; multiple choice falls back to the answer) or none (y hidden; an ablation)",
    )
    add_method_option(parser, group, "--judge-max-tokens", dest="judge_max_tokens", type=positive_int,
                      help="MAD-M2 subjective judge max tokens (default: --max-tokens)")


RUN_ARGUMENT_GROUPS: list[Callable[[argparse.ArgumentParser], None]] = [
    add_cell_arguments,
    add_method_arguments,
    memory_cli.add_memory_arguments,
    add_engine_arguments,
]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(**{METHOD_OPTION_DESTS: []})
    for add in RUN_ARGUMENT_GROUPS:
        add(parser)


def method_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The method options the user gave on the command line (dest name -> value): the flags, then every
    ``--method-option key=value`` (a key given both ways is an error)."""
    options = {
        dest: getattr(args, dest)
        for dest, _ in getattr(args, METHOD_OPTION_DESTS, [])
        if getattr(args, dest, None) is not None
    }
    for key, value in getattr(args, "method_option_pairs", None) or []:
        key = key.replace("-", "_")
        if key in options:
            raise UsageError(f"--method-option {key}: given twice (or also as a flag)")
        options[key] = value
    return options


def build_method(args: argparse.Namespace) -> Any:
    options = method_options_from_args(args)
    flags = dict(getattr(args, METHOD_OPTION_DESTS, []))
    accepted = method_options(args.method)
    if getattr(args, "protocol", None):  # the preset's choices the method declares; an explicit option beats them
        lengths = {k: v for k, v in sampling_lengths(args.protocol).items() if k in accepted}
        options = {**lengths, **preset_options(args.method, args.protocol), **options}
    as_pairs = {key.replace("-", "_") for key, _ in getattr(args, "method_option_pairs", None) or []}
    unknown = [f"--method-option {dest}" if dest in as_pairs else flags.get(dest, dest)
               for dest in options if dest not in accepted]
    if unknown:
        valid = sorted(flag for dest, flag in flags.items() if dest in accepted)
        declared = ", ".join(sorted(accepted))
        raise UsageError(
            f"option(s) {', '.join(unknown)} do not apply to method {args.method}; its flags: "
            f"{', '.join(valid) or 'none'}; its declared options (--method-option KEY=VALUE): {declared}"
        )
    try:
        method = get_method(args.method, **options)
        method.check_benchmark(args.benchmark)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return method


def run_command(args: argparse.Namespace) -> int:
    method = build_method(args)
    check_out_dir(args.out)
    try:
        samples = benchmarks.load(args.benchmark, args.split, data_dir=args.data_dir, split_rule=split_rule_of(args))
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(f"cannot load {args.benchmark} {args.split}: {exc}") from None
    # Full preflight before the engine exists: the samples (data files), the run directory's config, the
    # method's hook (R2-MAD/ICL-CoT: the memory bank loaded and verified against the benchmark and embedder).
    try:
        prepared = experiments.prepare_cell(
            args.out,
            benchmark=args.benchmark,
            split=args.split,
            method=method,
            seed=args.seed,
            limit=args.limit,
            samples=samples,
            data_dir=args.data_dir,
        )
    except (experiments.RunConfigMismatch, experiments.TranscriptError) as exc:
        raise UsageError(str(exc)) from None
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(f"cannot prepare {args.method} on {args.benchmark} {args.split}: {exc}") from None
    samples = prepared.samples
    memory_cli.check_top_k_fits_bank(prepared.hook, args.method, getattr(args, "memory", None))

    engine_options = dict(args.engine_options)
    if args.engine == "simulated":
        # every question of the benchmark: the run's, and the training questions its memory experiences come from
        # (the simulated agents check an experience's label against that question's gold: poisoned memory)
        known = {s.id: s for s in benchmarks.load(args.benchmark, "all", data_dir=args.data_dir)}
        known.update({s.id: s for s in samples})
        engine_options.setdefault("samples", list(known.values()))
    cache_dir = None
    if not args.no_cache:
        cache_dir = args.cache_dir or Path(os.environ.get("R2MAD_CACHE_DIR", DEFAULT_CACHE_DIR))
    try:
        engine = engines.make_engine(args.engine, model=args.model, cache_dir=cache_dir, **engine_options)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"engine {args.engine}: {exc}") from None
    except EngineError as exc:
        raise RunFailure(f"engine {args.engine} could not start: {exc}") from None
    try:
        result = experiments.run_cell(
            args.out,
            benchmark=args.benchmark,
            split=args.split,
            engine=engine,
            method=prepared.method,
            seed=args.seed,
            limit=args.limit,
            samples=samples,
            chunk_size=args.chunk_size,
            progress=not args.no_progress,
            schedule=args.schedule,
            window=args.window,
        )
    except (experiments.RunConfigMismatch, experiments.RunDirectoryBusy, experiments.TranscriptError) as exc:
        raise UsageError(str(exc)) from None
    except EngineError as exc:
        raise RunFailure(
            f"generation failed: {exc} (finished samples are saved in {args.out}; rerun the same command to resume)"
        ) from None
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted: {kept_questions(args.out)} of {len(samples)} questions are kept in {args.out} "
            "(finished generations are cached); rerun the same command to resume"
        ) from None
    finally:
        engine.close()
    print(
        f"{args.method} on {args.benchmark} {args.split} ({result.n_new} new, {result.n_reused} reused): "
        + summary_line(result.metrics)
    )
    return 0


# --------------------------------------------------------------------------------------------
# score
# --------------------------------------------------------------------------------------------
def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="DIR", help="a run directory written by r2mad run")
    parser.add_argument(
        "--vote-rule",
        choices=VOTE_RULES,
        default=None,
        help="recompute the final answers with this rule (default: the stored ones)",
    )
    parser.add_argument(
        "--truncated-answers",
        choices=TRUNCATED_ANSWER_POLICIES,
        default="keep",
        help="answers of completions cut off at max_tokens: keep (default: as written, as the debate used them) "
        "or missing (no answer); see r2mad_core.debate.vote",
    )
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")


def score_command(args: argparse.Namespace) -> int:
    try:
        metrics = experiments.score_run(args.run_dir, vote_rule=args.vote_rule,
                                        truncated_answers=args.truncated_answers)
    except (FileNotFoundError, experiments.TranscriptError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if not metrics["n"]:
        raise UsageError(f"{args.run_dir}: no finished samples in {experiments.TRANSCRIPTS_FILE}")
    if args.json:
        print(json.dumps(experiments._json_safe(metrics), indent=2))
        return 0
    health = metrics["completion_health"]
    lines = [
        f"run: {args.run_dir} ({metrics['n']} samples{'' if metrics.get('complete') else ', incomplete'})",
        summary_line(metrics),
        f"vote rule: {metrics['vote_rule']} (ties broken: {metrics['vote_ties']}); "
        f"truncated answers: {metrics['truncated_answers']}",
        "agent accuracy by round: "
        + ", ".join(f"t={t}: {a:.3f}" for t, a in enumerate(metrics["agent_accuracy_by_round"])),
        f"mean rounds executed: {metrics['mean_rounds_executed']:.2f} (stopped early: {metrics['stopped_early']})",
        "completions: " + ", ".join(f"{k} {v}" for k, v in health.items()),
    ]
    print("\n".join(lines))
    return 0


# --------------------------------------------------------------------------------------------
# view
# --------------------------------------------------------------------------------------------
def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="a run directory written by r2mad run; a second one (e.g. MAD beside R2-MAD) is shown "
                        "beside it, question by question")
    parser.add_argument("--question", metavar="ID", help="only this question (a sample id, e.g. truthfulqa:768)")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help=f"the HTML file to write (default: RUN_DIR/{viewer.PAGE_FILE}, beside the run page "
                        "view.html of `r2mad runs`)")
    parser.add_argument("--memory", type=Path, metavar="DIR",
                        help="the memory bank of the first run, if it is no longer where its config.json says")
    parser.add_argument("--shared-only", action="store_true", help="only the shared-misconception questions")
    parser.add_argument("--differs-only", action="store_true",
                        help="only the questions where the two runs end differently (one right, one wrong)")
    parser.add_argument("--limit", type=positive_int, metavar="N", help="at most N questions")


def view_command(args: argparse.Namespace) -> int:
    if args.out is not None and args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a directory, expected an HTML file name")
    try:
        path = viewer.write_page(args.run_dirs, args.out, question=args.question, memory=args.memory,
                                 shared_only=args.shared_only, differs_only=args.differs_only, limit=args.limit)
    except viewer.ViewerError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


COMMANDS: list[Command] = [
    Command("run", "debate one run cell into a directory (resumable)", add_run_arguments, run_command),
    Command("score", "print the metrics of a run directory", add_score_arguments, score_command),
    Command(
        "build-memory",
        "debate the train split (all rounds, summaries) and build the memory banks",
        memory_cli.add_build_memory_arguments,
        memory_cli.build_memory_command,
    ),
    Command("audit", "check a memory bank (sizes, balance, duplicates, stale embeddings, labels)",
            memory_cli.add_audit_arguments, memory_cli.audit_command),
    Command("view", "write a run's debates as one self-contained HTML page (rounds x agents, retrieval, confidence)",
            add_view_arguments, view_command),
    Command("runs", "list every run of a profile (or folder): a table here, an index page linking each debate page",
            runs_cli.add_runs_arguments, runs_cli.runs_command),
]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="r2mad",
        description="R2-MAD reproduction: run and score multi-agent debate experiments.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(p)
        p.set_defaults(_handler=command.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        load_plugins()  # benchmarks, policies and methods registered from outside the package (R2MAD_PLUGINS)
    except PluginError as exc:
        print(f"r2mad: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args._handler(args))
    except UsageError as exc:
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"r2mad {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except RunFailure as exc:
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"r2mad {args.command}: error: {message}", file=sys.stderr)
        return EXIT_FAILURE
    except Interrupted as exc:
        print(f"r2mad {args.command}: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"r2mad {args.command}: interrupted (nothing finished is lost: rerun the same command to resume)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # a file that cannot be read or written: name it, no traceback
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"r2mad {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError,
                                              FileNotFoundError)) else EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
