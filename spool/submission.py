"""How jobs enter the spool: ``submit`` (CLI, API, Python) and ``ingest`` (a file dropped in pending/).

Keys make submits idempotent. A key the user chose is reserved in ``keys/<sha256(key)>``
(holding the job id) under the key's lock, and the reservation is durable *before* the job
file is committed, so after any crash a resubmit of the key finds either the job or a
reservation without a job, which it takes over. A key left to default is the job's own id and
needs no reservation: nobody can know it before the id is printed.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool import crash
from spool.errors import DiskFull, InvalidJob, LedgerError, NotFound, TryLater
from spool.fsio import fs
from spool.ids import is_valid_id, new_id
from spool.job import Job, JobFile, decode, encode, encode_measured, is_ready, now_text, yaml_size_floor
from spool.layout import State, drop_note_name, invalid_folder_name, job_name, key_lock_name, key_name
from spool.locks import Lock, acquire
from spool.store import (
    FILE_SLACK_BYTES,
    RUNNER_FILE_MAX_BYTES,
    create_job,
    folders_of,
    has_result,
    read_job,
    rewrite_job,
    stage,
    state_of,
    unstage,
    wake,
)
from spool.yamlsafe import load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.submission")


@dataclass(frozen=True)
class Submitted:
    id: str
    created: bool  # False: the key was seen before and ``id`` is the existing job's


def submit(sp: Handle, spec: Mapping[str, Any], *, where: str = "submit") -> Submitted:
    """(new) -> PENDING, or WAITING while some ``depends_on`` is not done.

    Commit point: rename tmp/X -> pending/<id>.yaml (or waiting/), after which the folder is
    fsync'd and only then is the id returned. Crash before the commit: at most a key
    reservation without a job, which the next submit of that key takes over (and fsck --repair
    removes). Crash after it but before the fsync: the caller was told nothing; the job may or
    may not survive a power cut, and a resubmit with the key finds it if it did.
    """
    job = job_of_spec(sp, spec, job_id=new_id(sp.clock), where=where)
    job_file = JobFile(job=job, submitted_at=now_text(sp.clock))
    data = _encode_within_limit(sp, job_file)
    state = _initial_state(sp, job)
    key_lock = _lock_key(sp, job.key) if job.has_own_key else None
    try:
        if key_lock is not None:
            existing = lookup_key(sp, job.key)
            if existing is not None:
                return Submitted(existing, created=False)
        _check_room(sp)
        crash.point("after-key-check")
        if key_lock is not None:
            reserve_key(sp, job.key, job.id)
            crash.point("after-key")
        create_job(sp, state, job_file, data)
        crash.point("after-commit")
        fs.fsync_dir(sp.layout.fd(state))
    except BaseException:
        if key_lock is not None:
            _unreserve_if_jobless(sp, job)
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


def job_of_spec(sp: Handle, spec: object, *, job_id: str, where: str) -> Job:
    """A user's spec as a job under this spool's defaults (max_tries, default_timeout_seconds)."""
    return Job.from_spec(
        spec,
        job_id=job_id,
        default_max_tries=sp.settings.max_tries,
        default_timeout=sp.settings.default_timeout_seconds,
        where=where,
    )


def _encode_within_limit(sp: Handle, job_file: JobFile) -> bytes:
    """The new job file's bytes, or InvalidJob if its spec is over ``max_job_bytes``.

    Every way in (CLI, Python API, HTTP API) comes through ``submit``, so none can skip the
    check, and it comes before anything is written: a job the coordinator would later find over
    the limit must never be accepted. The limit is on the spec as the file holds it (YAML); the
    runner's own fields are bounded apart (store.RUNNER_FILE_MAX_BYTES).
    """
    limit = sp.settings.max_job_bytes
    floor = yaml_size_floor(job_file.job.args)  # far over: refuse without the slow encode
    if floor > limit:
        raise InvalidJob(f"job is at least {floor:,} bytes as YAML, over max_job_bytes {limit:,}; nothing was written")
    data, spec_bytes = encode_measured(job_file)
    if spec_bytes > limit:
        raise InvalidJob(f"job is {spec_bytes:,} bytes as YAML, over max_job_bytes {limit:,}; nothing was written")
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


def _initial_state(sp: Handle, job: Job) -> State:
    waiting = False
    for dep in job.depends_on:
        dep_state = state_of(sp, dep)
        if dep_state is None:
            raise NotFound(f"depends_on: no job {dep}")
        waiting = waiting or dep_state is not State.DONE
    return State.WAITING if waiting else State.PENDING


def _check_room(sp: Handle) -> None:
    """Backpressure: ready jobs plus drops the coordinator last counted, against max_pending."""
    drops = int(sp.ledger.meta("drops") or 0)
    ready = sp.ledger.ready_pending_count()
    if ready + drops >= sp.settings.max_pending:
        raise TryLater(
            f"spool is full: {ready + drops} ready jobs (max_pending {sp.settings.max_pending}); "
            "nothing was written, try again later"
        )


# -- keys -------------------------------------------------------------------------------------


def _lock_key(sp: Handle, key: str) -> Lock:
    lock = acquire(sp.layout.fd("locks"), key_lock_name(key_name(key)), blocking=True)
    assert lock is not None
    return lock


def lookup_key(sp: Handle, key: str) -> str | None:
    """The id of the kept job reserved under ``key``, or None (no reservation, or a dangling one).

    A job whose key was left to default has its id as its key and no reservation: ``--key ID``
    finds it too, or a second job would carry the same key (and the ledger refuse it).
    """
    job_id = reservation(sp, key_name(key))
    if job_id is not None and is_valid_id(job_id) and (folders_of(sp, job_id) or has_result(sp, job_id)):
        return job_id
    folders = folders_of(sp, key) if is_valid_id(key) else []
    if folders:
        try:
            if read_job(sp, folders[0], key).job.key == key:
                return key
        except (FileNotFoundError, InvalidJob):
            pass
    return None


def reservation(sp: Handle, key_hash: str) -> str | None:
    """What ``keys/<key_hash>`` holds (a job id, unchecked), or None when there is none."""
    try:
        return fs.read_file(sp.layout.fd("keys"), key_hash, 256).decode("ascii", errors="replace").strip()
    except (FileNotFoundError, InvalidJob):
        return None


def reserve_key(sp: Handle, key: str, job_id: str) -> None:
    """keys/<sha> -> id, durable before the job is committed. Caller holds the key's lock."""
    keys_fd = sp.layout.fd("keys")
    staged = stage(sp, job_id.encode() + b"\n", sync=True)
    try:
        try:
            fs.link(sp.layout.fd("tmp"), staged, keys_fd, key_name(key))
        except FileExistsError:
            # A dangling reservation (its submitter died, or its job was purged): take it over.
            fs.rename_replace(sp.layout.fd("tmp"), staged, keys_fd, key_name(key))
    finally:
        unstage(sp, staged)
    fs.fsync_dir(keys_fd)


def _unreserve_if_jobless(sp: Handle, job: Job) -> None:
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
    with _lock_key(sp, key):
        if reservation(sp, key_name(key)) == job_id:
            fs.unlink(sp.layout.fd("keys"), key_name(key), missing_ok=True)


# -- ingest -----------------------------------------------------------------------------------


def ingest(sp: Handle, name: str) -> str | None:
    """pending/<drop> -> PENDING or WAITING as <new id>.yaml, or -> DEAD (invalid).

    Commit point: the rename of the dropped file itself to its new name, so a crash can never
    ingest one drop twice. Crash after it: the new name holds the user's text; ``finish_ingest``
    (whoever reads it next: the coordinator's reconcile) validates and rewrites it. A drop
    whose key is already kept is removed and logged. Returns the new (or existing) id.
    """
    pending = sp.layout.fd(State.PENDING)
    job_id = new_id(sp.clock)
    shown = printable(name)  # for the file, the ledger and logs: a name need not be UTF-8
    try:
        # RACE: the user may still be writing the drop in place; its close wakes us again.
        data = fs.read_file(pending, name, sp.settings.max_job_bytes, single_link=True, settled=True)
        spec = load_yaml(data, max_bytes=sp.settings.max_job_bytes, source=f"pending/{shown}")
        job = job_of_spec(sp, spec, job_id=job_id, where=f"pending/{shown}")
        state = _initial_state(sp, job)
    except (FileNotFoundError, BlockingIOError):
        return None
    except InvalidJob as err:
        return _ingest_invalid(sp, name, job_id, str(err))
    except NotFound as err:  # a depends_on that names no job
        return _ingest_invalid(sp, name, job_id, f"pending/{shown}: {err}")
    key_lock = _lock_key(sp, job.key) if job.has_own_key else None
    try:
        if key_lock is not None:
            existing = lookup_key(sp, job.key)
            if existing is not None:
                fs.unlink(pending, name, missing_ok=True)
                log.warning("ingest: pending/%s has key %r of job %s; the drop was removed", shown, job.key, existing)
                return existing
            reserve_key(sp, job.key, job_id)
        # The drop's name, for finish_ingest should we die between the rename and the rewrite. It
        # is durable before the rename: it is the evidence that tells an ingest we interrupted from
        # a file a user named like an id (``has_ingest_evidence``), which is a drop, never a job.
        write_drop_note(sp, state, job_id, shown)
        try:
            fs.rename_noreplace(pending, name, sp.layout.fd(state), job_name(job_id))
        except FileNotFoundError:
            fs.unlink(sp.layout.fd(state), drop_note_name(job_id), missing_ok=True)
            return None
        crash.point("ingest-after-rename")
        job_file = JobFile(job=job, submitted_at=now_text(sp.clock), dropped_as=shown)
        rewrite_job(sp, state, job_file, sync=True)
        fs.fsync_dir(pending)
        fs.unlink(sp.layout.fd(state), drop_note_name(job_id), missing_ok=True)
    finally:
        if key_lock is not None:
            key_lock.release()
    crash.point("after-ingest")
    sp.ledger.record(
        job_file,
        state,
        ready=state is State.PENDING and is_ready(job_file, sp.clock.wall()),
        event="ingest",
        detail=shown,
    )
    log.info("ingest pending/%s -> %s/%s", shown, state.value, job_name(job_id))
    wake(sp)
    return job_id


def _ingest_invalid(sp: Handle, name: str, job_id: str, error: str, source: State = State.PENDING) -> str | None:
    """A drop that can't be a job: rename it to dead/<id>.yaml, then rewrite it as a record."""
    source_fd = sp.layout.fd(source)
    original = _raw_text(sp, source, name)
    info = fs.lstat(source_fd, name)
    # A folder can't be rewritten into a record file: hide it under a dot-name (never read
    # again, so never ingested twice) and write the record as a new file. A crash between the
    # two leaves the folder hidden and no record.
    hidden, target_fd = (
        (invalid_folder_name(job_id), source_fd)
        if info and stat.S_ISDIR(info.st_mode)
        else (job_name(job_id), sp.layout.fd(State.DEAD))
    )
    try:
        fs.rename_noreplace(source_fd, name, target_fd, hidden)
    except FileNotFoundError:
        return None
    crash.point("ingest-after-rename")
    _write_invalid_record(sp, job_id, name, error, original)
    fs.fsync_dir(source_fd)
    log.warning(
        "ingest: %s/%s is invalid (%s) -> dead/%s", source.value, printable(name), printable(error), job_name(job_id)
    )
    return job_id


def quarantine(sp: Handle, state: State, name: str, error: str) -> str | None:
    """A file a user put under a job's name in ``state``/ -> dead/<new id>.yaml, reason invalid,
    its text kept as ``original``; the job itself is not touched."""
    return _ingest_invalid(sp, name, new_id(sp.clock), error, source=state)


def write_drop_note(sp: Handle, state: State, job_id: str, shown: str) -> None:
    """``<state>/.<id>.drop``, fsync'd with its folder: an ingest is rare, one fsync is cheap."""
    folder_fd = sp.layout.fd(state)
    fs.unlink(folder_fd, drop_note_name(job_id), missing_ok=True)
    fs.write_new(folder_fd, drop_note_name(job_id), shown.encode(), sync=True)
    fs.fsync_dir(folder_fd)


def has_ingest_evidence(sp: Handle, state: State, job_id: str) -> bool:
    """Did an ingest of ours put ``<state>/<id>.yaml`` there (and die before its rewrite)?

    Yes when its drop note is beside it, or when the text's own key is reserved for this very
    id (a keyed ingest reserves before it renames). Without either, a user's file under a name
    that looks like an id is a drop like any other: it never keeps (or takes) that id.
    """
    folder_fd = sp.layout.fd(state)
    if fs.exists(folder_fd, drop_note_name(job_id)):
        return True
    try:
        spec = load_yaml(
            fs.read_file(folder_fd, job_name(job_id), sp.settings.max_job_bytes),
            max_bytes=sp.settings.max_job_bytes,
            source=f"{state.value}/{job_name(job_id)}",
        )
    except (OSError, InvalidJob):
        return False
    key = spec.get("key") if isinstance(spec, Mapping) else None
    try:
        return isinstance(key, str) and key != job_id and reservation(sp, key_name(key)) == job_id
    except UnicodeError:  # a key YAML can spell but UTF-8 can't (a lone surrogate): no reservation
        return False


def printable(text: str) -> str:
    """A file name as text YAML and SQLite can hold: bytes that were not UTF-8 become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _write_invalid_record(sp: Handle, job_id: str, dropped_as: str, error: str, original: str) -> None:
    record = JobFile(
        job=Job(id=job_id, key=job_id, task="invalid", args={}, max_tries=1),
        submitted_at=now_text(sp.clock),
        dropped_as=printable(dropped_as),
        reason="invalid",
        error=printable(error),
        original=original,
    )
    if len(encode(record)) > sp.settings.max_job_bytes + FILE_SLACK_BYTES:
        # YAML escapes a control byte in four: keep the record readable (read_job's limit) by
        # keeping the start of the original, which says what it was.
        cut = original[: sp.settings.max_job_bytes // 8]
        record = record.replace(original=cut + f"\n... (cut: the original was {len(original)} characters)")
    rewrite_job(sp, State.DEAD, record, sync=True)
    sp.ledger.record(record, State.DEAD, ready=False, event="ingest", detail=f"invalid: {error[:200]}")


def _raw_text(sp: Handle, state: State, name: str) -> str:
    """The drop's content as text for the dead record: never follows a link, never blocks."""
    try:
        data = fs.read_file(sp.layout.fd(state), name, sp.settings.max_job_bytes)
    except InvalidJob as err:
        return f"(not read: {err})"
    except OSError as err:
        return f"(not read: {err.strerror})"
    return data.decode("utf-8", errors="replace")


def finish_ingest(sp: Handle, state: State, job_id: str) -> None:
    """Finish an ingest interrupted after its rename: ``<state>/<id>.yaml`` holds a user's text.

    Caller holds the job's lock. A valid spec becomes the job file it would have been; anything
    else becomes a dead record with reason ``invalid``.
    """
    name = job_name(job_id)
    limit = sp.settings.max_job_bytes
    try:
        # Read up to the runner's own ceiling first: a whole job file the runner wrote may be larger
        # than max_job_bytes (its attempts, or a limit lowered since), and must never become invalid.
        data = fs.read_file(sp.layout.fd(state), name, RUNNER_FILE_MAX_BYTES, single_link=True)
        try:
            decode(data, source=f"{state.value}/{name}", expected_id=job_id, max_bytes=RUNNER_FILE_MAX_BYTES)
            return  # it is a whole job file after all
        except InvalidJob:
            pass
        if len(data) > limit:
            raise InvalidJob(f"{state.value}/{name}: {len(data)} bytes, over the limit of {limit}")
        if state is State.DEAD:
            raise InvalidJob(f"dead/{name}: an interrupted ingest of an invalid drop")
        spec = load_yaml(data, max_bytes=limit, source=f"{state.value}/{name}")
        job = job_of_spec(sp, spec, job_id=job_id, where=f"{state.value}/{name}")
    except FileNotFoundError:
        return
    except InvalidJob as err:
        if state is State.DEAD:
            _write_invalid_record(sp, job_id, name, str(err), _raw_text(sp, state, name))
        else:
            _ingest_invalid(sp, name, job_id, str(err), source=state)
        return
    note = drop_note_name(job_id)
    try:
        dropped_as = fs.read_file(sp.layout.fd(state), note, 4096).decode("utf-8", "replace")
    except (FileNotFoundError, InvalidJob):
        dropped_as = "(interrupted ingest)"
    job_file = JobFile(job=job, submitted_at=now_text(sp.clock), dropped_as=dropped_as)
    rewrite_job(sp, state, job_file, sync=True)
    fs.unlink(sp.layout.fd(state), note, missing_ok=True)
    sp.ledger.record(
        job_file, state, ready=state is State.PENDING and is_ready(job_file, sp.clock.wall()), event="ingest"
    )
