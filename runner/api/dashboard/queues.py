"""The dashboard's queues page: each queue's limits, its counts, what holds it, and pause/resume.

The rows are the ledger's (``queue_rows``), after ``spool.queues.sync`` has brought in any hand
edit of queues/ (as ``spool queue list`` does), so a broken file shows its error at once. Queue
names are the submitters' choice: the page names ``max_queues_shown`` of them
(``spool.ledger.metrics.capped_queues``: those with limits or a broken file first) and sums the
rest in one row, so inventing names cannot make the page any longer. Pause and resume are
``spool.queues.set_limits(paused=...)``, as ``spool queue pause|resume`` do them: the file first,
then the ledger's row, so the next claim is held (or let go).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool import queues
from spool.base.timetext import parse_time
from spool.ledger import OTHER, QueueRow, capped_queues

from .auth import Session
from .pages import Dash, back


def routes(dash: Dash) -> list[BaseRoute]:
    return [
        Route("/queues", dash.view(lambda r, s: queues_page(dash, r, s)), methods=["GET"]),
        Route("/queues/{name}/pause", dash.action(lambda r, s, f: set_paused(dash, r, True)), methods=["POST"]),
        Route("/queues/{name}/resume", dash.action(lambda r, s, f: set_paused(dash, r, False)), methods=["POST"]),
    ]


def queues_page(dash: Dash, request: Request, session: Session) -> Response:
    queues.sync(dash.sp)
    now = dash.sp.clock.wall()
    rows = list(dash.sp.ledger.queue_rows(now))
    kept, other = capped_queues(rows, dash.sp.settings.max_queues_shown)
    shown = [queue_view(dash, row, now) for row in kept]
    return dash.render(
        "queues.html",
        request,
        session,
        queues=shown,
        other=queue_view(dash, other, now) if other is not None else None,
        others=len(rows) - len(kept),
    )


def queue_view(dash: Dash, row: QueueRow, now: float) -> dict[str, Any]:
    """One row of the page. The hold is asked only of a queue with limits (none holds the rest)."""
    limited = row.name != OTHER and row.limits.limits_anything
    hold = queues.hold_of(dash.sp, row.name) if limited else None
    oldest = row.oldest_ready_submitted
    return {
        "name": row.name,
        "concurrency": row.limits.concurrency,
        "rate": queues.rate_text(row.limits),
        "paused": row.limits.paused,
        "pending": row.pending,
        "ready": row.ready,
        "leased": row.leased,
        "claims": row.claims_last_minute,
        "oldest_age": age_text(now - parse_time(oldest, "submitted_at").timestamp()) if oldest else "",
        "hold": hold.text if hold is not None else "",
        "held_by": hold.limit if hold is not None else "",
        "error": row.error or "",
    }


def age_text(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 10m``, ``3d 4h``: how long the oldest ready job has waited."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60:02}m"
    return f"{whole // 86400}d {whole % 86400 // 3600}h"


def set_paused(dash: Dash, request: Request, paused: bool) -> Response:
    name = queues.check_name(request.path_params["name"])
    queues.set_limits(dash.sp, name, paused=paused)
    return back("/queues", f"{name} {'paused' if paused else 'resumed'}")
