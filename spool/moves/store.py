"""Job files on disk: read one, write a new one, rewrite one in place, move one, find one.

These are the steps transitions are made of; each is one or two calls into ``fsio``. None of
them takes a lock or decides anything: the transition that calls them does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal, overload

from spool.base import crash
from spool import job as jobs
from spool.base.errors import DiskFull, InvalidJob, LedgerError, SpoolError, TryLater
from spool.disk.fsio import fs
from spool.job import JobFile
from spool.disk.layout import (
    ADVANCEMENT,
    WAKE_NAME,
    State,
    cancel_name,
    heartbeat_name,
    is_lease_file_of,
    job_lock_name,
    job_name,
    result_name,
    set_aside_name,
    tmp_name,
)
from spool.disk.heartbeat import HEARTBEAT_MAX_BYTES, heartbeat_content, heartbeat_lines, parse_heartbeat
from spool.base.lazylog import lazy_logger
from spool.disk.locks import Lock, acquire, acquire_within
from spool.moves import spares
from spool.settings import MAX_JOB_BYTES

if TYPE_CHECKING:
    from spool.handle import Handle

log = lazy_logger("spool.store")

# The runner's own files may carry long errors and an invalid drop's original text.
FILE_SLACK_BYTES = 64 * 1024
# What a job file the runner wrote can never outgrow, whatever max_job_bytes is now or was when
# it was written: the largest user part a submit accepts (settings.MAX_JOB_BYTES) plus a bound on
# the runner's additions, which job.py keeps small (at most MAX_ATTEMPT_RECORDS records, only the
# newest with a whole 4 KiB error; 4 KiB errors; an invalid drop's text cut to fit; even fully
# YAML-escaped that is well under 1 MiB). A fixed ceiling, not max_job_bytes + slack: lowering the
# setting later must not make accepted jobs unreadable.
RUNNER_FILE_MAX_BYTES = MAX_JOB_BYTES + 2**20


@overload
def job_lock(
    sp: Handle,
    job_id: str,
    *,
    blocking: Literal[True] = ...,
    timeout_seconds: float | None = ...,
    on_wait: Callable[[str], None] | None = ...,
) -> Lock: ...
@overload
def job_lock(sp: Handle, job_id: str, *, blocking: bool) -> Lock | None: ...


def job_lock(
    sp: Handle,
    job_id: str,
    *,
    blocking: bool = True,
    timeout_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Lock | None:
    """The job's lock (``locks/<id>.lock``), held for the length of one transition.

    ``blocking=False`` (the coordinator, a claim): None when another process holds it; come back
    later. ``blocking=True``: wait in the kernel until it is free, unless a person waits
    (``timeout_seconds`` or ``on_wait`` given): then it is polled, ``on_wait`` hears after about a
    second what we wait for, and after ``timeout_seconds`` it raises TryLater (nothing changed).
    """
    locks_fd = sp.layout.fd("locks")
    if not blocking:
        return acquire(locks_fd, job_lock_name(job_id), blocking=False)
    if timeout_seconds is None and on_wait is None:
        return acquire(locks_fd, job_lock_name(job_id), blocking=True)
    what = f"waiting for job {job_id}'s lock, held by another process (a stopped worker?)"
    lock = acquire_within(
        locks_fd,
        job_lock_name(job_id),
        timeout_seconds,
        clock=sp.clock,
        on_wait=(lambda: on_wait(what)) if on_wait else None,
    )
    if lock is None:
        raise TryLater(
            f"job {job_id}'s lock is still held by another process after {timeout_seconds:g}s "
            "(a stopped worker?); nothing changed; try later"
        )
    return lock


def read_job(sp: Handle, state: State, job_id: str) -> JobFile:
    """Read and decode ``<state>/<id>.yaml``; FileNotFoundError when absent, InvalidJob if torn."""
    return decode_job(state, job_id, read_job_bytes(sp, state, job_id))


def read_job_now(sp: Handle, job_id: str, first: State | None = None, looks: int = 3) -> tuple[State, JobFile] | None:
    """The job's file as it is now, by id: read from ``first`` (where a listing saw it), else from
    the most advanced folder holding it. RACE: a move between the look-up and the read leaves no
    file to read; every move leaves a copy in some folder, so look it up again (``looks`` times).
    None when no folder holds it (purged); InvalidJob for a torn file; SpoolError if it kept moving."""
    if first is not None:
        try:
            return first, read_job(sp, first, job_id)
        except FileNotFoundError:
            pass
    for _ in range(looks):
        folders = folders_of(sp, job_id)
        if not folders:
            return None
        try:
            return folders[0], read_job(sp, folders[0], job_id)
        except FileNotFoundError:
            continue
    raise SpoolError(f"{job_id}: it moved each time it was read ({looks} looks); try again")


def read_job_bytes(sp: Handle, state: State, job_id: str) -> bytes:
    """The raw bytes of ``<state>/<id>.yaml`` (FileNotFoundError when absent), for a caller that
    can tell them from bytes it wrote itself before paying for a parse (``spool.moves.fence``)."""
    return fs.read_file(sp.layout.fd(state), job_name(job_id), RUNNER_FILE_MAX_BYTES)


def decode_job(state: State, job_id: str, data: bytes) -> JobFile:
    """Decode the bytes of ``<state>/<id>.yaml`` (hostile input: the safe parser and every check)."""
    source = f"{state.value}/{job_name(job_id)}"
    return jobs.decode(data, source=source, expected_id=job_id, max_bytes=RUNNER_FILE_MAX_BYTES)


def stage(sp: Handle, data: bytes, *, sync: bool) -> str:
    """Write ``data`` to a name in tmp/ and return the name: over a settled spare job file when the
    handle keeps one (``spool.moves.spares``), else in a new file."""
    tmp = sp.layout.fd("tmp")
    spare = spares.take_file(sp)
    if spare is not None:
        try:
            if fs.rewrite_spare(tmp, spare, data, sync=sync):
                return spare
        except BaseException:
            spares.remove(sp, spare)  # half rewritten: nothing may read it
            raise
        spares.remove(sp, spare)  # swept, or not ours any more: a new file instead
    name = tmp_name()
    fs.write_new(tmp, name, data, sync=sync)
    return name


def unstage(sp: Handle, name: str) -> None:
    fs.unlink(sp.layout.fd("tmp"), name, missing_ok=True)


def sync_staged(sp: Handle, staged: list[str]) -> None:
    """Make files staged without an fsync durable, a batch's at once: one ``syncfs``, or an fsync
    of each where it is missing (``fsio.syncfs`` says where). A failure is final (DurabilityError)."""
    tmp_fd = sp.layout.fd("tmp")
    if not staged or fs.syncfs(tmp_fd):
        return
    for name in staged:
        fs.fsync_file(tmp_fd, name)


def create_job(sp: Handle, state: State, job_file: JobFile, data: bytes | None = None) -> None:
    """Publish a new job file (tmp, fsync, rename without replace); the caller fsyncs the folder.

    ``data``: the file's bytes when the caller has encoded it already (submit measures them)."""
    _place(sp, job_file, state, replace=False, data=data)


def _place(sp: Handle, job_file: JobFile, state: State, *, replace: bool, data: bytes | None = None) -> bytes:
    """Write the job's whole content in tmp/, fsync it, and rename it to ``state``/<id>.yaml.
    Returns the bytes written."""
    data = jobs.encode(job_file) if data is None else data
    staged = stage(sp, data, sync=True)
    move = fs.rename_replace if replace else fs.rename_noreplace
    try:
        move(sp.layout.fd("tmp"), staged, sp.layout.fd(state), job_name(job_file.id))
    except BaseException:
        unstage(sp, staged)
        raise
    return data


def rewrite_job(sp: Handle, state: State, job_file: JobFile, *, sync: bool) -> bytes:
    """Replace a job file's content in place, atomically (the caller holds the job's lock).

    The new content is always fsync'd before the rename: renamed over the old file unsynced,
    a power cut could leave the name pointing at an empty or torn file, losing an acknowledged
    job (the power-loss model finds it). ``sync`` decides only whether the folder is fsync'd,
    i.e. whether the rewrite itself must survive; without it a power cut may bring back the
    old, whole content. Returns the bytes written (a claim keeps them: ``spool.moves.fence``).
    """
    data = _place(sp, job_file, state, replace=True)
    if sync:
        fs.fsync_dir(sp.layout.fd(state))
    return data


def publish_job(sp: Handle, job_file: JobFile, source: State, target: State, *, crash_step: str) -> None:
    """Move a job forward to a final folder with its new content already in place.

    Commit point: the rename of a whole, fsync'd new file from tmp/ to ``target``/<id>.yaml
    (never replacing), then ``target`` is fsync'd. Only then is the copy in ``source`` removed.
    A crash (or power cut) between the two leaves the job in both folders, and the more
    advanced copy, the new one, wins for whoever looks next; the job is never in neither, and
    its new state never lacks its reason. ``crash_step`` names the crash point between the two.
    Caller holds the job's lock.
    """
    _place(sp, job_file, target, replace=False)
    fs.fsync_dir(sp.layout.fd(target))
    crash.point(crash_step)
    fs.unlink(sp.layout.fd(source), job_name(job_file.id), missing_ok=True)


def move_job(sp: Handle, job_id: str, source: State, target: State) -> None:
    """The commit point of most transitions: one rename that never replaces."""
    fs.rename_noreplace(sp.layout.fd(source), job_name(job_id), sp.layout.fd(target), job_name(job_id))


def has_result(sp: Handle, job_id: str) -> bool:
    return fs.exists(sp.layout.fd("results"), result_name(job_id))


def result_is_earned(state: State, job_file: JobFile) -> bool:
    """Whether a result beside this job file can be the runner's: linked for an attempt the job had.

    ``complete`` links a result only under the job's lock, for the lease of its current attempt
    (1 or more), while the file is in leased/ with that lease; ``finish_done`` then moves it to
    done/ with that attempt's record closed 'done'. So a result counts beside a file in done/;
    in leased/ only with a lease for the current attempt (a claim that died before recording it
    never started a handler); anywhere else (a done job moved back by hand) only when the current
    attempt's record ended 'done'. A result planted for a job never picked up, or waiting for
    its retry, is none of these: it is set aside (``ingest.set_result_aside``), never the job's.
    A result planted while a lease holds can't be told from its worker's own: the first wins.
    """
    if state is State.DONE:
        return True
    if job_file.attempt < 1:
        return False
    if state is State.LEASED:
        return job_file.lease is not None and job_file.lease.attempt == job_file.attempt
    last = job_file.attempts[-1] if job_file.attempts else None
    return last is not None and last.attempt == job_file.attempt and last.outcome == "done"


def has_earned_result(sp: Handle, job_id: str, state: State) -> bool:
    """``has_result``, counting only a result the job earned (``result_is_earned``) where its
    file in ``state`` reads; a file that does not read is judged by whoever settles it."""
    if not has_result(sp, job_id):
        return False
    if state is State.DONE:
        return True
    try:
        return result_is_earned(state, read_job(sp, state, job_id))
    except (FileNotFoundError, InvalidJob):
        return True


def folders_of(sp: Handle, job_id: str) -> list[State]:
    """Every state folder holding the job, most advanced first (normally exactly one)."""
    found = [state for state in State if fs.exists(sp.layout.fd(state), job_name(job_id))]
    return sorted(found, key=lambda state: -ADVANCEMENT[state])


def only_in(sp: Handle, job_id: str, state: State) -> bool:
    """The job's file is in ``state`` and no other folder. A crash between ``publish_job``'s two
    steps leaves two copies; a move must then settle the job (resync), never act on the stale one."""
    return folders_of(sp, job_id) == [state]


def copy_in(sp: Handle, job_id: str, folders: tuple[State, ...]) -> bool:
    """Whether the job has a file in any of ``folders``: the healthy path's two-copies check,
    one stat per folder that can matter to the caller (``only_in`` stats all five)."""
    return any(fs.exists(sp.layout.fd(state), job_name(job_id)) for state in folders)


def state_of(sp: Handle, job_id: str) -> State | None:
    """The job's state as the files say: a result it earned makes it done whatever folder it is in."""
    folders = folders_of(sp, job_id)
    if not folders:
        return None
    return State.DONE if has_earned_result(sp, job_id, folders[0]) else folders[0]


def drop_job_lock(sp: Handle, job_id: str, lock: Lock) -> None:
    """Remove the job's lock file, which ``lock`` holds: the job is purged, so ``locks/`` keeps
    no file for it; one already waiting on this file takes a new one (``spool.disk.locks``).

    Not at done, though that would keep ``locks/`` small all along: on this project's root disk
    (ext4 without a journal) unlinking it there, and creating the next job's anew, cost 0.15-0.2
    ms more CPU in each of claim and complete than keeping it (``jobmap.py seam --bare``, 5 pairs,
    2026-12-05); on tmpfs 0.01 ms. Purge is where a finished job's files go."""
    lock.remove(sp.layout.fd("locks"), job_lock_name(job_id))


def clear_lease_files(sp: Handle, job_id: str, attempt: int | None = None) -> None:
    """Remove a job's heartbeat and cancel dot-files from leased/ (repeatable); a worker keeps
    the heartbeat of its own ``attempt`` as a spare (``spool.moves.spares``). A planted
    directory under one of their names can't be unlinked: it is set aside, never fatal."""
    leased = sp.layout.fd(State.LEASED)
    if attempt is None:
        names = [n for n in fs.list_dir(leased) if is_lease_file_of(n, job_id)]
    else:
        beat = heartbeat_name(job_id, attempt)
        names = [cancel_name(job_id)] if spares.keep(sp, beat) else [beat, cancel_name(job_id)]
    for name in names:
        try:
            remove_if_there(sp, State.LEASED, name)
        except (IsADirectoryError, PermissionError):  # EISDIR on Linux; EPERM where POSIX says so
            set_aside(sp, State.LEASED, name)


def remove_if_there(sp: Handle, state: State, name: str) -> None:
    """Unlink ``name`` in ``state``/ if it is there (the caller holds the job's lock, under which
    its dot-files are written). Looked up first: a lookup takes no lock on the folder, while an
    unlink takes the folder's lock even to find nothing, and leased/ is where every worker's claims
    and completions rename (two such unlinks per job found no cancel request, docs/performance.md)."""
    folder = sp.layout.fd(state)
    if fs.lstat(folder, name) is not None:
        fs.unlink(folder, name, missing_ok=True)


def queued_beat(sp: Handle, job_id: str, attempt: int) -> bool:
    """Whether the lease of ``attempt`` is a batch member whose handler never started (its
    heartbeat still says ``queued``): an expiry or a settle gives its try back. No file, or one
    that does not read: False, the try stays counted (the strict side, as before batches)."""
    beat = lease_beat(sp, job_id, attempt)
    return beat is not None and beat[1]


def lease_beat(sp: Handle, job_id: str, attempt: int) -> tuple[str, bool] | None:
    """(the worker, queued?) that the heartbeat file of ``attempt``'s lease names; None: no file
    there, or one that does not read."""
    try:
        content = fs.read_file(sp.layout.fd(State.LEASED), heartbeat_name(job_id, attempt), HEARTBEAT_MAX_BYTES)
    except (OSError, InvalidJob):
        return None
    beat = parse_heartbeat(content)  # the first line as the writer writes a queued member's
    return None if beat is None else (beat[1], heartbeat_lines(content)[0] == heartbeat_content(*beat, queued=True))


def write_dot_file(sp: Handle, state: State | str, name: str, data: bytes) -> None:
    """Write one of the runner's dot-files (a heartbeat counter, a cancel request) in ``state``/
    (or a spare heartbeat in tmp/).

    Anything but a plain file under its name (a directory, a FIFO that would block the open, a
    symlink, a second hard link that would carry our write elsewhere) was planted: it is set
    aside first, so no planted entry can wedge or kill the process that writes here."""
    dir_fd = sp.layout.fd(state)
    info = fs.lstat(dir_fd, name)
    if info is not None and (not stat.S_ISREG(info.st_mode) or info.st_nlink != 1):
        set_aside(sp, state, name)
    fs.overwrite_small(dir_fd, name, data)


def set_aside(sp: Handle, state: State | str, name: str) -> str:
    """Rename a planted entry in the runner's dot-file namespace to a dot-name nothing reads
    (``<name>.planted-<random>``), with one WARNING. Returns the new name."""
    aside = set_aside_name(name, os.urandom(4).hex())
    try:
        fs.rename_noreplace(sp.layout.fd(state), name, sp.layout.fd(state), aside)
    except FileNotFoundError:
        return aside  # someone else moved it first
    folder = state.value if isinstance(state, State) else state
    log.warning("%s/%s was not the runner's file; moved aside to %s/%s", folder, name, folder, aside)
    return aside


def wake(sp: Handle, state: State = State.PENDING) -> None:
    """Touch ``<state>/.wake`` after the ledger commit, so inotify watchers look again."""
    try:
        fs.touch(sp.layout.fd(state), WAKE_NAME)
    except OSError:
        pass  # a lost wake-up only delays a job until the next poll


def wake_slot(sp: Handle, queues: Iterable[str]) -> None:
    """After the ledger records jobs of ``queues`` leaving leased/ (done, dead, given back): wake the
    workers if one of them has a concurrency limit. A worker held back by that limit sleeps on
    pending/ and nothing lands there when a slot frees, so without this it would wait for its slow
    poll (``poll_seconds``) for every job of a queue at ``concurrency 1``. Unlimited queues pay
    nothing but a look at the set of capped queues the last reservation read."""
    try:
        capped = sp.ledger.capped_queues()
    except (LedgerError, DiskFull):
        capped = frozenset()  # the poll finds the freed slot
    if capped and any(queue in capped for queue in queues):
        wake(sp)
