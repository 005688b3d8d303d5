"""Finishing what a crash interrupted, and keeping the ledger in step with the files.

Every transition commits with one rename or link, then rewrites the file. A crash between the
two leaves a file whose folder is ahead of its content; ``settle`` finishes it, under the job's
lock, whoever comes next:

    leased/ with a result           -> done/ (the result is the commit point of done)
    leased/ with no lease recorded  -> a claim died before recording: a spent try, then expired
                                       (a batch member whose heartbeat says queued: moved back)
    pending/ or waiting/ with a lease, or an open attempt -> the lease cleared, the record closed 'lost'
    dead/ with no reason            -> reason 'failed'
    dead/ with a result             -> done/ (done wins; a dead job never gains a result otherwise)
    a result no attempt linked       -> set aside to dead/<new id> as invalid; the job goes on
                                       (store.result_is_earned: never picked up, or awaiting a retry)
    pending/ or waiting/ with a reason -> moved back by hand: finished as a requeue (fresh tries)
    in two folders, copies the runner made -> the more advanced copy wins (done > dead > leased > pending > waiting)
    in two folders, a copy it did not make -> that copy is a drop (pending/) or planted (to dead/, invalid)
    a runner name holding a user's text -> an ingest interrupted after its rename (its note or key
                                       reservation says so): finish_ingest; without them, a drop

``reconcile`` compares folder listings with the ledger (names only, no parsing) and resyncs
the jobs that differ. The coordinator's pass every few seconds (``full=False``) looks only at
pending/, waiting/ and leased/ and the rows that say they are there, so it costs what is in
flight, not the finished jobs kept; a full pass (done/ and dead/ too) comes at start, when the
ledger file was replaced, and every minute. Nothing here is a transition: a pass interrupted
anywhere is simply made again by the next one.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import InvalidJob
from spool.disk.fsio import fs
from spool.disk.ids import is_generated_id, is_valid_id
from spool.moves.ingest import finish_ingest, has_ingest_evidence, ingest, quarantine, set_result_aside
from spool.job import JobFile, is_ready
from spool.disk.layout import ADVANCEMENT, State, is_ignored_name, job_id_of, job_name
from spool.moves.outcomes import count_lost_claim, finish_done
from spool.moves.store import clear_lease_files, folders_of, has_result, job_lock, move_job, read_job, rewrite_job
from spool.moves.store import lease_beat, result_is_earned, state_of
from spool.base.timetext import now_text

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.recovery")


@dataclass
class Listing:
    """What the state folders hold right now, by name only."""

    jobs: dict[str, list[State]] = field(default_factory=dict)
    drops: list[str] = field(default_factory=list)  # non-job names in pending/
    strays: list[tuple[State, str]] = field(default_factory=list)  # non-job names in other folders


def list_folders(sp: Handle, states: Iterable[State] = State) -> Listing:
    """The job names in ``states``' folders (every state folder by default)."""
    listing = Listing()
    for state in states:
        for name in fs.list_dir(sp.layout.fd(state)):
            if is_ignored_name(name):
                continue
            job_id = job_id_of(name)
            if is_generated_id(job_id) if state is State.PENDING else is_valid_id(job_id):
                listing.jobs.setdefault(job_id, []).append(state)
            elif state is State.PENDING:
                listing.drops.append(name)
            else:
                listing.strays.append((state, name))
    return listing


@dataclass
class Copies:
    """Which files named ``<id>.yaml`` are the job's, and which are not the runner's (``copies_of``)."""

    keep: list[State] = field(default_factory=list)  # the job's own copy (at most one)
    stale: list[State] = field(default_factory=list)  # the runner's older copies a crash left: remove
    drops: list[State] = field(default_factory=list)  # a user's file in pending/: ingest it (new id)
    planted: list[State] = field(default_factory=list)  # a user's copy elsewhere: to dead/ as invalid
    files: dict[State, JobFile | None] = field(default_factory=dict)  # as read; None: not a whole job file


def copies_of(sp: Handle, job_id: str, folders: list[State] | None = None) -> Copies:
    """Tell the runner's copies of a job from the files a user made under its name.

    The runner leaves one job in two folders in exactly two ways: a move whose source name
    survived (the link+unlink fallback of ``rename_noreplace``, or a power cut that kept only
    the target's half of a rename; the target may have been rewritten since, so the inodes
    can differ: the power-loss model makes this state) and ``publish_job`` (a new copy in
    done/ or dead/, published whole, reason and all, while the old copy is still in its source
    folder). In both, the older copy is a whole job file of this id and never terminal content
    in pending/ (a moved-back job is settled before any move out of pending/). So:

    - in pending/, a file that is not a whole job file of this id (a user's spec) or, beside
      another copy, a finished job's (``cp dead/X.yaml pending/``): a drop, ingested under a
      new id; the job keeps its own file, whatever its folder;
    - in done/ without a result, or in dead/ without a reason, beside the job: planted by
      hand (the runner never publishes such a copy): it goes to dead/<new id> as invalid;
    - any other whole copies: the more advanced wins (done > dead > leased > pending >
      waiting), as for the runner's own; a hand-made one (``cp pending/A.yaml leased/``) can't
      be told from those, and the winner is still the job (a leased copy without a lease is a
      spent try, then a retry): nothing acknowledged is lost.

    A lone file that is not a whole job file is an ingest we interrupted only if its note or key
    reservation says so (``has_ingest_evidence``); in pending/ it is otherwise a drop.
    """
    found: dict[State, tuple[os.stat_result, JobFile | None]] = {}
    for state in folders if folders is not None else folders_of(sp, job_id):
        info = fs.lstat(sp.layout.fd(state), job_name(job_id))
        if info is None:
            continue
        try:
            found[state] = (info, read_job(sp, state, job_id))
        except InvalidJob:
            found[state] = (info, None)
        except FileNotFoundError:
            continue
    copies = Copies(files={state: job_file for state, (_info, job_file) in found.items()})
    if len(found) == 1:
        ((state, (_info, job_file)),) = found.items()
        user_text = job_file is None and state is not State.DEAD and not has_ingest_evidence(sp, state, job_id)
        if user_text:
            (copies.drops if state is State.PENDING else copies.planted).append(state)
        else:
            copies.keep.append(state)
        return copies
    inode = {state: (info.st_dev, info.st_ino) for state, (info, _f) in found.items()}
    others = []
    for state, (_info, job_file) in found.items():
        shared = any(inode[state] == inode[other] for other in found if other is not state)
        if state is State.PENDING and not shared and (job_file is None or is_terminal_content(job_file)):
            continue  # a user's spec or a finished job's copy: judged below
        if not shared and (
            job_file is None
            or (state is State.DONE and not has_result(sp, job_id))
            or (state is State.DEAD and job_file.reason is None)
        ):
            copies.planted.append(state)
        else:
            others.append(state)
    others.sort(key=lambda state: -ADVANCEMENT[state])
    copies.keep, copies.stale = others[:1], others[1:]
    if State.PENDING in found and State.PENDING not in others:
        pending_file = found[State.PENDING][1]
        alone = not others and (pending_file is not None or has_ingest_evidence(sp, State.PENDING, job_id))
        (copies.keep if alone else copies.drops).append(State.PENDING)
    return copies


def is_terminal_content(job_file: JobFile) -> bool:
    """Content only a finished job has: a reason, or a last attempt that ended done."""
    return job_file.reason is not None or bool(job_file.attempts) and job_file.attempts[-1].outcome == "done"


def resync(sp: Handle, job_id: str, *, event: str = "resync") -> State | None:
    """Settle the job's files and make its ledger row match them (an ``event``). Caller holds the lock."""
    copies = copies_of(sp, job_id)
    for _pending in copies.drops:
        log.warning(
            "%s: pending/%s is not a copy the runner made: a drop, ingested under a new id", job_id, job_name(job_id)
        )
        ingest(sp, job_name(job_id))
    for state in copies.planted:
        log.warning(
            "%s: %s/%s is not a copy the runner made: moved to dead/ as invalid", job_id, state.value, job_name(job_id)
        )
        quarantine(
            sp,
            state,
            job_name(job_id),
            f"{state.value}/{job_name(job_id)}: a copy of job {job_id} the "
            "runner did not make (planted by hand?); the job itself is kept",
        )
    for extra in copies.stale:
        log.warning(
            "%s: found in %s and %s; keeping %s", job_id, copies.keep[0].value, extra.value, copies.keep[0].value
        )
        fs.unlink(sp.layout.fd(extra), job_name(job_id), missing_ok=True)
    if not copies.keep:
        sp.ledger.forget([job_id])
        return None
    state = copies.keep[0]
    job_file = copies.files[state]  # read once, by copies_of (we hold the lock: it is still so)
    if job_file is None:
        finish_ingest(sp, state, job_id)
        return state
    state, job_file = settle(sp, state, job_file)
    ready = state is State.PENDING and is_ready(job_file, sp.clock.wall())
    sp.ledger.record(job_file, state, ready=ready, event=event)
    return state


def settle(sp: Handle, state: State, job_file: JobFile) -> tuple[State, JobFile]:
    """Finish a transition a crash interrupted (see the module doc). Caller holds the lock."""
    job_id, now = job_file.id, now_text(sp.clock)
    if has_result(sp, job_id) and state is not State.DONE:
        if result_is_earned(state, job_file):
            return State.DONE, finish_done(sp, job_file, source=state)
        set_result_aside(sp, job_file)
    if state in (State.PENDING, State.WAITING) and moved_back_by_hand(job_file):
        return _finish_requeue(sp, state, job_file)
    lease_attempt = job_file.lease.attempt if job_file.lease else None
    if state is State.LEASED and (
        lease_attempt != job_file.attempt
        or job_file.attempt == 0
        or (job_file.attempts and job_file.attempts[-1].attempt != job_file.attempt)
    ):
        beat = lease_beat(sp, job_id, job_file.attempt + 1)
        if beat is None or not beat[1]:  # not a batch member still queued (``store.queued_beat``)
            return count_lost_claim(sp, job_file, now, beat)
        move_job(sp, job_id, State.LEASED, State.PENDING)  # never started: its try never counted
        clear_lease_files(sp, job_id)
        return State.PENDING, job_file
    open_record = bool(job_file.attempts) and job_file.attempts[-1].is_open
    if state in (State.PENDING, State.WAITING) and (job_file.lease or open_record):
        # Only a release (which spends no try) reaches its rename on a last try: never leave a
        # claimable job with no tries left (a claim would run it past max_tries).
        tries = min(job_file.tries, job_file.job.max_tries - 1)
        fixed = job_file.replace(lease=None, tries=tries, attempts=job_file.end_attempt(outcome="lost", ended=now))
        rewrite_job(sp, state, fixed, sync=False)
        return state, fixed
    if state is State.DEAD and (job_file.reason is None or job_file.lease or open_record):
        fixed = job_file.replace(
            lease=None, reason=job_file.reason or "failed", attempts=job_file.end_attempt(outcome="failed", ended=now)
        )
        rewrite_job(sp, state, fixed, sync=True)
        return state, fixed
    if state is State.DONE and (job_file.lease or open_record):
        fixed = job_file.replace(lease=None, attempts=job_file.end_attempt(outcome="done", ended=now))
        rewrite_job(sp, state, fixed, sync=False)
        return state, fixed
    return state, job_file


def moved_back_by_hand(job_file: JobFile) -> bool:
    """A file in pending/ or waiting/ with a reason, which only a dead job has: ``mv dead/X.yaml
    pending/``, or ``spool requeue`` interrupted between its rename and its rewrite. Either way a
    requeue. (No tries left alone is not this: a release interrupted on a last try leaves it.)"""
    return job_file.reason is not None


def _finish_requeue(sp: Handle, state: State, job_file: JobFile) -> tuple[State, JobFile]:
    """Finish a hand move back to pending/ or waiting/ as ``spool requeue`` would: fresh tries,
    no reason; to waiting/ while a dependency is not done. An invalid drop's record can't run:
    it goes back to dead/. Caller holds the lock.

    Commit point: the rewrite in place (fsync'd). A move to waiting/ comes first, so a crash
    between the two leaves a file in waiting/ (never claimable) that the next settle finishes.
    """
    if job_file.reason == "invalid":
        move_job(sp, job_file.id, state, State.DEAD)
        fs.fsync_dir(sp.layout.fd(State.DEAD))
        log.warning(
            "%s: an invalid drop's record moved to %s/ by hand can't run; back to dead/", job_file.id, state.value
        )
        return State.DEAD, job_file
    target = state
    if state is State.PENDING and not all(state_of(sp, dep) is State.DONE for dep in job_file.job.depends_on):
        target = State.WAITING
        move_job(sp, job_file.id, state, target)
        crash.point("requeue-by-hand-after-rename")
    fresh = job_file.replace(
        tries=0,
        reason=None,
        error=None,
        skipped_because=None,
        backoff_seconds=None,
        lease=None,
        attempts=job_file.end_attempt(outcome="lost", ended=now_text(sp.clock)),
    )
    rewrite_job(sp, target, fresh, sync=True)
    log.info("%s: moved back to %s/ by hand: requeued with fresh tries -> %s", job_file.id, state.value, target.value)
    return target, fresh


def resync_under_lock(sp: Handle, job_id: str, *, blocking: bool = False) -> bool:
    """``resync`` under the job's lock; False if the lock was busy (try again later)."""
    lock = job_lock(sp, job_id, blocking=blocking)
    if lock is None:
        return False
    with lock:
        resync(sp, job_id)
    return True


# The folders a job passes through; done/ and dead/ only grow (a purge aside), so they are
# listed by a full pass only: at start, when the ledger was replaced, and every FULL_SECONDS.
ACTIVE = (State.PENDING, State.WAITING, State.LEASED)
FULL_SECONDS = 60.0
PAGE = 5000  # rows a full pass reads from the ledger at a time (one short read each)


@dataclass
class _LastFull:
    at: float  # sp.clock.monotonic()
    ledger: int  # sp.ledger.generation() then


_last_full: weakref.WeakKeyDictionary[Handle, _LastFull] = weakref.WeakKeyDictionary()


def reconcile(sp: Handle, listing: Listing | None = None, *, full: bool = True) -> Listing:
    """Make the ledger agree with the folders; returns the listing of pending/, waiting/ and
    leased/ (with the drops to ingest), or the ``listing`` given (a full one, all compared).

    Every pass compares the jobs in pending/, waiting/ and leased/ with their rows and the rows
    that say they are there (by query), so a job that left them without its row following (a
    crash or a failed ledger commit after the move) is resynced. ``full=False`` (the
    coordinator's frequent pass) stops there: its cost follows the jobs in flight, not the
    finished ones kept. A full pass also lists done/ and dead/ against their rows, a page of
    ids at a time (``_reconcile_finished``), for what only they can show (a row lost with a
    replaced ledger, a file put there or removed by hand); ``full=False`` makes one itself at
    this handle's first call, when the ledger file was replaced (``Ledger.generation``) and
    every ``FULL_SECONDS``.
    """
    now, generation, last = sp.clock.monotonic(), sp.ledger.generation(), _last_full.get(sp)
    full = full or listing is not None or last is None or last.ledger != generation or now - last.at >= FULL_SECONDS
    if listing is not None:
        _resync_differing(sp, listing, sp.ledger.states())
    else:
        listing = list_folders(sp, ACTIVE)
        known = sp.ledger.states([state.value for state in ACTIVE])
        known.update(sp.ledger.states_of([job_id for job_id in listing.jobs if job_id not in known]))
        checked = _resync_differing(sp, listing, known)
        if full:
            _reconcile_finished(sp, listing, checked)
    if full:
        _last_full[sp] = _LastFull(now, generation)
    sp.ledger.set_meta(drops=len(listing.drops))
    return listing


def _resync_differing(sp: Handle, listing: Listing, known: dict[str, str]) -> set[str]:
    """Resync each listed job whose row differs or that is in two folders, and each job with a
    row in ``known`` that is not listed; returns the ids resynced."""
    differing = {
        job_id
        for job_id, folders in listing.jobs.items()
        if len(folders) > 1 or known.get(job_id) != max(folders, key=lambda state: ADVANCEMENT[state]).value
    }
    differing.update(job_id for job_id in known if job_id not in listing.jobs)
    for job_id in differing:
        resync_under_lock(sp, job_id)
    return differing


def _reconcile_finished(sp: Handle, active: Listing, checked: set[str]) -> None:
    """done/ and dead/ against their rows (after the active folders were, ``active``): a set of
    each folder's ids, each row of that state crossed off it a page at a time; what is left, the
    rows not crossed, and the ids also found in another folder are resynced."""
    found = {state: _ids_in(sp, state) for state in (State.DONE, State.DEAD)}
    done, dead = found[State.DONE], found[State.DEAD]
    differing = {job_id for job_id in active.jobs if job_id in done or job_id in dead}
    differing.update(job_id for job_id in dead if job_id in done)
    for state, ids in found.items():
        after = ""
        while page := sp.ledger.ids_in_state(state.value, after=after, limit=PAGE):
            for job_id in page:
                if job_id in ids:
                    ids.discard(job_id)
                else:
                    differing.add(job_id)
            after = page[-1]
        differing.update(ids)
    for job_id in differing - checked:
        resync_under_lock(sp, job_id)


def _ids_in(sp: Handle, state: State) -> set[str]:
    """The ids of the job files in done/ or dead/ (as ``list_folders`` finds them)."""
    return {job_id for job_id in map(job_id_of, fs.list_dir(sp.layout.fd(state))) if is_valid_id(job_id)}
