"""Group commit for a worker: claim several ready jobs at once, complete several at once.

One job's claim costs two syncs (its rewritten file, then leased/) and its completion four (the
result, results/, the done file, done/); on a journaled disk nearly each one commits the
filesystem's journal. A worker that meets a deep queue, or finishes short attempts one after
another, shares those syncs across the jobs: each job still moves with its own rename or link
and its own checks under its own lock, in the order one job's move makes them; what a batch
shares is the sync of every file's content (one ``syncfs``, or an fsync of each where it is
missing, as ``submit_many`` does: ``store.sync_staged``) and one fsync of each folder.

**claim_many** (PENDING -> LEASED for up to ``most`` jobs):

1. The best ready jobs are reserved in one ledger transaction (crash point
   ``claim-after-reserve``: rows 'leased', files in pending/, which the coordinator's reconcile
   puts back); each is locked without blocking (a busy one is put back) and checked as one claim
   checks it (``still_reserved``, ``claimable``). Each lock is held until the batch ends.
2. Each member's claimed content (attempt+1, tries+1, the lease) is written in tmp/ without an
   fsync, then one sync makes them all durable. Crash point ``claim-batch-after-sync``: only
   staged files in tmp/, swept at start; nothing was claimed.
3. Per member: its first heartbeat (the members after the first marked ``queued``: their
   handlers wait for the ones before), the rename pending/ -> leased/ (the member's commit
   point), then its staged content renamed over it (a worker swaps it in instead, keeping the
   old copy as a spare: ``_commit_claims``). Crash point ``claim-batch-after-member``
   after each member (killed after the first). A crash between a member's two renames leaves a
   file in leased/ with no lease recorded: ``settle`` counts the try, or, its heartbeat saying
   ``queued``, moves it back untouched (the try was never counted in the file).
4. One fsync of leased/ (and of pending/ after a swap): every member's try is durable before
   any handler starts. Then crash
   point ``after-claim``, the ledger rows in one transaction, and the locks are released.

A member's handler starts later than its claim. Its try is counted at pickup as for any claim,
but a member that never started is not a try: until the worker starts it (``start_queued``, a
heartbeat without the mark), an expiry or a settle that finds the mark gives the try back. The
worker gives back (``release``) the members still waiting when it stops, and when the attempt
before them runs long, so no member waits out a lease term.

**complete_many** (LEASED -> DONE for attempts that ended with a result):

1. Every member is locked (blocking, in id order, so two callers can't deadlock) and its fence
   checked (a stale one is dropped: LeaseLost, as for ``complete``). Its result and its done
   file are written in tmp/ without an fsync; one sync makes them all durable. Crash point
   ``complete-batch-after-sync``: nothing changed, every lease still holds.
2. Each result is linked into results/ (the member's commit point of done; a name already there
   means an earlier result won: that member is dropped). Crash point ``complete-batch-after-link``
   after each. Then one fsync of results/, and crash point ``after-result``: every member is done,
   its file still in leased/, which whoever takes its lock next moves on (``settle``). A power cut
   before that fsync may keep any subset of the links: a member without its link is still
   leased, and is retried (at least once, as after a power cut inside ``complete``).
3. Each done file is renamed into done/ (crash point ``complete-batch-after-rename`` after each),
   then one fsync of done/, crash point ``complete-after-move``, and only then the copies in
   leased/ are removed (a later fsync of leased/ must never make a removal durable before the
   done/ entry is; a worker moves them to tmp/ as spares, ``spool.moves.spares``). Then the
   ledger rows in one transaction, and the locks are released.

Nobody has to finish an interrupted batch beyond what they finish for one job: every member's
state is one a crashed single claim or completion leaves, at the same step.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spool import job as jobs
from spool.base import crash
from spool.base.errors import DiskFull, InvalidJob, LeaseLost, LedgerError, SpoolError
from spool.base.records import Lease
from spool.disk.fsio import fs
from spool.disk.layout import State, job_name, result_name
from spool.job import JobFile
from spool.moves.fence import Held, check_fence, drop_first_beat, first_beat
from spool.moves.outcomes import as_done
from spool.moves import spares
from spool.moves.recovery import resync
from spool.moves.store import clear_lease_files, job_lock, move_job, stage, sync_staged, unstage, wake_slot
from spool.moves.claiming import as_claimed, claim_held, claimable, still_reserved

if TYPE_CHECKING:
    from spool.handle import Handle
    from spool.ledger.limits import Reservation

log = logging.getLogger("spool.transitions")


@dataclass(frozen=True)
class Finished:
    """An attempt that ended with a result, waiting for ``complete_many``."""

    lease: Lease
    held: Held | None
    result_json: bytes


@dataclass(eq=False)  # compared as itself: ``member not in claimed`` made ~30 field-by-field compares a job
class _Member:
    job_id: str
    claimed: JobFile
    data: bytes
    staged: str


# -- claim ------------------------------------------------------------------------------------


def claim_many(
    sp: Handle,
    worker: str,
    tasks: Collection[str] | None,
    most: int,
    queues: Collection[str] | None = None,
    *,
    early: bool = False,
) -> list[Held]:
    """Up to ``most`` of the best ready jobs of ``tasks`` in ``queues`` (None: any) that the
    queues' limits let through, claimed together (see the module doc); the first is the one to
    start now, the others are ``queued``. One job: ``claim_held`` (``early``: its early claim,
    whose content its caller writes once the handler was sent)."""
    if most <= 1:
        held = claim_held(sp, worker, tasks, queues=queues, early=early)
        return [held] if held is not None else []
    reservation = sp.ledger.reserve_many(tasks, most, queues)
    reserved = reservation.ids
    if len(reserved) <= 1:  # one ready job: the one-job claim, with its own checks and retries
        held = claim_held(sp, worker, tasks, reserved=reservation, queues=queues, early=early) if reserved else None
        return [held] if held is not None else []
    put_back = list(reserved)  # every reserved job not claimed goes back in the claim order
    with ExitStack() as locks:
        crash.point("claim-after-reserve")
        members = _lock_and_stage(sp, locks, reservation, worker)
        claimed: list[_Member] = []
        try:
            claimed = _commit_claims(sp, members, worker)
        finally:
            for member in members:
                if member not in claimed:  # a claimed member's staged name was renamed away
                    unstage(sp, member.staged)
        for member in claimed:
            put_back.remove(member.job_id)
        for job_id in put_back:
            _unreserve(sp, job_id, reservation)
        if claimed:
            crash.point("after-claim")
            _record(sp, [member.claimed for member in claimed], State.LEASED, "claim", worker)
    for member in claimed:
        log.info("claim %s attempt=%d worker=%s", member.job_id, member.claimed.attempt, worker)
    return [Held(member.data, member.claimed) for member in claimed]


def _lock_and_stage(sp: Handle, locks: ExitStack, reservation: Reservation, worker: str) -> list[_Member]:
    """Steps 1-2: the members that may be claimed, locked, their claimed content staged and synced."""
    members: list[_Member] = []
    busy = False  # a member given back to another lock's holder: ask again soon, once a claim (as claim_held)
    try:
        for job_id in reservation.ids:
            lock = job_lock(sp, job_id, blocking=False)
            if lock is None:
                busy = True
                continue  # RACE: its holder (a make_ready, a cancel, a resync) keeps it; it goes back in line
            locks.enter_context(lock)
            if not still_reserved(sp, job_id, reservation):
                busy = True
                continue  # the reconcile took it back (see still_reserved): not ours to claim
            job_file = claimable(sp, job_id)
            if job_file is None:
                continue
            claimed = as_claimed(sp, job_file, worker, reservation.at)
            data = jobs.encode(claimed)
            members.append(_Member(job_id, claimed, data, stage(sp, data, sync=False)))
        sync_staged(sp, [member.staged for member in members])
    except BaseException:
        for member in members:
            unstage(sp, member.staged)
        raise
    finally:
        if busy:
            sp.ledger.retry_soon()  # nothing wakes us when their holders let go
    crash.point("claim-batch-after-sync")
    return members


def _commit_claims(sp: Handle, members: list[_Member], worker: str) -> list[_Member]:
    """Steps 3-4: each member's two renames, then one fsync of leased/. A full disk undoes the
    members renamed so far (as one claim undoes itself) and is raised.

    A worker's handle swaps the staged content in rather than renaming it over the copy
    (``spares.swap_in``) and keeps the old copies as spares, rewritten only after pending/ is
    fsync'd too (``spares.settle_claims``: not on the way to the first member's start); a crash
    leaves them in tmp/ for the sweep."""
    claimed: list[_Member] = []
    swapped: list[str] = []  # staged names now holding the old copies
    try:
        for member in members:
            attempt = member.claimed.attempt
            first_beat(sp, member.job_id, attempt, worker, queued=bool(claimed))
            try:
                move_job(sp, member.job_id, State.PENDING, State.LEASED)
            except (FileNotFoundError, FileExistsError):
                drop_first_beat(sp, member.job_id, attempt)
                resync(sp, member.job_id)
                continue
            if spares.swap_in(sp, member.staged, member.job_id):
                swapped.append(member.staged)
            claimed.append(member)
            crash.point("claim-batch-after-member")
        fs.fsync_dir(sp.layout.fd(State.LEASED))
    except BaseException as err:
        for name in swapped:
            unstage(sp, name)
        if isinstance(err, DiskFull):
            for member in claimed:
                move_job(sp, member.job_id, State.LEASED, State.PENDING)
                drop_first_beat(sp, member.job_id, member.claimed.attempt)
        raise
    spares.keep_swapped(sp, swapped)
    return claimed


def _unreserve(sp: Handle, job_id: str, reservation: Reservation) -> None:
    try:
        sp.ledger.unreserve(job_id, reservation)
    except SpoolError:
        pass  # a full disk: the coordinator's reconcile puts the row back to match the file


# -- complete ---------------------------------------------------------------------------------


def complete_many(sp: Handle, finished: Sequence[Finished]) -> list[LeaseLost | None]:
    """LEASED -> DONE for every member with its result (see the module doc); for each member, in
    order, None when it is done or the LeaseLost that dropped it (stale, or an earlier result)."""
    if not finished:
        return []
    outcome: dict[str, LeaseLost | None] = {}
    members = sorted(finished, key=lambda member: member.lease.job_id)
    with _locked(sp, [member.lease.job_id for member in members]):
        staged: list[str] = []
        try:
            ready = _stage_outcomes(sp, members, staged, outcome)
            sync_staged(sp, staged)
            crash.point("complete-batch-after-sync")
            done = _link_results(sp, ready, outcome)
            _publish_done(sp, done, staged)
        finally:
            for name in staged:
                unstage(sp, name)
        _record(sp, [done_file for done_file, _name in done], State.DONE, "complete", members[0].lease.worker)
    wake_slot(sp, [done_file.job.queue for done_file, _name in done])
    for member in finished:
        if outcome[member.lease.job_id] is None:
            log.info("complete %s attempt=%d worker=%s", member.lease.job_id, member.lease.attempt, member.lease.worker)
    return [outcome[member.lease.job_id] for member in finished]


@contextmanager
def _locked(sp: Handle, job_ids: list[str]) -> Iterator[None]:
    """Every member's lock, taken blocking in id order (no cycle with another batch; the other
    moves hold one job's lock at a time)."""
    with ExitStack() as locks:
        for job_id in job_ids:
            locks.enter_context(job_lock(sp, job_id, blocking=True))
        yield


def _stage_outcomes(
    sp: Handle, members: list[Finished], staged: list[str], outcome: dict[str, LeaseLost | None]
) -> list[tuple[str, JobFile, str, str]]:
    """Step 1: each live member's result and done file in tmp/, unsynced: (id, done, result, file)."""
    ready = []
    for member in members:
        try:
            job_file = check_fence(sp, member.lease, member.held)
        except LeaseLost as err:
            outcome[member.lease.job_id] = err
            continue
        except InvalidJob as err:  # not the file this attempt's claim wrote: someone else's now
            outcome[member.lease.job_id] = LeaseLost(f"{member.lease.job_id}: {err}")
            continue
        done = as_done(sp, job_file)
        result = stage(sp, member.result_json, sync=False)
        staged.append(result)
        done_file = stage(sp, jobs.encode(done), sync=False)
        staged.append(done_file)
        ready.append((member.lease.job_id, done, result, done_file))
    return ready


def _link_results(
    sp: Handle, ready: list[tuple[str, JobFile, str, str]], outcome: dict[str, LeaseLost | None]
) -> list[tuple[JobFile, str]]:
    """Step 2: each result linked (its commit point), then one fsync of results/."""
    done: list[tuple[JobFile, str]] = []
    tmp, results = sp.layout.fd("tmp"), sp.layout.fd("results")
    for job_id, done_file, result, staged_done in ready:
        try:
            fs.link(tmp, result, results, result_name(job_id))
        except FileExistsError:
            outcome[job_id] = LeaseLost(f"{job_id}: already has a result; this one is dropped")
            continue
        outcome[job_id] = None
        done.append((done_file, staged_done))
        crash.point("complete-batch-after-link")
    if done:
        fs.fsync_dir(results)
        crash.point("after-result")
    return done


def _publish_done(sp: Handle, done: list[tuple[JobFile, str]], staged: list[str]) -> None:
    """Step 3: each done file renamed into done/, one fsync of done/, then the leased/ copies go.
    A renamed file's staged name leaves ``staged`` (nothing is left of it in tmp/ to remove)."""
    if not done:
        return
    tmp, done_fd, leased = sp.layout.fd("tmp"), sp.layout.fd(State.DONE), sp.layout.fd(State.LEASED)
    moved = []
    for done_file, staged_name in done:
        try:
            fs.rename_noreplace(tmp, staged_name, done_fd, job_name(done_file.id))
        except FileExistsError:
            resync(sp, done_file.id)  # a copy in done/ the runner did not make: settled as one is
            continue
        moved.append(done_file)
        staged.remove(staged_name)
        crash.point("complete-batch-after-rename")
    fs.fsync_dir(done_fd)
    crash.point("complete-after-move")
    for done_file in moved:
        if not spares.keep_moved(sp, State.LEASED, job_name(done_file.id)):
            fs.unlink(leased, job_name(done_file.id), missing_ok=True)
        clear_lease_files(sp, done_file.id, done_file.attempt)


# -- shared -----------------------------------------------------------------------------------


def _record(sp: Handle, files: list[JobFile], state: State, event: str, worker: str) -> None:
    """The ledger rows of a batch, in one transaction. The moves are durable already: a ledger
    that can't take the rows must not undo them; the coordinator's reconcile adds them."""
    if not files:
        return
    try:
        sp.ledger.record_many([(job_file, state, False) for job_file in files], event=event, worker=worker)
    except (LedgerError, DiskFull) as err:
        log.warning("%s of %d jobs: the ledger could not record it (%s); reconcile will", event, len(files), err)


__all__ = ["Finished", "claim_many", "complete_many"]
