"""The ``r2mad`` command line: ``run``, ``score``, ``build-memory``, ``audit``, ...

- :mod:`~r2mad_lab.cli.commands`: the parser and the run/score commands (``main``).
- :mod:`~r2mad_lab.cli.memory`: the memory commands (``build-memory``, ``audit``).
- :mod:`~r2mad_lab.cli.common`: arguments and checks both share.
- :mod:`~r2mad_lab.cli.runs`: ``runs``, every run of a profile as a table and an index page.
- :mod:`~r2mad_lab.cli.export`: ``export``, runs as Inspect eval logs and as one per-question table.
"""

from r2mad_lab.cli import export as _export
from r2mad_lab.cli.commands import COMMANDS, Command, main

COMMANDS.append(Command("export", _export.HELP, _export.add_export_arguments, _export.export_command))

__all__ = ["main"]
