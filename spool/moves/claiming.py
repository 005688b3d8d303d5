"""PENDING -> LEASED: a worker's claim of one job, the first move of an attempt's life.

The claim takes what the ledger reserves for it (``Ledger.reserve_many``: the best ready job of
the worker's tasks and queues that the queues' limits let through, ``spool.ledger.limits``),
then moves that job's file under its lock (the recipe of ``spool.moves.transitions``). Its
helpers (``claimable``, ``as_claimed``) are shared with the group claim (``spool.moves.group``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import DiskFull, InvalidJob, LedgerError, SpoolError
from spool.base.records import Attempt, Lease
from spool.base.timetext import format_time
from spool import job as jobs
from spool.disk.fsio import fs
from spool.disk.layout import State, cancel_name
from spool.job import JobFile
from spool.moves import spares
from spool.moves.fence import Held, drop_first_beat, first_beat
from spool.moves.recovery import moved_back_by_hand, resync
from spool.moves.store import (
    copy_in,
    has_result,
    job_lock,
    move_job,
    read_job,
    remove_if_there,
    rewrite_job,
    stage,
    unstage,
)

if TYPE_CHECKING:
    from spool.disk.locks import Lock
    from spool.handle import Handle
    from spool.ledger.limits import Reservation

log = logging.getLogger("spool.transitions")

__all__ = ["Opening", "as_claimed", "claim", "claim_held", "claimable", "still_reserved"]


def claim(
    sp: Handle, worker: str, tasks: Collection[str] | None, queues: Collection[str] | None = None
) -> JobFile | None:
    """PENDING -> LEASED: the best ready job of ``tasks``, or None (``claim_held``'s JobFile)."""
    return held.job_file if (held := claim_held(sp, worker, tasks, queues=queues)) is not None else None


def claim_held(
    sp: Handle,
    worker: str,
    tasks: Collection[str] | None,
    reserved: Reservation | None = None,
    queues: Collection[str] | None = None,
    only: str | None = None,
    *,
    early: bool = False,
) -> Held | None:
    """PENDING -> LEASED: the best ready job of ``tasks`` in ``queues`` (None: any) that the
    queues' limits let through (``only``: that job, if it is one), or None; with the bytes
    written, so the attempt's later steps can check their fence without a parse
    (``spool.moves.fence``). ``reserved``: one job the caller reserved already (``reserve_many``),
    tried first.

    Crash point ``claim-after-reserve``: the row 'leased' (a queue's slot counted as taken), the
    file in pending/; the coordinator's reconcile puts the row back, which frees the slot.
    Commit point: rename pending/<id>.yaml -> leased/<id>.yaml. Then the file is rewritten with
    attempt+1, tries+1 and the lease, fsync'd with leased/ before the handler may start, so a
    counted try survives a power cut. Crash before the commit: nothing changed (a ledger row
    left 'leased' is put back by the coordinator's reconcile). Crash between commit and
    rewrite: a file in leased/ with no lease for its attempt; ``settle`` (coordinator, under
    the lock) counts it as a spent try and expires it. The lease's first heartbeat file is
    written before the rename (``fence.first_beat``), so the coordinator never parses a new lease.
    A worker swaps the rewritten file in and keeps the old copy (``_write_claimed``).

    ``early`` (a worker's own claim): the handler may start after one sync, not two. The claimed
    content is staged unsynced before the rename, leased/ is fsync'd after it (the try is counted
    from here: a file in leased/ with no lease for its attempt is a spent try to ``settle``), and
    the Held returned carries an ``Opening`` that holds the job's lock: the worker starts the
    handler, then ``Opening.write`` syncs the content, swaps it in, records the claim and frees
    the lock. Crash point ``after-claim`` then comes before the content is written, and
    ``claim-after-start`` after the handler was sent (both settled as a spent try).
    """
    busy: list[tuple[str, Reservation]] = []  # each given back after this claim (the finally)
    try:
        for _ in range(64):
            reservation, reserved = reserved or sp.ledger.reserve_many(tasks, 1, queues, only), None
            if not reservation.ids:
                return None
            crash.point("claim-after-reserve")
            job_id = reservation.ids[0]
            lock = job_lock(sp, job_id, blocking=False)
            if lock is None:
                # RACE: its holder (a make_ready, a cancel; maybe SIGSTOPped) keeps it. Put it back
                # only after this claim, or reserve_next hands us the same head job every time.
                busy.append((job_id, reservation))
                continue
            claimed = None
            try:
                if not still_reserved(sp, job_id, reservation):
                    busy.append((job_id, reservation))  # only its rate claim is given back
                    continue
                try:
                    claimed = _claim_with_lock_held(sp, job_id, worker, reservation.at, lock if early else None)
                except DiskFull:
                    busy.append((job_id, reservation))  # back in the claim order (the finally, if the ledger can)
                    raise
                if claimed is not None and claimed.opening is None:
                    # RACE: recorded under the lock, so a later transition's row can't be overwritten by ours.
                    _record_claim(sp, claimed.job_file, worker)
            finally:
                if claimed is None or claimed.opening is None:
                    lock.release()  # an Opening frees it once the content is written
            if claimed is not None:
                log.info("claim %s attempt=%d worker=%s", job_id, claimed.job_file.attempt, worker)
                crash.point("after-claim")
                return claimed
        return None
    finally:
        if busy:
            sp.ledger.retry_soon()  # nothing wakes us when their holders let go
        for job_id, given_back in busy:
            try:
                sp.ledger.unreserve(job_id, given_back)
            except SpoolError:
                pass  # a full disk: the coordinator's reconcile puts the row back to match the file


def still_reserved(sp: Handle, job_id: str, reservation: Reservation) -> bool:
    """Whether ``reservation`` still holds ``job_id``'s row; the caller holds the job's lock.

    Asked only of a ``fenced`` reservation (a queue with a concurrency limit): the coordinator's
    reconcile may have put the row back to pending between the reservation and this lock (it
    cannot tell a live claimer from a killed one), freeing the slot in the count; claiming the
    job then could put one attempt more than the limit in leased/. Given up, the job stays in
    pending/ with nothing spent, for the next claim.
    """
    return not reservation.fenced or sp.ledger.holds(job_id, reservation.token)


def _record_claim(sp: Handle, claimed: JobFile, worker: str) -> None:
    """The ledger after a durable claim. On a full disk or a failing ledger the claim stands and
    its attempt runs (a worker's early claim records while its handler starts): the ledger is an
    index that the coordinator's reconcile brings back to the files."""
    try:
        sp.ledger.record(claimed, State.LEASED, ready=False, event="claim", worker=worker)
    except (DiskFull, LedgerError) as err:  # the ledger types SQLite's "disk is full" as DiskFull too
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
    remove_if_there(sp, State.LEASED, cancel_name(job_id))
    return job_file


def as_claimed(sp: Handle, job_file: JobFile, worker: str, at: float) -> JobFile:
    """The claimed file's content: attempt+1, tries+1, the lease, the attempt's open record,
    started ``at`` (the reservation's time: what a queue's rate window counted)."""
    now = format_time(at)
    attempt = job_file.attempt + 1
    return job_file.replace(
        attempt=attempt,
        tries=job_file.tries + 1,
        lease=Lease(job_file.id, worker, attempt, claimed_at=now),
        backoff_seconds=None,
        attempts=job_file.end_attempt(outcome="lost", ended=now) + (Attempt(attempt, worker, started=now),),
    )


def _claim_with_lock_held(sp: Handle, job_id: str, worker: str, at: float, early: Lock | None) -> Held | None:
    """The claim itself; the caller holds the job's lock (``early``: it, to be freed by the
    returned Held's Opening; ``resync_under_lock`` takes it)."""
    job_file = claimable(sp, job_id)
    if job_file is None:
        return None
    if early is not None:
        return _claim_early(sp, job_file, worker, at, early)
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
    claimed = as_claimed(sp, job_file, worker, at)
    try:
        data = _write_claimed(sp, claimed)
    except DiskFull:
        # No room for the counted try: undo the claim under our lock, so a full disk costs the
        # job nothing (left in leased/ it would be settled as a spent try). A crash before this
        # rename is the crash after claim-after-rename; after it, nothing happened.
        move_job(sp, job_id, State.LEASED, State.PENDING)
        drop_first_beat(sp, job_id, attempt)
        raise
    return Held(data, claimed)


def _write_claimed(sp: Handle, claimed: JobFile) -> bytes:
    """The claimed content over the copy just renamed into leased/, fsync'd with leased/ before the
    handler may start (``rewrite_job``). A worker's handle swaps it in and keeps the old copy
    (``spares.swap_in``, as a batch claim does), rewritten only after pending/ is fsync'd too,
    which is not this claim's to wait for (``spares.settle_claims``). Returns the bytes."""
    if not spares.keeps_files(sp):
        return rewrite_job(sp, State.LEASED, claimed, sync=True)
    data = jobs.encode(claimed)
    staged = stage(sp, data, sync=True)
    try:
        swapped = spares.swap_in(sp, staged, claimed.id)
    except BaseException:
        unstage(sp, staged)
        raise
    try:
        fs.fsync_dir(sp.layout.fd(State.LEASED))
    except BaseException:
        if swapped:
            unstage(sp, staged)
        raise
    spares.keep_swapped(sp, [staged] if swapped else [])
    return data


def _claim_early(sp: Handle, job_file: JobFile, worker: str, at: float, lock: Lock) -> Held | None:
    """``claim_held``'s ``early`` claim: staged (unsynced: a full disk still fails before anything
    moves), renamed, leased/ fsync'd; the content waits for ``Opening.write``."""
    job_id, claimed = job_file.id, as_claimed(sp, job_file, worker, at)
    data = jobs.encode(claimed)
    staged = stage(sp, data, sync=False)
    try:
        first_beat(sp, job_id, claimed.attempt, worker)
        crash.point("claim-after-heartbeat")
        try:
            move_job(sp, job_id, State.PENDING, State.LEASED)
        except (FileNotFoundError, FileExistsError):
            drop_first_beat(sp, job_id, claimed.attempt)
            resync(sp, job_id)
            unstage(sp, staged)
            return None
        crash.point("claim-after-rename")
        fs.fsync_dir(sp.layout.fd(State.LEASED))  # the try is counted from here (``settle``)
    except BaseException:
        unstage(sp, staged)
        raise
    spares.settle(sp)  # the old copies that waited for an fsync of leased/
    return Held(data, claimed, Opening(sp, claimed, staged, lock, worker))


class Opening:
    """A worker's claim counted but not yet written (``claim_held``'s ``early``): leased/<id>.yaml
    still holds the pending copy, the claimed content waits unsynced in tmp/, and the job's lock
    is held, so nobody settles the file meanwhile. The worker sends the attempt to its child and
    then calls ``write``, before anything else reads or moves the lease (every later step checks
    the fence against the claimed content).

    Crash point ``claim-after-start``: the handler may be running, the content not written; the
    coordinator, once the lock is freed, settles the file as the spent try it is (``settle``:
    attempt 'lost'), as after ``after-claim``. A power cut before the swap is durable leaves the
    same, or the synced content: either is a counted try. Finished by ``settle``, never undone.
    """

    def __init__(self, sp: Handle, claimed: JobFile, staged: str, lock: Lock, worker: str) -> None:
        self.sp, self.claimed, self.staged, self.worker = sp, claimed, staged, worker
        self._lock: Lock | None = lock

    def write(self) -> None:
        """Sync the content, swap it in, record the claim, free the lock; once (then a no-op).
        A failed sync or swap leaves the pending copy in leased/ for ``settle`` and is raised."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        sp = self.sp
        try:
            crash.point("claim-after-start")
            try:
                fs.fsync_file(sp.layout.fd("tmp"), self.staged)
                swapped = spares.swap_in(sp, self.staged, self.claimed.id)
            except BaseException:
                unstage(sp, self.staged)
                raise
            if swapped:
                spares.keep_swapped_late(sp, self.staged)
            # RACE: recorded under the lock, so a later transition's row can't be overwritten by ours.
            _record_claim(sp, self.claimed, self.worker)
        finally:
            lock.release()
