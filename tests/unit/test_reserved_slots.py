"""A reservation the coordinator's reconcile takes back is not claimed (spool.ledger.limits.reserve).

A reserved row is 'leased' while its file is still in pending/; the reconcile puts such a row back
to match the file, which frees the queue's slot in the count. Had the reserving claimer gone on
to move the file, a third claim in that window would put one attempt more than the concurrency
limit in leased/. Each step is run by hand, in the order of that interleaving, so the race is
shown deterministically: these tests fail without ``still_reserved``.
"""

from __future__ import annotations

from contextlib import ExitStack

from spool import Spool, queues
from spool.disk.layout import State
from spool.moves.claiming import claim_held
from spool.moves.group import _lock_and_stage, claim_many
from spool.moves.recovery import reconcile
from spool.moves.store import folders_of, read_job


def _leased_in(sp: Spool, queue: str) -> list[str]:
    return [
        job_id
        for job_id, state in sp.ledger.states().items()
        if state == "leased" and sp.ledger.row(job_id)["queue"] == queue
    ]


def _two_claimers_one_slot(sp: Spool) -> tuple[str, str]:
    """A queue of one slot holding a job for each of two claimers (each claims its own task)."""
    queues.set_limits(sp, "gpu", concurrency=1)
    return sp.submit("echo", queue="gpu"), sp.submit("wordcount", {"path": "x"}, queue="gpu")


def test_a_claim_whose_reservation_the_reconcile_took_back_gives_the_job_up(sp: Spool) -> None:
    first, second = _two_claimers_one_slot(sp)
    reservation = sp.ledger.reserve_many(["echo"], 1)  # claimer B reserved, then paused before its lock
    assert reservation.ids == [first] and reservation.fenced
    reconcile(sp, full=False)  # the coordinator: a 'leased' row, its file in pending/ -> pending
    assert sp.ledger.states()[first] == "pending"
    taken = claim_held(sp, "C", ["wordcount"])  # the slot looks free: C claims the other job
    assert taken is not None and taken.job_file.id == second
    assert claim_held(sp, "B", ["echo"], reserved=reservation) is None  # B resumes: not its row any more
    assert folders_of(sp, first) == [State.PENDING] and read_job(sp, State.PENDING, first).tries == 0
    assert _leased_in(sp, "gpu") == [second]
    assert len(list(sp.layout.path(State.LEASED).glob("*.yaml"))) == 1  # never two in a queue of one


def test_a_batch_claim_gives_up_the_members_taken_back(sp: Spool) -> None:
    queues.set_limits(sp, "gpu", concurrency=2)
    mine = [sp.submit("echo", {"n": i}, queue="gpu") for i in range(2)]
    other = sp.submit("wordcount", {"path": "x"}, queue="gpu")
    reservation = sp.ledger.reserve_many(["echo"], 2)
    assert reservation.ids == mine
    reconcile(sp, full=False)
    assert [held.job_file.id for held in claim_many(sp, "C", ["wordcount"], 4)] == [other]
    (got,) = [held.job_file.id for held in claim_many(sp, "C2", ["echo"], 1)]  # the one slot left
    (left,) = set(mine) - {got}
    # B resumes the batch it reserved (claim_many's own step after reserve_many): nothing is its own.
    with ExitStack() as locks:
        assert _lock_and_stage(sp, locks, reservation, "B") == []
    assert sorted(_leased_in(sp, "gpu")) == sorted([other, got])
    assert sp.ledger.states()[left] == "pending" and read_job(sp, State.PENDING, left).tries == 0


def test_a_reservation_given_back_frees_only_its_own_row_and_rate_claim(sp: Spool) -> None:
    queues.set_limits(sp, "api", rate="5/s")
    job_id = sp.submit("echo", queue="api")
    stale = sp.ledger.reserve_many(None, 1)
    reconcile(sp, full=False)  # taken back
    fresh = sp.ledger.reserve_many(None, 1)  # another claimer's reservation of the same job
    assert fresh.ids == [job_id] and fresh.token != stale.token
    sp.ledger.unreserve(job_id, stale)  # the first claimer gives up: the second's row stays reserved
    assert sp.ledger.holds(job_id, fresh.token)
    claims = sp.ledger._read("SELECT at_ms FROM claims WHERE queue = 'api'")
    assert claims == [(round(fresh.at * 1000),)]  # the stale one's place in the window given back


def test_an_unlimited_queue_is_not_fenced(sp: Spool) -> None:
    sp.submit("echo")
    queues.set_limits(sp, "api", rate="5/s")
    sp.submit("echo", queue="api")
    assert not sp.ledger.reserve_many(None, 2).fenced  # no concurrency limit: no extra read per claim
