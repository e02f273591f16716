"""``python -m r2mad_lab``: the ``r2mad`` command line (see :mod:`r2mad_lab.cli.commands`)."""

import sys

from r2mad_lab.cli.commands import main

sys.exit(main())
