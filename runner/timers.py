"""The coordinator's timers: when, on its own clock, each delayed or backed-off job becomes ready.

A pending job that is not ready (a ``not_before`` delay, a retry's backoff) gets one due time the
first time the coordinator sees it; at that time ``moves.ready.make_ready`` makes it claimable. A lost
timer (a coordinator restart) is rebuilt from the files by the next ``load_timers``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spool.moves import make_ready
from spool.base.errors import InvalidJob
from spool.disk import State
from spool.spool import Spool
from spool.moves import read_job
from spool.base.timetext import parse_time


def load_timers(sp: Spool, timers: dict[str, float], clock: Callable[[], float]) -> None:
    """Each pending job that is not ready gets a due time on ``clock``, once (``timers``: id -> due)."""
    waiting_ids = set(sp.ledger.not_ready_pending())
    for job_id in list(timers):
        if job_id not in waiting_ids:
            del timers[job_id]
    for job_id in waiting_ids - set(timers):
        try:
            job_file = read_job(sp, State.PENDING, job_id)
        except (FileNotFoundError, InvalidJob):
            continue
        delay = job_file.backoff_seconds or 0.0
        if job_file.job.not_before is not None:
            wall = parse_time(job_file.job.not_before, "not_before").timestamp()
            delay = max(delay, wall - time.time())
        timers[job_id] = clock() + max(delay, 0.0)


def fire_timers(sp: Spool, timers: dict[str, float], clock: Callable[[], float]) -> None:
    """Make ready every job whose time has come, soonest first; a busy one is tried next pass."""
    now = clock()
    for job_id, due in sorted(timers.items(), key=lambda item: item[1]):
        if due > now:
            break
        if make_ready(sp, job_id):
            del timers[job_id]
