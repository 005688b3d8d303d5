"""The crash matrix: every crash point, killed there, recovered, then the promises checked on disk.

For each point ``spool.base.crash.all_points()`` lists there is at least one scenario (``SCENARIOS``);
a point without one fails the suite, so a new crash point needs a scenario here. A scenario:

1. ``setup`` (in the test process): the spool before the crash, plus two bystanders, a pending
   job of a task no worker here runs and a done job, which must come out byte for byte the same;
2. ``act`` in a forked child armed with ``SPOOL_CRASH_AT=<point>``: the transitions that reach
   the point (a submit, a worker's claim/complete/fail, a coordinator pass). The child must die
   of SIGKILL there; a child that returns never reached the point, and the test fails;
3. ``after_crash`` then ``retry`` (in the test process): a look at (or an fsck --repair of) what
   the crash left, then what the crashed process's client does, e.g. submit the same key again,
   since it was told nothing;
4. recovery as a supervisor would restart it (the ``recover`` fixture: a coordinator and a
   worker, in-process, on short lease and backoff terms) until every job is done or dead;
5. the end state: the jobs' outcomes are the ones ``expect`` names, each job in one folder, done
   iff one whole result, one 'done' attempt, tries within max_tries, tmp/ empty, fsck clean.

The child opens its own ``Spool`` after the fork and the test process opens one only after the
child is gone: an SQLite connection must never cross a fork.

The last tests crash real ``spool`` processes through the command line (``SPOOL_CRASH_AT=...``),
among them every point of submit (``SUBMIT_POINTS``): this file is the one harness for those.
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spool import Spool, queues

from spool.base import crash
from spool.fsck import fsck, writer_alive
from spool.disk.layout import State, job_name, key_name, result_name, worker_lock_name
from spool.disk.locks import acquire
from spool.runner.coordinator import Coordinator
from spool.admin import purge
from spool.disk.fsio import fs
from spool.moves.claiming import claim_held
from spool.moves.fence import start_queued
from spool.moves.group import Finished, claim_many, complete_many
from spool.moves.transitions import Lease, claim, complete, fail, release
from support import wait_until

Ctx = dict[str, Any]
CRASHED_WORKER = "w-crash"


def _nothing(sp: Spool, ctx: Ctx) -> None:
    pass


@dataclass(frozen=True)
class Scenario:
    name: str
    act: Callable[[Spool, Ctx], None]
    setup: Callable[[Spool, Ctx], None] = _nothing
    retry: Callable[[Spool, Ctx], None] = _nothing
    after_crash: Callable[[Spool, Ctx], None] = _nothing  # a look (or a repair) before the retry
    expect: tuple[str, ...] = ("done",)  # sorted outcomes of the jobs besides the bystanders
    check: Callable[[Spool, Ctx, dict[str, Any]], None] | None = None


# -- setups (test process) --------------------------------------------------------------------


def echo_job(max_tries: int = 3, key: str | None = None) -> Callable[[Spool, Ctx], None]:
    def setup(sp: Spool, ctx: Ctx) -> None:
        ctx["job"] = sp.submit("echo", {"n": 1}, max_tries=max_tries, key=key)

    return setup


def abandoned_lease(max_tries: int = 3, cancel: bool = False) -> Callable[[Spool, Ctx], None]:
    """A job leased by a worker that then died (its liveness lock is free again)."""

    def setup(sp: Spool, ctx: Ctx) -> None:
        echo_job(max_tries)(sp, ctx)
        with acquire(sp.layout.fd("locks"), worker_lock_name("w-gone"), blocking=True):
            assert claim(sp, "w-gone", ["echo"]) is not None
        if cancel:
            assert sp.cancel(ctx["job"]) == "requested"

    return setup


def drop(text: str) -> Callable[[Spool, Ctx], None]:
    """A user drops a file into pending/ (written under a dot name, then renamed)."""

    def setup(sp: Spool, ctx: Ctx) -> None:
        staging = sp.layout.path(State.PENDING, ".drop.partial")
        staging.write_text(text)
        os.rename(staging, sp.layout.path(State.PENDING, "drop.yaml"))

    return setup


PLANTED = b'{"planted": true}'


def planted_result(forget_row: bool = False) -> Callable[[Spool, Ctx], None]:
    """A pending job never picked up, with a result planted for it (issue 17, finding 13);
    ``forget_row``: its ledger row lost too, so the coordinator's reconcile settles it."""

    def setup(sp: Spool, ctx: Ctx) -> None:
        echo_job()(sp, ctx)
        sp.layout.path("results", result_name(ctx["job"])).write_bytes(PLANTED)
        if forget_row:
            sp.ledger.forget([ctx["job"]])

    return setup


def planted_set_aside(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    """The job ran for its own result; the planted one is kept, as text, in an invalid record."""
    value = json.loads(sp.layout.path("results", result_name(ctx["job"])).read_bytes())
    assert value != json.loads(PLANTED) and jobs[ctx["job"]][1].attempt == 1, value
    (record,) = [job_file for job_id, (_state, job_file) in jobs.items() if job_id != ctx["job"]]
    assert record.reason == "invalid" and record.original == PLANTED.decode(), record


def dependency(sp: Spool, ctx: Ctx) -> None:
    ctx["parent"] = sp.submit("echo", {"n": 0})


# -- acts (forked child, armed) ---------------------------------------------------------------


def submit_keyed(sp: Spool, ctx: Ctx) -> None:
    sp.submit("echo", {"n": 1}, key="k", depends_on=[ctx["parent"]] if "parent" in ctx else ())


def submit_keyless(sp: Spool, ctx: Ctx) -> None:
    sp.submit("echo", {"n": 1})


def as_worker(
    then: Callable[[Spool, Lease], None] | None = None, *, liveness_lock: bool = True
) -> Callable[[Spool, Ctx], None]:
    """Claim like ``spool worker`` (holding its liveness lock), then ``then``."""

    def act(sp: Spool, ctx: Ctx) -> None:
        if liveness_lock:
            ctx["lock"] = acquire(sp.layout.fd("locks"), worker_lock_name(CRASHED_WORKER), blocking=True)
        job_file = claim(sp, CRASHED_WORKER, ["echo"])
        assert job_file is not None, "nothing to claim"
        if then is not None:
            then(sp, Lease(job_file.id, CRASHED_WORKER, job_file.attempt))

    return act


def as_early_worker(sp: Spool, ctx: Ctx) -> None:
    """Claim as ``spool worker`` does (``early``: counted at leased/'s fsync), then write the
    claimed content as the worker does once its child has the attempt."""
    ctx["lock"] = acquire(sp.layout.fd("locks"), worker_lock_name(CRASHED_WORKER), blocking=True)
    held = claim_held(sp, CRASHED_WORKER, ["echo"], early=True)
    assert held is not None and held.opening is not None, "nothing to claim"
    held.opening.write()


def echo_jobs(count: int) -> Callable[[Spool, Ctx], None]:
    def setup(sp: Spool, ctx: Ctx) -> None:
        ctx["jobs"] = [sp.submit("echo", {"n": n}) for n in range(count)]

    return setup


def limited_jobs(count: int) -> Callable[[Spool, Ctx], None]:
    """``count`` echo jobs in queue gpu, whose one slot (concurrency 1) the crashed claim takes."""

    def setup(sp: Spool, ctx: Ctx) -> None:
        queues.set_limits(sp, "gpu", concurrency=1)
        ctx["jobs"] = [sp.submit("echo", {"n": n}, queue="gpu") for n in range(count)]
        ctx["job"] = ctx["jobs"][0]

    return setup


def as_batch_worker(*, complete_all: bool = False) -> Callable[[Spool, Ctx], None]:
    """Claim three jobs in one batch like ``spool worker`` (runner.batching); with ``complete_all``,
    start the waiting members (their heartbeats lose the ``queued`` mark) and complete all three
    in one ``complete_many``."""

    def act(sp: Spool, ctx: Ctx) -> None:
        ctx["lock"] = acquire(sp.layout.fd("locks"), worker_lock_name(CRASHED_WORKER), blocking=True)
        members = claim_many(sp, CRASHED_WORKER, ["echo"], 3)
        assert len(members) == 3, "a batch of three"
        leases = [Lease(held.job_file.id, CRASHED_WORKER, held.job_file.attempt) for held in members]
        if complete_all:
            for lease in leases[1:]:
                start_queued(sp, lease)
            result = json.dumps({"by": CRASHED_WORKER}).encode()
            assert (
                complete_many(sp, [Finished(lease, held, result) for lease, held in zip(leases, members)]) == [None] * 3
            )

    return act


def tries_spent(*expected: int) -> Callable[[Spool, Ctx, dict[str, Any]], None]:
    """The tries each job had spent when it ended, sorted: a batch member whose handler never
    started spent none (its try was given back), so its one run is its only try."""

    def check(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
        assert sorted(job_file.tries for _state, job_file in jobs.values()) == list(expected), jobs

    return check


def results_by(worker: str, count: int) -> Callable[[Spool, Ctx, dict[str, Any]], None]:
    """``count`` of the jobs kept the result ``worker`` linked (the first result wins)."""

    def check(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
        values = [json.loads(sp.layout.path("results", result_name(job_id)).read_bytes()) for job_id in jobs]
        assert sum(value["by"] == worker for value in values) == count, values

    return check


def batch_of_three(
    name: str, check: Callable[[Spool, Ctx, dict[str, Any]], None], *, complete_all: bool = False
) -> Scenario:
    """Three echo jobs claimed (and with ``complete_all`` completed) in one batch; all end done."""
    return Scenario(
        name, as_batch_worker(complete_all=complete_all), setup=echo_jobs(3), expect=("done",) * 3, check=check
    )


# Every result of the batch linked before the crash: recovery finishes them, never replaces one.
BATCH_KEPT = batch_of_three("batch-kept", results_by(CRASHED_WORKER, 3), complete_all=True)


def completes(sp: Spool, lease: Lease) -> None:
    complete(sp, lease, json.dumps({"by": CRASHED_WORKER}).encode())


def fails(sp: Spool, lease: Lease) -> None:
    fail(sp, lease, "RuntimeError: boom")


def coordinator_pass(sp: Spool, ctx: Ctx) -> None:
    Coordinator(sp).run_pass()


# -- retries (test process) -------------------------------------------------------------------


def resubmit_keyed(sp: Spool, ctx: Ctx) -> None:
    """The client was told nothing, so it submits the same key again."""
    submit_keyed(sp, ctx)


def result_by(worker: str) -> Callable[[Spool, Ctx, dict[str, Any]], None]:
    """The first result linked wins: recovery finishes the crashed worker's, never replaces it."""

    def check(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
        (job_id,) = jobs
        value = json.loads(sp.layout.path("results", result_name(job_id)).read_bytes())
        assert value["by"] == worker, value

    return check


def resubmit_told(created: bool) -> Callable[[Spool, Ctx], None]:
    """The same retry, checking what the submit answers: a new job only where the crash came
    before the commit (the key's reservation is taken over), else the committed one."""

    def retry(sp: Spool, ctx: Ctx) -> None:
        again = sp.submit_spec({"task": "echo", "args": {"n": 1}, "key": "k"})
        assert again.created is created, f"created={again.created}"

    return retry


def _ours(sp: Spool, ctx: Ctx) -> list[str]:
    """Job files of the scenario's own jobs (not the bystanders), in any folder."""
    bystanders = {job_name(ctx["bystander"]), job_name(ctx["old"])}
    return sorted(
        n for state in State for n in fs.list_dir(sp.layout.fd(state)) if not n.startswith(".") and n not in bystanders
    )


def repaired(committed: bool) -> Callable[[Spool, Ctx], None]:
    """``fsck --repair`` straight after the crash: clean, and one job iff the submit committed."""

    def after_crash(sp: Spool, ctx: Ctx) -> None:
        fsck(sp, repair=True)
        _assert_clean(sp)
        ctx["survivors"] = _ours(sp, ctx)
        assert len(ctx["survivors"]) == (1 if committed else 0), ctx["survivors"]

    return after_crash


def resubmit_after_repair(sp: Spool, ctx: Ctx) -> None:
    """The key finds the survivor (or makes the one job), again and again; clean before any recovery."""
    job_id = sp.submit("echo", {"n": 1}, key="k")
    assert sp.submit("echo", {"n": 1}, key="k") == job_id
    if ctx["survivors"]:
        assert ctx["survivors"] == [job_name(job_id)]
    pending = [
        n for n in fs.list_dir(sp.layout.fd(State.PENDING)) if not n.startswith(".") and n != job_name(ctx["bystander"])
    ]
    assert pending == [job_name(job_id)]
    _assert_clean(sp)


def _assert_clean(sp: Spool) -> None:
    report = fsck(sp)
    assert report.ok, report.violations
    assert not report.in_progress, report.in_progress


def one_job_per_key(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    keys = [job_file.job.key for _state, job_file in jobs.values()]
    assert keys.count("k") == 1, keys


# -- submit_many: a batch killed before, between and after its renames ---------------------------

BATCH_KEYS = ("k", "k2")


def _batch_specs(sp: Spool, ctx: Ctx, *, unkeyed_at: int | None = None) -> list[dict[str, Any]]:
    """Two keyed members and a repeat of the first key (one job each key), optionally with an
    unkeyed member at ``unkeyed_at``; waiting on ``ctx["parent"]`` when the setup made one."""
    deps = [ctx["parent"]] if "parent" in ctx else []
    specs = [sp.spec("echo", {"n": n}, key=key, depends_on=deps) for n, key in enumerate(("k", "k2", "k"))]
    if unkeyed_at is not None:
        specs.insert(unkeyed_at, sp.spec("echo", {"n": "unkeyed"}, depends_on=deps))
    return specs


def submit_batch(sp: Spool, ctx: Ctx) -> None:
    sp.submit_many(_batch_specs(sp, ctx))


def submit_batch_with_unkeyed(at: int) -> Callable[[Spool, Ctx], None]:
    def act(sp: Spool, ctx: Ctx) -> None:
        sp.submit_many(_batch_specs(sp, ctx, unkeyed_at=at))

    return act


def resubmit_batch_told(*created: bool) -> Callable[[Spool, Ctx], None]:
    """The client was told nothing, so it submits the batch again: a key whose member was renamed
    before the crash answers with that job, the others make theirs; the repeat never makes one."""

    def retry(sp: Spool, ctx: Ctx) -> None:
        again = sp.submit_many(_batch_specs(sp, ctx))
        assert [s.created for s in again] == [*created, False], again
        assert again[2].id == again[0].id

    return retry


def batch_repaired(committed: int) -> Callable[[Spool, Ctx], None]:
    """``fsck --repair`` straight after the crash: clean, and one job per member renamed before it."""

    def after_crash(sp: Spool, ctx: Ctx) -> None:
        fsck(sp, repair=True)
        _assert_clean(sp)
        ctx["survivors"] = _ours(sp, ctx)
        assert len(ctx["survivors"]) == committed, ctx["survivors"]

    return after_crash


def resubmit_batch_after_repair(sp: Spool, ctx: Ctx) -> None:
    """The batch again, twice: the same two jobs, the survivors among them; clean before any recovery."""
    first = sp.submit_many(_batch_specs(sp, ctx))
    assert sp.submit_many(_batch_specs(sp, ctx)) == [type(s)(s.id, created=False) for s in first]
    ours = sorted({job_name(s.id) for s in first})
    assert set(ctx["survivors"]) <= set(ours) and _ours(sp, ctx) == ours
    assert sorted(fs.list_dir(sp.layout.fd("keys"))) == sorted(key_name(k) for k in ("bystander", "old", *BATCH_KEYS))
    _assert_clean(sp)


def one_job_per_batch_key(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    keys = [job_file.job.key for _state, job_file in jobs.values()]
    assert all(keys.count(key) == 1 for key in BATCH_KEYS), keys


def at_most_one_job_per_batch_key(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    keys = [job_file.job.key for _state, job_file in jobs.values()]
    assert all(keys.count(key) <= 1 for key in BATCH_KEYS), keys


def _batch_scenarios(stage: int) -> list[Scenario]:
    """The same checks as submit's, at a batch point: ``stage`` 0 before any rename, 1 after the
    first member's rename, 2 after every rename and the folder fsyncs."""
    keyed_renamed = (0, 1, 2)[stage]  # of [k, k2, k]: the repeat of k is never a member
    mixed_renamed = (0, 1, 3)[stage]  # of three members, one of them unkeyed
    told = tuple(n >= keyed_renamed for n in range(2))
    return [
        Scenario(
            "keyed",
            submit_batch,
            retry=resubmit_batch_told(*told),
            expect=("done", "done"),
            check=one_job_per_batch_key,
        ),
        Scenario(
            "repaired",
            submit_batch,
            after_crash=batch_repaired(keyed_renamed),
            retry=resubmit_batch_after_repair,
            expect=("done", "done"),
            check=one_job_per_batch_key,
        ),
        Scenario(
            "waiting",
            submit_batch,
            setup=dependency,
            retry=resubmit_batch_told(*told),
            expect=("done", "done", "done"),
            check=one_job_per_batch_key,
        ),
        # Never told, and not resubmitted: exactly the members renamed before the kill are jobs
        # (the repair removes the reservations whose members never were).
        Scenario(
            "unkeyed-first",
            submit_batch_with_unkeyed(0),
            after_crash=batch_repaired(mixed_renamed),
            expect=("done",) * mixed_renamed,
            check=at_most_one_job_per_batch_key,
        ),
        Scenario(
            "unkeyed-last",
            submit_batch_with_unkeyed(2),
            after_crash=batch_repaired(mixed_renamed),
            expect=("done",) * mixed_renamed,
            check=at_most_one_job_per_batch_key,
        ),
    ]


def releases(sp: Spool, lease: Lease) -> None:
    release(sp, lease)


def chain(parent_ends: str) -> Callable[[Spool, Ctx], None]:
    """A parent and a child waiting on it; the parent then ends ``done`` or ``dead`` (cancelled)."""

    def setup(sp: Spool, ctx: Ctx) -> None:
        ctx["parent"] = sp.submit("echo", {"n": 0})
        ctx["job"] = sp.submit("echo", {"n": 1}, depends_on=[ctx["parent"]])
        if parent_ends == "dead":
            sp.cancel(ctx["parent"])
            return
        with acquire(sp.layout.fd("locks"), worker_lock_name("w-setup"), blocking=True):
            job_file = claim(sp, "w-setup", ["echo"])
            assert job_file is not None and job_file.id == ctx["parent"]
            complete(sp, Lease(job_file.id, "w-setup", job_file.attempt), b'{"by": "w-setup"}')

    return setup


def moved_back_by_hand(sp: Spool, ctx: Ctx) -> None:
    """``mv dead/X.yaml pending/`` of a cancelled job whose dependency is dead (issue 7, finding 9)."""
    ctx["parent"] = sp.submit("echo", {"n": 0})
    ctx["job"] = sp.submit("echo", {"n": 1}, depends_on=[ctx["parent"]])
    sp.cancel(ctx["parent"])
    sp.cancel(ctx["job"])
    os.rename(sp.layout.path(State.DEAD, f"{ctx['job']}.yaml"), sp.layout.path(State.PENDING, f"{ctx['job']}.yaml"))


def delayed_job(sp: Spool, ctx: Ctx) -> None:
    ctx["job"] = sp.submit("echo", {"n": 1}, delay_seconds=0.05)


def cancelled_job(sp: Spool, ctx: Ctx) -> None:
    echo_job()(sp, ctx)
    assert sp.cancel(ctx["job"]) == "cancelled"


def coordinator_passes(sp: Spool, ctx: Ctx) -> None:
    """A coordinator running for a while (its timers fire on its own clock)."""
    coordinator = Coordinator(sp)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        coordinator.run_pass()
        time.sleep(0.01)


def cancels(sp: Spool, ctx: Ctx) -> None:
    sp.cancel(ctx["job"])


def requeues(sp: Spool, ctx: Ctx) -> None:
    sp.requeue(ctx["job"])


def purges_dead(sp: Spool, ctx: Ctx) -> None:
    purge(sp, 0.0, [State.DEAD])


def nothing_left(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    assert not fs.list_dir(sp.layout.fd("keys")) or ctx["job"] not in str(jobs), jobs
    assert sp.state(ctx["job"]) is None


def dropped_as(name: str) -> Callable[[Spool, Ctx, dict[str, Any]], None]:
    """An ingest finished by recovery still names the file the user dropped."""

    def check(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
        assert [job_file.dropped_as for _state, job_file in jobs.values()] == [name], jobs
        assert not [n for n in fs.list_dir(sp.layout.fd(State.PENDING)) if n.endswith(".drop")]

    return check


# -- a schedule's firing: the coordinator's keyed submit of one slot ----------------------------

HOURLY = "task: echo\nargs: {n: 1}\nevery: 1h\n"


def hourly_schedule(sp: Spool, ctx: Ctx) -> None:
    """A schedule written two hours ago and never fired: a coordinator's first pass fires its
    last slot (``catchup: one``)."""
    path = sp.layout.path("schedules", "hourly.yaml")
    path.write_text(HOURLY)
    written = time.time() - 7200
    os.utime(path, (written, written))


def fires_again_then_stops(sp: Spool, ctx: Ctx) -> None:
    """The next coordinator fires the same slot (the slot's key finds the job, or takes over a
    reservation without one); then the schedule goes, so recovery sees no later slot."""
    Coordinator(sp).run_pass()
    sp.layout.path("schedules", "hourly.yaml").unlink()


def one_job_for_the_slot(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    keys = [job_file.job.key for _state, job_file in jobs.values()]
    assert len(keys) == 1 and keys[0].startswith("schedule:hourly@") and keys[0].endswith(":00:00.000Z"), keys


def unrecorded_slot_job(sp: Spool, ctx: Ctx) -> None:
    """An hourly slot's job, since ended (cancelled), whose coordinator died between the slot's
    submit and its record: the job and its key are all that says the slot fired."""
    from spool.schedule.format import slot_key
    from spool.moves.submission import submit

    hourly_schedule(sp, ctx)
    ctx["slot"] = time.time() // 3600 * 3600
    spec = {"task": "echo", "args": {"n": 1}, "key": slot_key("hourly", ctx["slot"])}
    ctx["job"] = submit(sp, spec, firing=True).id
    assert sp.cancel(ctx["job"]) == "cancelled"


def purged_with_its_firing_recorded(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    """The job is gone and the schedule's record says its slot fired, so no coordinator fires it
    again; then the schedule goes, so recovery sees no later slot."""
    from spool.schedule.fired import read_fired

    assert sp.state(ctx["job"]) is None
    assert read_fired(sp, "hourly").slot == ctx["slot"]
    Coordinator(sp).run_pass()
    pending = [n for n in fs.list_dir(sp.layout.fd(State.PENDING)) if n.endswith(".yaml")]
    assert pending == [job_name(ctx["bystander"])], "the slot fired again"
    sp.layout.path("schedules", "hourly.yaml").unlink()


def _firing_scenarios() -> list[Scenario]:
    return [
        Scenario(
            "fired", coordinator_pass, setup=hourly_schedule, retry=fires_again_then_stops, check=one_job_for_the_slot
        )
    ]


def fires_nothing_more_without_the_ledger(sp: Spool, ctx: Ctx) -> None:
    """The firing was recorded in schedules/.hourly.fired: with the ledger gone (rebuilt from the
    files) the next coordinator fires neither that slot nor an earlier one; then the schedule goes."""
    sp.set_ledger_aside()
    Coordinator(sp).run_pass()
    sp.layout.path("schedules", "hourly.yaml").unlink()


def run_now(sp: Spool, ctx: Ctx) -> None:
    """`spool schedule run hourly`: its job keyed to now, noted as the schedule's last firing."""
    from spool.schedule import folder as scheduling

    scheduling.run_now(sp, scheduling.read_schedule(sp, "hourly"))


def one_job_run_now(sp: Spool, ctx: Ctx, jobs: dict[str, Any]) -> None:
    keys = [job_file.job.key for _state, job_file in jobs.values()]
    assert len(keys) == 1 and keys[0].startswith("schedule:hourly@"), keys
    assert not keys[0].endswith(":00:00.000Z"), f"the coordinator fired the missed slot after the run: {keys}"


_RUN_NOW = [Scenario("noted", run_now, setup=hourly_schedule, retry=fires_again_then_stops, check=one_job_run_now)]


VALID_DROP = "task: echo\nargs: {n: 1}\n"
KEYED_DROP = "task: echo\nkey: dropped-key\nargs: {n: 1}\n"
INVALID_DROP = "task: echo\nargs: [not, a, mapping]\n"

SCENARIOS: dict[str, list[Scenario]] = {
    "submit:after-key-check": [
        Scenario("keyed", submit_keyed, retry=resubmit_told(created=True), check=one_job_per_key),
        Scenario(
            "repaired",
            submit_keyed,
            after_crash=repaired(committed=False),
            retry=resubmit_after_repair,
            check=one_job_per_key,
        ),
        Scenario("keyless", submit_keyless, expect=()),  # never committed, never told: no job
    ],
    "submit:after-key": [
        Scenario("keyed", submit_keyed, retry=resubmit_told(created=True), check=one_job_per_key),
        Scenario(
            "repaired",
            submit_keyed,
            after_crash=repaired(committed=False),
            retry=resubmit_after_repair,
            check=one_job_per_key,
        ),
    ],
    "submit:after-commit": [
        Scenario("keyed", submit_keyed, retry=resubmit_told(created=False), check=one_job_per_key),
        Scenario(
            "repaired",
            submit_keyed,
            after_crash=repaired(committed=True),
            retry=resubmit_after_repair,
            check=one_job_per_key,
        ),
        Scenario("keyless", submit_keyless),
        Scenario(
            "waiting",
            submit_keyed,
            setup=dependency,
            retry=resubmit_keyed,
            expect=("done", "done"),
            check=one_job_per_key,
        ),
    ],
    "submit:after-submit": [
        Scenario("keyed", submit_keyed, retry=resubmit_told(created=False), check=one_job_per_key),
        Scenario(
            "repaired",
            submit_keyed,
            after_crash=repaired(committed=True),
            retry=resubmit_after_repair,
            check=one_job_per_key,
        ),
        Scenario("keyless", submit_keyless),
    ],
    "submit:batch-after-sync": _batch_scenarios(0),  # staged and synced, no key linked
    "submit:batch-after-keys": _batch_scenarios(0),
    "submit:batch-after-commit": _batch_scenarios(1),  # killed after the first member's rename
    "submit:batch-after-submit": _batch_scenarios(2),
    # Rows reserved ('leased'), files untouched: the reconcile puts the rows back, nothing is spent.
    "worker:claim-after-reserve": [
        Scenario("untouched", as_worker(), setup=echo_job(), check=tries_spent(1)),
        # A queue's one slot taken by the reservation: free again once the row is put back, so
        # both jobs run, one at a time, and neither spent a try on the crash.
        Scenario("slot-taken", as_worker(), setup=limited_jobs(2), expect=("done",) * 2, check=tries_spent(1, 1)),
        batch_of_three("batch", tries_spent(1, 1, 1)),
    ],
    # Nothing changed but a stray heartbeat file beside a job still in pending/: not even a try is spent.
    "worker:claim-after-heartbeat": [
        Scenario("untouched", as_worker(), setup=echo_job()),
        Scenario("last-try-kept", as_worker(), setup=echo_job(max_tries=1)),
        Scenario("early", as_early_worker, setup=echo_job(), check=tries_spent(1)),
    ],
    "worker:claim-after-rename": [
        Scenario("retried", as_worker(), setup=echo_job()),
        Scenario("last-try", as_worker(), setup=echo_job(max_tries=1), expect=("dead:expired",)),
        # An early claim's rename not yet fsync'd: the same file, its content still the pending copy.
        Scenario("early", as_early_worker, setup=echo_job(), check=tries_spent(2)),
    ],
    # A worker's early claim: counted (leased/ fsync'd), its handler sent, its content not written.
    # Settled as the spent try it is, as a claim killed before its content always was.
    "worker:claim-after-start": [
        Scenario("retried", as_early_worker, setup=echo_job(), check=tries_spent(2)),
        Scenario("last-try", as_early_worker, setup=echo_job(max_tries=1), expect=("dead:expired",)),
    ],
    "worker:after-claim": [
        Scenario("retried", as_worker(), setup=echo_job()),
        Scenario("early", as_early_worker, setup=echo_job(), check=tries_spent(2)),
        Scenario("early-last-try", as_early_worker, setup=echo_job(max_tries=1), expect=("dead:expired",)),
        # A batch: the first member started, the two waiting ones never did: their tries come back.
        batch_of_three("batch", tries_spent(1, 1, 2)),
        Scenario("lease-expires", as_worker(liveness_lock=False), setup=echo_job()),
        Scenario("last-try", as_worker(), setup=echo_job(max_tries=1), expect=("dead:expired",)),
        # The killed holder's slot is free when its lease is (its freed liveness lock): the job is
        # retried and the queue's next job runs, each in the one slot.
        Scenario("slot-held", as_worker(), setup=limited_jobs(2), expect=("done",) * 2, check=tries_spent(1, 2)),
    ],
    "worker:claim-batch-after-sync": [
        batch_of_three("untouched", tries_spent(1, 1, 1)),
    ],
    "worker:claim-batch-after-member": [
        # The first member claimed (its try counted, as any claim's); the others never renamed.
        batch_of_three("first-claimed", tries_spent(1, 1, 2)),
    ],
    "worker:complete-batch-after-sync": [
        # Every member started: each spent its try, as a single attempt killed before its result.
        batch_of_three("retried", tries_spent(2, 2, 2), complete_all=True),
    ],
    "worker:complete-batch-after-link": [
        batch_of_three("first-kept", results_by(CRASHED_WORKER, 1), complete_all=True),
    ],
    "worker:complete-batch-after-rename": [BATCH_KEPT],
    "worker:complete-after-stage": [
        Scenario("retried", as_worker(completes), setup=echo_job()),
    ],
    "worker:after-result": [
        Scenario("result-kept", as_worker(completes), setup=echo_job(), check=result_by(CRASHED_WORKER)),
        BATCH_KEPT,
        Scenario("last-try", as_worker(completes), setup=echo_job(max_tries=1), check=result_by(CRASHED_WORKER)),
    ],
    "worker:complete-after-move": [
        Scenario("result-kept", as_worker(completes), setup=echo_job(), check=result_by(CRASHED_WORKER)),
        BATCH_KEPT,
        # In done/ with its row still 'leased' (the slot counted as taken): the reconcile records
        # it, which frees the slot for the queue's next job.
        Scenario(
            "slot-freed", as_worker(completes), setup=limited_jobs(2), expect=("done",) * 2, check=tries_spent(1, 1)
        ),
    ],
    "worker:fail-after-rename": [
        Scenario("retried", as_worker(fails), setup=echo_job()),
    ],
    "worker:after-fail": [
        Scenario("retried", as_worker(fails), setup=echo_job()),
        Scenario("dead", as_worker(fails), setup=echo_job(max_tries=1), expect=("dead:failed",)),
    ],
    "coordinator:expire-after-rename": [
        Scenario("retried", coordinator_pass, setup=abandoned_lease()),
    ],
    "coordinator:after-expire": [
        Scenario("retried", coordinator_pass, setup=abandoned_lease()),
        Scenario("last-try", coordinator_pass, setup=abandoned_lease(max_tries=1), expect=("dead:expired",)),
        Scenario("cancel-requested", coordinator_pass, setup=abandoned_lease(cancel=True), expect=("dead:cancelled",)),
    ],
    "coordinator:ingest-after-rename": [
        Scenario("valid", coordinator_pass, setup=drop(VALID_DROP), check=dropped_as("drop.yaml")),
        Scenario("keyed", coordinator_pass, setup=drop(KEYED_DROP), check=dropped_as("drop.yaml")),
        Scenario("invalid", coordinator_pass, setup=drop(INVALID_DROP), expect=("dead:invalid",)),
    ],
    "worker:bury-after-rename": [
        Scenario("failed", as_worker(fails), setup=echo_job(max_tries=1), expect=("dead:failed",)),
    ],
    "worker:result-aside-after-rename": [
        Scenario(
            "planted", as_worker(), setup=planted_result(), expect=("dead:invalid", "done"), check=planted_set_aside
        ),
    ],
    "coordinator:result-aside-after-rename": [
        Scenario(
            "planted",
            coordinator_pass,
            setup=planted_result(forget_row=True),
            expect=("dead:invalid", "done"),
            check=planted_set_aside,
        ),
    ],
    "worker:release-after-rename": [
        Scenario("released", as_worker(releases), setup=echo_job()),
    ],
    "coordinator:bury-after-rename": [
        Scenario("expired", coordinator_pass, setup=abandoned_lease(max_tries=1), expect=("dead:expired",)),
        Scenario("skipped", coordinator_pass, setup=chain("dead"), expect=("dead:cancelled", "dead:skipped")),
    ],
    "coordinator:promote-after-rename": [
        Scenario("promoted", coordinator_pass, setup=chain("done"), expect=("done", "done")),
    ],
    "coordinator:requeue-by-hand-after-rename": [
        Scenario("to-waiting", coordinator_pass, setup=moved_back_by_hand, expect=("dead:cancelled", "dead:skipped")),
    ],
    "coordinator:ready-after-rewrite": [
        Scenario("delayed", coordinator_passes, setup=delayed_job),
    ],
    "admin:bury-after-rename": [
        Scenario("cancelled", cancels, setup=echo_job(), expect=("dead:cancelled",)),
    ],
    "admin:requeue-after-rename": [
        Scenario("requeued", requeues, setup=cancelled_job),
    ],
    "admin:purge-after-rename": [
        Scenario("purged", purges_dead, setup=cancelled_job, expect=(), check=nothing_left),
    ],
    "admin:purge-after-fired": [
        Scenario(
            "slot",
            purges_dead,
            setup=unrecorded_slot_job,
            retry=purges_dead,
            expect=(),
            check=purged_with_its_firing_recorded,
        ),
    ],
    "coordinator:after-ingest": [
        Scenario("valid", coordinator_pass, setup=drop(VALID_DROP)),
        Scenario("keyed", coordinator_pass, setup=drop(KEYED_DROP)),
    ],
    "coordinator:after-key-check": _firing_scenarios(),
    "coordinator:after-key": _firing_scenarios(),
    "coordinator:after-commit": _firing_scenarios(),
    "coordinator:after-submit": _firing_scenarios(),
    "coordinator:fire-after-begin": _firing_scenarios(),
    "coordinator:fire-after-record": [
        *_firing_scenarios(),
        Scenario(
            "ledger-lost",
            coordinator_pass,
            setup=hourly_schedule,
            retry=fires_nothing_more_without_the_ledger,
            check=one_job_for_the_slot,
        ),
    ],
    "submit:run-after-record": _RUN_NOW,
    "serve:run-after-record": _RUN_NOW,
}

# `spool serve` runs the same moves in its own process (role serve): the same scenarios hold there.
# tests/api/test_server_crash.py kills a real server at each of these points too.
for _step in ("after-key-check", "after-key", "after-commit", "after-submit"):
    SCENARIOS[f"serve:{_step}"] = SCENARIOS[f"submit:{_step}"]
for _step in ("bury-after-rename", "requeue-after-rename"):
    SCENARIOS[f"serve:{_step}"] = SCENARIOS[f"admin:{_step}"]
# A remote worker's complete is the worker's transition run in the server (tests/api/
# test_remote_results.py kills a real server there and checks the worker calls it its own win).
for _step in ("after-result", "complete-after-move"):
    SCENARIOS[f"serve:{_step}"] = SCENARIOS[f"worker:{_step}"]
# A runner's claim over the API is the worker's claim, and its fence the coordinator's expire, run
# in the server (tests/api/test_dispatch_crash.py kills a real server at each with run-one).
for _step in ("claim-after-reserve", "claim-after-heartbeat", "claim-after-rename", "after-claim"):
    SCENARIOS[f"serve:{_step}"] = SCENARIOS[f"worker:{_step}"]
for _step in ("expire-after-rename", "after-expire"):
    SCENARIOS[f"serve:{_step}"] = SCENARIOS[f"coordinator:{_step}"]
# The dispatcher moves no file: its points are crashed with real processes, a server and an engine,
# in tests/api/test_dispatch_crash.py (which checks it covers every one of them).
NOT_IN_PROCESS = {point for point in crash.all_points() if point.startswith("dispatch:")}


def _matrix() -> Iterator[Any]:
    for point in crash.all_points():
        if point in NOT_IN_PROCESS:
            continue
        scenarios = SCENARIOS.get(point)
        if not scenarios:
            yield pytest.param(point, None, id=f"{point}/MISSING")
        for scenario in scenarios or ():
            yield pytest.param(point, scenario, id=f"{point}/{scenario.name}")


def test_every_scenario_names_a_real_point() -> None:
    stale = sorted(set(SCENARIOS) - set(crash.all_points()))
    assert not stale, f"SCENARIOS has points spool no longer has: {stale}"


@pytest.mark.parametrize(("point", "scenario"), list(_matrix()))
def test_crash_point(
    point: str,
    scenario: Scenario | None,
    make_spool: Callable[[str], Path],
    recover: Callable[..., None],
    check_end_state: Callable[[Spool], dict[str, Any]],
    add_bystanders: Callable[[Spool], dict[str, str]],
    bystander_files: Callable[[Spool, Ctx], dict[str, bytes]],
) -> None:
    if scenario is None:
        pytest.fail(f"crash point {point} has no scenario: add one to SCENARIOS in {__file__}")
    root = make_spool("spool")

    ctx: Ctx = {}
    with Spool(root, environ={}) as sp:
        ctx.update(add_bystanders(sp))
        scenario.setup(sp, ctx)
        before = bystander_files(sp, ctx)
    # The Spool (and its ledger connection) is closed before the fork.
    crash_child(root, point, scenario.act, ctx)

    with Spool(root, environ={}) as sp:
        scenario.after_crash(sp, ctx)
        scenario.retry(sp, ctx)
        recover(sp)
        jobs = check_end_state(sp)
        assert bystander_files(sp, ctx) == before, "a bystander's files changed"
        assert jobs[ctx["bystander"]][0] is State.PENDING
        ours = {job_id: entry for job_id, entry in jobs.items() if job_id not in (ctx["bystander"], ctx["old"])}
        outcomes = sorted(
            state.value if state is State.DONE else f"dead:{job_file.reason}" for state, job_file in ours.values()
        )
        assert tuple(outcomes) == scenario.expect, f"{point}/{scenario.name}: {ours}"
        if scenario.check is not None:
            scenario.check(sp, ctx, ours)


def crash_child(root: Path, point: str, act: Callable[[Spool, Ctx], None], ctx: Ctx) -> None:
    """Run ``act`` in a forked child armed for ``point``; it must die there by SIGKILL."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_end)
            sp = Spool(root, environ={})
            crash.arm(point.split(":", 1)[0], {"SPOOL_CRASH_AT": point})
            act(sp, ctx)
        except BaseException:
            os.write(write_end, traceback.format_exc()[-4000:].encode())
            code = 2
        os._exit(code)
    os.close(write_end)
    deadline = time.monotonic() + 60
    while (reaped := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:  # stuck (a lock never freed?): never leave it behind
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the child never reached crash point {point} in 60 s")
        time.sleep(0.002)
    status = reaped[1]
    with os.fdopen(read_end, "rb") as reader:
        error = reader.read().decode(errors="replace")
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        pytest.fail(f"the scenario never reached crash point {point}")
    pytest.fail(f"the child failed before crash point {point} (status {status}):\n{error}")


# -- through the command line -----------------------------------------------------------------


def _crash_env(point: str) -> dict[str, str]:
    return {"SPOOL_CRASH_AT": point}


def _status(root: Path, job_id: str) -> dict[str, Any]:
    with Spool(root, environ={}) as sp:
        return sp.status(job_id)


def _finished(root: Path, job_id: str) -> bool:
    """Done or dead, and its file moved there (not only a result linked)."""
    return any((root / state / f"{job_id}.yaml").exists() for state in ("done", "dead"))


def _run_until_terminal(procs: Any, root: Path, job_id: str) -> dict[str, Any]:
    """Start what a supervisor would: a coordinator and a worker; wait for the job to finish."""
    procs.start("coordinator", name="coordinator")
    procs.start("worker", "--import", "examples.tasks", name="worker")
    wait_until(lambda: _finished(root, job_id), timeout=60, message=f"{job_id} to finish")
    procs.stop()
    return _status(root, job_id)


def _assert_fsck_clean(spool_cli: Callable[..., Any]) -> None:
    checked = spool_cli("fsck")
    assert checked.returncode == 0, checked.stdout + checked.stderr


SUBMIT_POINTS = ["submit:after-key-check", "submit:after-key", "submit:after-commit", "submit:after-submit"]
# No command submits a batch (submit_many is the Python API's): its points are crashed above only.
BATCH_POINTS = [
    "submit:batch-after-sync",
    "submit:batch-after-keys",
    "submit:batch-after-commit",
    "submit:batch-after-submit",
]
COMMITTED = ("submit:after-commit", "submit:after-submit")  # the job file is in pending/ at these
RUN_POINTS = ["submit:run-after-record"]  # `spool schedule run`: its job made, then noted as the last firing


def _job_names(root: Path) -> list[str]:
    return sorted(n for state in State for n in os.listdir(root / state.value) if not n.startswith("."))


def test_every_point_of_submit_is_crashed_through_the_command_line() -> None:
    listed = [p for p in crash.all_points() if p.split(":", 1)[0] == "submit"]
    assert sorted(listed) == sorted(SUBMIT_POINTS + BATCH_POINTS + RUN_POINTS), (
        "a new point of submit needs a place in SUBMIT_POINTS"
    )


def test_cli_schedule_run_killed_after_its_record(fast_spool: Path, spool_cli: Callable[..., Any], procs: Any) -> None:
    """A real `spool schedule run` SIGKILLed once its job is durable and noted in the schedule's
    record: no id printed, one job, the record names it, and fsck is clean."""
    added = spool_cli("schedule", "add", "hourly", "echo", "--every", "1h", "-a", "n=1")
    assert added.returncode == 0, added.stderr
    crashed = spool_cli("schedule", "run", "hourly", env=_crash_env("submit:run-after-record"))
    assert crashed.returncode == -signal.SIGKILL and crashed.stdout == "", crashed.stderr
    (job,) = _job_names(fast_spool)
    listed = json.loads(spool_cli("schedule", "list", "--json").stdout)
    assert [v["last_job"] for v in listed] == [job[: -len(".yaml")]]
    _assert_fsck_clean(spool_cli)


@pytest.mark.parametrize("point", SUBMIT_POINTS)
def test_cli_submit_killed_at_each_point_then_resubmitted(
    point: str, fast_spool: Path, spool_cli: Callable[..., Any], procs: Any
) -> None:
    """A real `spool submit` SIGKILLed at ``point``: no id printed, zero or one job, fsck --repair
    clean; the resubmit of the key prints the one job's id, which then runs once."""
    submit = ("submit", "echo", "--key", "cli-k", "-a", "n=1")
    crashed = spool_cli(*submit, env=_crash_env(point))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert crashed.stdout == "", "an id was printed before the job was durable"
    assert crashed.stderr == "", "killed before it printed anything"
    after_crash = _job_names(fast_spool)
    assert len(after_crash) == (1 if point in COMMITTED else 0), after_crash
    with Spool(fast_spool, environ={}) as sp:
        repair = fsck(sp, repair=True)
        assert repair.ok, repair.violations
    again = spool_cli(*submit)
    assert again.returncode == 0, again.stderr
    job_id = again.stdout.strip()
    assert _job_names(fast_spool) == [job_name(job_id)]
    assert sorted(p.name for p in (fast_spool / "pending").glob("*.yaml")) == [f"{job_id}.yaml"]
    if after_crash:
        assert after_crash == [job_name(job_id)]  # the survivor is the one the key finds
    with Spool(fast_spool, environ={}) as sp:
        assert sp.submit("echo", key="cli-k") == job_id
        assert os.listdir(fast_spool / "keys") == [key_name("cli-k")]
        report = fsck(sp)
        assert report.ok and not report.in_progress, report.violations + report.in_progress
    status = _run_until_terminal(procs, fast_spool, job_id)
    assert status["state"] == "done" and status["tries"] == 1
    _assert_fsck_clean(spool_cli)


def test_cli_worker_killed_after_result(fast_spool: Path, spool_cli: Callable[..., Any], procs: Any) -> None:
    job_id = spool_cli("submit", "echo", "-a", "n=1").stdout.strip()
    crashed = spool_cli("worker", "--burst", "--import", "examples.tasks", env=_crash_env("worker:after-result"))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert (fast_spool / "leased" / f"{job_id}.yaml").exists()
    assert (fast_spool / "results" / f"{job_id}.json").exists()
    status = _run_until_terminal(procs, fast_spool, job_id)
    assert status["state"] == "done"
    assert status["attempt"] == 1, "the job ran again although its result existed"
    assert [a["outcome"] for a in status["attempts"]] == ["done"]
    _assert_fsck_clean(spool_cli)


def test_cli_coordinator_killed_after_expire(fast_spool: Path, spool_cli: Callable[..., Any], procs: Any) -> None:
    job_id = spool_cli("submit", "echo", "-a", "n=1").stdout.strip()
    claimed = spool_cli("worker", "--burst", "--import", "examples.tasks", env=_crash_env("worker:after-claim"))
    assert claimed.returncode == -signal.SIGKILL, claimed.stderr
    coordinator = procs.start("coordinator", env=_crash_env("coordinator:after-expire"), name="crashing")
    assert coordinator.wait(timeout=60) == -signal.SIGKILL
    assert (fast_spool / "pending" / f"{job_id}.yaml").exists(), "the lease was not expired"
    status = _run_until_terminal(procs, fast_spool, job_id)
    assert status["state"] == "done"
    assert status["tries"] == 2 and status["attempt"] == 2
    # Killed after its early claim was counted, before its content was written: a lost claim's
    # expiry (spool.moves.transitions.expire), which crashes at after-expire as any expiry does.
    assert [a["outcome"] for a in status["attempts"]] == ["lost", "done"]
    _assert_fsck_clean(spool_cli)


def test_cli_supervisor_restarts_a_worker_killed_mid_complete(
    fast_spool: Path, spool_cli: Callable[..., Any], procs: Any
) -> None:
    """``spool run`` passes SPOOL_CRASH_AT to its first children only: a restart recovers."""
    job_id = spool_cli("submit", "echo", "-a", "n=1").stdout.strip()
    procs.start(
        "run", "--workers", "1", "--import", "examples.tasks", env=_crash_env("worker:complete-after-stage"), name="run"
    )
    wait_until(lambda: _finished(fast_spool, job_id), timeout=60, message=f"{job_id} to finish")
    # The crashed worker's staged result stays in tmp/ until the coordinator's next sweep (the
    # live worker's spare heartbeat file, spool.moves.spares, stays: its writer is alive).
    wait_until(
        lambda: all(writer_alive(entry.name) for entry in (fast_spool / "tmp").iterdir()),
        timeout=30,
        message="the tmp/ sweep",
    )
    procs.stop()
    status = _status(fast_spool, job_id)
    assert status["attempt"] == 2 and [a["outcome"] for a in status["attempts"]] == ["expired", "done"]
    _assert_fsck_clean(spool_cli)
