"""``GET /metrics``: the spool in Prometheus' text format, for any valid token.

A custom collector computes every value from the ledger at scrape time (``spool.ledger.metrics``),
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

Task names are the submitters' choice, so the ``task`` label is bounded: the ``max_tasks_shown``
busiest tasks (most jobs submitted, then most jobs now, then by name) have series of their own,
and every other task is summed into ``task="_other"`` (a name no task can have; its oldest ready
age is the oldest of theirs). A task that enters or leaves the busiest moves its counts between
its own series and ``_other``, which a ``rate()`` across that scrape reads as a reset.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool.base.errors import LedgerError
from spool.disk import State
from spool.ledger import Durations, HistoryTotals, catch_up, job_counts, oldest_ready
from spool.runner.api.context import ApiContext, ApiError, require
from spool.spool import Spool
from spool.base.timetext import parse_time

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
            counts, submitted = job_counts(ledger), oldest_ready(ledger)
            label = _labeller(totals, counts, self.sp.settings.max_tasks_shown)
            yield from _counters(totals, label)
            yield _durations(totals, label)
        yield _jobs(counts, label)
        yield self._oldest(submitted, label)

    def _oldest(self, submitted: dict[str, str], label: Callable[[str], str]) -> Metric:
        family = GaugeMetricFamily(
            "spool_oldest_ready_age_seconds",
            "Seconds since the oldest ready job in pending/ was submitted, per task",
            labels=["task"],
        )
        now = self.sp.clock.wall()
        oldest: dict[str, float] = {}
        for task, at in submitted.items():
            seconds = parse_time(at, "submitted_at").timestamp()
            oldest[label(task)] = min(oldest.get(label(task), seconds), seconds)
        for task, seconds in sorted(oldest.items()):
            family.add_metric([task], max(0.0, now - seconds))
        return family


OTHER = "_other"  # task names start with a letter or digit (spool.registry.TASK_NAME)


def _labeller(totals: HistoryTotals, counts: list[tuple[str, str, int]], shown: int) -> Callable[[str], str]:
    """task -> its label this scrape: itself for the ``shown`` busiest, else ``OTHER``."""
    now: Counter[str] = Counter()
    for _, task, n in counts:
        now[task] += n
    tasks = set(now).union(*(getattr(totals, field) for _, _, field in _COUNTERS), totals.durations)
    if len(tasks) <= shown:
        return lambda task: task
    busiest = set(sorted(tasks, key=lambda task: (-totals.submits.get(task, 0), -now[task], task))[:shown])
    return lambda task: task if task in busiest else OTHER


def _jobs(counts: list[tuple[str, str, int]], label: Callable[[str], str]) -> Metric:
    """Every state of every task with jobs (zeros included, so a state that empties reads 0)."""
    family = GaugeMetricFamily("spool_jobs", "Jobs in each state (its folder), per task", labels=["state", "task"])
    found: Counter[tuple[str, str]] = Counter()
    for state, task, n in counts:
        found[(state, label(task))] += n
    for task in sorted({task for _, task in found}):
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


def _counters(totals: HistoryTotals, label: Callable[[str], str]) -> Iterator[Metric]:
    tasks = set().union(*(getattr(totals, field) for _, _, field in _COUNTERS), totals.durations)
    labels = sorted({label(task) for task in tasks})
    for name, documentation, field in _COUNTERS:
        family = CounterMetricFamily(name, documentation + ", per task", labels=["task"])
        counts: Counter[str] = Counter()
        for task, n in getattr(totals, field).items():
            counts[label(task)] += n
        for task in labels:
            family.add_metric([task], counts.get(task, 0))
        yield family


def _durations(totals: HistoryTotals, label: Callable[[str], str]) -> Metric:
    family = HistogramMetricFamily(
        "spool_attempt_duration_seconds",
        "Attempt durations, from claim to complete or fail, per task",
        labels=["task"],
        unit="seconds",
    )
    merged: dict[str, Durations] = {}
    for task, durations in totals.durations.items():
        into = merged.setdefault(label(task), Durations())
        into.buckets = [a + b for a, b in zip(into.buckets, durations.buckets)]
        into.total_seconds += durations.total_seconds
        into.count += durations.count
    for task, durations in sorted(merged.items()):
        family.add_metric([task], durations.cumulative(), durations.total_seconds)
    return family
