"""The ledger's read-only questions (``Ledger`` inherits them): each one short read of the index.

They only ask; the writes, the connection and the file's identity are ``spool.ledger``'s. Kept
apart so the ledger module stays one idea (a connection that survives its file being replaced)
and the questions the layers above ask can grow without it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any


class LedgerQueries:
    """Queries over the jobs, deps, history, workers and remote_workers tables, through ``_read``."""

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        raise NotImplementedError  # spool.ledger.Ledger: one read transaction

    def states(self, among: Collection[str] = ()) -> dict[str, str]:
        """id -> state of every row, or of the rows in the states ``among`` (by the by_state index)."""
        where = f" WHERE state IN ({','.join('?' * len(among))})" if among else ""
        return dict(self._read("SELECT id, state FROM jobs" + where, among))

    def ready_pending_count(self) -> int:
        # Every submit asks (backpressure): count the partial index's entries, not by_state's rows.
        sql = "SELECT count(*) FROM jobs INDEXED BY claim_order WHERE state = 'pending' AND ready = 1"
        return self._read(sql)[0][0]

    def backlog(self) -> tuple[int, int]:
        """(ready jobs in pending/, drops the coordinator last counted): backpressure's two numbers
        (``spool.moves.submission.check_room``), in one read of two ``meta`` rows: the ready count
        is kept by the schema's triggers (``spool.ledger.schema``), so a submit costs the same at
        any depth. Without that row (a ledger no writer has migrated yet), counted."""
        sql = (
            "SELECT (SELECT value FROM meta WHERE name = 'ready_pending'), "
            "(SELECT value FROM meta WHERE name = 'drops')"
        )
        ready, drops = self._read(sql)[0]
        return (self.ready_pending_count() if ready is None else int(ready)), int(drops or 0)

    def counts(self) -> dict[str, int]:
        return dict(self._read("SELECT state, count(*) FROM jobs GROUP BY state"))

    def ready_by_task(self) -> dict[str, int]:
        """task -> ready jobs in pending/ (for "no live worker handles it")."""
        return dict(self._read("SELECT task, count(*) FROM jobs WHERE state = 'pending' AND ready = 1 GROUP BY task"))

    def ids(
        self,
        state: str | None = None,
        reason: str | None = None,
        limit: int | None = None,
        *,
        task: str | None = None,
        key_prefix: str | None = None,
        before: str | None = None,
        queue: str | None = None,
    ) -> list[str]:
        """Ids newest first; ``before``: only those older than that id (the next page of a listing)."""
        sql, params = "SELECT id FROM jobs WHERE 1=1", list[str]()
        if before:
            sql, params = sql + " AND id < ?", params + [before]
        if state:
            sql, params = sql + " AND state = ?", params + [state]
        if reason:
            sql, params = sql + " AND reason = ?", params + [reason]
        if task:
            sql, params = sql + " AND task = ?", params + [task]
        if queue:
            sql, params = sql + " AND queue = ?", params + [queue]
        if key_prefix:
            sql, params = sql + " AND key >= ? AND key < ?", params + list(_prefix_range(key_prefix))
        sql += " ORDER BY id DESC" + (f" LIMIT {int(limit)}" if limit is not None else "")
        return [row[0] for row in self._read(sql, params)]

    def last_keyed(self, key_prefix: str) -> tuple[str, str, str] | None:
        """(key, id, state) of the job with the greatest key that starts with ``key_prefix``."""
        sql = "SELECT key, id, state FROM jobs WHERE key >= ? AND key < ? ORDER BY key DESC LIMIT 1"
        rows = self._read(sql, _prefix_range(key_prefix))
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def not_ready_pending(self) -> list[str]:
        return [row[0] for row in self._read("SELECT id FROM jobs WHERE state = 'pending' AND ready = 0")]

    def waiting(self) -> list[str]:
        return [row[0] for row in self._read("SELECT id FROM jobs WHERE state = 'waiting'")]

    def dependents(self, dep_id: str) -> list[str]:
        return [row[0] for row in self._read("SELECT job_id FROM deps WHERE dep_id = ?", (dep_id,))]

    def history(self, job_id: str) -> list[tuple[float, str, int | None, str | None, str | None]]:
        return self._read(
            "SELECT at, event, attempt, worker, detail FROM history WHERE job_id = ? ORDER BY seq", (job_id,)
        )

    def completed_since(self, since: float) -> int:
        return self._read("SELECT count(*) FROM history WHERE event = 'complete' AND at >= ?", (since,))[0][0]

    def oldest_ready_submitted(self) -> str | None:
        rows = self._read("SELECT min(submitted_at) FROM jobs WHERE state = 'pending' AND ready = 1")
        return rows[0][0] if rows else None

    def workers(self) -> list[tuple[str, int, str, float, float]]:
        return self._read("SELECT name, pid, host, started, seen FROM workers ORDER BY seen DESC")

    def remote_workers(self, since: float) -> list[tuple[str, str, float, float, list[str] | None]]:
        """(name, host, started, seen, tasks) of the remote workers heard from at ``since`` or
        later, latest first; tasks None when none were recorded yet. A read-only reader of a
        ledger older than the table finds none."""
        if not self._read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'remote_workers'"):
            return []
        sql = "SELECT name, host, started, seen, tasks FROM remote_workers WHERE seen >= ? ORDER BY seen DESC"
        rows = self._read(sql, (since,))
        return [
            (name, host, started, seen, None if tasks is None else tasks.split())
            for name, host, started, seen, tasks in rows
        ]

    def states_of(self, job_ids: Collection[str]) -> dict[str, str]:
        """id -> state of these jobs' rows (a job without a row is not in the answer)."""
        ids, sql = list(job_ids), "SELECT id, state FROM jobs WHERE id IN ({})"
        chunks = (ids[start : start + 500] for start in range(0, len(ids), 500))
        return {i: s for chunk in chunks for i, s in self._read(sql.format(",".join("?" * len(chunk))), chunk)}

    def ids_in_state(self, state: str, *, after: str, limit: int) -> list[str]:
        """The next ``limit`` ids of the rows in ``state`` after id ``after``, in id order."""
        sql = "SELECT id FROM jobs WHERE state = ? AND id > ? ORDER BY id LIMIT ?"
        return [row[0] for row in self._read(sql, (state, after, limit))]

    def updated_before(self, states: Collection[str], before: float) -> list[str]:
        marks = ",".join("?" * len(states))
        return [
            row[0]
            for row in self._read(f"SELECT id FROM jobs WHERE state IN ({marks}) AND updated < ?", [*states, before])
        ]


def _prefix_range(prefix: str) -> tuple[str, str]:
    """Keys starting with ``prefix`` are those in [low, high): a range the by_key index answers."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)
