"""The dashboard's overview (``/``): the live counts and throughput (``live``), what ``spool
stats`` warns of, and a table per task and per queue.

The warnings and the workers are ``spool stats``'s own (``dashboard_now.health``, through the
functions ``spool.views.collect`` calls): each task with ready jobs that no live worker handles
(in the sentence ``spool status`` and the log use), the oldest ready job's age, the coordinator,
and the workers alive, local and remote counted apart. The tables are
``spool.views.dashboard_now.tallies``: per task and per queue, jobs by state, the ready ones,
the oldest ready, claims and failed attempts in the last minute. Task and queue names are the
submitters' choice, so each table names the busiest ``max_tasks_shown`` (or ``max_queues_shown``)
and sums the rest in one row.

Both are read at most every ``KEPT_SECONDS`` for all viewers together (``Dash.kept``): at
100,000 jobs they cost ~120 ms (benchmarks/dashboard_overview.py).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from spool.base.errors import LedgerError
from spool.base.timetext import parse_time
from spool.ledger import OTHER
from spool.views import dashboard_now
from spool.workers import unhandled_warning

from .auth import Session
from .pages import Dash
from .queues import age_text

RATE_SECONDS = 60
KEPT_SECONDS = 2.0  # the warnings and tables are read at most this often, for every viewer at once


def overview_page(dash: Dash, request: Request, session: Session) -> Response:
    sample = dash.live.sample_now
    now = dash.sp.clock.wall()
    health = dash.kept("health", KEPT_SECONDS, lambda: dashboard_now.health(dash.sp))
    oldest = health["oldest_ready_seconds"]
    return dash.render(
        "overview.html",
        request,
        session,
        counts=sample.counts,
        trouble=sample.trouble or (None if health["ledger"] == "ok" else health["ledger"]),
        coordinator=health["coordinator"],
        no_coordinator=not health["coordinator"].startswith("running"),
        workers_alive=health["local"] + health["remote"],
        remote_alive=health["remote"],
        local_alive=health["local"],
        ready=health["ready"],
        oldest_ready=age_text(oldest) if oldest is not None else None,
        unhandled=[(task, n, unhandled_warning(task)) for task, n in health["unhandled"].items()],
        **dash.kept("tables", KEPT_SECONDS, lambda: tables(dash, now)),
    )


def tables(dash: Dash, now: float) -> dict[str, Any]:
    """The per-task and per-queue rows as the template draws them (empty when the ledger can't
    be read: the counts above say why)."""
    try:
        tasks, queues, cut = dashboard_now.tallies(dash.sp, now - RATE_SECONDS)
    except LedgerError:
        return {"task_rows": [], "queue_rows": [], "rates_cut": False, "rates_rows": dashboard_now.RECENT_ROWS}
    settings = dash.sp.settings
    task_rows, task_rest = dashboard_now.capped(tasks, settings.max_tasks_shown, OTHER)
    queue_rows, queue_rest = dashboard_now.capped(queues, settings.max_queues_shown, OTHER)
    return {
        "task_rows": [_row(t, now) for t in task_rows] + ([_row(task_rest, now)] if task_rest else []),
        "queue_rows": [_row(q, now) for q in queue_rows] + ([_row(queue_rest, now)] if queue_rest else []),
        "rates_cut": cut,
        "rates_rows": dashboard_now.RECENT_ROWS,
    }


def _row(tally: dashboard_now.Tally, now: float) -> dict[str, Any]:
    oldest = tally.oldest_ready
    return {
        "name": tally.name,
        "other": tally.name == OTHER,
        "counts": tally.counts,
        "ready": tally.ready,
        "claims": tally.claims,
        "failures": tally.failures,
        "oldest_ready": age_text(now - parse_time(oldest, "submitted_at").timestamp()) if oldest else "",
    }
