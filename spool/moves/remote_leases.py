"""Leases held over the API: the fence a remote worker names, and fencing off a whole worker.

A remote worker's lease is an ordinary lease (the claim wrote ``leased/<id>.yaml`` with the token's
name as holder); the server keeps nothing about it in memory. The fence it hands out is
``<attempt>-<first 16 hex digits of sha256(the leased file's bytes)>``: the claim wrote those bytes
and nothing rewrites a leased file while its lease holds (heartbeats, progress and cancel requests
are dot-files beside it), so a server restarted in between still recognises the fence from the
disk alone, and any move of the job (an expiry, a requeue, a new claim) changes the bytes and
makes the old fence stale. A fence that matches gives back the ``Held`` the claim had, so the
transitions' own fence check compares the same bytes under the job's lock.

``fence_worker`` ends every lease one worker holds, at once (a revoked token): each goes through
``transitions.expire``, as if its term had run out, so the job retries (the try was counted at
pickup) or ends dead after its last try, and the worker's later complete or fail is refused.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from spool.base.errors import InvalidJob
from spool.moves.fence import Held
from spool.disk.fsio import fs
from spool.disk.layout import State, heartbeat_name, is_ignored_name, job_id_of, parse_heartbeat_name
from spool.disk.heartbeat import parse_heartbeat
from spool.moves.store import decode_job, read_job, read_job_bytes
from spool.moves.transitions import expire

if TYPE_CHECKING:
    from spool.handle import Handle

FENCE_HASH_DIGITS = 16
FENCE_WAIT_SECONDS = 5.0  # how long fence_worker retries a lease whose lock a move holds
_RETRY_SECONDS = 0.01


def fence_of(attempt: int, data: bytes) -> str:
    """The fence of the lease whose claim wrote ``data`` for ``attempt``."""
    return f"{attempt}-{hashlib.sha256(data).hexdigest()[:FENCE_HASH_DIGITS]}"


def held_by_fence(sp: Handle, job_id: str, fence: str) -> Held | None:
    """The lease ``fence`` names, as the claim held it, if it still holds ``job_id``; else None
    (the job is no longer leased, or leased again under another attempt or other bytes)."""
    try:
        data = read_job_bytes(sp, State.LEASED, job_id)
    except FileNotFoundError:
        return None
    attempt_text = fence.partition("-")[0]
    if not attempt_text.isascii() or not attempt_text.isdigit() or fence != fence_of(int(attempt_text), data):
        return None
    try:
        job_file = decode_job(State.LEASED, job_id, data)
    except InvalidJob:
        return None
    lease = job_file.lease
    if lease is None or lease.attempt != job_file.attempt or job_file.attempt != int(attempt_text):
        return None
    return Held(data, job_file)


def leases_of(sp: Handle, worker: str) -> list[tuple[str, int]]:
    """(job id, attempt) of every lease ``worker`` holds, or is claiming right now.

    A lease's file names its holder; a claim in flight has written its heartbeat (which names the
    worker) before its rename, so a heartbeat one attempt ahead of its job file counts too."""
    leased = sp.layout.fd(State.LEASED)
    found: dict[str, int] = {}
    beats: list[tuple[str, int]] = []
    for name in fs.list_dir(leased):
        beat = parse_heartbeat_name(name)
        if beat is not None:
            beats.append(beat)
        elif not is_ignored_name(name):
            job_id = job_id_of(name)
            try:
                job_file = read_job(sp, State.LEASED, job_id)
            except (FileNotFoundError, InvalidJob):
                continue
            lease = job_file.lease
            # A lease for another attempt than the file's is no lease (a planted or hand-edited
            # file): ``expire`` would refuse it, and the coordinator's first look settles it.
            if lease is not None and lease.worker == worker and lease.attempt == job_file.attempt:
                found[job_id] = lease.attempt
    for job_id, attempt in beats:
        if job_id in found:
            continue
        holder = parse_heartbeat(_read_beat(leased, heartbeat_name(job_id, attempt)))
        if holder is not None and holder[1] == worker and _claiming(sp, job_id, attempt):
            found[job_id] = attempt
    return sorted(found.items())


def _read_beat(leased_fd: int, name: str) -> bytes | None:
    try:
        return fs.read_file(leased_fd, name, 256)
    except (OSError, InvalidJob):  # gone, or planted (a directory): no holder to learn from it
        return None


def _claiming(sp: Handle, job_id: str, attempt: int) -> bool:
    """A claim of ``attempt`` is in flight (or died) after its rename: the file is one behind."""
    try:
        return read_job(sp, State.LEASED, job_id).attempt == attempt - 1
    except (FileNotFoundError, InvalidJob):
        return False


def fence_worker(
    sp: Handle, worker: str, *, wait_seconds: float = FENCE_WAIT_SECONDS, why: str = "its token was revoked"
) -> list[str]:
    """Expire every lease ``worker`` holds now; the ids expired (``why``: for the job's error,
    e.g. a dispatcher's engine that reported the runner's engine job lost).

    A lease whose job lock a move holds (its own complete, a claim in flight) is tried again until
    it is gone or ``wait_seconds`` pass; one that ended meanwhile (completed first: the first result
    wins) simply drops out of the list."""
    expired: list[str] = []
    until = sp.clock.monotonic() + wait_seconds
    while True:
        busy = False
        for job_id, attempt in leases_of(sp, worker):
            if expire(sp, job_id, attempt, f"worker {worker} was fenced ({why})") is None:
                busy = True
            else:
                expired.append(job_id)
        if not busy or sp.clock.monotonic() >= until:
            return expired
        sp.clock.sleep(_RETRY_SECONDS)
