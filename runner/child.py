"""The attempt child: a reusable process that runs a worker's attempts one at a time.

RQ's work horse, kept between jobs: the worker holds the lease and heartbeats between calls to
``Child.poll``, then writes the result and moves the job; the child imports the task modules and
calls handlers, so a handler that crashes, hangs or leaks costs only the child. ``Child`` is the
worker's side; ``main`` runs in the child (``python -m spool.runner.child CONFIG``). They speak
JSON lines over two dedicated pipes (``pass_fds``), so nothing a handler prints can corrupt them:

    child  -> worker  {"hello": true}      once, after the task modules are imported
    worker -> child   {"job_id", "attempt", "task", "args", "tries_left", "deadline", "log_path"}
    child  -> worker  {"ok", "value", "error", "reject"}   one reply per request
    EOF on the request pipe asks an idle child to exit.

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

import ctypes
import faulthandler
import json
import math
import os
import select
import signal
import site
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from subprocess import DEVNULL
from typing import Any

import spool
from spool.errors import UsageError
from spool.registry import Current, Reject, handler_for, import_task_modules, set_current
from spool.runner.lifeline import die_with_parent

ERROR_BYTES = 4096
_LOG_FLAGS = os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_ATTEMPTS_PER_CHILD = 1000

# The folder holding the worker's own spool package. An uninstalled checkout's folder must be on
# the child's path for `-m` to find spool from any cwd; a site-packages folder already is, and
# putting it ahead of the standard library would let a stray backport shadow a stdlib module.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(spool.__file__ or "")))
_SITES = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
_EXTRA_PATH = "" if os.path.realpath(_ROOT) in _SITES else _ROOT


@dataclass(frozen=True)
class AttemptRequest:
    job_id: str
    attempt: int
    task: str
    args: dict[str, Any]
    timeout_seconds: float
    tries_left: int
    log_path: str


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


def _describe_exit(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _has_exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _killpg(pid: int) -> None:
    # RACE: pid reuse. Callers kill before they reap: until then the child is at worst a
    # zombie, so no other process can have been given its pid (our process group id).
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _retire(proc: subprocess.Popen[bytes], pidfd: int) -> None:
    """Give an idle child whose request pipe is closed 1 s to exit; then kill its group, reap."""
    deadline = time.monotonic() + 1.0
    while not _has_exited(proc.pid) and (left := deadline - time.monotonic()) > 0:
        select.select([pidfd] if pidfd >= 0 else [], [], [], left if pidfd >= 0 else 0.01)
    _killpg(proc.pid)  # also ends what handlers left running in the group
    proc.wait()
    if pidfd >= 0:
        os.close(pidfd)


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
        self._to_child = self._from_child = self._pidfd = -1
        self._poller = select.poll()
        self._buffer = bytearray()
        self._hello = self._exited = self._eof = False
        self._spawned_at = 0.0
        self._served = 0
        self._request: AttemptRequest | None = None
        self._encoded = ""
        self._deadline: float | None = None  # None until the request is sent

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Spawn the child if none is running; returns at once (it imports in the background)."""
        if self._proc is not None:
            return
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        pythonpath = os.environ.get("PYTHONPATH")
        config = dict(self._config, parent_pid=os.getpid(), pythonpath=pythonpath)
        config.update(request_fd=request_r, reply_fd=reply_w)
        # The child puts PYTHONPATH back before any handler can see it.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_EXTRA_PATH, pythonpath])))
        try:
            argv = [sys.executable, "-m", "spool.runner.child", json.dumps(config)]
            self._proc = subprocess.Popen(
                argv,
                stdin=DEVNULL,
                stdout=DEVNULL,
                pass_fds=(request_r, reply_w),
                env=env,
                start_new_session=True,
            )
        except BaseException:
            os.close(request_w)
            os.close(reply_r)
            raise
        finally:
            # Only the child holds these ends, so its death is EOF / EPIPE to us.
            os.close(request_r)
            os.close(reply_w)
        self._spawned_at = time.monotonic()
        self._to_child, self._from_child = request_w, reply_r
        os.set_blocking(reply_r, False)
        self._poller = select.poll()
        self._poller.register(reply_r, select.POLLIN)
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
            self._poller.register(self._pidfd, select.POLLIN)
        except OSError:
            self._pidfd = -1  # old kernel or seccomp: poll() checks waitid(WNOWAIT) instead

    def begin(self, request: AttemptRequest) -> None:
        """Send one attempt, starting the child if needed; returns at once."""
        if self._request is not None:
            raise RuntimeError("an attempt is already running in this child")
        fields = {"job_id": request.job_id, "attempt": request.attempt, "task": request.task}
        fields.update(tries_left=request.tries_left, log_path=request.log_path, args=request.args)
        encoded = json.dumps(fields)  # first, so args that are not JSON change nothing
        self.start()
        self._request, self._encoded = request, encoded
        self._served += 1
        if self._hello and not self._send():
            # The idle child died between attempts (OOM killer, a handler's stray thread). The
            # attempt never reached it, so it gets a fresh child rather than a failure.
            self._kill_and_reap()
            self.start()
            self._request, self._served = request, 1

    def poll(self, timeout_seconds: float) -> Outcome | None:
        """Wait up to ``timeout_seconds`` for the attempt's outcome; None while it still runs.

        Past the attempt's timeout (or the child's start timeout) the child's process group is
        killed and the timeout is the outcome.
        """
        request = self._request
        if request is None or self._proc is None:
            raise RuntimeError("no attempt is running in this child")
        until = time.monotonic() + max(0.0, timeout_seconds)
        while True:
            if not self._hello:
                self._take_hello()
            elif (outcome := self._take_reply()) is not None:
                return outcome
            if self._exited or (self._pidfd < 0 and _has_exited(self._proc.pid)):
                self._read_available()  # a reply written just before the exit still counts
                outcome = self._take_reply() if self._hello else None
                return outcome or _failed(f"child {_describe_exit(self._kill_and_reap())}")
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
                    f"child did not start within {_seconds(self._start_timeout_seconds)}s "
                    f"(importing {modules})"
                )
            if now >= until:
                return None
            wait_ms = math.ceil((min(until, limit) - now) * 1000)
            for fd, _ in self._poller.poll(wait_ms if self._pidfd >= 0 else min(wait_ms, 50)):
                if fd == self._pidfd:
                    self._exited = True
                else:
                    self._read_available()

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
            _retire(*self._detach())

    # -- internals ---------------------------------------------------------------------------

    def _send(self) -> bool:
        """Write the pending request and start its clock; False if the child is gone."""
        request = self._request
        assert request is not None
        self._deadline = time.monotonic() + request.timeout_seconds
        # begin() encoded the rest; the deadline, known only now, is spliced in at the front.
        view = memoryview(f'{{"deadline":{self._deadline!r},{self._encoded[1:]}\n'.encode())
        try:
            while view:
                view = view[os.write(self._to_child, view) :]
        except BrokenPipeError:
            return False
        return True

    def _read_available(self) -> None:
        while not self._eof:
            try:
                data = os.read(self._from_child, 1 << 20)
            except BlockingIOError:
                return
            if not data:
                # EOF before the exit is seen: a handler closed our pipe. Wait for the exit.
                self._poller.unregister(self._from_child)
                self._eof = True
            self._buffer += data

    def _next_line(self) -> Any:
        end = self._buffer.find(b"\n")
        if end < 0:
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return json.loads(line)

    def _take_hello(self) -> None:
        if self._next_line() is not None:
            self._hello = True
            if not self._send():
                self._exited = True  # dead right after its hello; poll() says how it died

    def _take_reply(self) -> Outcome | None:
        message = self._next_line()
        if message is None:
            return None
        self._request = None
        if self._served >= self._max_attempts_per_child:
            # Recycled so a handler's slow leak never grows without bound.
            threading.Thread(target=_retire, args=self._detach(), daemon=True).start()
            self.start()
        return Outcome(**message)

    def _detach(self) -> tuple[subprocess.Popen[bytes], int]:
        """Forget the child, closing our pipe ends (EOF to it); the caller reaps it."""
        proc, pidfd = self._proc, self._pidfd
        assert proc is not None
        os.close(self._to_child)
        os.close(self._from_child)
        self._proc, self._to_child, self._from_child, self._pidfd = None, -1, -1, -1
        self._buffer.clear()
        self._hello = self._exited = self._eof = False
        self._served = 0
        self._deadline = None
        return proc, pidfd

    def _kill_and_reap(self) -> int:
        assert self._proc is not None
        _killpg(self._proc.pid)  # what the child started (a shell job, say) goes with it
        proc, pidfd = self._detach()
        self._request = None
        if pidfd >= 0:
            os.close(pidfd)
        return proc.wait()


# -- the child's side: python -m spool.runner.child CONFIG ---------------------------------------


class _Failed(Exception):
    """An attempt failure whose message says it all; no traceback."""


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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Attempts:
    """Runs the requests the child reads, one at a time."""

    def __init__(self, config: dict[str, Any], import_error: str | None) -> None:
        self._allow_shell: bool = config["allow_shell"]
        self._max_result_bytes: int = config["max_result_bytes"]
        self._import_error = import_error
        # What fds 1 and 2 are between attempts: /dev/null and the worker's stderr.
        self._idle_out, self._idle_err = os.dup(1), os.dup(2)
        # Loaded now, so a forked shell job calls prctl with no dlopen between fork and exec.
        self._libc = ctypes.CDLL(None, use_errno=True)

    def run(self, request: dict[str, Any]) -> bytes:
        if self._import_error is not None:
            return _error_reply(self._import_error)
        name, log_path = request["task"], request["log_path"]
        handler = None if name == "shell" else handler_for(name)
        if name == "shell" and not self._allow_shell:
            return _error_reply("shell jobs need a worker started with --allow-shell")
        if name != "shell" and handler is None:
            return _error_reply(f"no handler registered for task {name!r}")
        # A shell job's output tail is read back from the log, hence O_RDWR for it.
        access = os.O_RDWR if handler is None else os.O_WRONLY
        try:
            log = os.open(log_path, access | _LOG_FLAGS, 0o600)
        except OSError as exc:
            return _error_reply(f"cannot open attempt log {log_path}: {exc.strerror}")
        _flush_std()
        os.dup2(log, 1)
        os.dup2(log, 2)
        job_id, attempt = request["job_id"], request["attempt"]
        set_current(Current(job_id, attempt, request["tries_left"], request["deadline"]))
        try:
            if handler is None:
                value: object = self._shell(request["args"], job_id, attempt, log)
            else:
                value = handler(**request["args"])
        except Reject as exc:
            return _error_reply(traceback.format_exception_only(exc)[-1].strip(), reject=True)
        except _Failed as exc:
            return _error_reply(str(exc))
        except BaseException as exc:  # noqa: BLE001 - even SystemExit only fails the attempt
            tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # from the handler on
            text = "".join(traceback.format_exception(type(exc), exc, tb))
            return _error_reply(_tail(text.encode(errors="replace"), ERROR_BYTES))
        finally:
            set_current(None)
            _flush_std()
            os.dup2(self._idle_out, 1)
            os.dup2(self._idle_err, 2)
            os.close(log)
        try:
            text = json.dumps(value, allow_nan=False)
        except Exception as exc:  # noqa: BLE001 - TypeError, ValueError, RecursionError alike
            return _error_reply(f"result is not JSON-serialisable: {exc}")
        if len(text) > self._max_result_bytes:  # ensure_ascii: one byte per character
            limit = self._max_result_bytes
            return _error_reply(f"result is {len(text)} bytes, over max_result_bytes {limit}")
        return b'{"ok":true,"value":' + text.encode() + b',"error":null,"reject":false}\n'

    def _die_with_us(self) -> None:
        # Runs in the forked shell job before exec: when this child dies, the job dies too.
        self._libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG

    def _shell(self, args: Any, job_id: str, attempt: int, log: int) -> dict[str, object]:
        argv = args.get("argv") if isinstance(args, dict) else None
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)) or (
            set(args) != {"argv"}
        ):
            raise _Failed("shell jobs take args {argv: [str, ...]}, a non-empty list of strings")
        start = os.fstat(log).st_size
        env = dict(os.environ, SPOOL_JOB_ID=job_id, SPOOL_ATTEMPT=str(attempt))
        try:
            # stdout and stderr are inherited: fds 1 and 2 are the attempt log right now.
            proc = subprocess.Popen(
                argv,
                stdin=DEVNULL,
                env=env,
                preexec_fn=self._die_with_us,  # noqa: PLW1509 - the child itself runs no threads
            )
        except (OSError, subprocess.SubprocessError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise _Failed(f"cannot run {argv[0]!r}: {reason}") from None
        status = proc.wait()
        end = os.fstat(log).st_size
        size = min(end - start, ERROR_BYTES)
        output = os.pread(log, size, end - size) if size > 0 else b""
        if status == 0:
            return {"exit": 0, "output": _tail(output, ERROR_BYTES)}
        prefix = f"exit status {status}: " if status > 0 else f"{_describe_exit(status)}: "
        raise _Failed(prefix + _tail(output, ERROR_BYTES - len(prefix)))


def main(argv: Sequence[str]) -> int:
    """The child's life: tie it to the worker, import the task modules, serve until EOF."""
    config = json.loads(argv[0])
    die_with_parent(int(config["parent_pid"]))
    if config["pythonpath"] is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = config["pythonpath"]
    request_fd, reply_fd = int(config["request_fd"]), int(config["reply_fd"])
    # pass_fds made them inheritable; no process a handler starts may hold them, or the
    # child's death would not be EOF to the worker.
    os.set_inheritable(request_fd, False)
    os.set_inheritable(reply_fd, False)
    sys.path[:0] = config["sys_path"]
    faulthandler.enable()  # a crash's Python stack goes to fd 2: the attempt log, mid-attempt
    import_error = None
    try:
        import_task_modules(config["import_modules"])
    except UsageError as exc:
        import_error = str(exc)
    attempts = _Attempts(config, import_error)
    try:
        _write_all(reply_fd, b'{"hello":true}\n')
        with open(request_fd, "rb") as requests:
            for line in requests:
                _write_all(reply_fd, attempts.run(json.loads(line)))
    except BrokenPipeError:
        # RACE: the worker was killed; the kernel closes its end of the pipe before
        # PR_SET_PDEATHSIG reaches us. Nobody is left to answer: end quietly, no traceback.
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
