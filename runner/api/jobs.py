"""Submit and inspect over the API: ``/v1/jobs`` and one job's status, result, cancel and requeue.

Each endpoint calls the ``Spool`` facade (``submit_spec``, ``status``, ``result``, ``cancel``,
``requeue``): the same moves as the command line, run off the event loop in a thread. Roles:
every token may read; ``submit`` and ``admin`` may submit, cancel and requeue (``work`` may not);
a ``shell`` job, submitted or requeued, needs ``admin``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from spool.base.errors import AlreadyTerminal, DiskFull, InvalidJob, LedgerError, NotFound, SpoolError, TryLater
from spool.disk import is_valid_id
from spool.disk import State
from spool.runner.api.context import ApiContext, ApiError, object_body, read_json, require
from spool.spool import build_spec
from spool.tokens import TokenInfo

READ_ROLES = ("submit", "work")
WRITE_ROLES = ("submit",)
SUBMIT_FIELDS = ("task", "args", "key", "priority", "max_tries", "timeout", "delay", "depends_on", "queue")
LIST_PARAMETERS = ("state", "task", "queue", "limit", "cursor")
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
LOCK_WAIT_SECONDS = 10.0  # cancel/requeue wait this long for a job's lock, then 503 with Retry-After

STATUS_TRIES = 10
T = TypeVar("T")
Endpoint = Callable[[Request], Awaitable[Response]]


def routes(ctx: ApiContext) -> list[BaseRoute]:
    def bound(handler: Callable[[ApiContext, Request], Awaitable[Response]]) -> Endpoint:
        return functools.partial(handler, ctx)

    return [
        Route("/v1/jobs", bound(submit_job), methods=["POST"]),
        Route("/v1/jobs", bound(list_jobs), methods=["GET"]),
        # {id:path}: an id with a slash (a/b, %2F) is a bad id (422), not a method this path lacks (405)
        Route("/v1/jobs/{id:path}/result", bound(job_result), methods=["GET"]),
        Route("/v1/jobs/{id:path}/cancel", bound(cancel_job), methods=["POST"]),
        Route("/v1/jobs/{id:path}/requeue", bound(requeue_job), methods=["POST"]),
        Route("/v1/jobs/{id:path}", bound(job_status), methods=["GET"]),  # last: any other path is a bad id here
    ]


# -- submit -----------------------------------------------------------------------------------


async def submit_job(ctx: ApiContext, request: Request) -> Response:
    """201 with the new job's status, 200 with the existing job's when its key was seen before."""
    caller = require(ctx, request, *WRITE_ROLES)
    body = object_body(await read_json(request, ctx.max_job_body_bytes))
    spec = spec_of_body(ctx, body, caller)
    submitted = await _off_loop(ctx, lambda: ctx.sp.submit_spec(spec, where="body"), full=429)
    # From here the job is durable: whatever happens, the answer must be 201/200 with its id.
    try:
        view = await _off_loop(ctx, lambda: status_of(ctx, submitted.id))
    except Exception:  # the status is a courtesy; the id is the promise
        view = {"id": submitted.id, "state": None}
    return JSONResponse(view, status_code=201 if submitted.created else 200)


def spec_of_body(ctx: ApiContext, body: dict[str, Any], caller: TokenInfo) -> dict[str, Any]:
    """The job spec a submit's body describes (the fields of ``Spool.submit``, ``delay`` in
    seconds); 422 naming the field for an unknown field or a wrong value."""
    for name in body:
        if name not in SUBMIT_FIELDS:
            raise ApiError(
                422, f"unknown field {name[:60]!r}; expected {', '.join(SUBMIT_FIELDS)}", f"body.{name[:60]}"
            )
    task = body.get("task")
    if not isinstance(task, str):
        raise ApiError(422, f"task: expected a task name, got {_show(task)}", "body.task")
    if task == "shell" and caller.role != "admin":
        raise ApiError(403, "a shell job needs an admin token", "body.task")
    delay = body.get("delay")
    try:
        return build_spec(
            task,
            body.get("args"),
            key=body.get("key"),
            priority=body.get("priority"),
            max_tries=body.get("max_tries"),
            timeout=body.get("timeout"),
            delay_seconds=delay,
            depends_on=() if body.get("depends_on") is None else body["depends_on"],
            clock=ctx.sp.clock,
            queue=body.get("queue"),
        )
    except InvalidJob as err:
        raise ApiError(422, str(err), _field_of(str(err))) from None


# -- reading ----------------------------------------------------------------------------------


async def job_status(ctx: ApiContext, request: Request) -> Response:
    require(ctx, request, *READ_ROLES)
    job_id = path_id(request)
    return JSONResponse(await _off_loop(ctx, lambda: status_of(ctx, job_id)))


async def job_result(ctx: ApiContext, request: Request) -> Response:
    """200 ``{"id", "result"}``; 404 before there is one; 409 for a dead job (it never will)."""
    require(ctx, request, *READ_ROLES)
    job_id = path_id(request)
    value = await _off_loop(ctx, lambda: ctx.sp.result(job_id))
    return JSONResponse({"id": job_id, "result": value})


async def list_jobs(ctx: ApiContext, request: Request) -> Response:
    """Newest first, from the ledger: ``{"jobs": [status...], "next_cursor": id | null}``; pass
    ``cursor`` back for the next page."""
    require(ctx, request, *READ_ROLES)
    query = request.query_params
    for name in query:
        if name not in LIST_PARAMETERS:
            raise ApiError(
                422, f"unknown query parameter {name[:60]!r}; expected {', '.join(LIST_PARAMETERS)}", name[:60]
            )
    state = query.get("state") or None
    if state is not None and state not in {s.value for s in State}:
        raise ApiError(422, f"state {state[:60]!r}: expected one of {', '.join(s.value for s in State)}", "query state")
    limit = _limit(query.get("limit"))
    cursor = query.get("cursor") or None
    if cursor is not None and not is_valid_id(cursor):
        raise ApiError(422, f"cursor {cursor[:60]!r} is not a job id (pass back next_cursor)", "query cursor")
    task = query.get("task") or None
    queue = query.get("queue") or None

    def page() -> dict[str, Any]:
        ids = ctx.sp.ledger.ids(state=state, task=task, queue=queue, limit=limit + 1, before=cursor)
        views = []
        for job_id in ids[:limit]:
            try:
                views.append(status_of(ctx, job_id))
            except NotFound:
                continue  # purged since the ledger answered
        return {"jobs": views, "next_cursor": ids[limit - 1] if len(ids) > limit else None}

    return JSONResponse(await _off_loop(ctx, page))


# -- managing ---------------------------------------------------------------------------------


async def cancel_job(ctx: ApiContext, request: Request) -> Response:
    """200 ``{"id", "outcome": "cancelled" | "requested"}`` (requested: a leased job, whose worker
    kills the attempt at its next heartbeat); 409 when it already ended."""
    require(ctx, request, *WRITE_ROLES)
    job_id = path_id(request)
    outcome = await _off_loop(ctx, lambda: ctx.sp.cancel(job_id, timeout_seconds=LOCK_WAIT_SECONDS))
    return JSONResponse({"id": job_id, "outcome": outcome})


async def requeue_job(ctx: ApiContext, request: Request) -> Response:
    """200 ``{"id", "state"}`` (pending, or waiting on its dependencies); 409 unless it is dead."""
    caller = require(ctx, request, *WRITE_ROLES)
    job_id = path_id(request)
    view = await _off_loop(ctx, lambda: status_of(ctx, job_id))
    if view["task"] == "shell" and caller.role != "admin":
        raise ApiError(403, "requeueing a shell job needs an admin token", "path id")
    state = await _off_loop(ctx, lambda: ctx.sp.requeue(job_id, timeout_seconds=LOCK_WAIT_SECONDS))
    return JSONResponse({"id": job_id, "state": state.value})


# -- shared -----------------------------------------------------------------------------------


def status_of(ctx: ApiContext, job_id: str) -> dict[str, Any]:
    """The job's status view. RACE: a worker or the coordinator may move the file between the
    look for its folder and the read (a fresh job claimed at once): look again."""
    for _ in range(STATUS_TRIES - 1):
        try:
            return ctx.sp.status(job_id)
        except FileNotFoundError:
            continue
    return ctx.sp.status(job_id)


def path_id(request: Request) -> str:
    """The job id in the path: 422 for anything that is not one (a path, a dot name, too long)."""
    job_id = str(request.path_params["id"])
    if not is_valid_id(job_id):
        raise ApiError(422, f"{job_id[:80]!r} is not a job id", "path id")
    return job_id


async def _off_loop(ctx: ApiContext, work: Callable[[], T], *, full: int = 503) -> T:
    """Run blocking file work in a thread; the spool's errors become answers. ``full``: the
    status for a refused submit (429); a busy lock is 503. Both say when to try again."""
    try:
        return await run_in_threadpool(work)
    except DiskFull as err:
        raise ApiError(503, str(err), None, headers=_retry_after(ctx)) from None
    except TryLater as err:
        raise ApiError(full, str(err), None, headers=_retry_after(ctx)) from None
    except InvalidJob as err:
        if "over max_job_bytes" in str(err):  # the spec as its file would hold it (YAML) is too large
            raise ApiError(413, str(err), "body") from None
        raise ApiError(422, str(err), _field_of(str(err))) from None
    except NotFound as err:
        message = str(err)
        if message.startswith("depends_on"):
            raise ApiError(422, message, "body.depends_on") from None
        raise ApiError(404, message, "path id") from None
    except AlreadyTerminal as err:
        raise ApiError(409, str(err), "path id") from None
    except LedgerError as err:  # the index is unusable (a full or failing disk): later, or fsck --repair
        raise ApiError(503, str(err), None, headers=_retry_after(ctx)) from None
    except SpoolError as err:
        raise ApiError(409, str(err), None) from None


def _retry_after(ctx: ApiContext) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(ctx.sp.settings.poll_seconds)))}


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise ApiError(422, f"limit {text[:20]!r}: expected a whole number from 1 to {MAX_LIMIT}", "query limit")
    return int(text)


def _field_of(message: str) -> str:
    """``body.<field>`` for the field an InvalidJob message names ("field 'x': ..." or "x: ...",
    "x must ..."), else ``body``."""
    named = _FIELD_NAMED.search(message)
    head = named.group(1) if named else message.split(":", 1)[0].split(" ", 1)[0].strip()
    field = "delay" if head == "delay_seconds" else head
    return f"body.{field}" if field in SUBMIT_FIELDS else "body"


_FIELD_NAMED = re.compile(r"field '([a-z_]+)'")


def _show(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r:.60}"
