"""The ASGI app of ``spool serve``: the route modules mounted together, JSON errors for every
failure (an ``ApiError``, a 404 or 405, a crash), ``/healthz``, and the caps on a request's
head and on its Content-Length, checked before any endpoint runs.

Errors are always ``{"error": what was wrong, "where": where it was (a field, a header, the body,
the path) or null}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from spool.runner.api import dashboard, jobs, leases, metrics, openapi, queues
from spool.runner.api.context import MAX_HEAD_BYTES, ApiContext, ApiError
from spool.runner.api.health import CoordinatorWatch, health

TOKEN_FLUSH_SECONDS = 1.0  # how often the server looks whether last-use marks are due (spool.tokens)

log = logging.getLogger("spool.serve")


def create_app(ctx: ApiContext) -> Starlette:
    routes: list[BaseRoute] = [Route("/healthz", healthz, methods=["GET"])]
    watch = CoordinatorWatch(ctx.sp)
    ctx.on_startup.append(watch.start)
    ctx.on_shutdown.append(watch.stop)
    for module in (jobs, queues, leases, metrics, dashboard):
        routes += module.routes(ctx)
    routes += openapi.routes(ctx)
    app = Starlette(
        routes=routes,
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: crash_error},
        lifespan=functools.partial(_lifespan, ctx),
    )
    app.state.body_seconds = ctx.sp.settings.http_body_seconds  # read_body's deadline
    app.state.sp = ctx.sp  # /healthz's
    app.add_middleware(RequestCaps, max_bytes=ctx.max_body_bytes)
    return app


async def healthz(request: Request) -> Response:
    """Anonymous: 200 while the server answers (what a load balancer acts on), and whether a
    coordinator runs (``runner.api.health``)."""
    return JSONResponse(await run_in_threadpool(health, request.app.state.sp))


def error_response(
    status: int,
    message: str,
    where: str | None,
    headers: dict[str, str] | None = None,
    fields: dict[str, object] | None = None,
) -> Response:
    return JSONResponse({**(fields or {}), "error": message, "where": where}, status_code=status, headers=headers)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, exc.where, exc.headers, exc.fields)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    where = f"{request.method} {request.url.path}"
    messages = {404: "no such endpoint", 405: f"method {request.method} not allowed here"}
    return error_response(
        exc.status_code, messages.get(exc.status_code, str(exc.detail)), where, dict(exc.headers or {})
    )


async def crash_error(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return error_response(500, f"internal error ({type(exc).__name__}); see the server's log", None)


class RequestCaps:
    """Answered before the app (or anything) reads a byte of the body: 431 for a request head
    (path, query and headers) over ``MAX_HEAD_BYTES``, 400 (and the connection closed) for a
    body framed both by Transfer-Encoding and Content-Length, 413 for a Content-Length over the largest
    body any endpoint takes. (h11 refuses a head that is still incomplete past that size, a
    slow-loris; this catches one that arrived whole.) The endpoints' own reads
    (``context.read_body``) count a chunked body as it arrives, with their own tighter caps."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        head += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
        if head > MAX_HEAD_BYTES:
            message = f"request head of {head} bytes is over the cap of {MAX_HEAD_BYTES}"
            return error_response(431, message, "headers", {"Connection": "close"})
        names = {name for name, _ in scope["headers"]}
        if b"transfer-encoding" in names and b"content-length" in names:
            # Which one frames the body? h11 takes Transfer-Encoding and keeps the connection; a
            # proxy in front that took Content-Length would read the rest as another request.
            message = "both Transfer-Encoding and Content-Length: send one"
            return error_response(400, message, "header Content-Length", {"Connection": "close"})
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                message = f"body of {int(value)} bytes is over the cap of {self.max_bytes}"
                return error_response(413, message, "body", {"Connection": "close"})
        return None


@contextlib.asynccontextmanager
async def _lifespan(ctx: ApiContext, app: Starlette) -> AsyncIterator[None]:
    """Start the token last-use writer and what the route modules registered; stop them, and
    write the last marks, at shutdown."""
    flusher = asyncio.create_task(_flush_token_uses(ctx))
    for start in ctx.on_startup:
        await start()
    try:
        yield
    finally:
        for stop in ctx.on_shutdown:
            await stop()
        flusher.cancel()
        await run_in_threadpool(_flush_now, ctx)


async def _flush_token_uses(ctx: ApiContext) -> None:
    """Write the tokens' last-use marks when due (spool.tokens says how often), off the loop."""
    while True:
        await asyncio.sleep(TOKEN_FLUSH_SECONDS)
        try:
            await run_in_threadpool(ctx.tokens.flush_last_used)
        except Exception as err:  # a full disk must not stop the server: the marks wait
            log.warning("could not record tokens' last use: %s", err)


def _flush_now(ctx: ApiContext) -> None:
    with contextlib.suppress(Exception):
        ctx.tokens.flush_last_used(force=True)
