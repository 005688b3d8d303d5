"""The fence a remote worker names (``spool.moves.remote_leases``), and fencing off a worker, in process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spool import Spool
from spool.base.errors import LeaseLost
from spool.moves.fence import Held
from spool.disk.layout import State
from spool.base.records import Lease
from spool.moves.remote_leases import FENCE_WAIT_SECONDS, fence_of, fence_worker, held_by_fence, leases_of
from spool.moves.store import rewrite_job
from spool.moves.transitions import claim_held, complete
from support import run_spool


def _claim(sp: Spool, worker: str) -> Held:
    held = claim_held(sp, worker, ["wordcount"])
    assert held is not None
    return held


def test_the_fence_is_derived_from_the_leased_file(sp: Spool) -> None:
    job_id = sp.submit("wordcount", {"path": "/x"})
    held = _claim(sp, "remote-a")
    fence = fence_of(held.job_file.attempt, held.data)
    assert fence.startswith("1-")
    again = held_by_fence(sp, job_id, fence)  # what a restarted server sees: the disk alone
    assert again == held
    assert held_by_fence(sp, job_id, "1-" + "0" * 16) is None
    assert held_by_fence(sp, job_id, "2-" + fence[2:]) is None
    assert held_by_fence(sp, job_id, "x") is None


def test_a_fence_goes_stale_when_the_job_moves_on(sp: Spool) -> None:
    job_id = sp.submit("wordcount", {"path": "/x"}, max_tries=3)
    held = _claim(sp, "remote-a")
    fence = fence_of(held.job_file.attempt, held.data)
    assert fence_worker(sp, "remote-a") == [job_id]
    assert held_by_fence(sp, job_id, fence) is None
    assert sp.state(job_id) is State.PENDING


def test_fence_worker_expires_only_that_workers_leases(sp: Spool) -> None:
    mine = sp.submit("wordcount", {"path": "/a"}, max_tries=1)
    theirs = sp.submit("wordcount", {"path": "/b"})
    first = _claim(sp, "remote-a")
    second = _claim(sp, "remote-b")
    assert {first.job_file.id, second.job_file.id} == {mine, theirs}
    assert leases_of(sp, "remote-a") == [(first.job_file.id, 1)]
    assert fence_worker(sp, "remote-a") == [first.job_file.id]
    assert leases_of(sp, "remote-a") == []
    assert sp.state(second.job_file.id) is State.LEASED
    assert fence_worker(sp, "nobody") == []


def test_a_fenced_job_on_its_last_try_ends_dead_and_its_late_result_is_refused(sp: Spool) -> None:
    job_id = sp.submit("wordcount", {"path": "/a"}, max_tries=1)
    held = _claim(sp, "remote-a")
    fence_worker(sp, "remote-a")
    assert sp.state(job_id) is State.DEAD
    with pytest.raises(LeaseLost):  # the stale attempt links nothing
        complete(sp, Lease(job_id, "remote-a", held.job_file.attempt), b"{}", held)
    assert not (sp.root / "results" / f"{job_id}.json").exists()
    assert sp.state(job_id) is State.DEAD


def test_fence_worker_also_ends_a_claim_that_died_after_its_rename(sp: Spool, spool_dir: Path) -> None:
    """A claim killed between its rename and its rewrite left a file with no lease, one attempt
    behind the heartbeat that names the worker: that try is the worker's too, and is ended."""
    job_id = sp.submit("wordcount", {"path": "/a"}, max_tries=3)
    crashed = run_spool(
        "worker", "--name", "remote-x", "--burst", spool=spool_dir, env={"SPOOL_CRASH_AT": "worker:claim-after-rename"}
    )
    assert crashed.returncode == -9, crashed.stderr
    state, job_file = sp.job(job_id)
    assert state is State.LEASED and job_file.lease is None and job_file.attempt == 0
    assert leases_of(sp, "remote-x") == [(job_id, 1)]
    assert leases_of(sp, "someone-else") == []
    assert fence_worker(sp, "remote-x") == [job_id]
    state, job_file = sp.job(job_id)
    assert state is State.PENDING and job_file.tries == 1  # the claim's try counted as spent


def test_a_lease_for_another_attempt_than_its_files_is_not_the_workers_and_costs_the_fence_no_wait(sp: Spool) -> None:
    """A hand-edited leased file whose lease names another attempt: ``expire`` refuses it, so
    counting it would make the fence retry it for its whole wait and the server answer "fence
    again" (503) until the coordinator settles the file."""
    job_id = sp.submit("wordcount", {"path": "/a"})
    held = _claim(sp, "remote-a")
    edited = held.job_file.replace(lease=Lease(job_id, "remote-a", held.job_file.attempt + 3))
    rewrite_job(sp, State.LEASED, edited, sync=False)
    assert leases_of(sp, "remote-a") == []
    started = time.monotonic()
    assert fence_worker(sp, "remote-a") == []
    assert time.monotonic() - started < FENCE_WAIT_SECONDS / 2
