"""``spool fsck``: check every promise on disk; ``--repair`` fixes what it can and rebuilds the ledger.

Checks: each job in exactly one folder; every job file whole and valid; done iff a result
exists (and a dead job has none); every result whole JSON; tries within max_tries; a leased job
records its lease; each chosen key reserved for exactly its job; the ledger agrees with the
files. Leftovers in tmp/ whose writer is gone break no promise: they are listed as ``garbage``
(``--repair`` removes them), never as violations. Safe beside running processes: a move in
flight (a job whose lock is held, a result whose job is still in leased/, a tmp file whose
writer lives, a ledger a little behind) is reported as in progress, not as a violation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spool import queues
from spool.base.errors import InvalidJob, LedgerError, LedgerUnusable, SpoolError
from spool.disk.fsio import fs
from spool.moves.ingest import planted_result_error
from spool.disk.ids import is_valid_id
from spool.admin import finish_purge
from spool.job import JobFile, is_ready
from spool.disk.layout import WAKE_NAME, State, cancel_name, coordinator_lock_name, heartbeat_name, is_dot_name
from spool.disk.layout import job_lock_name, job_name, parse_drop_note_name, parse_purge_marker, result_id_of
from spool.disk.layout import result_name, tmp_writer_pid, worker_of_lock_name
from spool.fsck_keys import check_keys, job_lock_held, repair_keys
from spool.disk.locks import is_held
from spool.moves.recovery import copies_of, list_folders, moved_back_by_hand, reconcile, resync
from spool.views.stats import ledger_trouble
from spool.moves.store import folders_of, job_lock, read_job, read_job_now, result_is_earned
from spool.yaml.safe import load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)  # breaks no promise; --repair removes it
    jobs: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


def fsck(sp: Handle, *, repair: bool = False) -> Report:
    """Check the spool; with ``repair``, fix first, then check again and report what remains."""
    if repair:
        repaired = _repair(sp)
        report = _check(sp)
        report.repaired = repaired
        return report
    return _check(sp)


def _busy(sp: Handle, job_id: str) -> bool:
    return bool(is_held(sp.layout.fd("locks"), job_lock_name(job_id)))


def _processes_alive(sp: Handle) -> bool:
    locks_fd = sp.layout.fd("locks")
    names = [n for n in fs.list_dir(locks_fd) if worker_of_lock_name(n) is not None or n == coordinator_lock_name()]
    return any(is_held(locks_fd, name) for name in names)


def _check(sp: Handle) -> Report:
    report = Report()
    listing = list_folders(sp)
    report.jobs = len(listing.jobs)
    files: dict[str, tuple[State, JobFile]] = {}
    for job_id, folders in sorted(listing.jobs.items()):
        _check_job(sp, job_id, folders, report, files)
    for state, name in listing.strays:
        report.violations.append(f"{state.value}/{name}: not a job file name (only <id>.yaml belongs here)")
    for name in listing.drops:
        _check_drop(sp, name, report)
    _check_results(sp, listing.jobs, report)
    _check_keys(sp, files, report)
    _check_tmp(sp, report)
    _check_ledger(sp, files, report)
    return report


def _check_drop(sp: Handle, name: str, report: Report) -> None:
    """A drop waits for the coordinator; one this process can't read is said so (the coordinator,
    running as the spool's owner like fsck, sets it aside to dead/ as invalid)."""
    try:
        fs.read_file(sp.layout.fd(State.PENDING), name, sp.settings.max_job_bytes)
    except PermissionError as err:
        message = f"pending/{name}: a drop that can't be read ({err.strerror}); the coordinator sets it aside"
        if is_held(sp.layout.fd("locks"), coordinator_lock_name()):
            report.in_progress.append(message + " to dead/ as invalid")
        else:
            report.violations.append(message + " to dead/ as invalid when it runs")
        return
    except (OSError, InvalidJob):
        pass  # gone since the listing, or invalid: the coordinator's ingest says why
    report.in_progress.append(f"pending/{name}: a drop waiting to be ingested by the coordinator")


def _check_job(
    sp: Handle, job_id: str, folders: list[State] | None, report: Report, files: dict[str, tuple[State, JobFile]]
) -> None:
    """Look at one job without its lock; if that look finds a broken promise, look again under the
    lock, and judge by that look alone.

    RACE: a move that runs between two reads of one look (publish_job links done/ before it
    unlinks leased/; a claim renames into leased/ before it writes the lease) shows a job broken
    that is not. No move of the job can be under way while fsck holds its lock, so what the second
    look finds is real; while a move holds it, what the first look found is a move in flight. (Asking
    whether the lock is held after the first look would not do: the move may have ended between.)
    """
    seen = Report()
    _look_at_job(sp, job_id, folders, seen, files)
    if seen.violations:
        with job_lock_held(sp, job_id) as held:
            if held:
                seen = Report()
                files.pop(job_id, None)
                _look_at_job(sp, job_id, None, seen, files)
            else:
                seen.in_progress += [f"{line} (its lock is held: in progress)" for line in seen.violations]
                seen.violations = []
    report.violations += seen.violations
    report.in_progress += seen.in_progress


def _look_at_job(
    sp: Handle, job_id: str, folders: list[State] | None, report: Report, files: dict[str, tuple[State, JobFile]]
) -> None:
    copies = copies_of(sp, job_id, folders)
    if not (copies.keep or copies.drops or copies.planted):
        # RACE: a worker or the coordinator moved it after the listing (leased/ -> pending/ is
        # backwards in the listing's order): look it up by id in every folder, now.
        copies = copies_of(sp, job_id)
    for state in copies.drops + copies.planted:
        where = f"{state.value}/{job_name(job_id)}"
        damaged = _damaged_job_file(sp, state, job_id)
        if damaged is not None:  # a runner's file would be whole: its text is kept, its id is not
            report.violations.append(
                f"{where}: not a whole job file ({damaged}); the coordinator takes it as a "
                "drop: to dead/ under a new id, its text kept",
            )
        elif state is State.PENDING:
            report.in_progress.append(
                f"{where}: a drop named like a job id (not a file the runner made); the "
                "coordinator ingests it under a new id"
            )
        else:
            report.in_progress.append(
                f"{where}: a copy of {job_id} the runner did not make; the coordinator "
                "moves it to dead/ as invalid (the job is kept)"
            )
    if not copies.keep:
        return
    if copies.stale:
        listed = copies.keep + copies.stale
        report.violations.append(f"{job_id}: in {len(listed)} folders ({', '.join(s.value for s in listed)})")
    state = copies.keep[0]
    where = f"{state.value}/{job_name(job_id)}"
    try:
        job_file = read_job(sp, state, job_id)
    except InvalidJob as err:
        report.violations.append(f"{where}: not a whole job file ({err})")
        return
    except FileNotFoundError:
        located = locate(sp, job_id)
        if located is None:
            report.in_progress.append(f"{job_id}: moved while being checked")
            return
        state, job_file = located
        where = f"{state.value}/{job_name(job_id)}"
    files[job_id] = (state, job_file)
    has_result = fs.exists(sp.layout.fd("results"), result_name(job_id))
    if state is State.DONE and not has_result:
        report.violations.append(f"{where}: done without results/{result_name(job_id)}")
    if has_result and state is not State.DONE and not result_is_earned(state, job_file):
        why = "the next claim of the job, or fsck --repair, sets it aside to dead/ as invalid"
        report.violations.append(f"{planted_result_error(job_file)}: {why}")
    elif state is State.LEASED and has_result:
        report.in_progress.append(f"{where}: has a result; the move to done is in progress")
    elif state in (State.PENDING, State.WAITING, State.DEAD) and has_result:
        report.violations.append(f"{where}: has a result but is {state.value}")
    if state in (State.PENDING, State.WAITING) and moved_back_by_hand(job_file) and not has_result:
        report.in_progress.append(
            f"{where}: moved back by hand (or a requeue was interrupted); the runner "
            "finishes it as a requeue with fresh tries (so does fsck --repair)"
        )
    elif job_file.tries > job_file.job.max_tries:
        report.violations.append(f"{where}: tries {job_file.tries} over max_tries {job_file.job.max_tries}")
    if job_file.tries > job_file.attempt:
        report.violations.append(f"{where}: tries {job_file.tries} over attempt {job_file.attempt}")
    if state is State.LEASED and (job_file.lease is None or job_file.lease.attempt != job_file.attempt):
        report.violations.append(f"{where}: leased without a lease for attempt {job_file.attempt}")
    if state is State.DEAD and job_file.reason is None:
        report.violations.append(f"{where}: dead without a reason")


def _damaged_job_file(sp: Handle, state: State, job_id: str) -> str | None:
    """Why ``<state>/<id>.yaml`` reads as a damaged job file, or None when it is a user's spec (a
    mapping without an ``id``) or a whole job file."""
    limit = sp.settings.max_job_bytes
    try:
        read_job(sp, state, job_id)
        return None
    except FileNotFoundError:
        return None
    except InvalidJob as err:
        why = str(err)
    try:
        text = load_yaml(fs.read_file(sp.layout.fd(state), job_name(job_id), limit), max_bytes=limit, source="")
    except (OSError, InvalidJob):
        return why
    return None if isinstance(text, dict) and "id" not in text else why


def _check_results(sp: Handle, jobs: dict[str, list[State]], report: Report) -> None:
    results_fd = sp.layout.fd("results")
    for name in fs.list_dir(results_fd):
        job_id = result_id_of(name)
        if not is_valid_id(job_id):
            report.violations.append(f"results/{name}: not a result name")
            continue
        if job_id not in jobs and not folders_of(sp, job_id):  # RACE: a job submitted since the listing
            report.violations.append(
                f"results/{name}: a result without a job file in any folder; kept for a "
                "person to look at (repair never deletes a result)"
            )
            continue
        try:
            json.loads(fs.read_file(results_fd, name, sp.settings.max_result_bytes + 1024))
        except (InvalidJob, ValueError) as err:
            report.violations.append(f"results/{name}: not a whole JSON result ({err})")


def _check_keys(sp: Handle, files: dict[str, tuple[State, JobFile]], report: Report) -> None:
    violations, in_progress = check_keys(sp, files)
    report.violations += violations
    report.in_progress += in_progress


def _check_tmp(sp: Handle, report: Report) -> None:
    # A staging file whose writer is gone breaks no promise: nothing reads tmp/ as a job, and the
    # coordinator sweeps it (when a worker's lock frees, every few seconds, and when it stops).
    # An interrupted purge's marker is garbage too: the sweep (or --repair) finishes that purge.
    for name in fs.list_dir(sp.layout.fd("tmp")):
        if writer_alive(name):
            report.in_progress.append(f"tmp/{name}: being written")
        elif parse_purge_marker(name) is not None:
            report.garbage.append(f"tmp/{name}: left by a purge that was interrupted (--repair finishes it)")
        else:
            report.garbage.append(f"tmp/{name}: left over by a process that is gone")


def _check_ledger(sp: Handle, files: dict[str, tuple[State, JobFile]], report: Report) -> None:
    try:
        known = sp.ledger.states()
    except LedgerError as err:
        # An index breaks no promise about a job: the files were checked without it.
        if isinstance(err, LedgerUnusable) and not _processes_alive(sp):
            report.violations.append(f"{err}")
        else:
            report.in_progress.append(ledger_trouble(sp, err, then="the files were checked without it"))
        return
    lagging = [job_id for job_id, (state, _f) in files.items() if known.get(job_id) != state.value]
    lagging += [job_id for job_id in known if job_id not in files]
    if not lagging:
        return
    message = f"ledger: {len(lagging)} job(s) disagree with the files (e.g. {lagging[0]})"
    if _processes_alive(sp):
        report.in_progress.append(message + "; the coordinator reconciles it")
    else:
        report.violations.append(message + "; run `spool fsck --repair`")


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


def _repair(sp: Handle) -> list[str]:
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


def locate(sp: Handle, job_id: str, first: State | None = None) -> tuple[State, JobFile] | None:
    """The job's file as it is now (``store.read_job_now``); None when it is nowhere (purged),
    is not a whole job file (InvalidJob) or kept moving (SpoolError)."""
    try:
        return read_job_now(sp, job_id, first)
    except SpoolError:
        return None


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
