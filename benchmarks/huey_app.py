"""The Huey side of ``benchmarks/bench.py``: a SqliteHuey with the bench's two tasks.

Started as ``huey_consumer benchmarks.huey_app.huey -k process -w 2`` (default polling), or with
``-d 0.005 -m 0.005 -b 1`` (a 5 ms poll that never backs off), with ``BENCH_HUEY_DB`` naming the
SQLite file in the folder under test. SqliteHuey is left at its defaults (WAL, ``fsync=None``):
what a user who picks it gets.
"""

from __future__ import annotations

import os
import time

from huey import SqliteHuey  # type: ignore[import-untyped]

huey = SqliteHuey("spool-bench", filename=os.environ.get("BENCH_HUEY_DB", "huey-bench.db"))


@huey.task()
def noop(i: int) -> float:
    """The trivial job of the drain; returns when it ended (the drain's last result)."""
    return time.time()


@huey.task()
def clock() -> float:
    """The handler's first line stamps the wall clock: the end of the idle pickup latency."""
    return time.time()
