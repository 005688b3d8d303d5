"""The work side of the API: remote workers lease jobs, heartbeat, complete, fail and release.

Every endpoint goes through the same transitions as a local worker (``claim_held``,
``heartbeat``/``lease_status``, ``complete``, ``fail``, ``release``, ``cancel_leased``); the server
keeps no lease of its own. A work token's name is its worker name: the claim writes it into the
job file as the holder, and only that token (or an admin's) may act on the lease afterwards. A
dispatch token names a runner and holds as ``<token>/<runner>`` (``runner.api.runners``); its
``spool run-one --job ID`` names the one job it may claim.

    POST /v1/leases                  {"tasks": [...], "wait": s,      200 {"lease": {..., "parent_results"}} | 204
                                      "queues"?: [...], "runner"?,
                                      "job"?: id}
    POST /v1/leases/{id}/heartbeat   {"fence", "counter"?, "progress"?}  200 {"cancel", "heartbeat_seconds"}
    POST /v1/leases/{id}/complete    {"fence", "result"}            200 {"id", "state": "done"}
    POST /v1/leases/{id}/fail        {"fence", "error", "reject"?}  200 {"id", "state"}
    POST /v1/leases/{id}/release     {"fence"}                      200 {"id", "state": "pending"}

The fence is ``spool.moves.remote_leases.fence_of``: derived from the leased file, so a restarted server
still honours it, and stale the moment the job moves. A fence that does not match answers 409 with
the reason and the job's ``state`` and ``attempt`` now (the worker kills its attempt and drops it,
unless the job is done by its own attempt: its complete was saved before the answer was lost); a
matching fence held by another worker 403. A fail on a lease with a cancel request ends the job
cancelled (the worker killed the attempt because the heartbeat said so). ``release`` gives the
try back, for a worker stopping gracefully.
A long-poll waits on one shared watch of pending/ (``runner.api.pickup``), never a busy loop.
A worker's calls, its long-poll's wait included, keep its record in the ledger fresh (heard from,
the tasks it asked for): that is how a remote worker counts as alive (``spool.workers``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from spool.base.errors import DiskFull, LeaseLost, LedgerError
from spool.moves import Held
from spool.disk import is_valid_id
from spool.job import tail
from spool.disk import State
from spool.progress import check as check_progress
from spool.base.records import Lease, LeaseStatus
from spool.base.resultjson import ResultNotJSON, encode_result
from spool.moves import fence_of, held_by_fence
from spool.runner.api.context import MAX_POLLS, ApiContext, ApiError, Slots, read_json, require
from spool.runner.api.lost import lost_lease
from spool.runner.api.pickup import PendingWatch
from spool.runner.api.bodies import fields, number, progress_of, queues_of, tasks_of
from spool.runner.api.runners import HeardFrom, may_act, worker_name
from spool.runner.api.runners import routes as runner_routes
from spool.runner.attempt.parents import ParentResultsError, parent_results
from spool.base.timetext import format_time
from spool.moves import cancel_leased, claim_held, complete, fail, heartbeat, lease_status, release
from spool.workers import published_term

log = logging.getLogger("spool.serve")

MAX_WAIT_SECONDS = 30.0  # the longest a lease request is held open
DISCONNECT_CHECK_SECONDS = 1.0  # a waiting request notices its client left within this
SMALL_BODY_BYTES = 64 * 1024  # lease, heartbeat, release: a few fields
MAX_ERROR_INPUT_BYTES = 64 * 1024  # a failure's text as sent; the job keeps its 4 KiB tail
# Long-polls one token may have waiting at once: a worker needs one (a few while it reconnects);
# without a cap one work token could hold every connection the server takes and starve the rest.
MAX_POLLS_PER_TOKEN = 4  # per runner, for a dispatch token's
_ROLES = ("work", "dispatch")  # who may lease and act on leases (admin passes every check)

T = TypeVar("T")


def routes(ctx: ApiContext) -> list[BaseRoute]:
    api = _Leases(ctx)
    ctx.on_startup.append(api.watch.start)
    ctx.on_shutdown.append(api.watch.stop)
    return [
        Route("/v1/leases", api.lease, methods=["POST"]),
        Route("/v1/leases/{id}/heartbeat", api.heartbeat, methods=["POST"]),
        Route("/v1/leases/{id}/complete", api.complete, methods=["POST"]),
        Route("/v1/leases/{id}/fail", api.fail, methods=["POST"]),
        Route("/v1/leases/{id}/release", api.release, methods=["POST"]),
        *runner_routes(ctx, api.watch),  # a dispatcher's peek waits on the same watch of pending/
    ]


class _Leases:
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self.sp = ctx.sp
        self.watch = PendingWatch(ctx.sp.layout.path(State.PENDING), ctx.sp.settings.poll_seconds)
        self.heard = HeardFrom(ctx.sp)
        self._polls = Slots("lease requests waiting", MAX_POLLS_PER_TOKEN, MAX_POLLS)

    # -- POST /v1/leases ---------------------------------------------------------------------

    async def lease(self, request: Request) -> Response:
        info = require(self.ctx, request, *_ROLES)
        optional = ("wait", "queues", "runner", "job")
        body = fields(await read_json(request, SMALL_BODY_BYTES), required=("tasks",), optional=optional)
        tasks = tasks_of(body["tasks"])
        queues = queues_of(body["queues"]) if body.get("queues") is not None else None
        wait = number(body.get("wait", 0.0), "body.wait", 0.0, MAX_WAIT_SECONDS)
        worker = worker_name(info, body.get("runner"))
        only = body.get("job")
        if only is not None and (not isinstance(only, str) or not is_valid_id(only)):
            raise ApiError(422, f"{str(only)[:80]!r} is not a job id", "body.job")
        with self._polls.held(worker, f"worker {worker}"):  # the caps count per runner
            return await self._poll(request, worker, tasks, wait, queues, only)

    async def _poll(
        self,
        request: Request,
        worker: str,
        tasks: list[str],
        wait: float,
        queues: list[str] | None = None,
        only: str | None = None,
    ) -> Response:
        await self.heard.record(worker, request, tasks)
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        while True:
            woken = self.watch.ticket()  # before the claim: a job landing after it still wakes us
            held = await self._claim(worker, tasks, queues, only)
            if held is not None:
                handed = await self._hand_over(request, held)
                if handed is not None:
                    return handed
                continue  # that job's attempt ended here: claim the next one at once
            retry_at = self.sp.ledger.retry_at  # a full rate window: claim again when it has room
            while not woken.is_set():  # claim again only when something landed (or the watch's slow poll)
                if retry_at is not None and time.time() >= retry_at:
                    break
                left = until - loop.time()
                if left <= 0 or await request.is_disconnected():
                    return Response(status_code=204)
                await self.heard.record(worker, request, tasks)  # a waiting worker is alive too
                try:
                    waits = [left, DISCONNECT_CHECK_SECONDS, self.heard.every]
                    waits += [max(retry_at - time.time(), 0.001)] if retry_at is not None else []
                    await asyncio.wait_for(woken.wait(), min(waits))
                except TimeoutError:
                    pass

    async def _claim(
        self, worker: str, tasks: list[str], queues: list[str] | None = None, only: str | None = None
    ) -> Held | None:
        try:
            return await _off_loop(claim_held, self.sp, worker, tasks, None, queues, only)
        except DiskFull as err:  # the claim took nothing: the job is where it was
            raise ApiError(503, f"the spool's disk is full: {err}", None, headers={"Retry-After": "5"}) from None
        except LedgerError as err:  # the coordinator (or fsck --repair) rebuilds it
            raise ApiError(503, f"the ledger is unusable: {err}", None, headers={"Retry-After": "5"}) from None

    async def _hand_over(self, request: Request, held: Held) -> Response | None:
        """The claimed lease to its worker; given back (no try spent) if the worker can no
        longer take it: its token was revoked while it waited, or it went away. None when the
        job's parents' results can't be handed over: its attempt ended here, as a local worker's
        would (``runner.attempt.parents``), and the worker waits on for another job."""
        job_file = held.job_file
        lease = Lease(job_file.id, job_file.lease.worker if job_file.lease else "", job_file.attempt)
        try:
            require(self.ctx, request, *_ROLES)
            gone = await request.is_disconnected()
        except ApiError:
            await self._give_back(lease, held)
            raise
        if gone:
            await self._give_back(lease, held)
            return Response(status_code=204)
        try:
            parents = await _off_loop(parent_results, self.sp, job_file.job)
        except ParentResultsError as err:
            log.warning("attempt %d of %s ends before it is handed out: %s", lease.attempt, lease.job_id, err)
            try:
                await _off_loop(fail, self.sp, lease, str(err), reject=err.reject, held=held)
            except LeaseLost as lost:  # RACE: fence_worker (a revoke) expired it first: that move stands
                log.info("attempt %d of %s not ended here: %s", lease.attempt, lease.job_id, lost)
            except DiskFull as full:  # the lease stays; the coordinator expires it after its term
                raise ApiError(503, f"the spool's disk is full: {full}", None, headers={"Retry-After": "5"}) from None
            return None
        # Off the loop: the published term is a ledger read, and the ledger's lock may be held
        # by a transition in another thread.
        return JSONResponse({"lease": await _off_loop(self._lease_view, held, parents)})

    async def _give_back(self, lease: Lease, held: Held) -> None:
        try:
            await _off_loop(release, self.sp, lease, held)
        except LeaseLost as err:  # RACE: fence_worker (a revoke) expired it first: that move stands
            log.info("lease of %s not given back: %s", lease.job_id, err)

    def _lease_view(self, held: Held, parents: dict[str, object]) -> dict[str, Any]:
        job_file = held.job_file
        job = job_file.job
        term = self._published_term()
        return {
            "id": job_file.id,
            "attempt": job_file.attempt,
            "fence": fence_of(job_file.attempt, held.data),
            "worker": job_file.lease.worker if job_file.lease else None,
            "task": job.task,
            "args": dict(job.args),
            "timeout_seconds": job.timeout,
            "deadline": format_time(time.time() + job.timeout),
            "tries_left": job.max_tries - job_file.tries,
            "lease_seconds": term,
            "heartbeat_seconds": _heartbeat_seconds(term),
            "parent_results": parents,
        }

    def _published_term(self) -> float:
        return published_term(self.sp)

    # -- the lease's own steps ---------------------------------------------------------------

    async def heartbeat(self, request: Request) -> Response:
        body, lease, held = await self._held(request, optional=("counter", "progress"))
        counter = body.get("counter")
        if counter is None:
            counter = time.monotonic_ns() // 1_000_000  # changes at every beat: all the coordinator reads
        elif not isinstance(counter, int) or isinstance(counter, bool) or not 0 <= counter < 2**62:
            raise ApiError(422, "expected a whole number from 0", "body.counter")
        # The handler's progress rides on the heartbeat file (no extra fsync); a beat that brings
        # only progress carries the counter of the last one, so it keeps no lease alive.
        progress = None if body.get("progress") is None else check_progress(*progress_of(body["progress"]))
        await _off_loop(heartbeat, self.sp, lease, counter, progress)
        status = await _off_loop(lease_status, self.sp, lease, held)
        if status is LeaseStatus.LOST:
            raise await _off_loop(lost_lease, self.sp, lease.job_id, lease.attempt, "path.id")
        # The interval again: a coordinator restarted with a shorter term is heard at the next beat.
        interval = _heartbeat_seconds(await _off_loop(self._published_term))
        return JSONResponse({"cancel": status is LeaseStatus.CANCEL, "heartbeat_seconds": interval})

    async def complete(self, request: Request) -> Response:
        body, lease, held = await self._held(request, required=("result",), max_bytes=self.ctx.max_body_bytes)
        try:
            result = encode_result(body["result"]).encode()  # the rule the attempt child holds it to
        except ResultNotJSON as err:
            raise ApiError(422, str(err), "body.result") from None
        cap = self.sp.settings.max_result_bytes
        if len(result) > cap:
            raise ApiError(413, f"the result is {len(result)} bytes, over max_result_bytes ({cap})", "body.result")
        await self._move(lease, complete, result, held, sent=(lease.worker, result))
        return JSONResponse({"id": lease.job_id, "state": State.DONE.value})

    async def fail(self, request: Request) -> Response:
        body, lease, held = await self._held(
            request, optional=("error", "reject"), max_bytes=MAX_ERROR_INPUT_BYTES + SMALL_BODY_BYTES
        )
        error = body.get("error", "failed")
        if not isinstance(error, str):
            raise ApiError(422, f"expected a string, got {type(error).__name__}", "body.error")
        reject = body.get("reject", False)
        if not isinstance(reject, bool):
            raise ApiError(422, f"expected true or false, got {type(reject).__name__}", "body.reject")
        if await _off_loop(lease_status, self.sp, lease, held) is LeaseStatus.CANCEL:
            await self._move(lease, cancel_leased, held)
            return JSONResponse({"id": lease.job_id, "state": State.DEAD.value, "reason": "cancelled"})
        state = await self._move(lease, fail, tail(error), reject=reject, held=held)
        return JSONResponse({"id": lease.job_id, "state": state.value})

    async def release(self, request: Request) -> Response:
        _body, lease, held = await self._held(request)
        await self._move(lease, release, held)
        return JSONResponse({"id": lease.job_id, "state": State.PENDING.value})

    async def _held(
        self,
        request: Request,
        *,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
        max_bytes: int = SMALL_BODY_BYTES,
    ) -> tuple[dict[str, Any], Lease, Held]:
        """The caller's lease, checked: its token (401/403), the id (422), the body, the fence
        against the leased file (409 when stale), and that the caller holds it (403)."""
        info = require(self.ctx, request, *_ROLES)
        job_id = request.path_params["id"]
        if not is_valid_id(job_id):
            raise ApiError(422, f"{job_id[:80]!r} is not a job id", "path.id")
        body = fields(await read_json(request, max_bytes), required=("fence", *required), optional=optional)
        fence = body["fence"]
        if not isinstance(fence, str) or not 0 < len(fence) <= 64:
            raise ApiError(422, "expected the fence string the lease came with", "body.fence")
        held = await _off_loop(held_by_fence, self.sp, job_id, fence)
        if held is None:
            sent = _sent(info.name, body) if "result" in required else None
            raise await _off_loop(lost_lease, self.sp, job_id, _fence_attempt(fence), "body.fence", None, sent)
        holder = held.job_file.lease.worker if held.job_file.lease else ""
        if not may_act(info, holder):
            raise ApiError(403, f"the lease of {job_id} is held by another worker, not {info.name!r}", "path.id")
        if info.role != "admin":  # an admin acting on the lease is not its worker heard from
            await self.heard.record(holder, request)
        return body, Lease(job_id, holder, held.job_file.attempt), held

    async def _move(
        self, lease: Lease, move: Callable[..., T], *args: Any, sent: tuple[str, bytes] | None = None, **kwargs: Any
    ) -> T:
        """A transition of ``lease``, off the loop: LeaseLost -> 409 (``sent``: a complete's
        result, compared with the one stored), a full disk -> 503."""
        try:
            return await _off_loop(move, self.sp, lease, *args, **kwargs)
        except LeaseLost as err:
            raise await _off_loop(
                lost_lease, self.sp, lease.job_id, lease.attempt, "body.fence", str(err), sent
            ) from None
        except DiskFull as err:
            raise ApiError(503, f"the spool's disk is full: {err}", None, headers={"Retry-After": "5"}) from None


async def _off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A blocking call on the spool (locks, fsyncs, SQLite) in the server's shared thread pool,
    never on the loop."""
    return await run_in_threadpool(fn, *args, **kwargs)


def _sent(caller: str, body: dict[str, Any]) -> tuple[str, bytes] | None:
    """(caller, the result a complete brought, as it would be stored), None if it can't be one."""
    try:
        return caller, encode_result(body["result"]).encode()
    except ResultNotJSON:
        return None


def _heartbeat_seconds(term: float) -> float:
    """A third of the coordinator's term, as local workers beat: one lost beat never costs it."""
    return max(term / 3.0, 0.05)


def _fence_attempt(fence: str) -> int | None:
    attempt = fence.partition("-")[0]
    return int(attempt) if attempt.isascii() and attempt.isdigit() and len(attempt) < 12 else None
