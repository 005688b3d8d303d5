"""flock-based locks in ``locks/``: the kernel frees them when their holder dies.

A job's lock is held only for the length of one transition, so SIGSTOP of its holder stalls
that one job, never the spool. Worker liveness uses a lock too: every worker holds
``worker-<name>.lock`` while it lives, so the coordinator can tell a dead local worker from a
slow one without waiting out its lease.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Callable
from types import TracebackType

from spool.fsio import fs

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class Lock:
    """One held flock. Use as a context manager; releasing twice is harmless."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def publish(self, data: bytes) -> None:
        """Replace the lock file's content through the held fd (a worker's advertisement): a
        reader sees the old content, nothing, or the new one; never another process's."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the description drops the flock
            self._fd = None

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def acquire(locks_fd: int, name: str, *, blocking: bool) -> Lock | None:
    """Take ``locks/<name>``; None when ``blocking`` is False and someone else holds it."""
    fd = os.open(name, _OPEN_FLAGS, fs.file_mode, dir_fd=locks_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return Lock(fd)


def acquire_within(locks_fd: int, name: str, timeout_seconds: float | None, *,
                   on_wait: Callable[[], None] | None = None, notice_after_seconds: float = 1.0,
                   poll_seconds: float = 0.05) -> Lock | None:
    """Take ``locks/<name>``, waiting at most ``timeout_seconds`` (None: for ever); None on timeout.

    A person waiting on a lock deserves to know why: ``on_wait`` is called once, after
    ``notice_after_seconds``, if the lock is still held by someone else (a stopped process holds
    a lock for as long as it stays stopped)."""
    started = time.monotonic()
    noticed = False
    while True:
        lock = acquire(locks_fd, name, blocking=False)
        if lock is not None:
            return lock
        waited = time.monotonic() - started
        if timeout_seconds is not None and waited >= timeout_seconds:
            return None
        if not noticed and on_wait is not None and waited >= notice_after_seconds:
            noticed = True
            on_wait()
        pause = poll_seconds if timeout_seconds is None else min(poll_seconds, timeout_seconds - waited)
        time.sleep(max(pause, 0.001))


def is_held(locks_fd: int, name: str) -> bool | None:
    """Whether a live process holds ``locks/<name>``; None if there is no such lock file (or
    what is there is not a file a lock could be taken on).

    Opened read-only (flock needs no write access), so it works on a read-only spool too."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=locks_fd)
    except OSError:  # none, or not a lock at all (a planted directory or symlink): nobody holds it
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # read-only opens a planted directory too
            return None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False

