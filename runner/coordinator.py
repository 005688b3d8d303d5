"""``spool coordinator``: the one process whose clock decides leases.

On every pass it ingests drops, watches leases, makes delayed and backed-off jobs ready,
promotes waiting jobs (or skips them when a dependency died), and every few seconds reconciles
the ledger against folder listings and sweeps tmp/; it sweeps tmp/ at once too when a worker's
lock frees (a dead worker's staging files), and when it stops. One coordinator per spool: a second one
waits on ``locks/coordinator.lock`` and takes over when the first dies.

Leases (docs/reliability.md, "4. Leases"): for each leased job it notes, on ``time.monotonic()``, when it last saw
the job's heartbeat counter change, and expires a lease whose counter has not changed across a
full ``lease_seconds`` of its own observation. A lease it sees first (after a start, or a pause
of its own) gets a fresh full term. It never reads a worker's timestamp or a file's mtime. A
local worker whose liveness lock is free is dead: its lease is expired at once.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from spool import crash
from spool.chains import advance_waiting, make_ready
from spool.errors import DiskFull, DurabilityError, InvalidJob, LedgerError, LedgerUnusable, SpoolError
from spool.fsck import sweep_tmp
from spool.fsio import fs
from spool.ids import is_generated_id, is_valid_id
from spool.ingest import ingest
from spool.layout import (
    SCHEDULES,
    WAKE_NAME,
    State,
    coordinator_lock_name,
    heartbeat_name,
    is_ignored_name,
    job_id_of,
    parse_heartbeat,
    parse_heartbeat_name,
    worker_lock_name,
)
from spool.locks import Lock, acquire, is_held
from spool.recovery import reconcile, resync_locked
from spool.runner.scheduler import Scheduler
from spool.spool import Spool
from spool.store import read_job
from spool.timetext import format_time, parse_time
from spool.transitions import expire
from spool.workers import unhandled_ready, unhandled_warning

log = logging.getLogger("spool.coordinator")

RECONCILE_SECONDS = 5.0
UNHANDLED_GRACE_SECONDS = 3.0


@dataclass
class LeaseWatch:
    attempt: int
    worker: str | None
    counter: bytes | None
    changed: float  # our monotonic clock when the counter last changed (or we first saw it)


class Coordinator:
    def __init__(self, sp: Spool, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.sp = sp
        self.clock = clock
        self.lease_seconds = sp.settings.lease_seconds
        self.leases: dict[str, LeaseWatch] = {}
        self.timers: dict[str, float] = {}  # job id -> when (our clock) it becomes ready
        self.last_pass: float | None = None
        self.last_reconcile = -1e18
        self.last_published = -1e18
        self._stop = False
        self.unhandled_since: dict[str, float] = {}  # task -> our clock when first seen unhandled
        self.unhandled_warned: set[str] = set()
        self.scheduler = Scheduler(sp)  # schedules/: the next due slot bounds our wait

    # -- life --------------------------------------------------------------------------------

    def run(self) -> int:
        from spool.runner.wake import Waker  # start-up: watchdog is imported only by a running coordinator

        lock = _coordinator_lock(self.sp)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        folders = [self.sp.layout.path(state) for state in State] + [self.sp.layout.path(SCHEDULES)]
        waker = Waker(folders)
        log.info("coordinator started (lease %ss)", self.lease_seconds)
        try:
            self._publish_start()
            landed: list[tuple[str, str]] = []
            while not self._stop:
                try:
                    self.run_pass(landed)
                except LedgerUnusable as err:
                    self._rebuild_ledger(err)
                landed = waker.wait(self._next_wait())
            sweep_tmp(self.sp)  # what a worker that died since our last sweep staged is garbage
        except (DurabilityError, DiskFull, OSError) as err:
            # The disk failed under a move; a failed fsync is final, never retried. Exit for the
            # supervisor to restart us: a move left half made is settled by the next reconcile.
            log.error("coordinator stops, the spool's storage failed: %s", err)
            return 1
        except LedgerError as err:  # not a corrupt file (that is rebuilt above): locked too long, I/O
            log.error("coordinator stops, the ledger failed: %s", err)
            return 1
        finally:
            waker.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.release()
        log.info("coordinator stopped")
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop = True

    def _publish_start(self) -> None:
        try:
            self._publish_meta()
        except LedgerUnusable as err:
            self._rebuild_ledger(err)

    def _publish_meta(self) -> None:
        """Our term and who we are, for workers (their heartbeat) and for `spool stats`."""
        self.sp.ledger.set_meta(
            lease_seconds=self.lease_seconds, coordinator_pid=os.getpid(), coordinator_started=format_time(time.time())
        )

    def _rebuild_ledger(self, err: LedgerUnusable) -> None:
        """A ledger that is not a database: move it aside and let the next pass's reconcile fill
        a fresh one from the files (workers and commands reopen onto it by themselves)."""
        aside = self.sp.set_ledger_aside()
        log.error("the ledger is unreadable (%s); moved aside to %s, rebuilding it from the files", err, aside)
        self.last_reconcile = self.last_published = -1e18
        self.leases.clear()
        self.timers.clear()
        self._publish_meta()

    def _next_wait(self) -> float:
        wait = min(self.sp.settings.poll_seconds, max(self.lease_seconds / 6.0, 0.05), 1.0)
        if self.timers:
            wait = min(wait, max(min(self.timers.values()) - self.clock(), 0.0))
        return min(wait, self.scheduler.seconds_until_due())

    # -- one pass ----------------------------------------------------------------------------

    def run_pass(self, landed: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
        now = self.clock()
        if self.last_pass is not None and now - self.last_pass > max(self.lease_seconds / 2.0, 5.0):
            # We were paused (SIGSTOP, a suspended VM): nobody could heartbeat into our view.
            log.warning("coordinator was paused %.1fs; every lease gets a fresh term", now - self.last_pass)
            self.leases.clear()
        self.last_pass = now
        self.scheduler.run_pass(landed)  # first: a slot's job is submitted on time
        drops, arrivals = self._sort_landed(landed)
        listing_drops = None
        if now - self.last_reconcile >= RECONCILE_SECONDS:
            self.last_reconcile = now
            listing = reconcile(self.sp)
            drops = listing_drops = listing.drops
            arrivals = {State.WAITING.value: set(self.sp.ledger.waiting())}
            sweep_tmp(self.sp)
            self._load_timers()
            self._warn_unhandled(now)
        for name in drops:
            self._ingest(name)
        if drops and listing_drops is drops:
            # reconcile counted these before they were ingested: count what is left, or each
            # ingested drop holds a place against max_pending twice until the next reconcile.
            pending_fd = self.sp.layout.fd(State.PENDING)
            self.sp.ledger.set_meta(drops=sum(1 for name in drops if fs.exists(pending_fd, name)))
        self._watch_leases(now)
        self._fire_timers()
        self._advance_chains(arrivals)
        if now - self.last_published >= 1.0:  # `spool stats` needs seconds, not every pass
            self.last_published = now
            self.sp.ledger.set_meta(coordinator_seen=format_time(time.time()), lease_seconds=self.lease_seconds)

    def _sort_landed(self, landed: list[tuple[str, str]]) -> tuple[list[str], dict[str, set[str]]]:
        drops: list[str] = []
        arrivals: dict[str, set[str]] = {}
        woken = False
        for folder, name in landed:
            if is_ignored_name(name):
                # pending/.wake follows a ledger commit: a retry's or a delayed job's row may
                # only now say "not ready" (its move's own event can beat the commit).
                woken = woken or (folder == State.PENDING.value and name == WAKE_NAME)
                continue
            job_id = job_id_of(name)
            if folder == State.PENDING.value and not is_generated_id(job_id):
                drops.append(name)
            elif is_valid_id(job_id):
                arrivals.setdefault(folder, set()).add(job_id)
        if arrivals.get(State.PENDING.value) or woken:
            self._load_timers()  # a retry or a delayed job may have landed
        return list(dict.fromkeys(drops)), arrivals

    def _ingest(self, name: str) -> None:
        try:
            ingest(self.sp, name)
        except OSError as err:
            log.error("ingest of pending/%s failed: %s", name, err)

    # -- leases ------------------------------------------------------------------------------

    def _watch_leases(self, now: float) -> None:
        leased_fd = self.sp.layout.fd(State.LEASED)
        current: set[str] = set()
        newest_beat: dict[str, int] = {}  # job id -> the newest attempt with a heartbeat file
        for name in fs.list_dir(leased_fd):
            beat_of = parse_heartbeat_name(name)
            if beat_of is not None:
                newest_beat[beat_of[0]] = max(newest_beat.get(beat_of[0], 0), beat_of[1])
            elif job_id_of(name) and not is_ignored_name(name):
                current.add(job_id_of(name))
        for job_id in list(self.leases):
            if job_id not in current:
                del self.leases[job_id]
        dead_writer = False
        for job_id in current:
            watch = self.leases.get(job_id)
            beat = newest_beat.get(job_id)
            if watch is None or (beat is not None and beat > watch.attempt):
                # A lease we see first gets a fresh full term. Its heartbeat file names the
                # attempt and holds the worker, so the job file is read only when there is none.
                watch = self._watch_heartbeat(leased_fd, job_id, beat, now) if beat else self._first_look(job_id, now)
                if watch is None:
                    continue
            counter = _read_counter(leased_fd, heartbeat_name(job_id, watch.attempt))
            if counter != watch.counter:
                watch.counter, watch.changed = counter, now
            why = None
            if watch.worker and is_held(self.sp.layout.fd("locks"), worker_lock_name(watch.worker)) is False:
                why = f"worker {watch.worker} died (its lock was freed)"
                dead_writer = True
            elif now - watch.changed > self.lease_seconds:
                why = f"no heartbeat for {self.lease_seconds:g}s"
            if why is not None and expire(self.sp, job_id, watch.attempt, why) is not None:
                self.leases.pop(job_id, None)
        if dead_writer:
            sweep_tmp(self.sp)  # a dead worker's staged result (or rewrite) is garbage now: sweep it

    def _watch_heartbeat(self, leased_fd: int, job_id: str, attempt: int, now: float) -> LeaseWatch | None:
        counter = _read_counter(leased_fd, heartbeat_name(job_id, attempt))
        beat = parse_heartbeat(counter)
        if beat is None:
            # Not a counter a worker wrote (a planted directory, a beat being rewritten): the job
            # file says which attempt holds; a lease we already watch keeps its term.
            return self.leases.get(job_id) or self._first_look(job_id, now)
        watch = LeaseWatch(attempt, beat[1], counter, now)
        self.leases[job_id] = watch
        return watch

    def _first_look(self, job_id: str, now: float) -> LeaseWatch | None:
        try:
            job_file = read_job(self.sp, State.LEASED, job_id)
        except (FileNotFoundError, InvalidJob):
            resync_locked(self.sp, job_id)
            return None
        lease = job_file.lease
        if lease is None or lease.attempt != job_file.attempt:
            resync_locked(self.sp, job_id)  # a claim that died before recording its lease
            return None
        watch = LeaseWatch(job_file.attempt, lease.worker, None, now)
        watch.counter = _read_counter(self.sp.layout.fd(State.LEASED), heartbeat_name(job_id, watch.attempt))
        self.leases[job_id] = watch
        return watch

    # -- tasks nobody handles ----------------------------------------------------------------

    def _warn_unhandled(self, now: float) -> None:
        """One WARNING per task whose ready jobs no live worker handles (``spool.workers``), once
        it has been so for UNHANDLED_GRACE_SECONDS (workers starting beside us have not said what
        they handle yet); again only after a worker for it has come and gone."""
        try:
            unhandled = unhandled_ready(self.sp)
        except (OSError, SpoolError) as err:  # the ledger's errors are typed (LedgerError, DiskFull)
            log.debug("could not list the live workers' tasks: %s", err)
            return
        for task in list(self.unhandled_since):
            if task not in unhandled:
                del self.unhandled_since[task]
                self.unhandled_warned.discard(task)
        for task, ready in unhandled.items():
            since = self.unhandled_since.setdefault(task, now)
            if task not in self.unhandled_warned and now - since >= UNHANDLED_GRACE_SECONDS:
                self.unhandled_warned.add(task)
                log.warning("%d ready job(s) of task %r: %s", ready, task, unhandled_warning(task))

    # -- delays and backoffs -----------------------------------------------------------------

    def _load_timers(self) -> None:
        """Each pending job that is not ready gets a due time on our clock, once."""
        waiting_ids = set(self.sp.ledger.not_ready_pending())
        for job_id in list(self.timers):
            if job_id not in waiting_ids:
                del self.timers[job_id]
        for job_id in waiting_ids - set(self.timers):
            try:
                job_file = read_job(self.sp, State.PENDING, job_id)
            except (FileNotFoundError, InvalidJob):
                continue
            delay = job_file.backoff_seconds or 0.0
            if job_file.job.not_before is not None:
                wall = parse_time(job_file.job.not_before, "not_before").timestamp()
                delay = max(delay, wall - time.time())
            self.timers[job_id] = self.clock() + max(delay, 0.0)

    def _fire_timers(self) -> None:
        now = self.clock()
        for job_id, due in sorted(self.timers.items(), key=lambda item: item[1]):
            if due > now:
                break
            if make_ready(self.sp, job_id):
                del self.timers[job_id]

    # -- chains ------------------------------------------------------------------------------

    def _advance_chains(self, arrivals: dict[str, set[str]]) -> None:
        candidates = set(arrivals.get(State.WAITING.value, ()))
        for folder in (State.DONE.value, State.DEAD.value):
            for job_id in arrivals.get(folder, ()):
                candidates.update(self.sp.ledger.dependents(job_id))
        for job_id in sorted(candidates):
            advance_waiting(self.sp, job_id)


def _read_counter(dir_fd: int, name: str) -> bytes | None:
    try:
        return fs.read_file(dir_fd, name, 64)
    except (OSError, InvalidJob):  # gone, or planted (a directory): no beat seen; never fatal
        return None


def _coordinator_lock(sp: Spool) -> Lock:
    """Take ``locks/coordinator.lock`` through the locks/ folder's fd (a renamed spool keeps
    working), waiting while another coordinator holds it; the kernel frees it when we die."""
    locks_fd = sp.layout.fd("locks")
    lock = acquire(locks_fd, coordinator_lock_name(), blocking=False)
    if lock is None:
        log.info("another coordinator runs; waiting for its lock")
        lock = acquire(locks_fd, coordinator_lock_name(), blocking=True)
    assert lock is not None  # a blocking acquire returns only once it holds the lock
    return lock


def run_coordinator(sp: Spool) -> int:
    crash.arm("coordinator", os.environ)
    return Coordinator(sp).run()
