"""Ledger writers take turns (``spool.ledger.turns``): a flock of ``locks/ledger-writes.lock`` in
front of SQLite's write lock, so a waiting writer goes the moment the holder lets go. It is a
queue, never the guard: a writer that can't take it, or waits too long, writes anyway."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spool import Spool
from spool.disk.layout import ledger_writes_lock_name
from spool.ledger import turns
from tests.unit.test_locks_seam import CallsFS, behind_the_seam

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


@contextmanager
def _turn_held(spool: Path) -> Iterator[Callable[[], None]]:
    """Another process holding the writers' flock (as a writer inside its transaction would);
    yields what lets it go."""
    lock = spool / "locks" / ledger_writes_lock_name()
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline() == "held\n"
            yield lambda: (holder.stdin.write("\n"), holder.stdin.flush())  # type: ignore[union-attr]
        finally:
            holder.kill()


def _submit_in_a_thread(sp: Spool) -> tuple[threading.Thread, list[str]]:
    ids: list[str] = []
    thread = threading.Thread(target=lambda: ids.append(sp.submit("echo", {"n": 1})), daemon=True)
    thread.start()
    return thread, ids


def test_a_write_waits_for_its_turn_and_goes_once_it_is_given_back(tmp_path: Path) -> None:
    sp = Spool.init(tmp_path / "s", environ={})
    sp.submit("echo", {"n": 0})  # the lock file exists, the connection is open
    try:
        with _turn_held(tmp_path / "s") as let_go:
            thread, ids = _submit_in_a_thread(sp)
            thread.join(0.5)
            assert thread.is_alive() and not ids, "the submit wrote its ledger row out of turn"
            let_go()
            thread.join(10)
        assert not thread.is_alive() and len(ids) == 1
        assert sp.status(ids[0])["state"] == "pending"
    finally:
        sp.close()


def test_the_turn_is_only_a_queue_a_writer_that_waited_its_bound_writes_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that never lets go (SIGSTOPped, say) costs a writer the bound, then SQLite's own
    lock decides; here nobody holds that one, so the write goes through."""
    monkeypatch.setattr(turns, "WAIT_SECONDS", 0.3)
    sp = Spool.init(tmp_path / "s", environ={})
    try:
        with _turn_held(tmp_path / "s"):
            thread, ids = _submit_in_a_thread(sp)
            thread.join(10)
            assert not thread.is_alive() and len(ids) == 1
        assert sp.status(ids[0])["state"] == "pending"
    finally:
        sp.close()


@pytest.mark.parametrize("failing", ["open_lock", "flock", "unflock"])
def test_a_writer_that_cannot_take_its_turn_writes_as_before(tmp_path: Path, failing: str) -> None:
    """A turn that can't be opened or taken: the write waits SQLite's way; one that can't be given
    back: its descriptor is closed, which drops the flock, and the next write opens it again."""
    with Spool.init(tmp_path / "s", environ={}) as sp:
        sp.submit("echo", {"n": 0})  # the ledger is made
    with behind_the_seam(CallsFS(failing=failing)) as calls:
        sp = Spool(tmp_path / "s", environ={})
        try:
            job_id = sp.submit("echo", {"n": 1})
            assert sp.status(job_id)["state"] == "pending"
            assert not _held_elsewhere(tmp_path / "s" / "locks" / ledger_writes_lock_name())  # given back
        finally:
            sp.close()
    assert failing in calls.calls  # the turn was asked for, and its failure cost nothing


def _held_elsewhere(lock: Path) -> bool:
    """Whether some open file description holds the flock (one of this process's counts too)."""
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
