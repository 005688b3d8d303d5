"""A worker whose wall clock is an hour ahead (libfaketime) beside a coordinator with the right one.

Only the coordinator's monotonic clock decides leases, retries and readiness (docs/reliability.md, "4. Leases"),
so the wrong clock can neither keep nor lose a lease, nor change a backoff or the pickup order:
only the timestamps the worker writes are off. libfaketime leaves the monotonic clock alone
here (FAKETIME_DONT_FAKE_MONOTONIC=1), as a host with a wrong wall clock would.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest
from support import wait_until

from spool.base.errors import NotFound
from spool.disk.layout import State

HOUR = 3600.0


def _seconds_ahead(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp() - time.time()


@pytest.fixture(scope="module")
def wrong_clock() -> dict[str, str]:
    """The environment that puts a process's wall clock an hour ahead; skips without libfaketime."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        reason = (
            "libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime); wrong-clock tests skipped"
        )
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    env = {"LD_PRELOAD": found[0], "FAKETIME": "+1h", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time(), time.monotonic())"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    wall, monotonic = (float(x) for x in probe.stdout.split())
    assert abs(wall - time.time() - HOUR) < 60, f"libfaketime did not move the wall clock: {probe}"
    assert abs(monotonic - time.monotonic()) < 60, "libfaketime moved the monotonic clock too"
    return env


def test_a_worker_an_hour_ahead_keeps_its_lease_by_heartbeats(kit, wrong_clock, tmp_path) -> None:
    trace = tmp_path / "trace"
    kit.coordinator()
    kit.worker("ahead", env=wrong_clock)
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 3 * kit.lease_seconds})
    status = kit.wait_state(job_id, "done", timeout=3 * kit.lease_seconds + 30)
    assert [(r["attempt"], r["worker"], r["outcome"]) for r in status["attempts"]] == [(1, "ahead", "done")]
    assert [r.attempt for r in kit.runs(trace)] == [1]
    ahead = _seconds_ahead(status["attempts"][0]["started"])
    assert abs(ahead - HOUR) < 60 + 3 * kit.lease_seconds, f"the worker's own stamp is {ahead:.0f}s ahead, not ~1h"


def test_a_stopped_worker_an_hour_ahead_loses_its_lease_on_the_coordinators_clock(kit, wrong_clock, tmp_path) -> None:
    trace = tmp_path / "trace"
    kit.coordinator()
    ahead = kit.worker("ahead", env=wrong_clock)
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 60})
    wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="the attempt to start")
    ahead.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    status = kit.wait_state(job_id, "pending", timeout=3 * kit.lease_seconds + 10)
    took = time.monotonic() - stopped_at
    assert [(r["worker"], r["outcome"]) for r in status["attempts"]] == [("ahead", "expired")]
    assert "no heartbeat" in status["error"]
    # Its last heartbeat came at most a third of the term before the stop; a decision on the
    # worker's clock would be an hour off either way.
    assert kit.lease_seconds * 2 / 3 - 0.1 < took < kit.lease_seconds + 5, f"expired {took:.1f}s after the stop"
    ahead.send_signal(signal.SIGCONT)


def test_a_worker_an_hour_ahead_changes_no_backoff_and_no_pickup_order(kit, wrong_clock, tmp_path) -> None:
    base, ceiling = 1.0, 2.0
    backoff = ("--backoff-base-seconds", str(base), "--backoff-max-seconds", str(ceiling))
    order = tmp_path / "order"
    flaky = kit.sp.submit("fail_until", {"attempt": 2}, priority=9)
    low_first = kit.sp.submit("touch", {"path": str(order)})
    high = kit.sp.submit("touch", {"path": str(order)}, priority=5)
    low_second = kit.sp.submit("touch", {"path": str(order)})
    # Due in 3 s on every right clock, long past on the worker's: it must wait for the right one.
    due = time.time() + 3
    delayed = kit.sp.submit("touch", {"path": str(order)}, priority=5, delay_seconds=3)
    kit.coordinator(*backoff)
    kit.worker("ahead", *backoff, env=wrong_clock)

    def backed_off() -> float | None:
        try:  # one read: the job may be claimed between two
            state, job_file = kit.sp.job(flaky)
        except (FileNotFoundError, NotFound):
            return None  # between two folders this instant
        if state is State.PENDING and job_file.attempts:
            return job_file.backoff_seconds
        return None

    waited = wait_until(backed_off, timeout=30, interval=0.01, message="the failed try's backoff")
    assert base * 0.5 <= waited <= base, f"backoff {waited}s for the first retry; configured base {base}s"
    status = kit.wait_state(flaky, "done")
    failed, retried = status["attempts"]
    assert failed["outcome"] == "failed" and retried["outcome"] == "done"
    # Both stamps come from the same (wrong) clock, so their gap is the real delay.
    delay = _seconds_ahead(retried["started"]) - _seconds_ahead(failed["ended"])
    assert waited <= delay + 0.05 < waited + 1, f"retried {delay:.2f}s after the failure (backoff {waited}s)"

    started = kit.wait_state(delayed, "done", timeout=30)["attempts"][0]["started"]
    late = _seconds_ahead(started) - HOUR + time.time() - due
    assert -0.05 < late < 1, f"the delayed job started {late:+.2f}s from when it was due"
    ran = [line.split()[0] for line in order.read_text().splitlines()]
    assert [job_id for job_id in ran if job_id != delayed] == [high, low_first, low_second], (
        "priority, then the order jobs became ready"
    )
    for job_id in (flaky, high, low_first, delayed):
        started = kit.sp.status(job_id)["attempts"][0]["started"]
        assert abs(_seconds_ahead(started) - HOUR) < 120, f"{job_id}'s started {started} is not ~1h ahead"
    kit.fsck_ok()


def test_a_paused_coordinator_gives_every_lease_a_fresh_term(kit, tmp_path) -> None:
    """The coordinator's own clock jumps when it is paused (a SIGSTOP, a suspended VM): a lease
    that it could not watch gets a fresh term instead of expiring on its first look back."""
    trace = tmp_path / "trace"
    coordinator = kit.coordinator()
    worker = kit.worker("w1")
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 9})
    wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="the attempt to start")
    # A coordinator stopped before its first pass has no clock reading to jump from: wait for one.
    wait_until(lambda: kit.sp.ledger.meta("coordinator_seen"), timeout=30, message="the coordinator's first pass")
    pause_seconds = 6.0  # past the coordinator's pause threshold, max(lease / 2, 5 s)
    for proc in (worker, coordinator):
        proc.send_signal(signal.SIGSTOP)
    seen = kit.sp.ledger.meta("coordinator_seen")
    time.sleep(pause_seconds)  # the pause itself is what is tested
    coordinator.send_signal(signal.SIGCONT)
    try:
        # The worker stays stopped until the coordinator has looked at the stale heartbeat.
        wait_until(lambda: kit.sp.ledger.meta("coordinator_seen") != seen, timeout=10, message="a coordinator pass")
    finally:
        worker.send_signal(signal.SIGCONT)
    status = kit.wait_state(job_id, "done", timeout=30)
    assert [(r["attempt"], r["outcome"]) for r in status["attempts"]] == [(1, "done")]
    assert "every lease gets a fresh term" in kit.log(coordinator)
