"""locks/ keeps no file for a purged job or a purged key: the purge removes their lock files while
it holds them, and whoever waited on a removed file takes the one in its place, so two processes
never hold one job's lock (spool.disk.locks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spool import Spool
from spool.base.records import Lease
from spool.disk.layout import job_lock_name, key_lock_name, key_name
from spool.disk.locks import acquire, held_unless_busy
from spool.moves.claiming import claim_held
from spool.moves.transitions import complete
from tests.support import ROOT, run_spool, wait_until


def lock_files(sp: Spool) -> set[str]:
    return {name for name in os.listdir(sp.layout.path("locks")) if name.endswith(".lock")}


def test_a_purge_removes_the_jobs_and_its_keys_lock_files(sp: Spool, spool_dir: Path) -> None:
    job_id = sp.submit("echo", {"i": 1}, key="nightly-7")
    held = claim_held(sp, "w1", None)
    assert held is not None
    complete(sp, Lease(job_id, "w1", held.job_file.attempt), b"1", held)
    assert key_lock_name(key_name("nightly-7")) in lock_files(sp)  # the submit's, kept while the key is taken
    purged = run_spool("purge", "--older-than", "0s", spool=spool_dir)
    assert purged.returncode == 0, purged.stderr
    assert sp.state(job_id) is None
    names = lock_files(sp)
    assert job_lock_name(job_id) not in names and key_lock_name(key_name("nightly-7")) not in names
    assert sp.submit("echo", {"i": 2}, key="nightly-7") != job_id  # the key is free again, its lock made anew


_WAITER = """
import os, sys
from spool.disk.locks import acquire
locks_fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
lock = acquire(locks_fd, "J1.lock", blocking=True)
print("held", os.stat("J1.lock", dir_fd=locks_fd).st_ino, flush=True)
sys.stdin.readline()
"""


def _blocked_on(inode: int) -> bool:
    """Whether some process waits for a flock on ``inode`` (/proc/locks marks a waiter '->')."""
    with open("/proc/locks") as locks:
        return any("->" in line and line.split()[6].endswith(f":{inode}") for line in locks)


def test_a_process_waiting_on_a_removed_lock_file_takes_the_new_one_not_the_removed_one(tmp_path: Path) -> None:
    locks_dir = tmp_path / "locks"
    locks_dir.mkdir()
    locks_fd = os.open(locks_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = acquire(locks_fd, "J1.lock", blocking=True)
        old = os.stat(locks_dir / "J1.lock").st_ino
        waiter = subprocess.Popen(
            [sys.executable, "-c", _WAITER, str(locks_dir)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: _blocked_on(old), message="the waiter blocked on the first file")
            first.remove(locks_fd, "J1.lock")
            second = acquire(locks_fd, "J1.lock", blocking=True)  # a newcomer makes and takes a new file
            new = os.stat(locks_dir / "J1.lock").st_ino
            assert new != old
            first.release()  # the waiter wakes holding the removed file: it must not stop there
            wait_until(lambda: _blocked_on(new), message="the waiter waiting on the new file")
            second.release()
            assert waiter.stdout is not None
            assert waiter.stdout.readline().split() == ["held", str(new)]
        finally:
            waiter.kill()
            waiter.communicate()  # reaped, its pipes closed
    finally:
        os.close(locks_fd)


def test_held_unless_busy_never_waits_and_writes_nothing_unless_told(tmp_path: Path) -> None:
    """A checker's look under a lock: no lock file means nobody can hold it (True, and still no
    file); a free one is held for the block (True); one held elsewhere is busy (False) at once.
    flock is per open file, so a second acquire in this process stands for another process."""
    locks = tmp_path / "locks"
    locks.mkdir()
    fd = os.open(locks, os.O_RDONLY)
    try:
        with held_unless_busy(fd, "j.lock") as held:
            assert held is True
        assert os.listdir(locks) == []  # plain: created nothing
        with held_unless_busy(fd, "j.lock", create=True) as held:
            assert held is True and os.listdir(locks) == ["j.lock"]
            assert acquire(fd, "j.lock", blocking=False) is None  # held for the block
        other = acquire(fd, "j.lock", blocking=False)
        assert other is not None  # released after it
        with other:
            for create in (False, True):
                with held_unless_busy(fd, "j.lock", create=create) as held:
                    assert held is False
    finally:
        os.close(fd)
