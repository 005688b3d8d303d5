"""How jobs are submitted: ``submit`` (CLI, API, Python), and the keys that make it idempotent.

A file dropped in pending/ comes in through ``spool.moves.ingest``, which shares the spec defaults,
the initial state and the keys with ``submit``.

Keys make submits idempotent. A key the user chose is reserved in ``keys/<sha256(key)>``
(holding the job id) under the key's lock, and the reservation is durable *before* the job
file is committed, so after any crash a resubmit of the key finds either the job or a
reservation without a job, which it takes over. A key left to default is the job's own id and
needs no reservation: nobody can know it before the id is printed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool.base import crash
from spool.base.errors import DiskFull, InvalidJob, LedgerError, NotFound, TryLater, Withdrawn
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id, new_id
from spool.job import SCHEDULE_KEY_PREFIX, Job, JobFile, encode_measured, is_ready
from spool.disk.layout import State, job_lock_name, key_lock_name, key_name
from spool.base.lazylog import lazy_logger
from spool.disk.locks import Lock, acquire, held_unless_busy
from spool.moves.store import create_job, folders_of, has_result, read_job, stage, state_of, unstage, wake
from spool.base.timetext import now_text
from spool.yaml.safe import dump_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

log = lazy_logger("spool.submission")


@dataclass(frozen=True)
class Submitted:
    id: str
    created: bool  # False: the key was seen before and ``id`` is the existing job's


def submit(
    sp: Handle,
    spec: Mapping[str, Any],
    *,
    where: str = "submit",
    refuse_when_full: bool = True,
    firing: bool = False,
    unless: Callable[[], bool] | None = None,
) -> Submitted:
    """(new) -> PENDING, or WAITING while some ``depends_on`` is not done.

    Commit point: rename tmp/X -> pending/<id>.yaml (or waiting/), after which the folder is
    fsync'd and only then is the id returned. Crash before the commit: at most a key
    reservation without a job, which the next submit of that key takes over (and fsck --repair
    removes). Crash after it but before the fsync: the caller was told nothing; the job may or
    may not survive a power cut, and a resubmit with the key finds it if it did.
    ``refuse_when_full=False``: a schedule's firing, which backpressure never refuses.
    ``firing=True``: a schedule's own submit, the only one that may use a ``schedule:`` key.
    ``unless``: asked under the key's lock once the key has no job; True raises ``Withdrawn``
    and writes nothing (``spool.schedule.folder.fire``: the slot was recorded fired meanwhile).
    """
    job = job_of_spec(sp, spec, job_id=new_id(sp.clock), where=where, firing=firing)
    job_file = JobFile(job=job, submitted_at=now_text(sp.clock))
    data = encode_within_limit(sp, job_file)
    state = initial_state(sp, job)
    key_lock = lock_key(sp, job.key) if job.has_own_key else None
    try:
        if key_lock is not None:
            existing = lookup_key(sp, job.key)
            if existing is not None:
                return Submitted(existing, created=False)
            if unless is not None and unless():
                raise Withdrawn(f"{where}: {job.key}: not submitted: it is recorded as made already")
        if refuse_when_full:
            check_room(sp)
        crash.point("after-key-check")
        if key_lock is not None:
            reserve_key(sp, job.key, job.id)
            crash.point("after-key")
        create_job(sp, state, job_file, data)
        crash.point("after-commit")
        fs.fsync_dir(sp.layout.fd(state))
    except BaseException:
        if key_lock is not None:
            unreserve_if_jobless(sp, job)
        raise
    finally:
        if key_lock is not None:
            key_lock.release()
    crash.point("after-submit")
    ready = state is State.PENDING and is_ready(job_file, sp.clock.wall())
    _index_submit(sp, job_file, state, ready)
    if state is State.PENDING:
        wake(sp)  # a delayed job too: the coordinator sets its timer from the row just recorded
    log.info("submit %s task=%s key=%s -> %s", job.id, job.task, job.key, state.value)
    return Submitted(job.id, created=True)


def job_of_spec(sp: Handle, spec: object, *, job_id: str, where: str, firing: bool = False) -> Job:
    """A user's spec as a job under this spool's defaults (max_tries, default_timeout_seconds).

    Keys starting ``schedule:`` are the schedules' (a slot's key is its at-most-once fence), so
    every way in but a schedule's own firing (``firing``) refuses them: a CLI or API submit, a
    batch, a drop (set aside as invalid)."""
    job = Job.from_spec(
        spec,
        job_id=job_id,
        default_max_tries=sp.settings.max_tries,
        default_timeout=sp.settings.default_timeout_seconds,
        where=where,
    )
    if not firing and job.key.startswith(SCHEDULE_KEY_PREFIX):
        raise InvalidJob(
            f"{where}: field 'key': keys starting {SCHEDULE_KEY_PREFIX!r} are reserved for schedules' firings "
            f"(use `spool schedule run NAME` to fire one now); choose another key"
        )
    return job


def encode_within_limit(sp: Handle, job_file: JobFile, runner_parts: dict[str, bytes] | None = None) -> bytes:
    """The new job file's bytes, or InvalidJob if its spec is over ``max_job_bytes``.

    Every way in (CLI, Python API, HTTP API) comes through ``submit``, so none can skip the
    check, and it comes before anything is written: a job the coordinator would later find over
    the limit must never be accepted. The limit is on the spec as the file holds it (YAML); the
    runner's own fields are bounded apart (store.RUNNER_FILE_MAX_BYTES).

    The same bytes as ``job.encode``, in two dumps: the head and the spec together (the spec is
    measured exactly only when the two are over the limit), then the runner's part, which
    ``runner_parts`` keeps by value: a batch's members, submitted at one moment with no attempt
    yet, all share one.
    """
    limit = sp.settings.max_job_bytes
    floor = yaml_size_floor(job_file.job.args)  # far over: refuse without the slow encode
    if floor > limit:
        raise InvalidJob(f"job is at least {floor:,} bytes as YAML, over max_job_bytes {limit:,}; nothing was written")
    front = job_file.job.front_yaml  # kept on the Job: a claim or done of it in this process reuses it
    if len(front) <= limit:  # the spec is part of it: within the limit too
        return front + _runner_part(job_file.runner_part(), runner_parts)
    data, spec_bytes = encode_measured(job_file)
    if spec_bytes > limit:
        raise InvalidJob(f"job is {spec_bytes:,} bytes as YAML, over max_job_bytes {limit:,}; nothing was written")
    return data


def yaml_size_floor(value: Any) -> int:
    """A lower bound on plain data's size as YAML, without encoding it (encoding 20 MB takes 15 s).

    Every string and key is written whole, each character as at least one byte, and every item
    or entry takes at least one more; so a spec this says is over a limit is over it.
    """
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(len(key) + 1 + yaml_size_floor(item) for key, item in value.items())
    if isinstance(value, list):
        return sum(1 + yaml_size_floor(item) for item in value)
    return 1


def _runner_part(runner: dict[str, Any], known: dict[str, bytes] | None) -> bytes:
    """The runner's fields as YAML, from ``known`` when an equal mapping was encoded before."""
    if known is None:
        return dump_yaml(runner)
    text = repr(runner)  # plain values (str, int, None, lists of them): equal mappings, equal text
    data = known.get(text)
    if data is None:
        data = known[text] = dump_yaml(runner)
    return data


def _index_submit(sp: Handle, job_file: JobFile, state: State, ready: bool) -> None:
    """The ledger row of a committed job. The job is accepted once its file is durable: a ledger
    that can't take the row (a full disk, a read-only or broken ledger) must not turn that into
    a failure the caller would retry into a second job. The coordinator's reconcile adds the row."""
    try:
        sp.ledger.record(job_file, state, ready=ready, event="submit")
    except (LedgerError, DiskFull) as err:
        log.warning(
            "submit %s: accepted, but the ledger did not record it (%s); the coordinator's reconcile will",
            job_file.id,
            err,
        )


def initial_state(sp: Handle, job: Job, known: dict[str, State | None] | None = None) -> State:
    """PENDING, or WAITING while some dependency is not done; NotFound for one that is no job.

    ``known``: the dependencies' states already looked up (a batch looks each up once: many
    members often wait on one parent). A dependency that finishes after the look-up is no
    different from one that finishes just after a submit: the coordinator promotes the job."""
    waiting = False
    for dep in job.depends_on:
        if known is None:
            dep_state = state_of(sp, dep)
        elif dep in known:
            dep_state = known[dep]
        else:
            dep_state = known[dep] = state_of(sp, dep)
        if dep_state is None:
            raise NotFound(f"depends_on: no job {dep}")
        waiting = waiting or dep_state is not State.DONE
    return State.WAITING if waiting else State.PENDING


def check_room(sp: Handle, adding: int = 1) -> None:
    """Backpressure: ready jobs plus drops the coordinator last counted, plus the ``adding`` new
    jobs, must stay within max_pending."""
    ready, drops = sp.ledger.backlog()
    if ready + drops + adding > sp.settings.max_pending:
        what = "" if adding == 1 else f", and this batch would add {adding}"
        raise TryLater(
            f"spool is full: {ready + drops} ready jobs (max_pending {sp.settings.max_pending}){what}; "
            "nothing was written, try again later"
        )


# -- keys -------------------------------------------------------------------------------------


def lock_key(sp: Handle, key: str) -> Lock:
    lock = acquire(sp.layout.fd("locks"), key_lock_name(key_name(key)), blocking=True)
    assert lock is not None
    return lock


def lookup_key(sp: Handle, key: str) -> str | None:
    """The id of the kept job reserved under ``key``, or None (no reservation, or a dangling one).

    A job whose key was left to default has its id as its key and no reservation: ``--key ID``
    finds it too, or a second job would carry the same key (and the ledger refuse it).
    """
    job_id = reservation(sp, key_name(key))
    if job_id is not None and is_valid_id(job_id) and job_kept_now(sp, job_id) is not False:
        return job_id
    folders = folders_of(sp, key) if is_valid_id(key) else []
    if folders:
        try:
            if read_job(sp, folders[0], key).job.key == key:
                return key
        except (FileNotFoundError, InvalidJob):
            pass
    return None


def job_kept_now(sp: Handle, job_id: str) -> bool | None:
    """Whether ``job_id`` exists (a folder holds it, or its result does): looked up by id, and if
    it is found nowhere, again under its lock; None while another process holds that lock (a
    move, or a purge, of it is under way). RACE: one look stats the folders one after another,
    so a job moving backwards in that order (leased/ -> pending/ by an expiry, a failure or a
    release; waiting/ -> pending/) slips between two stats and looks gone (found by the model,
    models/README.md); no move of it runs while we hold its lock. No lock file: nobody can be
    moving it. Never blocks: a submit holds the key's lock here, and a purge takes the job's lock,
    then the key's. Shared by the submit's key lookup and fsck's judgement of keys/."""
    if folders_of(sp, job_id) or has_result(sp, job_id):
        return True
    with held_unless_busy(sp.layout.fd("locks"), job_lock_name(job_id)) as held:
        if not held:
            return None
        return bool(folders_of(sp, job_id)) or has_result(sp, job_id)


def reservation(sp: Handle, key_hash: str) -> str | None:
    """What ``keys/<key_hash>`` holds (a job id, unchecked), or None when there is none."""
    try:
        return fs.read_file(sp.layout.fd("keys"), key_hash, 256).decode("ascii", errors="replace").strip()
    except (FileNotFoundError, InvalidJob):
        return None


def reserve_key(sp: Handle, key: str, job_id: str) -> None:
    """keys/<sha> -> id, durable before the job is committed. Caller holds the key's lock."""
    place_reservation(sp, key, job_id)
    fs.fsync_dir(sp.layout.fd("keys"))


def place_reservation(sp: Handle, key: str, job_id: str) -> None:
    """keys/<sha> -> id with its content fsync'd, its name not yet: the caller fsyncs keys/ before
    it commits the job. Caller holds the key's lock."""
    staged = stage(sp, reservation_bytes(job_id), sync=True)
    try:
        move_reservation(sp, key, staged)
    except BaseException:
        unstage(sp, staged)
        raise


def reservation_bytes(job_id: str) -> bytes:
    """What a reservation file holds: the job id, on one line."""
    return job_id.encode() + b"\n"


def move_reservation(sp: Handle, key: str, staged: str) -> None:
    """Rename tmp/``staged`` (a reservation whose content is durable already) to keys/<sha>; the
    caller fsyncs keys/ before it commits the job. Caller holds the key's lock."""
    keys_fd = sp.layout.fd("keys")
    try:
        fs.rename_noreplace(sp.layout.fd("tmp"), staged, keys_fd, key_name(key))
    except FileExistsError:
        # A dangling reservation (its submitter died, or its job was purged): take it over.
        fs.rename_replace(sp.layout.fd("tmp"), staged, keys_fd, key_name(key))


def unreserve_if_jobless(sp: Handle, job: Job) -> None:
    """After a failed submit, drop our reservation unless our job made it into a folder."""
    if folders_of(sp, job.id):
        return
    try:
        if reservation(sp, key_name(job.key)) == job.id:
            fs.unlink(sp.layout.fd("keys"), key_name(job.key), missing_ok=True)
    except OSError:
        pass  # we are already failing with the error that brought us here


def remove_key(sp: Handle, key: str, job_id: str) -> None:
    """Forget a purged job's reservation, if it is still that job's."""
    with lock_key(sp, key) as lock:
        if reservation(sp, key_name(key)) == job_id:
            fs.unlink(sp.layout.fd("keys"), key_name(key), missing_ok=True)
            lock.remove(sp.layout.fd("locks"), key_lock_name(key_name(key)))  # a free key keeps no lock file
