"""spool.progress: the values a handler may give, their line in the heartbeat file, what readers
see, and the coordinator's rule that progress alone never keeps a lease alive (only a counter
that changes does), with a fake clock."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

import spool
from spool import progress as progress_function
from spool.disk.layout import State, heartbeat_name, worker_lock_name
from spool.disk.heartbeat import heartbeat_content, heartbeat_lines, parse_heartbeat
from spool.disk.locks import Lock, acquire
from spool.progress import (
    MAX_MESSAGE_CHARS,
    Progress,
    check,
    decode,
    encode,
    read_progress,
    read_progresses,
    set_sink,
)
from spool.runner.coordinator import Coordinator
from spool.runner.attempt.progress_writes import PROGRESS_WRITE_SECONDS, ProgressWrites
from spool.spool import Spool
from spool.moves.store import write_dot_file
from spool.moves.transitions import Lease, claim, complete, heartbeat

WORKER = "w-progress"
LONG_WORKER = "w" * 64  # the longest name the worker grammar allows


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _hold(sp: Spool, name: str) -> Lock:
    lock = acquire(sp.layout.fd("locks"), worker_lock_name(name), blocking=True)
    assert lock is not None
    return lock


@pytest.fixture
def worker_lock(sp: Spool) -> Iterator[Lock]:
    lock = _hold(sp, WORKER)
    yield lock
    lock.release()


def _lease(sp: Spool, worker: str = WORKER) -> Lease:
    job_file = claim(sp, worker, None)
    assert job_file is not None and job_file.lease is not None
    return Lease(job_file.id, worker, job_file.attempt)


# -- the values --------------------------------------------------------------------------------


def test_check_takes_fractions_from_0_to_1_and_cuts_long_messages() -> None:
    assert check(0, "start") == Progress(0.0, "start")
    assert check(1) == Progress(1.0, "")
    assert check(None, "only words") == Progress(None, "only words")
    assert check(0.5, "x" * 1000).message == "x" * MAX_MESSAGE_CHARS


@pytest.mark.parametrize("fraction", [-0.01, 1.5, math.nan, math.inf])
def test_a_fraction_outside_0_to_1_is_a_value_error_that_says_so(fraction: float) -> None:
    with pytest.raises(ValueError, match="progress fraction must be from 0 to 1"):
        spool.progress(fraction, "too far")


@pytest.mark.parametrize("fraction", [True, "0.5", [0.5]])
def test_a_fraction_that_is_not_a_number_is_a_type_error(fraction: object) -> None:
    with pytest.raises(TypeError, match="progress fraction must be a number"):
        spool.progress(fraction)  # type: ignore[arg-type]


def test_a_message_that_is_not_a_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="progress message must be a str"):
        spool.progress(0.5, 7)  # type: ignore[arg-type]


def test_outside_an_attempt_progress_checks_and_does_nothing_and_inside_it_reaches_the_sink() -> None:
    assert spool.progress is progress_function
    spool.progress(0.25, "no attempt")  # no sink: nothing happens, nothing raises
    seen: list[Progress] = []
    set_sink(seen.append)
    try:
        spool.progress(0.25, "a")
        spool.progress(message="b")
    finally:
        set_sink(None)
    spool.progress(0.75)
    assert seen == [Progress(0.25, "a"), Progress(None, "b")]


def test_encode_decode_round_trip_and_garbage_decodes_to_none() -> None:
    widest = check(0.5, "\U0001f600" * 1000)  # cut at 200 characters, each 12 bytes as ASCII JSON
    assert len(encode(widest)) < 4096  # under PIPE_BUF: the child's write is whole or nothing
    for value in (Progress(0.5, "halfway"), Progress(None, 'ü\n"quoted"'), Progress(1.0, ""), widest):
        line = encode(value)
        assert b"\n" not in line and line.isascii()
        assert decode(line) == value
    for garbage in (
        None,
        b"",
        b"{",
        b"[]",
        b'{"fraction":2,"message":""}',
        b'{"fraction":0.5}',
        b'{"fraction":true,"message":""}',
        b'{"fraction":0.5,"message":3}',
        b"x" * 10_000,
    ):
        assert decode(garbage) is None, garbage


# -- the heartbeat file ------------------------------------------------------------------------


def test_the_heartbeat_file_keeps_its_counter_line_first_and_old_files_still_parse() -> None:
    line = encode(Progress(0.5, "halfway"))
    content = heartbeat_content(7, WORKER, line)
    assert content == b"7 w-progress\n" + line + b"\n"
    assert parse_heartbeat(content) == (7, WORKER)
    assert heartbeat_lines(content) == (heartbeat_content(7, WORKER), line)
    old = heartbeat_content(7, WORKER)  # no progress: the format every older worker wrote
    assert old == b"7 w-progress\n" and parse_heartbeat(old) == (7, WORKER) and heartbeat_lines(old) == (old, None)
    assert parse_heartbeat(b"7 w-progress extra\n" + line) is None  # a torn or planted first line


def test_readers_see_the_newest_progress_of_a_leased_job_and_none_once_it_is_done(sp: Spool) -> None:
    job_id = sp.submit("echo", {"n": 1})
    other = sp.submit("echo", {"n": 2})
    lease = _lease(sp)
    assert lease.job_id == job_id
    assert read_progress(sp, job_id) is None and sp.status(job_id)["progress"] is None  # none reported yet
    heartbeat(sp, lease, 1, Progress(0.5, "halfway"))
    assert read_progress(sp, job_id) == Progress(0.5, "halfway")
    assert read_progress(sp, job_id, lease.attempt) == Progress(0.5, "halfway")
    assert sp.status(job_id)["progress"] == {"fraction": 0.5, "message": "halfway"}
    assert read_progresses(sp, [job_id, other]) == {job_id: Progress(0.5, "halfway")}
    heartbeat(sp, lease, 2)  # a beat without progress (an older worker) shows none
    assert read_progress(sp, job_id) is None
    heartbeat(sp, lease, 3, check(0.9, "\U0001f600" * 500))  # the widest message a handler can give
    assert read_progress(sp, job_id) == Progress(0.9, "\U0001f600" * MAX_MESSAGE_CHARS)
    complete(sp, lease, b'{"ok": true}')
    assert read_progress(sp, job_id) is None and sp.status(job_id)["progress"] is None
    assert sp.status(other)["progress"] is None  # pending: no lease, no progress


# -- the coordinator ---------------------------------------------------------------------------


def _expired(sp: Spool, job_id: str) -> bool:
    return sp.state(job_id) is not State.LEASED


def test_progress_alone_does_not_keep_a_lease_alive(sp: Spool, worker_lock: Lock) -> None:
    """A writer that rewrites the progress line every quarter term but never changes the counter
    loses the lease after one term of the coordinator's clock, as if it wrote nothing."""
    clock = Clock()
    job_id = sp.submit("echo", {"n": 1})
    coordinator = Coordinator(sp, clock=clock)
    lease = _lease(sp)
    coordinator.run_pass()
    step = coordinator.lease_seconds / 4
    for n in range(1, 7):
        heartbeat(sp, lease, 0, Progress(n / 10, f"step {n}"))  # counter 0: the claim's own
        clock.now += step
        coordinator.run_pass()
        if _expired(sp, job_id):
            break
    assert _expired(sp, job_id), "a lease was kept alive by progress alone"
    assert clock.now - 1000.0 > coordinator.lease_seconds  # ... and not before its full term


def test_a_counter_that_changes_keeps_the_lease_with_progress_and_with_the_longest_worker_name(sp: Spool) -> None:
    """The control for the test above, and the longest worker name: its counter line with a
    progress line is over the 64 bytes the coordinator used to read, which made every beat of
    such a worker unreadable (read as no change, so its lease expired while it lived)."""
    clock = Clock()
    lock = _hold(sp, LONG_WORKER)
    try:
        job_id = sp.submit("echo", {"n": 1})
        coordinator = Coordinator(sp, clock=clock)
        lease = _lease(sp, LONG_WORKER)
        coordinator.run_pass()
        step = coordinator.lease_seconds / 4
        for n in range(1, 13):  # three terms
            heartbeat(sp, lease, 1_000_000_000 + n, Progress(n / 20, "working " * 20))
            clock.now += step
            coordinator.run_pass()
            assert not _expired(sp, job_id), f"expired at beat {n} though its counter changed"
    finally:
        lock.release()


def test_a_planted_oversized_heartbeat_is_never_fatal(sp: Spool, worker_lock: Lock) -> None:
    clock = Clock()
    job_id = sp.submit("echo", {"n": 1})
    coordinator = Coordinator(sp, clock=clock)
    lease = _lease(sp)
    write_dot_file(sp, State.LEASED, heartbeat_name(job_id, lease.attempt), b"1 w-progress\n" + b"x" * 100_000)
    coordinator.run_pass()
    assert read_progress(sp, job_id) is None
    for _ in range(6):  # in steps: one jump past the term reads as a paused coordinator
        clock.now += coordinator.lease_seconds / 4
        coordinator.run_pass()
    assert _expired(sp, job_id)  # unreadable, so never a change: the lease ends after its term


# -- the worker's coalescing -------------------------------------------------------------------


def test_progress_writes_are_prompt_after_a_quiet_spell_and_coalesced_after_that() -> None:
    assert ProgressWrites().write() is None  # a beat before any report carries no progress
    writes = ProgressWrites()
    assert writes.due() == math.inf  # nothing reported: nothing due
    writes.offer(Progress(0.1, "a"))
    assert writes.due() <= time.monotonic()  # the first after a quiet spell is due at once
    assert writes.write() == Progress(0.1, "a")
    written_at = time.monotonic()
    writes.offer(Progress(0.2, "b"))
    writes.offer(None)
    writes.offer(Progress(0.3, "c"))  # coalesced: only the newest is written, a quarter second on
    assert written_at < writes.due() <= written_at + PROGRESS_WRITE_SECONDS
    assert writes.write() == Progress(0.3, "c")
    assert writes.due() == math.inf  # written: nothing waits until the handler says more
    writes.offer(Progress(0.3, "c"))  # the same value again is nothing new
    assert writes.due() == math.inf and writes.latest == Progress(0.3, "c")
