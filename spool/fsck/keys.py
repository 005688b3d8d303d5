"""fsck's judgement of keys/: a reservation is judged orphaned, and removed, only under its key's lock.

RACE: submitters (``submit``, ``submit_many``, ``ingest``) reserve a key and commit its job under
the key's lock; workers and the coordinator move a job between folders under the job's lock. The
listing of the folders fsck starts from is stale by the time keys/ is read: a job that moved after
it (leased/ -> pending/ on a retry, waiting/ -> pending/ on a promote) or was submitted since looks
missing. So nothing is judged from the listing alone. A reservation that names no listed job is
looked at again under its key's lock (no submit of that key can be between its reservation and
its commit then), its job looked up by id in every folder at that moment and, if not found there,
once more under the job's own lock (no move of it can be under way then; a job whose lock file
does not exist has never been moved, so it can't have slipped between two folders' looks).

Plain fsck takes these locks without creating a lock file (``acquire_existing``: it writes
nothing, and works on a read-only spool); ``--repair`` may create the key's. Both take every lock
without blocking: a held one means a submit or a move in flight, reported as in progress. Nothing
here is a transition: the one write is ``--repair``'s unlink of an orphaned reservation, under
the key's lock; a repair interrupted before or after it leaves a reservation that the next submit
of the key takes over (or the next repair removes), or none.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import State, job_lock_name, key_lock_name, key_name
from spool.disk.locks import acquire, held_unless_busy
from spool.moves.submission import job_kept_now, reservation, reserve_key

if TYPE_CHECKING:
    from spool.handle import Handle
    from spool.job import JobFile


class Verdict(enum.Enum):
    BUSY = "busy"  # a lock was held: a submit or a move is in flight
    KEPT = "kept"  # its job exists (in some folder, or as a result)
    GONE = "gone"  # the reservation went away meanwhile
    ORPHAN = "orphan"  # no job in any folder and no result, seen under the key's and the job's locks


@contextmanager
def job_lock_held(sp: Handle, job_id: str) -> Iterator[bool]:
    """Hold the job's lock for the block, without creating it (True: no move of it can be under
    way, or none ever was: no lock file); False while another process holds it (a move in flight)."""
    with held_unless_busy(sp.layout.fd("locks"), job_lock_name(job_id)) as held:
        yield held


def job_kept(sp: Handle, job_id: str) -> Verdict:
    """Whether ``job_id`` exists right now (``submission.job_kept_now``: looked up by id in every
    folder, and if it is not found, again under its lock)."""
    if not is_valid_id(job_id):
        return Verdict.ORPHAN
    kept = job_kept_now(sp, job_id)
    return Verdict.BUSY if kept is None else Verdict.KEPT if kept else Verdict.ORPHAN


def judge_reservation(sp: Handle, name: str, *, remove: bool = False) -> Verdict:
    """Judge ``keys/<name>`` under its key's lock; with ``remove``, unlink it there if orphaned."""
    with held_unless_busy(sp.layout.fd("locks"), key_lock_name(name), create=remove) as held:
        if not held:
            return Verdict.BUSY
        job_id = reservation(sp, name)
        if job_id is None:
            return Verdict.GONE
        verdict = job_kept(sp, job_id)
        if verdict is Verdict.ORPHAN and remove:
            fs.unlink(sp.layout.fd("keys"), name, missing_ok=True)
        return verdict


def check_keys(sp: Handle, files: dict[str, tuple[State, JobFile]]) -> tuple[list[str], list[str]]:
    """``keys/`` against the jobs fsck read: (violations, in progress)."""
    violations: list[str] = []
    in_progress: list[str] = []
    owners: dict[str, str] = {}
    for job_id, (_state, job_file) in sorted(files.items()):
        key = job_file.job.key
        if key in owners:
            violations.append(f"key {key!r}: two jobs, {owners[key]} and {job_id}")
        owners[key] = job_id
        if job_file.job.has_own_key and reservation(sp, key_name(key)) != job_id:
            problem = _unreserved(sp, key, job_id)
            if problem is Verdict.BUSY:
                in_progress.append(f"{job_id}: key {key!r} is being submitted or moved (a lock is held)")
            elif problem is Verdict.ORPHAN:
                violations.append(f"{job_id}: key {key!r} is not reserved for it in keys/")
    reserved = {key_name(job_file.job.key) for _s, job_file in files.values() if job_file.job.has_own_key}
    for name in fs.list_dir(sp.layout.fd("keys")):
        if name in reserved:
            continue
        verdict = judge_reservation(sp, name)
        if verdict is Verdict.BUSY:
            in_progress.append(f"keys/{name}: a submit (or a move of its job) in progress")
        elif verdict is Verdict.ORPHAN:
            violations.append(f"keys/{name}: a reservation without its job (a submit died?)")
    return violations, in_progress


def _unreserved(sp: Handle, key: str, job_id: str) -> Verdict:
    """Is ``job_id`` still a kept job whose key is not reserved for it? ORPHAN: yes (the
    reservation is missing or names another id, under the key's lock); KEPT: it is reserved
    now, or the job is gone (a purge since the listing); BUSY: a lock is held."""
    with held_unless_busy(sp.layout.fd("locks"), key_lock_name(key_name(key))) as held:
        if not held:
            return Verdict.BUSY
        if reservation(sp, key_name(key)) == job_id:
            return Verdict.KEPT
        kept = job_kept(sp, job_id)
        return Verdict.ORPHAN if kept is Verdict.KEPT else (Verdict.BUSY if kept is Verdict.BUSY else Verdict.KEPT)


def repair_keys(sp: Handle, files: dict[str, JobFile]) -> list[str]:
    """Remove orphaned reservations (judged under their locks) and reserve again each kept job's
    key that is not reserved for it. Returns what was done."""
    repaired = []
    wanted = {key_name(f.job.key): f for f in files.values() if f.job.has_own_key}
    for name in fs.list_dir(sp.layout.fd("keys")):
        if name not in wanted and judge_reservation(sp, name, remove=True) is Verdict.ORPHAN:
            repaired.append(f"keys/{name}: a reservation without its job, removed")
    for name, job_file in sorted(wanted.items()):
        if reservation(sp, name) == job_file.id:
            continue
        with acquire(sp.layout.fd("locks"), key_lock_name(name), blocking=True):
            # RACE: a purge since fsck's listing: a gone job gets no reservation back.
            if reservation(sp, name) != job_file.id and job_kept(sp, job_file.id) is Verdict.KEPT:
                reserve_key(sp, job_file.job.key, job_file.id)
                repaired.append(f"keys/{name}: reserved again for {job_file.id}")
    return repaired
