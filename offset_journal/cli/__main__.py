"""``python -m offset_journal.cli``: the command, as the ``offset-journal`` script runs it."""

import sys

from .commands import main

sys.exit(main())
