"""Schedules: the file format and its slots (``format``), the schedules/ folder and its commands
(``folder``), and the record of what each schedule fired (``fired``). The coordinator's loop that
fires them is ``spool.runner.scheduler``."""
