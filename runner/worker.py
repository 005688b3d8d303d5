"""``spool worker``: claim jobs of the tasks it knows, run each attempt in a child, report.

The worker itself holds the lease: it heartbeats between polls of the attempt child, writes the
result and moves the job; the child only runs the handler (``runner.child``). While it lives it
holds ``locks/worker-<name>.lock``, so when it dies the coordinator sees the lock freed and
expires its lease at once instead of waiting out the term.

Stopping: the first SIGTERM/SIGINT stops claiming; a running attempt may finish within
``grace_seconds``, after which it is killed and the job released (no try spent). A second
signal kills the attempt and releases at once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from types import FrameType

from spool import crash, registry
from spool.errors import DiskFull, DurabilityError, LeaseLost, LedgerError, SpoolError
from spool.job import JobFile
from spool.layout import State, log_name
from spool.locks import Lock, acquire, worker_lock_name
from spool.runner.child import AttemptRequest, Child, Outcome
from spool.runner.wake import Waker
from spool.spool import Spool
from spool.transitions import Lease, cancel_leased, claim, complete, fail, heartbeat, lease_status, release

log = logging.getLogger("spool.worker")


def worker_name() -> str:
    """Unique per process: a restarted worker is a new holder, never mistaken for the old one."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"


class Worker:
    def __init__(self, sp: Spool, *, import_modules: Sequence[str] = (), allow_shell: bool = False,
                 name: str | None = None, burst: bool = False, sys_path: Sequence[str] = ()) -> None:
        self.sp = sp
        self.name = name or worker_name()
        self.burst = burst  # exit when no job is ready (the demo, tests)
        self.allow_shell = allow_shell
        self.import_modules = list(dict.fromkeys([*sp.settings.tasks, *import_modules]))
        registry.import_task_modules(self.import_modules)
        self.tasks = sorted(registry.registered() | ({"shell"} if allow_shell else set()))
        self.child = Child(import_modules=self.import_modules, allow_shell=allow_shell,
                           max_result_bytes=sp.settings.max_result_bytes, sys_path=sys_path)
        self._signals = 0
        self._stop_requested_at: float | None = None
        self._waker: Waker | None = None
        self._lock: Lock | None = None
        self._ledger_waiting = False  # said once that the ledger failed

    # -- life --------------------------------------------------------------------------------

    def run(self) -> int:
        self._lock = acquire(self.sp.layout.fd("locks"), worker_lock_name(self.name), blocking=True)
        if self._lock is None:
            raise SpoolError(f"another worker is already named {self.name}")
        started = time.time()
        self._seen(started, started)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        self._waker = Waker([self.sp.layout.path(State.PENDING)])
        log.info("worker %s started: tasks %s", self.name, ", ".join(self.tasks))
        last_seen = time.monotonic()
        try:
            while not self._signals:
                try:
                    job_file = claim(self.sp, self.name, self.tasks)
                    self._ledger_waiting = False
                    if job_file is not None:
                        self._run_attempt(job_file)
                except LedgerError as err:
                    self._ledger_trouble(err)
                    job_file = None
                if job_file is None:
                    if self.burst:
                        break
                    self._waker.wait(self.sp.settings.poll_seconds)
                if time.monotonic() - last_seen > 5:
                    last_seen = time.monotonic()
                    self._seen(started, time.time())
        except (DurabilityError, DiskFull, OSError) as err:
            # The disk failed under a transition; a failed fsync is final, never retried (RELIABILITY.md).
            # Exit for the supervisor to restart us: our lock is freed, so the coordinator expires our
            # lease at once and settles a move we left half made.
            log.error("worker %s stops, the spool's storage failed: %s", self.name, err)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.child.close()
            self._waker.stop()
            self._lock.release()
        log.info("worker %s stopped", self.name)
        return 0

    def _seen(self, started: float, now: float) -> None:
        try:
            self.sp.ledger.worker_seen(self.name, os.getpid(), socket.gethostname(), started, now)
        except LedgerError as err:
            self._ledger_trouble(err)

    def _ledger_trouble(self, err: LedgerError) -> None:
        """An unusable ledger is rebuilt by the coordinator (or fsck --repair): wait for it, say so once.
        A move already committed stays committed; its missing row is the reconcile's to add."""
        if not self._ledger_waiting:
            self._ledger_waiting = True
            log.warning("worker %s: the ledger failed (%s); waiting for it to be usable again", self.name, err)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        if self._waker is not None:
            self._waker.poke()

    # -- one attempt -------------------------------------------------------------------------

    def _heartbeat_seconds(self) -> float:
        if self.sp.settings.heartbeat_seconds:
            return self.sp.settings.heartbeat_seconds
        published = self.sp.ledger.meta("lease_seconds")
        term = float(published) if published else self.sp.settings.lease_seconds
        return max(term / 3.0, 0.05)

    def _run_attempt(self, job_file: JobFile) -> None:
        lease = Lease(job_file.id, self.name, job_file.attempt)
        job = job_file.job
        interval = self._heartbeat_seconds()
        beats = 0
        heartbeat(self.sp, lease, beats)
        self.child.begin(AttemptRequest(
            job_id=job.id, attempt=lease.attempt, task=job.task, args=dict(job.args), timeout_seconds=job.timeout,
            tries_left=job.max_tries - job_file.tries,
            log_path=str(self.sp.layout.path("logs", log_name(job.id, lease.attempt)))))
        next_beat = time.monotonic() + interval
        while True:
            outcome = self.child.poll(max(0.0, min(next_beat - time.monotonic(), 0.5)))
            if outcome is not None:
                self._report(lease, outcome)
                return
            if self._must_stop_now():
                self.child.kill()
                self._release(lease)
                return
            if time.monotonic() >= next_beat:
                beats += 1
                heartbeat(self.sp, lease, beats)
                next_beat = time.monotonic() + interval
                status = lease_status(self.sp, lease)
                if status != "held":
                    self.child.kill()
                    self._give_up(lease, status)
                    return

    def _must_stop_now(self) -> bool:
        if not self._signals or self._stop_requested_at is None:
            return False
        return self._signals > 1 or time.monotonic() - self._stop_requested_at > self.sp.settings.grace_seconds

    def _report(self, lease: Lease, outcome: Outcome) -> None:
        try:
            if outcome.ok:
                complete(self.sp, lease, json.dumps(outcome.value, allow_nan=False).encode())
            else:
                fail(self.sp, lease, outcome.error or "failed", reject=outcome.reject)
        except LeaseLost as err:
            log.warning("attempt %d of %s dropped: %s", lease.attempt, lease.job_id, err)

    def _release(self, lease: Lease) -> None:
        try:
            release(self.sp, lease)
        except LeaseLost as err:
            log.warning("release of %s skipped: %s", lease.job_id, err)

    def _give_up(self, lease: Lease, status: str) -> None:
        if status == "cancel":
            try:
                cancel_leased(self.sp, lease)
            except LeaseLost as err:
                log.warning("cancel of %s: %s", lease.job_id, err)
        else:
            log.warning("attempt %d of %s killed: the lease was lost (expired or requeued)", lease.attempt,
                        lease.job_id)


def run_worker(sp: Spool, **options: object) -> int:
    crash.arm("worker", os.environ)
    return Worker(sp, **options).run()  # type: ignore[arg-type]
