"""Workers that die, stall or lack a task, beside a real coordinator, with real signals.

- SIGKILL mid-job: the attempt child dies with its worker, and the job runs again on the other
  worker well within the lease term (the dead worker's freed lock expires it at once);
- a crash right after the result link: the coordinator finishes the move; the handler ran once;
- SIGSTOP past the lease while another worker completes the job: the first result wins, the
  slow worker's late one is refused and logged, and the slow worker goes on working;
- `shell` jobs run only on a worker started with --allow-shell.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from support import wait_until


def test_a_sigkilled_worker_takes_its_attempt_along_and_the_job_runs_again_at_once(kit, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    kit.coordinator()
    workers = {name: kit.worker(name) for name in ("w1", "w2")}
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 60, "slow_attempts": 1})
    first = wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="attempt 1 to start")
    victim = workers[kit.sp.status(job_id)["lease"]["worker"]]
    assert first.pid in kit.children(victim.pid), "the attempt runs in a child of the worker holding the lease"

    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    bound = kit.lease_seconds + kit.backoff_base_seconds + 1
    second = wait_until(lambda: kit.run_of(trace, 2), timeout=2 * bound + 10, message="attempt 2 to start")
    rerun_seconds = second.at - killed_at
    wait_until(lambda: not kit.alive(first.pid), timeout=10, message="the attempt child to die with its worker")
    status = kit.wait_state(job_id, "done")

    print(
        f"\nkill-to-rerun: {rerun_seconds:.3f}s from SIGKILL to attempt 2's handler "
        f"(lease {kit.lease_seconds:g}s, first backoff <= {kit.backoff_base_seconds:g}s, allowed {2 * bound:g}s)"
    )
    assert rerun_seconds < 2 * bound
    # The freed worker lock expires the lease on the coordinator's next pass: no term waited out.
    assert rerun_seconds < kit.lease_seconds, f"rerun after {rerun_seconds:.2f}s: the lease term was waited out"
    assert status["attempt"] == 2 and status["tries"] == 2
    assert [r["outcome"] for r in status["attempts"]] == ["expired", "done"]
    assert "died" in status["attempts"][0]["error"]
    assert [r.attempt for r in kit.runs(trace)] == [1, 2]
    assert kit.sp.result(job_id) == {"attempt": 2, "pid": second.pid}
    kit.fsck_ok()


def test_a_worker_killed_after_linking_its_result_leaves_the_job_done_once(kit, tmp_path: Path) -> None:
    counter = tmp_path / "ran"
    kit.coordinator()
    worker = kit.worker("w1", env={"SPOOL_CRASH_AT": "worker:after-result"})
    job_id = kit.sp.submit("touch", {"path": str(counter)})
    assert worker.wait(timeout=30) == -signal.SIGKILL, "the crash point killed the worker"
    # It died between the link and the move: the result is there; the job file is still in leased/
    # unless the healthy coordinator has already finished the move (both are the promise kept).
    assert (kit.spool_dir / "results" / f"{job_id}.json").exists(), "it died after linking the result"
    wait_until(
        lambda: (kit.spool_dir / "done" / f"{job_id}.yaml").exists(),
        timeout=2 * kit.lease_seconds + 10,
        message="the coordinator to finish the move to done",
    )

    status = kit.sp.status(job_id)
    assert status["state"] == "done" and status["attempt"] == 1
    assert [r["outcome"] for r in status["attempts"]] == ["done"]
    assert os.listdir(kit.spool_dir / "results") == [f"{job_id}.json"]
    assert kit.sp.result(job_id) == {"attempt": 1}
    assert counter.read_text().splitlines() == [f"{job_id} 1"], "the handler ran exactly once"
    kit.fsck_ok()


def test_a_worker_stopped_past_its_lease_loses_to_a_second_worker_and_carries_on(kit, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    kit.coordinator()
    slow = kit.worker("slow")
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 1.0})
    wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="attempt 1 to start")
    slow.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        fast = kit.worker("fast")
        kit.wait_state(job_id, "done")
        assert time.monotonic() - stopped_at > kit.lease_seconds, "the job moved on only once the lease ran out"
        # The stopped worker's attempt child was never stopped: its 1 s nap is long over, so its
        # result waits in the pipe for the worker to wake up and report it.
        result_file = kit.spool_dir / "results" / f"{job_id}.json"
        winner = result_file.read_bytes()
    finally:
        slow.send_signal(signal.SIGCONT)

    kit.wait_logged(slow, f"attempt 1 of {job_id}")
    slow_log = kit.log(slow)
    assert f"attempt 1 of {job_id} dropped" in slow_log or f"attempt 1 of {job_id} killed" in slow_log, slow_log
    status = kit.sp.status(job_id)
    assert [(r["worker"], r["outcome"]) for r in status["attempts"]] == [("slow", "expired"), ("fast", "done")]
    assert json.loads(winner)["attempt"] == 2
    assert result_file.read_bytes() == winner, "the first result stays; the late one never replaced it"
    assert os.listdir(kit.spool_dir / "results") == [f"{job_id}.json"]
    assert [r.attempt for r in kit.runs(trace)] == [1, 2]

    assert kit.stop(fast) == 0
    later = kit.sp.submit("trace", {"path": str(tmp_path / "later")})
    assert kit.wait_state(later, "done")["attempts"][0]["worker"] == "slow", "the slow worker works on"
    assert slow.poll() is None
    kit.fsck_ok()


def test_only_a_worker_allowed_to_run_shell_claims_a_shell_job(kit) -> None:
    kit.coordinator()
    plain = kit.worker("plain")
    shell_id = kit.sp.submit("shell", {"argv": ["sh", "-c", 'echo "hello from $SPOOL_JOB_ID, attempt $SPOOL_ATTEMPT"']})
    after = kit.sp.submit("echo", {"n": 1})  # behind the shell job in line: the worker passed over it
    kit.wait_state(after, "done")
    status = kit.sp.status(shell_id)
    assert status["state"] == "pending" and status["attempt"] == 0 and status["attempts"] == []

    assert kit.stop(plain) == 0
    kit.worker("shell", extra=("--allow-shell",))
    status = kit.wait_state(shell_id, "done")
    result = kit.sp.result(shell_id)
    assert result["exit"] == 0
    assert f"hello from {shell_id}, attempt 1" in result["output"]
    assert status["attempts"][0]["worker"] == "shell"
    kit.fsck_ok()
