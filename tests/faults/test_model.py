"""A stateful model of the promises, driven by hypothesis against a real spool in one process.

The model is what spool promises (README.md, "The guarantees"), kept as plain data: each job's
state, tries, attempt, reason, readiness, its one result, and which id each key belongs to.
Rules call the real transitions (``Spool.submit``, ``claim``/``complete``/``fail``/``expire``/
``release``/``cancel_leased``, ``admin.cancel``/``requeue``, ``chains.advance_waiting``/
``make_ready``) in any order, and the model predicts each answer. Concurrency is modelled as interleaved steps:

- two claimers racing for one job: a second claimer that reserved the same id from a stale
  ledger runs ``_claim_with_lock_held`` on a job someone already took, and must get nothing;
- a claim racing an expiry: ``expire`` names the attempt it saw, which may be older than the
  job's current one, and must then be refused;
- a completion racing a cancel: a cancel request on a leased job, then ``complete`` (the first
  result wins), or ``cancel_leased`` and a late ``complete`` (``LeaseLost``);
- a transition split at a crash point: a forked child runs it with ``SPOOL_CRASH_AT`` and
  SIGKILLs itself there; recovery is what the coordinator does: ``expire`` of the lease a dead
  worker left in leased/ (its liveness lock is freed), then ``resync`` under the job's lock and
  the tmp sweep; the model then holds the state the promises say recovery leaves.

After every step: every job in exactly one folder, the one its model state names; done iff a
result, with the first result's bytes; tries <= max_tries; attempt never decreases; each key
reserved for its job; the ledger equals the model; ``fsck`` finds no violation.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from spool import Spool

from spool.base import crash
from spool.admin import ParentDead, cancel, requeue
from spool.moves.chains import advance_waiting
from spool.moves.ready import make_ready
from spool.base.errors import AlreadyTerminal, LeaseLost
from spool.fsck import fsck, sweep_tmp
from spool.disk.fsio import fs
from spool.disk.layout import State, job_lock_name
from spool.disk.locks import acquire
from spool.moves.recovery import list_folders, resync_under_lock
from spool.moves.store import folders_of, read_job
from spool.moves.submission import lookup_key
from spool.moves.claiming import _claim_with_lock_held
from spool.moves.transitions import (
    Lease,
    cancel_leased,
    claim,
    complete,
    expire,
    fail,
    lease_status,
    release,
)

KEYS = [f"key-{n}" for n in range(6)]
WORKERS = ["w1", "w2"]
MAX_JOBS = 6  # few jobs, so the steps pile up on each: more leases, races and crashes per job
_EXIT_OK, _EXIT_LEASE_LOST, _EXIT_ERROR = 0, 10, 11


@dataclass
class MJob:
    """What the promises say about one job."""

    id: str
    key: str | None
    max_tries: int
    deps: tuple[str, ...]
    state: State
    ready: bool
    tries: int = 0
    attempt: int = 0
    reason: str | None = None
    skipped_because: str | None = None
    cancel_requested: bool = False
    result: bytes | None = None


@dataclass
class Model:
    jobs: dict[str, MJob] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    leases: list[Lease] = field(default_factory=list)  # every lease ever granted, current or stale

    def current(self, lease: Lease) -> bool:
        job = self.jobs[lease.job_id]
        return job.state is State.LEASED and job.attempt == lease.attempt

    def ready_ids(self) -> set[str]:
        return {j.id for j in self.jobs.values() if j.state is State.PENDING and j.ready}

    # The model's side of each transition: what the promises (and the documented code) say happens.

    def claimed(self, job_id: str, worker: str) -> None:
        job = self.jobs[job_id]
        job.attempt += 1
        job.tries += 1
        job.state, job.ready = State.LEASED, False
        self.leases.append(Lease(job_id, worker, job.attempt))

    def completed(self, job_id: str, value: bytes) -> None:
        job = self.jobs[job_id]
        job.state, job.result, job.cancel_requested = State.DONE, value, False

    def failed(self, job_id: str, reject: bool) -> State:
        job = self.jobs[job_id]
        job.cancel_requested = False
        if reject or job.tries >= job.max_tries:
            job.state, job.reason = State.DEAD, "failed"
        else:
            job.state, job.ready = State.PENDING, False  # after a backoff
        return job.state

    def expired(self, job_id: str) -> State:
        job = self.jobs[job_id]
        if job.cancel_requested:
            job.state, job.reason = State.DEAD, "cancelled"
        elif job.tries >= job.max_tries:
            job.state, job.reason = State.DEAD, "expired"
        else:
            job.state, job.ready = State.PENDING, False
        job.cancel_requested = False
        return job.state

    def buried(self, job_id: str, reason: str, because: str | None = None) -> None:
        job = self.jobs[job_id]
        job.state, job.reason, job.ready, job.cancel_requested = State.DEAD, reason, False, False
        job.skipped_because = because

    def requeued(self, job_id: str) -> None:
        job = self.jobs[job_id]
        waiting = any(self.jobs[dep].state is not State.DONE for dep in job.deps)
        job.state = State.WAITING if waiting else State.PENDING
        job.ready = not waiting
        job.tries, job.reason, job.skipped_because = 0, None, None
        for child in self.jobs.values():
            first = self.jobs.get(child.skipped_because or "")
            if (
                job_id in child.deps
                and child.state is State.DEAD
                and child.reason == "skipped"
                and (child.skipped_because == job_id or (first is not None and first.state is not State.DEAD))
                and not self.parent_dead(child.id)  # refused: it stays skipped
            ):
                self.requeued(child.id)

    def parent_dead(self, job_id: str) -> bool:
        """A requeue refuses a job while one of its parents is dead (it would be skipped again)."""
        return any(self.jobs[dep].state is State.DEAD for dep in self.jobs[job_id].deps if dep in self.jobs)

    def advance(self, job_id: str) -> State | None:
        job = self.jobs[job_id]
        if job.state is not State.WAITING:
            return None
        for dep in job.deps:
            dep_state = self.jobs[dep].state
            if dep_state is State.DONE:
                continue
            if dep_state is State.DEAD:
                self.buried(job_id, "skipped", because=dep)
                return State.DEAD
            return None
        job.state, job.ready = State.PENDING, True
        return State.PENDING


def _event(text: str) -> None:
    """Count an outcome in --hypothesis-show-statistics (a no-op outside hypothesis)."""
    try:
        event(text)
    except InvalidArgument:
        pass


def _pick(items: list, index: int):  # type: ignore[no-untyped-def]
    return items[index % len(items)]


class SpoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # tmpfs when there is one: this test is about the moves' logic (the power-loss tests are
        # about durability), and a real filesystem without fsync's wait runs three times the steps.
        self.dir = tempfile.mkdtemp(prefix="spool-model-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        self.root = os.path.join(self.dir, "spool")
        self.sp = Spool.init(self.root, environ={})
        self.model = Model()
        self.seen_attempts: dict[str, int] = {}
        self.values = 0
        self.steps = 0

    def teardown(self) -> None:
        _event(f"steps {self.steps // 10 * 10}+, leases {len(self.model.leases) // 3 * 3}+")
        self.sp.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _lease(self, index: int) -> Lease:
        """Three times in four a lease that holds; else a stale one, of a job leased again if any."""
        leases = self.model.leases
        current = [lease for lease in leases if self.model.current(lease)]
        if current and index % 4:
            return _pick(current, index // 4)
        stale = [lease for lease in leases if not self.model.current(lease)]
        retaken = [lease for lease in stale if self.model.jobs[lease.job_id].state is State.LEASED]
        return _pick(retaken or stale or leases, index // 4)

    def _value(self) -> bytes:
        self.values += 1
        return json.dumps({"value": self.values}).encode()

    # -- producing ---------------------------------------------------------------------------

    @initialize(tries=st.lists(st.integers(1, 3), min_size=1, max_size=3))
    def some_jobs(self, tries: list[int]) -> None:
        for max_tries in tries:
            self._add(self.sp.submit("echo", {}, max_tries=max_tries), None, max_tries, ())

    @precondition(lambda self: len(self.model.jobs) < MAX_JOBS)
    @rule(
        key=st.one_of(st.none(), st.sampled_from(KEYS)),
        max_tries=st.integers(1, 3),
        deps=st.lists(st.integers(0, 100), max_size=2),
    )
    def submit(self, key: str | None, max_tries: int, deps: list[int]) -> None:
        ids = list(self.model.jobs)
        dep_ids = tuple(dict.fromkeys(_pick(ids, d) for d in deps)) if ids else ()
        job_id = self.sp.submit("echo", {"n": len(ids)}, key=key, max_tries=max_tries, depends_on=dep_ids)
        if key is not None and key in self.model.keys:
            assert job_id == self.model.keys[key], "a key seen before must return the existing id"
            return
        self._add(job_id, key, max_tries, dep_ids)

    @precondition(lambda self: len(self.model.jobs) < MAX_JOBS)
    @rule(
        members=st.lists(
            st.tuples(st.one_of(st.none(), st.sampled_from(KEYS)), st.integers(1, 3)), min_size=1, max_size=3
        ),
        deps=st.lists(st.integers(0, 100), max_size=2),
    )
    def submit_batch(self, members: list[tuple[str | None, int]], deps: list[int]) -> None:
        """submit_many: in input order, a key seen before (or repeated in the batch) answers with its one job."""
        ids = list(self.model.jobs)
        dep_ids = tuple(dict.fromkeys(_pick(ids, d) for d in deps)) if ids else ()
        specs = [
            self.sp.spec("echo", {"n": len(ids) + n}, key=key, max_tries=max_tries, depends_on=dep_ids)
            for n, (key, max_tries) in enumerate(members)
        ]
        answers = self.sp.submit_many(specs)
        assert len(answers) == len(members)
        for (key, max_tries), answer in zip(members, answers):
            if key is not None and key in self.model.keys:
                assert answer.id == self.model.keys[key] and not answer.created, (key, answer)
                continue
            assert answer.created
            self._add(answer.id, key, max_tries, dep_ids)

    def _add(self, job_id: str, key: str | None, max_tries: int, dep_ids: tuple[str, ...]) -> None:
        assert job_id not in self.model.jobs
        waiting = any(self.model.jobs[dep].state is not State.DONE for dep in dep_ids)
        self.model.jobs[job_id] = MJob(
            job_id, key, max_tries, dep_ids, State.WAITING if waiting else State.PENDING, ready=not waiting
        )
        if key is not None:
            self.model.keys[key] = job_id

    # -- the worker's moves ------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), count=st.integers(1, 3))
    def claim(self, worker: str, count: int) -> None:
        for _ in range(count):
            self._claim(worker)

    def _claim(self, worker: str) -> Lease | None:
        ready = self.model.ready_ids()
        claimed = claim(self.sp, worker, None)
        if not ready:
            assert claimed is None, f"claimed {claimed and claimed.id} but nothing was ready"
            return None
        assert claimed is not None, f"nothing claimed though {sorted(ready)} are ready"
        assert claimed.id in ready, f"claimed {claimed.id}, which is not ready"
        self.model.claimed(claimed.id, worker)
        assert claimed.attempt == self.model.jobs[claimed.id].attempt
        return self.model.leases[-1]

    @rule(worker=st.sampled_from(WORKERS), succeed=st.booleans())
    def worker_runs_one(self, worker: str, succeed: bool) -> None:
        """The happy path in one step: claim, then complete or fail (hypothesis' swarm testing
        turns some rules off per example; this keeps leases and results coming when ``claim`` is off)."""
        lease = self._claim(worker)
        if lease is None:
            return
        if succeed:
            value = self._value()
            complete(self.sp, lease, value)
            self.model.completed(lease.job_id, value)
        else:
            assert fail(self.sp, lease, "boom") is self.model.failed(lease.job_id, reject=False)

    @precondition(lambda self: any(j.state is State.LEASED and j.tries < j.max_tries for j in self.model.jobs.values()))
    @rule(index=st.integers(0, 100))
    def lease_expires_and_another_worker_takes_it(self, index: int) -> None:
        """The seed's slow worker: its lease expires, the job backs off, becomes ready and is claimed
        again, while the first worker still holds its (now stale) lease."""
        job = _pick([j for j in self.model.jobs.values() if j.state is State.LEASED and j.tries < j.max_tries], index)
        assert expire(self.sp, job.id, job.attempt, "no heartbeat") is self.model.expired(job.id)
        if job.state is State.PENDING:
            assert make_ready(self.sp, job.id)
            job.ready = True
            self._claim(WORKERS[index % 2])

    @precondition(lambda self: any(j.state is not State.PENDING or not j.ready for j in self.model.jobs.values()))
    @rule(index=st.integers(0, 100))
    def second_claimer_loses(self, index: int) -> None:
        """A claimer whose (stale) ledger row pointed at a job someone else already took or that is not ready."""
        job_id = _pick(
            sorted(j.id for j in self.model.jobs.values() if j.state is not State.PENDING or not j.ready), index
        )
        lock = acquire(self.sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
        assert lock is not None
        with lock:
            assert _claim_with_lock_held(self.sp, job_id, "racer", time.time(), None) is None

    @precondition(lambda self: self.model.leases)
    @rule(index=st.integers(0, 100))
    def complete(self, index: int) -> None:
        lease = self._lease(index)
        value = self._value()
        if self.model.current(lease):
            cancel = " with a cancel request" if self.model.jobs[lease.job_id].cancel_requested else ""
            _event("complete: current lease" + cancel)
            complete(self.sp, lease, value)
            self.model.completed(lease.job_id, value)
        else:
            _event(f"complete: stale lease, job {self.model.jobs[lease.job_id].state.value}")
            with _raises(LeaseLost):
                complete(self.sp, lease, value)

    @precondition(lambda self: self.model.leases)
    @rule(index=st.integers(0, 100), reject=st.booleans())
    def fail(self, index: int, reject: bool) -> None:
        lease = self._lease(index)
        if self.model.current(lease):
            assert fail(self.sp, lease, "boom", reject=reject) is self.model.failed(lease.job_id, reject)
        else:
            with _raises(LeaseLost):
                fail(self.sp, lease, "boom", reject=reject)

    @precondition(lambda self: self.model.leases)
    @rule(index=st.integers(0, 100))
    def release(self, index: int) -> None:
        lease = self._lease(index)
        if self.model.current(lease):
            release(self.sp, lease)
            job = self.model.jobs[lease.job_id]
            job.state, job.ready, job.tries, job.cancel_requested = State.PENDING, True, max(job.tries - 1, 0), False
        else:
            with _raises(LeaseLost):
                release(self.sp, lease)

    @precondition(lambda self: self.model.leases)
    @rule(index=st.integers(0, 100))
    def cancel_leased(self, index: int) -> None:
        lease = self._lease(index)
        if self.model.current(lease):
            cancel_leased(self.sp, lease)
            self.model.buried(lease.job_id, "cancelled")
        else:
            with _raises(LeaseLost):
                cancel_leased(self.sp, lease)

    # -- the coordinator's moves -------------------------------------------------------------

    @precondition(lambda self: self.model.jobs)
    @rule(index=st.integers(0, 100), older=st.integers(0, 2))
    def expire(self, index: int, older: int) -> None:
        """``older`` > 0: the coordinator saw an earlier attempt, and the job was claimed again since."""
        job = _pick(list(self.model.jobs.values()), index)
        attempt = job.attempt - older
        _event(f"expire: {job.state.value}, attempt -{older}")
        if job.state is State.LEASED and older == 0:
            assert expire(self.sp, job.id, attempt, "test expiry") is self.model.expired(job.id)
        else:
            assert expire(self.sp, job.id, attempt, "test expiry") is None

    @precondition(lambda self: self.model.jobs)
    @rule(index=st.integers(0, 100))
    def advance_waiting(self, index: int) -> None:
        job = _pick(list(self.model.jobs.values()), index)
        _event(f"advance_waiting: {job.state.value}")
        assert advance_waiting(self.sp, job.id) is self.model.advance(job.id)

    @precondition(lambda self: self.model.jobs)
    @rule(index=st.integers(0, 100))
    def make_ready(self, index: int) -> None:
        job = _pick(list(self.model.jobs.values()), index)
        expected = job.state is State.PENDING
        assert make_ready(self.sp, job.id) is expected
        if expected:
            job.ready = True

    # -- a person's moves --------------------------------------------------------------------

    @precondition(lambda self: self.model.jobs)
    @rule(index=st.integers(0, 100))
    def cancel(self, index: int) -> None:
        job = _pick(list(self.model.jobs.values()), index)
        if job.state.terminal:
            with _raises(AlreadyTerminal):
                cancel(self.sp, job.id)
        elif job.state is State.LEASED:
            assert cancel(self.sp, job.id) == "requested"
            job.cancel_requested = True
        else:
            assert cancel(self.sp, job.id) == "cancelled"
            self.model.buried(job.id, "cancelled")

    @precondition(lambda self: self.model.jobs)
    @rule(index=st.integers(0, 100))
    def requeue(self, index: int) -> None:
        job = _pick(list(self.model.jobs.values()), index)
        if job.state is not State.DEAD:
            with _raises(AlreadyTerminal):
                requeue(self.sp, job.id)
            return
        if self.model.parent_dead(job.id):
            with _raises(ParentDead):
                requeue(self.sp, job.id)
            return
        requeue(self.sp, job.id)
        self.model.requeued(job.id)

    # -- a transition split at a crash point -------------------------------------------------

    @precondition(lambda self: len(self.model.jobs) < MAX_JOBS)
    @rule(
        step=st.sampled_from(["after-key-check", "after-key", "after-commit", "after-submit"]),
        max_tries=st.integers(1, 3),
    )
    def crash_submit(self, step: str, max_tries: int) -> None:
        self._crash_submit(f"submit:{step}", step, max_tries)

    @precondition(lambda self: len(self.model.jobs) < MAX_JOBS - 1)
    @rule(
        step=st.sampled_from(["batch-after-keys", "batch-after-commit", "batch-after-submit"]),
        max_tries=st.integers(1, 3),
    )
    def crash_batch(self, step: str, max_tries: int) -> None:
        """submit_many of two new keys (and a repeat), killed before, between or after its renames."""
        keys = [f"crash-{len(self.model.jobs)}-{step}-{n}" for n in range(2)]

        def specs(sp: Spool) -> list[dict[str, object]]:
            return [sp.spec("echo", {"crash": step}, key=key, max_tries=max_tries) for key in [*keys, keys[0]]]

        self._in_child(f"submit:{step}", True, lambda sp: sp.submit_many(specs(sp)))
        again = self.sp.submit_many(specs(self.sp))  # the user's retry: each key finds its job or makes it
        renamed = {"batch-after-keys": 0, "batch-after-commit": 1, "batch-after-submit": 2}[step]
        assert [a.created for a in again] == [n >= renamed for n in range(2)] + [False], f"{step}: {again}"
        for key, answer in zip(keys, again):
            self._recover(answer.id)
            self._add(answer.id, key, max_tries, ())

    @rule(step=st.sampled_from(["claim-after-rename", "after-claim"]))
    def crash_claim(self, step: str) -> None:
        self._crash_claim(f"worker:{step}", step)

    @rule(step=st.sampled_from(["claim-after-reserve", "claim-after-heartbeat"]))
    def crash_claim_before_rename(self, step: str) -> None:
        """A claim killed after its reservation (and its lease's first heartbeat), before its
        rename: nothing was taken and no try spent; the job's reserved ledger row is put back by
        the recovery's resync."""
        ready = self.model.ready_ids()
        self._in_child(f"worker:{step}", bool(ready), lambda sp: claim(sp, "crasher", None))
        assert all(folders_of(self.sp, job_id) == [State.PENDING] for job_id in ready), "the claim took a job"
        for job_id in ready:
            self._recover(job_id)

    @precondition(lambda self: self.model.leases)
    @rule(
        step=st.sampled_from(
            [
                "complete-after-stage",
                "after-result",
                "complete-after-move",
                "fail-after-rename",
                "bury-after-rename",
                "after-fail",
                "release-after-rename",
            ]
        ),
        index=st.integers(0, 100),
    )
    def crash_lease_move(self, step: str, index: int) -> None:
        self._crash_lease_move(f"worker:{step}", step, self._lease(index))

    @precondition(lambda self: self.model.jobs)
    @rule(step=st.sampled_from(["expire-after-rename", "after-expire"]), index=st.integers(0, 100))
    def crash_expire(self, step: str, index: int) -> None:
        self._crash_expire(f"coordinator:{step}", step, _pick(list(self.model.jobs.values()), index))

    def _crash_submit(self, point: str, step: str, max_tries: int) -> None:
        key = f"crash-{len(self.model.jobs)}-{step}"
        self._in_child(point, True, lambda sp: sp.submit("echo", {"crash": step}, key=key, max_tries=max_tries))
        # Recovery is the user's retry: the key finds the committed job, or takes over a reservation.
        again = self.sp.submit_spec({"task": "echo", "args": {"crash": step}, "key": key, "max_tries": max_tries})
        assert again.created is (step in ("after-key-check", "after-key")), f"{step}: created={again.created}"
        self._recover(again.id)
        self._add(again.id, key, max_tries, ())

    def _crash_claim(self, point: str, step: str) -> None:
        ready = self.model.ready_ids()
        self._in_child(point, bool(ready), lambda sp: claim(sp, "crasher", None))
        if not ready:
            return
        taken = [job_id for job_id in ready if folders_of(self.sp, job_id) != [State.PENDING]]
        assert len(taken) == 1, f"the crashed claim took {taken}"
        job_id = taken[0]
        self._recover(job_id)
        if step == "after-claim":
            self.model.claimed(job_id, "crasher")  # a lease held by a dead worker: it expires later
            return
        # A claim that died before recording its lease: the try is spent (it was counted, fsync'd, at claim).
        job = self.model.jobs[job_id]
        job.attempt += 1
        job.tries += 1
        if job.tries >= job.max_tries:
            self.model.buried(job_id, "expired")
        else:
            job.state, job.ready = State.PENDING, False

    def _crash_lease_move(self, point: str, step: str, lease: Lease) -> None:
        """The worker holding ``lease`` dies at ``step``; the coordinator, seeing its lock freed,
        expires the lease it left in leased/ (if any), then resyncs the job."""
        current = self.model.current(lease)
        job = self.model.jobs[lease.job_id]
        value = self._value()
        if step in ("complete-after-stage", "after-result", "complete-after-move"):
            reached = current or step == "complete-after-stage"
            self._in_child(point, reached, lambda sp: complete(sp, lease, value))
        elif step == "release-after-rename":
            reached = current
            self._in_child(point, reached, lambda sp: release(sp, lease))
        else:  # fail-after-rename (a retry), bury-after-rename (rejected: to dead), after-fail
            reject = step == "bury-after-rename"
            reached = current and (reject or job.tries < job.max_tries or step == "after-fail")
            self._in_child(point, reached, lambda sp: fail(sp, lease, "boom", reject=reject))
        expired = self._worker_died(lease)
        self._recover(lease.job_id)
        if not current:
            assert expired is None
            return
        if step == "complete-after-stage":
            assert expired is self.model.expired(lease.job_id)  # nothing changed before: a plain expiry
        elif step in ("after-result", "complete-after-move"):
            self.model.completed(lease.job_id, value)  # the result is the commit point of done
        elif step == "bury-after-rename":
            self.model.failed(lease.job_id, reject=True)  # the dead copy, whole, beats the leased one
        elif step in ("fail-after-rename", "release-after-rename") and reached:
            # Renamed to pending/ with the lease still in the file: recovery closes the attempt
            # as lost and the job is ready again, its try spent; on a last try (only a release
            # gets there) the try is given back, or the next claim would run it past max_tries.
            job.state, job.ready, job.cancel_requested = State.PENDING, True, False
            job.tries = min(job.tries, job.max_tries - 1)
        else:
            self.model.failed(lease.job_id, reject=False)

    def _worker_died(self, lease: Lease) -> State | None:
        """The coordinator's move when a worker's liveness lock is freed: expire the lease it held."""
        try:
            left = read_job(self.sp, State.LEASED, lease.job_id)
        except FileNotFoundError:
            return None
        if (left.lease.worker if left.lease else None) != lease.worker or left.attempt != lease.attempt:
            # Another lease: not the dead one's. The model reuses worker names (w1, w2), where real
            # workers are unique per process: a later lease under the same name is another worker.
            return None
        return expire(self.sp, lease.job_id, left.attempt, "worker died (its lock was freed)")

    def _crash_expire(self, point: str, step: str, job: MJob) -> None:
        current = job.state is State.LEASED
        retry = current and not job.cancel_requested and job.tries < job.max_tries
        reached = retry if step == "expire-after-rename" else current
        attempt = job.attempt
        self._in_child(point, reached, lambda sp: expire(sp, job.id, attempt, "crash test"))
        self._recover(job.id)
        if not current:
            return
        if step == "expire-after-rename" and reached:
            job.state, job.ready, job.cancel_requested = State.PENDING, True, False
        else:
            self.model.expired(job.id)

    def _in_child(self, point: str, reached: bool, action) -> None:  # type: ignore[no-untyped-def]
        """Run ``action`` in a forked child armed with SPOOL_CRASH_AT=point; check it died there iff ``reached``."""
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: its own fds and ledger connection; never returns
            code = _EXIT_ERROR
            try:
                crash.arm(point.split(":")[0], {"SPOOL_CRASH_AT": point})
                action(Spool(self.root, environ={}))
                code = _EXIT_OK
            except LeaseLost:
                code = _EXIT_LEASE_LOST
            except BaseException:  # noqa: BLE001 - reported through the exit status
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        _event(f"{point} {'crashed' if killed else 'not reached'}")
        assert killed is reached, f"{point}: expected {'a crash' if reached else 'no crash'}, got status {status}"
        if not killed:
            assert os.WEXITSTATUS(status) in (_EXIT_OK, _EXIT_LEASE_LOST), f"{point}: the child raised"

    def _recover(self, job_id: str) -> None:
        """What the coordinator does after a crash: resync the job under its lock, sweep tmp/."""
        assert resync_under_lock(self.sp, job_id, blocking=True)
        sweep_tmp(self.sp)

    # -- the promises, after every step ------------------------------------------------------

    @invariant()
    def promises_hold(self) -> None:
        model, sp = self.model, self.sp
        self.steps += 1
        listing = list_folders(sp)
        assert not listing.drops and not listing.strays
        assert set(listing.jobs) == set(model.jobs), "jobs appeared or vanished"
        results = set(fs.list_dir(sp.layout.fd("results")))
        assert results == {f"{j.id}.json" for j in model.jobs.values() if j.state is State.DONE}
        for job in model.jobs.values():
            assert listing.jobs[job.id] == [job.state], f"{job.id}: in {listing.jobs[job.id]}, model {job.state}"
            job_file = read_job(sp, job.state, job.id)
            assert (job_file.tries, job_file.attempt) == (job.tries, job.attempt), (
                f"{job.id}: tries/attempt {job_file.tries}/{job_file.attempt}, model {job.tries}/{job.attempt}"
            )
            assert job_file.tries <= job_file.job.max_tries
            assert job_file.attempt >= self.seen_attempts.get(job.id, 0), "attempt went backwards"
            self.seen_attempts[job.id] = job_file.attempt
            if job.state is State.DEAD:
                assert job_file.reason == job.reason, f"{job.id}: reason {job_file.reason}, model {job.reason}"
            if job.state is State.DONE:
                assert fs.read_file(sp.layout.fd("results"), f"{job.id}.json", 1 << 20) == job.result
            if job.state is State.LEASED:
                cancel_file = fs.exists(sp.layout.fd(State.LEASED), f".{job.id}.cancel")
                assert cancel_file is job.cancel_requested, f"{job.id}: cancel request {cancel_file}"
        for key, job_id in model.keys.items():
            assert lookup_key(sp, key) == job_id
        assert sp.ledger.states() == {j.id: j.state.value for j in model.jobs.values()}
        for job in model.jobs.values():
            if job.state is State.PENDING:
                row = sp.ledger.row(job.id)
                assert row is not None and bool(row["ready"]) is job.ready, f"{job.id}: ledger readiness"
        report = fsck(sp)
        assert not report.violations, report.violations


class _raises:
    """Like pytest.raises, without pytest's fixtures (hypothesis runs rules outside them)."""

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: object) -> bool:
        assert kind is not None, f"expected {self.kind.__name__}"
        return issubclass(kind, self.kind)


SpoolMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestSpoolModel = SpoolMachine.TestCase


@pytest.fixture
def machine() -> Iterator[SpoolMachine]:
    made = SpoolMachine()
    yield made
    made.teardown()


def _steps(machine: SpoolMachine, *steps: tuple[str, dict[str, object]]) -> None:
    """Run rules by name, checking the promises after each, as hypothesis does."""
    machine.promises_hold()
    for name, arguments in steps:
        getattr(machine, name)(**arguments)
        machine.promises_hold()


SUBMIT: tuple[str, dict[str, object]] = ("submit", {"key": None, "max_tries": 3, "deps": []})


def test_two_claimers_race_for_one_job(machine: SpoolMachine) -> None:
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("second_claimer_loses", {"index": 0}),
        ("claim", {"worker": "w2", "count": 1}),
    )
    assert [lease.worker for lease in machine.model.leases] == ["w1"]


def test_an_expiry_of_an_older_attempt_is_refused(machine: SpoolMachine) -> None:
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("expire", {"index": 0, "older": 0}),
        ("make_ready", {"index": 0}),
        ("claim", {"worker": "w2", "count": 1}),
        ("expire", {"index": 0, "older": 1}),
        ("complete", {"index": 1}),
    )
    assert machine.model.jobs[machine.model.leases[-1].job_id].state is State.DONE


def test_a_completion_racing_a_cancel_request_wins(machine: SpoolMachine) -> None:
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("cancel", {"index": 0}),
        ("complete", {"index": 1}),
        ("cancel", {"index": 0}),
    )
    assert [job.state for job in machine.model.jobs.values()] == [State.DONE]


def test_a_late_completion_after_cancel_leased_is_refused(machine: SpoolMachine) -> None:
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("cancel", {"index": 0}),
        ("cancel_leased", {"index": 1}),
        ("complete", {"index": 0}),
        ("requeue", {"index": 0}),
        ("claim", {"worker": "w2", "count": 1}),
        ("complete", {"index": 0}),
        ("complete", {"index": 1}),
    )
    assert [(job.state, job.attempt) for job in machine.model.jobs.values()] == [(State.DONE, 2)]


@pytest.mark.parametrize("move", ["complete", "fail", "release", "cancel_leased"])
def test_a_slow_workers_late_move_is_refused(machine: SpoolMachine, move: str) -> None:
    """Seed checklist: a slow worker finishes after its lease expired while a second worker holds the job."""
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("lease_expires_and_another_worker_takes_it", {"index": 1}),
        (move, {"index": 0, **({"reject": False} if move == "fail" else {})}),
        ("complete", {"index": 1}),
    )
    first, second = machine.model.leases
    assert (first.attempt, second.attempt) == (1, 2)
    assert machine.model.jobs[first.job_id].state is State.DONE
    assert machine.sp.result(first.job_id) == {"value": 1 + (move == "complete")}


@pytest.mark.parametrize("step", ["batch-after-keys", "batch-after-commit", "batch-after-submit"])
def test_a_batch_split_at_its_crash_point_then_run(machine: SpoolMachine, step: str) -> None:
    _steps(
        machine,
        SUBMIT,
        ("submit_batch", {"members": [("key-0", 1), (None, 2), ("key-0", 3)], "deps": [0]}),
        ("crash_batch", {"step": step, "max_tries": 1}),
        ("claim", {"worker": "w1", "count": 3}),
        ("complete", {"index": 0}),
        ("complete", {"index": 1}),
        ("complete", {"index": 2}),
    )
    assert len(machine.model.jobs) == 5 and len(machine.model.keys) == 3


@pytest.mark.parametrize("step", ["claim-after-rename", "after-claim"])
def test_a_claim_split_at_its_crash_point(machine: SpoolMachine, step: str) -> None:
    _steps(
        machine,
        SUBMIT,
        ("crash_claim", {"step": step}),
        ("expire", {"index": 0, "older": 0}),
        ("make_ready", {"index": 0}),
        ("claim", {"worker": "w1", "count": 1}),
        ("complete", {"index": 1}),
    )


@pytest.mark.parametrize("step", ["claim-after-reserve", "claim-after-heartbeat"])
def test_a_claim_killed_before_its_rename(machine: SpoolMachine, step: str) -> None:
    _steps(
        machine,
        SUBMIT,
        ("crash_claim_before_rename", {"step": step}),
        ("claim", {"worker": "w1", "count": 1}),
        ("complete", {"index": 0}),
    )


@pytest.mark.parametrize(
    "step",
    [
        "complete-after-stage",
        "after-result",
        "complete-after-move",
        "fail-after-rename",
        "bury-after-rename",
        "after-fail",
        "release-after-rename",
    ],
)
def test_a_worker_move_split_at_its_crash_point(machine: SpoolMachine, step: str) -> None:
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("crash_lease_move", {"step": step, "index": 1}),
        ("crash_lease_move", {"step": step, "index": 0}),
        ("make_ready", {"index": 0}),
        ("claim", {"worker": "w2", "count": 1}),
        ("complete", {"index": 1}),
    )


@pytest.mark.parametrize("step", ["expire-after-rename", "after-expire"])
@pytest.mark.parametrize("max_tries", [1, 3])
def test_an_expiry_split_at_its_crash_point(machine: SpoolMachine, step: str, max_tries: int) -> None:
    _steps(
        machine,
        ("submit", {"key": None, "max_tries": max_tries, "deps": []}),
        ("claim", {"worker": "w1", "count": 1}),
        ("crash_expire", {"step": step, "index": 0}),
        ("make_ready", {"index": 0}),
        ("claim", {"worker": "w2", "count": 1}),
        ("complete", {"index": 1}),
    )


def test_every_modelled_crash_point_is_a_real_one() -> None:
    modelled = {
        "worker:claim-after-rename",
        "worker:after-claim",
        "worker:complete-after-stage",
        "worker:after-result",
        "worker:complete-after-move",
        "worker:fail-after-rename",
        "worker:after-fail",
        "worker:bury-after-rename",
        "worker:release-after-rename",
        "coordinator:expire-after-rename",
        "coordinator:after-expire",
        "submit:after-key-check",
        "submit:after-key",
        "submit:after-commit",
        "submit:after-submit",
        "submit:batch-after-keys",
        "submit:batch-after-commit",
        "submit:batch-after-submit",
    }
    assert modelled <= set(crash.all_points())


def test_a_cancel_request_dies_with_its_lease_after_a_crash(machine: SpoolMachine) -> None:
    """Found by the model: fail crashed after its rename left the attempt's cancel request in
    leased/, and the job's next attempt was cancelled by it at its first heartbeat."""
    _steps(
        machine,
        SUBMIT,
        ("claim", {"worker": "w1", "count": 1}),
        ("cancel", {"index": 0}),
        ("crash_lease_move", {"step": "fail-after-rename", "index": 0}),
        ("claim", {"worker": "w2", "count": 1}),
    )
    assert lease_status(machine.sp, machine.model.leases[-1]) == "held"


@pytest.mark.parametrize("point", ["worker:complete-after-move", "worker:bury-after-rename"])
def test_an_expiry_after_a_move_out_of_leased_crashed_half_way(machine: SpoolMachine, point: str) -> None:
    """Found by the chaos run: a worker SIGKILLed between publishing the job's done (or dead) file
    and removing its leased/ copy leaves it in two folders; the coordinator, seeing the worker's
    lock freed, expires the lease, and the expiry's own move met EEXIST and stopped the coordinator."""
    _steps(machine, SUBMIT, ("claim", {"worker": "w1", "count": 1}))
    lease = machine.model.leases[-1]
    value = machine._value()
    if point == "worker:complete-after-move":
        machine._in_child(point, True, lambda sp: complete(sp, lease, value))
    else:
        machine._in_child(point, True, lambda sp: fail(sp, lease, "boom", reject=True))
    assert len(folders_of(machine.sp, lease.job_id)) == 2  # the half-way state under test
    assert expire(machine.sp, lease.job_id, lease.attempt, "worker died (its lock was freed)") is None
    sweep_tmp(machine.sp)  # the dead worker's staged file, as the coordinator's sweep does
    if point == "worker:complete-after-move":
        machine.model.completed(lease.job_id, value)
    else:
        machine.model.failed(lease.job_id, reject=True)
    machine.promises_hold()


def test_a_release_interrupted_on_a_last_try_gives_the_try_back(machine: SpoolMachine) -> None:
    """Found by the model (issue 7): a release killed after its rename on a job's last try left
    it claimable with no tries left, and the next claim ran it at tries 2/1."""
    _steps(
        machine,
        ("some_jobs", {"tries": [1]}),
        ("crash_claim", {"step": "after-claim"}),
        ("crash_lease_move", {"index": 0, "step": "release-after-rename"}),
        ("advance_waiting", {"index": 0}),
        ("worker_runs_one", {"succeed": False, "worker": "w1"}),
    )
