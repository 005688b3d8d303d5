"""Chains: the coordinator promotes a waiting job when its parents are done, or skips it when one
is dead or gone (``advance_waiting``).

It takes the job's lock without blocking (None: busy, come back later); a promote is not
fsync'd (its rename changes nothing in the file), a skip is: it is a move to dead.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import InvalidJob
from spool.disk.layout import State
from spool.moves.outcomes import bury
from spool.moves.recovery import moved_back_by_hand, resync
from spool.moves.store import has_result, job_lock, move_job, only_in, read_job, state_of, wake
from spool.base.timetext import now_text

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.chains")


def advance_waiting(sp: Handle, job_id: str) -> State | None:
    """WAITING -> PENDING (promote) when every dependency is done, or -> DEAD (skip) when one is
    dead or gone. Returns the new state, or None when it stays waiting (or the lock is busy).

    Promote commits with the rename waiting/ -> pending/ and changes nothing in the file, so a
    crash after it leaves nothing to finish. Skip is ``bury``: durable, and a crash after its
    rename leaves a dead file without a reason, which ``settle`` completes.
    """
    lock = job_lock(sp, job_id, blocking=False)
    if lock is None:
        return None
    with lock:
        try:
            job_file = read_job(sp, State.WAITING, job_id)
        except (FileNotFoundError, InvalidJob):
            return None
        if not only_in(sp, job_id, State.WAITING) or moved_back_by_hand(job_file):
            resync(sp, job_id)  # a crashed skip left its dead copy beside this one, or a hand move
            return None
        blocker = None
        for dep in job_file.job.depends_on:
            dep_state = state_of(sp, dep)  # a result counts only if the dependency earned it
            if dep_state is State.DONE or (dep_state is None and has_result(sp, dep)):
                continue
            if dep_state is None or dep_state is State.DEAD:
                blocker = dep
                break
            return None  # still running or waiting
        if blocker is None:
            move_job(sp, job_id, State.WAITING, State.PENDING)
            crash.point("promote-after-rename")
            state, final = State.PENDING, job_file
        else:
            why = f"dependency {blocker} ended without a result"
            state, final = (
                State.DEAD,
                bury(
                    sp,
                    job_file,
                    State.WAITING,
                    reason="skipped",
                    error=why,
                    outcome="skipped",
                    ended=now_text(sp.clock),
                    skipped_because=blocker,
                ),
            )
        ready = state is State.PENDING and final.job.not_before is None
        sp.ledger.record(
            final, state, ready=ready, event="promote" if state is State.PENDING else "skip", detail=blocker
        )
    log.info("%s %s", "promote" if state is State.PENDING else f"skip (because {blocker})", job_id)
    if ready:
        wake(sp)
    return state
