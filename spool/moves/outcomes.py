"""The moves shared by the transitions and by recovery: finish a done job, bury one, retry or bury.

``transitions`` makes them for a live attempt (a worker's complete or fail, the coordinator's
expire); ``recovery`` makes the same ones to finish what a crash interrupted (``settle``). Each
is called with the job's lock held, and each says its commit point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base import crash
from spool.job import JobFile
from spool.disk.layout import State, heartbeat_name
from spool.base.records import Attempt
from spool.disk.fsio import fs
from spool.moves.store import clear_lease_files, move_job, publish_job, rewrite_job
from spool.base.timetext import format_time, now_text

if TYPE_CHECKING:
    from spool.handle import Handle


def backoff_seconds(sp: Handle, tries: int) -> float:
    """Exponential in the tries spent, capped, with jitter so retries don't move in lockstep."""
    ceiling = min(sp.settings.backoff_max_seconds, sp.settings.backoff_base_seconds * 2 ** max(tries - 1, 0))
    return round(ceiling * sp.clock.jitter(0.5, 1.0), 3)


def finish_done(sp: Handle, job_file: JobFile, source: State = State.LEASED) -> JobFile:
    """The bookkeeping after a result exists: leased/ (or wherever) -> done/. Caller holds the lock.

    ``publish_job``: the done file is whole and durable before the leased copy goes, so no
    fsync of leased/ by another claim can ever leave the job in neither folder.
    """
    done = as_done(sp, job_file)
    publish_job(sp, done, source, State.DONE, crash_step="complete-after-move")
    clear_lease_files(sp, job_file.id, job_file.attempt)
    return done


def as_done(sp: Handle, job_file: JobFile) -> JobFile:
    """The done file's content: no lease, no reason or error, its attempt closed 'done'."""
    return job_file.replace(
        lease=None,
        backoff_seconds=None,
        reason=None,
        error=None,
        attempts=job_file.end_attempt(outcome="done", ended=now_text(sp.clock)),
    )


def bury(
    sp: Handle,
    job_file: JobFile,
    source: State,
    *,
    reason: str,
    error: str | None,
    outcome: str,
    ended: str,
    skipped_because: str | None = None,
) -> JobFile:
    """Move a job to dead/ durably with its reason (caller holds the lock).

    ``publish_job``: the dead record is whole, reason and all, at its commit point; a crash
    after it leaves the old copy beside it, which the more advanced dead copy beats.
    """
    dead = job_file.replace(
        lease=None,
        backoff_seconds=None,
        reason=reason,
        error=error,
        skipped_because=skipped_because,
        attempts=job_file.end_attempt(outcome=outcome, ended=ended, error=error),
    )
    publish_job(sp, dead, source, State.DEAD, crash_step="bury-after-rename")
    return dead


def retry_or_bury(
    sp: Handle,
    job_file: JobFile,
    *,
    error: str,
    outcome: str,
    ended: str,
    reason: str,
    dead_outcome: str | None = None,
    give_up: bool = False,
    crash_step: str | None = None,
) -> tuple[State, JobFile]:
    """LEASED -> PENDING after a backoff, or -> DEAD (``reason``) when its tries are spent (or
    ``give_up``). ``job_file`` has the try already counted; the caller holds the lock and clears
    the lease's dot-files.

    To dead: ``bury`` (durable). To pending: commit point the rename leased/ -> pending/, then
    the file is rewritten with the backoff and its attempt closed as ``outcome``, not fsync'd
    (lost in a power cut, the lease simply expires again). A crash between the two leaves a
    pending file whose lease and open record lag its folder: a claim closes the record as
    'lost'. ``crash_step`` names the crash point between them.
    """
    if give_up or job_file.tries >= job_file.job.max_tries:
        return State.DEAD, bury(
            sp, job_file, State.LEASED, reason=reason, error=error, outcome=dead_outcome or outcome, ended=ended
        )
    move_job(sp, job_file.id, State.LEASED, State.PENDING)
    if crash_step is not None:
        crash.point(crash_step)
    retry = job_file.replace(
        lease=None,
        error=error,
        backoff_seconds=backoff_seconds(sp, job_file.tries),
        attempts=job_file.end_attempt(outcome=outcome, ended=ended, error=error),
    )
    rewrite_job(sp, State.PENDING, retry, sync=False)
    return State.PENDING, retry


def give_back(sp: Handle, job_file: JobFile, *, ended: str, crash_step: str | None = None) -> JobFile:
    """LEASED -> PENDING with the try given back, ready at once: a release at a graceful stop, or
    a batch claim's member whose handler never started (``store.queued_beat``). Caller holds the
    lock and clears the lease's dot-files.

    Commit point: the rename. Not fsync'd: lost in a power cut, the lease expires instead (which
    spends the try). A crash after the rename leaves a pending file with its lease: ``settle``
    closes the record as 'lost' and keeps the try counted (never past ``max_tries - 1``).
    """
    move_job(sp, job_file.id, State.LEASED, State.PENDING)
    if crash_step is not None:
        crash.point(crash_step)
    released = job_file.replace(
        lease=None,
        tries=max(job_file.tries - 1, 0),
        attempts=job_file.end_attempt(outcome="released", ended=ended),
    )
    rewrite_job(sp, State.PENDING, released, sync=False)
    return released


def count_lost_claim(sp: Handle, job_file: JobFile, now: str, beat: tuple[str, bool] | None) -> tuple[State, JobFile]:
    """A file in leased/ one attempt behind its lease's first heartbeat: a claim renamed it there
    and died before writing its lease (a worker's early claim maybe after its handler started:
    ``claiming.Opening``). The try is spent; the attempt's record is ``lost``, opened when that
    heartbeat was written (the claim's moment, before any handler start) by the worker it names,
    or now by nobody when there is none. ``beat``: what that heartbeat says (``store.lease_beat``,
    read by the caller). Caller holds the lock; commit point: ``retry_or_bury``'s."""
    attempt = job_file.attempt + 1
    written = fs.lstat(sp.layout.fd(State.LEASED), heartbeat_name(job_file.id, attempt)) if beat else None
    started = format_time(written.st_mtime) if written is not None else now
    why = "the worker died while claiming the job (before its lease was written)"
    counted = job_file.replace(
        attempt=attempt,
        tries=job_file.tries + 1,
        lease=None,
        attempts=job_file.end_attempt(outcome="lost", ended=now)
        + (Attempt(attempt, beat[0] if beat else None, started=started, ended=now, outcome="lost", error=why),),
    )
    state, final = retry_or_bury(sp, counted, error=why, outcome="lost", ended=now, reason="expired")
    if state is State.PENDING:
        clear_lease_files(sp, job_file.id)
    return state, final
