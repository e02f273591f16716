"""``python -m r2mad_core``: the ``r2mad`` command line (see :mod:`r2mad_core.cli.commands`)."""

import sys

from r2mad_core.cli.commands import main

sys.exit(main())
