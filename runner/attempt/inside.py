"""The attempt child's own side: ``python -m spool.runner.attempt CONFIG`` runs ``main`` here.

The worker's side is ``runner.attempt.child``; the protocol the two speak is ``runner.attempt.pipes``. What
the child's file descriptors are, and why:

- 0 is /dev/null; 2 is the output pipe, whose read end the worker owns (it writes the attempt
  log, capped); during an attempt 1 is that pipe too, between attempts /dev/null.
- the request and reply pipes are moved to the top of the fd range (``_hide``), close-on-exec,
  so a handler that writes to "every fd from 3" (or leaks one to a process it starts) does not
  stumble on them; garbage that still reaches the worker fails the attempt, not the worker.
- everything else a handler opens is Python's default, close-on-exec; a shell job gets 0-2 only.
"""

from __future__ import annotations

import ctypes
import faulthandler
import fcntl
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from contextlib import ExitStack
from subprocess import DEVNULL
from typing import Any

from spool.base.errors import UsageError
from spool.progress import Progress, encode, set_sink
from spool.base.resultjson import NOT_JSON, ResultNotJSON, encode_result
from spool.registry import Current, Reject, handler_for, import_task_modules, set_current
from spool.runner.lifeline import die_with_parent
from spool.runner.attempt.parents import parents_file
from spool.runner.attempt.pipes import progress_line, write_all

ERROR_BYTES = 4096
_HIGH_FDS = 4096  # the channel goes just below min(this, RLIMIT_NOFILE)
_DRAIN_BYTES = 1 << 20  # what a shell job's leftovers may still add after it exits


class _Failed(Exception):
    """An attempt failure whose message says it all; no traceback."""


def describe_exit(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _tail(data: bytes, limit: int) -> str:
    """The end of ``data`` as text of at most ``limit`` UTF-8 bytes."""
    if limit <= 0:
        return ""
    text = data[-limit:].decode("utf-8", errors="replace")
    # A replacement character is wider than the byte it stands for; the cut may split a character.
    return text.encode()[-limit:].decode("utf-8", errors="ignore")


def _error_reply(error: str, *, reject: bool = False) -> bytes:
    # A lone surrogate (an undecodable file name in a message) would be valid JSON here but not
    # UTF-8 in the job file the worker writes; replace it.
    error = error.encode("utf-8", errors="replace").decode()
    message = {"ok": False, "value": None, "error": error, "reject": reject}
    return (json.dumps(message) + "\n").encode()


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a handler may have closed them; the attempt still ends
            pass


def _hide(fd: int) -> int:
    """Move ``fd`` near the top of the fd range, close-on-exec; returns its new number."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    limit = _HIGH_FDS if soft == resource.RLIM_INFINITY else min(soft, _HIGH_FDS)
    try:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(limit - 64, 3))
    except OSError:  # no free fd up there: keep it where it is, close-on-exec all the same
        os.set_inheritable(fd, False)
        return fd
    os.close(fd)
    return moved


class _ProgressSender:
    """``spool.progress``'s sink during one attempt: a line to the worker, never blocking.

    The reply pipe is non-blocking on our side; a progress line is under PIPE_BUF, so it goes
    whole or not at all: a full pipe (a worker behind) skips the value. The lock keeps a handler's
    thread from writing into the middle of the reply, which may be longer than PIPE_BUF."""

    def __init__(self, reply_fd: int) -> None:
        self._fd = reply_fd
        self._lock = threading.Lock()
        self._seq: int | None = None  # the attempt whose values we send; None between attempts
        self._last: Progress | None = None

    def start(self, seq: int) -> None:
        with self._lock:
            self._seq, self._last = seq, None

    def stop(self) -> None:
        """Before the reply: a value sent after this line would come after the reply."""
        with self._lock:
            self._seq = None

    def __call__(self, value: Progress) -> None:
        with self._lock:
            if self._seq is None or value == self._last:
                return
            try:
                os.write(self._fd, progress_line(self._seq, encode(value)))
            except (BlockingIOError, BrokenPipeError):
                return  # a worker behind skips this value; a gone worker kills us soon
            self._last = value


class _Attempts:
    """Runs the requests the child reads, one at a time."""

    def __init__(self, config: dict[str, Any], import_error: str | None, progress: _ProgressSender) -> None:
        self._progress = progress
        self._allow_shell: bool = config["allow_shell"]
        self._max_result_bytes: int = config["max_result_bytes"]
        self._import_error = import_error
        # fd 1 between attempts (/dev/null), and the output pipe (fd 2 as the worker gave it).
        self._idle_out, self._output = os.dup(1), os.dup(2)
        # Loaded now, so a forked shell job calls prctl with no dlopen between fork and exec.
        self._libc = ctypes.CDLL(None, use_errno=True)

    def run(self, request: dict[str, Any]) -> bytes:
        if self._import_error is not None:
            return _error_reply(self._import_error)
        name = request["task"]
        handler = None if name == "shell" else handler_for(name)
        if name == "shell" and not self._allow_shell:
            return _error_reply("shell jobs need a worker started with --allow-shell")
        if name != "shell" and handler is None:
            return _error_reply(f"no handler registered for task {name!r}")
        _flush_std()
        os.dup2(self._output, 1)
        os.dup2(self._output, 2)
        job_id, attempt = request["job_id"], request["attempt"]
        set_current(_current(request))
        self._progress.start(int(request["seq"]))
        set_sink(self._progress)
        try:
            if handler is None:
                value: object = self._shell(request, job_id, attempt)
            else:
                value = handler(**request["args"])
        except Reject as exc:  # named as users import it (``spool.Reject``), not spool.registry.Reject
            return _error_reply(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, reject=True)
        except _Failed as exc:
            return _error_reply(str(exc))
        except BaseException as exc:  # noqa: BLE001 - even SystemExit only fails the attempt
            tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # from the handler on
            text = "".join(traceback.format_exception(type(exc), exc, tb))
            return _error_reply(_tail(text.encode(errors="replace"), ERROR_BYTES))
        finally:
            set_sink(None)
            self._progress.stop()
            set_current(None)
            _flush_std()
            os.dup2(self._idle_out, 1)
            os.dup2(self._output, 2)
        try:
            text = encode_result(value)  # the rule the server holds a remote worker's result to
        except ResultNotJSON as exc:
            return _error_reply(str(exc))
        except Exception as exc:  # noqa: BLE001 - a value whose own methods raise while encoded
            return _error_reply(f"{NOT_JSON}{exc}")
        if len(text) > self._max_result_bytes:  # ensure_ascii: one byte per character
            limit = self._max_result_bytes
            return _error_reply(f"result is {len(text)} bytes, over max_result_bytes {limit}")
        return b'{"ok":true,"value":' + text.encode() + b',"error":null,"reject":false}\n'

    def _die_with_us(self) -> None:
        # Runs in the forked shell job before exec: when this child dies, the job dies too.
        self._libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG

    def _shell(self, request: dict[str, Any], job_id: str, attempt: int) -> dict[str, object]:
        args = request["args"]
        argv = args.get("argv") if isinstance(args, dict) else None
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)) or (set(args) != {"argv"}):
            raise _Failed("shell jobs take args {argv: [str, ...]}, a non-empty list of strings")
        with ExitStack() as stack:
            try:
                parents = stack.enter_context(
                    parents_file(request.get("parent_results") or {}, request.get("scratch_dir"))
                )
            except OSError as exc:  # a full disk, a folder gone
                raise _Failed(f"cannot write the SPOOL_PARENT_RESULTS file: {exc.strerror or exc}") from None
            env = dict(os.environ, SPOOL_JOB_ID=job_id, SPOOL_ATTEMPT=str(attempt), SPOOL_PARENT_RESULTS=parents)
            return self._run_shell(argv, env)

    def _run_shell(self, argv: list[str], env: dict[str, str]) -> dict[str, object]:
        out_r, out_w = os.pipe()
        try:
            # stdout and stderr go through us (_tee), so we keep the output's tail for the result.
            proc = subprocess.Popen(
                argv,
                stdin=DEVNULL,
                stdout=out_w,
                stderr=out_w,
                env=env,
                preexec_fn=self._die_with_us,  # noqa: PLW1509 - the child itself runs no threads
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(out_r)
            reason = getattr(exc, "strerror", None) or exc
            raise _Failed(f"cannot run {argv[0]!r}: {reason}") from None
        finally:
            os.close(out_w)
        try:
            output = _tee(proc, out_r)
        finally:
            os.close(out_r)
        status = proc.wait()
        if status == 0:
            return {"exit": 0, "output": _tail(output, ERROR_BYTES)}
        prefix = f"exit status {status}: " if status > 0 else f"{describe_exit(status)}: "
        raise _Failed(prefix + _tail(output, ERROR_BYTES - len(prefix)))


def _tee(proc: subprocess.Popen[bytes], out_r: int) -> bytes:
    """Copy a shell job's output to fd 1 until it exits; returns the last ERROR_BYTES of it.

    Ends when the job has exited and its pipe is drained, not at EOF: a process it left in the
    background may hold the pipe for ever (what it writes after that is lost).
    """
    tail = b""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = -1  # old kernel or seccomp: look at the job every 50 ms
    os.set_blocking(out_r, False)
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    exited, left = False, _DRAIN_BYTES
    try:
        while left > 0:
            wait_ms = 0 if exited else (None if pidfd >= 0 else 50)
            ready = {fd for fd, _ in poller.poll(wait_ms)}
            if out_r in ready:
                try:
                    data = os.read(out_r, 1 << 16)
                except BlockingIOError:
                    data = None
                if data == b"":
                    return tail  # EOF: nothing holds the pipe any more
                if data:
                    write_all(1, data)
                    tail = (tail + data)[-ERROR_BYTES:]
                    left -= len(data) if exited else 0
                    continue
            if exited:
                return tail  # drained what was there when it exited
            exited = pidfd in ready or (pidfd < 0 and proc.poll() is not None)
            if exited and pidfd >= 0:
                poller.unregister(pidfd)
        return tail
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _current(request: dict[str, Any]) -> Current:
    """The handler's ``current()``: the worker's monotonic deadline, also as a wall-clock time."""
    deadline = float(request["deadline"])  # CLOCK_MONOTONIC is host-wide: the worker's clock is ours
    wall = time.time() + (deadline - time.monotonic())
    made = Current(request["job_id"], request["attempt"], request["tries_left"], wall, monotonic_deadline=deadline)
    return made.with_parent_results(request.get("parent_results") or {})


def main(argv: Sequence[str]) -> int:
    """The child's life: tie it to the worker, import the task modules, serve until EOF."""
    config = json.loads(argv[0])
    die_with_parent(int(config["parent_pid"]))
    # pass_fds made them inheritable and low; no process a handler starts may hold them (or the
    # child's death would not be EOF to the worker), and no handler may write to them by accident.
    request_fd, reply_fd = _hide(int(config["request_fd"])), _hide(int(config["reply_fd"]))
    sys.path[:0] = config["sys_path"]  # where the worker found its task modules (--import from its cwd)
    faulthandler.enable()  # a crash's Python stack goes to fd 2: the output pipe, so the log
    import_error = None
    try:
        import_task_modules(config["import_modules"])
    except UsageError as exc:
        import_error = str(exc)
    os.set_blocking(reply_fd, False)  # progress never blocks a handler; write_all waits for room
    attempts = _Attempts(config, import_error, _ProgressSender(reply_fd))
    try:
        write_all(reply_fd, b'{"hello":true}\n')
        with open(request_fd, "rb") as requests:
            for line in requests:
                request = json.loads(line)
                reply = attempts.run(request)  # a JSON object: the seq goes in front
                write_all(reply_fd, b'{"seq":%d,' % int(request["seq"]) + reply[1:])
    except BrokenPipeError:
        # RACE: the worker was killed; the kernel closes its end of the pipe before
        # PR_SET_PDEATHSIG reaches us. Nobody is left to answer: end quietly, no traceback.
        return 1
    return 0
