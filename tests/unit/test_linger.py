"""runner.batching's linger: a claim waits a few milliseconds first only while jobs land one by
one faster than the worker takes them, never after a quiet spell (an idle pickup is at once),
never while a backlog fills every claim, never for long attempts (their claims ask for one).
The effect on throughput is a benchmark's (docs/performance.md), not a timed test's."""

from __future__ import annotations

from spool.runner.batching import LINGER_AFTER_SECONDS, LINGER_SECONDS, Batches
from spool.spool import Spool
from support import wait_until


def _batches(sp: Spool) -> Batches:
    return Batches(sp, "w1", lambda *_args: None)


def test_a_worker_that_claimed_nothing_yet_never_lingers(sp: Spool) -> None:
    assert _batches(sp).linger() == 0.0


def test_a_claim_that_found_fewer_jobs_than_it_asked_for_makes_the_next_one_linger(sp: Spool) -> None:
    batches = _batches(sp)
    batches.claimed(1, 64)
    assert batches.linger() == LINGER_SECONDS
    batches.claimed(0, 64)  # an empty claim says nothing of the pace: still lingering
    assert batches.linger() == LINGER_SECONDS


def test_a_full_claim_or_a_claim_of_one_asked_for_ends_the_lingering(sp: Spool) -> None:
    batches = _batches(sp)
    batches.claimed(3, 64)
    batches.claimed(64, 64)  # a backlog: every claim is full, nobody waits
    assert batches.linger() == 0.0
    batches.claimed(3, 64)
    batches.claimed(1, 1)  # long attempts: a claim asks for one job and takes it
    assert batches.linger() == 0.0


def test_after_a_quiet_spell_a_claim_is_at_once(sp: Spool) -> None:
    batches = _batches(sp)
    batches.claimed(1, 64)
    assert batches.linger() == LINGER_SECONDS
    wait_until(lambda: batches.linger() == 0.0, timeout=LINGER_AFTER_SECONDS * 100, message="the lingering over")
