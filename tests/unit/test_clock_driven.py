"""Decisions in spool/ read time only from the spool's clock: with a FakeClock they are exact.

Backoffs with their jitter pinned, a delayed job's readiness, the purge cutoff, the ledger's
times and ``Spool.wait``'s timeout, all without sleeping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from spool.admin import purge
from spool.moves.ready import make_ready
from spool.base.clock import FakeClock
from spool.job import is_ready
from spool.disk.layout import State
from spool.moves.outcomes import backoff_seconds
from spool.moves.recovery import resync_under_lock
from spool.spool import Spool
from spool.moves.store import read_job
from spool.base.timetext import format_time, parse_time
from spool.moves.transitions import Lease, claim, complete, expire, fail

START = 1_800_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START, fraction=0.5)


@pytest.fixture
def sp(spool_dir: Path, clock: FakeClock) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, flags={"backoff_base_seconds": 2, "backoff_max_seconds": 30}, clock=clock)
    yield opened
    opened.close()


def take(sp: Spool, worker: str = "w1") -> Lease:
    claimed = claim(sp, worker, None)
    assert claimed is not None
    return Lease(claimed.id, worker, claimed.attempt)


def test_backoff_is_exact_once_the_jitter_is_pinned(sp: Spool, clock: FakeClock) -> None:
    # base 2 s doubling per try spent, capped at 30 s; jitter spans half to all of it
    assert [backoff_seconds(sp, tries) for tries in (1, 2, 3, 4, 5, 6)] == [1.5, 3.0, 6.0, 12.0, 22.5, 22.5]
    clock.fraction = 0.0
    assert backoff_seconds(sp, 1) == 1.0
    clock.fraction = 1.0
    assert backoff_seconds(sp, 3) == 8.0


def test_a_failure_and_an_expiry_write_the_pinned_backoff(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=3)
    assert fail(sp, take(sp), "boom") is State.PENDING
    assert read_job(sp, State.PENDING, job_id).backoff_seconds == 1.5
    assert make_ready(sp, job_id)  # the coordinator, when the backoff ran out on its clock
    retried = claim(sp, "w2", None)
    assert retried is not None and retried.attempt == 2
    assert expire(sp, job_id, 2, "lease expired") is State.PENDING
    assert read_job(sp, State.PENDING, job_id).backoff_seconds == 3.0


def test_the_times_a_job_file_records_are_the_clocks(sp: Spool, clock: FakeClock) -> None:
    job_id = sp.submit("echo")
    clock.advance(12.5)
    lease = take(sp)
    clock.advance(1.25)
    complete(sp, lease, b"1")
    done = read_job(sp, State.DONE, job_id)
    assert done.submitted_at == format_time(START)
    record = done.attempts[-1]
    assert (record.started, record.ended) == (format_time(START + 12.5), format_time(START + 13.75))
    events = [(at, event) for at, event, *_ in sp.ledger.history(job_id)]
    assert events == [(START, "submit"), (START + 12.5, "claim"), (START + 13.75, "complete")]


def test_a_delayed_job_becomes_ready_when_the_clock_passes_not_before(sp: Spool, clock: FakeClock) -> None:
    job_id = sp.submit("echo", delay_seconds=60)
    job_file = read_job(sp, State.PENDING, job_id)
    assert job_file.job.not_before == format_time(START + 60)
    assert parse_time(job_file.job.not_before, "t").timestamp() == START + 60
    assert not is_ready(job_file, clock.wall())
    assert resync_under_lock(sp, job_id) and sp.ledger.row(job_id)["ready"] == 0  # type: ignore[index]
    clock.advance(59.999)
    assert resync_under_lock(sp, job_id) and sp.ledger.row(job_id)["ready"] == 0  # type: ignore[index]
    clock.advance(0.001)
    assert is_ready(job_file, clock.wall())
    assert resync_under_lock(sp, job_id) and sp.ledger.row(job_id)["ready"] == 1  # type: ignore[index]
    assert take(sp).job_id == job_id


def test_a_not_before_already_past_is_ready_at_submit(sp: Spool, clock: FakeClock) -> None:
    job_id = sp.submit_spec({"task": "echo", "not_before": format_time(START - 1)}).id
    assert sp.ledger.row(job_id)["ready"] == 1  # type: ignore[index]


def test_purge_cuts_off_on_the_clock(sp: Spool, clock: FakeClock) -> None:
    job_id = sp.submit("echo")
    complete(sp, take(sp), b"1")
    clock.advance(3599)
    assert purge(sp, 3600) == []
    clock.advance(2)
    assert purge(sp, 3600) == [job_id]


def test_wait_times_out_on_the_clock_and_reports_every_poll(sp: Spool, clock: FakeClock) -> None:
    job_id = sp.submit("echo")
    polls: list[Mapping[str, State]] = []
    started = clock.monotonic()
    states = sp.wait([job_id], timeout_seconds=1.0, poll_seconds=0.25, on_poll=polls.append)
    assert states == {job_id: State.PENDING}
    assert clock.monotonic() - started == 1.0
    assert len(polls) == 5 and all(dict(poll) == {job_id: State.PENDING} for poll in polls)


def test_wait_returns_at_the_first_poll_that_sees_every_job_ended(sp: Spool, clock: FakeClock) -> None:
    job_id = sp.submit("echo")
    complete(sp, take(sp), b"1")
    polls: list[Mapping[str, State]] = []
    assert sp.wait([job_id], timeout_seconds=None, on_poll=polls.append) == {job_id: State.DONE}
    assert polls == [{job_id: State.DONE}] and clock.monotonic() == 1000.0
