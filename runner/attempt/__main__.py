"""``python -m spool.runner.attempt CONFIG``: the attempt child's program (``runner.attempt.inside``)."""

from __future__ import annotations

import sys

from spool.runner.attempt.inside import main

sys.exit(main(sys.argv[1:]))
