"""Many jobs at once: ``submit_many``, durable on return with one fsync of each folder it touched.

The transition is ``submission.submit``'s, (new) -> PENDING or WAITING, for a list of specs; what
a batch shares is one sync of every file's content and the folder fsyncs (and the ledger
transaction, and the wake-up). Each job file and each key reservation still has its content
durable before its name is made, and each keyed job still makes one job per key: the key is
reserved under its lock, durable before its job is committed, exactly as one submit does it.

The steps, and what an interruption at each leaves (a crash, or an error raised there):

1. Every spec is checked, encoded within ``max_job_bytes`` and given its folder, and the room
   for the whole batch is checked against ``max_pending``; a bad spec refuses the batch with an
   InvalidJob (NotFound for an unknown dependency) naming its index, ``job 17: ...``. Nothing
   is written before all of that passed.
2. Per round (the whole batch, unless its distinct keys outnumber what ``_keys_per_round``
   lets one process hold open): the round's keys are locked in one order, sorted by lock name,
   so two batches that share keys never deadlock (a single submit holds one key lock at a
   time, so it can't close a cycle either). Each key is looked up: a kept job answers for it,
   ``created=False``.
3. Every new file of the round, each job's and each new key's reservation, is written in tmp/
   without an fsync, then one sync makes them all durable: ``fs.syncfs`` (one call for the
   whole filesystem), or where that is missing an fsync of each. Crash point
   ``batch-after-sync``. A failed sync is final (DurabilityError, nothing retried): the round
   fails with nothing told and nothing reserved. A crash (or power cut) up to here leaves only
   staged files in tmp/, whole or torn, which no one reads and the coordinator's tmp/ sweep
   removes.
4. Each new key's reservation is renamed into keys/ (taking over a dangling one), then keys/ is
   fsync'd once. Crash point ``batch-after-keys``. A crash here leaves reservations without
   jobs: nothing was told, nothing is a job; the next submit of a key takes its reservation
   over, ``fsck --repair`` removes the rest.
   Then each new job file is renamed without replacing from tmp/ into pending/ (or waiting/):
   that rename is the member's commit point. Crash point ``batch-after-commit``
   after each rename. A crash between two renames leaves the first members committed, the others
   not; nobody was told any id. After a process crash the committed ones are jobs like any other
   and run. Their names are not yet durable, so a power cut may keep any subset of them (their
   content is durable since step 3, so each that survives is whole).
   Either way, a resubmit of the batch by key finds each member that survived and makes the
   others; an unkeyed member resubmitted is a second job, as with ``submit`` (a caller that
   must not double a job gives it a key).
5. One fsync of each folder that gained a name (pending/, waiting/), then the key locks are
   released: while they are held, no other submitter of these keys can be told an id whose
   file is not durable yet. From here the round's jobs survive a power cut.
6. After the last round, crash point ``batch-after-submit``: every job is durable, the ledger
   does not know them yet; the coordinator's reconcile adds the rows (as after a submit's crash
   point ``after-submit``). Then the ledger rows in one transaction, one wake-up, and only then
   does ``submit_many`` return the ids, in input order.

Nobody has to finish an interrupted batch: each rename is a whole commit, and the leftovers are
the ones a crashed single submit leaves, cleared by the same hands. An error raised mid-batch
(DiskFull, DurabilityError) reaches the caller, who was told nothing; the failing round's
reservations whose job never made it into a folder are removed, and the jobs of rounds already
finished stay (durable, found by key, rows added by the reconcile).
"""

from __future__ import annotations

import resource
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool.base import crash
from spool.base.errors import DiskFull, InvalidJob, LedgerError, NotFound, TryLater
from spool.disk.fsio import fs
from spool.disk.ids import new_id
from spool.job import JobFile, is_ready
from spool.disk.layout import State, job_name, key_name
from spool.base.lazylog import lazy_logger
from spool.disk.locks import Lock
from spool.moves.store import stage, sync_staged, unstage, wake
from spool.moves.submission import (
    Submitted,
    check_room,
    encode_within_limit,
    initial_state,
    job_of_spec,
    lock_key,
    lookup_key,
    move_reservation,
    reservation_bytes,
    unreserve_if_jobless,
)
from spool.base.timetext import now_text

if TYPE_CHECKING:
    from spool.handle import Handle

log = lazy_logger("spool.batch")

# Descriptors a round may hold as key locks: at most half the process's limit, at least this many.
MIN_KEYS_PER_ROUND = 64


@dataclass(frozen=True)
class _Member:
    """One spec of the batch that becomes a job unless its key is kept: the first of its key."""

    index: int
    job_file: JobFile
    data: bytes
    state: State

    @property
    def key(self) -> str | None:
        job = self.job_file.job
        return job.key if job.has_own_key else None


def submit_many(sp: Handle, specs: Iterable[Mapping[str, Any]]) -> list[Submitted]:
    """(new) x n -> PENDING, or WAITING while some ``depends_on`` is not done; one per spec.

    Commit point: each member's rename tmp/X -> pending/<id>.yaml (or waiting/); then one fsync
    of each folder the batch touched, and only then are the ids returned (in input order). A key
    kept before, or repeated in the batch, answers with its one job's id and ``created=False``.
    What a crash before, between and after the renames leaves: the module docstring.
    """
    if isinstance(specs, Mapping):
        raise InvalidJob("submit_many takes a list of job specs, got one spec (a mapping); nothing was written")
    members, same_as, count = _prepare(sp, specs)
    _check_batch_room(sp, members)
    told: dict[int, Submitted] = {}
    committed: list[_Member] = []
    for round_members in _rounds(members, _keys_per_round()):
        round_told, round_committed = _commit_round(sp, round_members)
        told.update(round_told)
        committed += round_committed
    crash.point("batch-after-submit")
    _index_batch(sp, committed)
    if any(member.state is State.PENDING for member in committed):
        wake(sp)
    log.info("submit_many: %d specs, %d new jobs", count, len(committed))
    return [
        Submitted(told[same_as[index]].id, created=False) if index in same_as else told[index] for index in range(count)
    ]


def _prepare(sp: Handle, specs: Iterable[Mapping[str, Any]]) -> tuple[list[_Member], dict[int, int], int]:
    """Check and encode every spec before anything is written: (the members, in input order;
    index of a repeated key -> index of its first spec; how many specs)."""
    submitted_at = now_text(sp.clock)
    members: list[_Member] = []
    first_of_key: dict[str, int] = {}
    same_as: dict[int, int] = {}
    runner_parts: dict[str, bytes] = {}  # one encode of the runner's fields for the batch
    dependencies: dict[str, State | None] = {}  # each dependency's state, looked up once
    count = 0
    for index, spec in enumerate(specs):
        count += 1
        where = f"job {index}"
        job = job_of_spec(sp, spec, job_id=new_id(sp.clock), where=where)
        job_file = JobFile(job=job, submitted_at=submitted_at)
        try:
            data = encode_within_limit(sp, job_file, runner_parts)
            state = initial_state(sp, job, dependencies)
        except InvalidJob as err:
            raise InvalidJob(f"{where}: {err}") from None
        except NotFound as err:
            raise NotFound(f"{where}: {err}; nothing was written") from None
        if job.has_own_key:
            if job.key in first_of_key:
                same_as[index] = first_of_key[job.key]
                continue
            first_of_key[job.key] = index
        members.append(_Member(index, job_file, data, state))
    return members, same_as, count


def _check_batch_room(sp: Handle, members: list[_Member]) -> None:
    """Backpressure for the whole batch, before anything is written. Every member counts, unless
    that would refuse the batch: then only those whose key has no job yet (a retry of a batch
    already accepted must find its jobs, as a submit of a kept key does in a full spool). The key
    lookups here are unlocked, a count, not a decision: the round decides under the key locks."""
    if not members:
        return
    try:
        check_room(sp, len(members))
    except TryLater:
        adding = sum(1 for member in members if member.key is None or lookup_key(sp, member.key) is None)
        if adding:
            check_room(sp, adding)


def _keys_per_round() -> int:
    """How many key locks one round may hold open (one descriptor each): half the soft limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 2**20 if soft == resource.RLIM_INFINITY else max(MIN_KEYS_PER_ROUND, soft // 2)


def _rounds(members: list[_Member], keys_per_round: int) -> Iterable[list[_Member]]:
    """The members in input order, cut so that no round holds more than ``keys_per_round`` keys."""
    current: list[_Member] = []
    keys = 0
    for member in members:
        if member.key is not None:
            if keys == keys_per_round:
                yield current
                current, keys = [], 0
            keys += 1
        current.append(member)
    if current:
        yield current


def _commit_round(sp: Handle, members: list[_Member]) -> tuple[dict[int, Submitted], list[_Member]]:
    """Steps 2-5 of the module docstring for one round: (what each member is told, the new jobs)."""
    told: dict[int, Submitted] = {}
    locks: list[Lock] = []
    new: list[_Member] = []
    try:
        for key in sorted((m.key for m in members if m.key is not None), key=key_name):
            locks.append(lock_key(sp, key))
        for member in members:
            existing = lookup_key(sp, member.key) if member.key is not None else None
            if existing is not None:
                told[member.index] = Submitted(existing, created=False)
            else:
                new.append(member)
        if new:
            _write_round(sp, new)
    finally:
        for lock in locks:
            lock.release()
    for member in new:
        told[member.index] = Submitted(member.job_file.id, created=True)
    return told, new


def _write_round(sp: Handle, new: list[_Member]) -> None:
    """Steps 3-5 for one round: stage its files unsynced, one sync for all of them, reserve the new
    keys (one fsync of keys/), commit each job, one fsync of each folder. Caller holds every new
    key's lock."""
    reserving = [member for member in new if member.key is not None]
    tmp_fd = sp.layout.fd("tmp")
    left: dict[str, None] = {}  # staged names still in tmp/, removed on the way out
    try:
        job_files = [_stage_unsynced(sp, member.data, left) for member in new]
        reservations = [_stage_unsynced(sp, reservation_bytes(member.job_file.id), left) for member in reserving]
        sync_staged(sp, list(left))
        crash.point("batch-after-sync")
        for member, staged in zip(reserving, reservations):
            move_reservation(sp, member.job_file.job.key, staged)
            del left[staged]
        if reserving:
            fs.fsync_dir(sp.layout.fd("keys"))
        crash.point("batch-after-keys")
        for member, staged in zip(new, job_files):
            fs.rename_noreplace(tmp_fd, staged, sp.layout.fd(member.state), job_name(member.job_file.id))
            del left[staged]
            crash.point("batch-after-commit")
        for state in sorted({member.state for member in new}, key=lambda state: state.value):
            fs.fsync_dir(sp.layout.fd(state))
    except BaseException:
        for member in reserving:
            unreserve_if_jobless(sp, member.job_file.job)
        raise
    finally:
        for staged in left:
            unstage(sp, staged)


def _stage_unsynced(sp: Handle, data: bytes, left: dict[str, None]) -> str:
    """Write ``data`` to a new name in tmp/, no fsync (the round syncs them all at once)."""
    staged = stage(sp, data, sync=False)
    left[staged] = None
    return staged


def _index_batch(sp: Handle, committed: list[_Member]) -> None:
    """The ledger rows of the committed jobs, in one transaction. As for one submit: the jobs are
    accepted once durable, so a ledger that can't take the rows must not fail the batch (a
    caller would retry into second jobs); the coordinator's reconcile adds them."""
    if not committed:
        return
    now = sp.clock.wall()
    entries = [
        (member.job_file, member.state, member.state is State.PENDING and is_ready(member.job_file, now))
        for member in committed
    ]
    try:
        sp.ledger.record_many(entries, event="submit")
    except (LedgerError, DiskFull) as err:
        log.warning(
            "submit_many: %d jobs accepted, but the ledger did not record them (%s); the coordinator's reconcile will",
            len(committed),
            err,
        )
