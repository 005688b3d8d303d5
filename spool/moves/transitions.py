"""The moves of a job's life after submit: claim, heartbeat, complete, fail, expire, release.

Each transition has the same shape (docs/reliability.md, "The recipe every move follows"):
  1. take the job's lock (the coordinator without blocking: it comes back later);
  2. check the state is what the caller believes (folder, fence, no result yet);
  3. commit with one rename that never replaces, or for a result one link(2);
  4. rewrite the file in place with the runner's additions, then ledger, log and wake-ups;
  5. release the lock.
Each docstring says what a crash before and after the commit point leaves and who finishes it.
Durable (fsync'd) exactly where a promise needs it: the try counted at claim, a result, a move to
done or dead (the list is in docs/reliability.md).
The result, durable first, is the commit point of done: a done job whose file is still in leased/
is finished by whoever sees it (``settle``). done/ is still fsync'd after the move, because the
next claim's fsync of leased/ would otherwise make the file's removal from leased/ durable while
its entry in done/ is not: a power cut then loses the job file (the power-loss model finds it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import InvalidJob, LeaseLost
from spool.moves.fence import Held, check_fence, heartbeat, lease_status
from spool.disk.fsio import fs
from spool.job import JobFile, tail
from spool.disk.layout import State, cancel_name, result_name
from spool.moves.outcomes import bury, finish_done, give_back, retry_or_bury
from spool.base.records import Lease
from spool.moves.recovery import resync
from spool.moves.store import (
    clear_lease_files,
    has_result,
    job_lock,
    only_in,
    queued_beat,
    read_job,
    stage,
    unstage,
    wake,
    wake_slot,
)
from spool.base.timetext import now_text
from spool.moves.claiming import claim, claim_held  # re-exported: the first move of an attempt's life

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.transitions")

__all__ = ["Held", "Lease", "cancel_leased", "claim", "claim_held", "complete", "expire", "fail", "heartbeat"]
__all__ += ["lease_status", "release"]


# -- complete ---------------------------------------------------------------------------------


def complete(sp: Handle, lease: Lease, result_json: bytes, held: Held | None = None) -> None:
    """LEASED -> DONE with ``result_json`` as results/<id>.json.

    Commit point: link(tmp/X, results/<id>.json), after the result was written whole and
    fsync'd in tmp/; then results/ is fsync'd. Crash before it: nothing changed; the lease
    expires and the job is retried. Crash after it: the job is done; its file still in leased/
    is moved to done/ by whoever takes its lock next (``settle`` via the coordinator, or a
    claim). A stale attempt (fence mismatch) raises LeaseLost and links nothing: the first
    result wins and a late one is dropped. ``held``: what the claim wrote (``spool.moves.fence``).
    """
    staged = stage(sp, result_json, sync=True)  # (no done/.wake after: nothing waits on one)
    crash.point("complete-after-stage")
    try:
        with job_lock(sp, lease.job_id, blocking=True):
            job_file = check_fence(sp, lease, held)
            try:
                fs.link(sp.layout.fd("tmp"), staged, sp.layout.fd("results"), result_name(lease.job_id))
            except FileExistsError:
                raise LeaseLost(f"{lease.job_id}: already has a result; this one is dropped") from None
            fs.fsync_dir(sp.layout.fd("results"))
            crash.point("after-result")
            done = finish_done(sp, job_file)
            sp.ledger.record(done, State.DONE, ready=False, event="complete", worker=lease.worker)
    finally:
        unstage(sp, staged)
    log.info("complete %s attempt=%d worker=%s", lease.job_id, lease.attempt, lease.worker)
    wake_slot(sp, [job_file.job.queue])


# -- fail -------------------------------------------------------------------------------------


def fail(sp: Handle, lease: Lease, error: str, *, reject: bool = False, held: Held | None = None) -> State:
    """LEASED -> PENDING after a backoff, or -> DEAD (failed) when tries are spent or rejected.

    Commit point: rename leased/ -> pending/ or dead/. A move to dead is fsync'd; a return to
    pending is not (lost in a power cut, the lease simply expires again). Crash before the
    commit: the lease expires and expire does the same. Crash after it: the file's lease and
    open attempt record lag its folder; a claim closes the record as 'lost', ``settle`` fixes
    a dead one.
    """
    error = tail(error)
    with job_lock(sp, lease.job_id, blocking=True):
        job_file = check_fence(sp, lease, held)
        if has_result(sp, lease.job_id):
            finish_done(sp, job_file)
            raise LeaseLost(f"{lease.job_id}: already has a result; the failure is dropped")
        state, job_file = retry_or_bury(
            sp,
            job_file,
            error=error,
            outcome="failed",
            ended=now_text(sp.clock),
            reason="failed",
            dead_outcome="rejected" if reject else "failed",
            give_up=reject,
            crash_step="fail-after-rename",
        )
        clear_lease_files(sp, lease.job_id, lease.attempt)
        sp.ledger.record(
            job_file,
            state,
            ready=False,
            event="fail",
            worker=lease.worker,
            detail=error.splitlines()[-1][:200] if error else None,
        )
    crash.point("after-fail")
    log.info("fail %s attempt=%d worker=%s -> %s", lease.job_id, lease.attempt, lease.worker, state.value)
    if state is State.PENDING:
        # RACE: the coordinator: woken by the move alone, it may read the ledger before our
        # record and miss the backoff's timer until its next reconcile (seconds late).
        wake(sp)
    else:
        wake_slot(sp, [job_file.job.queue])
    return state


# -- expire -----------------------------------------------------------------------------------


def expire(sp: Handle, job_id: str, attempt: int, why: str) -> State | None:
    """LEASED -> PENDING after a backoff, or -> DEAD (expired) when tries are spent.

    Called by the coordinator only, from its own clock's view of the heartbeats (or a freed
    worker lock). Takes the lock without blocking: None means "busy, come back later".
    Commit point: the rename out of leased/. Crash before: the next coordinator gives the
    lease a fresh term and decides again. Crash after: as ``fail``. A job that already has
    a result is finished as done instead, never sent back.
    """
    lock = job_lock(sp, job_id, blocking=False)
    if lock is None:
        return None
    with lock:
        try:
            job_file = read_job(sp, State.LEASED, job_id)
        except (FileNotFoundError, InvalidJob):
            return None
        if job_file.attempt == attempt - 1:
            settled = _lost_claim(sp, job_file)
            if settled is not None:
                crash.point("after-expire")  # a lost claim's expiry, settled and recorded
                return settled
            attempt = job_file.attempt  # the lease the file holds (an older attempt's) is what expires
        if job_file.attempt != attempt:
            return None
        if not only_in(sp, job_id, State.LEASED):
            # A move to done/ or dead/ died between publishing its new copy and removing this one
            # (publish_job): that move happened, and the more advanced copy wins. Settle, don't expire.
            resync(sp, job_id)
            return None
        state, final = _expire_locked(sp, job_file, why)
        ready = state is State.PENDING and final.backoff_seconds is None  # a queued member given back
        sp.ledger.record(final, state, ready=ready, event="expire", detail=why)
    crash.point("after-expire")
    log.info("expire %s attempt=%d -> %s (%s)", job_id, attempt, state.value, why)
    if state is State.DONE:
        wake(sp, State.DONE)
    wake_slot(sp, [final.job.queue])  # a killed worker's slot: the workers it held back look again
    return state


def _lost_claim(sp: Handle, job_file: JobFile) -> State | None:
    """The file is one attempt behind the heartbeat we expire: only a claim writes a heartbeat
    for an attempt the file does not have yet (``fence.first_beat``), before its rename, so that
    claim died after its rename and before its rewrite (it held the lock we now hold). ``resync``
    counts the spent try and sends the job back (or to dead/): its new state, or None if the
    file stays leased (it holds an older attempt's lease, which the caller expires as usual)."""
    state = resync(sp, job_file.id, event="expire")  # a lease expired (metrics count it), its try spent
    if state is State.LEASED:
        return None
    clear_lease_files(sp, job_file.id)
    log.info("expire %s attempt=%d: its claim died before recording it", job_file.id, job_file.attempt + 1)
    return state


def _expire_locked(sp: Handle, job_file: JobFile, why: str) -> tuple[State, JobFile]:
    job_id, ended = job_file.id, now_text(sp.clock)
    if has_result(sp, job_id):
        return State.DONE, finish_done(sp, job_file)
    if fs.exists(sp.layout.fd(State.LEASED), cancel_name(job_id)):
        state, final = (
            State.DEAD,
            bury(
                sp,
                job_file,
                State.LEASED,
                reason="cancelled",
                error=f"cancelled ({why})",
                outcome="cancelled",
                ended=ended,
            ),
        )
    elif queued_beat(sp, job_id, job_file.attempt):  # a batch member that never started: no try spent
        state, final = State.PENDING, give_back(sp, job_file, ended=ended, crash_step="expire-after-rename")
    else:
        state, final = retry_or_bury(
            sp, job_file, error=why, outcome="expired", ended=ended, reason="expired", crash_step="expire-after-rename"
        )
    clear_lease_files(sp, job_id)
    return state, final


# -- release ----------------------------------------------------------------------------------


def release(sp: Handle, lease: Lease, held: Held | None = None) -> None:
    """LEASED -> PENDING at graceful shutdown, giving back the try it spent; ready at once.

    Commit point: the rename. Not fsync'd: lost in a power cut, the lease expires instead
    (which spends the try). Crash after the commit: a claim closes the record as 'lost'.
    """
    with job_lock(sp, lease.job_id, blocking=True):
        job_file = check_fence(sp, lease, held)
        if has_result(sp, lease.job_id):
            finish_done(sp, job_file)
            return
        released = give_back(sp, job_file, ended=now_text(sp.clock), crash_step="release-after-rename")
        clear_lease_files(sp, lease.job_id, lease.attempt)
        sp.ledger.record(released, State.PENDING, ready=True, event="release", worker=lease.worker)
    log.info("release %s attempt=%d worker=%s", lease.job_id, lease.attempt, lease.worker)
    wake(sp)


# -- cancel of a leased job (by its worker) ---------------------------------------------------


def cancel_leased(sp: Handle, lease: Lease, held: Held | None = None) -> None:
    """LEASED -> DEAD (cancelled): the worker acts on a cancel request after killing the attempt.

    Commit point: ``bury``'s rename (durable). Crash before: the request stays, and expiry
    honours it. A job that got a result first stays done: the first result wins.
    """
    with job_lock(sp, lease.job_id, blocking=True):
        job_file = check_fence(sp, lease, held)
        if has_result(sp, lease.job_id):
            finish_done(sp, job_file)
            raise LeaseLost(f"{lease.job_id}: already has a result; the cancel came too late")
        dead = bury(
            sp,
            job_file,
            State.LEASED,
            reason="cancelled",
            error="cancelled by request while running",
            outcome="cancelled",
            ended=now_text(sp.clock),
        )
        clear_lease_files(sp, lease.job_id)
        sp.ledger.record(dead, State.DEAD, ready=False, event="cancel", worker=lease.worker)
    log.info("cancel %s attempt=%d worker=%s", lease.job_id, lease.attempt, lease.worker)
    wake(sp, State.DEAD)
    wake_slot(sp, [dead.job.queue])
