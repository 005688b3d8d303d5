"""The coordinator's lease watch: a healthy new lease costs no YAML when its heartbeat file is
there (the claim writes it first, under the job's lock); a claim that died between that write
and recording the lease is settled, not refused forever; event-driven passes coalesce their
lease watches without expiring a lease before a full term of our own observation; a dead
worker's lease goes within WORKER_PROBE_SECONDS; each worker lock is probed once a watch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spool.disk.fsio import fs
from spool.disk.layout import State, heartbeat_name, job_name, worker_lock_name
from spool.disk.heartbeat import heartbeat_content
from spool.disk.locks import Lock, acquire
from spool.runner import coordinator as coordinator_module
from spool.runner.coordinator import LEASE_WATCH_SECONDS, WORKER_PROBE_SECONDS, Coordinator
from spool.spool import Spool
from spool.moves.store import move_job, read_job, write_dot_file
from spool.moves.transitions import Lease, claim, heartbeat

WORKER = "w-test"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker_lock(sp: Spool) -> Iterator[Lock]:
    lock = acquire(sp.layout.fd("locks"), worker_lock_name(WORKER), blocking=True)
    yield lock
    lock.release()


@pytest.fixture
def job_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids whose files the coordinator parses (read_job as it imports it)."""
    reads: list[str] = []

    def counting(sp: Spool, state: State, job_id: str) -> Any:
        reads.append(job_id)
        return read_job(sp, state, job_id)

    monkeypatch.setattr(coordinator_module, "read_job", counting)
    return reads


def _claim(sp: Spool, *, beat_first: bool) -> Lease:
    """A claim. The claim writes the lease's first heartbeat file (counter 0) before its rename;
    ``beat_first=False`` removes it again: a lease as the old order left it before its first beat
    (or as a failed heartbeat write leaves it), which the coordinator must read once."""
    job_file = claim(sp, WORKER, None)
    assert job_file is not None and job_file.lease is not None
    beat = heartbeat_name(job_file.id, job_file.lease.attempt)
    assert fs.exists(sp.layout.fd(State.LEASED), beat), "the claim writes the first heartbeat itself"
    if beat_first:
        heartbeat(sp, job_file.lease, 0)
    else:
        fs.unlink(sp.layout.fd(State.LEASED), beat)
    return job_file.lease


def _dead_worker(sp: Spool, name: str) -> None:
    """A worker whose liveness lock file exists and is free (it died)."""
    acquire(sp.layout.fd("locks"), worker_lock_name(name), blocking=True).release()


def test_a_new_lease_with_its_heartbeat_file_is_watched_without_reading_the_job(
    sp: Spool, clock: Clock, worker_lock: Lock, job_reads: list[str]
) -> None:
    job_id = sp.submit("echo", {"n": 1})
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    lease = _claim(sp, beat_first=True)
    job_reads.clear()
    clock.now += LEASE_WATCH_SECONDS
    coordinator.run_pass([(State.LEASED.value, job_name(job_id))])
    watch = coordinator.leases[job_id]
    assert (watch.attempt, watch.worker) == (lease.attempt, WORKER) and job_reads == []


def test_a_new_lease_without_a_heartbeat_file_is_read_once(
    sp: Spool, clock: Clock, worker_lock: Lock, job_reads: list[str]
) -> None:
    job_id = sp.submit("echo", {"n": 1})
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    lease = _claim(sp, beat_first=False)
    job_reads.clear()
    coordinator.run_pass()
    clock.now += 1.0
    coordinator.run_pass()
    assert coordinator.leases[job_id].attempt == lease.attempt and job_reads == [job_id]


def test_a_claim_that_died_after_its_heartbeat_and_rename_is_settled_as_a_spent_try(sp: Spool, clock: Clock) -> None:
    """The new order, killed between the rename into leased/ and the rewrite: the heartbeat names
    attempt 1 and a dead worker, the job file still says attempt 0 with no lease. expire(.., 1)
    is refused (attempt mismatch); the coordinator settles the job instead, on the same pass."""
    job_id = sp.submit("echo", {"n": 1}, max_tries=3)
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    _dead_worker(sp, "w-gone")
    write_dot_file(sp, State.LEASED, heartbeat_name(job_id, 1), heartbeat_content(0, "w-gone"))
    move_job(sp, job_id, State.PENDING, State.LEASED)
    coordinator.run_pass()
    state, job_file = sp.job(job_id)
    assert state is State.PENDING and (job_file.attempt, job_file.tries) == (1, 1)
    assert job_file.attempts[-1].outcome == "lost" and job_file.lease is None
    assert not (sp.root / "leased" / heartbeat_name(job_id, 1)).exists()
    assert job_id not in coordinator.leases


def test_a_claim_that_died_after_its_heartbeat_before_the_rename_changes_nothing(
    sp: Spool, clock: Clock, worker_lock: Lock
) -> None:
    job_id = sp.submit("echo", {"n": 1})
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    _dead_worker(sp, "w-gone")
    write_dot_file(sp, State.LEASED, heartbeat_name(job_id, 1), heartbeat_content(0, "w-gone"))
    coordinator.run_pass()
    assert sp.state(job_id) is State.PENDING and coordinator.leases == {}
    lease = _claim(sp, beat_first=True)  # the next claim of the same attempt writes over it
    clock.now += LEASE_WATCH_SECONDS
    coordinator.run_pass([(State.LEASED.value, job_name(job_id))])
    assert (lease.attempt, coordinator.leases[job_id].worker) == (1, WORKER)
    assert sp.state(job_id) is State.LEASED


@pytest.mark.parametrize("beat_first", [True, False])
def test_sparse_event_passes_expire_a_silent_lease_only_after_a_full_term(
    sp: Spool, clock: Clock, worker_lock: Lock, beat_first: bool
) -> None:
    job_id = sp.submit("echo", {"n": 1}, max_tries=3)
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    lease = _claim(sp, beat_first=beat_first)
    clock.now += LEASE_WATCH_SECONDS
    coordinator.run_pass([(State.LEASED.value, job_name(job_id))])
    first_seen = clock.now
    term = coordinator.lease_seconds
    for at in (term / 2, term - 0.01):  # a beat at half the term restarts it
        clock.now = first_seen + at
        if at == term / 2:
            heartbeat(sp, lease, 1)
        coordinator.run_pass([])
    assert sp.state(job_id) is State.LEASED
    changed = first_seen + term / 2
    clock.now = changed + term - 0.01
    coordinator.run_pass([])
    assert sp.state(job_id) is State.LEASED
    assert coordinator._next_wait() <= 0.02  # the term's end is a due time of its own
    clock.now = changed + term + 0.01
    coordinator.run_pass([])
    assert sp.state(job_id) is State.PENDING


def test_event_driven_lease_watches_coalesce(
    sp: Spool, clock: Clock, worker_lock: Lock, monkeypatch: pytest.MonkeyPatch
) -> None:
    watches: list[float] = []
    real = Coordinator._watch_leases

    def counting(self: Coordinator, now: float) -> None:
        watches.append(now)
        real(self, now)

    monkeypatch.setattr(Coordinator, "_watch_leases", counting)
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass([])
    ids = [sp.submit("echo", {"n": n}) for n in range(3)]
    watches.clear()
    for job_id in ids:
        _claim(sp, beat_first=True)
        clock.now += LEASE_WATCH_SECONDS / 4
        coordinator.run_pass([(State.LEASED.value, job_name(job_id))])
    assert len(watches) <= 1
    assert coordinator._next_wait() <= LEASE_WATCH_SECONDS + 1e-6
    clock.now += LEASE_WATCH_SECONDS
    coordinator.run_pass([])
    assert set(coordinator.leases) == set(ids)


def test_a_dead_workers_lease_is_expired_within_a_probe_and_each_lock_is_probed_once(
    sp: Spool, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[str] = []
    real_is_held = coordinator_module.is_held
    monkeypatch.setattr(coordinator_module, "is_held", lambda fd, name: probes.append(name) or real_is_held(fd, name))
    lock = acquire(sp.layout.fd("locks"), worker_lock_name(WORKER), blocking=True)
    ids = [sp.submit("echo", {"n": n}, max_tries=3) for n in range(3)]
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    for _ in ids:
        _claim(sp, beat_first=True)
    probes.clear()
    coordinator.run_pass()
    assert probes == [worker_lock_name(WORKER)]  # three leases, one worker: one probe
    assert coordinator._next_wait() <= WORKER_PROBE_SECONDS + 1e-6
    lock.release()
    clock.now += WORKER_PROBE_SECONDS
    coordinator.run_pass([])
    assert [sp.state(job_id) for job_id in ids] == [State.PENDING] * 3


def test_done_arrivals_ask_for_dependents_only_while_a_job_may_wait(
    sp: Spool, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(sp.ledger, "dependents", lambda job_id: asked.append(job_id) or [])
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass()
    coordinator.run_pass([(State.DONE.value, job_name("0" * 26))])
    assert asked == [] and not coordinator.may_wait
    coordinator.run_pass([(State.WAITING.value, job_name("1" * 26)), (State.DONE.value, job_name("0" * 26))])
    assert coordinator.may_wait and asked == ["0" * 26]


def test_a_lease_landing_in_a_reconcile_pass_still_calls_a_watch(sp: Spool, clock: Clock, worker_lock: Lock) -> None:
    """A reconcile pass replaces the pass's arrivals with the waiting jobs: the landed lease must
    still bring the next watch forward (LEASE_WATCH_SECONDS), not wait for the lease period."""
    job_id = sp.submit("echo", {"n": 1})
    coordinator = Coordinator(sp, clock=clock)
    coordinator.run_pass([])
    _claim(sp, beat_first=True)
    clock.now += LEASE_WATCH_SECONDS / 2
    coordinator.last_reconcile = -1e18
    coordinator.run_pass([(State.LEASED.value, job_name(job_id))])
    assert job_id not in coordinator.leases  # coalesced: not yet
    clock.now += LEASE_WATCH_SECONDS / 2 + 0.001
    coordinator.run_pass([])
    assert job_id in coordinator.leases
