"""The queues over the API: ``GET /v1/queues`` (what ``spool queue list --json`` prints) and
``POST /v1/queues/{name}`` (an admin sets limits, pauses or resumes, as ``spool queue`` does).

Both call ``spool.queues`` and ``spool.views``, the same code as the command line, off the event
loop. Every token may read; only ``admin`` may change a queue (a limit holds every submitter's jobs).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from spool import queues
from spool.disk import is_valid_id
from spool.runner.api.context import ApiContext, ApiError, object_body, read_json, require
from spool.runner.api.jobs import READ_ROLES, _off_loop
from spool.views import queue_views

SET_FIELDS = ("concurrency", "rate", "paused", "clear")
MAX_SET_BODY_BYTES = 4096
MAX_QUEUES_LISTED = 1000  # queue names are the submitters' choice: an answer of them all could be any size

Endpoint = Callable[[Request], Awaitable[Response]]


def routes(ctx: ApiContext) -> list[BaseRoute]:
    def bound(handler: Callable[[ApiContext, Request], Awaitable[Response]]) -> Endpoint:
        return functools.partial(handler, ctx)

    return [
        Route("/v1/queues", bound(list_queues), methods=["GET"]),
        Route("/v1/queues/{name:path}", bound(set_queue), methods=["POST"]),
    ]


async def list_queues(ctx: ApiContext, request: Request) -> Response:
    """200 ``{"queues": [queue...], "truncated": bool}``: every queue with a job, a file or a recent
    claim, by name, as ``spool queue list --json`` prints them; past ``MAX_QUEUES_LISTED``, the
    queues with a limit or a broken file, then those with the most jobs pending and leased."""
    require(ctx, request, *READ_ROLES)
    views = await _off_loop(ctx, lambda: queue_views(ctx.sp))
    return JSONResponse({"queues": bounded(views, MAX_QUEUES_LISTED), "truncated": len(views) > MAX_QUEUES_LISTED})


def bounded(views: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """At most ``most`` of ``views``, by name: those with limits or an error first, then the busiest."""
    if len(views) <= most:
        return views

    def weight(view: dict[str, Any]) -> tuple[bool, int]:
        limited = view["error"] is not None or view["paused"] or view["concurrency"] is not None or view["rate"]
        return (not limited, -(view["pending"] + view["leased"]))

    return sorted(sorted(views, key=weight)[:most], key=lambda view: view["name"])


async def set_queue(ctx: ApiContext, request: Request) -> Response:
    """200 with the queue as ``GET /v1/queues`` shows it, after its file was written; 422 for a bad
    name or value (nothing written)."""
    require(ctx, request)  # admin only
    name = str(request.path_params["name"])
    if not is_valid_id(name):
        raise ApiError(422, f"{name[:80]!r} is not a queue's name (letters, digits, '_' and '-')", "path name")
    body = object_body(await read_json(request, MAX_SET_BODY_BYTES))
    changes = _changes(body)

    def apply() -> dict[str, Any]:
        queues.set_limits(ctx.sp, name, **changes)
        return next(view for view in queue_views(ctx.sp, sync=False) if view["name"] == name)

    return JSONResponse(await _off_loop(ctx, apply))


def _changes(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``spool.queues.set_limits`` a body asks for; 422 naming the field."""
    for field in body:
        if field not in SET_FIELDS:
            raise ApiError(422, f"unknown field {field[:60]!r}; expected {', '.join(SET_FIELDS)}", f"body.{field[:60]}")
    if not any(body.get(field) is not None for field in SET_FIELDS):
        raise ApiError(422, f"nothing to set: give one of {', '.join(SET_FIELDS)}", "body")
    concurrency, rate = body.get("concurrency"), body.get("rate")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)):
        raise ApiError(422, f"concurrency: expected a positive integer, got {concurrency!r:.60}", "body.concurrency")
    if rate is not None and not isinstance(rate, str):
        raise ApiError(422, f"rate: expected N/s, N/m or N/h, got {rate!r:.60}", "body.rate")
    for flag in ("paused", "clear"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise ApiError(422, f"{flag}: expected true or false, got {body[flag]!r:.60}", f"body.{flag}")
    return {
        "concurrency": concurrency,
        "rate": rate,
        "paused": body.get("paused"),
        "clear": bool(body.get("clear")),
    }
