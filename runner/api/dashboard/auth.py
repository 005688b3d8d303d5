"""The dashboard's login: a token given once in a form, then a session cookie; CSRF on every POST.

The cookie holds a random session id (``secrets.token_urlsafe``), never the token: the servers
keep, in ``tls/sessions.sqlite3`` (``.sessions``, shared by every ``spool serve`` of the spool),
which token name and role each session belongs to, its expiry, and its CSRF token. The cookie is
``Secure; HttpOnly; SameSite=Strict; Path=/``, named ``__Host-...``. Every request checks the session's token is
still the one in ``tls/tokens.yaml`` (same name and creation time), so ``spool token revoke``
ends its sessions at their next request.

A token holds at most ``SESSIONS_PER_TOKEN`` sessions: its next login ends its own oldest one,
never another token's, so no token can log anyone else out by logging in often. The whole table
is still bounded (``MAX_SESSIONS``); when it is full of live sessions, a login is refused (503)
and nobody is logged out.

Every POST carries the session's CSRF token in a form field, compared in constant time; together
with SameSite=Strict, a page on another site can't make a logged-in browser act.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

from ..context import ApiError, read_body
from .sessions import SESSION_SECONDS, SESSIONS_PER_TOKEN, Session, Sessions, SessionsFull

__all__ = [
    "COOKIE",
    "SESSIONS_PER_TOKEN",
    "FormError",
    "Session",
    "Sessions",
    "SessionsFull",
    "check_csrf",
    "read_form",
]

# __Host-: the browser keeps it only if Secure, for Path=/ and this host alone (no Domain).
COOKIE = "__Host-spool_session"
FORM_MAX_BYTES = 16 * 1024
FORM_MAX_FIELDS = 64  # a job list's page of hand-picked rows (jobs.PAGE_SIZE) and the form's own fields


class FormError(Exception):
    """A form the dashboard refuses: ``status`` and a sentence saying what was wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def cookie_header(session_id: str) -> str:
    return f"{COOKIE}={session_id}; Max-Age={SESSION_SECONDS}; Path=/; Secure; HttpOnly; SameSite=Strict"


def clear_cookie_header() -> str:
    return f"{COOKIE}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict"


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form of at most FORM_MAX_BYTES; each field once; sent from a page of this
    server (``check_origin``). Raises FormError."""
    check_origin(request)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise FormError(415, "expected a form (application/x-www-form-urlencoded)")
    try:
        body = await read_body(request, FORM_MAX_BYTES)  # the API's caps: size, and a slow body's time
    except ApiError as err:
        raise FormError(err.status, err.message) from None
    try:
        text = body.decode("utf-8")
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=False, max_num_fields=FORM_MAX_FIELDS)
    except (UnicodeDecodeError, ValueError) as err:
        raise FormError(400, f"the form can't be read: {err}") from None
    repeated = sorted(name for name, values in fields.items() if len(values) > 1)
    if repeated:
        raise FormError(400, f"field {repeated[0]!r} given more than once")
    return {name: values[0] for name, values in fields.items()}


def check_origin(request: Request) -> None:
    """Refuse a form a browser sends from another site's page (its ``Origin`` names that site).
    This also covers the login form, where there is no session yet and so no CSRF token: another
    site can't log a browser in with a token of its own. A client that sends no Origin is not a
    browser posting across sites; the session's CSRF token still guards every action."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    parts = urlsplit(origin)
    if parts.scheme != "https" or parts.netloc.lower() != request.headers.get("host", "").lower():
        raise FormError(403, f"a form from {origin[:100]!r} is not one of this dashboard's pages")


def check_csrf(session: Session, form: dict[str, str]) -> None:
    if not hmac.compare_digest(form.get("csrf", "").encode(), session.csrf.encode()):
        raise FormError(403, "the form's CSRF token is missing or wrong: reload the page and try again")
