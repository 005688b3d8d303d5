"""A worker keeps a finished attempt's heartbeat file as a spare in tmp/ and gives it to the next
job it claims (``spool.moves.spares``): one file creation and one freed block fewer per job. A
spare is a hint's file, so whatever happens to it, a claim still writes its heartbeat."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spool.disk.heartbeat import heartbeat_content
from spool.disk.layout import heartbeat_name, tmp_writer_pid
from spool.fsck import sweep_tmp
from spool.moves import spares
from spool.moves.transitions import Lease, claim, complete, fail
from spool.spool import Spool


def _take(sp: Spool, worker: str = "w1") -> Lease:
    claimed = claim(sp, worker, None)
    assert claimed is not None
    return Lease(claimed.id, worker, claimed.attempt)


def _tmp(spool_dir: Path, sp: Spool | None = None) -> list[str]:
    """tmp/'s names, but for ``sp``'s spare job files (tests/faults/test_spare_files.py's)."""
    kept = (sp.spare_files or []) + (sp.unsettled_files or []) + (sp.after_pending or []) if sp is not None else []
    job_spares = set(kept)
    return sorted(name for name in os.listdir(spool_dir / "tmp") if name not in job_spares)


def _dot_files(spool_dir: Path) -> list[str]:
    return sorted(name for name in os.listdir(spool_dir / "leased") if name.startswith(".") and name != ".wake")


def test_the_next_claim_gets_the_finished_attempts_heartbeat_file(sp: Spool, spool_dir: Path) -> None:
    spares.begin(sp)
    first, second = sp.submit("echo", {"n": 1}), sp.submit("echo", {"n": 2})
    lease = _take(sp)
    beat = spool_dir / "leased" / heartbeat_name(lease.job_id, lease.attempt)
    inode = beat.stat().st_ino
    complete(sp, lease, b"1")
    assert _dot_files(spool_dir) == []  # gone from leased/ ...
    (spare,) = _tmp(spool_dir, sp)  # ... kept in tmp/, under a staging name of this process
    assert tmp_writer_pid(spare) == os.getpid() and (spool_dir / "tmp" / spare).stat().st_ino == inode
    lease = _take(sp)
    assert lease.job_id == second != first
    beat = spool_dir / "leased" / heartbeat_name(lease.job_id, lease.attempt)
    assert beat.stat().st_ino == inode and beat.read_bytes() == heartbeat_content(0, "w1")
    assert _tmp(spool_dir, sp) == []


def test_a_failed_attempts_heartbeat_is_kept_too_and_spares_are_capped(sp: Spool, spool_dir: Path) -> None:
    spares.begin(sp)
    job_id = sp.submit("echo", {"n": 1})
    fail(sp, _take(sp), "boom")
    assert len(_tmp(spool_dir, sp)) == 1 and _dot_files(spool_dir) == []
    resubmitted = sp.submit("echo", {"n": 2})
    lease = _take(sp)  # the failed job waits for its backoff: this is the other one
    assert lease.job_id == resubmitted != job_id and _tmp(spool_dir, sp) == []
    sp.spare_beats = [f"{os.getpid()}-{n:012x}.tmp" for n in range(spares.SPARES_MOST)]  # full (names only)
    complete(sp, lease, b"2")
    assert _tmp(spool_dir, sp) == [] and _dot_files(spool_dir) == []  # at the cap: removed, not kept


def test_a_spare_that_is_gone_or_planted_still_leaves_a_heartbeat(sp: Spool, spool_dir: Path) -> None:
    spares.begin(sp)
    for n in range(3):
        sp.submit("echo", {"n": n})
    complete(sp, _take(sp), b"0")
    (spare,) = _tmp(spool_dir, sp)
    os.unlink(spool_dir / "tmp" / spare)  # swept (fsck) while the worker held it
    lease = _take(sp)
    assert (spool_dir / "leased" / heartbeat_name(lease.job_id, lease.attempt)).read_bytes() == heartbeat_content(
        0, "w1"
    )
    complete(sp, lease, b"1")
    (spare,) = _tmp(spool_dir, sp)
    os.unlink(spool_dir / "tmp" / spare)
    os.mkfifo(spool_dir / "tmp" / spare)  # planted: writing into it would block the worker
    lease = _take(sp)
    beat = spool_dir / "leased" / heartbeat_name(lease.job_id, lease.attempt)
    assert beat.is_file() and beat.read_bytes() == heartbeat_content(0, "w1")


def test_a_handle_that_keeps_none_removes_the_heartbeat(sp: Spool, spool_dir: Path) -> None:
    sp.submit("echo")
    complete(sp, _take(sp), b"1")
    assert _tmp(spool_dir, sp) == [] and _dot_files(spool_dir) == []
    spares.begin(sp)
    sp.submit("echo")
    complete(sp, _take(sp), b"1")
    assert len(_tmp(spool_dir, sp)) == 1
    spares.drop_all(sp)  # a worker stopping
    assert _tmp(spool_dir, sp) == [] and sp.spare_beats is None


def test_a_killed_workers_spares_are_swept_and_a_stopped_workers_removed(spool_dir: Path) -> None:
    """A real worker drains and exits: it leaves no spare. One that dies with spares in tmp/
    leaves them under its pid, which the tmp sweep removes once that pid is gone."""
    with Spool(spool_dir, environ={}) as sp:
        for n in range(5):
            sp.submit("echo", {"n": n})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = [
        sys.executable,
        "-m",
        "spool.cli",
        "--spool",
        str(spool_dir),
        "worker",
        "--burst",
        "--import",
        "examples.tasks",
    ]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(os.listdir(spool_dir / "done")) == 5
    assert _tmp(spool_dir) == [] and _dot_files(spool_dir) == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = f"{int(dead.stdout)}-0123456789ab.tmp"  # a spare as a worker SIGKILLed mid-run leaves it
    (spool_dir / "tmp" / left).write_bytes(b"3 w-dead\n")
    with Spool(spool_dir, environ={}) as sp:
        assert left in sweep_tmp(sp)
    assert _tmp(spool_dir) == []
