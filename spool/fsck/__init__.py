"""``spool fsck``: check every promise on disk; ``--repair`` fixes what it can and rebuilds the ledger.

Checks: each job in exactly one folder; every job file whole and valid; done iff a result
exists (and a dead job has none); every result whole JSON; tries within max_tries; a leased job
records its lease; each chosen key reserved for exactly its job; the ledger agrees with the
files. Leftovers in tmp/ whose writer is gone break no promise: they are listed as ``garbage``
(``--repair`` removes them), never as violations. Safe beside running processes: a move in
flight (a job whose lock is held, a result whose job is still in leased/, a tmp file whose
writer lives, a ledger a little behind) is reported as in progress, not as a violation: what
looks broken is looked at again under the lock its mover holds, and judged by that look.

Here: the whole check and the folders' own checks (results/, tmp/, the ledger); ``jobs``: one
job's look; ``keys``: keys/ judged under the keys' locks; ``repair``: ``--repair`` and the sweep.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from spool.base.errors import InvalidJob, LedgerError, LedgerUnusable
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import State, coordinator_lock_name, parse_purge_marker, result_id_of, worker_of_lock_name
from spool.disk.locks import is_held
from spool.fsck.jobs import Report, check_job
from spool.fsck.keys import check_keys, job_lock_held
from spool.fsck.repair import repair_spool, sweep_tmp, writer_alive
from spool.job import JobFile
from spool.moves.recovery import list_folders
from spool.moves.store import folders_of
from spool.views.stats import ledger_trouble

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = ["Report", "fsck", "sweep_tmp", "writer_alive"]


def fsck(sp: Handle, *, repair: bool = False) -> Report:
    """Check the spool; with ``repair``, fix first, then check again and report what remains."""
    if repair:
        repaired = repair_spool(sp)
        report = _check(sp)
        report.repaired = repaired
        return report
    return _check(sp)


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
        check_job(sp, job_id, folders, report, files)
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


def _check_results(sp: Handle, jobs: dict[str, list[State]], report: Report) -> None:
    results_fd = sp.layout.fd("results")
    for name in fs.list_dir(results_fd):
        job_id = result_id_of(name)
        if not is_valid_id(job_id):
            report.violations.append(f"results/{name}: not a result name")
            continue
        if job_id not in jobs and not folders_of(sp, job_id):  # RACE: a job submitted since the listing
            # RACE: a purge takes the job file away before the result, under the job's lock: judge under it.
            with job_lock_held(sp, job_id) as held:
                jobless = held and fs.exists(results_fd, name) and not folders_of(sp, job_id)
            if not held:
                report.in_progress.append(f"results/{name}: its job's lock is held (a purge in progress)")
                continue
            if jobless:
                report.violations.append(
                    f"results/{name}: a result without a job file in any folder; kept for a "
                    "person to look at (repair never deletes a result)"
                )
                continue
        try:
            json.loads(fs.read_file(results_fd, name, sp.settings.max_result_bytes + 1024))
        except FileNotFoundError:
            continue  # purged since the listing
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
        return
    moving, lagging = _lagging_now(sp, lagging)
    if moving:
        report.in_progress.append(f"ledger: {len(moving)} job(s) behind a move that holds its lock (e.g. {moving[0]})")
    if lagging:
        report.violations.append(
            f"ledger: {len(lagging)} job(s) disagree with the files (e.g. {lagging[0]}); run `spool fsck --repair`"
        )


# A transition in flight lags one job's row (or a batch's): more than this many is no such race.
_LAGGING_LOOKED_AGAIN = 100


def _lagging_now(sp: Handle, job_ids: list[str]) -> tuple[list[str], list[str]]:
    """(moving, lagging): each job's row against its files again, under the job's lock.

    RACE: every transition moves the file, then writes the row, under the job's lock (and a
    command such as ``spool purge`` or ``cancel`` runs with no coordinator alive): a job whose
    lock is held is moving; one whose row still disagrees under its lock lags."""
    if len(job_ids) > _LAGGING_LOOKED_AGAIN:
        return [], job_ids
    moving: list[str] = []
    lagging: list[str] = []
    for job_id in job_ids:
        with job_lock_held(sp, job_id) as held:
            if not held:
                moving.append(job_id)
                continue
            folders = folders_of(sp, job_id)
            if sp.ledger.states_of([job_id]).get(job_id) != (folders[0].value if folders else None):
                lagging.append(job_id)
    return moving, lagging
