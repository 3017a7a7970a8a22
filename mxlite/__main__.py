"""``python -m mxlite`` runs the ``mxlite`` command."""

import sys

from .cli import main

sys.exit(main())
