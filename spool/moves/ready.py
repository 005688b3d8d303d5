"""Delays: the coordinator makes a delayed or backed-off job claimable when its time came on its
own clock (``make_ready``; when that is, is ``spool.runner.timers``). Not a move: the job stays
in pending/."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import InvalidJob
from spool.disk.layout import State
from spool.moves.recovery import resync
from spool.moves.store import job_lock, only_in, read_job, rewrite_job, wake

if TYPE_CHECKING:
    from spool.handle import Handle


def make_ready(sp: Handle, job_id: str) -> bool:
    """A delayed or backed-off job in pending/ becomes claimable (not a move: same folder).

    The coordinator calls it when the delay ran out on its own clock. The file loses its
    ``backoff_seconds`` (no fsync: lost in a power cut, the backoff is simply waited again).
    """
    lock = job_lock(sp, job_id, blocking=False)
    if lock is None:
        return False
    with lock:
        try:
            job_file = read_job(sp, State.PENDING, job_id)
        except (FileNotFoundError, InvalidJob):
            return False
        if not only_in(sp, job_id, State.PENDING):
            resync(sp, job_id)
            return False
        if job_file.backoff_seconds is not None:
            job_file = job_file.replace(backoff_seconds=None)
            rewrite_job(sp, State.PENDING, job_file, sync=False)
        crash.point("ready-after-rewrite")
        sp.ledger.record(job_file, State.PENDING, ready=True, event="ready")
    wake(sp)
    return True
