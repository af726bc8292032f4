"""``python -m lmra.cli``: the ``lmra`` command."""

import sys

from lmra.cli import main

sys.exit(main())
