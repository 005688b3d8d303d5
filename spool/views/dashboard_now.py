"""What the dashboard shows of the spool now: the jobs running (its busy view) and a table per task
and per queue (counts by state, ready, claims and failures in the last minute, the oldest ready).

The counts are those ``GET /metrics`` and ``spool stats`` read (``spool.ledger.metrics``: one
grouped pass over the jobs, one over the ready ones); the per-minute rates are one read of the
history's last minute. The history has no index on its time, so that read walks back at most
``RECENT_ROWS`` rows by ``seq`` (its primary key): past ~300 events a second the rates say
``at least``. Like ``browse``, these only ask.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spool.base.errors import LedgerError
from spool.base.timetext import parse_time
from spool.disk.layout import State
from spool.ledger.metrics import job_counts_by_queue, ready_by_queue
from spool.views.stats import coordinator_state, ledger_trouble
from spool.workers import live_workers, roster, unhandled_ready

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = ["RECENT_ROWS", "Tally", "capped", "health", "leased_count", "running", "tallies"]

RECENT_ROWS = 20_000
_RATE_EVENTS = ("claim", "fail", "expire")


def health(sp: Handle) -> dict[str, Any]:
    """What ``spool stats`` warns of, read by the same functions ``stats.collect`` calls (less
    its queue views and last minute's completions, which the overview shows otherwise): the
    coordinator, the workers alive (local and remote), the ready jobs, the oldest one's age in
    seconds, and task -> ready jobs for each task no live worker handles. ``ledger`` is "ok", or
    why the rest is missing."""
    found: dict[str, Any] = {"coordinator": coordinator_state(sp), "local": 0, "remote": 0}
    try:
        now = sp.clock.wall()
        oldest = sp.ledger.oldest_ready_submitted()
        alive = [seen for seen in roster(sp) if seen.alive]
        found.update(
            local=sum(1 for seen in alive if not seen.remote),
            remote=sum(1 for seen in alive if seen.remote),
            ready=sp.ledger.ready_pending_count(),
            oldest_ready_seconds=now - parse_time(oldest, "submitted_at").timestamp() if oldest else None,
            unhandled=unhandled_ready(sp, live_workers(sp)),
            ledger="ok",
        )
    except LedgerError as err:
        found.update(ready=None, oldest_ready_seconds=None, unhandled={}, ledger=ledger_trouble(sp, err, "no more"))
    return found


def running(sp: Handle, limit: int) -> list[dict[str, Any]]:
    """The leased jobs, longest running first (at most ``limit``): id, task, queue, key, attempt,
    the worker whose claim holds it and when that claim was made (a wall time; None when the
    history no longer has the claim)."""
    sql = (
        "SELECT j.id, j.task, j.queue, j.key, j.attempt, h.worker, h.at FROM jobs j"
        " LEFT JOIN history h ON h.job_id = j.id AND h.event = 'claim' AND h.attempt = j.attempt"
        " WHERE j.state = 'leased' ORDER BY h.at IS NULL, h.at, j.id LIMIT ?"
    )
    names = ("id", "task", "queue", "key", "attempt", "worker", "started")
    return [dict(zip(names, row)) for row in sp.ledger._read(sql, (limit,))]


def leased_count(sp: Handle) -> int:
    return int(sp.ledger._read("SELECT count(*) FROM jobs WHERE state = 'leased'")[0][0])


@dataclass
class Tally:
    """One task's (or queue's) row: jobs per state now, the ready ones, the oldest ready's
    submitted_at, and the claims and failed attempts (fail or expire) of the last minute."""

    name: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((s.value for s in State), 0))
    ready: int = 0
    oldest_ready: str | None = None
    claims: int = 0
    failures: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, other: Tally) -> None:
        for state, n in other.counts.items():
            self.counts[state] = self.counts.get(state, 0) + n
        self.ready += other.ready
        self.claims += other.claims
        self.failures += other.failures
        if other.oldest_ready is not None:
            self.oldest_ready = min(self.oldest_ready or other.oldest_ready, other.oldest_ready)


def tallies(sp: Handle, since: float) -> tuple[list[Tally], list[Tally], bool]:
    """(per task, per queue, whether the rates' read reached ``RECENT_ROWS``), each by name;
    rates count events at or after ``since`` (a wall time)."""
    tasks: dict[str, Tally] = {}
    queues: dict[str, Tally] = {}

    def both(task: str, queue: str) -> tuple[Tally, Tally]:
        return tasks.setdefault(task, Tally(task)), queues.setdefault(queue, Tally(queue))

    for state, task, queue, n in job_counts_by_queue(sp.ledger):
        for tally in both(task, queue):
            tally.counts[state] = tally.counts.get(state, 0) + n
    for task, queue, oldest, n in ready_by_queue(sp.ledger):
        for tally in both(task, queue):
            tally.ready += n
            tally.oldest_ready = min(tally.oldest_ready or oldest, oldest)
    recent, cut = _recent_events(sp, since)
    for task, queue, event, n in recent:
        for tally in both(task, queue):
            if event == "claim":
                tally.claims += n
            else:
                tally.failures += n
    return sorted(tasks.values(), key=lambda t: t.name), sorted(queues.values(), key=lambda t: t.name), cut


def _recent_events(sp: Handle, since: float) -> tuple[list[tuple[str, str, str, int]], bool]:
    marks = ",".join("?" * len(_RATE_EVENTS))
    last = int(sp.ledger._read("SELECT coalesce(max(seq), 0) FROM history")[0][0])
    sql = (
        "SELECT j.task, j.queue, h.event, count(*) FROM history h JOIN jobs j ON j.id = h.job_id"
        f" WHERE h.seq > ? AND h.at >= ? AND h.event IN ({marks}) GROUP BY 1, 2, 3"
    )
    rows = sp.ledger._read(sql, (last - RECENT_ROWS, since, *_RATE_EVENTS))
    first = sp.ledger._read("SELECT at FROM history WHERE seq = ?", (last - RECENT_ROWS + 1,))
    cut = bool(first) and float(first[0][0]) >= since  # the oldest row read is still inside the minute
    return [(r[0], r[1], r[2], int(r[3])) for r in rows], cut


def capped(rows: Iterable[Tally], shown: int, other: str) -> tuple[list[Tally], Tally | None]:
    """The ``shown`` busiest rows (most jobs not yet ended, then most jobs), by name, and the
    rest summed into one row called ``other`` (None when all fit)."""
    rows = list(rows)
    if len(rows) <= shown:
        return rows, None
    busy = sorted(rows, key=lambda t: (-(t.counts["pending"] + t.counts["leased"] + t.counts["waiting"]), -t.total))
    kept = {t.name for t in busy[:shown]}
    rest = Tally(other)
    for t in rows:
        if t.name not in kept:
            rest.add(t)
    return [t for t in rows if t.name in kept], rest
