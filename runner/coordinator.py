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
local worker whose liveness lock is free is dead: its lease is expired at once. Paused means
stopped (``runner.pauses``), never busy: a pass fires schedules for at most ``_lease_period()``,
and ingests as long, leaving the rest to the next pass. A full disk pauses the loop, never ends it.

A wake-up runs only the parts of a pass its events or the clock call for (docs/performance.md).
The lease watch (list leased/, read each counter, probe each worker's lock once) runs at most
every LEASE_WATCH_SECONDS after leases land, at least every ``_lease_period()``, and when a term
runs out; between watches the lease holders' locks are probed every WORKER_PROBE_SECONDS.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType

from spool.base import crash
from spool.base.errors import DiskFull, DurabilityError, InvalidJob, LedgerError, LedgerUnusable
from spool.fsck import sweep_tmp
from spool.moves import advance_waiting, expire, ingest_drop, read_job, reconcile, resync_under_lock
from spool.disk import SCHEDULES, WAKE_NAME, Lock, State, acquire, fs, is_generated_id, is_held, is_valid_id
from spool.disk import coordinator_lock_name, heartbeat_name, is_ignored_name, job_id_of, parse_heartbeat
from spool.disk import parse_heartbeat_name, worker_lock_name
from spool.runner.diskfull import DiskFullPause
from spool.runner.leaseview import LeaseWatch, read_counter
from spool.runner.pauses import PauseWatch
from spool.runner.scheduler import Scheduler
from spool.runner.timers import fire_timers, load_timers
from spool.spool import Spool
from spool.base.timetext import format_time
from spool.queues import sync as sync_queues
from spool.runner.unhandled import UnhandledWarner

log = logging.getLogger("spool.coordinator")

LEASE_WATCH_SECONDS = 0.1  # new leases landing wake a lease watch at most this often
# The liveness locks of the workers holding leases, between watches. A SIGKILLed worker's job
# starts its next attempt this long plus its first backoff (0.5-1 s by default) after the kill.
WORKER_PROBE_SECONDS = 0.05


class Coordinator:
    def __init__(self, sp: Spool, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.sp = sp
        self.clock = clock
        self.lease_seconds = sp.settings.lease_seconds
        self.reconcile_seconds = sp.settings.reconcile_seconds  # a period for listings and worker checks
        self.leases: dict[str, LeaseWatch] = {}
        self.timers: dict[str, float] = {}  # job id -> when (our clock) it becomes ready
        # Stopped, not busy: a lease watch after a pause longer than this gives every lease a fresh term.
        self.pauses = PauseWatch(max(self.lease_seconds / 2.0, 5.0), clock=clock)
        self.disk_full = DiskFullPause(log, "coordinator")
        self.drop_backlog: list[str] = []  # drops a pass left for the next (its ingest budget ran out)
        self.last_reconcile = self.last_published = -1e18
        self._stop = False
        self.unhandled = UnhandledWarner()
        self.last_lease_watch = -1e18
        self.next_lease_watch = -1e18  # our clock: a lease watch is due (a term may run out)
        self.next_probe = -1e18  # our clock: probe the leases' workers' locks
        self.leases_landed = False  # a job landed in leased/ since the last lease watch
        self.may_wait = True  # a job may be in waiting/ (the last reconcile, or an arrival since)
        self.scheduler = Scheduler(sp)  # schedules/: the next due slot bounds our wait

    # -- life --------------------------------------------------------------------------------

    def run(self) -> int:
        from spool.runner.wake import SETTLE_SECONDS, Waker  # start-up: watchdog only when running

        lock = _coordinator_lock(self.sp)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        # schedules/ wakes on every write: a schedule edited in place by hand is picked up too.
        folders = [self.sp.layout.path(state) for state in State] + [self.sp.layout.path(SCHEDULES)]
        # Jobs land in these only by rename or link: their in-place writes (dot-files) need no pass.
        landings = [self.sp.layout.path(state) for state in State if state is not State.PENDING]
        waker = Waker(folders, landings_only=landings)
        log.info("coordinator started (lease %ss)", self.lease_seconds)
        self.pauses.start()
        try:
            published = False
            landed: list[tuple[str, str]] = []
            while not self._stop:
                wait = None
                try:
                    if not published:
                        published = self._publish_start()
                    self.run_pass(landed)
                    self.disk_full.cleared("the coordinator's passes resume")
                except LedgerUnusable as err:
                    self._rebuild_ledger(err)
                except DiskFull:
                    # A pause of ours, not an exit: the moves this pass cut short are finished by
                    # whoever takes their job's lock next (as after a crash; our next reconcile at
                    # the latest). Beats may not land on a full disk either: fresh terms after it.
                    self.last_reconcile, wait = -1e18, self.disk_full.met("ingest, expiry and schedules wait")
                    self.leases.clear()
                landed = waker.wait(self._next_wait() if wait is None else wait, settle_seconds=SETTLE_SECONDS)
            sweep_tmp(self.sp)  # what a worker that died since our last sweep staged is garbage
        except (DurabilityError, DiskFull, OSError) as err:
            # The disk failed under a move; a failed fsync is final, never retried. Exit for the
            # supervisor to restart us: a move left half made is settled by the next reconcile.
            log.error("coordinator stops, the spool's storage failed: %s", err)
            return 75 if isinstance(err, DiskFull) else 1  # 75: the supervisor retries, never gives up
        except LedgerError as err:  # not a corrupt file (that is rebuilt above): locked too long, I/O
            log.error("coordinator stops, the ledger failed: %s", err)
            return 1
        finally:
            self.pauses.stop()
            waker.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.release()
        log.info("coordinator stopped")
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop = True

    def _publish_start(self) -> bool:
        """True once our term is published (a full disk may refuse it: then at a later pass)."""
        try:
            self._publish_meta()
        except LedgerUnusable as err:
            self._rebuild_ledger(err)
        return True

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
        now = self.clock()
        wait = self._lease_period()
        if self.timers:
            wait = min(wait, min(self.timers.values()) - now)
        if self.leases:
            wait = min(wait, self.next_lease_watch - now, self.next_probe - now)
        if self.leases_landed:
            wait = min(wait, self.last_lease_watch + LEASE_WATCH_SECONDS - now)
        if self.drop_backlog:
            return 0.0
        return max(min(wait, self.scheduler.seconds_until_due()), 0.0)

    def _lease_period(self) -> float:
        """The longest a lease watch waits: the counters are sampled at least this often."""
        return min(self.sp.settings.poll_seconds, max(self.lease_seconds / 6.0, 0.05), 1.0)

    # -- one pass ----------------------------------------------------------------------------

    def run_pass(self, landed: list[tuple[str, str]] | None = None) -> None:
        """One pass. ``landed`` is what the Waker saw; None (a caller outside the event loop)
        runs every part, the lease watch included, whatever is due."""
        now = self.clock()
        # First, so a slot's job is submitted on time; within a budget, so a storm of firings
        # (10,000 schedules due at once) is cut into passes and the lease watch runs between them.
        self.scheduler.run_pass(landed or [], budget_seconds=self._lease_period())
        drops, arrivals = self._sort_landed(landed or [])
        listing_drops = None
        if now - self.last_reconcile >= self.reconcile_seconds:
            self.last_reconcile = now
            sync_queues(self.sp)  # before the rows: a ledger made anew has its limits first
            listing = reconcile(self.sp, full=False)  # a full pass at start and every minute (FULL_SECONDS)
            drops = listing_drops = listing.drops
            arrivals = {State.WAITING.value: set(self.sp.ledger.waiting())}
            self.may_wait = bool(arrivals[State.WAITING.value])
            sweep_tmp(self.sp)
            load_timers(self.sp, self.timers, self.clock)
            self.unhandled.check(self.sp, now)
        self._ingest_within(drops, self.clock() + self._lease_period())
        if drops and listing_drops is drops:
            # reconcile counted these before they were ingested: count what is left, or each
            # ingested drop holds a place against max_pending twice until the next reconcile.
            pending_fd = self.sp.layout.fd(State.PENDING)
            self.sp.ledger.set_meta(drops=sum(1 for name in drops if fs.exists(pending_fd, name)))
        now = self.clock()  # the lease watch decides on the time it runs, not the pass's start
        if landed is None or self._lease_watch_due(now):
            self._watch_leases(now)
        elif self.leases and now >= self.next_probe:
            self._probe_workers(now)
        fire_timers(self.sp, self.timers, self.clock)  # delays and backoffs that ran out
        self._advance_chains(arrivals)
        if now - self.last_published >= 1.0:  # `spool stats` needs seconds, not every pass
            self.last_published = now
            self.sp.ledger.set_meta(coordinator_seen=format_time(time.time()), lease_seconds=self.lease_seconds)
            sync_queues(self.sp)  # a queue file edited by hand; `spool queue set` syncs its own
            self.sp.ledger.prune_claims(int(time.time() * 1000))

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
        self.may_wait = self.may_wait or bool(arrivals.get(State.WAITING.value))
        self.leases_landed = self.leases_landed or bool(arrivals.get(State.LEASED.value))
        if arrivals.get(State.PENDING.value) or woken:
            load_timers(self.sp, self.timers, self.clock)  # a retry or a delayed job may have landed
        return list(dict.fromkeys(drops)), arrivals

    def _ingest_within(self, drops: list[str], until: float) -> None:
        """Ingest ``drops`` (and what earlier passes left) until ``until`` on our clock; the rest
        waits in ``drop_backlog`` for the next pass, which comes at once."""
        todo = list(dict.fromkeys([*self.drop_backlog, *drops]))
        for n, name in enumerate(todo):
            if n and self.clock() >= until:
                self.drop_backlog = todo[n:]
                return
            self._ingest(name)
        self.drop_backlog = []

    def _ingest(self, name: str) -> None:
        try:
            ingest_drop(self.sp, name)
        except OSError as err:
            log.error("ingest of pending/%s failed: %s", name, err)

    # -- leases ------------------------------------------------------------------------------

    def _lease_watch_due(self, now: float) -> bool:
        landed = self.leases_landed and now - self.last_lease_watch >= LEASE_WATCH_SECONDS
        return landed or now >= self.next_lease_watch

    def _probe_workers(self, now: float) -> None:
        """Between lease watches: a lease whose worker's lock is free calls the watch at once."""
        self.next_probe = now + WORKER_PROBE_SECONDS
        alive: dict[str, bool] = {}
        if any(not self._worker_alive(watch.worker, alive) for watch in self.leases.values()):
            self._watch_leases(now)

    def _worker_alive(self, worker: str | None, alive: dict[str, bool]) -> bool:
        """Whether ``worker``'s liveness lock is held (or unknown), probed once per ``alive``."""
        if not worker:
            return True  # no worker named: only the counter can expire it
        if worker not in alive:
            alive[worker] = is_held(self.sp.layout.fd("locks"), worker_lock_name(worker)) is not False
        return alive[worker]

    def _watch_leases(self, now: float) -> None:
        paused = self.pauses.take(now)
        if paused is not None:
            # Stopped (SIGSTOP, a frozen VM), not busy: nobody could heartbeat into our view.
            log.warning("coordinator was paused %.1fs; every lease gets a fresh term", paused)
            self.leases.clear()
        self.last_lease_watch, self.leases_landed = now, False
        self.next_probe = now + WORKER_PROBE_SECONDS
        due = now + self._lease_period()
        alive: dict[str, bool] = {}
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
            counter = read_counter(leased_fd, heartbeat_name(job_id, watch.attempt))
            if counter != watch.counter:
                watch.counter, watch.changed = counter, now
            why = None
            dead = not self._worker_alive(watch.worker, alive)
            if dead:
                why = f"worker {watch.worker} died (its lock was freed)"
                dead_writer = True
            elif now - watch.changed > self.lease_seconds:
                why = f"no heartbeat for {self.lease_seconds:g}s"
            if why is None:
                due = min(due, watch.changed + self.lease_seconds + 0.001)
            elif expire(self.sp, job_id, watch.attempt, why) is not None:
                self.leases.pop(job_id, None)
            elif dead:
                self._recheck_dead_lease(job_id, now)
        self.next_lease_watch = due
        if dead_writer:
            sweep_tmp(self.sp)  # a dead worker's staged result (or rewrite) is garbage now: sweep it

    def _watch_heartbeat(self, leased_fd: int, job_id: str, attempt: int, now: float) -> LeaseWatch | None:
        counter = read_counter(leased_fd, heartbeat_name(job_id, attempt))
        beat = parse_heartbeat(counter)
        if beat is None:
            # Not a counter a worker wrote (a planted directory, a beat being rewritten): the job
            # file says which attempt holds; a lease we already watch keeps its term.
            return self.leases.get(job_id) or self._first_look(job_id, now)
        watch = LeaseWatch(attempt, beat[1], counter, now)
        self.leases[job_id] = watch
        return watch

    def _recheck_dead_lease(self, job_id: str, now: float) -> None:
        """``expire`` refused a dead worker's lease: its lock was busy, the job moved on, or the
        file's attempt is not the heartbeat's (a claim died between writing the new attempt's
        heartbeat, first, under the job's lock, and recording the lease). The job file decides:
        ``_first_look`` watches the lease it records, or settles a file with none (``resync_under_lock``
        counts the try as spent). This coordinator finishes it, now or (lock busy) on a later pass."""
        self.leases.pop(job_id, None)
        self._first_look(job_id, now)

    def _first_look(self, job_id: str, now: float) -> LeaseWatch | None:
        try:
            job_file = read_job(self.sp, State.LEASED, job_id)
        except (FileNotFoundError, InvalidJob):
            resync_under_lock(self.sp, job_id)
            return None
        lease = job_file.lease
        if lease is None or lease.attempt != job_file.attempt:
            resync_under_lock(self.sp, job_id)  # a claim that died before recording its lease
            return None
        watch = LeaseWatch(job_file.attempt, lease.worker, None, now)
        watch.counter = read_counter(self.sp.layout.fd(State.LEASED), heartbeat_name(job_id, watch.attempt))
        self.leases[job_id] = watch
        return watch

    # -- chains ------------------------------------------------------------------------------

    def _advance_chains(self, arrivals: dict[str, set[str]]) -> None:
        candidates = set(arrivals.get(State.WAITING.value, ()))
        if not self.may_wait:
            return  # nothing waits on what finished: the next reconcile sees any job that does
        for folder in (State.DONE.value, State.DEAD.value):
            for job_id in arrivals.get(folder, ()):
                candidates.update(self.sp.ledger.dependents(job_id))
        for job_id in sorted(candidates):
            advance_waiting(self.sp, job_id)


def _coordinator_lock(sp: Spool) -> Lock:
    """Take ``locks/coordinator.lock`` through the locks/ folder's fd (a renamed spool keeps
    working), waiting while another coordinator holds it; the kernel frees it when we die."""
    locks_fd = sp.layout.fd("locks")
    lock = acquire(locks_fd, coordinator_lock_name(), blocking=False)
    if lock is None:
        log.info("another coordinator runs; waiting for its lock")
        lock = acquire(locks_fd, coordinator_lock_name(), blocking=True)
    return lock


def run_coordinator(sp: Spool) -> int:
    crash.arm("coordinator", os.environ)
    return Coordinator(sp).run()
