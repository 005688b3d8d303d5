"""Issue 19's third round of per-job cuts (docs/notes/issue19-cuts3.md): each keeps what it saves
from changing what anyone sees.

- a worker reads the coordinator's published term once a second at most, not per attempt, and
  still follows a new term;
- ``.wake`` is touched, not truncated: a waiter still wakes, on IN_CLOSE_WRITE alone, and a
  planted FIFO under its name never blocks a submit;
- a small file is read in one read, not two (the second only heard its end), and any file whole;
- a heartbeat is rewritten in place (ext4 trims an emptied block at once on a ``discard`` mount),
  and still holds exactly what was written last, shorter or longer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spool import Spool
from spool.base.errors import InvalidJob
from spool.disk.layout import WAKE_NAME, State
from spool.moves.store import wake


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_worker_reads_the_published_term_once_for_many_attempts_and_still_follows_a_new_one(
    sp: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spool.runner import worker as worker_module

    sp.ledger.set_meta(lease_seconds=30)
    worker = worker_module.Worker(sp, burst=True)
    reads: list[float] = []
    real = worker_module.published_term

    def counted(handle: Spool) -> float:
        reads.append(time.monotonic())
        return real(handle)

    monkeypatch.setattr(worker_module, "published_term", counted)
    try:
        intervals = {worker.heartbeat_interval() for _ in range(200)}
        assert intervals == {10.0}
        assert 1 <= len(reads) <= 3, f"{len(reads)} ledger reads for 200 attempts"
        sp.ledger.set_meta(lease_seconds=3)  # a coordinator restarted with a shorter term
        wait_until(
            lambda: worker.heartbeat_interval() == 1.0,
            timeout=10 * worker_module.TERM_MAX_AGE_SECONDS,
            what="the worker to beat for the new term",
        )
    finally:
        worker.child.close()


def test_a_wake_is_one_close_write_event_and_the_file_stays_empty(sp: Spool) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    inotify = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert inotify >= 0
    try:
        in_modify, in_close_write = 0x2, 0x8
        pending = str(sp.layout.path(State.PENDING)).encode()
        assert libc.inotify_add_watch(inotify, pending, in_modify | in_close_write) >= 0
        for _ in range(3):
            wake(sp)
            masks = [int.from_bytes(event[4:8], "little") for event in _events(inotify)]
            assert masks == [in_close_write], masks
        assert (sp.layout.path(State.PENDING) / WAKE_NAME).read_bytes() == b""
    finally:
        os.close(inotify)


def _events(inotify: int) -> list[bytes]:
    """The queued inotify events, each header (wd, mask, cookie, len) cut from its name."""
    data = os.read(inotify, 1 << 16)
    events, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at + 12 : at + 16], "little")
        events.append(data[at : at + 16])
        at += 16 + size
    return events


def test_a_fifo_planted_at_the_wake_name_never_blocks_a_submit(sp: Spool, spool_dir: Path) -> None:
    os.mkfifo(spool_dir / "pending" / WAKE_NAME)
    job_id = sp.submit("echo", {"x": 1})  # opening a FIFO for writing with no reader would block
    assert (spool_dir / "pending" / f"{job_id}.yaml").exists()


@pytest.mark.parametrize("size", [0, 1, 400, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 200_000])
def test_read_file_reads_a_small_file_in_one_read_and_any_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    from spool.disk import fsio

    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    reads: list[int] = []
    real_read = os.read

    def counted(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(fsio.os, "read", counted)
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert fsio.fs.read_file(dir_fd, "f", 1 << 20) == data
        if 0 < size < 1 << 16:
            assert len(reads) == 1, reads
        if size:
            with pytest.raises(InvalidJob, match="over the limit"):
                fsio.fs.read_file(dir_fd, "f", size - 1)
    finally:
        os.close(dir_fd)


def test_a_heartbeat_is_rewritten_in_place_and_holds_exactly_the_last_write(
    sp: Spool, spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spool.base.records import Lease
    from spool.disk import fsio
    from spool.disk.layout import heartbeat_name
    from spool.disk.heartbeat import heartbeat_content
    from spool.moves.fence import first_beat, heartbeat, start_queued
    from spool.progress import Progress, encode

    lease = Lease("job-1", "w-1", 1)
    beat = spool_dir / "leased" / heartbeat_name(lease.job_id, lease.attempt)
    first_beat(sp, lease.job_id, lease.attempt, lease.worker, queued=True)
    inode = beat.stat().st_ino
    flags: list[int] = []
    real_open = os.open

    def recorded(name: str, how: int, *args: object, **kwargs: object) -> int:
        flags.append(how)
        return real_open(name, how, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsio.os, "open", recorded)
    start_queued(sp, lease)  # shorter: the mark goes
    assert beat.read_bytes() == heartbeat_content(0, "w-1")
    long_progress = Progress(0.5, "x" * 300)
    heartbeat(sp, lease, 12, long_progress)  # longer
    assert beat.read_bytes() == heartbeat_content(12, "w-1", encode(long_progress))
    heartbeat(sp, lease, 13)  # shorter again: nothing of the progress line is left behind
    assert beat.read_bytes() == heartbeat_content(13, "w-1")
    assert beat.stat().st_ino == inode
    assert flags and not any(how & os.O_TRUNC for how in flags)
