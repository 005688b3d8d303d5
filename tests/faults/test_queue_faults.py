"""Queue limits as the fault suite sees them: the chaos checker's interval rule, and what a job file's
attempt records can and cannot say about a queue's concurrency.

- ``most_at_once`` (tests/faults/history.py) counts half-open intervals: an attempt whose record
  ended at the millisecond another started did not overlap it; three that do overlap are three.
- A claim's ``started`` is read once its transaction holds the ledger's write lock
  (``Ledger._reserve``), so a job file never shows an attempt of a queue at concurrency 1
  starting before the previous one ended, even when the claim waited for the ledger behind the
  completion that freed its slot. (Read before the lock, as it once was, it could.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from history import most_at_once, ran_past, rate_busiest

from spool import Spool
from spool.base.timetext import parse_time
from spool.moves.transitions import Lease, claim, complete
from spool.queues import set_limits


def test_most_at_once_counts_half_open_intervals() -> None:
    assert most_at_once([(0.0, 1.0, "a"), (1.0, 2.0, "b")])[0] == 1  # one ends as the next starts
    assert most_at_once([(0.0, 1.0, "a"), (0.999, 2.0, "b")])[0] == 2
    most, when, who = most_at_once([(0.0, 3.0, "a"), (1.0, 2.0, "b"), (1.5, 4.0, "c"), (2.0, 2.0, "empty")])
    assert (most, when, who) == (3, 1.5, ["a", "b", "c"])
    assert most_at_once([])[0] == 0


def test_rate_busiest_counts_claims_within_one_window() -> None:
    # A claim at t counts the claims after t - window: t and t + window are in no window together.
    assert rate_busiest([0, 1000, 2000], 1000) == 1
    assert rate_busiest([0, 999, 1998], 1000) == 2
    assert rate_busiest([5, 5, 5, 900, 1004], 1000) == 5
    assert rate_busiest([5, 5, 5, 900, 1005], 1000) == 4
    assert rate_busiest([], 1000) == 0


def test_a_handler_end_within_its_records_millisecond_is_not_past_the_record() -> None:
    # The record reads 17.965 whether its attempt ended at 17.9650 or 17.9659 (floored).
    ended = parse_time("2026-12-06T05:57:17.965Z", "ended").timestamp()
    assert not ran_past(ended + 0.0004, ended) and not ran_past(ended, ended) and not ran_past(ended - 0.2, ended)
    assert ran_past(ended + 0.0011, ended) and ran_past(ended + 5.0, ended)


def test_a_claims_started_is_never_before_the_end_of_the_attempt_whose_slot_it_took(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    sp = Spool.init(root, environ={})
    other = Spool(root, environ={})
    try:
        set_limits(sp, "capped", concurrency=1)
        first = sp.submit("echo", {"n": 1}, queue="capped")
        second = sp.submit("echo", {"n": 2}, queue="capped")
        held = claim(sp, "w1", ["echo"])
        assert held is not None and held.id == first
        claimed: dict[str, object] = {}
        # Another thread of this process is inside a ledger call (a server's request threads share
        # one Spool): the claim below reads its clock, then waits for the ledger's mutex.
        sp.ledger._mutex.acquire()
        try:
            waiter = threading.Thread(target=lambda: claimed.update(job=claim(sp, "w2", ["echo"])))
            waiter.start()
            time.sleep(0.05)  # the claim is waiting (nothing to poll: it is blocked inside the ledger)
            complete(other, Lease(first, "w1", held.attempt), b"{}")  # the one slot is freed
        finally:
            sp.ledger._mutex.release()
        waiter.join(timeout=30)
        taken = claimed.get("job")
        assert taken is not None and getattr(taken, "id", None) == second, "the freed slot was not taken"
        ended = parse_time(sp.job(first)[1].attempts[-1].ended, "ended")
        started = parse_time(sp.job(second)[1].attempts[-1].started, "started")
        assert started >= ended, f"concurrency 1, yet the files show {second} started {started} before {ended}"
    finally:
        other.close()
        sp.close()
