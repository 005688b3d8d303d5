"""Issue 17, finding 4: a busy coordinator is not a paused one.

A coordinator firing thousands of schedules (or ingesting thousands of drops) is still watching
its leases: a lease whose counter does not change must expire after its term, whatever the
coordinator is busy with. Before the fix, a firing storm longer than the pause threshold read as
"coordinator was paused", every lease got a fresh term after each storm, and a remote worker that
vanished right after its lease kept the job leased for as long as the storms went on. Lease
expiry also waited behind the whole storm, since firing ran first and unbounded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from spool import Spool
from support import Procs, wait_until

LEASE_SECONDS = 1.5
SCHEDULES = 2500  # ~6 s of firing per slot on the project's 2-core machine: past the old 5 s threshold


def _storm(root: Path, count: int) -> None:
    """``count`` schedules every 5 s, written an hour ago: the first pass catches up one slot of
    each at once (``catchup: one``), and the next slot is due before that storm is over."""
    folder, old = root / "schedules", time.time() - 3600
    for n in range(count):
        staged = folder / f".storm-{n:05}.yaml.tmp"
        staged.write_text("task: storm\nevery: 5s\n")
        os.utime(staged, (old, old))
        staged.rename(folder / f"storm-{n:05}.yaml")


def _fired(root: Path) -> int:
    return sum(1 for name in os.listdir(root / "pending") if not name.startswith("."))


def test_a_never_beaten_remote_lease_expires_within_two_terms_while_schedules_fire(served: Any, tmp_path: Path) -> None:
    _storm(served.root, SCHEDULES)
    work = served.token("remote-a", "work")
    with Spool(served.root, environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1}, max_tries=1)
    logs = tmp_path / "coordinator-logs"
    logs.mkdir()
    procs = Procs(served.root, logs)
    try:
        procs.start("--lease-seconds", str(LEASE_SECONDS), "coordinator", name="coordinator")
        wait_until(lambda: _fired(served.root) > 100, timeout=30, message="the firing storm to start")
        reply = served.call("POST", "/v1/leases", token=work, json={"tasks": ["echo"], "wait": 5})
        assert reply.status == 200 and reply.json["lease"]["id"] == job_id, reply
        leased_at = time.monotonic()
        leased = served.root / "leased" / f"{job_id}.yaml"
        # Never beaten: the coordinator's clock must end it after one term of watching, two at most.
        wait_until(
            lambda: not leased.exists(),
            timeout=2 * LEASE_SECONDS,
            interval=0.01,
            message=f"the unbeaten lease to expire within two terms ({2 * LEASE_SECONDS}s)",
        )
        took = time.monotonic() - leased_at
        fired_at_expiry = _fired(served.root)
        assert fired_at_expiry < SCHEDULES, f"the storm was over ({fired_at_expiry} fired): not a busy coordinator"
        wait_until(
            lambda: _fired(served.root) > fired_at_expiry + 100,
            timeout=10,
            message="the coordinator still firing after the expiry",
        )
    finally:
        procs.kill_all()
    output = procs.output()
    assert "was paused" not in output, output[-3000:]
    with Spool(served.root, environ={}) as sp:
        status = sp.status(job_id)
    assert status["state"] == "dead" and status["reason"] == "expired", status
    assert [(a["worker"], a["outcome"]) for a in status["attempts"]] == [("remote-a", "expired")]
    assert "no heartbeat" in (status["error"] or ""), status
    print(f"the unbeaten lease expired {took:.2f}s after it was taken, {fired_at_expiry} firings into the storm")
