"""flock-based locks in ``locks/``: the kernel frees them when their holder dies.

A job's lock is held only for the length of one transition, so SIGSTOP of its holder stalls
that one job, never the spool. Worker liveness uses a lock too: every worker holds
``worker-<name>.lock`` while it lives, so the coordinator can tell a dead local worker from a
slow one without waiting out its lease.
"""

from __future__ import annotations

import fcntl
import os
from types import TracebackType

from spool.fsio import fs

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class Lock:
    """One held flock. Use as a context manager; releasing twice is harmless."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

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


def is_held(locks_fd: int, name: str) -> bool | None:
    """Whether a live process holds ``locks/<name>``; None if there is no such lock file.

    Opened read-only (flock needs no write access), so it works on a read-only spool too."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=locks_fd)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def job_lock_name(job_id: str) -> str:
    return f"{job_id}.lock"


def key_lock_name(key_hash: str) -> str:
    return f"key-{key_hash}.lock"


def worker_lock_name(worker: str) -> str:
    return f"worker-{worker}.lock"
