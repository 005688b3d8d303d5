"""A worker waiting for room on a full disk keeps every lease it holds alive (README: "A full
disk pauses, never costs a try").

While one ended attempt's outcome waits for room (``Worker.save_outcome``), the worker does
nothing else, so two kinds of lease get no beats of their own: the attempt that was running when
a batch's waiting results met the full disk (the attempt loop gives the batch its turns between
polls of the child), and the results that wait behind the one being saved. Left alone they would
expire after one term and their handlers run a second time. Each wait beats them all, with
counters of their own that an attempt's beats (counted up from 1) never reach: the coordinator
only watches a counter change, on its own clock.

A batch's queued members (no handler started yet) are left alone: an expiry that finds one
queued gives its try back (``store.queued_beat``), and the worker skips it when its turn comes.
"""

from __future__ import annotations

from collections.abc import Iterable

from spool.base.records import Lease, LeaseStatus
from spool.moves import heartbeat, lease_status
from spool.spool import Spool

KEEP_ALIVE_BEATS = 1_000_000_000  # the first keep-alive counter (tests/crash/test_holes_runner.py reads it)


class KeepAlive:
    """One worker's keep-alive beats. ``running`` is the attempt its attempt loop watches."""

    def __init__(self, sp: Spool) -> None:
        self.sp = sp
        self.running: Lease | None = None
        self._counter = KEEP_ALIVE_BEATS

    def beat(self, saving: Lease, waiting: Iterable[Lease]) -> None:
        """One beat for the lease whose outcome is being saved, the running attempt's, and each
        waiting result's that still holds (one lost meanwhile gets none: a beat would leave a
        stray heartbeat file; its save will say it was dropped). A missed beat only warns."""
        self._counter += 1
        running = [self.running] if self.running is not None and self.running != saving else []
        for lease in [saving, *running]:
            heartbeat(self.sp, lease, self._counter)
        for lease in waiting:
            if lease != saving and lease_status(self.sp, lease) is not LeaseStatus.LOST:
                heartbeat(self.sp, lease, self._counter)
