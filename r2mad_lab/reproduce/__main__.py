"""``python -m r2mad_lab.reproduce``: :func:`r2mad_lab.reproduce.command.main`."""

import sys

from r2mad_lab.reproduce.command import main

sys.exit(main())
