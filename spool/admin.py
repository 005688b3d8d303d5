"""Moves a person asks for: cancel, requeue, purge.

Each blocks on the job's lock (a person can wait a moment; the coordinator never does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import AlreadyTerminal, DiskFull, InvalidJob, LedgerError, NotFound, SpoolError
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import (
    State,
    cancel_name,
    is_log_of,
    job_name,
    key_name,
    log_name,
    purge_marker_name,
    result_name,
)
from spool.schedule.fired import record_before_purge
from spool.moves.outcomes import bury
from spool.moves.recovery import resync
from spool.moves.store import (
    drop_job_lock,
    folders_of,
    job_lock,
    move_job,
    read_job,
    rewrite_job,
    state_of,
    wake,
    write_dot_file,
)
from spool.moves.submission import remove_key
from spool.base.timetext import now_text, parse_time

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.admin")


class ParentDead(SpoolError):
    """A requeue refused: a parent of the job is dead, so the coordinator would skip it again at
    once. Requeue the parent first, or the whole chain (``requeue_with_parents``)."""


def _settled_state(sp: Handle, job_id: str) -> State | None:
    """The job's state once a move a crash left half made is settled (caller holds the lock)."""
    if folders_of(sp, job_id):  # two copies, or a hand move back to pending/ to finish first
        resync(sp, job_id)
    return state_of(sp, job_id)


def cancel(
    sp: Handle, job_id: str, *, timeout_seconds: float | None = None, on_wait: Callable[[str], None] | None = None
) -> str:
    """PENDING/WAITING -> DEAD (cancelled) before returning; for LEASED, a request the worker
    acts on at its next heartbeat (it kills the attempt and buries the job).

    Commit point: ``bury``'s rename (durable). For a leased job, the commit point is the
    request file ``leased/.<id>.cancel``; if the worker is gone, expiry honours it instead.
    Returns "cancelled" or "requested". Raises AlreadyTerminal for done or dead jobs, and
    TryLater when the job's lock stays held past ``timeout_seconds`` (``on_wait`` hears why).
    """
    with job_lock(sp, job_id, timeout_seconds=timeout_seconds, on_wait=on_wait):
        state = _settled_state(sp, job_id)
        if state is None:
            raise NotFound(f"no job {job_id}")
        if state.terminal:
            raise AlreadyTerminal(f"{job_id}: already {state.value}; nothing changed")
        if state is State.LEASED:
            write_dot_file(sp, State.LEASED, cancel_name(job_id), now_text(sp.clock).encode())
            log.info("cancel %s requested (leased)", job_id)
            return "requested"
        job_file = read_job(sp, state, job_id)
        dead = bury(
            sp,
            job_file,
            state,
            reason="cancelled",
            error="cancelled by request",
            outcome="cancelled",
            ended=now_text(sp.clock),
        )
        sp.ledger.record(dead, State.DEAD, ready=False, event="cancel")
    wake(sp, State.DEAD)
    log.info("cancel %s", job_id)
    return "cancelled"


def requeue(
    sp: Handle, job_id: str, *, timeout_seconds: float | None = None, on_wait: Callable[[str], None] | None = None
) -> State:
    """DEAD -> PENDING (or WAITING while dependencies are not all done) with a fresh set of tries;
    children skipped because of it are re-armed (back to waiting) too.

    Commit point: the rename out of dead/, fsync'd so an acknowledged requeue stays requeued.
    Crash after it: the file still carries its old reason, which the claim replaces.
    """
    with job_lock(sp, job_id, timeout_seconds=timeout_seconds, on_wait=on_wait):
        state = _settled_state(sp, job_id)
        if state is None:
            raise NotFound(f"no job {job_id}")
        if state is not State.DEAD:
            raise AlreadyTerminal(f"{job_id}: is {state.value}, not dead; nothing changed")
        job_file = read_job(sp, State.DEAD, job_id)
        if job_file.reason == "invalid":
            raise SpoolError(f"{job_id}: an invalid drop can't run; fix it and drop it again")
        _refuse_under_a_dead_parent(sp, job_file.job.depends_on, job_id, job_file.skipped_because)
        target = State.PENDING
        for dep in job_file.job.depends_on:
            if state_of(sp, dep) is not State.DONE:
                target = State.WAITING
        move_job(sp, job_id, State.DEAD, target)
        crash.point("requeue-after-rename")
        fresh = job_file.replace(tries=0, reason=None, error=None, skipped_because=None, backoff_seconds=None)
        rewrite_job(sp, target, fresh, sync=True)
        fs.fsync_dir(sp.layout.fd(State.DEAD))
        sp.ledger.record(fresh, target, ready=target is State.PENDING and fresh.job.not_before is None, event="requeue")
    log.info("requeue %s -> %s", job_id, target.value)
    wake(sp, target)
    for child in sp.ledger.dependents(job_id):
        _rearm_skipped(sp, child, because=job_id)
    return target


def _refuse_under_a_dead_parent(
    sp: Handle, depends_on: Collection[str], job_id: str, skipped_because: str | None
) -> None:
    """Raise ParentDead when a parent is dead (the one that skipped the job first, if it still is)."""
    dead = [dep for dep in depends_on if state_of(sp, dep) is State.DEAD]
    if not dead:
        return
    parent = skipped_because if skipped_because in dead else dead[0]
    how = "was skipped because its" if skipped_because == parent else "can't run while its"
    raise ParentDead(
        f"job {job_id} {how} parent {parent} is dead: requeue {parent} (or requeue {job_id} --with-parents)"
    )


def requeue_with_parents(
    sp: Handle, job_id: str, *, timeout_seconds: float | None = None, on_wait: Callable[[str], None] | None = None
) -> list[str]:
    """Requeue ``job_id`` and every dead ancestor it waits on, parents first, so the chain runs
    again; returns the ids of the chain that were dead and are requeued now (the children each
    requeue re-arms included). Each step is ``requeue`` under its own job's lock."""
    if not is_valid_id(job_id):
        raise InvalidJob(f"{job_id!r} is not a job id")
    chain = [*_dead_ancestors(sp, job_id), job_id]
    was_dead = [one for one in chain if state_of(sp, one) is State.DEAD]
    for one in chain:
        if state_of(sp, one) is State.DEAD:  # else re-armed already by its parent's requeue
            requeue(sp, one, timeout_seconds=timeout_seconds, on_wait=on_wait)
    return [one for one in was_dead if state_of(sp, one) is not State.DEAD]


def _dead_ancestors(sp: Handle, job_id: str) -> list[str]:
    """The dead jobs ``job_id`` depends on, directly or through other dead ones, parents first."""
    order: list[str] = []
    seen = {job_id}
    stack: list[tuple[str, bool]] = [(job_id, False)]
    while stack:  # a depth-first walk without recursion: a chain may be thousands of jobs long
        current, parents_done = stack.pop()
        if parents_done:
            if current != job_id:
                order.append(current)
            continue
        stack.append((current, True))
        try:
            depends_on = read_job(sp, State.DEAD, current).job.depends_on
        except (FileNotFoundError, InvalidJob):
            continue  # requeued or moved since; its own requeue says what is wrong with it
        for dep in depends_on:
            if dep not in seen and state_of(sp, dep) is State.DEAD:
                seen.add(dep)
                stack.append((dep, False))
    return order


def _rearm_skipped(sp: Handle, job_id: str, because: str) -> None:
    try:
        job_file = read_job(sp, State.DEAD, job_id)
    except (FileNotFoundError, InvalidJob):
        return
    first = job_file.skipped_because
    first_state = state_of(sp, first) if first and first != because else None
    if job_file.reason == "skipped" and (first == because or first_state not in (None, State.DEAD)):
        try:
            requeue(sp, job_id)
        except ParentDead:
            pass  # another parent is dead too: it stays skipped until that one is requeued


def requeue_all_dead(sp: Handle, task: str | None = None) -> list[str]:
    requeued = []
    for job_id in sp.ledger.ids(state="dead"):
        try:
            job_file = read_job(sp, State.DEAD, job_id)
        except (FileNotFoundError, InvalidJob):
            continue
        if job_file.reason == "invalid" or (task is not None and job_file.job.task != task):
            continue
        if job_file.reason == "skipped" and state_of(sp, job_file.skipped_because or "") is State.DEAD:
            continue  # re-armed with its parent
        try:
            requeue(sp, job_id)
            requeued.append(job_id)
        except SpoolError:
            continue
    return requeued


def purge(
    sp: Handle,
    older_than_seconds: float,
    states: Collection[State] = (State.DONE, State.DEAD),
    *,
    on_wait: Callable[[str], None] | None = None,
) -> list[str]:
    """DONE/DEAD -> (gone): jobs that ended more than ``older_than_seconds`` ago, with their
    results, logs and keys.

    Commit point: the job file's rename into tmp/ (under a name the tmp sweep removes). Crash
    after it: a result, logs or a key reservation without a job; fsck --repair removes them, and
    a key without a job is taken over by the next submit of that key.
    """
    cutoff = sp.clock.wall() - older_than_seconds
    purged = []
    for state in states:
        if not state.terminal:
            raise SpoolError(f"purge: {state.value} jobs are not finished; only done and dead can be purged")
        for job_id in sp.ledger.updated_before([state.value], cutoff):
            if _purge_one(sp, job_id, state, cutoff, on_wait):
                purged.append(job_id)
    return purged


def finish_purge(sp: Handle, job_id: str) -> None:
    """Remove what an interrupted purge left: the result and the logs (repeatable)."""
    fs.unlink(sp.layout.fd("results"), result_name(job_id), missing_ok=True)
    logs_fd = sp.layout.fd("logs")
    for name in fs.list_dir(logs_fd):
        if is_log_of(name, job_id):
            fs.unlink(logs_fd, name, missing_ok=True)


def _forget(sp: Handle, job_id: str) -> None:
    """Drop a purged job's row before its key is free again, so the index never holds a row the
    files don't (a failing ledger is left to the coordinator's reconcile: the purge happened)."""
    try:
        sp.ledger.forget([job_id])
    except (LedgerError, DiskFull) as err:
        log.warning("purge %s: the ledger did not forget it (%s); the coordinator's reconcile will", job_id, err)


def _purge_one(
    sp: Handle, job_id: str, state: State, cutoff: float, on_wait: Callable[[str], None] | None = None
) -> bool:
    with job_lock(sp, job_id, on_wait=on_wait) as lock:
        if folders_of(sp, job_id) != [state]:
            return False
        try:
            job_file = read_job(sp, state, job_id)
        except (FileNotFoundError, InvalidJob):
            return False
        ended = [record.ended for record in job_file.attempts if record.ended]
        last = ended[-1] if ended else job_file.submitted_at
        try:
            if parse_time(last, "ended").timestamp() > cutoff:
                return False
        except InvalidJob:
            pass
        if job_file.job.key is not None:
            record_before_purge(sp, job_file.job.key, job_id)  # a schedule's slot: never fired again
        buried = purge_marker_name(job_id)
        fs.rename_noreplace(sp.layout.fd(state), job_name(job_id), sp.layout.fd("tmp"), buried)
        crash.point("purge-after-rename")
        fs.fsync_dir(sp.layout.fd(state))
        fs.unlink(sp.layout.fd("results"), result_name(job_id), missing_ok=True)
        for attempt in range(1, job_file.attempt + 1):
            fs.unlink(sp.layout.fd("logs"), log_name(job_id, attempt), missing_ok=True)
        # The sweep only removes tmp/ files whose writer is gone: we are alive, so we remove ours.
        fs.unlink(sp.layout.fd("tmp"), buried, missing_ok=True)
        _forget(sp, job_id)
        drop_job_lock(sp, job_id, lock)  # held: nobody can be holding it after us (spool.disk.locks)
    if job_file.job.has_own_key:
        remove_key(sp, job_file.job.key, job_id)
    log.info("purge %s (%s, key %s)", job_id, state.value, key_name(job_file.job.key)[:12])
    return True
