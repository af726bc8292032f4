"""``python -m lmra``: the ``lmra`` command (as ``python -m lmra.cli``), for where the script is not on PATH."""

import sys

from lmra.cli import main

sys.exit(main())
