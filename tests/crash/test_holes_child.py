"""Issue 7, the attempt child's channels and logs, through real coordinators, workers and CLIs.

- 6: a spool folder renamed under its running processes keeps running jobs (folder fds only);
- 8: a handler that writes to every inherited fd, or garbles the channel, costs only its attempt;
- 14: attempt logs are capped keeping the tail; `spool logs` streams, says which attempts exist,
  waits for a pending job's first attempt, and prints one JSON document with --json;
- 15: `current().deadline` is a wall-clock time, with `seconds_left()` on the monotonic clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, SPOOL_CMD, run_spool, wait_until

TASKS = '''
"""Tasks for tests/crash/test_holes_child.py."""
import os
import sys
import time

from spool import current, task


@task("holes.say")
def say(text, lines=1, pause=0.0):
    for n in range(lines):
        print(f"{text} {n}", flush=True)
        if pause:
            time.sleep(pause)
    return text


@task("holes.spew")
def spew(megabytes):
    chunk = b"x" * 1023 + b"\\n"
    for _ in range(megabytes * 1024):
        os.write(1, chunk)
    sys.stdout.write("THE END\\n")
    return "spewed"


@task("holes.scribble")
def scribble(low, high):
    for fd in range(low, high):
        try:
            os.write(fd, b"x")
        except OSError:
            pass
    return "scribbled"


@task("holes.garble")
def garble():
    """Write a line of garbage to every pipe the child has open beyond 0-2: the reply pipe too."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.write(fd, b"garbage\\n")
        except OSError:
            pass
    return "garbled?"


@task("holes.fail")
def fail():
    print("failing on purpose", flush=True)
    raise RuntimeError("on purpose")


@task("holes.flaky")
def flaky(until):
    attempt = current().attempt
    print(f"attempt {attempt}", flush=True)
    if attempt < until:
        raise RuntimeError(f"attempt {attempt} fails on purpose")
    return attempt


@task("holes.current")
def where():
    me = current()
    return {"deadline": me.deadline, "left": me.seconds_left(), "now": time.time()}
'''


@pytest.fixture
def tasks_env(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "holes-tasks"
    folder.mkdir()
    (folder / "holes_tasks.py").write_text(TASKS, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ["PYTHONPATH"]])}


def start_worker(kit, env: dict[str, str], *flags: str, name: str = "w1", extra: tuple[str, ...] = ()):
    worker = kit.worker(name, *flags, extra=("--import", "holes_tasks", *extra), env=env)
    kit.wait_logged(worker, "started")
    return worker


def spool_json(*args: str, spool: Path) -> dict:
    done = run_spool(*args, "--json", spool=spool)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def terminal(spool: Path, job_id: str) -> str | None:
    for state in ("done", "dead"):
        if (spool / state / f"{job_id}.yaml").exists():
            return state
    return None


def open_paths(pid: int) -> set[str]:
    """What process ``pid`` has open, by path."""
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return found
    for name in names:
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
    return found


# -- 6: a renamed spool -------------------------------------------------------------------------


def test_a_spool_renamed_while_it_runs_keeps_running_jobs_and_writing_their_logs(kit, tasks_env, tmp_path) -> None:
    coordinator = kit.coordinator()
    kit.wait_logged(coordinator, "coordinator started")
    worker = start_worker(kit, tasks_env)
    before = kit.sp.submit("holes.say", {"text": "before"})
    kit.wait_state(before, "done")

    moved = tmp_path / "renamed-spool"
    os.rename(kit.spool_dir, moved)
    ids = []
    for n in range(3):
        submitted = run_spool("submit", "holes.say", "-a", f"text=after-{n}", spool=moved)
        assert submitted.returncode == 0, submitted.stderr
        ids.append(submitted.stdout.strip())
    wait_until(
        lambda: all(terminal(moved, job_id) for job_id in ids),
        timeout=60,
        message=f"the jobs submitted after the rename to end (logs in {kit.procs.logs})",
    )
    for n, job_id in enumerate(ids):
        assert terminal(moved, job_id) == "done", spool_json("status", job_id, spool=moved)["error"]
        assert (moved / "results" / f"{job_id}.json").exists()
        assert (moved / "logs" / f"{job_id}.1.log").read_text() == f"after-{n} 0\n"
    assert worker.poll() is None and coordinator.poll() is None


def test_a_second_coordinator_waits_on_the_lock_through_the_locks_folder(kit) -> None:
    first = kit.coordinator()
    kit.wait_logged(first, "coordinator started")
    second = kit.coordinator()
    kit.wait_logged(second, "another coordinator runs; waiting for its lock")
    assert "coordinator started" not in kit.log(second)
    kit.stop(first)
    kit.wait_logged(second, "coordinator started")


# -- 8: stray fds and a garbled channel ---------------------------------------------------------


def test_a_handler_scribbling_on_every_fd_costs_at_most_its_attempt(kit, tasks_env) -> None:
    kit.coordinator()
    worker = start_worker(kit, tasks_env)
    scribbler = kit.sp.submit("holes.scribble", {"low": 3, "high": 1024}, max_tries=1)
    after = kit.sp.submit("holes.say", {"text": "next"})
    kit.wait_state(after, "done")
    # Nothing reached the channel here (it sits above fd 1023), so the attempt succeeded; had it
    # reached it, the attempt would have failed as garbled. Either way the worker lives on.
    assert terminal(kit.spool_dir, scribbler) in ("done", "dead")
    status = kit.sp.status(scribbler)
    assert status["state"] == "done" or "garbled" in (status["error"] or ""), status
    assert worker.poll() is None, kit.log(worker)
    assert "Traceback" not in kit.log(worker)


def test_garbage_on_the_reply_channel_fails_the_attempt_and_the_worker_lives_on(kit, tasks_env) -> None:
    kit.coordinator()
    worker = start_worker(kit, tasks_env)
    garbled = kit.sp.submit("holes.garble", {}, max_tries=1)
    status = kit.wait_state(garbled, "dead")
    assert "the attempt's reply was garbled" in status["error"], status
    after = kit.sp.submit("holes.say", {"text": "next"})
    kit.wait_state(after, "done")
    assert worker.poll() is None, kit.log(worker)
    assert "Traceback" not in kit.log(worker)
    kit.fsck_ok()


# -- 14: capped logs, `spool logs` ------------------------------------------------------------


def test_a_huge_print_is_capped_to_its_tail_with_a_marker(kit, tasks_env) -> None:
    kit.coordinator()
    start_worker(kit, tasks_env, "--max-log-bytes", "64KiB")
    job_id = kit.sp.submit("holes.spew", {"megabytes": 8})
    kit.wait_state(job_id, "done", timeout=120)
    data = (kit.spool_dir / "logs" / f"{job_id}.1.log").read_bytes()
    total = 8 * 1024 * 1024 + len("THE END\n")
    head, _, body = data.partition(b"\n")
    assert head.decode() == f"[spool: {total - 65536} bytes cut from the front; max_log_bytes 65536]"
    assert len(body) == 65536 and body.endswith(b"x\nTHE END\n")
    shown = run_spool("logs", job_id, spool=kit.spool_dir)
    assert shown.returncode == 0 and shown.stdout.encode() == data


def test_a_shell_jobs_output_tail_still_makes_its_result(kit, tasks_env) -> None:
    kit.coordinator()
    start_worker(kit, tasks_env, extra=("--allow-shell",))
    ok = kit.sp.submit("shell", {"argv": ["sh", "-c", "echo hello; echo oops >&2"]})
    failed = kit.sp.submit("shell", {"argv": ["sh", "-c", "echo about to fail; exit 3"]}, max_tries=1)
    kit.wait_state(ok, "done")
    assert kit.sp.result(ok) == {"exit": 0, "output": "hello\noops\n"}
    assert kit.wait_state(failed, "dead")["error"] == "exit status 3: about to fail\n"
    assert (kit.spool_dir / "logs" / f"{ok}.1.log").read_text() == "hello\noops\n"


def test_logs_of_an_attempt_that_does_not_exist_exits_3_and_json_is_one_document(kit, tasks_env) -> None:
    kit.coordinator()
    start_worker(kit, tasks_env)
    job_id = kit.sp.submit("holes.fail", {}, max_tries=2)
    kit.wait_state(job_id, "dead")
    missing = run_spool("logs", job_id, "--attempt", "9", spool=kit.spool_dir)
    assert missing.returncode == 3 and missing.stderr == f"spool: {job_id}: no attempt 9 (job has 2)\n"
    assert run_spool("logs", job_id, "--attempt", "0", spool=kit.spool_dir).returncode == 2
    second = run_spool("logs", job_id, "--attempt", "2", spool=kit.spool_dir)
    assert second.returncode == 0 and second.stdout == "failing on purpose\n"
    document = spool_json("logs", job_id, spool=kit.spool_dir)
    assert document == {"id": job_id, "attempt": 2, "log": "failing on purpose\n"}


def follow_then_start_worker(kit, tasks_env, job_id: str, timeout: float) -> tuple[int, str, str]:
    """`spool logs ID --follow` on a job no worker has started, then a worker: (exit, stdout, stderr)."""
    follower = subprocess.Popen(
        [*SPOOL_CMD, "--spool", str(kit.spool_dir), "logs", job_id, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        # Only once the follower has looked at the job (it holds pending/ open) may it start.
        pending = os.path.realpath(kit.spool_dir / "pending")
        wait_until(
            lambda: follower.poll() is not None or pending in open_paths(follower.pid),
            timeout=60,
            message="the follower to look at the job",
        )
        start_worker(kit, tasks_env)
        out, err = follower.communicate(timeout=timeout)
    finally:
        follower.kill()
        follower.wait()
    return follower.returncode, out, err


def test_logs_follow_on_a_pending_job_waits_for_its_first_attempt_then_follows_it_to_the_end(kit, tasks_env) -> None:
    kit.coordinator()
    job_id = kit.sp.submit("holes.say", {"text": "line", "lines": 5, "pause": 0.1})
    returncode, out, err = follow_then_start_worker(kit, tasks_env, job_id, timeout=60)
    assert (returncode, err) == (0, "")
    assert out == "".join(f"line {n}\n" for n in range(5))
    assert kit.state(job_id) == "done"


def test_logs_follow_goes_on_to_each_retry_until_the_job_is_done(kit, tasks_env) -> None:
    kit.coordinator()
    job_id = kit.sp.submit("holes.flaky", {"until": 3}, max_tries=3)
    returncode, out, err = follow_then_start_worker(kit, tasks_env, job_id, timeout=90)
    assert returncode == 0, err
    assert out == "attempt 1\nattempt 2\nattempt 3\n", err
    assert err == f"spool: attempt 2 of {job_id}\nspool: attempt 3 of {job_id}\n"
    assert kit.state(job_id) == "done"


def test_spool_logs_streams_a_huge_log_instead_of_reading_it_whole(kit, tmp_path) -> None:
    """A log written before the cap existed (or planted): `spool logs` holds a chunk at a time."""
    job_id = kit.sp.submit("echo", {})
    claimed = kit.spool_dir / "logs" / f"{job_id}.1.log"
    with open(claimed, "wb") as planted:
        for _ in range(192):
            planted.write(b"y" * (1 << 20))
    # Attempt 1 "happened": the job file must say so for `logs` to show it; fake nothing else.
    from spool.moves.transitions import claim

    assert claim(kit.sp, "tester", ["echo"]) is not None
    # The peak is VmHWM, this process's own memory's high-water mark. Not ru_maxrss: Linux keeps
    # that across execve, so after subprocess's vfork it reports the pytest process's size.
    probe = (
        "import sys\n"
        "from spool.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "finally:\n"
        "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "    print(hwm.split()[1], file=sys.stderr)\n"
    )
    with open(os.devnull, "wb") as sink:
        done = subprocess.run(
            [sys.executable, "-c", probe, "--spool", str(kit.spool_dir), "logs", job_id],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stderr.split()[-1])
    assert peak_kib < 100 * 1024, f"peak RSS {peak_kib} KiB for a 192 MiB log"


# -- 15: current().deadline ---------------------------------------------------------------------


def test_current_deadline_is_a_wall_clock_time_and_seconds_left_counts_down(kit, tasks_env) -> None:
    kit.coordinator()
    start_worker(kit, tasks_env)
    submitted = time.time()
    job_id = kit.sp.submit("holes.current", {}, timeout=600)
    kit.wait_state(job_id, "done")
    value = kit.sp.result(job_id)
    # The deadline is the attempt's start plus its timeout, on the wall clock.
    assert submitted + 600 - 5 <= value["deadline"] <= time.time() + 600 + 5
    assert abs(value["deadline"] - value["now"] - value["left"]) < 5
    assert 590 < value["left"] <= 600
