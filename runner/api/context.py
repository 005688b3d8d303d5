"""What every route module of the API shares: the ``ApiContext``, ``ApiError``, ``require`` (who is
calling, with which role) and ``read_json`` (a request body read under a cap, as hostile input).

Roles: ``submit`` submits, reads, cancels and requeues jobs; ``work`` leases and reports its own
leases (its token's name is its worker name); ``dispatch`` leases and reports for its runners
only (``<token>/<runner>``: ``runner.api.runners``); ``admin`` passes every check (and alone may submit
a ``shell`` job). ``/healthz`` alone is anonymous.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request

from spool.spool import Spool
from spool.tokens import TokenInfo, TokenStore

# A JSON body may hold a job (max_job_bytes) or a result (max_result_bytes) with escapes: JSON
# can spell a byte of YAML or JSON as up to six ("\u0000"), but a realistic spec's escaping
# stays well under twice its size, and anything past the cap is refused, not truncated.
JSON_MARGIN_BYTES = 16 * 1024
MAX_HEAD_BYTES = 16 * 1024  # a request's line and headers together
# Connections uvicorn takes at once (503 past them). Requests that stay open (long-polls, the
# dashboard's streams) may hold at most MAX_HELD of them together, whoever asks, so the rest
# (MAX_CONNECTIONS - MAX_HELD) always answer /healthz, submits, heartbeats and completions.
MAX_CONNECTIONS = 200
MAX_POLLS = 100  # long-polls waiting at once, every worker together (runner.api.leases)
MAX_STREAMS = 50  # the dashboard's event streams open at once, every session together
MAX_HELD = MAX_POLLS + MAX_STREAMS


@dataclass
class ApiContext:
    """The open spool and what the server's parts share.

    ``on_startup``/``on_shutdown``: each awaited once, in order, when the app starts and stops
    (uvicorn's lifespan). Long-lived work (a sampler) starts its own ``asyncio.create_task`` in
    its start-up callable, returns at once, and cancels the task in its shutdown one."""

    sp: Spool
    tokens: TokenStore
    on_startup: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    on_shutdown: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def max_body_bytes(self) -> int:
        """The largest body any endpoint takes (a job or a result), plus the JSON margin: the
        cap checked on Content-Length before any endpoint runs."""
        settings = self.sp.settings
        return max(settings.max_job_bytes, settings.max_result_bytes) + JSON_MARGIN_BYTES

    @property
    def max_job_body_bytes(self) -> int:
        """A submit's body: one job spec (``max_job_bytes``) plus the JSON margin."""
        return self.sp.settings.max_job_bytes + JSON_MARGIN_BYTES


class Slots:
    """Requests of one kind that stay open (``what``: "long-polls waiting"), counted per holder (a
    token's name) and in all: ``take`` refuses one past ``per_holder`` or past ``total`` with 429
    and Retry-After, so one token can't hold every connection, nor all tokens together the ones
    kept for the rest. Used on the event loop only (no lock)."""

    def __init__(self, what: str, per_holder: int, total: int, retry_after_seconds: int = 1) -> None:
        self.what, self.per_holder, self.total = what, per_holder, total
        self._retry = {"Retry-After": str(retry_after_seconds)}
        self._held: dict[str, int] = {}
        self.in_use = 0

    def take(self, holder: str, who: str) -> None:
        """One slot for ``holder`` (``who`` names it in the refusal); give it back with ``give``."""
        if self._held.get(holder, 0) >= self.per_holder:
            raise ApiError(429, f"{who} already has {self.per_holder} {self.what}", None, headers=self._retry)
        if self.in_use >= self.total:
            message = f"the server already has {self.total} {self.what}, its most at once; try again shortly"
            raise ApiError(429, message, None, headers=self._retry)
        self._held[holder] = self._held.get(holder, 0) + 1
        self.in_use += 1

    def give(self, holder: str) -> None:
        self.in_use -= 1
        self._held[holder] -= 1
        if not self._held[holder]:
            del self._held[holder]

    @contextlib.contextmanager
    def held(self, holder: str, who: str) -> Iterator[None]:
        self.take(holder, who)
        try:
            yield
        finally:
            self.give(holder)


class ApiError(Exception):
    """An answer other than success: the app sends ``{"error": message, "where": where}`` with
    ``status`` (and ``headers``, e.g. Retry-After); ``fields`` adds facts a client acts on (a lost
    lease's job state and attempt)."""

    def __init__(
        self,
        status: int,
        message: str,
        where: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        fields: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.where = where
        self.headers = headers or {}
        self.fields = fields or {}


def require(ctx: ApiContext, request: Request, *roles: str) -> TokenInfo:
    """The caller's token, checked: 401 without one or with an unknown or revoked one, 403 when its
    role is not in ``roles`` (admin passes every check). The token is read from the Authorization
    header only, never from the URL."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401, "a token is needed: send 'Authorization: Bearer <token>'", "header Authorization", headers=_CHALLENGE
        )
    info = ctx.tokens.verify(token.strip())
    if info is None:
        raise ApiError(401, "unknown or revoked token", "header Authorization", headers=_CHALLENGE)
    if info.role != "admin" and info.role not in roles:
        raise ApiError(403, f"token {info.name!r} has role {info.role!r}; this needs {' or '.join(roles) or 'admin'}")
    return info


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request's body, at most ``max_bytes``: 413 from Content-Length before reading a byte,
    413 as soon as a chunked or lying body passes the cap, 408 if it is not whole within
    the ``http_body_seconds`` setting, which ``create_app`` puts in the app's state (a slow-loris
    upload is cut)."""
    within_seconds: float = request.app.state.body_seconds
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ApiError(400, f"Content-Length {length[:40]!r} is not a number", "header Content-Length")
        if int(length) > max_bytes:
            raise ApiError(413, f"body of {int(length)} bytes is over the cap of {max_bytes}", "body")
    chunks, size = [], 0
    try:
        with anyio.fail_after(within_seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise ApiError(413, f"body is over the cap of {max_bytes} bytes", "body")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, f"body not received whole within {within_seconds:g} s", "body") from None
    except ClientDisconnect:
        raise ApiError(400, "client went away before sending the whole body", "body") from None
    return b"".join(chunks)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The body as JSON (``read_body``'s caps): 400 when it is not JSON, saying where.

    Also 400 for an object that names a key twice (parsers disagree on which one counts, so a
    check upstream of us could have read the other) and for a lone UTF-16 surrogate (``"\\ud800"``
    parses, but is no Unicode text: the job's status, result or page could never be sent as
    UTF-8 again)."""
    data = await read_body(request, max_bytes)
    try:
        value = json.loads(data, parse_constant=_refuse_constant, object_pairs_hook=_object_once)
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise ApiError(400, "body is nested too deeply", "body") from None
    except UnicodeEncodeError as err:
        lone = err.object[err.start : err.end].encode("unicode_escape").decode()
        message = f"body: a string holds a lone surrogate {lone}, which is not Unicode text"
        raise ApiError(400, message, "body") from None
    except ValueError as err:
        if isinstance(err, (UnicodeDecodeError, json.JSONDecodeError)):
            raise _not_json(err) from None
        raise ApiError(400, f"body: {err}", "body") from None
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _object_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise ValueError(f"key {key[:60]!r} is given more than once in one object")
        value[key] = item
    return value


def _not_json(err: UnicodeDecodeError | json.JSONDecodeError) -> ApiError:
    if isinstance(err, UnicodeDecodeError):
        return ApiError(400, f"body is not UTF-8: {err.reason} at byte {err.start}", "body")
    return ApiError(400, f"body is not JSON: {err.msg}", f"body line {err.lineno} column {err.colno}")


def object_body(value: Any, where: str = "body") -> dict[str, Any]:
    """``value`` as a JSON object, or 422."""
    if not isinstance(value, dict):
        raise ApiError(422, f"expected a JSON object, got {type(value).__name__}", where)
    return value
