"""``GET /metrics``: the spool in Prometheus' text format, for any valid token.

A custom collector computes every value from the ledger at scrape time (``spool.ledger_metrics``),
so the numbers are the ledger's, never a second count kept beside it that could drift:

    spool_jobs{state, task}                     gauge: jobs in each state (its folder)
    spool_oldest_ready_age_seconds{task}        gauge: since the oldest ready job was submitted
    spool_submits_total{task}                   counter: jobs accepted (submits and ingested drops)
    spool_completions_total{task}               counter: attempts completed (a result written)
    spool_failures_total{task}                  counter: attempts failed
    spool_retries_total{task}                   counter: failures and expiries sent back to pending
    spool_lease_expiries_total{task}            counter: leases the coordinator expired
    spool_attempt_duration_seconds{task}        histogram: claim to complete or fail

The counters come from the history table, folded in as it grows: a scrape reads only the rows
since the previous one (one lock, so concurrent scrapes never fold a row twice). The server's first
scrape reads the whole history once. Everything runs in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool.errors import LedgerError
from spool.layout import State
from spool.ledger_metrics import HistoryTotals, catch_up, job_counts, oldest_ready
from spool.runner.api.context import ApiContext, ApiError, require
from spool.spool import Spool
from spool.timetext import parse_time

ANY_ROLE = ("submit", "work", "admin")
log = logging.getLogger("spool.serve")
STATES = tuple(state.value for state in State)


def routes(ctx: ApiContext) -> list[BaseRoute]:
    collector = SpoolCollector(ctx.sp)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    warming: list[asyncio.Task[None]] = []

    async def start_warming() -> None:
        # The whole history is folded once, in a thread, while the server starts answering.
        warming.append(asyncio.create_task(run_in_threadpool(collector.warm)))

    async def stop_warming() -> None:
        for task in warming:
            task.cancel()

    ctx.on_startup.append(start_warming)
    ctx.on_shutdown.append(stop_warming)

    async def metrics(request: Request) -> Response:
        require(ctx, request, *ANY_ROLE)
        try:
            text = await run_in_threadpool(generate_latest, registry)
        except LedgerError as err:
            raise ApiError(503, f"the ledger is not usable now ({err}); try again", None, headers=_RETRY) from None
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return [Route("/metrics", metrics, methods=["GET"])]


_RETRY = {"Retry-After": "5"}


class SpoolCollector(Collector):
    """Every metric of the spool, computed when Prometheus (or anyone) scrapes."""

    def __init__(self, sp: Spool) -> None:
        self.sp = sp
        self._lock = threading.Lock()
        self._totals = HistoryTotals()

    def warm(self) -> None:
        """Fold the history written so far (the server's first scrape then reads only new rows)."""
        try:
            with self._lock:
                self._totals = catch_up(self.sp.ledger, self._totals)
        except LedgerError as err:
            log.warning("metrics: the ledger's history could not be read yet (%s); the first scrape will", err)

    def collect(self) -> Iterable[Metric]:
        ledger = self.sp.ledger
        with self._lock:
            self._totals = totals = catch_up(ledger, self._totals)
            yield from _counters(totals)
            yield _durations(totals)
        yield _jobs(job_counts(ledger))
        yield self._oldest(oldest_ready(ledger))

    def _oldest(self, submitted: dict[str, str]) -> Metric:
        family = GaugeMetricFamily(
            "spool_oldest_ready_age_seconds",
            "Seconds since the oldest ready job in pending/ was submitted, per task",
            labels=["task"],
        )
        now = self.sp.clock.wall()
        for task, at in sorted(submitted.items()):
            family.add_metric([task], max(0.0, now - parse_time(at, "submitted_at").timestamp()))
        return family


def _jobs(counts: list[tuple[str, str, int]]) -> Metric:
    """Every state of every task with jobs (zeros included, so a state that empties reads 0)."""
    family = GaugeMetricFamily("spool_jobs", "Jobs in each state (its folder), per task", labels=["state", "task"])
    found = {(state, task): n for state, task, n in counts}
    for task in sorted({task for _, task, _ in counts}):
        for state in STATES:
            family.add_metric([state, task], found.get((state, task), 0))
    return family


_COUNTERS = (
    ("spool_submits", "Jobs accepted: submits and ingested drops", "submits"),
    ("spool_completions", "Attempts completed (a result written)", "completions"),
    ("spool_failures", "Attempts failed (retried or not)", "failures"),
    ("spool_retries", "Failed or expired attempts whose job went back to pending", "retries"),
    ("spool_lease_expiries", "Leases the coordinator expired", "expiries"),
)


def _counters(totals: HistoryTotals) -> Iterator[Metric]:
    tasks = sorted(set().union(*(getattr(totals, field) for _, _, field in _COUNTERS), totals.durations))
    for name, documentation, field in _COUNTERS:
        family = CounterMetricFamily(name, documentation + ", per task", labels=["task"])
        counts = getattr(totals, field)
        for task in tasks:
            family.add_metric([task], counts.get(task, 0))
        yield family


def _durations(totals: HistoryTotals) -> Metric:
    family = HistogramMetricFamily(
        "spool_attempt_duration_seconds",
        "Attempt durations, from claim to complete or fail, per task",
        labels=["task"],
        unit="seconds",
    )
    for task, durations in sorted(totals.durations.items()):
        family.add_metric([task], durations.cumulative(), durations.total_seconds)
    return family
