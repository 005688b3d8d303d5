"""``spool worker``: claim jobs of the tasks it knows, run each attempt in a child, report.

The worker itself holds the lease: it heartbeats between polls of the attempt child, writes the
result and moves the job; the child only runs the handler (``runner.attempt.child``). While it lives it
holds ``locks/worker-<name>.lock``, so when it dies the coordinator sees the lock freed and
expires its lease at once instead of waiting out the term.

Stopping: the first SIGTERM/SIGINT stops claiming; a running attempt may finish within
``grace_seconds``, after which it is killed and the job released (no try spent). A second
signal kills the attempt and releases at once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Sequence
from types import FrameType

from spool import registry
from spool.attemptlog import AttemptLog
from spool.base.errors import DiskFull, DurabilityError, LeaseLost, LedgerError, SpoolError, UsageError
from spool.disk import State, log_name, worker_lock_name
from spool.disk import Lock, acquire_within
from spool.base.records import LeaseStatus
from spool.runner.attempt.loop import watch
from spool.runner.attempt.child import AttemptRequest, Child, Outcome
from spool.runner.attempt.parents import ParentResultsError, parent_results, scratch_dir_of
from spool.runner.diskfull import DiskFullPause
from spool.runner.keepalive import KeepAlive
from spool.runner.wake import Waker
from spool.spool import Spool
from spool.runner.batching import Batches
from spool.runner.fileslease import FilesLease, write_claim
from spool.moves import Held, claim_many, complete, fail, lease_status
from spool.base.records import Lease
from spool.workers import advertisement, check_worker_name, published_term

log = logging.getLogger("spool.worker")

DUPLICATE_WAIT_SECONDS = 0.5
TERM_MAX_AGE_SECONDS = 1.0  # a published term is read again after this (or a tenth of it), not per attempt


def worker_name() -> str:
    """Unique per process: a restarted worker is a new holder, never mistaken for the old one."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"


class Worker:
    def __init__(
        self,
        sp: Spool,
        *,
        import_modules: Sequence[str] = (),
        allow_shell: bool = False,
        name: str | None = None,
        burst: bool = False,
        sys_path: Sequence[str] = (),
        queues: Sequence[str] | None = None,
    ) -> None:
        self.sp = sp
        self.queues = sorted(set(queues)) if queues is not None else None  # None: every queue
        self.name = check_worker_name(name) if name is not None else worker_name()
        if name is not None:  # a generated name is never a token's (host-pid)
            from spool.tokens import TokenStore  # start-up: only a named worker reads the tokens

            TokenStore(sp).refuse_as_local_worker(name)
        self.burst = burst  # exit when no job is ready (the demo, tests)
        self.allow_shell = allow_shell
        self.import_modules = list(dict.fromkeys([*sp.settings.tasks, *import_modules]))
        registry.import_task_modules(self.import_modules)
        self.tasks = sorted(registry.registered() | ({"shell"} if allow_shell else set()))
        self.child = Child(
            import_modules=self.import_modules,
            allow_shell=allow_shell,
            max_result_bytes=sp.settings.max_result_bytes,
            sys_path=sys_path,
        )
        self._signals = 0
        self._stop_requested_at: float | None = None
        self._waker: Waker | None = None
        self._lock: Lock | None = None
        self._overruled_term: float | None = None  # the published term we last warned about
        self._term = (0.0, -math.inf)  # (the published term, monotonic when read)
        self._disk_full = DiskFullPause(log, f"worker {self.name}")  # while claims or completions meet ENOSPC
        self._ledger_waiting = False  # said once that the ledger failed
        self._batches = Batches(sp, self.name, self.save_outcome)  # group commit (runner.batching)
        self._keep_alive = KeepAlive(sp)  # every lease we hold, while an outcome waits for room

    # -- life --------------------------------------------------------------------------------

    def run(self) -> int:
        # A moment's wait, not none: a reader probing a dead worker's lock (is_held) holds it for
        # an instant. A live worker of the same name holds it for good: refuse, never queue behind it.
        self._lock = acquire_within(self.sp.layout.fd("locks"), worker_lock_name(self.name), DUPLICATE_WAIT_SECONDS)
        if self._lock is None:
            raise UsageError(
                f"another worker named {self.name} is running (its lock locks/"
                f"{worker_lock_name(self.name)} is held); pick another --name"
            )
        self._advertise()
        started = time.time()
        self._seen(started, started)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        self._waker = Waker([self.sp.layout.path(State.PENDING)])
        queues = ", ".join(self.queues) if self.queues is not None else "all"
        log.info("worker %s started: tasks %s; queues %s", self.name, ", ".join(self.tasks), queues)
        last_seen = time.monotonic()
        try:
            while not self._signals:
                try:
                    if self._batches.due() <= time.monotonic():
                        self._batches.run()
                    held = self._batches.next_queued() or self._claim()
                    self._ledger_waiting = False
                    if held is not None:
                        self._run_attempt(held)
                except LedgerError as err:
                    self._ledger_trouble(err)
                    held = None
                if held is None:
                    self._batches.flush()  # nothing to run: save what waits before waiting
                    if self.burst:
                        break
                    if not self._waker.wait(self._idle_wait()):
                        self._batches.rest()  # a quiet poll: tmp/ clean at rest
                if time.monotonic() - last_seen > 5:
                    last_seen = time.monotonic()
                    self._seen(started, time.time())
        except (DurabilityError, DiskFull, OSError) as err:
            # The disk failed under a transition; a failed fsync is final, never retried (the kernel may
            # already have dropped the pages: docs/reliability.md, "The recipe every move follows").
            # Exit for the supervisor to restart us: our lock is freed, so the coordinator expires our
            # lease at once and settles a move we left half made. A full disk where we don't wait for
            # room ourselves (a release, a cancel) is exit 75: the supervisor restarts us, never gives up.
            log.error("worker %s stops, the spool's storage failed: %s", self.name, err)
            return 75 if isinstance(err, DiskFull) else 1
        finally:
            self._end_batches()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.child.close()
            self._waker.stop()
            self._lock.release()
        log.info("worker %s stopped", self.name)
        return 0

    def _end_batches(self) -> None:
        """At any exit: give back the batch's waiting jobs and save the results that wait. After
        a failed sync this may fail too: then the leases expire, as after a crash."""
        try:
            self._batches.end()
        except (SpoolError, OSError) as err:
            log.error("worker %s: could not save or give back what its batch held: %s", self.name, err)

    def _advertise(self) -> None:
        """Say what we handle in our own liveness lock (``spool.workers``), for status and stats."""
        assert self._lock is not None
        try:
            self._lock.publish(advertisement(self.name, self.tasks))
        except OSError as err:  # a full disk: readers then know a live worker, not its tasks
            log.warning("worker %s could not advertise its tasks: %s", self.name, err)

    def _seen(self, started: float, now: float) -> None:
        try:
            self.sp.ledger.worker_seen(self.name, os.getpid(), socket.gethostname(), started, now)
        except LedgerError as err:
            self._ledger_trouble(err)
        except DiskFull:  # ENOSPC from the files or the ledger (both typed DiskFull)
            pass  # `stats` shows us as seen a little earlier; the lock says we live.

    def _ledger_trouble(self, err: LedgerError) -> None:
        """An unusable ledger is rebuilt by the coordinator (or fsck --repair): wait for it, say so once.
        A move already committed stays committed; its missing row is the reconcile's to add."""
        if not self._ledger_waiting:
            self._ledger_waiting = True
            log.warning("worker %s: the ledger failed (%s); waiting for it to be usable again", self.name, err)

    def _claim(self) -> Held | None:
        """``claim``, except that a full disk pauses claiming with a backoff instead of ending us:
        each exit would cost the job we were claiming a try, and the next worker meets the same
        disk. A claim that met the full disk took nothing (``claim`` puts the job back). While
        jobs land one by one, it first lingers (``Batches.linger``) so that they share it."""
        if (linger := self._batches.linger()) and self._waker is not None:
            self._waker.gather(linger)  # a stop's poke ends it sooner
        try:
            asked = self._batches.claim_size()
            claimed = claim_many(self.sp, self.name, self.tasks, asked, self.queues, early=True)
        except DiskFull as err:  # ENOSPC from the files or the ledger (both typed DiskFull)
            self._disk_full_pause(f"claiming paused: {err}")
            return None
        self._disk_full.cleared("claiming resumes")
        self._batches.claimed(len(claimed), asked)
        if not claimed:
            return None
        self._batches.queued.extend(claimed[1:])
        return claimed[0]

    def _idle_wait(self) -> float:
        """How long to sleep with nothing to run: until a landing wakes us, the slow poll, or the
        moment a queue's full rate window that held a job back has room again."""
        retry_at = self.sp.ledger.retry_at
        if retry_at is None:
            return self.sp.settings.poll_seconds
        return min(self.sp.settings.poll_seconds, max(0.001, retry_at - time.time()))

    def _disk_full_pause(self, what: str, at_most: float = math.inf) -> None:
        """Log once per full-disk episode, then back off (0.2 s doubling to 5 s, or ``at_most``)."""
        assert self._waker is not None
        self._waker.wait(min(self._disk_full.met(what), at_most))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        if self._waker is not None:
            self._waker.poke()

    # -- one attempt -------------------------------------------------------------------------

    def heartbeat_interval(self) -> float:
        """A third of the term the coordinator publishes, unless set; a set heartbeat that cannot
        keep the published term (over half of it: a coordinator with a shorter lease) is
        overruled, with one warning per term, because only the coordinator's term decides."""
        now = time.monotonic()  # a new term is seen this late: sooner than a running attempt's next beat
        if now - self._term[1] >= min(TERM_MAX_AGE_SECONDS, self._term[0] / 10.0):
            self._term = (published_term(self.sp), now)  # an unreadable ledger: our setting, the job is never dropped
        term = self._term[0]
        derived = max(term / 3.0, 0.05)
        explicit = self.sp.settings.heartbeat_seconds
        if not explicit:
            return derived
        if explicit > term / 2.0:
            if self._overruled_term != term:
                self._overruled_term = term
                log.warning(
                    "worker %s: heartbeat_seconds %gs (%s) cannot keep the coordinator's lease of %gs; "
                    "heartbeating every %.3gs instead",
                    self.name,
                    explicit,
                    self.sp.settings.sources.get("heartbeat_seconds", "default"),
                    term,
                    derived,
                )
            return derived
        return explicit

    def _run_attempt(self, held: Held) -> None:
        # Its first heartbeat (counter 0) was written by the claim, before its rename. An early
        # claim's content is written once the child has the attempt (FilesLease.started), or
        # before anything else reads the lease; at the latest here, whatever ended the attempt.
        try:
            self._open_attempt(held)
        finally:
            write_claim(held)

    def _open_attempt(self, held: Held) -> None:
        lease = Lease(held.job_file.id, self.name, held.job_file.attempt)
        name = log_name(lease.job_id, lease.attempt)
        try:
            # Through the folders' fds: a spool renamed while we run keeps working.
            attempt_log = AttemptLog(
                self.sp.layout.fd("logs"), self.sp.layout.fd("tmp"), name, self.sp.settings.max_log_bytes
            )
        except OSError as err:
            error = f"cannot open attempt log logs/{name}: {err.strerror or err}"
            write_claim(held)
            self.report_outcome(lease, held, Outcome(ok=False, value=None, error=error, reject=False))
            return
        try:
            self._watch_attempt(held, lease, attempt_log)
        finally:
            attempt_log.close()
            if attempt_log.error is not None:
                log.warning(
                    "attempt %d of %s: its log stopped at a failed write: %s",
                    lease.attempt,
                    lease.job_id,
                    attempt_log.error.strerror or attempt_log.error,
                )

    def _watch_attempt(self, held: Held, lease: Lease, attempt_log: AttemptLog) -> None:
        job_file = held.job_file
        job = job_file.job
        try:
            parents = parent_results(self.sp, job)
        except ParentResultsError as err:  # before anything runs (runner.attempt.parents)
            FilesLease(self, lease, held, attempt_log).report(Outcome(False, None, str(err), err.reject))
            return
        request = AttemptRequest(
            job_id=job.id,
            attempt=lease.attempt,
            task=job.task,
            args=dict(job.args),
            timeout_seconds=job.timeout,
            tries_left=job.max_tries - job_file.tries,
            log=attempt_log,
            parent_results=parents,
            scratch_dir=scratch_dir_of(self.sp) if job.task == "shell" else None,
        )
        self._batches.attempt_starts()
        self._keep_alive.running = lease
        try:
            watch(self.child, request, FilesLease(self, lease, held, attempt_log), self._must_stop_now, self._batches)
        finally:
            self._keep_alive.running = None
            self._batches.attempt_ended()

    def _must_stop_now(self) -> bool:
        if not self._signals or self._stop_requested_at is None:
            return False
        return self._signals > 1 or time.monotonic() - self._stop_requested_at > self.sp.settings.grace_seconds

    def report_outcome(self, lease: Lease, held: Held, outcome: Outcome) -> None:
        """Complete or fail the attempt: a result waits briefly to be saved with the next ones
        (``runner.batching``), a failure is saved at once."""
        if outcome.ok:
            self._batches.hold(lease, held, outcome)
        else:
            self.save_outcome(lease, held, outcome)

    def save_outcome(self, lease: Lease, held: Held | None, outcome: Outcome) -> None:
        """Complete or fail the attempt now. A full disk doesn't throw a finished attempt away: we
        keep its lease alive, and every other we hold (``runner.keepalive``), and retry until the
        move goes through or the lease is lost. An attempt running meanwhile (this was a batch's
        turn in its loop) is still ended at its timeout; its outcome waits for the loop."""
        while True:
            try:
                if outcome.ok:
                    complete(self.sp, lease, json.dumps(outcome.value, allow_nan=False).encode(), held)
                else:
                    fail(self.sp, lease, outcome.error or "failed", reject=outcome.reject, held=held)
                break
            except LeaseLost as err:
                log.warning("attempt %d of %s dropped: %s", lease.attempt, lease.job_id, err)
                break
            except DiskFull:  # ENOSPC from the files or the ledger (both typed DiskFull): wait for room
                pass
            if self._must_stop_now():
                log.warning(
                    "attempt %d of %s: stopping before its outcome could be saved (disk full); its lease will expire",
                    lease.attempt,
                    lease.job_id,
                )
                return
            self._disk_full_pause(
                f"attempt {lease.attempt} of {lease.job_id} ended; saving its outcome waits for room",
                at_most=min(self.heartbeat_interval(), max(0.0, self.child.seconds_left())),
            )
            self.child.end_if_overdue()  # the running attempt's timeout is served meanwhile
            self._keep_alive.beat(lease, self._batches.waiting_leases())
            status = lease_status(self.sp, lease, held)
            if status is not LeaseStatus.HELD:
                log.warning(
                    "attempt %d of %s dropped while the disk was full: the lease was lost (%s)",
                    lease.attempt,
                    lease.job_id,
                    status,
                )
                return
        self._disk_full.cleared(f"attempt {lease.attempt} of {lease.job_id} saved")
