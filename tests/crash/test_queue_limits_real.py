"""Queue limits on local workers, as real processes (issue 20's "Done when"):

- ``--rate 5/s`` over three workers never has more than 5 claims in any second, read from the
  attempts' ``started`` (the claim's time, whole ms) and from the handlers' own start times; 30
  jobs then take at least 5 s, so the limit really bound;
- a paused queue holds every job (pending, no try spent, ``status --json`` says ``held_by``
  paused) while the default queue's jobs run, and ``spool queue resume`` releases them;
- a paused queue's job is never touched (its file byte for byte and inode, tries 0, attempt 0)
  across a worker SIGKILLed mid-attempt and a coordinator SIGKILLed and started again;
- a paused queue stays paused on a ledger made anew (deleted, or rebuilt by ``fsck --repair``)
  while the coordinator is too slow to sync queues/ into it: a claim there reads queues/ in
  first (``spool.ledger.reservations``; it was claimed before).

The handler is tests/limit_tasks.py's ``interval`` (imported with ``--import limit_tasks``).
The concurrency proof, which needs a remote worker beside the local ones, is
tests/api/test_remote_queue_limits.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from crashkit import Kit
from limit_tasks import read_runs
from support import ROOT, run_spool, wait_until

from spool.base.timetext import parse_time

LIMIT_TASKS = ("--import", "limit_tasks")  # tests/limit_tasks.py
RATE_JOBS, RATE, WINDOW_MS = 30, 5, 1000


@pytest.fixture(autouse=True)
def _limit_tasks_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), os.environ["PYTHONPATH"]]))


def queue_cli(kit: Kit, *args: str) -> str:
    ran = run_spool("queue", *args, spool=kit.spool_dir)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def status_json(kit: Kit, job_id: str) -> dict[str, Any]:
    ran = run_spool("status", "--json", job_id, spool=kit.spool_dir)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert isinstance(found, dict)
    return found


def all_done(kit: Kit, job_ids: list[str]) -> bool:
    """Each job's move to done/ finished: recorded in the ledger, which comes after the leased/
    copy is gone (a done/ file alone may still have its leased/ copy beside it)."""
    where = kit.folders()
    for job_id in job_ids:
        row = kit.sp.ledger.row(job_id)
        if not (row and row["state"] == "done" and where.get(job_id) == ["done"]):
            return False
    return True


def crowded_windows(times: list[float], most: int, window: float) -> list[tuple[float, float]]:
    """Each run of ``most + 1`` sorted times that fits in less than ``window``: a window holding
    more than ``most`` of them."""
    times = sorted(times)
    return [(times[i], times[i + most]) for i in range(len(times) - most) if times[i + most] - times[i] < window]


def test_rate_5_per_second_over_three_workers_never_has_more_than_5_claims_in_a_second(
    kit: Kit, tmp_path: Path
) -> None:
    queue_cli(kit, "set", "api", "--rate", f"{RATE}/s")
    runs = tmp_path / "runs"
    runs.mkdir()
    warm = tmp_path / "warm-up"
    warm.mkdir()
    kit.coordinator()
    # Each worker first runs a job of a queue of its own, so its attempt child is up (a worker
    # starts its child at its first attempt): the claim-to-handler delays are then alike.
    warm_ids = []
    for n in range(3):
        kit.worker(f"w{n}", extra=(*LIMIT_TASKS, "--queues", f"api,warm-{n}"))
        warm_ids.append(kit.sp.submit("interval", {"folder": str(warm), "seconds": 0.0}, queue=f"warm-{n}"))
    wait_until(lambda: all_done(kit, warm_ids), 30, message="each worker's warm-up job done")
    job_ids = kit.submit_many(RATE_JOBS, "interval", {"folder": str(runs), "seconds": 0.0}, queue="api")
    wait_until(lambda: all_done(kit, job_ids), 60, 0.05, f"all {RATE_JOBS} jobs done")
    kit.assert_all_done(warm_ids + job_ids)

    # The claims, as the job files record them: each attempt's started, in whole ms.
    claimed: dict[str, int] = {}
    for job_id in job_ids:
        (attempt,) = kit.sp.status(job_id)["attempts"]  # nothing failed: one attempt each
        claimed[job_id] = round(parse_time(attempt["started"], "started").timestamp() * 1000)
    claims = sorted(claimed.values())
    assert not crowded_windows(claims, RATE, WINDOW_MS), "more than 5 claims in one second"
    span_ms = claims[-1] - claims[0]
    # 5 at once, then 5 more a second: the 26th claim comes 5 s after the first at the soonest.
    assert span_ms >= (RATE_JOBS // RATE - 1) * WINDOW_MS, f"{RATE_JOBS} claims in {span_ms} ms: the rate did not bind"
    assert span_ms < 3 * (RATE_JOBS // RATE) * WINDOW_MS, f"{span_ms} ms: the rate held jobs back far past its window"

    # The handlers' own start times: each comes a little after its claim, so a window of them may
    # hold more than the claims' by the spread of those delays, never by more.
    started = {run.job_id: run.start for run in read_runs(runs)}
    assert sorted(started) == sorted(job_ids)
    delays = [started[job_id] - claimed[job_id] / 1000 for job_id in job_ids]
    assert min(delays) > -0.001, "a handler started before its claim"  # started is cut to whole ms
    spread = max(delays) - min(delays)
    assert spread < 0.5, f"claim-to-handler delays spread over {spread:.3f} s: the handler check would prove nothing"
    crowded = crowded_windows(list(started.values()), RATE, WINDOW_MS / 1000 - spread)
    print(f"{RATE_JOBS} claims over {span_ms} ms; claim-to-handler delay spread {spread * 1000:.0f} ms")
    assert not crowded, f"handler starts crowding one second past the claims' spread: {crowded}"
    kit.fsck_ok()


def test_a_paused_queue_holds_its_jobs_while_the_default_queue_runs_and_resume_releases_them(
    kit: Kit, tmp_path: Path
) -> None:
    assert queue_cli(kit, "pause", "email") == "queue email paused\n"
    runs = tmp_path / "runs"
    runs.mkdir()
    args = {"folder": str(runs), "seconds": 0.0}
    email = kit.submit_many(3, "interval", args, queue="email")
    first = kit.submit_many(3, "interval", args)  # after the email jobs: the claims pass them by
    kit.coordinator()
    kit.worker("w1", extra=(*LIMIT_TASKS, "--queues", "email,default"))
    kit.worker("w2", extra=LIMIT_TASKS)
    wait_until(lambda: all_done(kit, first), 30, message="the default jobs done while email is paused")
    later = kit.submit_many(1, "interval", args)  # one more round of both workers' claims
    wait_until(lambda: all_done(kit, later), 30, message="a later default job done too")
    for job_id in email:
        status = status_json(kit, job_id)
        assert (status["state"], status["queue"], status["tries"], status["attempts"]) == ("pending", "email", 0, [])
        assert status["held_by"] == {"queue": "email", "limit": "paused", "text": "queue email is paused"}
    assert not [run for run in read_runs(runs) if run.job_id in email]
    assert queue_cli(kit, "resume", "email") == "queue email resumed\n"
    wait_until(lambda: all_done(kit, email), 30, message="the email jobs done after the resume")
    kit.assert_all_done(email + first + later)
    for job_id in email:
        status = kit.sp.status(job_id)
        assert status["tries"] == 1 and [a["outcome"] for a in status["attempts"]] == ["done"], status
    kit.fsck_ok()


def test_a_paused_job_is_never_touched_across_a_worker_sigkill_and_a_coordinator_restart(
    kit: Kit, tmp_path: Path
) -> None:
    queue_cli(kit, "pause", "frozen")
    runs = tmp_path / "runs"
    runs.mkdir()
    frozen = kit.sp.submit("interval", {"folder": str(runs), "seconds": 0.0}, queue="frozen")
    path = kit.spool_dir / "pending" / f"{frozen}.yaml"
    before = path.read_bytes(), path.stat()
    coordinator = kit.coordinator()
    worker = kit.worker("w1", extra=LIMIT_TASKS)
    trace = tmp_path / "busy.trace"  # crash_tasks' trace: a long nap in its first attempt only
    busy = kit.sp.submit("trace", {"path": str(trace), "seconds": 30.0, "slow_attempts": 1}, max_tries=3)
    wait_until(lambda: kit.run_of(trace, 1), 30, message="the busy job running")
    worker.send_signal(signal.SIGKILL)  # mid-attempt: its child dies with it, its lease is recovered
    worker.wait()
    os.killpg(coordinator.pid, signal.SIGKILL)
    coordinator.wait()
    kit.wait_logged(kit.coordinator(), "coordinator started")
    wait_until(lambda: kit.state(busy) == "pending", 30, message="the killed worker's lease expired")
    kit.worker("w2", extra=LIMIT_TASKS)
    after = kit.sp.submit("interval", {"folder": str(runs), "seconds": 0.0})
    kit.wait_state(after, "done")
    status = kit.wait_state(busy, "done")
    # "lost" when the coordinator's SIGKILL fell inside its expiry of w1's lease (after the rename,
    # before the rewrite): whoever comes next closes the attempt so (SPEC: finishable by the next).
    assert [a["worker"] for a in status["attempts"]] == ["w1", "w2"], status
    assert [a["outcome"] for a in status["attempts"]] in (["expired", "done"], ["lost", "done"]), status

    assert (path.read_bytes(), path.stat().st_ino, path.stat().st_mtime_ns) == (
        before[0],
        before[1].st_ino,
        before[1].st_mtime_ns,
    )
    status = status_json(kit, frozen)
    assert (status["state"], status["tries"], status["attempt"], status["attempts"]) == ("pending", 0, 0, [])
    assert status["held_by"]["limit"] == "paused"
    assert kit.sp.ledger.row(frozen)["state"] == "pending"
    assert not [run for run in read_runs(runs) if run.job_id == frozen]
    kit.fsck_ok()


@pytest.mark.parametrize("made_anew_by", ["submit", "fsck-repair"])
def test_a_paused_queue_holds_on_a_ledger_made_anew_while_the_coordinator_is_slow(
    kit: Kit, tmp_path: Path, made_anew_by: str
) -> None:
    """The coordinator is SIGSTOPped (slow: swapped out, say) so its sync cannot come first; with
    it running the claim wins the race about half the time (the sync comes once a second)."""
    queue_cli(kit, "pause", "frozen")
    runs = tmp_path / "runs"
    runs.mkdir()
    args = {"folder": str(runs), "seconds": 0.0}
    frozen = kit.sp.submit("interval", args, queue="frozen")
    coordinator = kit.coordinator()
    kit.wait_logged(coordinator, "coordinator started")
    kit.worker("w1", extra=LIMIT_TASKS)
    kit.wait_state(kit.sp.submit("interval", args), "done")
    coordinator.send_signal(signal.SIGSTOP)
    try:
        for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"):  # as a person may
            (kit.spool_dir / name).unlink(missing_ok=True)
        if made_anew_by == "submit":
            frozen = kit.sp.submit("interval", args, queue="frozen")  # the first row of the new ledger
        else:
            repaired = run_spool("fsck", "--repair", spool=kit.spool_dir)
            assert "ledger: rebuilt from the files" in repaired.stdout, repaired.stdout + repaired.stderr
        after = kit.sp.submit("interval", args)  # after the paused job in the claim order
        kit.wait_state(after, "done")
        status = status_json(kit, frozen)
        assert (status["state"], status["tries"], status["attempts"]) == ("pending", 0, []), status
        assert not [run for run in read_runs(runs) if run.job_id == frozen]
    finally:
        coordinator.send_signal(signal.SIGCONT)


def test_a_freed_slot_wakes_the_workers_it_held_back_without_waiting_for_their_slow_poll(
    kit: Kit, tmp_path: Path
) -> None:
    """``concurrency 1`` over two workers whose slow poll is a minute: each job of the queue that
    ends frees the slot, and the workers held back by it must look again at once (the mover wakes
    them: ``spool.moves.store.wake_slot``). Nothing lands in pending/ when a slot frees, so before,
    every job after the first waited for a worker's poll (0.6 jobs/s at the default 2 s poll)."""
    queue_cli(kit, "set", "gpu", "--concurrency", "1")
    runs = tmp_path / "runs"
    runs.mkdir()
    kit.coordinator()
    slow_poll = ("--poll-seconds", "60")  # after FAST's: the last one counts
    kit.worker("w1", *slow_poll, extra=LIMIT_TASKS)
    kit.worker("w2", *slow_poll, extra=LIMIT_TASKS)
    job_ids = kit.submit_many(12, "interval", {"folder": str(runs), "seconds": 0.05}, queue="gpu")
    wait_until(lambda: all_done(kit, job_ids), 30, 0.05, "12 jobs of a concurrency-1 queue done, well within one poll")
    kit.assert_all_done(job_ids)
    spans = sorted((run.start, run.end if run.end is not None else float("inf")) for run in read_runs(runs))
    assert len(spans) == 12
    overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert not overlaps, f"two jobs of a concurrency-1 queue ran at once: {overlaps}"
    kit.fsck_ok()
