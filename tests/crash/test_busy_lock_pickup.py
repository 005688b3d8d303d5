"""A ready job whose lock another process holds for a moment is picked up when it lets go, not at
the worker's slow poll (``Reservations.retry_soon``).

The coordinator's reconcile resyncs a job whose submitter has linked its file but not yet
recorded its row, under the job's lock; a worker woken by the submit's ``.wake`` that met that
lock gave the job back and slept its ``poll_seconds`` (2 s by default) with the job ready, since
nothing lands in pending/ when a lock frees. Here the test holds the lock itself, with the
worker's poll at 30 s: the job must be done within seconds of the lock's release.
"""

from __future__ import annotations

import signal
from pathlib import Path

from support import wait_until

from spool.moves.store import job_lock

POLL_SECONDS = "30"  # a worker that waits for its poll fails the 10 s deadline below


def _given_back(kit, job_id: str) -> bool:  # type: ignore[no-untyped-def]
    """The worker reserved the job (its token is on the row) and put it back in line."""
    rows = kit.sp.ledger._read("SELECT state, reserved FROM jobs WHERE id = ?", (job_id,))  # noqa: SLF001
    return bool(rows) and rows[0][0] == "pending" and bool(rows[0][1])


def test_a_job_whose_lock_was_busy_at_the_claim_runs_when_it_frees(kit, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    worker = kit.worker("w1", "--poll-seconds", POLL_SECONDS)
    warm = kit.sp.submit("touch", {"path": str(marker)})
    kit.wait_state(warm, "done")  # the worker is up and idle, waiting on inotify
    worker.send_signal(signal.SIGSTOP)
    try:
        job_id = kit.sp.submit("touch", {"path": str(marker)})
        lock = job_lock(kit.sp, job_id)
    finally:
        worker.send_signal(signal.SIGCONT)  # its inotify holds the submit's landing and .wake
    with lock:
        wait_until(lambda: _given_back(kit, job_id), timeout=10, message="the worker to meet the busy lock")
        assert kit.state(job_id) == "pending"
    kit.wait_state(job_id, "done", timeout=10)
    assert kit.sp.status(job_id)["tries"] == 1
