"""Issue 7's holes in the runner, through real processes: settings, names, planted files, a full
disk, and jobs that no live worker handles.

- finding 7: a heartbeat that cannot keep a lease is refused wherever it comes from; a worker
  whose explicit heartbeat can't keep the term its coordinator publishes heartbeats faster;
- finding 10: a planted directory at a heartbeat's name wedges nobody; a duplicate or
  path-like ``--name`` is refused at once; ``cancel`` says what it waits for and can time out;
- finding 12: ``status``, ``stats``, ``wait`` and the coordinator's log say when no live worker
  handles a job's task;
- finding 15: the supervisor's give-up is an ERROR; a worker on a full disk neither exits nor
  spends a try (a real 2 MiB tmpfs).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, SPOOL_CMD, fill_disk, run_spool, wait_until

from spool import Spool

KEEP_ALIVE_BEATS = 1_000_000_000  # spool.runner.keepalive.KEEP_ALIVE_BEATS, hard-coded: the base lacks it


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spool: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- finding 7: heartbeat_seconds >= lease_seconds -----------------------------------------------


def test_a_heartbeat_that_cannot_keep_the_lease_is_refused_from_flag_env_and_file(spool_dir: Path) -> None:
    flag = run_spool("--heartbeat-seconds", "30", "config", spool=spool_dir)
    assert flag.returncode == 2
    one_error_line(flag, "flag --heartbeat-seconds", "heartbeat_seconds", "30s", "half")

    env = run_spool("config", spool=spool_dir, env={"SPOOL_HEARTBEAT_SECONDS": "20", "SPOOL_LEASE_SECONDS": "10"})
    assert env.returncode == 2
    one_error_line(env, "env SPOOL_HEARTBEAT_SECONDS", "10s", "env SPOOL_LEASE_SECONDS")

    (spool_dir / "config.yaml").write_text("heartbeat_seconds: 45\n")
    worker = run_spool("worker", "--burst", "--import", "examples.tasks", spool=spool_dir)
    assert worker.returncode == 2, "refused at start too"
    one_error_line(worker, "config.yaml", "heartbeat_seconds")

    (spool_dir / "config.yaml").write_text("heartbeat_seconds: 15\n")
    shown = run_spool("--json", "config", spool=spool_dir)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["heartbeat_seconds"] == {"value": 15.0, "source": "config.yaml"}


def test_a_worker_whose_heartbeat_cannot_keep_the_published_term_keeps_its_lease(kit, tmp_path: Path) -> None:
    """The coordinator publishes 2 s; the worker was told 30 s and a heartbeat of 10 s."""
    trace = tmp_path / "trace"
    kit.coordinator()
    # The worker reads the published term at each attempt: the claim must come after it is published.
    wait_until(
        lambda: float(kit.sp.ledger.meta("lease_seconds") or 0) == kit.lease_seconds,
        timeout=30,
        message="the coordinator to publish its term",
    )
    worker = kit.worker("slow-beats", "--lease-seconds", "30", "--heartbeat-seconds", "10")
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 3 * kit.lease_seconds})
    status = kit.wait_state(job_id, "done", timeout=60)
    assert [(r["attempt"], r["outcome"]) for r in status["attempts"]] == [(1, "done")], "no expiry"
    assert status["tries"] == 1 and [r.attempt for r in kit.runs(trace)] == [1], "one run"
    assert "cannot keep the coordinator's lease of 2s" in kit.log(worker)
    kit.fsck_ok()


# -- finding 10: wedges ---------------------------------------------------------------------------


def test_a_planted_directory_at_a_heartbeat_name_wedges_neither_worker_nor_coordinator(kit, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 1.5})
    planted = kit.spool_dir / "leased" / f".{job_id}.1.hb"
    planted.mkdir()
    (planted / "inside").write_text("x")
    coordinator = kit.coordinator()
    worker = kit.worker("w1")
    status = kit.wait_state(job_id, "done", timeout=60)
    assert status["tries"] == 1 and [r["outcome"] for r in status["attempts"]] == ["done"]
    assert coordinator.poll() is None and worker.poll() is None, kit.procs.output()
    aside = [p.name for p in (kit.spool_dir / "leased").iterdir() if ".planted-" in p.name]
    assert len(aside) == 1 and aside[0].startswith(f".{job_id}.1.hb.planted-"), aside
    assert kit.log(worker).count("moved aside") == 1, kit.log(worker)
    kit.fsck_ok()


def test_a_planted_directory_at_a_later_attempts_heartbeat_name_does_not_stop_expiry(kit, tmp_path: Path) -> None:
    """The coordinator must not take a planted ``.<id>.2.hb`` for the lease, nor die clearing it."""
    trace = tmp_path / "trace"
    coordinator = kit.coordinator()
    victim = kit.worker("w1")
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 60, "slow_attempts": 1})
    wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="attempt 1 to start")
    (kit.spool_dir / "leased" / f".{job_id}.2.hb").mkdir()
    (kit.spool_dir / "leased" / f".{job_id}.junk").mkdir()
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    kit.worker("w2")
    status = kit.wait_state(job_id, "done", timeout=60)
    assert [r["outcome"] for r in status["attempts"]] == ["expired", "done"]
    assert coordinator.poll() is None, kit.log(coordinator)
    kit.fsck_ok()


def test_a_second_worker_with_a_taken_name_is_refused_at_once(kit) -> None:
    first = kit.worker("twin")
    kit.wait_logged(first, "worker twin started")
    try:
        second = run_spool(
            *kit.fast, "worker", "--name", "twin", "--import", "examples.tasks", spool=kit.spool_dir, timeout=20
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the second worker named twin blocked instead of being refused")
    assert second.returncode == 2
    one_error_line(second, "another worker named twin is running")
    assert first.poll() is None


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "", "x" * 65])
def test_a_worker_name_that_is_not_a_name_is_refused(spool_dir: Path, tmp_path: Path, name: str) -> None:
    refused = run_spool("worker", "--name", name, "--burst", "--import", "examples.tasks", spool=spool_dir, timeout=20)
    assert refused.returncode == 2
    one_error_line(refused, "--name")
    assert not list(tmp_path.glob("*.lock")) and not (spool_dir / "x.lock").exists()


def _hold_lock_stopped(spool_dir: Path, job_id: str) -> subprocess.Popen[str]:
    """A process that takes the job's lock and stops itself (SIGSTOP), as a stopped worker would."""
    code = (
        "import fcntl, os, signal, sys\n"
        f"fd = os.open({str(spool_dir / 'locks' / (job_id + '.lock'))!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_cancel_says_what_it_waits_for_and_times_out_with_75(kit, tmp_path: Path) -> None:
    job_id = kit.sp.submit("echo", {"n": 1})
    holder = _hold_lock_stopped(kit.spool_dir, job_id)
    try:
        started = time.monotonic()
        timed_out = run_spool("cancel", job_id, "--timeout", "2", spool=kit.spool_dir, timeout=30)
        assert timed_out.returncode == 75, timed_out
        assert time.monotonic() - started < 20
        lines = timed_out.stderr.strip().splitlines()
        assert "Traceback" not in timed_out.stderr and len(lines) == 2, timed_out.stderr
        assert f"waiting for job {job_id}'s lock" in lines[0] and "stopped worker" in lines[0]
        assert lines[1].startswith("spool: ") and "try later" in lines[1] and "nothing changed" in lines[1]
        assert kit.state(job_id) == "pending", "nothing changed"

        errors = tmp_path / "cancel.err"
        with open(errors, "w") as err:
            waiting = subprocess.Popen(
                [*SPOOL_CMD, "--spool", str(kit.spool_dir), "cancel", job_id],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        wait_until(lambda: "waiting for job" in errors.read_text(), timeout=20, message="cancel to say it waits")
        assert waiting.poll() is None
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    out, _ = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, errors.read_text()
    assert f"{job_id} cancelled" in out
    assert kit.sp.status(job_id)["reason"] == "cancelled"


# -- finding 12: a task no live worker handles ---------------------------------------------------


def test_status_stats_wait_and_the_coordinator_say_no_live_worker_handles_a_task(kit) -> None:
    coordinator = kit.coordinator("--reconcile-seconds", "1", "--unhandled-grace-seconds", "1")
    worker = kit.worker("w1")
    kit.wait_logged(worker, "worker w1 started")
    orphan = kit.sp.submit("nobody_knows_this", {})
    shell = kit.sp.submit("shell", {"argv": ["true"]})
    handled = kit.sp.submit("trace", {"path": "/dev/null", "seconds": 30})

    def status_of(job_id: str) -> dict[str, Any]:
        shown = run_spool("--json", "status", job_id, spool=kit.spool_dir)
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)

    view = wait_until(
        lambda: (v := status_of(orphan)).get("handled_by") == [] and v,
        timeout=20,
        message="status to say nobody handles the task",
    )
    assert "no live worker handles task 'nobody_knows_this'" in view["warning"]
    assert status_of(shell)["handled_by"] == [] and "--allow-shell" in status_of(shell)["warning"]
    text = run_spool("status", orphan, spool=kit.spool_dir)
    assert "no live worker handles task 'nobody_knows_this'" in text.stdout
    kit.wait_state(handled, "leased")
    assert "warning" not in status_of(handled)

    stats = json.loads(run_spool("--json", "stats", spool=kit.spool_dir).stdout)
    assert stats["unhandled_tasks"] == {"nobody_knows_this": 1, "shell": 1}
    assert "nobody_knows_this" in run_spool("stats", spool=kit.spool_dir).stdout

    kit.wait_logged(coordinator, "no live worker handles task 'nobody_knows_this'")
    kit.wait_logged(coordinator, "no live worker handles task 'shell'")
    assert "task 'trace'" not in kit.log(coordinator)

    waited = run_spool("wait", orphan, "--timeout", "3", spool=kit.spool_dir, timeout=60)  # > one reconcile
    assert waited.returncode == 124, waited
    warnings = [line for line in waited.stderr.splitlines() if "no live worker handles" in line]
    assert len(warnings) == 1 and orphan in warnings[0] and "still waiting" in warnings[0], waited.stderr
    assert kit.log(coordinator).count("no live worker handles task 'nobody_knows_this'") == 1, "once per task"

    kit.worker("w2", extra=("--allow-shell",))  # a worker for shell appears: its job runs
    kit.wait_state(shell, "done", timeout=30)
    assert status_of(orphan)["handled_by"] == []


# -- finding 15: the supervisor's give-up; a full disk --------------------------------------------


def test_the_supervisor_logs_its_give_up_as_an_error(spool_dir: Path) -> None:
    ran = run_spool("run", "--workers", "1", "--import", "no_such_module_anywhere", spool=spool_dir, timeout=120)
    assert ran.returncode == 1, ran.stderr
    give_up = [line for line in ran.stderr.splitlines() if "give up" in line]
    assert len(give_up) == 1 and " ERROR " in give_up[0], ran.stderr


@pytest.fixture
def disk_kit(small_disk: Path, kit) -> Any:
    """The kit's processes, on a spool on the small disk."""
    root = small_disk / "spool"
    Spool.init(root, environ={}).close()
    kit.spool_dir = kit.procs.spool = root
    kit.sp = Spool(root, environ={})
    kit.disk = small_disk
    yield kit
    kit.procs.kill_all()
    kit.sp.close()


def test_a_worker_on_a_full_disk_pauses_claiming_and_spends_no_try(disk_kit) -> None:
    kit = disk_kit
    job_id = kit.sp.submit("echo", {"n": 1})
    kit.sp.ledger.counts()  # like any running process, we hold the ledger open (its WAL index)
    fill_disk(kit.disk / "filler")
    worker = kit.worker("w1")
    kit.wait_logged(worker, "disk is full")
    wait_until(lambda: "claiming paused" in kit.log(worker), timeout=20, message="the worker to pause claiming")
    assert worker.poll() is None, kit.log(worker)
    (kit.disk / "filler").unlink()
    kit.coordinator()  # its reconcile puts back a claim order the full ledger could not
    status = kit.wait_state(job_id, "done", timeout=60)
    assert status["tries"] == 1 and [r["outcome"] for r in status["attempts"]] == ["done"], status
    assert worker.poll() is None
    assert kit.log(worker).count("the spool's disk is full") == 1, "logged once:\n" + kit.log(worker)


def test_a_finished_attempt_keeps_its_lease_until_the_full_disk_has_room(disk_kit, tmp_path: Path) -> None:
    kit = disk_kit
    trace = tmp_path / "trace"  # outside the small disk: the handler's own writes must land
    kit.coordinator()
    worker = kit.worker("w1")
    # A result larger than the spare file the worker keeps (the job file its claim swapped out,
    # one page): a worker writes results over its spares (spool.moves.spares), so a small one
    # would need no new room and be saved on the full disk, as it may be.
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 1.0, "pad": 16384})
    wait_until(lambda: kit.run_of(trace, 1), timeout=30, message="attempt 1 to start")
    fill_disk(kit.disk / "filler")
    kit.wait_logged(worker, "disk is full")
    beat = kit.spool_dir / "leased" / f".{job_id}.1.hb"

    def kept_alive_past_a_term() -> bool:
        try:
            counter = int(beat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return False
        return counter >= KEEP_ALIVE_BEATS + 4  # 4 keep-alive beats at <= 2/3 s: more than the 2 s term

    wait_until(kept_alive_past_a_term, timeout=30, message="keep-alive heartbeats across a lease term")
    assert kit.state(job_id) == "leased" and worker.poll() is None, kit.procs.output()
    (kit.disk / "filler").unlink()
    status = kit.wait_state(job_id, "done", timeout=60)
    assert status["tries"] == 1 and [r["outcome"] for r in status["attempts"]] == ["done"], status
    assert [r.attempt for r in kit.runs(trace)] == [1]
    assert worker.poll() is None
