"""The 409 of a lost lease: why, and the job as it is now, so a worker can act on it.

``{"error", "where", "state", "attempt"}``: ``state`` is the job's state as the files say (null
for no such job), ``attempt`` its attempt now (null while its file is mid-move). For a done job
that attempt is the one whose result it holds: a result is linked only under a matching fence,
and nothing claims a done job again. A ``complete`` from the worker that held that attempt adds
``same_result``: whether the stored result is byte for byte the one it sent.

Why: ``spool serve`` killed between linking a remote worker's result and answering leaves the
worker with no answer; it sends the same complete again and gets this 409. ``state`` done,
``attempt`` its own and ``same_result`` true is its own win, not a drop (``runner.remote.worker``). A
result that is not the one sent (planted in results/, or linked by an admin acting on the lease)
is not.
"""

from __future__ import annotations

from spool.base.errors import SpoolError
from spool.disk import fs
from spool.disk import State, result_name
from spool.runner.api.context import ApiError
from spool.spool import Spool
from spool.moves import state_of


def lost_lease(
    sp: Spool,
    job_id: str,
    attempt: int | None,
    where: str,
    why: str | None = None,
    sent: tuple[str, bytes] | None = None,
) -> ApiError:
    """The 409 for ``attempt`` of ``job_id`` (blocking: reads the files); ``why`` the
    transition's own reason, ``sent`` (caller, result) what a complete brought. ``same_result``
    is said only to the worker that held the attempt the job is done by: to anyone else it would
    tell whether a guessed value is a job's result."""
    state, now, holder = _job_now(sp, job_id)
    which = f"attempt {attempt}" if attempt is not None else "this fence"
    fields: dict[str, object] = {"state": state.value if state else None, "attempt": now}
    if sent is not None and state is State.DONE and holder is not None and holder == sent[0]:
        fields["same_result"] = _stored_result(sp, job_id, len(sent[1])) == sent[1]
    if state is State.DONE and now == attempt and fields.get("same_result", True):
        message = f"lease lost: {job_id} is done already, with the result of {which}"
    elif why is not None:
        message = f"lease lost: {why}"
    elif state is None:
        message = f"lease lost: no job {job_id}"
    elif state is State.LEASED:
        message = f"lease lost: {job_id} is leased again under another attempt; {which} is stale"
    else:
        message = f"lease lost: {job_id} is {state.value} now; {which} is stale"
    return ApiError(409, message, where, fields=fields)


def _job_now(sp: Spool, job_id: str) -> tuple[State | None, int | None, str | None]:
    """The job's state, its attempt and the worker that held that attempt (None where unknown)."""
    try:
        state, job_file = sp.job(job_id)
    except (SpoolError, OSError):  # RACE: a move between listing its folders and reading its file
        return state_of(sp, job_id), None, None
    if job_file.lease is not None and job_file.lease.attempt == job_file.attempt:
        return state, job_file.attempt, job_file.lease.worker  # a done job whose move a crash cut short
    holders = [record.worker for record in job_file.attempts if record.attempt == job_file.attempt]
    return state, job_file.attempt, holders[-1] if holders else None


def _stored_result(sp: Spool, job_id: str, size: int) -> bytes | None:
    """results/<id>.json if it is at most ``size`` bytes (a longer one is another result anyway)."""
    try:
        return fs.read_file(sp.layout.fd("results"), result_name(job_id), size)
    except (SpoolError, OSError):
        return None
