"""A local attempt's lease keeper: its beats, progress and outcome are the spool's files.

``runner.attempt.loop.watch`` drives it as it drives a remote worker's (``runner.remote.keeper``).
A worker's claim is early (``spool.moves.claiming.Opening``): the job's lock is held and its
claimed content not yet in leased/ until ``started`` (the child has the attempt) writes it, or
``report`` for an attempt that ended before it began (``watch`` calls ``started`` before any
other step; the worker writes it at the latest when the attempt is over).
"""

from __future__ import annotations

import logging
from typing import Protocol

from spool.attemptlog import AttemptLog
from spool.base.errors import LeaseLost
from spool.base.records import Lease, LeaseStatus
from spool.moves import Held, cancel_leased, heartbeat, lease_status, release
from spool.progress import Progress
from spool.runner.attempt.child import Outcome
from spool.runner.attempt.loop import Beat
from spool.spool import Spool

log = logging.getLogger("spool.worker")


def write_claim(held: Held) -> None:
    """An early claim's content written and its lock freed (no-op once done, or for any other claim)."""
    if held.opening is not None:
        held.opening.write()


class Holder(Protocol):
    """The worker a FilesLease keeps the lease for (``runner.worker.Worker``)."""

    sp: Spool

    def heartbeat_interval(self) -> float: ...

    def report_outcome(self, lease: Lease, held: Held, outcome: Outcome) -> None: ...


class FilesLease:
    """A local attempt's lease keeper (``runner.attempt.loop.LeaseKeeper``): beats and progress
    are heartbeat files, the outcome a move of the job file, all under the job's lock. The attempt
    log is closed (trimmed whole) before the job moves on, so a follower sees it all."""

    def __init__(self, worker: Holder, lease: Lease, held: Held, attempt_log: AttemptLog) -> None:
        self.worker, self.lease, self.held, self.attempt_log = worker, lease, held, attempt_log

    def started(self) -> None:
        write_claim(self.held)  # the handler may be running: the claim's second sync overlaps it

    def heartbeat_seconds(self) -> float:
        return self.worker.heartbeat_interval()

    def beat(self, counter: int, progress: Progress | None, *, is_beat: bool) -> Beat:
        heartbeat(self.worker.sp, self.lease, counter, progress)
        if not is_beat:
            return Beat.HELD
        status = lease_status(self.worker.sp, self.lease, self.held)
        return {LeaseStatus.HELD: Beat.HELD, LeaseStatus.CANCEL: Beat.CANCEL}.get(status, Beat.LOST)

    def report(self, outcome: Outcome) -> None:
        write_claim(self.held)  # an attempt that failed before it began (its parents' results)
        self.attempt_log.close()
        self.worker.report_outcome(self.lease, self.held, outcome)

    def release(self) -> None:
        self.attempt_log.close()
        try:
            release(self.worker.sp, self.lease, self.held)
        except LeaseLost as err:
            log.warning("release of %s skipped: %s", self.lease.job_id, err)

    def lost(self) -> None:
        self.attempt_log.close()
        log.warning(
            "attempt %d of %s killed: the lease was lost (expired or requeued)", self.lease.attempt, self.lease.job_id
        )

    def cancelled(self) -> None:
        self.attempt_log.close()
        try:
            cancel_leased(self.worker.sp, self.lease, self.held)
        except LeaseLost as err:
            log.warning("cancel of %s: %s", self.lease.job_id, err)
