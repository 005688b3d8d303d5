"""The claim's reservations (``Ledger`` inherits them): the rows a claim takes off the claim order,
within the queues' limits (``spool.ledger.limits``), and their undoing.

A reservation is decided in one ``BEGIN IMMEDIATE`` transaction; its rows turn 'leased' with the
reservation's token before their files move. Two things can take a reservation back before the
claimer holds the job's lock, and both are checked here rather than trusted:

- the coordinator's reconcile puts a 'leased' row whose file is in pending/ back (``holds``:
  the claimer's check under the lock, ``spool.moves.claiming.still_reserved``);
- a ledger made anew (deleted under running processes, set aside as corrupt, rebuilt) has no
  queue limits until queues/ is read into it: a reservation there takes nothing until
  ``sync_limits`` (``spool.queues.sync``, set by the handle) has run, so a paused queue stays
  paused across a new ledger (tests/crash/test_queue_limits_real.py).
"""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Callable, Collection, Iterable
from contextlib import AbstractContextManager
from typing import Any

from spool.base.clock import SYSTEM, Clock
from spool.ledger import limits

_RESERVATIONS = itertools.count(1)  # with the pid, each reservation's token (jobs.reserved)
BUSY_FIRST_SECONDS = 0.002  # ``retry_soon``: the first pause after a busy job lock, doubling to
BUSY_LAST_SECONDS = 1.0  # this while the lock stays held; a second without one starts again


class Reservations:
    """``reserve_many`` and its undoing, through ``_read``/``_write``."""

    _clock: Clock
    retry_at: float | None
    _capped: frozenset[str] | None = None  # ``capped_queues``, as the last reservation read them
    _busy_pause = 0.0  # ``retry_soon``'s last pause, and when it ends (wall time)
    _busy_until = -1e18
    # queues/ into this ledger (``spool.queues.sync``); None: a bare ledger, which then trusts
    # the limits rows it has.
    sync_limits: Callable[[], object] | None = None

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        raise NotImplementedError  # spool.ledger.Ledger

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # spool.ledger.Ledger

    def _snapshot(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # spool.ledger.Ledger

    def reserve_next(self, tasks: Collection[str] | None, queues: Collection[str] | None = None) -> str | None:
        """Take the best ready job of ``tasks`` (in ``queues``) off the claim order; the caller then claims it.

        The row goes to 'leased' before the file moves; if the caller dies before its rename,
        the coordinator's reconcile puts the row back to match the file (pending).
        """
        reserved = self.reserve_many(tasks, 1, queues).ids
        return reserved[0] if reserved else None

    def reserve_many(
        self,
        tasks: Collection[str] | None,
        most: int,
        queues: Collection[str] | None = None,
        only: str | None = None,
    ) -> limits.Reservation:
        """``reserve_next`` for up to ``most`` jobs in one transaction, best first (a worker's
        batch claim: ``spool.moves.group``), within the queues' limits (``spool.ledger.limits``);
        ``only``: that one job, or none."""
        token = f"{os.getpid()}.{next(_RESERVATIONS)}"
        trusted = self.sync_limits is None
        reservation = self._reserve(tasks, most, queues, token, trusted, only)
        if reservation.unsynced and self.sync_limits is not None:
            self.sync_limits()  # a ledger new since queues/ was last read into it: read it, then ask again
            reservation = self._reserve(tasks, most, queues, token, trusted, only)
        self.retry_at = reservation.retry_at
        if reservation.capped is not None:
            self._capped = reservation.capped
        return reservation

    def retry_soon(self) -> None:
        """A claim gave back a reserved job whose lock another process held, or whose row the
        reconcile took back: ask the claimer to look again soon (``retry_at``), not at its slow poll.

        Nothing lands in pending/ when that lock frees, so no wake-up comes: the coordinator's
        reconcile resyncs a job whose submitter has linked its file but not yet recorded its row,
        under the job's lock, and a worker woken by the submit's ``.wake`` met that lock and slept
        its ``poll_seconds`` (2 s) with the job ready (2 idle pickups in ~400 took 2,003-2,006 ms,
        docs/performance.md). The pause doubles from 2 ms to 1 s while the lock stays held (a holder
        stopped with SIGSTOP), so a claimer never spins on it."""
        now = SYSTEM.wall()  # a wait for another process (as the worker's idle wait), never a test's fake clock
        again = now < self._busy_until + BUSY_LAST_SECONDS
        self._busy_pause = min(self._busy_pause * 2, BUSY_LAST_SECONDS) if again else BUSY_FIRST_SECONDS
        self._busy_until = now + self._busy_pause
        self.retry_at = self._busy_until if self.retry_at is None else min(self.retry_at, self._busy_until)

    def capped_queues(self) -> frozenset[str]:
        """The queues with a concurrency limit, as this process's last reservation read them (read
        here once when it has made none). A job of one of them leaving leased/ frees a slot that
        idle workers wait on, and nothing else would wake them before their slow poll
        (``spool.moves.store.wake_slot``). A limit set since the last reservation is missed until
        the next: its freed slot is then found by the poll, seconds late, never wrongly."""
        if self._capped is None:
            rows = self._read("SELECT name FROM queue_limits WHERE concurrency IS NOT NULL")
            self._capped = frozenset(row[0] for row in rows)
        return self._capped

    def _reserve(
        self,
        tasks: Collection[str] | None,
        most: int,
        queues: Collection[str] | None,
        token: str,
        trusted: bool,
        only: str | None = None,
    ) -> limits.Reservation:
        with self._write() as db:
            # The clock is read once the transaction holds the write lock: a claim that waited for
            # it starts after the completion that freed its slot, never before (its ``started``).
            now_ms = int(self._clock.wall() * 1000)
            return limits.reserve(db, tasks, queues, most, now_ms, token, trust_limits=trusted, only=only)

    def ready_now(
        self, tasks: Collection[str] | None, queues: Collection[str] | None, most: int
    ) -> list[tuple[str, str, str]]:
        """(id, task, queue) of up to ``most`` jobs a claim could take now, reserving nothing
        (``spool.ledger.limits.peek``)."""
        with self._snapshot() as db:  # the limits' rooms and the rows at one moment, blocking no claim
            return limits.peek(db, tasks, queues, most, int(self._clock.wall() * 1000))

    def unreserve(self, job_id: str, reservation: limits.Reservation | None = None) -> None:
        """Undo a reservation of a job the caller could not take (its lock was busy, or the row
        was taken back): the row back in line if it is still ``reservation``'s (None: whoever's),
        and the reservation's place in a rate window given back."""
        token, at_ms = ("", None) if reservation is None else (reservation.token, round(reservation.at * 1000))
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET state = 'pending', ready = 1 "
                "WHERE id = ? AND state = 'leased' AND (? = '' OR reserved = ?)",
                (job_id, token, token),
            )
            db.execute(
                "DELETE FROM claims WHERE rowid = "
                "(SELECT MAX(rowid) FROM claims WHERE job_id = ? AND (? IS NULL OR at_ms = ?))",
                (job_id, at_ms, at_ms),
            )

    def holds(self, job_id: str, token: str) -> bool:
        """Whether the row of ``job_id`` is still 'leased' by the reservation ``token`` (a claimer's
        check under the job's lock: ``spool.ledger.limits.reserve``)."""
        sql = "SELECT 1 FROM jobs WHERE id = ? AND state = 'leased' AND reserved = ?"
        return bool(self._read(sql, (job_id, token)))

    def limits_synced(self) -> None:
        """Note that queues/ has been read into this ledger (``spool.queues.sync``)."""
        if not self._read("SELECT 1 FROM meta WHERE name = ?", (limits.SYNCED,)):
            with self._write() as db:
                db.execute("INSERT OR IGNORE INTO meta(name, value) VALUES(?, '1')", (limits.SYNCED,))
