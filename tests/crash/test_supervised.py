"""The seed checklist through the CLI and under `spool run`, and a run under random SIGKILLs.

- the same key twice (and four times at once) through `spool submit`: one job;
- a job that SIGKILLs its own worker: the supervisor restarts the worker, and the job is dead
  after exactly max_tries attempts (reason expired); a job that SIGKILLs its own attempt child:
  dead after exactly max_tries attempts (reason failed);
- a crash point under `spool run` fires once: the restarted worker runs without it;
- submitting past max_pending: exit 75, nothing written (a known key still answers);
- 300 jobs under `spool run --workers 2` while a random coordinator, worker or attempt child is
  SIGKILLed every 0.3 s for 8 s: every job done once, no job in two folders, fsck clean.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from support import ROOT, SPOOL_CMD, run_spool, wait_until


def test_the_same_key_through_the_cli_makes_one_job(kit) -> None:
    first = run_spool("submit", "echo", "-a", "n=1", "--key", "invoice-7", spool=kit.spool_dir)
    again = run_spool("submit", "echo", "-a", "n=2", "--key", "invoice-7", spool=kit.spool_dir)
    assert first.returncode == again.returncode == 0, (first.stderr, again.stderr)
    job_id = first.stdout.strip()
    assert again.stdout.strip() == job_id

    argv = [*SPOOL_CMD, "--spool", str(kit.spool_dir), "submit", "echo", "--key", "invoice-8"]
    racers = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(4)
    ]
    answers = [racer.communicate(timeout=60) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), answers
    assert len({out.strip() for out, _err in answers}) == 1, answers
    assert len(kit.folders()) == 2
    assert len(os.listdir(kit.spool_dir / "keys")) == 2
    kit.fsck_ok()


def test_jobs_that_crash_their_worker_or_their_attempt_die_after_max_tries(kit) -> None:
    kills_worker = kit.sp.submit("crash_worker")
    kills_itself = kit.sp.submit("crash_self")
    fine = kit.sp.submit("echo", {"n": 1})
    supervisor = kit.procs.start(*kit.fast, "run", "--workers", "2", "--import", "examples.tasks", name="run")

    status = kit.wait_state(kills_worker, "dead", timeout=60)
    assert status["reason"] == "expired"
    assert status["attempt"] == status["tries"] == status["max_tries"] == 3
    assert [r["attempt"] for r in status["attempts"]] == [1, 2, 3]
    # The handler may kill its worker before the worker wrote its claim's content (an early claim,
    # spool.moves.claiming.Opening): that attempt is settled as a lost claim, else it expires.
    assert all(r["outcome"] in ("expired", "lost") for r in status["attempts"]), status["attempts"]
    # Which path expires the lease is a race the promise leaves open: the freed worker lock, or
    # (on a loaded machine, when the lease runs out before the freed lock is noticed) the term.
    assert "died" in status["error"] or "no heartbeat" in status["error"], status["error"]

    status = kit.wait_state(kills_itself, "dead", timeout=60)
    assert status["reason"] == "failed"
    assert status["attempt"] == status["tries"] == 3
    assert [(r["attempt"], r["outcome"]) for r in status["attempts"]] == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert "SIGKILL" in status["error"]

    kit.wait_state(fine, "done")
    # The coordinator may expire the third lease (the freed lock) before the supervisor's next look
    # logs that worker's restart: wait for the log, don't read it once.
    wait_until(
        lambda: kit.log(supervisor).count("restart worker-") >= 3,
        timeout=30,
        message="the supervisor to restart each killed worker",
    )
    assert kit.stop(supervisor) == 0
    kit.fsck_ok()


def test_a_crash_point_fires_once_under_spool_run(kit, tmp_path) -> None:
    counter = tmp_path / "ran"
    job_id = kit.sp.submit("touch", {"path": str(counter)})
    supervisor = kit.procs.start(
        *kit.fast,
        "run",
        "--workers",
        "1",
        "--import",
        "examples.tasks",
        env={"SPOOL_CRASH_AT": "worker:after-claim"},
        name="run",
    )
    status = kit.wait_state(job_id, "done")
    # A worker's claim is early (spool.moves.claiming.Opening): killed after it was counted and
    # before its content was written, it is settled as a lost claim, the try spent.
    assert [r["outcome"] for r in status["attempts"]] == ["lost", "done"], "killed after claim 1, then not again"
    assert counter.read_text().splitlines() == [f"{job_id} 2"], "the handler never ran in attempt 1"
    assert "exit worker-1" in kit.log(supervisor) and "signal SIGKILL" in kit.log(supervisor)
    assert kit.stop(supervisor) == 0
    kit.fsck_ok()


def test_a_full_spool_refuses_a_submit_with_exit_75_and_writes_nothing(kit) -> None:
    full = ("--max-pending", "2")
    ids = [run_spool(*full, "submit", "echo", "--key", f"k{n}", spool=kit.spool_dir) for n in range(2)]
    assert [r.returncode for r in ids] == [0, 0], [r.stderr for r in ids]

    refused = run_spool(*full, "submit", "echo", "--key", "k2", spool=kit.spool_dir)
    assert refused.returncode == 75, refused
    assert refused.stdout == ""
    assert "full" in refused.stderr and "max_pending" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert len(kit.folders()) == 2 and len(os.listdir(kit.spool_dir / "keys")) == 2, "no job and no key written"
    assert not os.listdir(kit.spool_dir / "tmp")

    known = run_spool(*full, "submit", "echo", "--key", "k0", spool=kit.spool_dir)
    assert (known.returncode, known.stdout) == (0, ids[0].stdout), "the key is checked before the room"
    kit.fsck_ok()


@pytest.mark.slow  # ~12 s of chaos; tests/stress/test_chaos_run.py is the long run
def test_random_sigkills_under_spool_run_lose_nothing(kit) -> None:
    report = kit.chaos(jobs=300, kill_seconds=8.0, every_seconds=0.3)
    print(
        f"\nchaos (seed {report.seed}): 300 jobs, {sum(report.kills.values())} SIGKILLs {report.kills} "
        f"over {report.chaos_seconds:.1f}s; submit {report.submit_seconds:.1f}s, "
        f"drained {report.drain_seconds:.1f}s after"
    )
    assert sum(report.kills.values()) >= 10, "the chaos hit something"
