"""``python -m spool.cli``: the same as the ``spool`` command (used for the processes spool starts)."""

from spool.cli.main import main

main()
