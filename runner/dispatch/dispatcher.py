"""``spool dispatch``: keep up to ``--max-inflight`` engine jobs in flight while ready jobs wait.

The loop, over the API and one ``Engine`` (``runner.dispatch.engine``):

1. at start, ``adopt`` the engine jobs our label left (a dispatcher SIGKILLed and started again
   loses none: each is watched as if we had started it);
2. look at each engine job in flight: ``SUCCEEDED`` is forgotten; ``FAILED`` fences its runner
   (``POST /v1/runners/{runner}/fence``: its lease ends now, the job is retried) and is
   forgotten once the server said so; ``LOST`` is forgotten unfenced (the lease decides);
   ``PENDING`` past ``--dispatch-timeout`` is cancelled, fenced (in case it started as we
   cancelled) and forgotten, so its job, still ready and never claimed, is dispatched again
   with no try spent;
3. with room left, ask the server which jobs are ready (``POST /v1/dispatch/ready``, a long-poll
   that reserves nothing and sees the queues' limits, excluding the jobs already in flight) and
   hand one engine job per job to the engine, ``spool run-one --runner R --job ID``, each under a
   fresh runner name.

A job whose engine job ended while it is still ready (its claim lost to a limit, say) waits
``COOL_SECONDS`` before it is dispatched again, so a claim that keeps finding nothing does not
spin. SIGTERM/SIGINT stop the loop; the engine jobs run on, for the next dispatcher to adopt.
"""

from __future__ import annotations

import logging
import secrets
import signal
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from spool.base import crash
from spool.runner.dispatch.engine import Engine, EngineJob, Verdict
from spool.runner.remote.client import ApiClient, Patience

log = logging.getLogger("spool.dispatch")

TICK_SECONDS = 0.2  # how often engine jobs are looked at while every slot is taken
READY_WAIT_SECONDS = 5.0  # a ready peek's long-poll while nothing is in flight
BUSY_WAIT_SECONDS = 0.5  # ... and while engine jobs are (their verdicts are looked at between)
COOL_SECONDS = 2.0
CALL_MARGIN_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 5.0


class DispatchRefused(Exception):
    """The server refused the dispatcher for good (a revoked token, the wrong role)."""


class Dispatcher:
    def __init__(
        self,
        client: ApiClient,
        engine: Engine,
        *,
        tasks: Sequence[str] | None,
        queues: Sequence[str] | None = None,
        max_inflight: int = 4,
        dispatch_timeout: float = 300.0,
    ) -> None:
        self.client, self.engine = client, engine
        self.tasks = sorted(set(tasks)) if tasks is not None else None
        self.queues = sorted(set(queues)) if queues is not None else None
        self.max_inflight, self.dispatch_timeout = max_inflight, dispatch_timeout
        self.inflight: dict[str, EngineJob] = {}  # runner -> its engine job
        self._cooling: dict[str, float] = {}  # job id -> monotonic time it may be dispatched again
        self._stopping = False
        self._engine_down = False  # said once that an engine call failed
        self.patience = Patience(
            client,
            who="dispatcher",
            log=log,
            refused=DispatchRefused,
            quiet=lambda: self._stopping,
            hurry=lambda: self._stopping,
            most=BACKOFF_MAX_SECONDS,
        )

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for job in self.engine.adopt():
                self.inflight[job.runner] = job
                log.info("adopted engine job %s (runner %s) for %s", job.handle or "-", job.runner, job.job_id)
            log.info("dispatcher started: server %s, %d engine jobs at most", self.client.url, self.max_inflight)
            while not self._stopping:
                self._look()
                room = self.max_inflight - len(self.inflight)
                if room <= 0:
                    time.sleep(TICK_SECONDS)
                    continue
                for item in self._ready(room):
                    self._dispatch(item["id"])
        except DispatchRefused as err:
            log.error("dispatcher stops: %s", err)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.engine.stop()
            self.client.close()
        log.info("dispatcher stopped; %d engine jobs run on", len(self.inflight))
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
        self.client.abort()  # a ready peek in flight ends now

    # -- the engine jobs in flight -----------------------------------------------------------

    def _look(self) -> None:
        for runner, job in list(self.inflight.items()):
            try:
                self._look_at(runner, job)
            except DispatchRefused:
                raise
            except Exception as err:  # the engine's own kinds (squeue down, an API error): next look
                self._engine_failed(f"looking at runner {runner}'s engine job", err)
            else:
                self._engine_answered()

    def _look_at(self, runner: str, job: EngineJob) -> None:
        verdict = self.engine.poll(job)
        if verdict is Verdict.SUCCEEDED:
            self._done(job, "ended")
        elif verdict is Verdict.FAILED:
            if self._fence(runner):
                crash.point("after-fence")  # a restart adopts it: failed again, fenced again (a no-op)
                self._done(job, "failed; its runner is fenced")
        elif verdict is Verdict.LOST:
            self._done(job, "lost (ambiguous); its lease decides")
        elif verdict is Verdict.PENDING and time.time() - job.submitted > self.dispatch_timeout:
            self.engine.cancel(job)
            if self._fence(runner):
                self._done(job, f"not started within {self.dispatch_timeout:g}s; cancelled")
                self._cooling.pop(job.job_id, None)  # dispatched again at once

    def _engine_failed(self, doing: str, err: Exception) -> None:
        """An engine call raised: said once until the engine answers again (a down slurmctld
        would otherwise fill the log every tick); the dispatcher goes on."""
        if not self._engine_down:
            self._engine_down = True
            log.warning("the engine failed %s: %s; trying on", doing, str(err) or type(err).__name__)

    def _engine_answered(self) -> None:
        if self._engine_down:
            self._engine_down = False
            log.info("the engine answers again")

    def _done(self, job: EngineJob, how: str) -> None:
        log.info("engine job of runner %s for %s %s", job.runner, job.job_id, how)
        self.engine.forget(job)
        del self.inflight[job.runner]
        self._cooling[job.job_id] = time.monotonic() + COOL_SECONDS

    def _fence(self, runner: str) -> bool:
        """End the runner's leases now; False if the server did not say so (tried again next look)."""
        reply = self.patience.call(f"/v1/runners/{runner}/fence", {}, timeout_seconds=CALL_MARGIN_SECONDS)
        if reply is None:
            return False
        if reply.status != 200:
            log.warning("fence of runner %s: %s", runner, reply.error())
            return reply.status < 500
        expired = reply.body.get("expired") if isinstance(reply.body, dict) else None
        if expired:
            log.info("runner %s fenced: %s back to the queue", runner, ", ".join(map(str, expired)))
        else:  # its lease ended already (completed, expired, or fenced by a call whose reply was lost)
            log.info("runner %s fenced: it held no lease", runner)
        return True

    # -- new engine jobs ---------------------------------------------------------------------

    def _ready(self, room: int) -> list[dict[str, Any]]:
        now = time.monotonic()
        self._cooling = {job_id: until for job_id, until in self._cooling.items() if until > now}
        exclude = sorted({job.job_id for job in self.inflight.values()} | set(self._cooling))
        wait = BUSY_WAIT_SECONDS if self.inflight or self._cooling else READY_WAIT_SECONDS
        asked: dict[str, Any] = {"most": min(room, 256), "wait": wait, "exclude": exclude}
        if self.tasks is not None:
            asked["tasks"] = self.tasks
        if self.queues is not None:
            asked["queues"] = self.queues
        reply = self.patience.call("/v1/dispatch/ready", asked, timeout_seconds=wait + CALL_MARGIN_SECONDS)
        if reply is None or reply.status != 200:
            if reply is not None:
                log.warning("ready jobs: %s", reply.error())
                self.patience.back_off()
            return []
        ready = reply.body.get("ready") if isinstance(reply.body, dict) else None
        return [item for item in ready or [] if isinstance(item, dict) and isinstance(item.get("id"), str)]

    def _dispatch(self, job_id: str) -> None:
        runner = f"r-{secrets.token_hex(8)}"
        try:
            job = self.engine.submit(runner, job_id)
        except Exception as err:  # the engine's own kinds: the job stays ready, dispatched again later
            # Had the engine made the job before it failed to say so, that engine job's run-one
            # claims it or finds it taken; either way the lease fences it (a restart adopts it).
            self._cooling[job_id] = time.monotonic() + COOL_SECONDS
            self._engine_failed(f"handing {job_id} to the engine", err)
            self.patience.back_off()
            return
        self._engine_answered()
        crash.point("after-engine-submit")  # the engine holds it under our label: a restart adopts it
        self.inflight[runner] = job
        log.info("dispatched %s to runner %s", job_id, runner)
