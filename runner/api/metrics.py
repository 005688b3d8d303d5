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
    spool_queue_jobs{queue, state}              gauge: jobs in each state, per queue
    spool_queue_ready_jobs{queue}               gauge: ready jobs in pending/ (what a limit can hold)
    spool_queue_oldest_ready_age_seconds{queue} gauge: since the queue's oldest ready job was submitted
    spool_queue_claims_total{queue}             counter: claims (attempts started)
    spool_queue_paused{queue}                   gauge: 1 while the queue is paused (queues with a file)
    spool_queue_concurrency_limit{queue}        gauge: its ``concurrency`` (queues that set one)
    spool_queue_rate_limit_per_second{queue}    gauge: its ``rate``, per second (queues that set one)
    spool_queue_file_broken{queue}              gauge: 1 while queues/<name>.yaml does not parse
    spool_coordinator_up, spool_workers_alive{kind}, spool_unhandled_ready_jobs{task},
    spool_schedule_lag_seconds{schedule}        gauges: the processes (``runner.api.health``)

The counters come from the history table, folded in as it grows: a scrape reads only the rows
since the previous one (one lock, so concurrent scrapes never fold a row twice). The server's first
scrape reads the whole history once. Everything runs in a thread, off the event loop.

Task names are the submitters' choice, so the ``task`` label is bounded: the ``max_tasks_shown``
busiest tasks (most jobs submitted, then most jobs now, then by name) have series of their own,
and every other task is summed into ``task="_other"`` (a name no task can have; its oldest ready
age is the oldest of theirs). A task that enters or leaves the busiest moves its counts between
its own series and ``_other``, which a ``rate()`` across that scrape reads as a reset.

Queue names are the submitters' choice too: the ``max_queues_shown`` queues of
``spool.ledger.metrics.shown_queues`` (those with limits or a broken file, then ``default``, then
the most jobs pending and leased, then by name) have series of their own, the rest are summed into
``queue="_other"``, which has no limit gauges. The limits are the ledger's copy of the queue files
(``spool queue set|pause|resume`` write it at once; the coordinator brings hand edits in each pass).
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
from spool.ledger import OTHER, Durations, HistoryTotals, catch_up, job_counts_by_queue, ready_by_queue, shown_queues
from spool.queues import Limits
from spool.runner.api.context import ApiContext, ApiError, require
from spool.runner.api.health import process_gauges
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
            by_queue, ready = job_counts_by_queue(ledger), ready_by_queue(ledger)
            counts = _sum_by(by_queue, task=True)
            label = _labeller(totals, counts, self.sp.settings.max_tasks_shown)
            yield from _counters(totals, label)
            yield _durations(totals, label)
            files = ledger.queue_limit_rows()
            queue_label = _queue_labeller(by_queue, files, totals, self.sp.settings.max_queues_shown)
            yield _queue_claims(totals, queue_label, {queue for _, _, queue, _ in by_queue})
        now = self.sp.clock.wall()
        yield _jobs(counts, label)
        yield _oldest("task", [(task, at) for task, _, at, _ in ready], label, now)
        yield from queue_gauges(_sum_by(by_queue, task=False), ready, files, queue_label, now)
        yield from process_gauges(self.sp, label, now)


def _oldest(name: str, submitted: list[tuple[str, str]], label: Callable[[str], str], now: float) -> Metric:
    family = GaugeMetricFamily(
        "spool_oldest_ready_age_seconds" if name == "task" else "spool_queue_oldest_ready_age_seconds",
        f"Seconds since the oldest ready job in pending/ was submitted, per {name}",
        labels=[name],
    )
    oldest: dict[str, float] = {}
    for value, at in submitted:
        seconds = parse_time(at, "submitted_at").timestamp()
        oldest[label(value)] = min(oldest.get(label(value), seconds), seconds)
    for value, seconds in sorted(oldest.items()):
        family.add_metric([value], max(0.0, now - seconds))
    return family


def _sum_by(by_queue: list[tuple[str, str, str, int]], *, task: bool) -> list[tuple[str, str, int]]:
    """(state, task or queue, jobs) from (state, task, queue, jobs)."""
    found: Counter[tuple[str, str]] = Counter()
    for state, task_name, queue, n in by_queue:
        found[(state, task_name if task else queue)] += n
    return [(state, name, n) for (state, name), n in found.items()]


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


def _jobs(counts: list[tuple[str, str, int]], label: Callable[[str], str], name: str = "task") -> Metric:
    """Every state of every task (or queue) with jobs (zeros included, so a state that empties reads 0)."""
    family = GaugeMetricFamily(
        "spool_jobs" if name == "task" else "spool_queue_jobs",
        f"Jobs in each state (its folder), per {name}",
        labels=["state", name],
    )
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


# -- queues -------------------------------------------------------------------------------------

LimitRows = dict[str, tuple[Limits, str | None, str | None]]


def _queue_labeller(
    by_queue: list[tuple[str, str, str, int]], files: LimitRows, totals: HistoryTotals, shown: int
) -> Callable[[str], str]:
    """queue -> its label this scrape: itself for ``shown_queues``, else ``OTHER``."""
    busy: Counter[str] = Counter({name: 0 for name in [*files, *totals.claims]})
    for state, _, queue, n in by_queue:
        busy[queue] += n if state in ("pending", "leased") else 0
    chosen = {name for name, (limits, error, _) in files.items() if limits.limits_anything or error is not None}
    kept = shown_queues(busy, chosen, shown)
    return (lambda queue: queue) if kept is None else (lambda queue: queue if queue in kept else OTHER)


def _queue_claims(totals: HistoryTotals, label: Callable[[str], str], queues: set[str]) -> Metric:
    """Every queue with jobs or claims (zeros included)."""
    family = CounterMetricFamily("spool_queue_claims", "Claims (attempts started), per queue", labels=["queue"])
    counts: Counter[str] = Counter({label(queue): 0 for queue in queues})
    for queue, n in totals.claims.items():
        counts[label(queue)] += n
    for queue, n in sorted(counts.items()):
        family.add_metric([queue], n)
    return family


def queue_gauges(
    counts: list[tuple[str, str, int]],
    ready: list[tuple[str, str, str, int]],
    files: LimitRows,
    label: Callable[[str], str],
    now: float,
) -> Iterator[Metric]:
    """The queues' jobs, ready jobs and oldest ready age (``_other`` summed), and the limits of
    the queues named one by one."""
    yield _jobs(counts, label, "queue")
    ready_jobs = GaugeMetricFamily("spool_queue_ready_jobs", "Ready jobs in pending/, per queue", labels=["queue"])
    found: Counter[str] = Counter()
    for _, queue, _, n in ready:
        found[label(queue)] += n
    for queue in sorted({label(queue) for _, queue, _ in counts} | set(found)):
        ready_jobs.add_metric([queue], found.get(queue, 0))
    yield ready_jobs
    yield _oldest("queue", [(queue, at) for _, queue, at, _ in ready], label, now)
    paused = GaugeMetricFamily("spool_queue_paused", "1 while the queue is paused, per queue", labels=["queue"])
    broken = GaugeMetricFamily(
        "spool_queue_file_broken",
        "1 while the queue's file does not parse (its last valid limits hold)",
        labels=["queue"],
    )
    concurrency = GaugeMetricFamily(
        "spool_queue_concurrency_limit", "Jobs of the queue leased at once, at most", labels=["queue"]
    )
    rate = GaugeMetricFamily(
        "spool_queue_rate_limit_per_second", "Claims of the queue per second, at most (its rate)", labels=["queue"]
    )
    for queue, (limits, error, _) in sorted(files.items()):
        if label(queue) == OTHER:
            continue
        paused.add_metric([queue], 1 if limits.paused else 0)
        broken.add_metric([queue], 0 if error is None else 1)
        if limits.concurrency is not None:
            concurrency.add_metric([queue], limits.concurrency)
        if limits.rate_count is not None and limits.rate_ms:
            rate.add_metric([queue], limits.rate_count * 1000 / limits.rate_ms)
    yield from (paused, broken, concurrency, rate)
