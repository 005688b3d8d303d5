"""``spool fsck --repair``: what can be fixed from the files, and the tmp/ sweep the coordinator runs too."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spool import queues
from spool.admin import finish_purge
from spool.base.errors import LedgerUnusable
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import WAKE_NAME, State, cancel_name, heartbeat_name, is_dot_name, job_lock_name, job_name
from spool.disk.layout import parse_drop_note_name, parse_purge_marker, tmp_writer_pid
from spool.disk.locks import is_held
from spool.fsck.jobs import locate
from spool.fsck.keys import repair_keys
from spool.job import JobFile, is_ready
from spool.moves.recovery import list_folders, reconcile, resync
from spool.moves.store import job_lock

if TYPE_CHECKING:
    from spool.handle import Handle


def repair_spool(sp: Handle) -> list[str]:
    """``fsck --repair``'s fixes (then ``fsck`` checks again): each job settled under its lock,
    tmp/ swept, stray dot-files cleared, keys judged, the ledger rebuilt from the files."""
    repaired: list[str] = _usable_ledger(sp)
    listing = list_folders(sp)
    for job_id in sorted(listing.jobs):
        lock = job_lock(sp, job_id, blocking=False)
        if lock is None:
            continue
        with lock:
            resync(sp, job_id)
    for name in sweep_tmp(sp):
        repaired.append(f"tmp/{name}: removed")
    listing = list_folders(sp)
    entries = []
    for job_id, folders in listing.jobs.items():
        located = locate(sp, job_id, folders[0])
        if located is not None:
            state, job_file = located
            entries.append((job_file, state, state is State.PENDING and is_ready(job_file, sp.clock.wall())))
    # A result without a job is kept: an interrupted purge was finished by the tmp sweep above,
    # so this one may be the only trace of an acknowledged job. fsck reports it for a person.
    repaired += repair_keys(sp, {e[0].id: e[0] for e in entries})
    _clear_stray_lease_files(sp, {e[0].id: e[0] for e in entries if e[1] is State.LEASED})
    _clear_stray_drop_notes(sp)
    queues.sync(sp)  # the limits first: the rebuild re-derives the windows of the queues with a rate
    count = sp.ledger.rebuild(entries)
    repaired.append(f"ledger: rebuilt from the files ({count} jobs)")
    # RACE: the rows of jobs that moved, or were submitted, after they were read are stale in
    # the rebuilt ledger: one reconcile pass, under each job's lock, brings them back to the files.
    reconcile(sp)
    return repaired


def _usable_ledger(sp: Handle) -> list[str]:
    """A ledger that is not a database (or fails SQLite's quick_check) is moved aside, with its
    -wal and -shm, for a fresh one that the repair then fills from the files."""
    try:
        sp.ledger.check()
        return []
    except LedgerUnusable as err:
        aside = sp.set_ledger_aside()
        return [f"ledger: unreadable ({err}); moved aside to {aside}" if aside else f"ledger: unreadable ({err})"]


def _clear_stray_drop_notes(sp: Handle) -> None:
    """``.<id>.drop`` notes outlive their ingest only when it died before its rename."""
    for state in (State.PENDING, State.WAITING):
        folder_fd = sp.layout.fd(state)
        names = set(fs.list_dir(folder_fd))
        for name in names:
            noted = parse_drop_note_name(name)
            if noted is not None and job_name(noted) not in names:
                fs.unlink(folder_fd, name, missing_ok=True)


def _clear_stray_lease_files(sp: Handle, leased: dict[str, JobFile]) -> None:
    leased_fd = sp.layout.fd(State.LEASED)
    keep = {WAKE_NAME} | {cancel_name(job_id) for job_id in leased}
    keep |= {heartbeat_name(job_id, job_file.attempt) for job_id, job_file in leased.items()}
    for name in fs.list_dir(leased_fd):
        if is_dot_name(name) and name not in keep and not _leased_now(sp, name):
            fs.unlink(leased_fd, name, missing_ok=True)


def _leased_now(sp: Handle, name: str) -> bool:
    """RACE: a claim (or a cancel) since the listing: the dot-file is a live lease's (a claim
    writes its heartbeat under the job's lock just before its rename into leased/), not a stray."""
    job_id = name[1:].split(".", 1)[0]  # .<id>.<attempt>.hb, .<id>.cancel: an id has no dot
    if not is_valid_id(job_id):
        return False
    return fs.exists(sp.layout.fd(State.LEASED), job_name(job_id)) or _busy(sp, job_id)


def writer_alive(tmp_name: str) -> bool:
    """tmp names start with their writer's pid (layout.tmp_name)."""
    pid = tmp_writer_pid(tmp_name)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_tmp(sp: Handle) -> list[str]:
    """Remove tmp/ files whose writer is gone (never one still being written), finishing an
    interrupted purge first: its job file is here, its result and logs may still be in place."""
    tmp_fd = sp.layout.fd("tmp")
    swept = []
    for name in fs.list_dir(tmp_fd):
        if writer_alive(name):
            continue
        purged = parse_purge_marker(name)
        if purged is not None:
            finish_purge(sp, purged)
        try:
            fs.unlink(tmp_fd, name, missing_ok=True)
        except (IsADirectoryError, PermissionError):  # EISDIR on Linux; EPERM where POSIX says so
            continue  # a planted directory is nobody's staging: left for a person (fsck lists it)
        swept.append(name)
    return swept


def _busy(sp: Handle, job_id: str) -> bool:
    return bool(is_held(sp.layout.fd("locks"), job_lock_name(job_id)))
