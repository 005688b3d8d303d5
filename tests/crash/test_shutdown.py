"""`spool run` stopping: SIGTERM lets a running attempt finish within grace_seconds, releases one
that runs longer (its try given back), a second SIGTERM stops at once, and a SIGKILLed
supervisor takes its coordinator, workers and their attempts with it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from support import wait_until


def _start_run(kit, grace_seconds: float) -> tuple[subprocess.Popen[bytes], dict[int, str]]:
    """`spool run --workers 1`, up and running: returns the supervisor and its processes by role."""
    supervisor = kit.procs.start(
        *kit.fast,
        "--grace-seconds",
        str(grace_seconds),
        "run",
        "--workers",
        "1",
        "--import",
        "examples.tasks",
        "--import",
        "crash_tasks",
        name="run",
    )

    def up() -> dict[int, str] | None:
        tree = kit.supervised(supervisor.pid)
        return tree if sorted(tree.values()) == ["coordinator", "worker"] else None

    return supervisor, wait_until(up, timeout=30, message="a coordinator and a worker under the supervisor")


def _running(kit, supervisor: subprocess.Popen[bytes], trace: Path, seconds: float) -> tuple[str, dict[int, str]]:
    """Submit a job napping ``seconds``; return its id and the process tree once its attempt runs."""
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": seconds})
    attempt = wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="the attempt to start")
    tree = kit.supervised(supervisor.pid)
    assert tree.get(attempt.pid) == "attempt", tree
    return job_id, tree


def _all_gone(kit, pids: list[int]) -> None:
    wait_until(lambda: not [pid for pid in pids if kit.alive(pid)], timeout=10, message=f"{pids} to be gone")


def test_sigterm_lets_a_running_attempt_finish_within_grace(kit, tmp_path: Path) -> None:
    supervisor, _ = _start_run(kit, grace_seconds=10)
    job_id, tree = _running(kit, supervisor, tmp_path / "trace", seconds=1.5)
    asked_at = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=10 + 5 + 10) == 0
    took = time.monotonic() - asked_at
    status = kit.sp.status(job_id)
    assert status["state"] == "done" and status["attempt"] == 1, status
    assert [r["outcome"] for r in status["attempts"]] == ["done"]
    assert took < 10, f"the stop took {took:.1f}s: the supervisor should exit once its children have"
    _all_gone(kit, list(tree))
    kit.fsck_ok()


def test_sigterm_releases_an_attempt_that_outlives_grace_and_gives_its_try_back(kit, tmp_path: Path) -> None:
    supervisor, _ = _start_run(kit, grace_seconds=1)
    job_id, tree = _running(kit, supervisor, tmp_path / "trace", seconds=60)
    asked_at = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=1 + 5 + 10) == 0
    took = time.monotonic() - asked_at
    _all_gone(kit, list(tree))

    status = kit.sp.status(job_id)
    assert status["state"] == "pending", status
    assert (status["tries"], status["attempt"]) == (0, 1), "the try is given back; the fence is not"
    assert [(r["attempt"], r["outcome"]) for r in status["attempts"]] == [(1, "released")]
    assert status["lease"] is None and kit.sp.ledger.row(job_id)["ready"] == 1, "ready again at once"
    assert 1 <= took < 1 + 5, f"released after {took:.1f}s; grace is 1s"
    kit.fsck_ok()


def test_a_second_sigterm_stops_at_once(kit, tmp_path: Path) -> None:
    supervisor, _ = _start_run(kit, grace_seconds=60)
    job_id, tree = _running(kit, supervisor, tmp_path / "trace", seconds=60)
    supervisor.send_signal(signal.SIGTERM)
    kit.wait_logged(supervisor, "stop: SIGTERM to")
    asked_at = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=10) == 0
    took = time.monotonic() - asked_at
    print(f"\nsecond SIGTERM to exit: {took * 1000:.0f} ms")
    assert took < 2
    _all_gone(kit, list(tree))
    assert kit.state(job_id) in ("leased", "pending"), "nothing finished it; the lease expires when a coordinator runs"


def test_a_sigkilled_supervisor_takes_its_children_along(kit, tmp_path: Path) -> None:
    supervisor, _ = _start_run(kit, grace_seconds=10)
    _job_id, tree = _running(kit, supervisor, tmp_path / "trace", seconds=60)
    assert sorted(tree.values()) == ["attempt", "coordinator", "worker"]
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    _all_gone(kit, list(tree))
