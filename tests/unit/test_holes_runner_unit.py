"""Issue 7's runner holes, in-process: the heartbeat check, worker names, planted dot-files, the
timed lock wait, a claim on a full disk, and reading what live workers handle."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from spool import Spool
from spool.base.errors import DiskFull, TryLater, UsageError
from spool.disk.layout import State, cancel_name, heartbeat_name, job_lock_name, worker_lock_name
from spool.disk.locks import acquire, is_held
from spool.settings import load_settings
from spool.moves.store import clear_lease_files
from spool.moves.transitions import Lease, claim, heartbeat

# What this change adds (acquire_within, write_dot_file, spool.workers) is imported inside the
# tests that use it, so that on the base commit each test fails on its own behaviour.

# -- finding 7 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "flags", "where"),
    [
        ({"SPOOL_HEARTBEAT_SECONDS": "30"}, {}, "env SPOOL_HEARTBEAT_SECONDS"),
        ({}, {"heartbeat_seconds": "31"}, "flag --heartbeat-seconds"),
        ({"SPOOL_LEASE_SECONDS": "4"}, {"heartbeat_seconds": "3"}, "flag --heartbeat-seconds"),
    ],
)
def test_a_heartbeat_over_half_the_lease_is_refused_naming_its_source(environ, flags, where) -> None:
    with pytest.raises(UsageError) as refused:
        load_settings(None, environ, flags)
    assert str(refused.value).startswith(f"{where}: heartbeat_seconds:")
    assert "at most half of lease_seconds" in str(refused.value)


def test_a_heartbeat_of_half_the_lease_or_less_is_accepted(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("lease_seconds: 10\nheartbeat_seconds: 5\n")
    assert load_settings(config, {}, {}).heartbeat_seconds == 5.0
    config.write_text("heartbeat_seconds: 5.5\nlease_seconds: 10\n")
    with pytest.raises(UsageError, match=r"^config.yaml: heartbeat_seconds: 5.5s cannot keep a lease of 10s"):
        load_settings(config, {}, {})


# -- finding 10 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["w1", "host-1.example.org-42-ab12", "A_b-c.d", "9" * 64])
def test_worker_names_in_the_grammar_are_accepted(name: str) -> None:
    from spool.workers import check_worker_name

    assert check_worker_name(name) == name


@pytest.mark.parametrize("name", ["../../x", "a/b", ".w", "-w", "", "w" * 65, "w 1", "w;1"])
def test_worker_names_outside_the_grammar_are_refused(name: str) -> None:
    from spool.workers import check_worker_name

    with pytest.raises(UsageError, match="--name"):
        check_worker_name(name)


def test_clearing_lease_files_sets_planted_directories_aside(sp: Spool) -> None:
    leased = sp.layout.path(State.LEASED)
    for name in (heartbeat_name("J1", 1), heartbeat_name("J1", 2), cancel_name("J1")):
        (leased / name).mkdir()
    clear_lease_files(sp, "J1", 1)
    clear_lease_files(sp, "J1")
    clear_lease_files(sp, "J1")  # repeatable: what was set aside is never touched again
    names = sorted(os.listdir(leased))
    assert len(names) == 3 and all(".planted-" in name for name in names), names
    assert {name.split(".planted-")[0] for name in names} == {".J1.1.hb", ".J1.2.hb", ".J1.cancel"}


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink", "hard link"])
def test_a_heartbeat_over_a_planted_entry_sets_it_aside_and_lands(sp: Spool, tmp_path: Path, kind: str) -> None:
    beat = sp.layout.path(State.LEASED) / heartbeat_name("J1", 1)
    outside = tmp_path / "outside"
    outside.write_text("keep me")
    if kind == "directory":
        beat.mkdir()
    elif kind == "fifo":
        os.mkfifo(beat)  # an open for writing would block for ever
    elif kind == "symlink":
        beat.symlink_to(outside)
    else:
        os.link(outside, beat)
    heartbeat(sp, Lease("J1", "w1", 1), 7)
    assert beat.read_bytes() == b"7 w1\n" and not beat.is_symlink() and beat.stat().st_nlink == 1
    assert outside.read_text() == "keep me", "the write never went through the planted entry"
    assert len([n for n in os.listdir(beat.parent) if ".planted-" in n]) == 1


def test_a_cancel_request_lands_over_a_planted_directory(sp: Spool) -> None:
    from spool.moves.store import write_dot_file

    request = sp.layout.path(State.LEASED) / cancel_name("J1")
    request.mkdir()
    write_dot_file(sp, State.LEASED, cancel_name("J1"), b"now")
    assert request.read_bytes() == b"now"


def test_the_timed_lock_wait_says_why_once_and_gives_up(sp: Spool) -> None:
    from spool.disk.locks import acquire_within

    locks_fd = sp.layout.fd("locks")
    held = acquire(locks_fd, job_lock_name("J1"), blocking=True)
    told: list[float] = []
    started = time.monotonic()
    assert (
        acquire_within(
            locks_fd, job_lock_name("J1"), 1.5, on_wait=lambda: told.append(time.monotonic()), notice_after_seconds=0.3
        )
        is None
    )
    assert time.monotonic() - started >= 1.5
    assert len(told) == 1 and told[0] - started >= 0.3
    threading.Timer(0.3, held.release).start()  # type: ignore[union-attr]
    got = acquire_within(locks_fd, job_lock_name("J1"), None)
    assert got is not None
    got.release()


def test_cancel_times_out_with_try_later_and_changes_nothing(sp: Spool) -> None:
    job_id = sp.submit("echo", {"n": 1})
    held = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    told: list[str] = []
    try:
        with pytest.raises(TryLater, match="nothing changed; try later"):
            sp.cancel(job_id, timeout_seconds=1.2, on_wait=told.append)
    finally:
        held.release()  # type: ignore[union-attr]
    assert told == [f"waiting for job {job_id}'s lock, held by another process (a stopped worker?)"]
    assert sp.state(job_id) is State.PENDING
    assert sp.cancel(job_id, timeout_seconds=1.0) == "cancelled"


def test_a_planted_directory_is_no_lock_anybody_holds(sp: Spool) -> None:
    from spool.workers import live_workers

    (sp.layout.path("locks") / worker_lock_name("ghost")).mkdir()
    assert is_held(sp.layout.fd("locks"), worker_lock_name("ghost")) is None
    assert live_workers(sp) == []


# -- finding 15: a claim that meets a full disk spends nothing ----------------------------------------


def test_a_claim_whose_counted_try_cannot_be_written_puts_the_job_back(sp: Spool) -> None:
    from tests.faults.faultfs import FaultFS

    job_id = sp.submit("echo", {"n": 1})
    with FaultFS(fail_at=1, error=errno.ENOSPC, kinds={"write"}).installed(), pytest.raises(DiskFull):
        claim(sp, "w1", ["echo"])
    assert sp.state(job_id) is State.PENDING
    _state, job_file = sp.job(job_id)
    assert (job_file.attempt, job_file.tries, job_file.lease) == (0, 0, None)
    claimed = claim(sp, "w1", ["echo"])
    assert claimed is not None and (claimed.id, claimed.attempt, claimed.tries) == (job_id, 1, 1)


# -- finding 12: who handles what ---------------------------------------------------------------------


def test_live_workers_are_read_from_their_held_locks(sp: Spool) -> None:
    from spool.workers import advertisement, handlers_of, live_workers, unhandled_ready

    locks_fd = sp.layout.fd("locks")
    plain = acquire(locks_fd, worker_lock_name("plain"), blocking=False)
    plain.publish(advertisement("plain", ["echo", "wordcount"]))  # type: ignore[union-attr]
    shell = acquire(locks_fd, worker_lock_name("shell-ok"), blocking=False)
    shell.publish(advertisement("shell-ok", ["echo", "shell"]))  # type: ignore[union-attr]
    dead = acquire(locks_fd, worker_lock_name("dead"), blocking=False)
    dead.publish(advertisement("dead", ["only_the_dead"]))  # type: ignore[union-attr]
    dead.release()  # type: ignore[union-attr]
    for task in ("echo", "shell", "only_the_dead", "unknown"):
        sp.submit(task, {"argv": ["true"]} if task == "shell" else {})
    try:
        workers = live_workers(sp)
        assert {w.name: w.tasks for w in workers} == {"plain": {"echo", "wordcount"}, "shell-ok": {"echo", "shell"}}
        assert all(w.pid == os.getpid() for w in workers)
        assert handlers_of(workers, "echo") == ["plain", "shell-ok"]
        assert handlers_of(workers, "shell") == ["shell-ok"]
        assert handlers_of(workers, "only_the_dead") == []
        assert unhandled_ready(sp) == {"only_the_dead": 1, "unknown": 1}

        starting = acquire(locks_fd, worker_lock_name("starting"), blocking=False)  # not advertised yet
        assert handlers_of(live_workers(sp), "unknown") is None, "nobody can say it is unhandled"
        assert unhandled_ready(sp) == {}
        starting.release()  # type: ignore[union-attr]
    finally:
        plain.release()  # type: ignore[union-attr]
        shell.release()  # type: ignore[union-attr]


def test_requeue_times_out_with_try_later_and_changes_nothing(sp: Spool) -> None:
    job_id = sp.submit("echo", {"n": 1})
    assert sp.cancel(job_id) == "cancelled"
    held = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    told: list[str] = []
    try:
        with pytest.raises(TryLater, match="nothing changed"):
            sp.requeue(job_id, timeout_seconds=1.2, on_wait=told.append)
    finally:
        held.release()  # type: ignore[union-attr]
    assert len(told) == 1 and f"job {job_id}'s lock" in told[0]
    assert sp.state(job_id) is State.DEAD
    assert sp.requeue(job_id, timeout_seconds=1.0) is State.PENDING
