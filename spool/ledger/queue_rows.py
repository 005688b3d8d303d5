"""The ledger's queue tables (``Ledger`` inherits them): the limits in force, as the queue files
last gave them, and what ``spool queue list`` and ``spool stats`` count per queue.

``queue_limits`` is the one place a claim reads limits from (``spool.ledger.limits``), so that
every claimer, local or over the API, decides against the same limits in the same transaction.
``spool.queues`` keeps it in step with ``queues/<name>.yaml``: ``spool queue set|pause|resume``
at once, the coordinator on every pass (a hand edit). A broken file leaves the row's limits as
they were and records the error beside them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from spool.ledger import limits as ql


@dataclass(frozen=True)
class QueueRow:
    """One queue as the ledger knows it: limits in force, the file's error, and its counts."""

    name: str
    limits: ql.Limits
    error: str | None
    pending: int
    ready: int
    leased: int
    claims_last_minute: int
    oldest_ready_submitted: str | None


class QueueRows:
    """Reads and writes of ``queue_limits`` and the per-queue counts, through ``_read``/``_write``."""

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        raise NotImplementedError  # spool.ledger.Ledger

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # spool.ledger.Ledger

    def _snapshot(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # spool.ledger.Ledger

    def set_queue_limits(self, name: str, limits: ql.Limits | None, error: str | None, seen: str) -> None:
        """The file of queue ``name`` as last read: its limits (None: broken, keep the ones in force)
        and its error (None: it parsed)."""
        with self._write() as db:
            if limits is None:
                db.execute(
                    "INSERT INTO queue_limits(name, error, seen) VALUES(?,?,?) "
                    "ON CONFLICT(name) DO UPDATE SET error = excluded.error, seen = excluded.seen",
                    (name, error, seen),
                )
                return
            db.execute(
                "INSERT INTO queue_limits(name, concurrency, rate_count, rate_ms, paused, error, seen) "
                "VALUES(?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET concurrency = excluded.concurrency, "
                "rate_count = excluded.rate_count, rate_ms = excluded.rate_ms, paused = excluded.paused, "
                "error = excluded.error, seen = excluded.seen",
                (name, limits.concurrency, limits.rate_count, limits.rate_ms, int(limits.paused), error, seen),
            )

    def forget_queue_limits(self, keep: Collection[str]) -> None:
        """Drop the rows of queue files that are gone (every queue not in ``keep``)."""
        with self._write() as db:
            for (name,) in db.execute("SELECT name FROM queue_limits").fetchall():
                if name not in keep:
                    db.execute("DELETE FROM queue_limits WHERE name = ?", (name,))

    def queue_limit_rows(self) -> dict[str, tuple[ql.Limits, str | None, str | None]]:
        """name -> (limits in force, the file's error or None, the file's identity last read)."""
        rows = self._read("SELECT name, concurrency, rate_count, rate_ms, paused, error, seen FROM queue_limits")
        return {
            name: (ql.Limits(conc, count, ms, bool(paused)), error, seen)
            for name, conc, count, ms, paused, error, seen in rows
        }

    def hold_of(self, queue: str, now_ms: int) -> ql.Hold | None:
        """Why ``queue`` takes no claim now (paused, at its concurrency or its rate), or None."""
        with self._snapshot() as db:  # the counts of one moment, without taking the writers' lock
            return ql.hold_of(db, queue, now_ms)

    def prune_claims(self, now_ms: int) -> None:
        with self._write() as db:
            ql.prune_claims(db, now_ms)

    def queue_rows(self, now: float) -> Iterator[QueueRow]:
        """Every queue that has a job or a file, by name, with its counts (``spool queue list``)."""
        counts: dict[str, list[Any]] = {}
        for queue, pending, ready, leased, oldest in self._read(
            "SELECT queue, SUM(state = 'pending'), SUM(state = 'pending' AND ready = 1), SUM(state = 'leased'), "
            "MIN(CASE WHEN state = 'pending' AND ready = 1 THEN submitted_at END) FROM jobs "
            "WHERE state IN ('pending', 'leased') GROUP BY queue"
        ):
            counts[queue] = [pending, ready, leased, oldest]
        claims = dict(
            self._read(
                "SELECT jobs.queue, COUNT(*) FROM history JOIN jobs ON jobs.id = history.job_id "
                "WHERE history.event = 'claim' AND history.at > ? GROUP BY jobs.queue",
                (now - 60.0,),
            )
        )
        files = self.queue_limit_rows()
        for name in sorted(set(counts) | set(files) | set(claims)):
            pending, ready, leased, oldest = counts.get(name, [0, 0, 0, None])
            limits, error, _ = files.get(name, (ql.Limits(), None, None))
            yield QueueRow(name, limits, error, pending, ready, leased, claims.get(name, 0), oldest)
