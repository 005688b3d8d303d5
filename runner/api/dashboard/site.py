"""The dashboard at ``/``: routes, the login form, the overview and its live event stream.

Behind the API's own tokens: the login form takes a token once and sets a session cookie
(``auth``). A submit or work token sees every page read-only (no buttons; a POST is
refused with 403); an admin token may act. Pages: ``/`` (live counts and the last hour's
throughput, drawn by ``static/dashboard.js`` from ``/events``), ``/jobs`` and ``/jobs/{id}``
(``jobs``), ``/busy`` (``busy``), ``/purge`` (``purge``), ``/schedules`` and ``/workers`` (``admin_pages``),
``/queues`` (``queues``); the overview's tables and warnings are ``overview``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from spool.base.errors import InvalidJob

from . import admin_pages, busy, jobs, purge, queues
from ..context import MAX_STREAMS, ApiError, Slots
from .auth import (
    COOKIE,
    FormError,
    SessionsFull,
    check_csrf,
    clear_cookie_header,
    cookie_header,
    read_form,
)
from .follow import follow_of
from .overview import overview_page
from .pages import HERE, Dash, back, safe_next, secured

if TYPE_CHECKING:
    from ..context import ApiContext

__all__ = ["routes"]

TOKEN_MAX_CHARS = 512
# Event streams one token may have open at once (a browser tab each; a browser opens at most 6
# connections to one host anyway). Past it, or past context.MAX_STREAMS in all: 429.
MAX_STREAMS_PER_TOKEN = 8
STREAM_RETRY_SECONDS = 5


def routes(ctx: ApiContext) -> list[BaseRoute]:
    """Every route of the dashboard; its sampler starts and stops with the app."""
    dash = Dash(ctx)
    ctx.on_startup.append(dash.live.start)
    ctx.on_shutdown.append(dash.live.stop)
    streams = Slots("dashboard streams open", MAX_STREAMS_PER_TOKEN, MAX_STREAMS, STREAM_RETRY_SECONDS)
    return [
        Route("/", dash.view(lambda r, s: overview_page(dash, r, s)), methods=["GET"]),
        Route("/events", partial(events, dash, streams), methods=["GET"]),
        Route("/login", partial(login_form, dash), methods=["GET"]),
        Route("/login", partial(login, dash), methods=["POST"]),
        Route("/logout", partial(logout, dash), methods=["POST"]),
        *jobs.routes(dash),
        *busy.routes(dash),
        *purge.routes(dash),
        *admin_pages.routes(dash),
        *queues.routes(dash),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]


async def events(dash: Dash, streams: Slots, request: Request) -> Response:
    """The live numbers as server-sent events (``live.Live.events``): one stream per browser,
    all fed from the one sampler (``?list=1&state=...`` follows a job list, ``?job=ID`` a job: the
    ``follow`` module). Each holds a connection for up to ``live.STREAM_SECONDS``, so
    each takes one of ``streams`` (its token's share, and the server's) until it ends."""
    session = await dash.session(request)
    if session is None:
        return dash.refuse(request, None, 401, "not logged in")
    try:
        follow = follow_of(request.query_params)
    except InvalidJob as err:
        return dash.refuse(request, session, 400, str(err))
    try:
        streams.take(session.name, f"token {session.name!r}")
    except ApiError as err:
        refused = dash.refuse(request, session, err.status, err.message)
        refused.headers.update(err.headers)
        return refused
    stream = dash.live.events(request.is_disconnected, request.headers.get("last-event-id"), follow)
    headers = {"X-Accel-Buffering": "no"}
    return secured(
        HeldStream(stream, partial(streams.give, session.name), media_type="text/event-stream", headers=headers)
    )


class HeldStream(StreamingResponse):
    """A streaming response that calls ``release`` once it has ended, however it ended (sent
    whole, its client gone, the server stopping)."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def login_form(dash: Dash, request: Request, status: int = 200, error: str = "") -> Response:
    return dash.render(
        "login.html",
        request,
        await dash.session(request),
        status=status,
        error=error,
        next=safe_next(request.query_params.get("next")),
    )


async def login(dash: Dash, request: Request) -> Response:
    """A token in a form -> a session cookie; a bad token answers 401 and the form again."""
    try:
        form = await read_form(request)
    except FormError as err:
        return dash.refuse(request, None, err.status, err.message)
    token = form.get("token", "").strip()
    try:
        made = await run_in_threadpool(dash.sessions.login, token) if 0 < len(token) <= TOKEN_MAX_CHARS else None
    except SessionsFull as err:
        return dash.refuse(request, None, 503, str(err))
    if made is None:
        return await login_form(dash, request, status=401, error="that token is not valid (or was revoked)")
    dash.sessions.logout(request.cookies.get(COOKIE))  # a new session id at every login
    response = back(safe_next(form.get("next")))
    response.headers.append("Set-Cookie", cookie_header(made[0]))
    return response


async def logout(dash: Dash, request: Request) -> Response:
    session = await dash.session(request)
    if session is not None:
        try:
            check_csrf(session, await read_form(request))
        except FormError as err:
            return dash.refuse(request, session, err.status, err.message)
        dash.sessions.logout(request.cookies.get(COOKIE))
    response = back("/login")
    response.headers.append("Set-Cookie", clear_cookie_header())
    return response
