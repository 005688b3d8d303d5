"""I/O errors through the fsio seam: ENOSPC and EIO at every risky call of a submit, a claim, a
complete and a fail, one call at a time, of a ``spool queue set`` (``set_limits``: the queue file
staged, fsync'd, renamed over queues/<name>.yaml, queues/ fsync'd), and of a claim, a complete and a
fail in a queue at concurrency 1 with a rate; then a real full disk; then daemons whose fsync fails.

For each transition a recording pass (``FaultFS`` failing nothing) lists the risky calls it
makes (writes, fsyncs, renames, links); then, on a fresh spool each time, the k-th call fails
with ENOSPC, then with EIO. After each failure:

- the transition raised: nothing was acknowledged that was not durable. A failed fsync raises
  ``DurabilityError`` and is never called again on that fd; otherwise ENOSPC is ``DiskFull``
  (the CLI's exit 75) and EIO an ``OSError`` (exit 1);
- no partial file is visible: every job file decodes, every result and key parses, tmp/ is
  empty (the failing process removed its own staging files), no job is in two folders;
- nothing else is lost: the bystander jobs' files are byte for byte the same;
- recovery (the client's retry of a submit, a restarted coordinator and worker) brings every
  job to done or dead exactly once, and fsck is clean;
- in the limited queue: its file is whole and holds the old limits or the new (after a queue
  set's retry, the new, in force in the ledger); every job in leased/ is counted against the cap;
  and recovery finishes the queue's second job too, so no slot stayed taken.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from faultfs import FaultFS, Op
from spool import Spool
from spool.base.errors import DiskFull, DurabilityError, SpoolError
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import State, worker_lock_name
from spool.disk.locks import acquire
from spool.moves import spares
from spool.moves.fence import Held, start_queued
from spool.moves.group import Finished, claim_many, complete_many
from spool.moves.store import read_job
from spool.moves.transitions import Lease, claim, complete, fail
from spool.queues import Limits, limits_in_force, read_files, set_limits
from support import ROOT, SPOOL_CMD, fill_disk, wait_until

Ctx = dict[str, Any]
ERRORS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}
WORKER = "w-io"


@dataclass(frozen=True)
class Transition:
    name: str
    setup: Callable[[Spool, Ctx], None]
    act: Callable[[Spool, Ctx], Any]
    retry: Callable[[Spool, Ctx], None]
    expect: frozenset[str]  # acceptable end outcomes of the target job


def _submit(sp: Spool, ctx: Ctx) -> Any:
    return sp.submit("echo", {"n": 1}, key="k-io")


def _target(max_tries: int, queue: str | None = None) -> Callable[[Spool, Ctx], None]:
    def setup(sp: Spool, ctx: Ctx) -> None:
        ctx["job"] = sp.submit("echo", {"n": 1}, max_tries=max_tries, queue=queue)

    return setup


def _claimed(max_tries: int, queue: str | None = None) -> Callable[[Spool, Ctx], None]:
    def setup(sp: Spool, ctx: Ctx) -> None:
        _target(max_tries, queue)(sp, ctx)
        with acquire(sp.layout.fd("locks"), worker_lock_name(WORKER), blocking=True):
            job_file = claim(sp, WORKER, ["echo"])
        assert job_file is not None and job_file.id == ctx["job"]
        ctx["lease"] = Lease(job_file.id, WORKER, job_file.attempt)

    return setup


def _as_worker(step: Callable[[Spool, Ctx], Any]) -> Callable[[Spool, Ctx], Any]:
    """The step under the worker's liveness lock: when it fails the worker exits, freeing it."""

    def act(sp: Spool, ctx: Ctx) -> Any:
        with acquire(sp.layout.fd("locks"), worker_lock_name(WORKER), blocking=True):
            return step(sp, ctx)

    return act


def _resubmit(sp: Spool, ctx: Ctx) -> None:
    ctx["job"] = _submit(sp, ctx)


def _no_retry(sp: Spool, ctx: Ctx) -> None:
    pass


def _submit_batch(sp: Spool, ctx: Ctx) -> Any:
    """submit_many of two keyed jobs: its files staged unsynced, one syncfs (a risky fsync that
    FaultFS fails like the kernel would), the keys, the renames, one fsync of each folder."""
    return sp.submit_many([sp.spec("echo", {"n": 1}, key="k-io"), sp.spec("echo", {"n": 2}, key="k-io-2")])


def _resubmit_batch(sp: Spool, ctx: Ctx) -> None:
    ctx["job"] = _submit_batch(sp, ctx)[0].id


CAPPED = "capped"


def _limited(setup: Callable[[Spool, Ctx], None]) -> Callable[[Spool, Ctx], None]:
    """``setup`` with queues/capped.yaml at concurrency 1 and a rate (its claims rows written),
    the target job and a second one in that queue: recovery can finish both only if the
    failure left the queue's one slot free (or the coordinator's reconcile freed it)."""

    def limited(sp: Spool, ctx: Ctx) -> None:
        set_limits(sp, CAPPED, concurrency=1, rate="50/s")
        setup(sp, ctx)
        ctx["second"] = sp.submit("echo", {"n": 2}, queue=CAPPED)

    return limited


def _set_limits(sp: Spool, ctx: Ctx) -> Any:
    """``spool queue set capped --concurrency 2 --rate 20/s``: the file staged and fsync'd, renamed
    over queues/capped.yaml, queues/ fsync'd, then the ledger's row."""
    return set_limits(sp, CAPPED, concurrency=2, rate="20/s")


def _set_limits_again(sp: Spool, ctx: Ctx) -> None:
    _set_limits(sp, ctx)


def _warm_worker(claimed_now: bool) -> Callable[[Spool, Ctx], None]:
    """A worker's handle that keeps spare files (``spool.moves.spares``) and has finished a batch
    of two already (its spares: the old copies its claim swapped out, the leased/ copies its
    completion moved to tmp/); then the target and a second job, claimed in a batch of two when
    ``claimed_now`` (the spares settled by that claim and the worker's first chore after it,
    ``spares.settle_claims``: the completion writes over them)."""

    def setup(sp: Spool, ctx: Ctx) -> None:
        spares.begin(sp)
        for n in range(2):
            sp.submit("echo", {"warm": n})
        with acquire(sp.layout.fd("locks"), worker_lock_name(WORKER), blocking=True):
            _batch_done(sp, _claim_then_settle(sp, lambda: claim_many(sp, WORKER, ["echo"], 2)))
            ctx["job"], ctx["second"] = sp.submit("echo", {"n": 1}), sp.submit("echo", {"n": 2})
            if claimed_now:
                ctx["members"] = _claim_then_settle(sp, lambda: claim_many(sp, WORKER, ["echo"], 2))
                assert [held.job_file.id for held in ctx["members"]] == [ctx["job"], ctx["second"]]

    return setup


def _claim_then_settle(sp: Spool, claiming: Callable[[], Any]) -> Any:
    """A worker's claim and its first chore while the attempt runs: pending/'s fsync, after which
    the claim's old copies may be written over (``spares.settle_claims``)."""
    claimed = claiming()
    spares.settle_claims(sp)
    return claimed


def _batch_done(sp: Spool, members: list[Held]) -> Any:
    finished = [Finished(Lease(h.job_file.id, WORKER, h.job_file.attempt), h, b'{"by": "w-io"}') for h in members]
    for member in finished[1:]:
        start_queued(sp, member.lease)
    return complete_many(sp, finished)


def _over_spares(step: Callable[[Spool, Ctx], Any]) -> Callable[[Spool, Ctx], Any]:
    """``step`` as a worker over spares: it removes them when it stops, failed or not."""

    def act(sp: Spool, ctx: Ctx) -> Any:
        try:
            return _as_worker(step)(sp, ctx)
        finally:
            spares.drop_all(sp)

    return act


TRANSITIONS = [
    Transition("submit", lambda sp, ctx: None, _submit, _resubmit, frozenset({"done"})),
    Transition("submit_many", lambda sp, ctx: None, _submit_batch, _resubmit_batch, frozenset({"done"})),
    Transition(
        "claim", _target(3), _as_worker(lambda sp, ctx: claim(sp, WORKER, ["echo"])), _no_retry, frozenset({"done"})
    ),
    Transition(
        "complete",
        _claimed(3),
        _as_worker(lambda sp, ctx: complete(sp, ctx["lease"], b'{"by": "w-io"}')),
        _no_retry,
        frozenset({"done"}),
    ),
    Transition(
        "fail",
        _claimed(1),
        _as_worker(lambda sp, ctx: fail(sp, ctx["lease"], "RuntimeError: boom")),
        _no_retry,
        frozenset({"dead:failed", "dead:expired"}),
    ),
    Transition(
        "claim_batch_over_spares",
        _warm_worker(claimed_now=False),
        _over_spares(lambda sp, ctx: _claim_then_settle(sp, lambda: claim_many(sp, WORKER, ["echo"], 2))),
        _no_retry,
        frozenset({"done"}),
    ),
    Transition(
        "claim_over_spares",
        _warm_worker(claimed_now=False),
        _over_spares(lambda sp, ctx: _claim_then_settle(sp, lambda: claim(sp, WORKER, ["echo"]))),
        _no_retry,
        frozenset({"done"}),
    ),
    Transition(
        "complete_batch_over_spares",
        _warm_worker(claimed_now=True),
        _over_spares(lambda sp, ctx: _batch_done(sp, ctx["members"])),
        _no_retry,
        frozenset({"done"}),
    ),
    Transition("queue_set", _limited(_target(3, CAPPED)), _set_limits, _set_limits_again, frozenset({"done"})),
    Transition(
        "claim_limited",
        _limited(_target(3, CAPPED)),
        _as_worker(lambda sp, ctx: claim(sp, WORKER, ["echo"])),
        _no_retry,
        frozenset({"done"}),
    ),
    Transition(
        "complete_limited",
        _limited(_claimed(3, CAPPED)),
        _as_worker(lambda sp, ctx: complete(sp, ctx["lease"], b'{"by": "w-io"}')),
        _no_retry,
        frozenset({"done"}),
    ),
    Transition(
        "fail_limited",
        _limited(_claimed(1, CAPPED)),
        _as_worker(lambda sp, ctx: fail(sp, ctx["lease"], "RuntimeError: boom")),
        _no_retry,
        frozenset({"dead:failed", "dead:expired"}),
    ),
]


Prepare = Callable[[str, Transition], tuple[Spool, Ctx, dict[str, bytes]]]


@pytest.fixture
def prepare(
    make_spool: Callable[[str], Path],
    add_bystanders: Callable[[Spool], dict[str, str]],
    bystander_files: Callable[[Spool, Ctx], dict[str, bytes]],
) -> Prepare:
    """A fresh spool named ``name`` with the bystanders and the transition's setup done; returns
    the open Spool, the context and the bystanders' files."""

    def run(name: str, transition: Transition) -> tuple[Spool, Ctx, dict[str, bytes]]:
        sp = Spool(make_spool(name), environ={})
        ctx: Ctx = dict(add_bystanders(sp))
        transition.setup(sp, ctx)
        return sp, ctx, bystander_files(sp, ctx)

    return run


def _risky_calls(prepare: Prepare, transition: Transition) -> list[Op]:
    """A recording pass: the risky calls the transition makes when nothing fails."""
    sp, ctx, _ = prepare(f"{transition.name}-record", transition)
    recorder = FaultFS()
    with sp, recorder.installed():
        transition.act(sp, ctx)
    assert recorder.ops, f"{transition.name} made no risky call"
    return recorder.ops


def _absorbed(faults: FaultFS) -> bool:
    """The failed call moved a spare (``spool.moves.spares``): a heartbeat file into leased/, a
    done job's leased/ copy into tmp/. A spare is an optimisation: its move failing, the worker
    writes a new heartbeat or removes the copy, and the transition goes on unharmed."""
    failed = faults.failed
    assert failed is not None
    return failed.method == "rename_noreplace" and (failed.name.startswith(".") or failed.name.endswith(".tmp"))


def _expected_error(faults: FaultFS, error: int) -> type[BaseException]:
    assert faults.failed is not None
    if faults.failed.kind == "fsync":
        return DurabilityError
    return DiskFull if error == errno.ENOSPC else OSError


def _cli_exit_code(err: BaseException) -> int:
    """What ``spool`` exits with for this error (cli/main.py maps them in one place)."""
    if isinstance(err, SpoolError):
        return err.exit_code
    return 1 if isinstance(err, OSError) else 2


def _check_nothing_torn(sp: Spool) -> None:
    """Every file a reader can see is whole; tmp/ holds nothing; a job is in two folders only
    when a move forward to done/ or dead/ committed its new copy and failed before removing the
    old one (``publish_job``): the new copy is the more advanced, and recovery keeps it."""
    seen: dict[str, str] = {}
    for state in State:
        for name in fs.list_dir(sp.layout.fd(state)):
            if name.startswith("."):
                continue
            job_id = name.removesuffix(".yaml")
            read_job(sp, state, job_id)  # InvalidJob for a torn or half-written file
            if job_id in seen:
                assert (seen[job_id], state.value) in (("leased", "done"), ("leased", "dead")), (
                    f"{job_id} in {seen[job_id]} and {state.value}"
                )
            seen[job_id] = state.value
    for name in fs.list_dir(sp.layout.fd("results")):
        json.loads(fs.read_file(sp.layout.fd("results"), name, 1 << 20))
    for name in fs.list_dir(sp.layout.fd("keys")):
        held = fs.read_file(sp.layout.fd("keys"), name, 256)
        assert held.endswith(b"\n") and is_valid_id(held.decode().strip()), f"keys/{name}: {held!r}"
    leftovers = fs.list_dir(sp.layout.fd("tmp"))
    assert not leftovers, f"tmp/ still holds {leftovers}"
    for name, queue_file in read_files(sp).items():
        assert queue_file.error is None, f"queues/{name}.yaml: {queue_file.error}"


OLD_LIMITS, NEW_LIMITS = Limits(1, 50, 1000), Limits(2, 20, 1000)


def _check_slots_counted(sp: Spool, where: str) -> None:
    """Every job in leased/ is a 'leased' row of the ledger, so it holds a slot of its queue: a
    failed step never lets a claim past a cap. (The converse may not hold until the coordinator
    reconciles: a claim whose rename failed with EIO leaves its reserved row 'leased', a slot
    held for nothing; recovery must free it, or it could not finish the queue's second job.)"""
    rows = sp.ledger.states()
    leased = {name.removesuffix(".yaml") for name in fs.list_dir(sp.layout.fd(State.LEASED)) if name.endswith(".yaml")}
    uncounted = sorted(job_id for job_id in leased if rows.get(job_id) != "leased")
    assert not uncounted, f"{where}: in leased/ but not counted against their queue's cap: {uncounted}"


def _check_limits(sp: Spool, transition: Transition, where: str, *, retried: bool) -> None:
    """The capped queue's file holds its old limits or the new ones, whole; after recovery (the
    coordinator's sync) the ledger holds the file's; after a queue set's retry, the new ones."""
    if transition.name == "queue_set":
        allowed = {NEW_LIMITS} if retried else {OLD_LIMITS, NEW_LIMITS}
    elif transition.name.endswith("_limited"):
        allowed = {OLD_LIMITS}
    else:
        return
    found = read_files(sp).get(CAPPED)
    assert found is not None, f"{where}: queues/{CAPPED}.yaml is gone"
    on_file = found.limits
    assert on_file in allowed, f"{where}: queues/{CAPPED}.yaml holds {on_file}"
    if retried:
        assert limits_in_force(sp, CAPPED) == on_file, f"{where}: the ledger holds {limits_in_force(sp, CAPPED)}"


@pytest.mark.parametrize("error_name", sorted(ERRORS))
@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
def test_each_risky_call_fails_cleanly(
    transition: Transition,
    error_name: str,
    prepare: Prepare,
    recover: Callable[..., None],
    check_end_state: Callable[[Spool], dict[str, Any]],
    bystander_files: Callable[[Spool, Ctx], dict[str, bytes]],
) -> None:
    error = ERRORS[error_name]
    calls = len(_risky_calls(prepare, transition))
    for k in range(1, calls + 1):
        sp, ctx, before = prepare(f"{transition.name}-{error_name}-{k}", transition)
        faults = FaultFS(fail_at=k, error=error)
        where = f"{transition.name}, call {k} of {calls} failing with {error_name}"
        with sp:
            raised: BaseException | None = None
            with faults.installed():
                try:
                    transition.act(sp, ctx)
                except Exception as err:  # noqa: BLE001  (which one is the assertion below)
                    raised = err
            where = f"{transition.name}, {faults.failed} failing with {error_name}"
            if raised is None:
                assert _absorbed(faults), f"{where}: no error reached the caller"
            else:
                expected = _expected_error(faults, error)
                assert isinstance(raised, expected), f"{where}: raised {raised!r}, not {expected.__name__}"
            if raised is not None and expected is not DurabilityError:
                assert not isinstance(raised, DurabilityError)
                assert _cli_exit_code(raised) == (75 if error == errno.ENOSPC else 1), f"{where}: {raised!r}"
            if raised is not None:  # (an absorbed rename's folder is fsync'd later, as it must be)
                assert not faults.fsyncs_after_failure(), f"{where}: fsync retried: {faults.fsyncs_after_failure()}"
            _check_nothing_torn(sp)
            _check_limits(sp, transition, where, retried=False)
            _check_slots_counted(sp, where)
            assert bystander_files(sp, ctx) == before, f"{where}: another job's files changed"

            transition.retry(sp, ctx)
            recover(sp)
            jobs = check_end_state(sp)
            _check_limits(sp, transition, where, retried=True)
            rows = sp.ledger.states()
            assert all(rows[job_id] == state.value for job_id, (state, _f) in jobs.items()), f"{where}: {rows}"
            assert jobs[ctx["bystander"]][0] is State.PENDING
            if transition.name in ("submit", "submit_many"):
                assert [j.job.key for _s, j in jobs.values()].count("k-io") == 1, f"{where}: {jobs}"
            state, job_file = jobs[ctx["job"]]
            outcome = "done" if state is State.DONE else f"dead:{job_file.reason}"
            assert outcome in transition.expect, f"{where}: ended {outcome}"


def test_fault_injection_reaches_every_kind(prepare: Prepare) -> None:
    """The matrix above means something only if the transitions make every kind of risky call."""
    kinds = {op.kind for transition in TRANSITIONS for op in _risky_calls(prepare, transition)}
    assert kinds == {"write", "fsync", "rename", "link"}


def _injected_spool(root: Path, *args: str, spec: str) -> subprocess.CompletedProcess[str]:
    """``spool ARGS`` in a process whose FAULTFS_FAIL=spec call fails (see inject_faults.py)."""
    code = "import tests.faults.inject_faults; from spool.cli.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "--spool", str(root), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "FAULTFS_FAIL": spec},
    )


@pytest.mark.parametrize(
    ("spec", "exit_code", "words", "committed"),
    [
        ("write:1:ENOSPC", 75, "no space left", False),
        ("rename:1:ENOSPC", 75, "no space left", False),
        ("write:1:EIO", 1, "Input/output error", False),
        ("fsync:1:EIO", 1, "Input/output error", False),
        # The folder's fsync after the commit: the job file is in pending/ but not known durable, so
        # the caller is told the submit failed (as after a crash there, a key makes a retry safe). A
        # failed fsync is final whatever its errno: DurabilityError, exit 1.
        ("fsync:2:ENOSPC", 1, "fsync", True),
    ],
)
def test_cli_submit_says_why_it_failed(
    spec: str, exit_code: int, words: str, committed: bool, fast_spool: Path
) -> None:
    done = _injected_spool(fast_spool, "submit", "echo", "-a", "n=1", spec=spec)
    assert done.returncode == exit_code, done.stderr
    assert done.stdout == "", "an id was printed for a submit that failed"
    assert done.stderr.count("\n") == 1 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    jobs = [p for p in (fast_spool / "pending").iterdir() if not p.name.startswith(".")]
    assert len(jobs) == (1 if committed else 0), jobs
    assert not any((fast_spool / "tmp").iterdir())


# -- a real full disk -------------------------------------------------------------------------


def _spool(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPOOL_CMD, "--spool", str(root), *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


@pytest.mark.parametrize("ledger_open", [False, True], ids=["alone", "beside-a-coordinator"])
def test_real_full_disk_refuses_submit_with_75_and_stays_clean(small_disk: Path, ledger_open: bool) -> None:
    """Alone, the submit can't even open the ledger (SQLite's WAL index needs a page); beside a
    process that holds the ledger open, it gets as far as writing the job file, and ENOSPC there."""
    root = small_disk / "spool"
    assert _spool("init", root=root).returncode == 0
    first = _spool("submit", "echo", "-a", "n=1", root=root)
    assert first.returncode == 0, first.stderr

    holder = Spool(root, environ={})
    if ledger_open:
        holder.ledger.counts()
    fill_disk(small_disk / "filler")
    full = _spool("submit", "echo", "-a", "n=2", "--key", "on-a-full-disk", root=root)
    holder.close()
    assert full.returncode == 75, full.stderr
    assert full.stdout == "", "an id was printed for a job that was not written"
    assert full.stderr.count("\n") == 1 and "no space" in full.stderr.lower(), full.stderr
    assert "Traceback" not in full.stderr
    assert [p.name for p in (root / "pending").iterdir() if not p.name.startswith(".")] == [
        f"{first.stdout.strip()}.yaml"
    ]
    assert not any((root / "keys").iterdir()), "a key was reserved for a refused submit"
    assert not any((root / "tmp").iterdir()), "a staging file was left behind"

    (small_disk / "filler").unlink()  # fsck reads the ledger, which SQLite can't open on a full disk
    checked = _spool("fsck", root=root)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    again = _spool("submit", "echo", "-a", "n=2", "--key", "on-a-full-disk", root=root)
    assert again.returncode == 0, again.stderr
    assert is_valid_id(again.stdout.strip())
    checked = _spool("fsck", root=root)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- daemons whose fsync fails ----------------------------------------------------------------


def _injected(spec: str) -> dict[str, str]:
    return {"FAULTFS_FAIL": spec}


def _finished(root: Path, job_id: str) -> bool:
    return any((root / state / f"{job_id}.yaml").exists() for state in ("done", "dead"))


def _restart_and_finish(procs: Any, root: Path, job_id: str | None = None) -> None:
    procs.start("coordinator", name="coordinator")
    procs.start("worker", "--import", "examples.tasks", name="worker")
    if job_id is None:  # a drop: its id is made at ingest
        wait_until(lambda: any((root / "done").glob("*.yaml")), timeout=60, message="the drop done")
    else:
        wait_until(lambda: _finished(root, job_id), timeout=60, message=f"{job_id} to finish")
    procs.stop()


def _one_error_line(output: str, role: str, pid: int) -> None:
    """The daemon said why it stopped once, in its own log format (a supervisor's log), no traceback."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "Input/output error" in line]
    assert len(lines) == 1, output
    assert f"{role}[{pid}] ERROR" in lines[0], lines[0]


@pytest.mark.parametrize(
    ("nth_fsync", "outcomes"), [(1, ["lost", "done"]), (3, ["expired", "done"])], ids=["claim-fsync", "result-fsync"]
)
def test_worker_exits_1_when_an_fsync_fails(
    nth_fsync: int,
    outcomes: list[str],
    fast_spool: Path,
    procs: Any,
    check_end_state: Callable[[Spool], dict[str, Any]],
) -> None:
    """fsync 1 is the claim's counted try, fsync 3 the staged result (see the recording test)."""
    with Spool(fast_spool, environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
    worker = procs.start(
        "worker",
        "--import",
        "tests.faults.inject_faults",
        "--import",
        "examples.tasks",
        env=_injected(f"fsync:{nth_fsync}:EIO"),
        name="faulty-worker",
    )
    assert worker.wait(timeout=60) == 1
    _one_error_line(procs.output(), "worker", worker.pid)

    _restart_and_finish(procs, fast_spool, job_id)
    with Spool(fast_spool, environ={}) as sp:
        state, job_file = check_end_state(sp)[job_id]
        assert state is State.DONE
        assert [record.outcome for record in job_file.attempts] == outcomes


def test_coordinator_exits_1_when_an_fsync_fails(
    fast_spool: Path, procs: Any, check_end_state: Callable[[Spool], dict[str, Any]]
) -> None:
    (fast_spool / "pending" / "drop.yaml").write_text("task: echo\nargs: {n: 1}\n")
    log = open(procs.logs / "faulty-coordinator.log", "wb")
    coordinator = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import tests.faults.inject_faults; from spool.cli.main import main; main()",
            "--spool",
            str(fast_spool),
            "coordinator",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, **_injected("fsync:1:EIO")},
    )
    log.close()
    procs.started.append(coordinator)  # killed at teardown with the others
    assert coordinator.wait(timeout=60) == 1
    _one_error_line(procs.output(), "coordinator", coordinator.pid)

    _restart_and_finish(procs, fast_spool)
    with Spool(fast_spool, environ={}) as sp:
        jobs = check_end_state(sp)
        assert [state for state, _f in jobs.values()] == [State.DONE]
