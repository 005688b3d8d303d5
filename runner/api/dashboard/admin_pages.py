"""The dashboard's schedules and workers pages.

Schedules: ``spool.schedule.folder``'s list view (next fire time, the last slot) with each schedule's
latest firings from the ledger; enable, disable and "run now" are ``scheduling.set_enabled`` and
``scheduling.run_now``, as ``spool schedule`` does them.

Workers: local ones from the ledger's ``workers`` table (when each was last seen) and their
liveness locks (alive now: only those names' locks are probed, never a listing of ``locks/``,
which holds a lock per key, 100,000 of them at 100,000 keyed jobs). Remote ones from the ledger's
``remote_workers`` table (heard from by the server, with the tasks they ask for; alive within
the lease term, ``spool.workers``), then the work tokens used without such a record (a work
token's name is its worker's name) and the holders of leases nobody else lists. What each holds
comes from the ledger (a leased job's claim names its worker). A worker not alive and not heard
from for ``FORGET_AFTER_SECONDS`` is left out.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool.views import browse
from spool.schedule import folder as scheduling
from spool.base.errors import InvalidJob
from spool.base.timetext import format_time
from spool.workers import FORGET_AFTER_SECONDS, WORKER_NAME, roster

from .auth import Session
from .pages import Dash, back


def routes(dash: Dash) -> list[BaseRoute]:
    return [
        Route("/schedules", dash.view(lambda r, s: schedules_page(dash, r, s)), methods=["GET"]),
        Route("/schedules/{name}/enable", dash.action(lambda r, s, f: set_enabled(dash, r, True)), methods=["POST"]),
        Route("/schedules/{name}/disable", dash.action(lambda r, s, f: set_enabled(dash, r, False)), methods=["POST"]),
        Route("/schedules/{name}/run", dash.action(lambda r, s, f: run_now(dash, r)), methods=["POST"]),
        Route("/workers", dash.view(lambda r, s: workers_page(dash, r, s)), methods=["GET"]),
    ]


def schedules_page(dash: Dash, request: Request, session: Session) -> Response:
    views = scheduling.views(dash.sp, dash.sp.clock.wall())
    for view in views:
        view["firings"] = browse.firings(dash.sp, view["name"]) if WORKER_NAME.fullmatch(view["name"]) else []
    return dash.render("schedules.html", request, session, schedules=sorted(views, key=lambda v: v["name"]))


def _name(request: Request) -> str:
    name = request.path_params["name"]
    if not WORKER_NAME.fullmatch(name):
        raise InvalidJob(f"{name!r} is not a schedule name")
    return name


def set_enabled(dash: Dash, request: Request, enabled: bool) -> Response:
    name = _name(request)
    scheduling.set_enabled(dash.sp, name, enabled)
    return back("/schedules", f"{name} {'enabled' if enabled else 'disabled'}")


def run_now(dash: Dash, request: Request) -> Response:
    name = _name(request)
    entry = scheduling.entry_of(dash.sp, name)
    if entry.schedule is None:
        raise InvalidJob(f"schedule {name} can't be read: {entry.error}")
    submitted = scheduling.run_now(dash.sp, entry.schedule)
    return back(f"/jobs/{submitted.id}", f"{name} run now")


def workers_page(dash: Dash, request: Request, session: Session) -> Response:
    return dash.render("workers.html", request, session, **workers_view(dash))


def workers_view(dash: Dash) -> dict[str, Any]:
    now = dash.sp.clock.wall()
    held = browse.holders(dash.sp)
    local: dict[str, dict[str, Any]] = {}
    remote: dict[str, dict[str, Any]] = {}
    for seen in roster(dash.sp):
        if seen.remote or seen.alive or now - (seen.seen or 0.0) < FORGET_AFTER_SECONDS:
            row = _worker(seen.name, seen.pid, seen.host, seen.started, seen.seen, seen.alive, held)
            row["tasks"] = sorted(seen.tasks or [])
            (remote if seen.remote else local)[seen.name] = row
    for info in dash.ctx.tokens.list():
        if info.role != "work" or info.name in local or info.name in remote:
            continue
        heard = info.last_used
        if info.name in held or (heard is not None and now - heard < FORGET_AFTER_SECONDS):
            remote[info.name] = _worker(info.name, None, None, None, heard, None, held)
    for name in held:
        if name not in local and name not in remote:
            remote[name] = _worker(name, None, None, None, None, None, held)
    return {"local": list(local.values()), "remote": sorted(remote.values(), key=lambda w: w["name"])}


def _worker(
    name: str,
    pid: int | None,
    host: str | None,
    started: float | None,
    seen: float | None,
    alive: bool | None,
    held: dict[str, list[str]],
) -> dict[str, Any]:
    return {
        "name": name,
        "pid": pid,
        "host": host,
        "started": format_time(started) if started else "",
        "seen": format_time(seen) if seen else "",
        "alive": alive,
        "tasks": [],
        "holds": held.get(name, []),
    }
