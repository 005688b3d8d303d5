"""What ``GET /metrics`` reads from the ledger, and the running totals it keeps of the history.

The counts per state and task, and the oldest ready job per task, are asked afresh at every
scrape (one grouped read each). The counters (submits, completions, failures, retries, lease
expiries) and the attempt durations come from the history table (one row per transition, see
``spool.ledger.schema``), folded into ``HistoryTotals`` in ``seq`` order: a scrape reads only
the rows written since the last one, so its cost does not grow with the history.

How each total is counted from the rows:

    submits      ``submit`` and ``ingest`` rows (an invalid drop's ``ingest`` is not a submit)
    completions  ``complete`` rows
    failures     ``fail`` rows (a failed attempt, retried or not)
    expiries     ``expire`` rows
    retries      a ``fail`` or ``expire`` after which the job went back to pending: seen as its
                 next ``claim`` or a ``cancel`` (only a pending job is cancelled after one), or
                 as the job being pending or leased when the rows were read; a ``requeue`` or
                 a terminal state means it was buried, not retried
    claims       ``claim`` rows, per queue (the job's queue)
    durations    from an attempt's ``claim`` row to its ``complete`` or ``fail`` row (the ledger's
                 clock, ``history.at``); an attempt that expired, was released or cancelled
                 has no duration

The queues (``queue_rows``: pending, leased, claims in the last minute, limits) are capped like
the tasks: ``capped_queues`` keeps ``max_queues_shown`` of them by name and sums the rest into one
row named ``OTHER``.

A ledger rebuilt from the files (``fsck --repair``, an unusable one replaced) starts a new
history: the totals start again from it (Prometheus reads a counter that went down as a reset).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spool.ledger.limits import Limits
from spool.ledger.queue_rows import QueueRow

if TYPE_CHECKING:
    from spool.ledger.core import Ledger

# Seconds; the last bucket (+Inf) is implicit. From a quick handler to an hour-long one.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
ROWS_PER_READ = 20_000  # history rows per read transaction while catching up

# The label of every task or queue past the cap: no task or queue can be called this (both start
# with a letter or digit: spool.registry.TASK_NAME, spool.disk.ids.ID_PATTERN).
OTHER = "_other"

_SUBMITS = ("submit", "ingest")
_AWAITS = ("fail", "expire")


@dataclass(frozen=True)
class HistoryRow:
    seq: int
    job_id: str
    at: float
    event: str
    attempt: int | None
    task: str | None  # None when the job's row is gone (purged since)
    state: str | None  # the job's state when the row was read
    invalid: bool  # an ingest of an invalid drop
    queue: str | None = None  # the job's queue (None when its row is gone)


@dataclass
class Durations:
    """One task's attempt durations: cumulative-ready bucket counts, their sum and count."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total_seconds: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.total_seconds += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, observations at or under it), +Inf last, as Prometheus writes them."""
        running, out = 0, []
        for bound, n in zip((*map(str, DURATION_BUCKETS), "+Inf"), self.buckets):
            running += n
            out.append((bound, running))
        return out


@dataclass
class HistoryTotals:
    """The counters and durations per task (claims: per queue), from every history row up to ``seq``."""

    seq: int = 0
    generation: int | None = None  # the ledger file's open they were read from
    submits: Counter[str] = field(default_factory=Counter)
    completions: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    expiries: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    claims: Counter[str] = field(default_factory=Counter)  # per queue
    durations: dict[str, Durations] = field(default_factory=dict)
    _claimed: dict[tuple[str, int], float] = field(default_factory=dict)  # open attempts: claim time
    _awaiting: dict[str, str] = field(default_factory=dict)  # job id -> task after a fail or expire
    _states: dict[str, str | None] = field(default_factory=dict)  # job id -> state, as last read

    def fold(self, rows: list[HistoryRow], *, latest: bool = True) -> None:
        """Add rows (in seq order, read in one transaction) to the totals. ``latest``: no row was
        written after them when they were read, so the jobs' states are of the same moment and
        decide what a fail or expire not yet followed by anything was."""
        awaiting, last_state = self._awaiting, self._states
        for row in rows:
            self.seq = max(self.seq, row.seq)
            last_state[row.job_id] = row.state
            if row.task is None:
                continue  # purged since: nothing to attribute it to
            task, event = row.task, row.event
            if row.job_id in awaiting and event in ("claim", "cancel"):
                self.retries[awaiting.pop(row.job_id)] += 1
            elif event == "requeue":
                awaiting.pop(row.job_id, None)
            if event in _SUBMITS and not row.invalid:
                self.submits[task] += 1
            elif event == "claim" and row.attempt is not None:
                self.claims[row.queue or "default"] += 1
                self._claimed[(row.job_id, row.attempt)] = row.at
            elif event in ("complete", "fail"):
                (self.completions if event == "complete" else self.failures)[task] += 1
                started = self._claimed.pop((row.job_id, row.attempt or 0), None)
                if started is not None:
                    self.durations.setdefault(task, Durations()).observe(max(0.0, row.at - started))
            elif event in ("expire", "release", "cancel"):
                self._drop_claims(row.job_id)
                if event == "expire":
                    self.expiries[task] += 1
            if event in _AWAITS:
                awaiting[row.job_id] = task
        if latest:
            for job_id, task in awaiting.items():
                if last_state.get(job_id) in ("pending", "leased"):  # leased: a claim in flight
                    self.retries[task] += 1
            awaiting.clear()
            last_state.clear()

    def _drop_claims(self, job_id: str) -> None:
        for key in [key for key in self._claimed if key[0] == job_id]:
            del self._claimed[key]


def history_after(ledger: Ledger, seq: int, limit: int = ROWS_PER_READ) -> list[HistoryRow]:
    """The history rows after ``seq``, oldest first, each with its job's task and state now (one
    read: the states are those of the same moment as the rows)."""
    rows = ledger._read(
        "SELECT h.seq, h.job_id, h.at, h.event, h.attempt, j.task, j.state, "
        "h.event = 'ingest' AND coalesce(h.detail, '') LIKE 'invalid:%', j.queue "
        "FROM history h LEFT JOIN jobs j ON j.id = h.job_id WHERE h.seq > ? ORDER BY h.seq LIMIT ?",
        (seq, limit),
    )
    return [HistoryRow(r[0], r[1], float(r[2]), r[3], r[4], r[5], r[6], bool(r[7]), r[8]) for r in rows]


def last_seq(ledger: Ledger) -> int:
    return int(ledger._read("SELECT coalesce(max(seq), 0) FROM history")[0][0])


def catch_up(ledger: Ledger, totals: HistoryTotals) -> HistoryTotals:
    """``totals`` with every row written since they were last read; fresh totals when the ledger
    was replaced or its history rebuilt (its last seq went below ours)."""
    generation = ledger.generation()
    if totals.generation != generation or last_seq(ledger) < totals.seq:
        totals = HistoryTotals(generation=generation)
    while True:
        rows = history_after(ledger, totals.seq, ROWS_PER_READ)
        totals.fold(rows, latest=len(rows) < ROWS_PER_READ)
        if len(rows) < ROWS_PER_READ:
            return totals


def job_counts(ledger: Ledger) -> list[tuple[str, str, int]]:
    """(state, task, jobs) for every state and task with jobs."""
    found: Counter[tuple[str, str]] = Counter()
    for state, task, _, n in job_counts_by_queue(ledger):
        found[(state, task)] += n
    return [(state, task, n) for (state, task), n in found.items()]


def job_counts_by_queue(ledger: Ledger) -> list[tuple[str, str, str, int]]:
    """(state, task, queue, jobs) for every state, task and queue with jobs: one pass for both
    the tasks' and the queues' counts (at most one group per job, however many names)."""
    # NOT INDEXED: left to itself SQLite walks by_state and looks each row up for its task; one
    # pass over the table is faster (~40 ms at 100,000 jobs, against ~70; benchmarks/metrics_scrape.py).
    rows = ledger._read("SELECT state, task, queue, count(*) FROM jobs NOT INDEXED GROUP BY state, task, queue")
    return [(r[0], r[1], r[2], int(r[3])) for r in rows]


def oldest_ready(ledger: Ledger) -> dict[str, str]:
    """task -> the submitted_at (RFC 3339 text) of its oldest ready job in pending/."""
    oldest: dict[str, str] = {}
    for task, _, at, _ in ready_by_queue(ledger):
        oldest[task] = min(oldest.get(task, at), at)
    return oldest


def ready_by_queue(ledger: Ledger) -> list[tuple[str, str, str, int]]:
    """(task, queue, submitted_at of the oldest, ready jobs) of the ready jobs in pending/."""
    # The claim order's partial index holds exactly the ready jobs in pending/.
    sql = (
        "SELECT task, queue, min(submitted_at), count(*) FROM jobs INDEXED BY claim_order "
        "WHERE state = 'pending' AND ready = 1 GROUP BY task, queue"
    )
    return [(r[0], r[1], r[2], int(r[3])) for r in ledger._read(sql)]


def shown_queues(busy: Mapping[str, int], chosen: Collection[str], shown: int) -> set[str] | None:
    """The ``shown`` queue names to name one by one, or None when every one fits. Queue names are
    the submitters' choice; the queues kept are first those an operator chose (``chosen``: with
    limits, or a broken file, what holds jobs back), then ``default``, then the busiest (``busy``:
    jobs pending and leased now), then by name: a submitter inventing names can push out only
    other invented names, never a queue an operator limited."""
    if len(busy) <= shown:
        return None
    ranked = sorted(busy, key=lambda name: (name not in chosen, name != "default", -busy[name], name))
    return set(ranked[:shown])


def capped_queues(rows: list[QueueRow], shown: int) -> tuple[list[QueueRow], QueueRow | None]:
    """``rows`` (by name) cut to ``shown_queues``, and every other one summed into a row named
    ``OTHER`` (None when none is left over; it has no limits of its own)."""
    chosen = {row.name for row in rows if row.limits.limits_anything or row.error is not None}
    kept_names = shown_queues({row.name: row.pending + row.leased for row in rows}, chosen, shown)
    if kept_names is None:
        return rows, None
    kept = [row for row in rows if row.name in kept_names]
    rest = [row for row in rows if row.name not in kept_names]
    oldest = [row.oldest_ready_submitted for row in rest if row.oldest_ready_submitted is not None]
    other = QueueRow(
        OTHER,
        Limits(),
        None,
        sum(row.pending for row in rest),
        sum(row.ready for row in rest),
        sum(row.leased for row in rest),
        sum(row.claims_last_minute for row in rest),
        min(oldest) if oldest else None,
    )
    return kept, other
