"""A live attempt's view of its lease: the fence (does it still hold the job?) and its heartbeats.

Every step of a live attempt after its claim (a heartbeat's ``lease_status``, ``complete``,
``fail``, ``release``, ``cancel_leased``) first reads leased/<id>.yaml and checks that its lease
is the attempt's. The claim wrote that file itself a moment before, so the worker keeps what it
wrote (``Held``: the exact bytes and the JobFile they encode). Reading the file's bytes and
comparing them is then enough: equal bytes are the same content, so the same lease, and the kept
JobFile is what a parse would give (``job.decode(held.data) == held.job_file``, tested). Only
bytes that differ are parsed, with the safe parser and every check, as anyone else's file is:
after an expiry, a requeue or a new claim the file is no longer the one this attempt wrote.
The two-copies check (``only_in``) runs either way: a crash in another move can leave a second
copy beside identical bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from spool.base.errors import DiskFull, InvalidJob, LeaseLost
from spool.disk.fsio import fs
from spool.job import JobFile
from spool.disk.layout import State, cancel_name, heartbeat_name
from spool.disk.heartbeat import heartbeat_content
from spool.progress import Progress, encode
from spool.base.records import Lease, LeaseStatus
from spool.moves import spares
from spool.moves.recovery import resync
from spool.moves.store import copy_in, decode_job, only_in, read_job_bytes, write_dot_file

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.transitions")  # the name the worker's warnings always had


class Unwritten(Protocol):
    """A claim counted but not yet written (``claiming.Opening``)."""

    def write(self) -> None:
        """Write it, once; then a no-op."""
        ...


@dataclass(frozen=True)
class Held:
    """What a claim wrote to leased/<id>.yaml: its exact bytes and the JobFile they encode.
    ``opening``: a worker's early claim, whose content is written only once its handler was
    sent (``claiming.Opening``; None once the claim wrote it itself)."""

    data: bytes
    job_file: JobFile
    opening: Unwritten | None = None


def current_job(sp: Handle, lease: Lease, held: Held | None) -> JobFile:
    """leased/<id>.yaml as it is now: the kept JobFile when its bytes are the ones the claim
    wrote, else a full parse. FileNotFoundError when absent, InvalidJob if not a job file."""
    data = read_job_bytes(sp, State.LEASED, lease.job_id)
    if held is not None and held.job_file.id == lease.job_id and data == held.data:
        return held.job_file
    return decode_job(State.LEASED, lease.job_id, data)


def lease_status(sp: Handle, lease: Lease, held: Held | None = None) -> LeaseStatus:
    """HELD, LOST (expired, requeued or finished elsewhere) or CANCEL (a cancel request)."""
    try:
        current = current_job(sp, lease, held)
    except (FileNotFoundError, InvalidJob):
        return LeaseStatus.LOST
    if current.attempt != lease.attempt:
        return LeaseStatus.LOST
    if fs.exists(sp.layout.fd(State.LEASED), cancel_name(lease.job_id)):
        return LeaseStatus.CANCEL
    return LeaseStatus.HELD


# The copies that stop a live attempt's move: a more advanced one (a crash inside publish_job
# left done/ or dead/ beside leased/), or one in pending/, where a retry or a release renames to
# (a planted file there is a drop: resync ingests it). waiting/ is never a move's target from
# leased/: a copy there is left to the coordinator's reconcile, which lists every folder.
_BESIDE_LEASED = (State.DONE, State.DEAD, State.PENDING)


def check_fence(sp: Handle, lease: Lease, held: Held | None = None) -> JobFile:
    """The job file if ``lease`` still holds it (caller holds the job's lock), else LeaseLost.
    An unreadable file raises InvalidJob, as a parse of it always has."""
    try:
        job_file = current_job(sp, lease, held)
    except FileNotFoundError:
        raise LeaseLost(f"{lease.job_id}: no longer leased (attempt {lease.attempt} expired or ended)") from None
    current = job_file.lease
    if job_file.attempt != lease.attempt or current is None or current.attempt != lease.attempt:
        raise LeaseLost(f"{lease.job_id}: attempt {lease.attempt} is stale (now attempt {job_file.attempt})")
    if copy_in(sp, lease.job_id, _BESIDE_LEASED):
        resync(sp, lease.job_id)  # a crashed move to done/ or dead/ left this copy behind: it won
        if only_in(sp, lease.job_id, State.LEASED):
            return job_file  # the other copy was a user's (a drop named like this job): ours holds
        raise LeaseLost(f"{lease.job_id}: moved on by a move a crash interrupted; attempt {lease.attempt} dropped")
    return job_file


def heartbeat(sp: Handle, lease: Lease, counter: int, progress: Progress | None = None) -> None:
    """Write the lease's counter beside the job: no lock, no fsync. The coordinator watches it
    change on its own clock; the worker's clock is never read. The file (``.<id>.<attempt>.hb``)
    also names the worker, so the coordinator can check its liveness lock without parsing YAML,
    and carries the handler's newest ``progress`` when there is one. A caller that only has new
    progress passes the counter it wrote last: progress alone is not a beat (the coordinator
    compares the counter's line only)."""
    extra = encode(progress) if progress is not None else b""
    try:
        write_dot_file(
            sp,
            State.LEASED,
            heartbeat_name(lease.job_id, lease.attempt),
            heartbeat_content(counter, lease.worker, extra),
        )
    except OSError as err:
        # A missed beat (a full disk, say) is not fatal: the next one may land; if none does
        # within the term, the lease expires and the worker learns it at lease_status.
        log.warning("heartbeat of %s attempt %d not written: %s", lease.job_id, lease.attempt, err)


def first_beat(sp: Handle, job_id: str, attempt: int, worker: str, *, queued: bool = False) -> None:
    """The new lease's heartbeat file (counter 0 and the worker, as ``heartbeat`` writes it),
    written under the job's lock before the claim's rename, so the coordinator knows the lease's
    attempt and worker without parsing the job file. Not fsync'd: a hint, like every beat.

    A crash after it and before the rename leaves ``.<id>.<attempt>.hb`` beside a job still in
    pending/: harmless, nothing watches a heartbeat without its job file in leased/ and the
    next claim of that attempt overwrites it (a job that never comes back to leased/ leaves it
    to fsck's stray sweep, ``_clear_stray_lease_files``). A crash after the rename and before
    the rewrite leaves the file one attempt behind its heartbeat: the coordinator expires the
    heartbeat's attempt once the claimer's lock is freed, and ``expire`` settles it as the lost
    claim it is. A failed write (a full disk) costs only
    the hint: the coordinator then reads the job file, as for a lease with no beat yet.

    ``queued``: a batch claim's member that waits for the members before it; ``start_queued``
    clears the mark just before its handler starts, and an expiry that still finds it gives the
    try back (``store.queued_beat``).
    """
    name, content = heartbeat_name(job_id, attempt), heartbeat_content(0, worker, queued=queued)
    try:
        if not _placed_spare(sp, name, content):
            write_dot_file(sp, State.LEASED, name, content)
    except (OSError, DiskFull) as err:
        log.warning("claim of %s: its first heartbeat was not written (%s)", job_id, err)


def _placed_spare(sp: Handle, name: str, content: bytes) -> bool:
    """A spare heartbeat file (``spool.moves.spares``) rewritten with ``content`` in tmp/, then
    renamed to ``name`` in leased/: the name appears with its content, as a created file's does.
    False, the spare removed, when there is none or it can't be (swept, planted, a file under the
    name already: a crashed claim's, which ``write_dot_file`` then overwrites as before)."""
    spare = spares.take(sp)
    if spare is None:
        return False
    try:
        write_dot_file(sp, "tmp", spare, content)
        fs.rename_noreplace(sp.layout.fd("tmp"), spare, sp.layout.fd(State.LEASED), name)
    except (OSError, DiskFull):
        spares.remove(sp, spare)
        return False
    return True


def start_queued(sp: Handle, lease: Lease) -> None:
    """A queued member's handler starts now: its heartbeat loses the mark (counter 0 still, so
    the coordinator's watch sees a change and gives the lease a fresh term). Written before the
    child is asked to run: a crash after it counts the try, as for any claim. A failed write
    leaves the mark, so a crash during this attempt gives its try back: the lenient side."""
    heartbeat(sp, lease, 0)


def drop_first_beat(sp: Handle, job_id: str, attempt: int) -> None:
    """Undo ``first_beat`` when the claim did not happen (the job stays where it was)."""
    try:
        fs.unlink(sp.layout.fd(State.LEASED), heartbeat_name(job_id, attempt), missing_ok=True)
    except OSError:
        pass  # a planted directory under the name: left to fsck's stray sweep
