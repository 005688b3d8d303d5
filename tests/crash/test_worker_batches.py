"""A worker's group commit beside a real coordinator, with real signals (runner.batching).

- short attempts are claimed and completed in batches, and each job still runs once;
- a worker SIGKILLed while its batch's jobs wait for a slow attempt costs the waiting jobs
  nothing: they run once elsewhere with one try, and only the attempt that was running spent
  one; a SIGTERM gives them back too.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from support import wait_until


def _ran(counter: Path) -> Counter[str]:
    try:
        return Counter(line.split()[0] for line in counter.read_text().splitlines())
    except FileNotFoundError:
        return Counter()


def _claims_per_transaction(kit, job_ids: list[str]) -> int:  # type: ignore[no-untyped-def]
    """The most 'claim' history rows written at one instant: the size of the biggest batch."""
    rows = kit.sp.ledger._read(  # noqa: SLF001 (a look at the history, as `spool status` takes it)
        f"SELECT at, COUNT(*) FROM history WHERE event = 'claim' AND job_id IN ({','.join('?' * len(job_ids))}) "
        "GROUP BY at",
        job_ids,
    )
    return max((count for _at, count in rows), default=0)


def test_short_attempts_are_claimed_in_batches_and_each_runs_once(kit, tmp_path: Path) -> None:
    counter = tmp_path / "ran"
    ids = kit.submit_many(200, "touch", {"path": str(counter)})
    kit.coordinator()
    kit.worker("w1")
    for job_id in ids:
        kit.wait_state(job_id, "done", timeout=60)
    assert _ran(counter) == Counter({job_id: 1 for job_id in ids}), "every job ran exactly once"
    assert all(kit.sp.status(job_id)["tries"] == 1 for job_id in ids)
    assert _claims_per_transaction(kit, ids) > 1, "the backlog was claimed in batches"
    kit.fsck_ok()


def _a_batch_behind_a_slow_job(kit, tmp_path: Path) -> tuple[Path, Path, str, list[str]]:  # type: ignore[no-untyped-def]
    """Short jobs first (so the worker learns its attempts are short and batches), then a slow
    one, then short ones at a lower priority: the slow one heads a batch they wait in."""
    counter, trace = tmp_path / "ran", tmp_path / "trace"
    kit.submit_many(60, "touch", {"path": str(counter)}, priority=9)
    slow = kit.sp.submit("trace", {"path": str(trace), "seconds": 60, "slow_attempts": 1}, priority=5)
    waiting = kit.submit_many(12, "touch", {"path": str(counter)}, priority=1)
    return counter, trace, slow, waiting


def test_a_worker_killed_while_its_batch_waits_costs_the_waiting_jobs_no_try(kit, tmp_path: Path) -> None:
    counter, trace, slow, waiting = _a_batch_behind_a_slow_job(kit, tmp_path)
    kit.coordinator()
    victim = kit.worker("w1")
    wait_until(lambda: kit.run_of(trace, 1), timeout=60, message="the slow attempt to start")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    kit.worker("w2")
    for job_id in waiting:
        status = kit.wait_state(job_id, "done", timeout=60)
        assert status["tries"] == 1, f"{job_id} spent a try it never ran: {status['attempts']}"
    assert all(_ran(counter)[job_id] == 1 for job_id in waiting), "each waiting job ran exactly once"
    status = kit.wait_state(slow, "done", timeout=60)
    assert status["tries"] == 2 and [r["outcome"] for r in status["attempts"]] == ["expired", "done"]
    kit.fsck_ok()


def test_a_stopped_worker_gives_its_waiting_batch_back(kit, tmp_path: Path) -> None:
    counter, trace, slow, waiting = _a_batch_behind_a_slow_job(kit, tmp_path)
    kit.coordinator()
    worker = kit.worker("w1", "--grace-seconds", "0.2")  # past its grace the slow attempt is released
    wait_until(lambda: kit.run_of(trace, 1), timeout=60, message="the slow attempt to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert all(kit.state(job_id) == "pending" for job_id in [slow, *waiting]), "nothing left leased"
    assert all(kit.sp.status(job_id)["tries"] == 0 for job_id in [slow, *waiting]), "no try spent by a stop"
    assert not any(_ran(counter)[job_id] for job_id in waiting)
    kit.fsck_ok()
