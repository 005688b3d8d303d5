"""Supervise a fixed set of child processes on one host: restart what dies, stop all on a signal.

Generic on purpose (stdlib only, nothing from ``spool``): ``spool run`` builds one ``ChildSpec``
for the coordinator and one per worker and hands them to ``Supervisor``.

Rules (the contract of ``spool run``):

- Every child starts in its own session, so a terminal's Ctrl-C reaches only the supervisor,
  which forwards the stop deliberately. Each child gets ``SPOOL_PARENT_PID`` and is expected to
  call ``die_with_parent`` with it, so a SIGKILLed supervisor takes its children with it.
- A child that exits, for any reason, is restarted alone (the others keep running) after
  ``min(0.1 s * 2**k, 5 s)``; k counts consecutive quick restarts of that child and resets once
  it has been alive 10 s. Restarts drop ``SPOOL_CRASH_AT``, so a crash-point test crashes once.
- Give-up: a child that exits with an error status (non-zero, not killed by a signal) within 1 s
  of starting, 5 times in a row, stops everything and ``run()`` returns 1. Exit 75 (EX_TEMPFAIL,
  spool's "try later": a full disk) is no error: it is restarted with the same growing delay
  however often it comes, and neither counts toward the 5 nor breaks a run of them. Giving up
  over a condition that passes by itself would stop workers that hold finished attempts.
- First SIGTERM/SIGINT: SIGTERM to every child once, no more restarts, wait up to
  ``grace_seconds + 5`` (the workers need the grace for running attempts, then a moment to
  release the rest), SIGKILL stragglers, return 0. Second signal: SIGKILL everything now, return
  0 (the operator asked for a stop and got one; 1 is kept for give-up only).

The loop is Huey's consumer shape: handlers only set a flag; the main thread polls the children
every 50 ms (a self-pipe via ``signal.set_wakeup_fd`` wakes it at once on a signal).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

__all__ = ["ChildSpec", "Supervisor"]

POLL_SECONDS = 0.05  # idle wake-ups: ~20/s, near-zero CPU, and a dead child is noticed quickly
BASE_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0
STABLE_SECONDS = 10.0  # alive this long: the next exit restarts after the base delay again
QUICK_EXIT_SECONDS = 1.0
GIVE_UP_AFTER = 5  # quick error exits in a row
STOP_SLACK_SECONDS = 5.0  # beyond grace_seconds: time for workers to release leases and exit
CRASH_ENV = "SPOOL_CRASH_AT"
PARENT_ENV = "SPOOL_PARENT_PID"
_START_FAILED = 127  # like a shell: the program could not be started at all
TRY_LATER_EXIT = os.EX_TEMPFAIL  # 75, the exit code of spool's TryLater and DiskFull


@dataclass(frozen=True)
class ChildSpec:
    """One supervised program: a unique name, its argv and its full environment."""

    name: str  # "coordinator", "worker-1", ...
    argv: Sequence[str]
    env: Mapping[str, str]


@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None  # set while waiting out a restart delay
    starts: int = 0
    quick_restarts: int = 0  # k in the delay formula
    error_streak: int = 0  # consecutive quick error exits


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def describe_status(returncode: int) -> str:
    """Popen's returncode in words: 'exit status 2' or 'signal SIGKILL'."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class Supervisor:
    """Run ``specs`` as children until a signal or a give-up; see the module docstring."""

    def __init__(
        self,
        specs: Sequence[ChildSpec],
        *,
        grace_seconds: float,
        log: Callable[[str], None] = _stderr_log,
        clock: Callable[[], float] = time.monotonic,
        error_log: Callable[[str], None] | None = None,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique: {names}")
        if grace_seconds < 0:
            raise ValueError("grace_seconds must be >= 0")
        self._children = [_Child(spec) for spec in specs]
        self._grace_seconds = grace_seconds
        self._log = log
        self._error = error_log or log  # the give-up: `spool run` logs it at ERROR
        self._clock = clock  # measures lifetimes and deadlines; sleeping is always real
        self._stop_requests = 0
        self._wake_fd = -1

    def request_stop(self) -> None:
        """First call: stop gracefully. Second call: stop now. Only sets a flag (signal-safe)."""
        self._stop_requests += 1

    def run(self) -> int:
        """Start all children and supervise them. Returns 0 after a stop, 1 after a give-up."""
        assert threading.current_thread() is threading.main_thread(), "signals need the main thread"
        with self._signals():
            try:
                for child in self._children:
                    self._start(child)
                gave_up = self._supervise()
                self._stop()
                return 1 if gave_up else 0
            finally:
                # Only reached with live children if something above raised: never orphan them.
                self._kill_all()

    # -- the loop ---------------------------------------------------------------------------

    def _supervise(self) -> bool:
        """Restart what dies until a stop is requested (False) or a child is given up on (True)."""
        while not self._stop_requests:
            now = self._clock()
            for child in self._children:
                if child.proc is not None:
                    returncode = child.proc.poll()
                    if returncode is not None and self._exited(child, returncode, now):
                        return True
                elif child.restart_at is not None and now >= child.restart_at:
                    if self._start(child):
                        return True
            waits = [c.restart_at - now for c in self._children if c.restart_at is not None]
            self._sleep(min([POLL_SECONDS, *waits]))
        return False

    def _start(self, child: _Child) -> bool:
        """Start (or restart) one child. True if a failure to start made us give up."""
        env = dict(child.spec.env)
        if child.starts:
            env.pop(CRASH_ENV, None)  # crash once, then recover
        env[PARENT_ENV] = str(os.getpid())
        child.starts += 1
        child.restart_at = None
        child.started_at = self._clock()
        try:
            child.proc = subprocess.Popen(
                list(child.spec.argv),
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches us only; we forward the stop
            )
        except OSError as exc:
            self._log(f"start {child.spec.name} failed: {exc}")
            return self._exited(child, _START_FAILED, child.started_at)
        self._log(f"start {child.spec.name} pid={child.proc.pid}")
        return False

    def _exited(self, child: _Child, returncode: int, now: float) -> bool:
        """Book an exit and schedule the restart. True if this child is to be given up on."""
        alive = now - child.started_at
        pid = child.proc.pid if child.proc is not None else None
        child.proc = None
        status = describe_status(returncode)
        self._log(f"exit {child.spec.name} pid={pid} {status} after {alive:.2f} s")
        # Only an error status counts: a signal means someone killed it, not that it is broken;
        # "try later" means the disk is full for now: wait and restart, never give up on it.
        if returncode == TRY_LATER_EXIT:
            self._log(f"{child.spec.name} says try later (a full disk?); restarting it after a delay")
        elif returncode > 0 and alive < QUICK_EXIT_SECONDS:
            child.error_streak += 1
        else:
            child.error_streak = 0
        if child.error_streak >= GIVE_UP_AFTER:
            self._error(
                f"give up: {child.spec.name} exited with {status} within "
                f"{QUICK_EXIT_SECONDS:g} s of starting, {GIVE_UP_AFTER} times in a row"
            )
            return True
        if alive >= STABLE_SECONDS:
            child.quick_restarts = 0
        delay = min(BASE_DELAY_SECONDS * 2**child.quick_restarts, MAX_DELAY_SECONDS)
        child.quick_restarts += 1
        child.restart_at = now + delay
        self._log(f"restart {child.spec.name} in {delay:.2f} s")
        return False

    # -- stopping ---------------------------------------------------------------------------

    def _running(self) -> list[_Child]:
        return [c for c in self._children if c.proc is not None]

    def _stop(self) -> None:
        """SIGTERM every child once, wait out the grace, SIGKILL stragglers; no restarts."""
        for child in self._children:
            child.restart_at = None
        running = self._running()
        wait_seconds = self._grace_seconds + STOP_SLACK_SECONDS
        self._log(f"stop: SIGTERM to {len(running)} children, waiting up to {wait_seconds:g} s")
        for child in running:
            assert child.proc is not None
            child.proc.send_signal(signal.SIGTERM)  # no-op if already reaped
        deadline = self._clock() + wait_seconds
        while True:
            now = self._clock()
            for child in self._running():
                assert child.proc is not None
                returncode = child.proc.poll()
                if returncode is not None:
                    status = describe_status(returncode)
                    self._log(f"exit {child.spec.name} pid={child.proc.pid} {status}")
                    child.proc = None
            if not self._running():
                break
            if self._stop_requests >= 2:
                self._log("stop now: second signal")
                break
            if now >= deadline:
                self._log(f"stop: grace of {wait_seconds:g} s is over")
                break
            self._sleep(min(POLL_SECONDS, deadline - now))
        self._kill_all()
        self._log("stopped")

    def _kill_all(self) -> None:
        """SIGKILL every child still running, all at once, then reap them."""
        running = self._running()
        for child in running:
            assert child.proc is not None
            self._log(f"kill {child.spec.name} pid={child.proc.pid}")
            child.proc.kill()
        for child in running:
            assert child.proc is not None
            child.proc.wait()  # SIGKILL cannot be ignored: this returns promptly
            child.proc = None

    # -- signals and sleeping ---------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop()  # flag only; the loop does the work

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """Install flag-setting handlers and a wake-up pipe; restore the previous ones after."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        previous_wake = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._wake_fd = read_fd
        try:
            for sig in previous:
                signal.signal(sig, self._on_signal)
            yield
        finally:
            for sig, handler in previous.items():
                if handler is not None:  # None: installed outside Python, cannot be restored
                    signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wake)
            self._wake_fd = -1
            os.close(read_fd)
            os.close(write_fd)

    def _sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a signal's byte on the wake-up pipe ends it early."""
        ready, _, _ = select.select([self._wake_fd], [], [], max(0.0, seconds))
        if ready:
            try:
                while os.read(self._wake_fd, 512):
                    pass
            except BlockingIOError:
                pass
