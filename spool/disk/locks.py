"""flock-based locks in ``locks/``: the kernel frees them when their holder dies.

A job's lock is held only for the length of one transition, so SIGSTOP of its holder stalls
that one job, never the spool. Its holder may remove the lock file (``Lock.remove``: a purged
job, a purged key), so ``locks/`` does not keep a file for every job ever run. Whoever
takes a lock therefore checks, once it holds the flock, that the file it locked is still the
one under that name, and takes the one in place if not (the flock of a removed file guards
nothing: a newcomer makes a new file and locks that). Worker liveness uses a lock too: every worker holds
``worker-<name>.lock`` while it lives, so the coordinator can tell a dead local worker from a
slow one without waiting out its lease. Lock names come from ``spool.disk.layout``; every open,
flock and close goes through the ``spool.disk.fsio`` seam.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Literal, overload

from spool.base.clock import SYSTEM, Clock
from spool.disk.fsio import fs


class Lock:
    """One held flock. Use as a context manager; releasing twice is harmless."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def is_at(self, locks_fd: int, name: str) -> bool:
        """Whether ``locks/<name>`` is still the file this lock holds (see the module doc)."""
        assert self._fd is not None
        return fs.is_named(self._fd, locks_fd, name)

    def remove(self, locks_fd: int, name: str) -> None:
        """Unlink ``locks/<name>``, the file this lock holds: only its holder may, so nobody can be
        holding it after us. Every taker checks the name after its flock (``acquire``), so one
        that waited on this file takes a new one. The lock is still held: release it as ever."""
        if self._fd is not None:
            fs.unlink(locks_fd, name, missing_ok=True)

    def publish(self, data: bytes) -> None:
        """Replace the lock file's content through the held fd (a worker's advertisement): a
        reader sees the old content, nothing, or the new one; never another process's."""
        if self._fd is not None:
            fs.overwrite_held(self._fd, data)

    def release(self) -> None:
        if self._fd is not None:
            fs.close(self._fd)  # closing the description drops the flock
            self._fd = None

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


@overload
def acquire(locks_fd: int, name: str, *, blocking: Literal[True]) -> Lock: ...


@overload
def acquire(locks_fd: int, name: str, *, blocking: bool) -> Lock | None: ...


def acquire(locks_fd: int, name: str, *, blocking: bool) -> Lock | None:
    """Take ``locks/<name>``; None when ``blocking`` is False and someone else holds it."""
    while True:
        lock = _take(fs.open_lock(locks_fd, name), blocking=blocking)
        if lock is None or lock.is_at(locks_fd, name):
            return lock
        lock.release()  # RACE: its holder removed it while we waited on it: take the one there now


def acquire_existing(locks_fd: int, name: str) -> Lock | None:
    """Take ``locks/<name>`` without creating it (a read-only spool too: flock needs no write
    access); None when another process holds it. FileNotFoundError when there is no lock file,
    or what is there is no file a lock could be taken on: nobody can be holding it then.

    For a checker (``spool fsck``) that must write nothing, yet needs a moment in which nobody
    can be moving what the lock guards."""
    while True:
        try:
            fd = fs.open_lock_to_probe(locks_fd, name)
        except OSError as err:
            raise FileNotFoundError(err.errno, "no lock file", name) from None
        lock = _take(fd, blocking=False)
        if lock is None or lock.is_at(locks_fd, name):
            return lock
        lock.release()  # RACE: removed by its holder between our open and our flock: look again


@contextmanager
def held_unless_busy(locks_fd: int, name: str, *, create: bool = False) -> Iterator[bool]:
    """Hold ``locks/<name>`` for the block, never waiting: True when held, and True without a
    lock when there is no lock file and ``create`` is False (nobody can be holding it then);
    False when another process holds it. ``create=False`` writes nothing (``acquire_existing``).

    For a look that must not race the lock's holders (fsck's judgements, a submit's look for a
    reserved key's job) and may not block, as a holder may be waiting on a lock its caller holds."""
    lock: Lock | None
    try:
        lock = acquire(locks_fd, name, blocking=False) if create else acquire_existing(locks_fd, name)
    except FileNotFoundError:
        yield True
        return
    if lock is None:
        yield False
        return
    with lock:
        yield True


def _take(fd: int, *, blocking: bool) -> Lock | None:
    """flock the open ``fd``: a Lock that owns it, or None (``fd`` closed) when another process
    holds it and ``blocking`` is False."""
    try:
        taken = fs.flock(fd, blocking=blocking)
    except BaseException:
        fs.close(fd)
        raise
    if not taken:
        fs.close(fd)
        return None
    return Lock(fd)


def acquire_within(
    locks_fd: int,
    name: str,
    timeout_seconds: float | None,
    *,
    on_wait: Callable[[], None] | None = None,
    notice_after_seconds: float = 1.0,
    poll_seconds: float = 0.05,
    clock: Clock = SYSTEM,
) -> Lock | None:
    """Take ``locks/<name>``, waiting at most ``timeout_seconds`` (None: for ever); None on timeout.

    A person waiting on a lock deserves to know why: ``on_wait`` is called once, after
    ``notice_after_seconds``, if the lock is still held by someone else (a stopped process holds
    a lock for as long as it stays stopped). ``clock`` measures the wait and sleeps between polls."""
    started = clock.monotonic()
    noticed = False
    while True:
        lock = acquire(locks_fd, name, blocking=False)
        if lock is not None:
            return lock
        waited = clock.monotonic() - started
        if timeout_seconds is not None and waited >= timeout_seconds:
            return None
        if not noticed and on_wait is not None and waited >= notice_after_seconds:
            noticed = True
            on_wait()
        pause = poll_seconds if timeout_seconds is None else min(poll_seconds, timeout_seconds - waited)
        clock.sleep(max(pause, 0.001))


def is_held(locks_fd: int, name: str) -> bool | None:
    """Whether a live process holds ``locks/<name>``; None if there is no such lock file (or
    what is there is not a file a lock could be taken on).

    Opened read-only (flock needs no write access), so it works on a read-only spool too."""
    try:
        fd = fs.open_lock_to_probe(locks_fd, name)
    except OSError:  # none, or not a lock at all (a planted directory or symlink): nobody holds it
        return None
    try:
        return not fs.flock(fd, blocking=False)
    finally:
        fs.close(fd)
