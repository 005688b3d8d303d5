"""A worker's group commit (``spool.moves.group``): the jobs a batch claim took that wait for
their turn, and the ended attempts whose results wait to be saved together.

When attempts are short, one job's syncs cost more than its handler: a worker then claims a few
ready jobs at once, as many as should run within ``BATCH_SECONDS`` by the attempts it timed
(never more than ``CLAIM_BATCH_MOST``; one while it knows nothing), and saves results that ended
within ``HOLD_SECONDS`` of each other in one ``complete_many``. Long attempts never batch, and
what a batch holds never waits long:

- a result waits at most ``HOLD_SECONDS`` (``OUTBOX_MOST`` results at most), even while the next
  attempt runs: the attempt loop gives these chores their turns between polls of the child;
- the members still waiting when the running attempt passes ``QUEUED_WAIT_SECONDS`` are given
  back (``release``: no try spent) for another worker to take, as they are when the worker stops;
- a failure, a release or a cancel is saved at once, as before (they are rare, and one job's).

While jobs land one by one a little faster than the workers take them, a claim lingers a few
milliseconds first so that they share it (``linger``; never after a quiet spell).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable

from spool.base.errors import DiskFull, LeaseLost
from spool.base.records import Lease, LeaseStatus
from spool.moves import Finished, Held, cancel_leased, complete_many, lease_status, release, start_queued
from spool.moves import begin_spare_beats, claims_to_settle, drop_spare_beats, release_spares, settle_claims
from spool.runner.attempt.child import Outcome
from spool.spool import Spool

log = logging.getLogger("spool.worker")

CLAIM_BATCH_MOST = 128
BATCH_SECONDS = 0.05  # a batch claim takes what its attempts should run within this
# How long a result may wait for others to share its syncs: as long as a batch's attempts run, so
# a batch claimed together is mostly saved together (with 5 ms, 2-3 results were). Backlog drain,
# 2 alternated pairs each (2026-12-06): a 5 -> 20 ms hold +9-14% journaled, +6% root; then 16 ->
# 32 at most +7-14% journaled; then 32 / 20 ms -> 64 / 50 ms +18-36% journaled, +4-9% root; then 64 ->
# 128 at most (2026-12-07, 3 alternated pairs each): +2-11% journaled, -2 to +11% root (mean +6%, +5%).
HOLD_SECONDS = BATCH_SECONDS
OUTBOX_MOST = 128
QUEUED_WAIT_SECONDS = 0.25  # a batch's waiting members are given back when the attempt before them runs longer
# Jobs that land one by one a little faster than the workers take them (one producer submitting in
# a loop) would each be claimed alone, paying a claim's three fsyncs and two ledger writes, and
# the workers' CPU is then taken from the producer on a small machine. A claim that comes within
# LINGER_AFTER_SECONDS of one that found fewer ready jobs than it asked for first waits
# LINGER_SECONDS, so the jobs landing meanwhile share it (Kafka's linger.ms, PostgreSQL's
# commit_delay). After a quiet spell nobody waits (an idle pickup is at once), nor while a backlog
# fills every claim, nor for long attempts (their claims ask for one). Shape (a), alternated with
# the code before (2026-12-07, benchmarks/peers.py's shapes): drain 623-643 -> 766-806 jobs/s on
# the root disk, 367-370 -> 437-440 journaled, CPU 2.1 -> 1.4-1.6 ms/job; a 2 ms linger gave
# 735-737 on the root disk (docs/performance.md).
LINGER_SECONDS = 0.005
LINGER_AFTER_SECONDS = 0.010
_TIMING_WEIGHT = 0.2  # of the newest attempt in the running mean of attempt durations


class Batches:
    """One worker's waiting members and waiting results. ``save_one`` saves one outcome the
    patient way (``Worker.save_outcome``: a full disk waits for room)."""

    def __init__(self, sp: Spool, worker: str, save_one: Callable[[Lease, Held | None, Outcome], None]) -> None:
        self.sp, self.worker, self._save_one = sp, worker, save_one
        self.queued: deque[Held] = deque()
        self._outbox: list[tuple[Finished, Outcome]] = []
        self._saving: list[Finished] = []  # results that wait behind the one a full disk holds up
        self._outbox_due = math.inf
        self._attempt_seconds: float | None = None  # running mean; None: nothing timed yet
        self._attempt_started = math.inf
        self._short_claim_at = -math.inf  # when a claim last found fewer ready jobs than it asked for
        begin_spare_beats(sp)  # a finished attempt's heartbeat file serves a next claim's

    # -- claiming ------------------------------------------------------------------------------

    def claim_size(self) -> int:
        """How many jobs the next claim may take."""
        if self._attempt_seconds is None:
            return 1
        return max(1, min(CLAIM_BATCH_MOST, int(BATCH_SECONDS / max(self._attempt_seconds, 1e-4))))

    def linger(self) -> float:
        """How long the next claim waits first: ``LINGER_SECONDS`` while jobs land one by one
        (a short claim within ``LINGER_AFTER_SECONDS``), else 0."""
        return LINGER_SECONDS if time.monotonic() - self._short_claim_at <= LINGER_AFTER_SECONDS else 0.0

    def claimed(self, taken: int, asked: int) -> None:
        """A claim took ``taken`` of the ``asked`` jobs (an empty one says nothing of the pace)."""
        if taken:
            self._short_claim_at = time.monotonic() if taken < asked else -math.inf

    def next_queued(self) -> Held | None:
        """The next waiting member whose lease still holds, started (its heartbeat unmarked)."""
        while self.queued:
            held = self.queued.popleft()
            lease = self._lease(held)
            status = lease_status(self.sp, lease, held)
            if status is LeaseStatus.HELD:
                start_queued(self.sp, lease)
                return held
            if status is LeaseStatus.CANCEL:
                try:
                    cancel_leased(self.sp, lease, held)
                except LeaseLost as err:
                    log.warning("cancel of %s: %s", lease.job_id, err)
            else:
                log.warning("%s: given back or taken while it waited in a batch; skipped", lease.job_id)
        return None

    def end(self) -> None:
        """At the worker's exit: the waiting members given back, the waiting results saved, the
        spare heartbeat files removed. After a failed sync the first two may fail too (raised)."""
        try:
            self.give_back()
            self.flush()
        finally:
            drop_spare_beats(self.sp)

    def rest(self) -> None:
        """A whole poll went by with nothing to run: the spare files go (``spool.moves.spares``)."""
        release_spares(self.sp)

    def give_back(self) -> None:
        """Release every waiting member: no try spent, ready at once for any worker."""
        while self.queued:
            held = self.queued.popleft()
            lease = self._lease(held)
            try:
                release(self.sp, lease, held)
            except LeaseLost as err:
                log.warning("release of %s skipped: %s", lease.job_id, err)

    def _lease(self, held: Held) -> Lease:
        return Lease(held.job_file.id, self.worker, held.job_file.attempt)

    # -- attempts and results ------------------------------------------------------------------

    def attempt_starts(self) -> None:
        self._attempt_started = time.monotonic()

    def attempt_ended(self) -> None:
        took = time.monotonic() - self._attempt_started
        self._attempt_started = math.inf
        mean = self._attempt_seconds
        self._attempt_seconds = took if mean is None else mean + _TIMING_WEIGHT * (took - mean)

    def hold(self, lease: Lease, held: Held | None, outcome: Outcome) -> None:
        """Keep a result to save with the next ones (within ``HOLD_SECONDS``)."""
        result_json = json.dumps(outcome.value, allow_nan=False).encode()
        if not self._outbox:
            self._outbox_due = time.monotonic() + HOLD_SECONDS
        self._outbox.append((Finished(lease, held, result_json), outcome))
        if len(self._outbox) >= OUTBOX_MOST:
            self.flush()

    def flush(self) -> None:
        """Save every waiting result: together, or one by one where the disk is full."""
        waiting, self._outbox, self._outbox_due = self._outbox, [], math.inf
        if not waiting:
            return
        if len(waiting) == 1:
            finished, outcome = waiting[0]
            self._save_one(finished.lease, finished.held, outcome)
            return
        try:
            dropped = complete_many(self.sp, [finished for finished, _outcome in waiting])
        except DiskFull:
            try:
                for at, (finished, outcome) in enumerate(waiting):  # the patient way: each waits for room
                    self._saving = [behind for behind, _outcome in waiting[at + 1 :]]
                    self._save_one(finished.lease, finished.held, outcome)
            finally:
                self._saving = []
            return
        for (finished, _outcome), lost in zip(waiting, dropped):
            if lost is not None:
                log.warning("attempt %d of %s dropped: %s", finished.lease.attempt, finished.lease.job_id, lost)

    def waiting_leases(self) -> list[Lease]:
        """The leases of the ended attempts whose results wait to be saved (``runner.keepalive``)."""
        return [finished.lease for finished, _outcome in self._outbox] + [finished.lease for finished in self._saving]

    # -- the attempt loop's chores (``runner.attempt.loop.Chores``) ---------------------------

    def due(self) -> float:
        if claims_to_settle(self.sp):
            return -math.inf  # pending/'s fsync for the claims' old copies: the first turn, while the handler runs
        give_back_at = self._attempt_started + QUEUED_WAIT_SECONDS if self.queued else math.inf
        return min(self._outbox_due, give_back_at)

    def run(self) -> None:
        settle_claims(self.sp)
        now = time.monotonic()
        if now >= self._outbox_due:
            self.flush()
        if self.queued and now >= self._attempt_started + QUEUED_WAIT_SECONDS:
            self.give_back()
