"""The history fold behind /metrics, in-process with real transitions on a real ledger: what
counts as a retry (a fail followed by the job's next claim, a cancel of the pending retry, or
the job pending when read) and what does not (a burial, a requeue of a buried job); the same
totals whether the history is read in one go or in small chunks; durations from claim to
outcome; and fresh totals when the ledger's history is rebuilt."""

from __future__ import annotations

import pytest

from spool.ledger import metrics as ledger_metrics
from spool.moves.ready import make_ready
from spool.ledger.metrics import HistoryTotals, catch_up, job_counts, oldest_ready
from spool.spool import Spool
from spool.moves.transitions import Lease, claim, complete, fail

WORKER = "w-metrics"


def _claim(sp: Spool, job_id: str) -> Lease:
    job_file = claim(sp, WORKER, [sp.job(job_id)[1].job.task])  # each job has a task of its own
    assert job_file is not None and job_file.id == job_id, job_file
    return Lease(job_file.id, WORKER, job_file.attempt)


def _history(sp: Spool) -> tuple[str, str, str, str]:
    """Four jobs through every kind of ending; returns their ids."""
    retried = sp.submit("flaky", {}, max_tries=3)
    fail(sp, _claim(sp, retried), "boom")  # back to pending (a retry)...
    ok = sp.submit("echo", {}, max_tries=1)
    buried = sp.submit("buried", {}, max_tries=1)
    cancelled = sp.submit("cancelled", {}, max_tries=2)
    return retried, ok, buried, cancelled


def _run_rest(sp: Spool, retried: str, ok: str, buried: str, cancelled: str) -> None:
    _make_ready(sp, retried)
    complete(sp, _claim(sp, retried), b'{"second": true}')  # ...picked up again: counted once
    complete(sp, _claim(sp, ok), b"1")
    fail(sp, _claim(sp, buried), "no more tries")  # buried: a failure, not a retry
    sp.requeue(buried)  # a requeue of a buried job is not a retry either
    fail(sp, _claim(sp, cancelled), "once")  # pending again (a retry) ...
    sp.cancel(cancelled)  # ... then cancelled while it waited: still a retry


def _make_ready(sp: Spool, job_id: str) -> None:
    """The coordinator's job (a backoff's timer) done by hand: the failed job is ready again."""
    assert make_ready(sp, job_id)


@pytest.fixture
def ran(sp: Spool) -> Spool:
    ids = _history(sp)
    _run_rest(sp, *ids)
    return sp


def test_the_fold_counts_what_was_run(ran: Spool) -> None:
    totals = catch_up(ran.ledger, HistoryTotals())
    assert dict(totals.submits) == {"flaky": 1, "echo": 1, "buried": 1, "cancelled": 1}
    assert dict(totals.completions) == {"flaky": 1, "echo": 1}
    assert dict(totals.failures) == {"flaky": 1, "buried": 1, "cancelled": 1}
    assert dict(totals.retries) == {"flaky": 1, "cancelled": 1}  # buried, then requeued: no retry
    assert dict(totals.expiries) == {}
    flaky = totals.durations["flaky"]
    assert flaky.count == 2 and flaky.cumulative()[-1] == ("+Inf", 2)  # a fail and a complete
    assert {task: d.count for task, d in totals.durations.items()} == {
        "flaky": 2,
        "echo": 1,
        "buried": 1,
        "cancelled": 1,
    }
    assert sorted(job_counts(ran.ledger)) == [
        ("dead", "cancelled", 1),
        ("done", "echo", 1),
        ("done", "flaky", 1),
        ("pending", "buried", 1),
    ]
    assert set(oldest_ready(ran.ledger)) == {"buried"}  # the requeued job is ready again


def test_a_fail_is_a_retry_while_its_job_waits_in_pending(sp: Spool) -> None:
    retried, *_ = _history(sp)
    totals = catch_up(sp.ledger, HistoryTotals())
    assert totals.retries["flaky"] == 1 and totals.failures["flaky"] == 1  # pending when read
    _make_ready(sp, retried)
    complete(sp, _claim(sp, retried), b"1")
    totals = catch_up(sp.ledger, totals)  # the claim that follows is not a second retry
    assert totals.retries["flaky"] == 1 and totals.completions["flaky"] == 1


def test_small_chunks_give_the_same_totals(ran: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = catch_up(ran.ledger, HistoryTotals())
    monkeypatch.setattr(ledger_metrics, "ROWS_PER_READ", 2)
    chunked = catch_up(ran.ledger, HistoryTotals())
    for name in ("submits", "completions", "failures", "expiries", "retries"):
        assert getattr(chunked, name) == getattr(whole, name), name
    assert {t: d.count for t, d in chunked.durations.items()} == {t: d.count for t, d in whole.durations.items()}
    assert chunked.seq == whole.seq


def test_a_rebuilt_history_starts_the_totals_again(ran: Spool) -> None:
    totals = catch_up(ran.ledger, HistoryTotals())
    assert totals.seq > 0
    ran.ledger.rebuild([])  # what fsck --repair does (here over no files): a new, empty history
    again = catch_up(ran.ledger, totals)
    assert again is not totals and again.seq == 0 and sum(again.submits.values()) == 0
