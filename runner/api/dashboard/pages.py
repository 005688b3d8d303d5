"""What every dashboard page shares: the templates, the session check, the headers, the errors.

``Dash`` is built once per app by ``spool.runner.api.dashboard.routes``. Its ``view`` wraps a GET
page (no session: to the login form) and its ``action`` wraps a POST (a form of bounded size, the
session's CSRF token, the admin role: otherwise 401/403 and nothing is done). Every response
carries a Content-Security-Policy that allows only the dashboard's own script and style files
(no inline script, no other origin), and pages are never cached.

Work on the spool (ledger reads, moves) runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast
from urllib.parse import urlencode

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from spool.views import browse
from spool.disk import SESSIONS_NAME, TLS
from spool.base.errors import InvalidJob, LedgerError, NotFound, SpoolError, TryLater
from spool.base.timetext import format_time

from .auth import COOKIE, FormError, Session, Sessions, check_csrf, read_form
from .live import Live
from .story import duration_text

if TYPE_CHECKING:
    from ..context import ApiContext

HERE = Path(__file__).resolve().parent
CHOICES_SECONDS = 10.0
_NOTE_KEY = secrets.token_bytes(32)  # signs the one-line notes of this server's redirects
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
        " form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" even with
    # our own forms, and check_origin could not tell them from another site's.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

T = TypeVar("T")
Page = Callable[[Request, Session], Response]
Action = Callable[[Request, Session, dict[str, str]], Response]


class Choices(NamedTuple):
    tasks: list[str]
    more_tasks: bool  # more tasks have jobs than ``tasks`` names
    reasons: list[str]


class Dash:
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self.sp = ctx.sp
        self.sessions = Sessions(ctx.tokens, ctx.sp.layout.path(TLS, SESSIONS_NAME))
        self.live = Live(ctx.sp)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.globals["query"] = query_string
        self.templates.globals["duration"] = duration_text
        self.templates.filters["rfc3339"] = format_time
        self._choices: tuple[float, Choices] | None = None
        self._kept: dict[str, tuple[float, Any]] = {}
        self._kept_lock = threading.Lock()

    def kept(self, name: str, seconds: float, read: Callable[[], T]) -> T:
        """``read()``'s answer, kept for ``seconds`` and shared by every viewer: for what a page
        reads in one pass over the jobs (the overview's tables at 100,000 jobs: ~150 ms), so a
        hundred open overviews cost the ledger one such read per ``seconds``, not one each."""
        with self._kept_lock:
            now = time.monotonic()
            found = self._kept.get(name)
            if found is None or now - found[0] > seconds:
                found = (now, read())
                self._kept[name] = found
            return cast(T, found[1])

    def choices(self) -> Choices:
        """The tasks and reasons the list's filter offers: two scans of the ledger at 100,000
        jobs (~50 ms), so kept for CHOICES_SECONDS, not read for every page of every viewer.
        The tasks are the ``max_tasks_shown`` busiest; with more, the filter takes any name."""
        now = time.monotonic()
        if self._choices is None or now - self._choices[0] > CHOICES_SECONDS:
            tasks, more = browse.busiest_tasks(self.sp, self.sp.settings.max_tasks_shown)
            self._choices = (now, Choices(tasks, more, browse.reasons(self.sp)))
        return self._choices[1]

    async def session(self, request: Request) -> Session | None:
        """The request's live session (its check re-reads tls/tokens.yaml when it changed: off
        the event loop, like every read of the spool)."""
        return await run_in_threadpool(self.sessions.lookup, request.cookies.get(COOKIE))

    def render(
        self, template: str, request: Request, session: Session | None, status: int = 200, **values: Any
    ) -> Response:
        html = self.templates.get_template(template).render(
            session=session, note=_note_of(request), path=request.url.path, **values
        )
        return secured(HTMLResponse(html, status_code=status))

    def refuse(self, request: Request, session: Session | None, status: int, message: str) -> Response:
        return self.render("error.html", request, session, status=status, status_code=status, message=message)

    def view(self, page: Page) -> Callable[[Request], Awaitable[Response]]:
        """A GET page: needs a session; errors become a page that says what went wrong."""

        @functools.wraps(page)
        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if session is None:
                return secured(RedirectResponse("/login?" + urlencode({"next": _local(request)}), status_code=303))
            try:
                return await run_in_threadpool(page, request, session)
            except (SpoolError, FormError) as err:
                return self.refuse(request, session, *_status_of(err))

        return endpoint

    def action(self, act: Action) -> Callable[[Request], Awaitable[Response]]:
        """A POST: a session, a good CSRF token and the admin role."""

        @functools.wraps(act)
        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if session is None:
                return self.refuse(request, None, 401, "not logged in (or the session ended): log in again")
            try:
                form = await read_form(request)
                check_csrf(session, form)
                if not session.is_admin:
                    raise FormError(403, f"token {session.name!r} has role {session.role}: only admin may act")
                return await run_in_threadpool(act, request, session, form)
            except (SpoolError, FormError) as err:
                return self.refuse(request, session, *_status_of(err))

        return endpoint


def secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def back(to: str, note: str = "") -> Response:
    """303 to a page of ours, with a one-line ``note`` it shows (signed, so a link from elsewhere
    can't make a page of ours say what it likes)."""
    sep = "&" if "?" in to else "?"
    signed = {"note": note, "sig": _sign(note)}
    return secured(RedirectResponse(to + (sep + urlencode(signed) if note else ""), status_code=303))


def _sign(note: str) -> str:
    return hmac.new(_NOTE_KEY, note.encode(), hashlib.sha256).hexdigest()[:32]


def _note_of(request: Request) -> str:
    note = request.query_params.get("note", "")
    good = hmac.compare_digest(request.query_params.get("sig", "").encode(), _sign(note).encode())
    return note if note and good else ""


def _status_of(err: Exception) -> tuple[int, str]:
    if isinstance(err, FormError):
        return err.status, err.message
    if isinstance(err, NotFound):
        return 404, str(err)
    if isinstance(err, InvalidJob):
        return 400, str(err)
    if isinstance(err, (TryLater, LedgerError)):
        return 503, str(err)
    return 409, str(err)


def _local(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def safe_next(target: str | None) -> str:
    """Where a login may send the browser: only a path of ours (never //host or a scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def query_string(values: Mapping[str, Any], **changes: Any) -> str:
    """A query string of ``values`` with ``changes``, empty fields left out (for links)."""
    merged = {**values, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})
