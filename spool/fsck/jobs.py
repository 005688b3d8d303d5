"""fsck's look at one job: its copies, its file, its result and its lease.

Nearly every job is whole, so each is looked at without its lock first; one that looks broken is
looked at again under its lock (``check_job`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spool.base.errors import InvalidJob, SpoolError
from spool.disk.fsio import fs
from spool.disk.layout import State, job_name, result_name
from spool.fsck.keys import job_lock_held
from spool.job import JobFile
from spool.moves.ingest import planted_result_error
from spool.moves.recovery import copies_of, moved_back_by_hand
from spool.moves.store import read_job, read_job_now, result_is_earned
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


def check_job(
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
    if folders is not None and not (copies.keep or copies.drops or copies.planted):
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


def locate(sp: Handle, job_id: str, first: State | None = None) -> tuple[State, JobFile] | None:
    """The job's file as it is now (``store.read_job_now``); None when it is nowhere (purged),
    is not a whole job file (InvalidJob) or kept moving (SpoolError)."""
    try:
        return read_job_now(sp, job_id, first)
    except SpoolError:
        return None
