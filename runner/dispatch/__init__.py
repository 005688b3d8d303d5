"""``spool dispatch``: hand ready jobs to an engine (``engine``: the seam; ``local``: subprocesses;
``dispatcher``: the loop)."""
