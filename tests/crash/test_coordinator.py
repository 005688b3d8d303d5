"""The coordinator with real processes: killed and restarted under load, woken by inotify, and
driving chains and cancels.

- SIGKILL and restart it several times while 2 workers run 100 jobs (some needing it: retries
  after a backoff, drops to ingest): every job done once, `spool fsck` clean;
- a second coordinator waits on the first's lock and takes over when the first dies;
- with a 30 s poll, watchdog still wakes an idle worker for a new job and the coordinator for a
  dropped file within 1 s;
- B depends on A: A dies -> B skipped; A requeued and done -> B re-armed and done; a reject's
  child is skipped too. Cancel of a leased job kills the attempt at the next heartbeat.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from support import run_spool, wait_until

from spool.base.errors import InvalidJob, NotFound


def test_the_coordinator_killed_and_restarted_under_load_loses_nothing(kit, tmp_path: Path) -> None:
    plain = kit.submit_many(60, "sleep", {"seconds": 0.03})
    retried = kit.submit_many(25, "fail_until", {"attempt": 2}, max_tries=3)  # the retry needs a coordinator
    for n in range(15):  # drops need a coordinator to be ingested
        drop = kit.spool_dir / "pending" / f"drop-{n}.yaml.tmp"
        drop.write_text(f"task: echo\nkey: drop-{n}\nargs: {{n: {n}}}\n")
        drop.rename(kit.spool_dir / "pending" / f"drop-{n}.yaml")
    for name in ("w1", "w2"):
        kit.worker(name)
    coordinator = kit.coordinator()
    restarts = 0
    deadline = time.monotonic() + 60
    while restarts < 6:
        assert time.monotonic() < deadline, "the jobs ran out before the restarts"
        time.sleep(0.4 + 0.1 * restarts)  # let it get somewhere (some passes, a reconcile) before the kill
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        coordinator = kit.coordinator()
        restarts += 1
    done = kit.spool_dir / "done"
    wait_until(lambda: len(list(done.glob("*.yaml"))) == 100, timeout=60, message="all 100 jobs done")

    dropped = [path.stem for path in done.glob("*.yaml") if path.stem not in {*plain, *retried}]
    assert len(dropped) == 15
    for job_id in dropped:
        kit.wait_state(job_id, "done")
    kit.assert_all_done(plain + retried + dropped)
    assert sorted(kit.sp.status(job_id)["dropped_as"] for job_id in dropped) == sorted(
        f"drop-{n}.yaml" for n in range(15)
    )
    for job_id in retried:
        status = kit.sp.status(job_id)
        assert [r["outcome"] for r in status["attempts"]] == ["failed", "done"], status
    assert not [n for n in os.listdir(kit.spool_dir / "pending") if not n.startswith(".")]
    print(f"\n100 jobs done across {restarts} coordinator SIGKILLs")
    kit.fsck_ok()


def test_a_second_coordinator_waits_and_takes_over_when_the_first_dies(kit) -> None:
    first = kit.coordinator()
    kit.wait_logged(first, "coordinator started")
    second = kit.coordinator()
    kit.wait_logged(second, "another coordinator runs; waiting")
    kit.worker("w1")
    before = kit.sp.submit("fail_until", {"attempt": 2})
    kit.wait_state(before, "done")
    assert "coordinator started" not in kit.log(second), "only one coordinator at a time"

    first.send_signal(signal.SIGKILL)
    kit.wait_logged(second, "coordinator started")
    after = kit.sp.submit("fail_until", {"attempt": 2})  # its retry needs a coordinator
    assert [r["outcome"] for r in kit.wait_state(after, "done")["attempts"]] == ["failed", "done"]
    assert kit.sp.ledger.meta("coordinator_pid") == str(second.pid)
    kit.fsck_ok()


def test_watchdog_wakes_an_idle_worker_and_the_coordinator_long_before_the_poll(kit, tmp_path: Path) -> None:
    slow_poll = ("--poll-seconds", "30")
    coordinator = kit.coordinator(*slow_poll)
    worker = kit.worker("w1", *slow_poll)
    kit.wait_logged(coordinator, "coordinator started")
    kit.wait_logged(worker, "worker w1 started")
    warm = kit.sp.submit("trace", {"path": str(tmp_path / "warm")})  # the attempt child is spawned once
    kit.wait_state(warm, "done", timeout=35)
    wait_until(lambda: kit.sp.ledger.meta("coordinator_seen"), timeout=10, message="a coordinator pass")

    trace = tmp_path / "trace"
    submitted_at = time.time()
    job_id = kit.sp.submit("trace", {"path": str(trace)})
    started = wait_until(lambda: kit.run_of(trace, 1), timeout=35, message="the job to start")
    pickup_seconds = started.at - submitted_at

    dropped_at = time.monotonic()
    drop = kit.spool_dir / "pending" / "late.yaml"
    (kit.spool_dir / "pending" / "late.yaml.tmp").write_text("task: echo\nargs: {n: 1}\n")
    os.rename(drop.with_name("late.yaml.tmp"), drop)
    wait_until(lambda: not drop.exists(), timeout=35, message="the drop to be ingested")
    ingest_seconds = time.monotonic() - dropped_at
    print(
        f"\nwith poll 30 s: submit-to-start {pickup_seconds * 1000:.0f} ms (idle worker), "
        f"drop-to-ingest {ingest_seconds * 1000:.0f} ms (coordinator)"
    )
    assert pickup_seconds < 1.0
    assert ingest_seconds < 1.0
    kit.wait_state(job_id, "done")

    def ingested() -> str | None:
        for other in kit.folders():
            try:
                view = kit.sp.status(other)
            except (InvalidJob, FileNotFoundError, NotFound):
                continue  # mid-ingest (renamed, not yet rewritten) or mid-move: look again
            if other not in (warm, job_id) and view["dropped_as"] == "late.yaml":
                return other
        return None

    kit.wait_state(wait_until(ingested, timeout=10, message="the drop's job"), "done")


def test_a_dead_dependency_skips_its_child_and_a_requeue_rearms_it(kit) -> None:
    kit.coordinator()
    kit.worker("w1")
    parent = kit.sp.submit("fail_until", {"attempt": 2}, max_tries=1)  # fails once: dead, then fine
    child = kit.sp.submit("echo", {"n": 1}, depends_on=[parent])
    rejected = kit.sp.submit("reject", {"why": "never"})
    orphan = kit.sp.submit("echo", {"n": 2}, depends_on=[rejected])

    assert kit.wait_state(parent, "dead")["reason"] == "failed"
    skipped = kit.wait_state(child, "dead")
    assert (skipped["reason"], skipped["skipped_because"], skipped["attempts"]) == ("skipped", parent, [])
    assert kit.wait_state(rejected, "dead")["attempts"][0]["outcome"] == "rejected"
    skipped = kit.wait_state(orphan, "dead")
    assert (skipped["reason"], skipped["skipped_because"]) == ("skipped", rejected)

    requeued = run_spool("requeue", parent, spool=kit.spool_dir)
    assert requeued.returncode == 0, requeued.stderr
    status = kit.wait_state(parent, "done")
    assert [r["outcome"] for r in status["attempts"]] == ["failed", "done"]
    status = kit.wait_state(child, "done")
    assert status["reason"] is None and status["skipped_because"] is None
    assert kit.sp.result(child)["attempt"] == 1
    assert kit.state(orphan) == "dead", "only the requeued parent's children are re-armed"
    kit.fsck_ok()


def test_cancel_of_a_leased_job_kills_its_attempt_at_the_next_heartbeat(kit, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    kit.coordinator()
    worker = kit.worker("w1")
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 60})
    attempt = wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="the attempt to start")
    assert attempt.pid in kit.children(worker.pid)

    cancelled_at = time.monotonic()
    asked = run_spool("cancel", job_id, spool=kit.spool_dir)
    assert asked.returncode == 0, asked.stderr
    status = kit.wait_state(job_id, "dead", timeout=10)
    wait_until(lambda: not kit.alive(attempt.pid), timeout=10, message="the attempt child to be killed")
    # A heartbeat comes every third of the lease; the cancel is acted on at the next one.
    assert time.monotonic() - cancelled_at < kit.lease_seconds + 2
    assert status["reason"] == "cancelled"
    assert [(r["attempt"], r["outcome"]) for r in status["attempts"]] == [(1, "cancelled")]
    assert not kit.sp.ledger.row(job_id)["ready"]
    assert not list((kit.spool_dir / "leased").glob(f".{job_id}.*")), "its heartbeat and cancel files are gone"
    assert worker.poll() is None
    kit.fsck_ok()
