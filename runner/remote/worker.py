"""``spool worker --server URL --token T``: a worker for a spool on another host, over its API.

The same handlers (``--import``, the ``tasks`` setting) run in the same attempt child
(``runner.attempt.child.Child``) as a local worker's, so timeouts, crashes and output behave alike; only
the moves go over HTTPS, and the server makes them with the same transitions. The worker holds
no state of its own about a lease beyond what the server handed out (id, attempt, fence).

The loop: long-poll ``POST /v1/leases`` for a job of the registered tasks; run it in the child;
heartbeat every ``heartbeat_seconds`` the lease names (a third of the coordinator's term: its
clock alone decides expiry, so a worker that vanishes is expired after the term); a heartbeat
answering ``{"cancel": true}`` or 409 kills the attempt and drops it (a cancel is reported as a
failure, which the server turns into the cancel); then complete or fail naming the fence.

The server down or restarting: every call is retried with a capped exponential backoff (0.1 s
doubling to 5 s), and the log says "server unreachable, retrying" once and "server reachable
again" once when it answers. An attempt keeps running meanwhile; its outcome waits for the
server. A 401 (the token was revoked) or 403 ends the worker with an error: no retry fixes it.

``spool run-one`` (an engine job of ``spool dispatch``) is this worker with ``once``: it asks
for a lease once, at once (no long-poll), for its ``runner`` name under a dispatch token and for
the one ``job`` it was started for; it runs that attempt as above and exits, 0 also when it
claimed nothing (an engine that started it twice gets one run). A server that does not answer is
retried for ``claim_patience_seconds`` (a setting, 60 s), then it exits 1 having claimed nothing.

Stopping: the first SIGTERM/SIGINT stops polling (a long-poll in flight is cut: the server gives
back a job it claimed for it; a lease that arrived anyway is released at once); a running attempt
may finish within ``grace_seconds``, after which it is killed and released over the API
(``POST /v1/leases/{id}/release``, no try spent). A second signal kills the attempt and releases
at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from spool import registry
from spool.base.errors import SpoolError
from spool.base.resultjson import ResultNotJSON, encode_result
from spool.runner.attempt.loop import watch
from spool.runner.attempt.child import AttemptRequest, Child, Outcome
from spool.runner.remote.client import MAX_REPLY_BYTES, ApiClient, Patience, Reply
from spool.runner.remote.keeper import ApiLease
from spool.runner.remote.lease import Refused, RemoteLease
from spool.settings import Settings

log = logging.getLogger("spool.worker")

LONG_POLL_SECONDS = 10.0  # how long one lease request waits on the server for a job
BACKOFF_FIRST_SECONDS = 0.1
BACKOFF_MAX_SECONDS = 5.0
CALL_MARGIN_SECONDS = 10.0  # beyond a long-poll's wait, before its answer counts as lost
OUTCOME_TIMEOUT_SECONDS = 60.0  # a complete or fail call, before its answer counts as lost


class _Stderr:
    """An attempt's output, on the remote worker's own stderr (its host's log)."""

    def write(self, data: bytes) -> None:
        try:
            os.write(2, data)
        except OSError:
            pass  # a closed stderr: the output is lost, the attempt is not


class RemoteWorker:
    def __init__(
        self,
        client: ApiClient,
        settings: Settings,
        *,
        import_modules: Sequence[str] = (),
        allow_shell: bool = False,
        burst: bool = False,
        sys_path: Sequence[str] = (),
        long_poll_seconds: float = LONG_POLL_SECONDS,
        queues: Sequence[str] | None = None,
        once: bool = False,
        runner: str | None = None,
        job: str | None = None,
    ) -> None:
        self.client = client
        self.once, self.runner, self.job = once, runner, job
        self.queues = sorted(set(queues)) if queues is not None else None  # None: every queue
        self.settings = settings
        self.burst = burst or once
        self.long_poll_seconds = 0.0 if self.burst else long_poll_seconds
        self.import_modules = list(dict.fromkeys([*settings.tasks, *import_modules]))
        registry.import_task_modules(self.import_modules)
        self.tasks = sorted(registry.registered() | ({"shell"} if allow_shell else set()))
        self.child = Child(
            import_modules=self.import_modules,
            allow_shell=allow_shell,
            max_result_bytes=settings.max_result_bytes,
            sys_path=sys_path,
        )
        self._signals = 0
        self._stop_requested_at: float | None = None
        self.patience = Patience(
            client,
            who="worker",
            log=log,
            refused=Refused,
            quiet=lambda: bool(self._signals and self._idle),  # our own stop cut the call (``abort``)
            # a stop is asked for: at once while idle; with an attempt's outcome to save, past the grace
            hurry=lambda: self._must_stop_now() or bool(self._signals and self._idle),
            first=BACKOFF_FIRST_SECONDS,
            most=BACKOFF_MAX_SECONDS,
        )
        self._idle = True  # no attempt of ours is running or waiting to be reported
        self._stop_noted = False  # said that a stop waits for the running attempt

    # -- life --------------------------------------------------------------------------------

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info("remote worker started: server %s, tasks %s", self.client.url, ", ".join(self.tasks))
        started = time.monotonic()
        try:
            while not self._signals:
                lease = self._next_lease()
                if lease is None:
                    if self.burst and not self.patience.unreachable:
                        break
                    patience = self.settings.claim_patience_seconds
                    if self.once and time.monotonic() - started > patience:
                        log.error("run-one stops: no answer to its claim in %gs", patience)
                        return 1
                    continue
                if self._signals:
                    self.release_lease(lease)
                    break
                self._run_attempt(lease)
                if self.once:
                    break
        except Refused as err:
            log.error("remote worker stops: %s", err)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.child.close()
            self.client.close()
        log.info("remote worker stopped")
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        if self._signals > 1 or self._idle:
            # A long-poll in flight ends now, not within its wait. A job the server claimed for it
            # meanwhile is given back by the server, which sees us leave (no try spent).
            self.client.abort()

    def _must_stop_now(self) -> bool:
        if not self._signals or self._stop_requested_at is None:
            return False
        return self._signals > 1 or time.monotonic() - self._stop_requested_at > self.settings.grace_seconds

    # -- talking to the server ---------------------------------------------------------------

    def _next_lease(self) -> RemoteLease | None:
        wait = self.long_poll_seconds
        asked: dict[str, Any] = {"tasks": self.tasks, "wait": wait}
        if self.queues is not None:
            asked["queues"] = self.queues
        if self.runner is not None:
            asked["runner"] = self.runner
        if self.job is not None:
            asked["job"] = self.job
        reply = self.patience.call(
            "/v1/leases",
            asked,
            timeout_seconds=wait + CALL_MARGIN_SECONDS,
            # a lease carries its parents' results: up to max_parent_results_bytes beyond the rest
            max_reply_bytes=MAX_REPLY_BYTES + self.settings.max_parent_results_bytes,
        )
        if reply is None or reply.status == 204:
            return None
        if reply.status == 200:
            return RemoteLease.from_reply(reply.body)
        if reply.status >= 500 or reply.status == 429:
            log.warning("lease request: %s; retrying", reply.error())
            self.patience.back_off()
            return None
        raise Refused(f"the server refused the lease request (HTTP {reply.status}): {reply.error()}")

    def lease_call(self, lease: RemoteLease, step: str, body: dict[str, Any], *, patient: bool) -> Reply | None:
        """A call about ``lease``; ``patient`` retries until the server answers (an outcome that
        must be saved), else one try (a heartbeat: the next one comes soon anyway)."""
        path = f"/v1/leases/{lease.job_id}/{step}"
        # An outcome's move fsyncs (a slow disk may take seconds): give it long before a retry,
        # which would find the first one done and say "dropped". A beat is short; the next comes.
        timeout = max(lease.heartbeat_seconds, OUTCOME_TIMEOUT_SECONDS if patient else 5.0)
        next_beat = time.monotonic() + lease.heartbeat_seconds
        while True:
            reply = self.patience.call(path, {"fence": lease.fence, **body}, timeout_seconds=timeout)
            if reply is not None and (reply.status < 500 or not patient):
                return reply
            if not patient or self._signals > 1 or self._must_stop_now():
                # Past a stop's grace the backoff waits no more: retrying would spin. The lease
                # expires on the coordinator's clock, as for a worker that died here.
                return None
            if reply is not None:
                log.warning("%s of %s: %s; retrying", step, lease.job_id, reply.error())
                # A server whose disk is full (503) may stay so for long: the lease is beaten
                # between tries, as a local worker's keep-alive does (``runner.keepalive``), or the
                # coordinator would expire an attempt whose outcome only waits to be saved.
                self.patience.back_off(most=lease.heartbeat_seconds)
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + lease.heartbeat_seconds
                    self._keep_alive(lease)

    def _keep_alive(self, lease: RemoteLease) -> None:
        """One beat for a lease whose outcome waits to be saved: no counter, so the server writes
        a new one (its clock's milliseconds), which is all the coordinator watches. Its answer
        changes nothing: a lease lost meanwhile is the outcome call's 409."""
        reply = self.lease_call(lease, "heartbeat", {}, patient=False)
        if reply is not None and reply.status != 200:
            log.warning("keep-alive beat of %s: %s", lease.job_id, reply.error())

    # -- one attempt -------------------------------------------------------------------------

    def _run_attempt(self, lease: RemoteLease) -> None:
        self._idle = False
        try:
            self._attempt(lease)
        finally:
            self._idle = True

    def _attempt(self, lease: RemoteLease) -> None:
        log.info("lease %s attempt=%d task=%s", lease.job_id, lease.attempt, lease.task)
        request = AttemptRequest(
            job_id=lease.job_id,
            attempt=lease.attempt,
            task=lease.task,
            args=lease.args,
            timeout_seconds=lease.timeout_seconds,
            tries_left=lease.tries_left,
            log=_Stderr(),
            parent_results=lease.parent_results,  # a shell job's file goes to $TMPDIR: no spool here
        )
        watch(self.child, request, ApiLease(self, lease), lambda: self._stopping(lease))

    def _stopping(self, lease: RemoteLease) -> bool:
        """Whether the attempt must stop now (``_must_stop_now``), saying once that a stop waits for it."""
        if self._signals and not self._stop_noted:
            self._stop_noted = True
            log.info(
                "stopping: attempt %d of %s may finish within %gs (a second signal ends it now)",
                lease.attempt,
                lease.job_id,
                self.settings.grace_seconds,
            )
        return self._must_stop_now()

    def report_outcome(self, lease: RemoteLease, outcome: Outcome) -> None:
        if outcome.ok:
            try:
                encode_result(outcome.value)  # the child checked it already; a value that slips by
            except ResultNotJSON as err:  # fails here, in this try, as a local worker fails it
                outcome = Outcome(ok=False, value=None, error=str(err), reject=False)
        if outcome.ok:
            reply = self.lease_call(lease, "complete", {"result": outcome.value}, patient=True)
            if reply is not None and _refused_as_input(reply):
                # The server refused the value itself (over its max_result_bytes, a rule of a newer
                # server): the attempt failed, now, as a local worker's child fails such a result;
                # dropped, it would wait out the lease and be run again for the same refusal.
                outcome = Outcome(ok=False, value=None, error=f"result refused: {reply.error()}", reject=False)
            else:
                self._said(lease, "complete", reply)
                return
        body = {"error": outcome.error or "failed", "reject": outcome.reject}
        self._said(lease, "fail", self.lease_call(lease, "fail", body, patient=True))

    def _said(self, lease: RemoteLease, step: str, reply: Reply | None) -> None:
        if reply is None:
            log.warning(
                "attempt %d of %s: stopping before its %s was saved; its lease will expire",
                lease.attempt,
                lease.job_id,
                step,
            )
        elif reply.status == 200:
            state = reply.body.get("state") if isinstance(reply.body, dict) else "?"
            log.info("%s %s attempt=%d -> %s", step, lease.job_id, lease.attempt, state)
        elif step == "complete" and _done_by(reply, lease.attempt):
            # Our complete was saved, then its answer lost (the server killed in between): the
            # retry finds the job done by this very attempt. That is our win, not a drop.
            log.info("%s %s attempt=%d -> done (saved before its answer was lost)", step, lease.job_id, lease.attempt)
        else:
            log.warning("attempt %d of %s dropped: %s", lease.attempt, lease.job_id, reply.error())

    def note_cancelled(self, lease: RemoteLease) -> None:
        """A cancel request: the attempt is killed; the server ends the job cancelled."""
        body = {"error": "cancelled by request while running"}
        self._said(lease, "fail", self.lease_call(lease, "fail", body, patient=True))

    def release_lease(self, lease: RemoteLease) -> None:
        reply = self.lease_call(lease, "release", {}, patient=False)
        if reply is not None and reply.status != 200:
            log.warning("release of %s skipped: %s", lease.job_id, reply.error())
        elif reply is not None:
            log.info("release %s attempt=%d", lease.job_id, lease.attempt)


def _done_by(reply: Reply, attempt: int) -> bool:
    """A complete's 409 saying the job is done by ``attempt`` with the very result we sent
    (``runner.api.lost``); an older server's 409 says none of it, and stays a drop."""
    body = reply.body
    if reply.status != 409 or not isinstance(body, dict):
        return False
    return body.get("state") == "done" and body.get("attempt") == attempt and body.get("same_result") is True


def _refused_as_input(reply: Reply) -> bool:
    """A 4xx about the request itself: not a lost lease (409), not the token (401/403 end the
    worker), not "too many at once" (429)."""
    return 400 <= reply.status < 500 and reply.status not in (401, 403, 409, 429)


def run_remote_worker(client: ApiClient, settings: Settings, **options: Any) -> int:
    try:
        return RemoteWorker(client, settings, **options).run()
    except SpoolError as err:  # a refusal before the loop (a task module that will not import, say)
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
