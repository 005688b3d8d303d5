"""Queue limits where the claim is made: which ready jobs a claim may take, decided inside the
reservation's own write transaction.

Every claim of the spool, a local worker's or one made over the API for a remote worker, reserves
its jobs in one ``BEGIN IMMEDIATE`` transaction of the one ledger (``Ledger.reserve_many``), so
claims are decided one after another and each sees every reservation before it:

- ``concurrency N``: at most N rows of the queue in state 'leased'. A row turns 'leased' in the
  reservation, before its file moves, and leaves it only after its file has left leased/ (a
  completion, a failure, an expiry, a release records the row after the move), so the count is
  never below the leases that hold. A killed worker's slot is free when the coordinator has
  moved its job out of leased/ (its freed lock, or the lease term on the coordinator's clock),
  never by a timer of the claim's own.
- ``rate N/PERIOD``: at most N claims in any PERIOD, a sliding window of ``claims`` rows written in
  the same transaction, in whole milliseconds on the spool host's wall clock, which is also the
  attempt's ``started`` (so the job files show the window the limit kept).
- ``paused``: no claim at all.

A queue with no row in ``queue_limits`` costs one read of that (tiny) table per claim and no
write: its claims go through the claim order exactly as before queues. When some queue is held
or a worker names its queues, the claim reads each queue's own head instead
(``claim_by_queue``), so a held queue's backlog is never scanned past and never starves another.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spool.base.errors import InvalidJob
from spool.base.timetext import parse_time

if TYPE_CHECKING:
    from spool.job import JobFile

__all__ = ["Limits", "Reservation", "hold_of", "in_force", "reserve"]

CLAIMS_KEPT_MS = 3_600_000  # the longest window a rate can have (N/h)
SYNCED = "queues_synced"  # the meta row that says queues/ was read into this ledger once


@dataclass(frozen=True)
class Limits:
    """A queue's limits in force: None for a limit not set."""

    concurrency: int | None = None
    rate_count: int | None = None
    rate_ms: int | None = None
    paused: bool = False

    @property
    def limits_anything(self) -> bool:
        return self.paused or self.concurrency is not None or self.rate_count is not None


@dataclass(frozen=True)
class Reservation:
    """What one reservation took: ``ids`` best first; ``at``, the wall time it was decided at (whole
    milliseconds: the claimed attempts' ``started``); ``retry_at``, when a rate window that held a
    queue back next has room (None when nothing but a landing or a freed slot can give more);
    ``token``, written in the rows it took (``jobs.reserved``), so a claimer can tell under the
    job's lock that the row is still its own; ``fenced``, whether a job taken is in a queue with a
    concurrency limit, the only case where a reservation taken back matters (see ``reserve``);
    ``capped``, the queues with a concurrency limit as this reservation read them (None: not read)."""

    ids: list[str]
    at: float
    retry_at: float | None = None
    token: str = ""
    fenced: bool = False
    unsynced: bool = False  # nothing taken: queues/ was never read into this ledger (``SYNCED``)
    capped: frozenset[str] | None = None


@dataclass(frozen=True)
class Hold:
    """Why a queue takes no claim now: ``limit`` is 'paused', 'concurrency' or 'rate'."""

    queue: str
    limit: str
    text: str


def in_force(db: sqlite3.Connection) -> dict[str, Limits]:
    """Every queue's limits in force (the last valid ones of its file)."""
    rows = db.execute("SELECT name, concurrency, rate_count, rate_ms, paused FROM queue_limits").fetchall()
    limits = {name: Limits(conc, count, ms, bool(paused)) for name, conc, count, ms, paused in rows}
    return {name: value for name, value in limits.items() if value.limits_anything}


def _room(db: sqlite3.Connection, queue: str, limits: Limits, now_ms: int) -> tuple[int, Hold | None, float | None]:
    """How many more claims the queue takes now, why not (when none), and when a rate has room."""
    if limits.paused:
        return 0, Hold(queue, "paused", f"queue {queue} is paused"), None
    room = math.inf
    hold, retry_at = None, None
    if limits.concurrency is not None:
        (leased,) = db.execute(
            "SELECT COUNT(*) FROM jobs INDEXED BY leased_by_queue WHERE state = 'leased' AND queue = ?", (queue,)
        ).fetchone()
        room = limits.concurrency - leased
        if room <= 0:
            text = f"queue {queue} is at its concurrency {limits.concurrency} ({leased} leased)"
            hold = Hold(queue, "concurrency", text)
    if limits.rate_count is not None and limits.rate_ms is not None and room > 0:
        window_start = now_ms - limits.rate_ms
        (recent, oldest) = db.execute(
            "SELECT COUNT(*), MIN(at_ms) FROM claims WHERE queue = ? AND at_ms > ?", (queue, window_start)
        ).fetchone()
        room = min(room, limits.rate_count - recent)
        if room <= 0:
            retry_at = (oldest + limits.rate_ms) / 1000.0 if oldest is not None else None
            hold = Hold(
                queue,
                "rate",
                f"queue {queue} is at its rate {limits.rate_count} per {_period(limits.rate_ms)} "
                f"({recent} claims in the window)",
            )
    return max(0, int(min(room, 1 << 30))), hold, retry_at


def hold_of(db: sqlite3.Connection, queue: str, now_ms: int) -> Hold | None:
    """Why ``queue`` takes no claim now, or None when it has room (or no limits)."""
    limits = in_force(db).get(queue)
    if limits is None:
        return None
    room, hold, _ = _room(db, queue, limits, now_ms)
    return hold if room == 0 else None


def reserve(
    db: sqlite3.Connection,
    tasks: Collection[str] | None,
    queues: Collection[str] | None,
    most: int,
    now_ms: int,
    token: str = "",
    *,
    trust_limits: bool = False,
    only: str | None = None,
) -> Reservation:
    """Take up to ``most`` of the best ready jobs of ``tasks`` in ``queues`` (None: any) that the
    queues' limits allow, mark their rows 'leased' (with ``token``) and write the rate windows'
    claims. The caller holds the write transaction.

    RACE: a reserved row is 'leased' while its file is still in pending/, and the coordinator's
    reconcile puts such a row back to match the file (a claimer killed here must not hold a
    slot forever). A live claimer's row put back frees its slot in the count while the claimer
    goes on to move the file: a third claim could then exceed a concurrency limit. So a claim of
    a ``fenced`` reservation checks, under the job's lock (which the reconcile's resync also
    takes), that the row is still 'leased' with its token, and gives the job up if not
    (``spool.moves.claiming.still_reserved``; tests/unit/test_reserved_slots.py).

    A ledger that queues/ was never read into (``SYNCED``: made anew under running processes)
    takes nothing and says ``unsynced`` unless ``trust_limits``: ``Ledger.reserve_many`` reads
    queues/ in and asks again. ``only``: that one job or none (``spool run-one --job ID``)."""
    at = now_ms / 1000.0
    if (tasks is not None and not tasks) or (queues is not None and not queues) or most <= 0:
        return Reservation([], at, token=token)
    if not trust_limits and db.execute("SELECT 1 FROM meta WHERE name = ?", (SYNCED,)).fetchone() is None:
        return Reservation([], at, token=token, unsynced=True)  # no limits read yet: a paused queue would run
    limits = in_force(db)
    rooms: dict[str, int] = {}
    retry_ats: list[float] = []
    for queue, queue_limits in limits.items():
        if queues is None or queue in queues:
            room, _, retry_at = _room(db, queue, queue_limits, now_ms)
            rooms[queue] = room
            if retry_at is not None:
                retry_ats.append(retry_at)
    taken: list[tuple[str, str]] = []
    while len(taken) < most:
        held = {queue for queue, room in rooms.items() if room <= 0}
        rows = _candidates(db, tasks, queues, held, most - len(taken), only)
        if not rows:
            break
        skipped = False
        for job_id, queue in rows:
            if queue in rooms:
                if rooms[queue] <= 0:
                    skipped = True  # its room ran out inside this batch: asked again without it
                    continue
                rooms[queue] -= 1
            taken.append((job_id, queue))
            db.execute("UPDATE jobs SET state = 'leased', ready = 0, reserved = ? WHERE id = ?", (token, job_id))
        if not skipped:
            break
    rated = [
        (queue, now_ms, job_id) for job_id, queue in taken if queue in limits and limits[queue].rate_count is not None
    ]
    if rated:
        db.executemany("INSERT INTO claims(queue, at_ms, job_id) VALUES(?,?,?)", rated)
    capped = capped_of(limits)
    fenced = any(queue in capped for _, queue in taken)
    retry_at = min(retry_ats) if retry_ats else None
    return Reservation([job_id for job_id, _ in taken], at, retry_at, token, fenced, capped=capped)


def capped_of(limits: dict[str, Limits]) -> frozenset[str]:
    """The queues whose concurrency is limited: a job of theirs leaving leased/ frees a slot."""
    return frozenset(queue for queue, value in limits.items() if value.concurrency is not None)


def peek(
    db: sqlite3.Connection, tasks: Collection[str] | None, queues: Collection[str] | None, most: int, now_ms: int
) -> list[tuple[str, str, str]]:
    """(id, task, queue) of up to ``most`` ready jobs a claim of ``tasks`` in ``queues`` could
    take now, best first, reserving nothing: a queue whose limits leave no room shows none, and
    one with room for n shows at most n (``spool dispatch`` starts one engine job per job seen)."""
    if (tasks is not None and not tasks) or (queues is not None and not queues) or most <= 0:
        return []
    rooms = {
        queue: _room(db, queue, queue_limits, now_ms)[0]
        for queue, queue_limits in in_force(db).items()
        if queues is None or queue in queues
    }
    seen: list[str] = []
    for job_id, queue in _candidates(db, tasks, queues, {q for q, room in rooms.items() if room <= 0}, most):
        if queue in rooms:
            if rooms[queue] <= 0:
                continue
            rooms[queue] -= 1
        seen.append(job_id)
    if not seen:
        return []
    marks = ",".join("?" * len(seen))
    found = {row[0]: row for row in db.execute(f"SELECT id, task, queue FROM jobs WHERE id IN ({marks})", seen)}
    return [found[job_id] for job_id in seen if job_id in found]


def _candidates(
    db: sqlite3.Connection,
    tasks: Collection[str] | None,
    queues: Collection[str] | None,
    held: set[str],
    most: int,
    only: str | None = None,
) -> list[tuple[str, str]]:
    """The ``most`` best ready (id, queue) of ``tasks``, in ``queues`` and not in ``held``
    (``only``: that job, if it is one of them)."""
    task_clause, task_params = "", []
    if tasks is not None:
        task_clause = f" AND task IN ({','.join('?' * len(tasks))})"
        task_params = list(tasks)
    if only is not None:  # by its primary key, not by a walk of the claim order
        rows = db.execute(
            f"SELECT id, queue FROM jobs WHERE id = ? AND state = 'pending' AND ready = 1{task_clause}",
            [only, *task_params],
        ).fetchall()
        return [(job_id, queue) for job_id, queue in rows if queue not in held and (queues is None or queue in queues)]
    if queues is None and not held:
        # INDEXED BY: left to itself SQLite picks by_state (state = ?) and sorts every pending row
        # on each claim (~0.5 s at 100,000 pending; benchmarks/claim_cost.py); claim_order is
        # already in claim order, so the first matching entries are the answer.
        return db.execute(
            "SELECT id, queue FROM jobs INDEXED BY claim_order WHERE state = 'pending' AND ready = 1"
            f"{task_clause} ORDER BY priority DESC, ready_seq LIMIT {int(most)}",
            task_params,
        ).fetchall()
    names = sorted(queues) if queues is not None else _ready_queues(db)
    heads: list[tuple[int, int, str, str]] = []
    for queue in names:
        if queue in held:
            continue
        heads += db.execute(
            "SELECT -priority, ready_seq, id, queue FROM jobs INDEXED BY claim_by_queue "
            f"WHERE state = 'pending' AND ready = 1 AND queue = ?{task_clause} "
            f"ORDER BY priority DESC, ready_seq LIMIT {int(most)}",
            [queue, *task_params],
        ).fetchall()
    heads.sort()
    return [(job_id, queue) for _, _, job_id, queue in heads[:most]]


def _ready_queues(db: sqlite3.Connection) -> list[str]:
    """The queues that have a ready job, one index probe each (a skip scan over claim_by_queue)."""
    names: list[str] = []
    last = ""
    while True:
        (name,) = db.execute(
            "SELECT MIN(queue) FROM jobs INDEXED BY claim_by_queue WHERE state = 'pending' AND ready = 1 AND queue > ?",
            (last,),
        ).fetchone()
        if name is None:
            return names
        names.append(name)
        last = name


def rated_queues(db: sqlite3.Connection) -> set[str]:
    """The queues with a rate in force."""
    return {name for name, value in in_force(db).items() if value.rate_count is not None}


def claims_of(db: sqlite3.Connection, job_file: JobFile, now: float) -> None:
    """A rebuilt ledger's window: the job's attempts started within the longest window, from
    their records (an attempt's ``started`` is its claim's time)."""
    since_ms = int(now * 1000) - CLAIMS_KEPT_MS
    for record in job_file.attempts:
        if record.started is None:
            continue
        try:
            at_ms = round(parse_time(record.started, "started").timestamp() * 1000)
        except InvalidJob:
            continue  # a hand-edited record: the window is an index, never worth failing a rebuild for
        if at_ms > since_ms:
            db.execute(
                "INSERT INTO claims(queue, at_ms, job_id) VALUES(?,?,?)", (job_file.job.queue, at_ms, job_file.id)
            )


def prune_claims(db: sqlite3.Connection, now_ms: int) -> None:
    """Forget claims older than the longest window (the coordinator, once a pass)."""
    db.execute("DELETE FROM claims WHERE at_ms <= ?", (now_ms - CLAIMS_KEPT_MS,))


def _period(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            count = ms // size
            return unit if count == 1 else f"{count}{unit}"
    return f"{ms / 1000:g}s"
