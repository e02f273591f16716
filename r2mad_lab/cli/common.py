"""What the ``r2mad`` commands share: exit codes, one-line errors, argument types, method-option and engine arguments.

Both :mod:`r2mad_lab.cli.commands` and :mod:`r2mad_lab.cli.memory` import from here (and never from each
other's direction upwards), so the command modules form no import circle.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from r2mad_core.data.benchmarks import SPLIT_RULES
from r2mad_core.debate.settings import DEFAULTS, Spec, specs
from r2mad_lab import engines
from r2mad_lab.experiments.cell import TRANSCRIPTS_FILE
from r2mad_lab.experiments.protocol import preset
from r2mad_lab.experiments.transcripts import TranscriptStore

logger = logging.getLogger(__name__)

EXIT_USAGE = 2
EXIT_FAILURE = 1
METHOD_OPTION_DESTS = "_method_option_dests"
DEFAULT_CACHE_DIR = "cache"


class UsageError(Exception):
    """A bad input found after parsing (exit code 2, one line)."""


class RunFailure(Exception):
    """The run could not finish (engine failure; exit code 1, one line)."""


class Interrupted(Exception):
    """Ctrl-C: the message says what is kept and how to resume (exit code 130, one line)."""


EXIT_INTERRUPTED = 130


def check_out_dir(path: Path, option: str = "--out") -> None:
    """The output directory exists and is writable, or can be created: else UsageError naming it.
    Creates nothing (bad inputs found later must leave no trace)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: is a file, expected a directory")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != path and not existing.is_dir():
        raise UsageError(f"{option} {path}: cannot be created, {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "the directory is not writable" if existing == path else f"cannot be created, {existing} is not writable"
        raise UsageError(f"{option} {path}: {what}")


def kept_questions(run_dir: Path) -> int:
    """Finished questions in a run directory's transcripts (0 when there are none or it is unreadable)."""
    try:
        return len(TranscriptStore(Path(run_dir) / TRANSCRIPTS_FILE).load(repair=False))
    except Exception:  # an interrupt must still end with one line
        return 0


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (``prog: error: message``) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


# --------------------------------------------------------------------------------------------
# Argument types
# --------------------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, found {text!r}") from None
    if not value >= 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, found {text}")
    return value


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], found {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], found {text}")
    return value


def key_value(text: str) -> tuple[str, Any]:
    """``key=value``; the value is read as YAML (numbers, booleans, lists), else kept as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected key=value, found {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip().replace("-", "_")
    if not key.isidentifier():
        raise argparse.ArgumentTypeError(f"engine option name {key!r} is not a valid identifier")
    from r2mad_core.engine import option_problems
    from r2mad_lab.experiments.profiles import read_yaml  # numbers as Python reads them (5e-1)

    try:
        value = read_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    problems = option_problems({key: value}, "--engine-option")
    if problems:
        raise argparse.ArgumentTypeError(problems[0])
    return key, value


def add_method_option(
    parser: argparse.ArgumentParser, group: Any, *flags: str, **kwargs: Any
) -> argparse.Action:
    """Add an argument to ``group`` of ``parser`` that is forwarded to ``get_method`` under its
    dest name when the user gives it (its default is None: the method's own default applies)."""
    kwargs.setdefault("default", None)
    if kwargs["default"] is not None:
        raise ValueError(f"method option {flags}: the default must be None (the method's default applies)")
    action = group.add_argument(*flags, **kwargs)
    registered = list(parser.get_default(METHOD_OPTION_DESTS) or [])
    registered.append((action.dest, action.option_strings[0]))
    parser.set_defaults(**{METHOD_OPTION_DESTS: registered})
    return action


def setting_type(spec: Spec) -> Any:
    """The argparse type of a debate setting (:mod:`r2mad_core.debate.settings`): the CLI's own number checks."""
    if spec.kind == "int":
        return positive_int if spec.minimum == 1 else integer
    if spec.kind == "float":
        return probability if spec.low_open and spec.maximum == 1.0 else non_negative_float
    return None


def declared_type(owner: str, name: str, spec: Spec) -> Any:
    """An argparse type that reads a number and checks it against its declaration (``spec``: its kind and bounds),
    so a flag refuses what the settings object would: ``expected a number in [0, 1], found 1.5``."""
    low, high = spec.minimum, spec.maximum
    if spec.kind == "int":
        what = f"an integer in [{low:g}, {high:g}]" if high is not None else f"an integer >= {low:g}"
    else:
        what = f"a number in [{low or 0:g}, {high:g}]" if high is not None else f"a number >= {low or 0:g}"

    def parse(text: str) -> Any:
        try:
            value = int(text) if spec.kind == "int" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, found {text!r}") from None
        try:
            return spec.check(owner, name, value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, found {text}") from None

    parse.__name__ = name  # argparse names the type in its messages
    return parse


def add_setting_arguments(
    parser: argparse.ArgumentParser, group: Any, names: tuple[str, ...] | None = None, *, forward: bool = True,
    declaration: Any = None, aliases: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """One flag per debate setting (:class:`r2mad_core.debate.settings.DebateSettings`; ``names``: some of them),
    generated from the declaration: flag, type or choices, help = the setting's doc. ``forward``: a method option
    (default None, forwarded to ``get_method`` when given, :func:`add_method_option`); else a plain argument whose
    default is the setting's default (``build-memory``). ``declaration``: another declaration's module (its ``specs``
    and ``DEFAULTS``, e.g. :mod:`r2mad_core.memory.settings`: what R2-MAD adds; its numbers are checked against
    their bounds); ``aliases``: more flags of a setting, before its own (``{"top_k": ("-K",)}``)."""
    declared_specs, defaults = (specs, DEFAULTS) if declaration is None else (declaration.specs, declaration.DEFAULTS)
    for name, spec in declared_specs():
        if names is not None and name not in names:
            continue
        kwargs: dict[str, Any] = {"dest": name, "help": (spec.flag_doc or spec.doc).replace("%", "%%")}
        if spec.kind == "bool":
            kwargs["action"] = "store_false" if defaults[name] else "store_true"
        elif spec.kind == "choice":
            kwargs["choices"] = spec.choices
        else:
            kwargs["type"] = setting_type(spec) if declaration is None else declared_type(parser.prog, name, spec)
            kwargs["metavar"] = "N" if spec.kind == "int" else "X"
        flags = (*(aliases or {}).get(name, ()), spec.flag)
        if forward:
            add_method_option(parser, group, *flags, **kwargs)
        else:
            group.add_argument(*flags, **({} if spec.kind == "bool" else {"default": defaults[name]}), **kwargs)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    # the registry as it is when the parser is built (after load_plugins): a plugin's engine is a choice
    group.add_argument("--engine", default="local", choices=engines.engine_names(),
                       help="generation backend (default: local)")
    group.add_argument("--model", default=None,
                       help="model: a .gguf path (local), the served name (openai), an HF id (vllm)")
    group.add_argument(
        "--engine-option",
        dest="engine_options",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="backend constructor option (repeatable), e.g. threads=1 or base_urls=[http://h:8000/v1]",
    )
    group.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"response cache directory (default: $R2MAD_CACHE_DIR, else ./{DEFAULT_CACHE_DIR})",
    )
    group.add_argument("--no-cache", action="store_true", help="do not use the response cache")


def split_rule_of(args: argparse.Namespace) -> str:
    """``--split-rule``, else the ``--protocol`` preset's, else ``paper``."""
    if getattr(args, "split_rule", None):
        return args.split_rule
    protocol = getattr(args, "protocol", None)
    return preset(protocol)["split_rule"] if protocol else SPLIT_RULES[0]
