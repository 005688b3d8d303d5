"""How a file dropped in pending/ becomes a job: ``ingest``, and the repairs of one cut short.

A drop is renamed to its new id's name first (the commit point: a drop is never ingested twice),
then rewritten as the job file it describes. A drop note (``<state>/.<id>.drop``) made durable
before the rename is the evidence that tells an interrupted ingest of ours from a file a user
named like an id (``has_ingest_evidence``); ``finish_ingest`` completes one. A drop that can't be
a job becomes a dead record with reason ``invalid`` (``quarantine`` does the same for a file put
under a job's name).
"""

from __future__ import annotations

import logging
import stat
from contextlib import nullcontext
from collections.abc import Mapping
from typing import TYPE_CHECKING

from spool.base import crash
from spool.base.errors import InvalidJob, NotFound
from spool.disk.fsio import fs
from spool.disk.ids import new_id
from spool.job import Job, JobFile, decode, encode, is_ready
from spool.disk.layout import State, drop_note_name, invalid_folder_name, job_name, key_name, result_name
from spool.moves.store import FILE_SLACK_BYTES, RUNNER_FILE_MAX_BYTES, job_lock, rewrite_job, wake
from spool.moves.submission import initial_state, job_of_spec, lock_key, lookup_key, reservation, reserve_key
from spool.base.timetext import now_text
from spool.yaml.safe import load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.submission")  # the name ingest logged under before it had a module


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
        state = initial_state(sp, job)
    except (FileNotFoundError, BlockingIOError):
        return None
    except PermissionError as err:
        # EACCES/EPERM never heals by itself (a file another user wrote 0600, an immutable one):
        # set it aside like any bad drop, once, rather than fail on it at every pass for ever.
        return _ingest_invalid(sp, name, job_id, f"pending/{shown}: can't be read ({err.strerror})")
    except InvalidJob as err:
        return _ingest_invalid(sp, name, job_id, str(err))
    except NotFound as err:  # a depends_on that names no job
        return _ingest_invalid(sp, name, job_id, f"pending/{shown}: {err}")
    key_lock = lock_key(sp, job.key) if job.has_own_key else None
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
        # Under the new id's lock: a reconcile in another process must not finish the ingest
        # (``finish_ingest``) while we are between the rename and the rewrite.
        with job_lock(sp, job_id):
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


def _ingest_invalid(
    sp: Handle,
    name: str,
    job_id: str,
    error: str,
    source: State | str = State.PENDING,
    crash_step: str = "ingest-after-rename",
    *,
    lock_held: bool = False,
) -> str | None:
    """A drop that can't be a job: rename it to dead/<id>.yaml, then rewrite it as a record.

    Under ``job_id``'s lock (taken here unless ``lock_held``: ``finish_ingest``'s caller holds
    it): between the rename and the record, dead/<id>.yaml holds the file's own text, and a
    reconcile in another process (the coordinator's, a repair's) must not take that for an
    interrupted ingest and finish it with its own error while we are still writing ours.

    Commit point: the rename (never replacing). A crash after it leaves dead/<id>.yaml holding
    the file's own text: whoever settles it next (the coordinator's full reconcile, a repair)
    finishes it as an interrupted ingest of an invalid drop (``finish_ingest``), text kept."""
    with nullcontext() if lock_held else job_lock(sp, job_id):
        source_fd = sp.layout.fd(source)
        where = source.value if isinstance(source, State) else source
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
        crash.point(crash_step)
        _write_invalid_record(sp, job_id, name, error, original)
        fs.fsync_dir(source_fd)
        log.warning(
            "ingest: %s/%s is invalid (%s) -> dead/%s", where, printable(name), printable(error), job_name(job_id)
        )
        return job_id


def set_result_aside(sp: Handle, job_file: JobFile) -> str | None:
    """results/<id>.json that no attempt of the job linked (``store.result_is_earned``) ->
    dead/<new id>.yaml, reason invalid, its text kept as ``original``; the job is not touched and
    runs as if it were not there. Caller holds the job's lock (``complete`` links under it, so
    no genuine result can land meanwhile). Commit point and crash: ``_ingest_invalid``'s, at
    ``result-aside-after-rename``."""
    error = planted_result_error(job_file) + "; set aside to dead/ as invalid, the job runs as if it were not there"
    return _ingest_invalid(
        sp, result_name(job_file.id), new_id(sp.clock), error, source="results", crash_step="result-aside-after-rename"
    )


def planted_result_error(job_file: JobFile) -> str:
    """Why a result is not the job's: the set-aside record's error, and fsck's line."""
    tried = f"its attempt {job_file.attempt} did not end with it" if job_file.attempt else "it never ran"
    return f"results/{result_name(job_file.id)}: a result no attempt of job {job_file.id} linked ({tried}; planted?)"


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


def _raw_text(sp: Handle, state: State | str, name: str) -> str:
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
            _ingest_invalid(sp, name, job_id, str(err), source=state, lock_held=True)
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
