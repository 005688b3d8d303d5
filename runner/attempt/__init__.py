"""An attempt: the one loop that runs it whatever keeps the lease (``loop``), the worker's handle
on the reusable child process that runs the handler (``child``, talking over ``pipes``), the
child's own side (``inside``, run as ``python -m spool.runner.attempt``), and how often a
handler's progress is written down (``progress_writes``)."""
