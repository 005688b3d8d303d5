"""Runners: the leases a ``dispatch`` token takes for the engine jobs it starts, what it may see
of the ready jobs, and how it fences a runner its engine reported lost.

A work token's name is its worker's name. A dispatch token (``spool dispatch``) starts many
engine jobs, each a ``spool run-one --runner R``: its leases are held by ``<token name>/<R>``, so
one secret serves every engine job while each lease still has one holder, and the token may act
only on leases held under its own prefix (a work token's lease, or another dispatch token's
runner, answers 403). The long-poll caps count per runner.

    POST /v1/dispatch/ready        {"tasks"?, "queues"?, "most", "wait",   200 {"ready": [{"id", "task", "queue"}]}
                                    "exclude"?: [ids]}
    POST /v1/runners/{runner}/fence                                        200 {"runner", "expired": [ids]}

Why a peek of ready ids rather than a count, or a lease long-poll: the dispatcher starts one
engine job per ready job and names the job (``run-one --job ID``), so a duplicate engine start
of the same job claims nothing, and a job whose engine job never started is dispatched again by
its id. The peek goes through the claim's own limits (``spool.ledger.limits.peek``): a paused
queue or a full concurrency slot shows no job, so the dispatcher never starts engine jobs the
claim would turn away. It reserves nothing: the claim at ``run-one``'s start decides.

``fence``: every lease the runner holds ends at once as an expired one does (``fence_worker``:
the job retries, its try was counted at the claim), so its late heartbeat or complete gets 409.
The dispatcher calls it when its engine reports the engine job gone for certain (a pod Failed,
KilledWorker, NODE_FAIL, a local process that exited); an ambiguous loss waits for the lease.
A lease whose lock a move still holds after ``fence_worker``'s wait (a claim handing it over, a
complete) answers 503 with Retry-After, never 200: the dispatcher fences the runner again on its
next look instead of forgetting it with the lease still held.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from spool.base.errors import DiskFull, LedgerError
from spool.disk import is_valid_id
from spool.moves import fence_worker, leases_of
from spool.runner.api.bodies import body as request_body
from spool.runner.api.bodies import errors, json_reply, op
from spool.runner.api.bodies import fields, number, queues_of, tasks_of
from spool.runner.api.context import ApiContext, ApiError, Slots, read_json, require
from spool.runner.api.pickup import PendingWatch
from spool.workers import published_term
from spool.handle import Handle
from spool.tokens import TokenInfo
from spool.workers import WORKER_NAME

log = logging.getLogger("spool.serve")

MAX_READY = 256  # ready ids one peek hands out
MAX_EXCLUDE = 4096  # the ids a dispatcher already has engine jobs for
MAX_WAIT_SECONDS = 30.0
DISCONNECT_CHECK_SECONDS = 1.0
MAX_PEEKS_PER_TOKEN = 2  # a dispatcher peeks once at a time (two while it reconnects)
MAX_PEEKS = 20
BODY_BYTES = 256 * 1024  # an exclude list of MAX_EXCLUDE ids
_SOON = {"Retry-After": "1"}  # a fence whose lease a move held: asked again next look
SEEN_EVERY_SECONDS = 5.0  # how often a remote worker's (a dispatcher's) "last heard from" is written


_READY = {"type": "array", "items": {"type": "object", "properties": {"id": {}, "task": {}, "queue": {}}}}
# What the OpenAPI document says of these two endpoints (``runner.api.openapi``).
DISPATCH_PATHS: dict[str, Any] = {
    "/v1/dispatch/ready": {
        "post": op(
            "Long-poll for ready jobs a claim could take now (within the queues' limits), reserving nothing",
            "dispatch",
            {
                "200": json_reply({"type": "object", "properties": {"ready": _READY}}, "the ready jobs (maybe none)"),
                **errors(400, 401, 403, 413, 422, 429, 503),
            },
            requestBody=request_body(
                {
                    "type": "object",
                    "properties": {
                        "tasks": {"type": "array", "items": {"type": "string"}, "description": "default: every task"},
                        "queues": {"type": "array", "items": {"type": "string"}, "description": "default: every queue"},
                        "most": {"type": "integer", "minimum": 1, "maximum": 256},
                        "wait": {"type": "number", "minimum": 0, "maximum": 30},
                        "exclude": {"type": "array", "items": {"type": "string"}, "description": "ids not to list"},
                    },
                }
            ),
        ),
    },
    "/v1/runners/{runner}/fence": {
        "post": op(
            "End every lease the runner <token>/<runner> holds, as an expiry does (its engine job is gone)",
            "dispatch (its own runners; admin names <token>~<runner>)",
            {
                "200": json_reply({"type": "object", "properties": {"runner": {}, "expired": {}}}, "the leases ended"),
                **errors(401, 403, 422, 503),
            },
        ),
        "parameters": [{"name": "runner", "in": "path", "required": True, "schema": {"type": "string"}}],
    },
}


def worker_name(info: TokenInfo, runner: Any) -> str:
    """The lease holder for a request of ``info``'s token naming ``runner`` (None: none named):
    a work token is its own name and names no runner; a dispatch token names one, and holds its
    leases as ``<token>/<runner>``; an admin may do either. 422 otherwise."""
    if runner is None:
        if info.role == "dispatch":
            raise ApiError(422, 'a dispatch token names its runner: add "runner"', "body.runner")
        return info.name
    if info.role == "work":
        raise ApiError(422, 'a work token is its own worker: "runner" goes with a dispatch token', "body.runner")
    if not isinstance(runner, str) or not WORKER_NAME.fullmatch(runner):
        raise ApiError(422, "a runner name: 1-64 letters, digits, '_', '-' or '.'", "body.runner")
    return f"{info.name}/{runner}"


def may_act(info: TokenInfo, holder: str) -> bool:
    """Whether ``info``'s token may act on a lease ``holder`` holds: its own (a work token), one of
    its runners' (a dispatch token), any (admin)."""
    if info.role == "admin":
        return True
    if info.role == "dispatch":
        return holder.startswith(f"{info.name}/")
    return holder == info.name


def routes(ctx: ApiContext, watch: PendingWatch) -> list[BaseRoute]:
    api = _Runners(ctx, watch)
    return [
        Route("/v1/dispatch/ready", api.ready, methods=["POST"]),
        Route("/v1/runners/{runner}/fence", api.fence, methods=["POST"]),
    ]


class HeardFrom:
    """What a server heard from whom: a remote worker's calls (``runner.api.leases``) and a
    dispatcher's ready peeks (it stands for the runners it will start) write ``remote_workers``
    rows, with the tasks asked for (None: a call that names none, which keeps the last ones), at
    most every ``every`` seconds a name, or at once when its tasks change: alive for ``spool
    stats``, ``/metrics``, the coordinator's unhandled-task warning and the dashboard
    (``spool.workers``). ``every`` is a third of the published term (a row older than the term
    is a dead worker's), at most ``SEEN_EVERY_SECONDS``, once the ledger is read."""

    def __init__(self, sp: Handle) -> None:
        self.sp = sp
        self.every = SEEN_EVERY_SECONDS
        self._seen: dict[str, float] = {}  # name -> when it was last written (monotonic)
        self._tasks: dict[str, list[str]] = {}  # name -> the tasks it last asked for
        self._started: dict[str, float] = {}

    async def record(self, name: str, request: Request, tasks: list[str] | None = None) -> None:
        now = time.monotonic()
        if now - self._seen.get(name, -math.inf) < self.every and tasks in (None, self._tasks.get(name)):
            return
        self._seen[name] = now
        if tasks is not None:
            self._tasks[name] = tasks
        started = self._started.setdefault(name, self.sp.clock.wall())
        host = request.client.host if request.client else socket.gethostname()
        try:
            self.every = await run_in_threadpool(self._write, name, host, started, tasks)
        except (LedgerError, DiskFull) as err:
            log.debug("%s not recorded as heard from: %s", name, err)

    def _write(self, name: str, host: str, started: float, tasks: list[str] | None) -> float:
        self.sp.ledger.remote_worker_seen(name, host, started, self.sp.clock.wall(), tasks)
        return min(SEEN_EVERY_SECONDS, published_term(self.sp) / 3.0)


class _Runners:
    def __init__(self, ctx: ApiContext, watch: PendingWatch) -> None:
        self.ctx, self.sp, self.watch = ctx, ctx.sp, watch
        self._peeks = Slots("ready peeks waiting", MAX_PEEKS_PER_TOKEN, MAX_PEEKS)
        self.heard = HeardFrom(ctx.sp)  # a dispatcher asking stands for the runners it will start

    async def ready(self, request: Request) -> Response:
        info = require(self.ctx, request, "dispatch")
        optional = ("tasks", "queues", "most", "wait", "exclude")
        body = fields(await read_json(request, BODY_BYTES), optional=optional)
        tasks = tasks_of(body["tasks"]) if body.get("tasks") is not None else None
        queues = queues_of(body["queues"]) if body.get("queues") is not None else None
        exclude = set(_ids(body.get("exclude", [])))
        most = body.get("most", 1)
        if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= MAX_READY:
            raise ApiError(422, f"expected a whole number from 1 to {MAX_READY}", "body.most")
        wait = number(body.get("wait", 0.0), "body.wait", 0.0, MAX_WAIT_SECONDS)
        await self.heard.record(info.name, request, tasks)
        with self._peeks.held(info.name, f"dispatcher {info.name}"):
            loop = asyncio.get_running_loop()
            until = loop.time() + wait
            while True:
                woken = self.watch.ticket()  # before the peek: a job landing after it still wakes us
                seen = await self._peek(tasks, queues, most + len(exclude))
                ready = [{"id": i, "task": t, "queue": q} for i, t, q in seen if i not in exclude][:most]
                left = until - loop.time()
                if ready or left <= 0 or await request.is_disconnected():
                    return JSONResponse({"ready": ready})
                await self.heard.record(info.name, request, tasks)  # a waiting dispatcher is alive too
                try:
                    await asyncio.wait_for(woken.wait(), min(left, DISCONNECT_CHECK_SECONDS))
                except TimeoutError:
                    pass

    async def _peek(self, tasks: list[str] | None, queues: list[str] | None, most: int) -> list[tuple[str, str, str]]:
        try:
            return await asyncio.to_thread(self.sp.ledger.ready_now, tasks, queues, min(most, MAX_READY + MAX_EXCLUDE))
        except LedgerError as err:
            raise ApiError(503, f"the ledger is unusable: {err}", None, headers={"Retry-After": "5"}) from None

    async def fence(self, request: Request) -> Response:
        info = require(self.ctx, request, "dispatch")
        runner = request.path_params["runner"]
        worker = worker_name(info, runner) if info.role != "admin" else _admin_target(runner)
        try:
            expired = await asyncio.to_thread(
                fence_worker, self.sp, worker, why="its engine reported the runner's engine job lost"
            )
            left = await asyncio.to_thread(leases_of, self.sp, worker)
        except DiskFull as err:
            raise ApiError(503, f"the spool's disk is full: {err}", None, headers={"Retry-After": "5"}) from None
        if expired:
            log.info("runner %s fenced: %s expired", worker, ", ".join(expired))
        if left:
            # RACE: a move of its lease (a claim whose hand-over is still in flight, a complete) held
            # the job's lock past fence_worker's wait. Said, never dropped as "no lease": a 200 would
            # let the dispatcher forget the runner, and the lease would wait out its whole term.
            held = ", ".join(job_id for job_id, _ in left)
            raise ApiError(503, f"a move in flight holds {held} of runner {worker}: fence again", None, headers=_SOON)
        return JSONResponse({"runner": worker, "expired": expired})


def _admin_target(runner: str) -> str:
    """An admin fences a dispatch token's runner by its whole name, ``<token>~<runner>`` in the
    path (a ``/`` can't be one path segment): ``d1~r7`` is ``d1/r7``."""
    token, sep, name = runner.partition("~")
    if not sep or not WORKER_NAME.fullmatch(token) or not WORKER_NAME.fullmatch(name):
        raise ApiError(422, "an admin names the runner as <token>~<runner>", "path.runner")
    return f"{token}/{name}"


def _ids(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_EXCLUDE:
        raise ApiError(422, f"expected a list of at most {MAX_EXCLUDE} job ids", "body.exclude")
    for n, job_id in enumerate(value):
        if not isinstance(job_id, str) or not is_valid_id(job_id):
            raise ApiError(422, f"{str(job_id)[:80]!r} is not a job id", f"body.exclude[{n}]")
    return value
