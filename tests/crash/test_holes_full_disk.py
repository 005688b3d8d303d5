"""Issue 17, finding 5: a full disk pauses `spool run`, never stops it, and never costs a try.

On real size-capped tmpfs mounts (root only; skipped, saying why, elsewhere). Before the fix the
coordinator exited at its first ledger write on a full disk ("the ledger can't be written"), the
supervisor gave up after five quick exits and stopped everything, and a worker that held a
finished attempt was stopped with it: the job expired and its handler ran a second time.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from crashkit import FAST, TASK_IMPORTS
from support import Procs, fill_disk, wait_until

from spool import Spool

# The old supervisor gave up after five quick coordinator exits in a row: ~2 s after a start on a
# full disk, ~5.5 s after a running coordinator met one (its first exit was not quick).
AT_START_SECONDS, MID_RUN_SECONDS = 4.0, 8.0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs("4m")``: a tmpfs of that size mounted for the test, always unmounted."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"disk-{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            reason = f"cannot mount a size-capped tmpfs (needs root): {done.stderr.strip() or done.returncode}"
            print(reason)
            pytest.skip(reason)
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _run(root: Path, logs: Path) -> tuple[Procs, subprocess.Popen[bytes]]:
    procs = Procs(root, logs)
    return procs, procs.start(*FAST, "--grace-seconds", "1", "run", "--workers", "2", *TASK_IMPORTS, name="run")


def _done(root: Path) -> int:
    return sum(1 for name in (root / "done").iterdir() if name.suffix == ".yaml")


def _still_running(run: subprocess.Popen[bytes], procs: Procs, seconds: float) -> None:
    """The supervisor outlives the full disk by longer than the old give-up took."""
    try:
        code = run.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return
    pytest.fail(f"`spool run` exited {code} on a full disk:\n{procs.output()[-4000:]}")


def _check_once_each(root: Path, job_ids: list[str], trace: Path) -> None:
    with Spool(root, environ={}) as sp:
        for job_id in job_ids:
            status = sp.status(job_id)
            assert status["state"] == "done", status
            assert (status["attempt"], status["tries"]) == (1, 1), status
            assert [r["outcome"] for r in status["attempts"]] == ["done"], status
    lines = trace.read_text().splitlines()
    assert len(lines) == len(job_ids), f"{len(lines)} handler runs for {len(job_ids)} jobs"
    assert all(line.split()[1] == "1" for line in lines), "a handler ran for a second attempt"


def test_spool_run_on_a_full_disk_waits_and_runs_the_jobs_once_there_is_room(tmpfs: Any, tmp_path: Path) -> None:
    disk = tmpfs("4m")
    root, trace = disk / "spool", tmp_path / "trace"  # the handlers' trace outside the small disk
    Spool.init(root, environ={}).close()
    with Spool(root, environ={}) as sp:
        job_ids = [sp.submit("trace", {"path": str(trace)}) for _ in range(3)]
    fill_disk(disk / "filler")
    procs, run = _run(root, tmp_path)
    try:
        wait_until(
            lambda: "coordinator: the spool's disk is full" in procs.output(),
            timeout=30,
            message=f"the coordinator to wait for room:\n{procs.output()[-3000:]}",
        )
        _still_running(run, procs, AT_START_SECONDS)
        (disk / "filler").unlink()
        wait_until(lambda: _done(root) == len(job_ids), timeout=60, message="the jobs done once there is room")
        assert run.poll() is None
        run.terminate()
        assert run.wait(timeout=30) == 0
    finally:
        procs.kill_all()
    output = procs.output()
    assert "give up" not in output and "restart coordinator" not in output, output[-4000:]
    assert output.count("coordinator: the spool's disk is full") == 1, "said once:\n" + output[-4000:]
    assert "coordinator: the disk has room again" in output
    _check_once_each(root, job_ids, trace)


def test_a_burst_that_fills_the_disk_mid_run_ends_every_job_done_at_its_first_try(tmpfs: Any, tmp_path: Path) -> None:
    disk = tmpfs("8m")
    root, trace = disk / "spool", tmp_path / "trace"
    Spool.init(root, environ={}).close()
    with Spool(root, environ={}) as sp:
        job_ids = [sp.submit("trace", {"path": str(trace), "seconds": 0.05}) for _ in range(120)]
    procs, run = _run(root, tmp_path)
    try:
        wait_until(lambda: _done(root) >= 20, timeout=60, message="the burst under way")
        fill_disk(disk / "filler")
        wait_until(
            lambda: "the spool's disk is full" in procs.output(),
            timeout=30,
            message=f"a process to meet the full disk:\n{procs.output()[-3000:]}",
        )
        _still_running(run, procs, MID_RUN_SECONDS)
        assert _done(root) < len(job_ids), "the burst was over before the disk filled"
        (disk / "filler").unlink()
        wait_until(lambda: _done(root) == len(job_ids), timeout=90, message="every job done once there is room")
        assert run.poll() is None
        run.terminate()
        assert run.wait(timeout=30) == 0
    finally:
        procs.kill_all()
    assert "give up" not in procs.output(), procs.output()[-4000:]
    _check_once_each(root, job_ids, trace)
