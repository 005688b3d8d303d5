"""The attempt child: a reusable process that runs a worker's attempts one at a time.

RQ's work horse, kept between jobs: the worker holds the lease and heartbeats between calls to
``Child.poll``, then writes the result and moves the job; the child imports the task modules and
calls handlers, so a handler that crashes, hangs or leaks costs only the child. ``Child`` is the
worker's side; the child runs ``runner.attempt`` (``python -m spool.runner.attempt CONFIG``).
They speak JSON lines over dedicated pipes (``runner.attempt.pipes``: the protocol, and why a line that
is not the reply in flight fails the attempt as "garbled" and replaces the child, never raising
in the worker).

The child's stdout and stderr are a third pipe, read here while ``poll`` waits: during an attempt
what comes out goes to the request's ``log`` (the worker's capped ``AttemptLog``), drained up to
the reply (the child writes its reply after flushing its output) or up to its death; before the
hello (at import) and between attempts, to the worker's own stderr.

An attempt's clock starts when its request is sent, which for a fresh child is after the hello:
a slow import costs the child's start (bounded by ``start_timeout_seconds``), not the attempt's
timeout. A task module that fails to import fails every attempt of that child with the import
error (one line naming the module); nothing raises in the worker. After
``max_attempts_per_child`` attempts the child retires in the background and a fresh one starts
at once, so its start overlaps the worker's own bookkeeping.

The child leads its own process group (``start_new_session``): killing the group also kills what
a handler or a shell job started, unless that process made a session of its own. The child dies
with the worker (PR_SET_PDEATHSIG, which fires when the *thread* that spawned it ends: drive a
``Child`` from a long-lived thread), and a shell job's process dies with the child. A ``Child``
is used by one thread at a time; ``close()`` or ``kill()`` it when done.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from subprocess import DEVNULL
from typing import Any

from spool.progress import Progress
from spool.runner.attempt import pipes
from spool.runner.attempt.inside import ERROR_BYTES, describe_exit
from spool.runner.attempt.reaping import has_exited, killpg, retire
from spool.runner.attempt.pipes import (
    HELLO,
    Garbled,
    LogSink,
    Output,
    Replies,
    is_reply,
    preview,
    request_line,
    write_all,
)

__all__ = ["ERROR_BYTES", "AttemptRequest", "Child", "LogSink", "Outcome"]

# A fresh child re-imports the task modules (0.04-0.11 s of CPU: ~0.1 ms a job at 1,000); a
# trivial handler's child stays at one RSS over 20,000 attempts (issue 19's note, section 6), so
# what the retirement bounds is a leaking handler's growth, 10,000 attempts of it.
MAX_ATTEMPTS_PER_CHILD = 10_000
_DRAIN_BYTES = 16 << 20  # most output taken after a reply or a death (a grandchild may spew on)


@dataclass(frozen=True)
class AttemptRequest:
    job_id: str
    attempt: int
    task: str
    args: dict[str, Any]
    timeout_seconds: float
    tries_left: int
    log: LogSink
    # {parent_id: result}, read when the attempt starts (runner.attempt.parents); {} without parents.
    parent_results: Mapping[str, object] = field(default_factory=dict)
    # Where a shell job's SPOOL_PARENT_RESULTS file goes: the spool's tmp/, or None ($TMPDIR).
    scratch_dir: str | None = None


@dataclass(frozen=True)
class Outcome:
    ok: bool  # the handler returned a value
    value: object  # the JSON-able result when ok
    error: str | None  # a traceback tail (<= 4 KiB, its end) or what happened to the child
    reject: bool  # the handler raised spool.Reject: dead at once, no retry


def _failed(error: str) -> Outcome:
    return Outcome(ok=False, value=None, error=error, reject=False)


def _seconds(value: float) -> str:
    """``5``, ``0.5``, ``86400``: no exponent, no trailing zeros."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


class Child:
    """The worker's handle on one attempt child; the process is spawned on demand and reused."""

    def __init__(
        self,
        *,
        import_modules: Sequence[str],
        allow_shell: bool,
        max_result_bytes: int,
        sys_path: Sequence[str] = (),
        start_timeout_seconds: float = 60.0,
        max_attempts_per_child: int = MAX_ATTEMPTS_PER_CHILD,
    ) -> None:
        self._config: dict[str, Any] = {
            "import_modules": list(import_modules),
            "allow_shell": allow_shell,
            "max_result_bytes": max_result_bytes,
            "sys_path": [os.path.abspath(p) for p in sys_path],
        }
        self._start_timeout_seconds = start_timeout_seconds
        self._max_attempts_per_child = max_attempts_per_child
        self._proc: subprocess.Popen[bytes] | None = None
        self._to_child = self._pidfd = -1
        self._replies: Replies | None = None
        self._output: Output | None = None
        self._poller = select.poll()
        self._hello = self._exited = False
        self._spawned_at = 0.0
        self._served = 0
        self._seq = 0  # numbers the requests; a reply names the one it answers
        self._request: AttemptRequest | None = None
        self._log: LogSink | None = None  # the running attempt's, until its output is drained
        self._encoded = ""
        self._deadline: float | None = None  # None until the request is sent
        self._progress: Progress | None = None  # the running attempt's newest, not yet taken
        self._overdue: Outcome | None = None  # a timeout ``end_if_overdue`` met, for the next poll

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def take_progress(self) -> Progress | None:
        """The running handler's newest ``spool.progress`` since the last call; None if none came."""
        value, self._progress = self._progress, None
        return value

    def start(self) -> None:
        """Spawn the child if none is running; returns at once (it imports in the background)."""
        if self._proc is not None:
            return
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        output_r, output_w = os.pipe()
        config = dict(self._config, parent_pid=os.getpid(), request_fd=request_r, reply_fd=reply_w)
        try:
            # -P: the installed spool, never a `spool/` folder in the worker's cwd; the folders
            # `--import` needs are on the config's sys_path instead.
            argv = [sys.executable, "-P", "-m", "spool.runner.attempt", json.dumps(config)]
            self._proc = subprocess.Popen(
                argv,
                stdin=DEVNULL,
                stdout=DEVNULL,
                stderr=output_w,
                pass_fds=(request_r, reply_w),
                start_new_session=True,
            )
        except BaseException:
            os.close(request_w)
            os.close(reply_r)
            os.close(output_r)
            raise
        finally:
            # Only the child holds these ends, so its death is EOF / EPIPE to us.
            os.close(request_r)
            os.close(reply_w)
            os.close(output_w)
        self._spawned_at = time.monotonic()
        self._to_child = request_w
        os.set_blocking(reply_r, False)
        os.set_blocking(output_r, False)
        self._poller = select.poll()
        self._poller.register(reply_r, select.POLLIN)
        self._poller.register(output_r, select.POLLIN)
        self._replies = Replies(reply_r, self._poller, self._config["max_result_bytes"])
        self._output = Output(output_r, self._poller)
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
            self._poller.register(self._pidfd, select.POLLIN)
        except OSError:
            self._pidfd = -1  # old kernel or seccomp: poll() checks waitid(WNOWAIT) instead

    def begin(self, request: AttemptRequest) -> None:
        """Send one attempt, starting the child if needed; returns at once."""
        if self._request is not None or self._overdue is not None:
            raise RuntimeError("an attempt is already running in this child")
        fields = {"job_id": request.job_id, "attempt": request.attempt, "task": request.task}
        fields.update(tries_left=request.tries_left, args=request.args, scratch_dir=request.scratch_dir)
        fields.update(parent_results=dict(request.parent_results))
        encoded = json.dumps(fields)  # first, so args that are not JSON change nothing
        self.start()
        self._drain_output()  # what came out between attempts is not this attempt's
        self._request, self._encoded, self._log = request, encoded, request.log
        self._progress = None
        self._served += 1
        if self._hello and not self._send():
            # The idle child died between attempts (OOM killer, a handler's stray thread). The
            # attempt never reached it, so it gets a fresh child rather than a failure.
            self._kill_and_reap()
            self.start()
            self._request, self._served, self._log = request, 1, request.log

    def poll(self, timeout_seconds: float, *, until_progress: bool = False) -> Outcome | None:
        """Wait up to ``timeout_seconds`` for the attempt's outcome; None while it still runs (with
        ``until_progress``, as soon as the handler reports progress: ``take_progress``).

        Past the attempt's timeout (or the child's start timeout) the child's process group is
        killed and the timeout is the outcome.
        """
        if (overdue := self._overdue) is not None:
            self._overdue = None
            return overdue
        request = self._request
        if request is None or self._proc is None:
            raise RuntimeError("no attempt is running in this child")
        until = time.monotonic() + max(0.0, timeout_seconds)
        while True:
            try:
                if not self._hello:
                    self._take_hello()
                elif (outcome := self._take_reply()) is not None:
                    return outcome
                elif until_progress and self._progress is not None:
                    return None
                if self._exited or (self._pidfd < 0 and has_exited(self._proc.pid)):
                    self._replies_available()  # a reply written just before the exit still counts
                    outcome = self._take_reply() if self._hello else None
                    return outcome or _failed(f"child {describe_exit(self._kill_and_reap())}")
            except Garbled as err:
                self.kill()
                return _failed(str(err))
            now = time.monotonic()
            if self._deadline is not None:
                limit = self._deadline
            else:
                limit = self._spawned_at + self._start_timeout_seconds
            if now >= limit:
                started = self._deadline is not None
                self.kill()
                if started:
                    return _failed(f"timed out after {_seconds(request.timeout_seconds)}s")
                modules = ", ".join(self._config["import_modules"]) or "spool"
                return _failed(
                    f"child did not start within {_seconds(self._start_timeout_seconds)}s (importing {modules})"
                )
            if now >= until:
                return None
            wait_ms = math.ceil((min(until, limit) - now) * 1000)
            for fd, _ in self._poller.poll(wait_ms if self._pidfd >= 0 else min(wait_ms, 50)):
                if fd == self._pidfd:
                    self._exited = True
                elif self._output is not None and fd == self._output.fd:
                    self._read_output(1 << 20)
                else:
                    self._replies_available()

    def seconds_left(self) -> float:
        """Until the running attempt's timeout; ``math.inf`` with no attempt sent."""
        if self._request is None or self._deadline is None:
            return math.inf
        return self._deadline - time.monotonic()

    def end_if_overdue(self) -> None:
        """Kill the running attempt once past its timeout, its outcome (the timeout) kept for the
        next ``poll``: a worker that can't poll for a while (its save waits for room on a full
        disk) still ends a handler at its timeout, not whenever the disk has room again."""
        request = self._request
        if request is not None and self.seconds_left() <= 0:
            self.kill()
            self._overdue = _failed(f"timed out after {_seconds(request.timeout_seconds)}s")

    def kill(self) -> None:
        """SIGKILL the child's whole process group and reap it; a running attempt is dropped."""
        if self._proc is not None:
            self._kill_and_reap()
        self._request = None

    def close(self) -> None:
        """Ask an idle child to exit, killing it if it has not within 1 s; kill a busy one."""
        if self._request is not None:
            self.kill()
        elif self._proc is not None:
            retire(*self._detach())

    # -- internals ---------------------------------------------------------------------------

    def _send(self) -> bool:
        """Write the pending request and start its clock; False if the child is gone."""
        request = self._request
        assert request is not None
        self._deadline = time.monotonic() + request.timeout_seconds
        self._seq += 1
        # begin() encoded the rest; the deadline, known only now, is spliced in at the front.
        try:
            write_all(self._to_child, request_line(self._seq, self._deadline, self._encoded))
        except BrokenPipeError:
            return False
        return True

    def _replies_available(self) -> None:
        assert self._replies is not None
        self._replies.read_available()

    def _read_output(self, limit: int) -> None:
        """Move up to ``limit`` bytes the child has written to fds 1 and 2 to where they belong."""
        # The request is sent only after the hello, so what is read before it was printed at
        # import time: like what comes between attempts, it is the worker's, not the log's.
        if self._output is not None:
            self._output.read(limit, self._log if self._hello else None)

    def _drain_output(self) -> None:
        """Take what the child wrote so far (everything, when it has replied or died)."""
        self._read_output(_DRAIN_BYTES)
        self._log = None

    def _next_line(self) -> Any:
        assert self._replies is not None
        return self._replies.next_line(self._awaited())

    def _awaited(self) -> str:
        return "the attempt's reply" if self._hello else "the child's hello"

    def _take_hello(self) -> None:
        message = self._next_line()
        if message is None:
            return
        if message != HELLO:
            raise Garbled(
                f"the child's hello was garbled: {preview(json.dumps(message).encode())} is not a "
                "hello (something in the child wrote to its channel to the worker)"
            )
        self._read_output(_DRAIN_BYTES)  # the import's output, all written before the hello
        self._hello = True
        if not self._send():
            self._exited = True  # dead right after its hello; poll() says how it died

    def _take_reply(self) -> Outcome | None:
        message = self._next_line()
        while pipes.is_progress(message):
            self._progress = pipes.progress_of(message, self._seq) or self._progress
            message = self._next_line()
        if message is None:
            return None
        if not is_reply(message, self._seq):
            raise Garbled(
                f"the attempt's reply was garbled: {preview(json.dumps(message).encode())} is not a "
                "reply (something in the child wrote to its channel to the worker)"
            )
        self._drain_output()  # the child flushed its output before it replied
        self._request = None
        if self._served >= self._max_attempts_per_child:
            # Recycled so a handler's slow leak never grows without bound.
            threading.Thread(target=retire, args=self._detach(), daemon=True).start()
            self.start()
        del message["seq"]
        return Outcome(**message)

    def _detach(self) -> tuple[subprocess.Popen[bytes], int]:
        """Forget the child, closing our pipe ends (EOF to it); the caller reaps it."""
        proc, pidfd = self._proc, self._pidfd
        assert proc is not None
        self._drain_output()
        os.close(self._to_child)
        assert self._replies is not None and self._output is not None
        self._replies.close()
        self._output.close()
        self._proc, self._to_child, self._pidfd = None, -1, -1
        self._replies = self._output = None
        self._hello = self._exited = False
        self._served = 0
        self._deadline = None
        return proc, pidfd

    def _kill_and_reap(self) -> int:
        assert self._proc is not None
        killpg(self._proc.pid)  # what the child started (a shell job, say) goes with it
        proc, pidfd = self._detach()
        self._request = None
        if pidfd >= 0:
            os.close(pidfd)
        return proc.wait()
