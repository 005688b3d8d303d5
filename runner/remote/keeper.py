"""A remote attempt's lease keeper: ``ApiLease``, the HTTP side of ``runner.attempt.loop.watch``
(``runner.remote.worker`` makes the calls it asks for, through ``LeaseCalls``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from spool.job import MAX_SECONDS
from spool.progress import Progress
from spool.runner.attempt.child import Outcome
from spool.runner.attempt.loop import Beat
from spool.runner.remote.client import Reply
from spool.runner.remote.lease import RemoteLease

log = logging.getLogger("spool.worker")


class LeaseCalls(Protocol):
    """What the keeper needs of its worker (``runner.remote.worker.RemoteWorker``)."""

    def lease_call(self, lease: RemoteLease, step: str, body: dict[str, Any], *, patient: bool) -> Reply | None: ...

    def report_outcome(self, lease: RemoteLease, outcome: Outcome) -> None: ...

    def release_lease(self, lease: RemoteLease) -> None: ...

    def note_cancelled(self, lease: RemoteLease) -> None: ...


class ApiLease:
    """A remote attempt's lease keeper (``runner.attempt.loop.LeaseKeeper``): beats, progress and
    the outcome are calls to the server's lease endpoints, which write the files for us.

    Only the coordinator expires a lease, so a beat the server does not answer keeps the attempt
    running, for a while: once a full lease term (three heartbeat intervals, the term the
    coordinator publishes) has passed since the server last confirmed a beat, the coordinator may
    have expired the lease and handed the job to another worker, which this one cannot know. The
    attempt is then killed as a lost lease's is (``cut_off``), so a worker cut off from its server
    never runs on beside the job's next attempt; if the lease was in fact still held, it expires
    and the job runs again, which is the safe direction."""

    def __init__(self, worker: LeaseCalls, lease: RemoteLease, *, monotonic: Callable[[], float] = time.monotonic):
        self.worker, self.lease = worker, lease
        self.interval = lease.heartbeat_seconds
        self.refusal = ""  # what the server said when it took the lease away
        self._monotonic = monotonic
        self.confirmed = monotonic()  # when the server last confirmed this lease (handed out, or a beat answered)

    def started(self) -> None:
        pass  # the server's claim wrote the lease whole before handing it out

    def heartbeat_seconds(self) -> float:
        return self.interval

    def beat(self, counter: int, progress: Progress | None, *, is_beat: bool) -> Beat:
        body: dict[str, object] = {"counter": counter}
        if progress is not None:
            body["progress"] = progress.to_mapping()
        reply = self.worker.lease_call(self.lease, "heartbeat", body, patient=False)
        if is_beat:
            self.interval = _interval(reply, self.interval)  # a coordinator restarted with a shorter term
        if reply is not None and reply.status == 409:
            self.refusal = reply.error()
            return Beat.LOST
        if reply is not None and reply.status == 200:
            self.confirmed = self._monotonic()
            return Beat.CANCEL if isinstance(reply.body, dict) and reply.body.get("cancel") is True else Beat.HELD
        if reply is not None:
            log.warning("heartbeat of %s: %s", self.lease.job_id, reply.error())
        return Beat.LOST if self.cut_off() else Beat.HELD  # the server is away, or said no more than "later"

    def cut_off(self) -> bool:
        """Whether a full term has passed since the server last confirmed the lease (see the class)."""
        term = 3 * self.interval
        unconfirmed = self._monotonic() - self.confirmed
        if unconfirmed <= term:
            return False
        self.refusal = (
            f"no beat confirmed by the server for {unconfirmed:.1f}s, past a full lease term ({term:g}s): "
            "the coordinator may have given the job to another worker"
        )
        return True

    def report(self, outcome: Outcome) -> None:
        self.worker.report_outcome(self.lease, outcome)

    def release(self) -> None:
        self.worker.release_lease(self.lease)

    def lost(self) -> None:
        log.warning("attempt %d of %s killed: %s", self.lease.attempt, self.lease.job_id, self.refusal)

    def cancelled(self) -> None:
        self.worker.note_cancelled(self.lease)


def _interval(reply: Reply | None, current: float) -> float:
    """The heartbeat interval a heartbeat's answer names (a third of the published term), else ``current``."""
    if reply is not None and reply.status == 200 and isinstance(reply.body, dict):
        named = reply.body.get("heartbeat_seconds")
        if isinstance(named, (int, float)) and not isinstance(named, bool) and 0 < named <= MAX_SECONDS:
            return max(float(named), 0.05)
    return current
