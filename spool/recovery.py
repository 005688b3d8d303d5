"""Finishing what a crash interrupted, and keeping the ledger in step with the files.

Every transition commits with one rename or link, then rewrites the file. A crash between the
two leaves a file whose folder is ahead of its content; ``settle`` finishes it, under the job's
lock, whoever comes next:

    leased/ with a result           -> done/ (the result is the commit point of done)
    leased/ with no lease recorded  -> a claim died before recording: a spent try, then expired
    pending/ or waiting/ with a lease, or an open attempt -> the lease cleared, the record closed 'lost'
    dead/ with no reason            -> reason 'failed'
    dead/ with a result             -> done/ (done wins; a dead job never gains a result otherwise)
    in two folders                  -> the more advanced copy wins (done > dead > leased > pending > waiting)
    a runner name holding a user's text -> an ingest interrupted after its rename: finish_ingest

``reconcile`` compares folder listings with the ledger (names only, no parsing) and resyncs
the jobs that differ: cheap enough for every coordinator pass even at 100,000 jobs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spool.errors import InvalidJob
from spool.fsio import fs
from spool.ids import is_generated_id, is_valid_id
from spool.job import JobFile, now_text
from spool.layout import ADVANCEMENT, JOB_SUFFIX, State, is_ignored_name, job_name
from spool.locks import acquire, job_lock_name
from spool.store import clear_lease_files, folders_of, has_result, move_job, read_job, rewrite_job
from spool.transitions import backoff_seconds, bury, finish_done

if TYPE_CHECKING:
    from spool.spool import Spool

log = logging.getLogger("spool.recovery")


@dataclass
class Listing:
    """What the state folders hold right now, by name only."""

    jobs: dict[str, list[State]] = field(default_factory=dict)
    drops: list[str] = field(default_factory=list)  # non-job names in pending/
    strays: list[tuple[State, str]] = field(default_factory=list)  # non-job names in other folders


def list_folders(sp: Spool) -> Listing:
    listing = Listing()
    for state in State:
        for name in fs.list_dir(sp.layout.fd(state)):
            if is_ignored_name(name):
                continue
            job_id = name[: -len(JOB_SUFFIX)] if name.endswith(JOB_SUFFIX) else ""
            if is_generated_id(job_id) if state is State.PENDING else is_valid_id(job_id):
                listing.jobs.setdefault(job_id, []).append(state)
            elif state is State.PENDING:
                listing.drops.append(name)
            else:
                listing.strays.append((state, name))
    return listing


def is_ready(job_file: JobFile, now_wall: float) -> bool:
    """Ready to claim: no backoff to wait out and no ``not_before`` in the future."""
    if job_file.backoff_seconds is not None:
        return False
    if job_file.job.not_before is not None:
        from spool.job import parse_time

        return parse_time(job_file.job.not_before, "not_before").timestamp() <= now_wall
    return True


def resync(sp: Spool, job_id: str) -> State | None:
    """Settle the job's files and make its ledger row match them. Caller holds the job's lock."""
    folders = folders_of(sp, job_id)
    if not folders:
        sp.ledger.forget([job_id])
        return None
    for extra in folders[1:]:
        log.warning("%s: found in %s and %s; keeping %s", job_id, folders[0].value, extra.value, folders[0].value)
        fs.unlink(sp.layout.fd(extra), job_name(job_id), missing_ok=True)
    state = folders[0]
    try:
        job_file = read_job(sp, state, job_id)
    except InvalidJob:
        from spool.submission import finish_ingest

        finish_ingest(sp, state, job_id)
        return state
    except FileNotFoundError:
        return None
    state, job_file = settle(sp, state, job_file)
    ready = state is State.PENDING and is_ready(job_file, time.time())
    sp.ledger.record(job_file, state, ready=ready, event="resync")
    return state


def settle(sp: Spool, state: State, job_file: JobFile) -> tuple[State, JobFile]:
    """Finish a transition a crash interrupted (see the module doc). Caller holds the lock."""
    job_id, now = job_file.id, now_text()
    if has_result(sp, job_id) and state is not State.DONE:
        return State.DONE, finish_done(sp, job_file, source=state)
    lease = job_file.lease or {}
    if state is State.LEASED and (lease.get("attempt") != job_file.attempt or job_file.attempt == 0 or
                                  (job_file.attempts and job_file.attempts[-1].get("attempt") != job_file.attempt)):
        return _count_lost_claim(sp, job_file, now)
    open_record = bool(job_file.attempts) and job_file.attempts[-1].get("ended") is None
    if state in (State.PENDING, State.WAITING) and (job_file.lease or open_record):
        fixed = job_file.replace(lease=None, attempts=job_file.end_attempt(outcome="lost", ended=now))
        rewrite_job(sp, state, fixed, sync=False)
        return state, fixed
    if state is State.DEAD and (job_file.reason is None or job_file.lease or open_record):
        fixed = job_file.replace(lease=None, reason=job_file.reason or "failed",
                                 attempts=job_file.end_attempt(outcome="failed", ended=now))
        rewrite_job(sp, state, fixed, sync=True)
        return state, fixed
    if state is State.DONE and (job_file.lease or open_record):
        fixed = job_file.replace(lease=None, attempts=job_file.end_attempt(outcome="done", ended=now))
        rewrite_job(sp, state, fixed, sync=False)
        return state, fixed
    return state, job_file


def _count_lost_claim(sp: Spool, job_file: JobFile, now: str) -> tuple[State, JobFile]:
    """A claim renamed the job into leased/ and died before recording its lease: the try is spent."""
    attempt = job_file.attempt + 1
    why = "the worker died while claiming the job"
    counted = job_file.replace(
        attempt=attempt, tries=job_file.tries + 1, lease=None,
        attempts=job_file.end_attempt(outcome="lost", ended=now) + (
            {"attempt": attempt, "worker": None, "started": now, "ended": now, "outcome": "lost", "error": why},))
    if counted.tries >= counted.job.max_tries:
        return State.DEAD, bury(sp, counted, State.LEASED, reason="expired", error=why, outcome="lost", ended=now)
    move_job(sp, job_file.id, State.LEASED, State.PENDING)
    retry = counted.replace(error=why, backoff_seconds=backoff_seconds(sp, counted.tries))
    rewrite_job(sp, State.PENDING, retry, sync=False)
    clear_lease_files(sp, job_file.id)
    return State.PENDING, retry


def resync_locked(sp: Spool, job_id: str, *, blocking: bool = False) -> bool:
    """``resync`` under the job's lock; False if the lock was busy (try again later)."""
    lock = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=blocking)
    if lock is None:
        return False
    with lock:
        resync(sp, job_id)
    return True


def reconcile(sp: Spool, listing: Listing | None = None) -> Listing:
    """Make the ledger agree with the folders; returns the listing (with the drops to ingest)."""
    listing = listing or list_folders(sp)
    known = sp.ledger.states()
    for job_id, folders in listing.jobs.items():
        best = max(folders, key=lambda state: ADVANCEMENT[state])
        if len(folders) > 1 or known.get(job_id) != best.value:
            resync_locked(sp, job_id)
    gone = [job_id for job_id in known if job_id not in listing.jobs]
    for job_id in gone:
        resync_locked(sp, job_id)
    sp.ledger.set_meta(drops=len(listing.drops))
    return listing
