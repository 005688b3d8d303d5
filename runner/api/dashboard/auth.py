"""The dashboard's login: a token given once in a form, then a session cookie; CSRF on every POST.

The cookie holds a random session id (``secrets.token_urlsafe``), never the token: the server
keeps, in memory, which token name and role each session belongs to, its expiry, and its CSRF
token. A restart of the server logs everyone out, which is the safe direction. The cookie is
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
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

from spool.tokens import TokenStore

from ..context import ApiError, read_body

# __Host-: the browser keeps it only if Secure, for Path=/ and this host alone (no Domain).
COOKIE = "__Host-spool_session"
SESSION_SECONDS = 8 * 3600
SESSIONS_PER_TOKEN = 5  # a few browsers; the oldest goes at the next login
MAX_SESSIONS = 10_000  # reached only by 2,000 tokens logged in 5 times each
FORM_MAX_BYTES = 16 * 1024


class SessionsFull(Exception):
    """Every session the server keeps is live and another token's: a login must wait."""


class FormError(Exception):
    """A form the dashboard refuses: ``status`` and a sentence saying what was wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Session:
    name: str  # the token's name
    role: str
    token_created: float  # tells a token apart from a later one added under the same name
    csrf: str
    expires: float  # on the monotonic clock

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


class Sessions:
    """Session id -> Session, in this server's memory."""

    def __init__(self, tokens: TokenStore, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._tokens = tokens
        self._monotonic = monotonic
        self._by_id: dict[str, Session] = {}
        self._mutex = threading.Lock()

    def login(self, token: str) -> tuple[str, Session] | None:
        """A new session for a valid token (its id is the cookie's value), else None. Ends the
        token's own oldest session past ``SESSIONS_PER_TOKEN``; raises ``SessionsFull`` rather
        than end another token's."""
        info = self._tokens.verify(token)
        if info is None:
            return None
        session = Session(
            info.name, info.role, info.created, secrets.token_urlsafe(32), self._monotonic() + SESSION_SECONDS
        )
        session_id = secrets.token_urlsafe(32)
        with self._mutex:
            self._prune(session)
            self._by_id[session_id] = session
        return session_id, session

    def lookup(self, session_id: str | None) -> Session | None:
        """The live session of this cookie value, or None (unknown, expired, its token revoked)."""
        if not session_id:
            return None
        with self._mutex:
            session = self._by_id.get(session_id)
        if session is None:
            return None
        if session.expires <= self._monotonic() or not self._token_still_there(session):
            self.logout(session_id)
            return None
        return session

    def logout(self, session_id: str | None) -> None:
        with self._mutex:
            self._by_id.pop(session_id or "", None)

    def _token_still_there(self, session: Session) -> bool:
        return any(
            info.name == session.name and info.role == session.role and info.created == session.token_created
            for info in self._tokens.list()
        )

    def _prune(self, new: Session) -> None:
        """Make room for ``new``: drop expired sessions, then the oldest of ``new``'s token's own
        (dicts keep insertion order) until it has fewer than ``SESSIONS_PER_TOKEN``."""
        now = self._monotonic()
        for session_id in [i for i, s in self._by_id.items() if s.expires <= now]:
            del self._by_id[session_id]
        same = [i for i, s in self._by_id.items() if (s.name, s.token_created) == (new.name, new.token_created)]
        ended = same[: max(0, len(same) - SESSIONS_PER_TOKEN + 1)]
        if len(self._by_id) - len(ended) >= MAX_SESSIONS:  # before ending any: a refusal changes nothing
            raise SessionsFull(f"the server holds {MAX_SESSIONS} live sessions; try again later")
        for session_id in ended:
            del self._by_id[session_id]


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
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=50)
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
