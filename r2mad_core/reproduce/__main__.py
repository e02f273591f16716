"""``python -m r2mad_core.reproduce``: :func:`r2mad_core.reproduce.command.main`."""

import sys

from r2mad_core.reproduce.command import main

sys.exit(main())
