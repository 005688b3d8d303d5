"""Whether the spool's processes run, for monitoring: ``/healthz`` and the process gauges of
``/metrics`` (``runner.api.metrics`` yields them with its own).

    spool_coordinator_up                    gauge: 1 while a coordinator holds its lock on this host
    spool_workers_alive{kind}               gauge: live workers, ``local`` (liveness lock held) and
                                            ``remote`` (heard from by a server within the lease term)
    spool_unhandled_ready_jobs{task}        gauge: ready jobs of a task no live worker handles
    spool_schedule_lag_seconds{schedule}    gauge: how late each enabled schedule's first due slot
                                            not yet handled is (0 while none is due)

``/healthz`` answers 200 whenever this server can answer: that is what a load balancer should act
on, since the API and its workers need no coordinator to submit, claim and complete. Its body also
says whether a coordinator runs (``coordinator``: true or false), for a person or a probe that
wants it; without one, retries, expiry, promotion and schedules wait (the ``SpoolNoCoordinator``
alert in ``examples/monitoring/alerts.yml`` pages for it).

The server also says it in its own log (``CoordinatorWatch``): a WARNING at start when no
coordinator runs for its spool, and each time one stops or starts, since a first remote setup
easily runs ``spool serve`` alone and then wonders why a failed job is never retried.

Schedule names are the spool administrators' (files in schedules/), not the submitters', so the
``schedule`` label is bounded by what they write; it is still cut at ``MAX_SCHEDULES_SHOWN``, the
most late first. Task labels come through ``runner.api.metrics``' bounded labeller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from spool.base.errors import SpoolError
from spool.disk import coordinator_lock_name, is_held
from spool.handle import Handle
from spool.schedule import entries, lag_seconds
from spool.workers import live_workers, unhandled_ready

MAX_SCHEDULES_SHOWN = 1000
log = logging.getLogger("spool.serve")


def coordinator_up(sp: Handle) -> bool:
    """Whether a coordinator holds its lock now (the kernel frees it when the process dies)."""
    return is_held(sp.layout.fd("locks"), coordinator_lock_name()) is True


def health(sp: Handle) -> dict[str, Any]:
    """``/healthz``'s body: the server answers; whether a coordinator runs."""
    return {"ok": True, "coordinator": coordinator_up(sp)}


def process_gauges(sp: Handle, label: Callable[[str], str], now: float) -> Iterator[Metric]:
    """The gauges above; ``label`` bounds the task names (``runner.api.metrics._labeller``)."""
    up = GaugeMetricFamily("spool_coordinator_up", "1 while a coordinator runs for this spool (its lock is held)")
    up.add_metric([], 1 if coordinator_up(sp) else 0)
    yield up
    workers = live_workers(sp)
    alive = GaugeMetricFamily("spool_workers_alive", "Live workers, local and remote", labels=["kind"])
    kinds = Counter("remote" if worker.remote else "local" for worker in workers if worker.name)
    for kind in ("local", "remote"):
        alive.add_metric([kind], kinds[kind])
    yield alive
    unhandled = GaugeMetricFamily(
        "spool_unhandled_ready_jobs", "Ready jobs of a task no live worker handles, per task", labels=["task"]
    )
    waiting: Counter[str] = Counter()
    for task, jobs in unhandled_ready(sp, workers).items():
        waiting[label(task)] += jobs
    for task, jobs in sorted(waiting.items()):
        unhandled.add_metric([task], jobs)
    yield unhandled
    yield _schedule_lag(sp, now)


def _schedule_lag(sp: Handle, now: float) -> Metric:
    family = GaugeMetricFamily(
        "spool_schedule_lag_seconds",
        "How late the first due slot not yet fired is, per enabled schedule (0: none due)",
        labels=["schedule"],
    )
    lags = []
    for name, entry in entries(sp).items():
        try:
            lag = lag_seconds(sp, entry, now)
        except (SpoolError, OSError):
            continue  # a record being rewritten: the next scrape reads it
        if lag is not None:
            lags.append((lag, name))
    for lag, name in sorted(lags, key=lambda item: (-item[0], item[1]))[:MAX_SCHEDULES_SHOWN]:
        family.add_metric([name], lag)
    return family


class CoordinatorWatch:
    """Logs, from the server, whether a coordinator runs for its spool: a WARNING at start when
    none does and whenever one stops, an INFO when one starts again (a look, a lock test off the
    loop, every ``poll_seconds``: the server's slow poll)."""

    def __init__(self, sp: Handle) -> None:
        self.sp, self.check_seconds = sp, sp.settings.poll_seconds
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        was_up: bool | None = None
        while True:
            try:
                up = await asyncio.to_thread(coordinator_up, self.sp)
            except OSError as err:  # locks/ unreadable: /healthz says it too; look again later
                log.debug("could not look for a coordinator: %s", err)
            else:
                if not up and was_up is not False:
                    log.warning(
                        "no coordinator runs for this spool: expired leases, retries, delayed jobs and "
                        "schedules wait until `spool coordinator` (or `spool run`) runs beside this server"
                    )
                elif up and was_up is False:
                    log.info("a coordinator runs for this spool again")
                was_up = up
            await asyncio.sleep(self.check_seconds)
