"""``python -m spool.cli``: the same as the ``spool`` command (used for the processes spool starts).

No garbage collection runs while the command's modules load: imports make objects that live as
long as the process, so a collection then finds nothing to free (~2.5 ms of a ~65 ms ``spool
submit``). ``main`` then leaves them out of every later collection (``gc.freeze``).
"""

import gc

gc.disable()
try:
    from spool.cli.main import main
finally:
    gc.enable()

main()
