"""Queues as ``spool queue list``, ``spool stats``, ``spool status`` and the API show them.

One queue is one object (README: "Queues and limits"): ``name``, the limits in force
(``concurrency``, ``rate`` as ``N/PERIOD``, ``paused``), the file's ``error`` (when set, the
limits shown are the last valid ones, still in force), the counts (``pending``, ``ready``,
``leased``, ``claims_last_minute``, ``oldest_ready_seconds``) and ``held_by``, what keeps the
queue from taking a claim now (``{"queue", "limit", "text"}``) or null.

``held_by`` asks the ledger in a write transaction (the counts of one moment, as a claim sees
them), so it is asked only of a queue that has a limit in force: an unlimited queue costs one
read of the small ``queue_limits`` table and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spool.base.errors import LedgerError
from spool.base.timetext import parse_time
from spool.disk.layout import State
from spool.ledger.limits import Hold, Limits

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = ["held_by", "hold_view", "limits_view", "queue_views", "queue_views_from_files"]


def limits_view(limits: Limits) -> dict[str, Any]:
    """The limits as the JSON shows them: ``concurrency`` and ``rate`` null when not set."""
    from spool.queues import rate_text  # start-up: the queue files' module loads for a view only

    return {"concurrency": limits.concurrency, "rate": rate_text(limits), "paused": limits.paused}


def hold_view(hold: Hold | None) -> dict[str, str] | None:
    return None if hold is None else {"queue": hold.queue, "limit": hold.limit, "text": hold.text}


def _hold(sp: Handle, queue: str, limits: Limits) -> Hold | None:
    if not limits.limits_anything or sp.read_only:
        return None  # no limit holds it; a read-only spool can't open the write transaction
    try:
        return sp.ledger.hold_of(queue, int(sp.clock.wall() * 1000))
    except LedgerError:
        return None


def queue_views(sp: Handle, *, sync: bool = True) -> list[dict[str, Any]]:
    """Every queue with a job, a file or a recent claim, by name. ``sync``: read queues/ into the
    ledger first, so a hand edit shows at once (skipped on a read-only spool). Raises LedgerError
    when the ledger can't be read."""
    if sync and not sp.read_only:
        from spool import queues  # start-up: the queue files' module loads for a view only

        queues.sync(sp)
    now = sp.clock.wall()
    views = []
    for row in sp.ledger.queue_rows(now):
        oldest = row.oldest_ready_submitted
        views.append(
            {
                "name": row.name,
                **limits_view(row.limits),
                "error": row.error,
                "pending": row.pending,
                "ready": row.ready,
                "leased": row.leased,
                "claims_last_minute": row.claims_last_minute,
                "oldest_ready_seconds": round(now - parse_time(oldest, "submitted_at").timestamp(), 3)
                if oldest
                else None,
                "held_by": hold_view(_hold(sp, row.name, row.limits)),
            }
        )
    return views


def queue_views_from_files(sp: Handle) -> list[dict[str, Any]]:
    """``queue_views`` without a usable ledger: each file's limits (a broken one's none: the limits
    in force are the ledger's), and no counts (null)."""
    from spool import queues  # start-up: the queue files' module loads for a view only

    views = []
    for name, queue_file in queues.read_files(sp).items():
        counts = dict.fromkeys(("pending", "ready", "leased", "claims_last_minute", "oldest_ready_seconds"))
        shown = limits_view(queue_file.limits or Limits())
        views.append({"name": name, **shown, "error": queue_file.error, **counts, "held_by": None})
    return views


def held_by(sp: Handle, state: State, queue: str, not_before: str | None) -> dict[str, str] | None:
    """For ``spool status``: the limit that holds this job back now, or None. Only a ready job in
    pending/ is held by a limit (a waiting or delayed one waits for something else first)."""
    if state is not State.PENDING:
        return None
    if not_before is not None and parse_time(not_before, "not_before").timestamp() > sp.clock.wall():
        return None
    try:
        row = sp.ledger.queue_limit_rows().get(queue)
    except LedgerError:
        return None  # the status came from the files; the limits are the ledger's
    return None if row is None else hold_view(_hold(sp, queue, row[0]))
