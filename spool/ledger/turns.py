"""Writers take turns at the ledger: a flock in ``locks/``, taken just before SQLite's write lock.

SQLite makes a writer that finds its write lock held sleep and try again (its busy handler:
1, 2, 5, 10 ms ...), never woken when the lock frees. With four producers, two workers and the
coordinator each writing a row per move, that cost a submit about 0.3 sleeps of ~1.4 ms on
average in issue 19's shape (c) (strace of one producer). ``Turns`` lines the writers up on a
flock of ``locks/ledger-writes.lock`` instead, taken before ``BEGIN IMMEDIATE`` and dropped
after ``COMMIT``, and a writer that finds it held looks again within 50 us to 2 ms (below).

It is a queue, never the guard: SQLite's lock still decides who writes. A process that can't
open or take the flock (a read-only ``locks/``, a failing disk, a lock file removed by hand so
that two processes now lock different files) writes as before and only waits SQLite's way.

Its wait is bounded as SQLite's is (``WAIT_SECONDS``, the ledger's busy timeout): a holder
stopped with SIGSTOP inside a transaction holds SQLite's lock as well, and a writer that has
waited that long goes on to SQLite's busy handler, which then reports the ledger busy as before.
A blocking flock can't take a timeout, so a busy one is polled, from 50 us doubling to 2 ms: a
turn lasts a few hundred microseconds, and the poll finds it free within a fraction of SQLite's
first sleep.
"""

from __future__ import annotations

from spool.base.clock import SYSTEM
from spool.base.errors import SpoolError
from spool.disk.fsio import fs
from spool.disk.layout import Layout, ledger_writes_lock_name

WAIT_SECONDS = 30.0  # the ledger's busy_timeout (spool.ledger.file.open_db)
FIRST_POLL_SECONDS = 0.00005
LAST_POLL_SECONDS = 0.002


class Turns:
    """One process's (one ``Ledger``'s) place in the writers' queue."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._clock = SYSTEM  # a wait for another process, never a test's fake clock (which it would move)
        self._fd: int | None = None
        self._usable = True  # False once the lock file could not be opened: SQLite's lock alone

    def take(self) -> bool:
        """Wait for our turn (at most ``WAIT_SECONDS``); whether we hold it (``give_back`` then)."""
        fd = self._open()
        if fd is None:
            return False
        try:
            if fs.flock(fd, blocking=False):
                return True
            deadline, pause = self._clock.monotonic() + WAIT_SECONDS, FIRST_POLL_SECONDS
            while self._clock.monotonic() < deadline:
                self._clock.sleep(pause)
                if fs.flock(fd, blocking=False):
                    return True
                pause = min(pause * 2, LAST_POLL_SECONDS)
        except OSError:
            pass  # a failing flock: this write waits SQLite's way
        return False

    def give_back(self) -> None:
        if self._fd is not None:
            try:
                fs.unflock(self._fd)
            except OSError:
                self.close()  # closing the descriptor drops the flock for certain

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fs.close(fd)
            except OSError:
                pass

    def _open(self) -> int | None:
        if self._fd is None and self._usable:
            try:
                self._fd = fs.open_lock(self._layout.fd("locks"), ledger_writes_lock_name())
            except (OSError, SpoolError):
                self._usable = False  # read-only, no locks/, a symlink there: not worth trying per write
        return self._fd
