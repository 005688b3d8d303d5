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
from collections.abc import Collection
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import DiskFull, InvalidJob, LeaseLost, SpoolError
from spool.moves.fence import Held, check_fence, drop_first_beat, first_beat, heartbeat, lease_status
from spool.disk.fsio import fs
from spool.job import JobFile, tail
from spool.disk.layout import State, cancel_name, result_name
from spool.moves.outcomes import bury, finish_done, give_back, retry_or_bury
from spool.base.records import Attempt, Lease
from spool.moves.recovery import moved_back_by_hand, resync
from spool.moves.store import (
    clear_lease_files,
    copy_in,
    has_result,
    job_lock,
    move_job,
    only_in,
    queued_beat,
    read_job,
    rewrite_job,
    stage,
    unstage,
    wake,
)
from spool.base.timetext import now_text

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.transitions")

__all__ = ["Held", "Lease", "cancel_leased", "claim", "claim_held", "complete", "expire", "fail", "heartbeat"]
__all__ += ["lease_status", "release"]


# -- claim ------------------------------------------------------------------------------------


def claim(sp: Handle, worker: str, tasks: Collection[str] | None) -> JobFile | None:
    """PENDING -> LEASED: the best ready job of ``tasks``, or None (``claim_held``'s JobFile)."""
    return held.job_file if (held := claim_held(sp, worker, tasks)) is not None else None


def claim_held(sp: Handle, worker: str, tasks: Collection[str] | None, reserved: str | None = None) -> Held | None:
    """PENDING -> LEASED: the best ready job of ``tasks``, or None; with the bytes written, so
    the attempt's later steps can check their fence without a parse (``spool.moves.fence``).
    ``reserved``: a job the caller reserved already (``reserve_many``), tried first.

    Commit point: rename pending/<id>.yaml -> leased/<id>.yaml. Then the file is rewritten with
    attempt+1, tries+1 and the lease, fsync'd with leased/ before the handler may start, so a
    counted try survives a power cut. Crash before the commit: nothing changed (a ledger row
    left 'leased' is put back by the coordinator's reconcile). Crash between commit and
    rewrite: a file in leased/ with no lease for its attempt; ``settle`` (coordinator, under
    the lock) counts it as a spent try and expires it. The lease's first heartbeat file is
    written before the rename (``fence.first_beat``), so the coordinator never parses a new lease.
    """
    busy: list[str] = []
    try:
        for _ in range(64):
            job_id, reserved = reserved or sp.ledger.reserve_next(tasks), None
            if job_id is None:
                return None
            lock = job_lock(sp, job_id, blocking=False)
            if lock is None:
                # RACE: its holder (a make_ready, a cancel; maybe SIGSTOPped) keeps it. Put it back
                # only after this claim, or reserve_next hands us the same head job every time.
                busy.append(job_id)
                continue
            with lock:
                try:
                    claimed = _claim_with_lock_held(sp, job_id, worker)
                except DiskFull:
                    busy.append(job_id)  # put back in the claim order (the finally, if the ledger can)
                    raise
                if claimed is not None:
                    # RACE: recorded under the lock, so a later transition's row can't be overwritten by ours.
                    _record_claim(sp, claimed.job_file, worker)
            if claimed is not None:
                log.info("claim %s attempt=%d worker=%s", job_id, claimed.job_file.attempt, worker)
                crash.point("after-claim")
                return claimed
        return None
    finally:
        for job_id in busy:
            try:
                sp.ledger.unreserve(job_id)
            except SpoolError:
                pass  # a full disk: the coordinator's reconcile puts the row back to match the file


def _record_claim(sp: Handle, claimed: JobFile, worker: str) -> None:
    """The ledger after a durable claim. On a full disk the claim stands and its attempt runs:
    the ledger is an index that the coordinator's reconcile brings back to the files."""
    try:
        sp.ledger.record(claimed, State.LEASED, ready=False, event="claim", worker=worker)
    except DiskFull as err:  # the ledger types SQLite's "disk is full" as DiskFull too
        log.warning("claim %s: the ledger could not record it (%s); reconcile will", claimed.id, err)


# The copies that stop a claim: a more advanced one (a crash inside publish_job leaves its new
# copy in done/ or dead/ beside the old; a claim's own rename refuses a leased/ one). A copy in
# waiting/ is never the runner's beside one in pending/ (promote and requeue are single renames):
# it cannot stop this move, and the coordinator's reconcile, which lists every folder, settles it.
_BEYOND_PENDING = (State.LEASED, State.DEAD, State.DONE)


def claimable(sp: Handle, job_id: str) -> JobFile | None:
    """pending/<id>.yaml if it may be claimed as it is; else None, with the job settled. The
    caller holds the job's lock."""
    try:
        job_file = read_job(sp, State.PENDING, job_id)
    except (FileNotFoundError, InvalidJob):
        resync(sp, job_id)  # the ledger was behind the files, or an ingest is in flight
        return None
    if (
        has_result(sp, job_id)
        or job_file.backoff_seconds is not None
        or copy_in(sp, job_id, _BEYOND_PENDING)
        or moved_back_by_hand(job_file)
    ):
        resync(sp, job_id)  # a hand move back to pending/ is settled as a requeue, never run as it is
        return None
    # A cancel request is only ever written for a lease that holds: one still here is an earlier
    # lease's, left by a crash between a move out of leased/ and its cleanup. It must not kill this one.
    fs.unlink(sp.layout.fd(State.LEASED), cancel_name(job_id), missing_ok=True)
    return job_file


def as_claimed(sp: Handle, job_file: JobFile, worker: str) -> JobFile:
    """The claimed file's content: attempt+1, tries+1, the lease, the attempt's open record."""
    now = now_text(sp.clock)
    attempt = job_file.attempt + 1
    return job_file.replace(
        attempt=attempt,
        tries=job_file.tries + 1,
        lease=Lease(job_file.id, worker, attempt, claimed_at=now),
        backoff_seconds=None,
        attempts=job_file.end_attempt(outcome="lost", ended=now) + (Attempt(attempt, worker, started=now),),
    )


def _claim_with_lock_held(sp: Handle, job_id: str, worker: str) -> Held | None:
    """The claim itself; the caller holds the job's lock (``resync_under_lock`` takes it)."""
    job_file = claimable(sp, job_id)
    if job_file is None:
        return None
    attempt = job_file.attempt + 1
    first_beat(sp, job_id, attempt, worker)
    crash.point("claim-after-heartbeat")
    try:
        move_job(sp, job_id, State.PENDING, State.LEASED)
    except (FileNotFoundError, FileExistsError):
        drop_first_beat(sp, job_id, attempt)
        resync(sp, job_id)
        return None
    crash.point("claim-after-rename")
    claimed = as_claimed(sp, job_file, worker)
    try:
        data = rewrite_job(sp, State.LEASED, claimed, sync=True)
    except DiskFull:
        # No room for the counted try: undo the claim under our lock, so a full disk costs the
        # job nothing (left in leased/ it would be settled as a spent try). A crash before this
        # rename is the crash after claim-after-rename; after it, nothing happened.
        move_job(sp, job_id, State.LEASED, State.PENDING)
        drop_first_beat(sp, job_id, attempt)
        raise
    return Held(data, claimed)


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
    return state


def _lost_claim(sp: Handle, job_file: JobFile) -> State | None:
    """The file is one attempt behind the heartbeat we expire: only a claim writes a heartbeat
    for an attempt the file does not have yet (``fence.first_beat``), before its rename, so that
    claim died after its rename and before its rewrite (it held the lock we now hold). ``resync``
    counts the spent try and sends the job back (or to dead/): its new state, or None if the
    file stays leased (it holds an older attempt's lease, which the caller expires as usual)."""
    state = resync(sp, job_file.id)
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
