"""The ``r2mad`` command line: ``run``, ``score``, ``build-memory``, ``audit``, ...

- :mod:`~r2mad_core.cli.commands`: the parser and the run/score commands (``main``).
- :mod:`~r2mad_core.cli.memory`: the memory commands (``build-memory``, ``audit``).
- :mod:`~r2mad_core.cli.common`: arguments and checks both share.
- :mod:`~r2mad_core.cli.runs`: ``runs``, every run of a profile as a table and an index page.
"""

from r2mad_core.cli.commands import main

__all__ = ["main"]
