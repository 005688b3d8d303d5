"""The dashboard's busy view (``/busy``): what runs now, longest running first.

Each row is a leased job (``spool.views.dashboard_now.running``): its task, queue, attempt, the
worker whose claim holds it (local: a ``spool worker`` on this host, in the ledger's ``workers``
table; remote: any other name, a remote worker or a work token), when it started, how long it
has run (counted on by ``dashboard.js``) and the progress its handler last reported. The page
follows the leased jobs live over ``/events`` (a list's stream with ``state=leased``): a job that
starts or ends reloads it.
"""

from __future__ import annotations


from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool.base.errors import LedgerError
from spool.views import dashboard_now
from spool.workers import roster

from .auth import Session
from .pages import Dash
from .story import progresses_of

BUSY_SHOWN = 200


def routes(dash: Dash) -> list[BaseRoute]:
    return [Route("/busy", dash.view(lambda r, s: busy_page(dash, r, s)), methods=["GET"])]


def busy_page(dash: Dash, request: Request, session: Session) -> Response:
    since = dash.live.sample_now.version  # before the rows are read: the page follows on from it
    rows = dashboard_now.running(dash.sp, BUSY_SHOWN)
    total = dashboard_now.leased_count(dash.sp)
    progress = progresses_of(dash.sp, [row["id"] for row in rows])
    local = local_names(dash)
    for row in rows:
        row["where"] = "local" if row["worker"] in local else "remote"
        row["progress"] = progress.get(row["id"])
    return dash.render(
        "busy.html", request, session, rows=rows, more=max(0, total - len(rows)), since=since, now=dash.sp.clock.wall()
    )


def local_names(dash: Dash) -> set[str]:
    """The names of the workers that ran on this host (the rest hold leases over the API)."""
    try:
        return {seen.name for seen in roster(dash.sp) if not seen.remote}
    except LedgerError:
        return set()
