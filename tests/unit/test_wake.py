"""``runner/wake.py``: what lands wakes a wait at once, read in the waiting thread; a poke does
too; a lost or overflowed event only delays until the timeout (the caller's poll)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool.runner import wake
from spool.runner.wake import Waker


@pytest.fixture(params=["inotify", "threaded"])
def folders(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    if request.param == "threaded":
        monkeypatch.setattr(wake, "_inotify_binding", lambda: None)
    for name in ("pending", "leased", "tmp"):
        (tmp_path / name).mkdir()
    yield tmp_path


def _wait_for(waker: Waker, wanted: tuple[str, str], seconds: float = 5.0) -> float:
    """Seconds until ``wanted`` is among what a wait returned."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if wanted in waker.wait(seconds):
            return time.monotonic() - start
    raise AssertionError(f"{wanted} never landed")


def test_no_thread_reads_the_events_when_watchdogs_bindings_are_there(tmp_path: Path) -> None:
    before = threading.active_count()
    waker = Waker([tmp_path])
    try:
        assert not waker.threaded and threading.active_count() == before
    finally:
        waker.stop()


def test_a_create_a_rename_in_and_an_overwrite_each_wake_the_wait(folders: Path) -> None:
    waker = Waker([folders / "pending", folders / "leased"])
    try:
        (folders / "pending" / "a.yaml").write_text("task: echo\n")
        assert _wait_for(waker, ("pending", "a.yaml")) < 1.0
        (folders / "tmp" / "b.yaml").write_text("x")
        os.rename(folders / "tmp" / "b.yaml", folders / "leased" / "b.yaml")
        assert _wait_for(waker, ("leased", "b.yaml")) < 1.0
        (folders / "tmp" / "b.yaml").write_text("y")
        os.rename(folders / "tmp" / "b.yaml", folders / "leased" / "b.yaml")  # over the old one
        assert _wait_for(waker, ("leased", "b.yaml")) < 1.0
        with open(folders / "pending" / "a.yaml", "a") as writer:  # written in place
            writer.write("args: {}\n")
        assert _wait_for(waker, ("pending", "a.yaml")) < 1.0
    finally:
        waker.stop()


def test_moves_out_deletes_and_reads_do_not_wake_and_unwatched_folders_are_silent(folders: Path) -> None:
    (folders / "pending" / "a.yaml").write_text("x")
    waker = Waker([folders / "pending"])
    try:
        (folders / "pending" / "a.yaml").read_text()
        os.rename(folders / "pending" / "a.yaml", folders / "leased" / "a.yaml")
        (folders / "leased" / "c.yaml").write_text("x")
        os.unlink(folders / "leased" / "c.yaml")
        started = time.monotonic()
        assert waker.wait(0.3) == []
        assert time.monotonic() - started >= 0.25
    finally:
        waker.stop()


def test_events_that_queue_while_nobody_waits_return_at_once_each_name_once(folders: Path) -> None:
    waker = Waker([folders / "pending"])
    try:
        for _ in range(3):
            (folders / "pending" / "a.yaml").write_text("x")  # create, modify, close, three times
        time.sleep(0.1)
        started = time.monotonic()
        seen = waker.wait(5.0)
        assert time.monotonic() - started < 1.0
        if not waker.threaded:
            assert seen == [("pending", "a.yaml")]
        assert ("pending", "a.yaml") in seen
    finally:
        waker.stop()


def test_a_poke_from_a_signal_handler_wakes_a_wait_at_once(folders: Path) -> None:
    waker = Waker([folders / "pending"])
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: waker.poke())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        started = time.monotonic()
        assert waker.wait(10.0) == []
        assert time.monotonic() - started < 2.0
        waker.poke()
        waker.poke()  # pokes before a wait: that wait returns at once, the next one waits again
        started = time.monotonic()
        waker.wait(10.0)
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        waker.wait(0.2)
        assert time.monotonic() - started >= 0.15
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        waker.stop()


def test_an_overflowed_queue_only_delays_until_the_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """IN_Q_OVERFLOW (the kernel dropped events) wakes the wait with nothing to say: the caller
    looks at its folders on its poll anyway, and the next wait still waits and still wakes."""
    waker = Waker([tmp_path])
    assert not waker.threaded
    binding = waker._impl._binding  # type: ignore[union-attr]
    real_parse = binding.parse
    monkeypatch.setattr(binding, "parse", lambda buffer: iter([(-1, binding.overflow, 0, b"")]))
    try:
        (tmp_path / "lost.yaml").write_text("x")
        assert waker.wait(5.0) == []  # woken, nothing named: the event was lost
        monkeypatch.setattr(binding, "parse", real_parse)
        started = time.monotonic()
        assert waker.wait(0.2) == []  # a lost event: the wait runs to its timeout, no longer
        assert 0.15 <= time.monotonic() - started < 2.0
        (tmp_path / "next.yaml").write_text("x")
        assert _wait_for(waker, (tmp_path.name, "next.yaml")) < 1.0
    finally:
        waker.stop()


def test_stop_closes_the_descriptors_and_a_late_poke_is_harmless(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    waker = Waker([tmp_path])
    assert len(os.listdir("/proc/self/fd")) == before + 3  # the inotify fd and the poke pipe
    waker.stop()
    assert len(os.listdir("/proc/self/fd")) == before
    waker.poke()
    waker.stop()


def test_a_folder_that_cannot_be_watched_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        Waker([tmp_path / "missing"])


def test_in_a_landings_only_folder_writes_in_place_do_not_wake(folders: Path) -> None:
    """The coordinator's leased/, done/ and dead/: job files land there only by a rename or a
    link; what is written in place there (heartbeats, ``.wake``) needs no pass."""
    (folders / "leased" / ".a.1.hb").write_text("0 w\n")
    waker = Waker([folders / "pending", folders / "leased"], landings_only=[folders / "leased"])
    try:
        with open(folders / "leased" / ".a.1.hb", "w") as beat:  # written in place, closed
            beat.write("1 w\n")
        started = time.monotonic()
        assert waker.wait(0.3) == []
        assert time.monotonic() - started >= 0.25
        (folders / "tmp" / "a.yaml").write_text("x")
        os.rename(folders / "tmp" / "a.yaml", folders / "leased" / "a.yaml")
        assert _wait_for(waker, ("leased", "a.yaml")) < 1.0
        os.link(folders / "leased" / "a.yaml", folders / "leased" / "b.yaml")
        assert _wait_for(waker, ("leased", "b.yaml")) < 1.0
        with open(folders / "pending" / "c.yaml", "w") as drop:  # elsewhere a write still wakes
            drop.write("task: echo\n")
        assert _wait_for(waker, ("pending", "c.yaml")) < 1.0
    finally:
        waker.stop()


def test_a_settling_wait_gathers_a_burst_into_one_return_and_answers_a_quiet_spell_at_once(folders: Path) -> None:
    """The coordinator's wait: while jobs land it returns no sooner than ``settle_seconds`` after
    the call, with everything that landed meanwhile; after a quiet spell, at the first landing."""
    waker = Waker([folders / "pending"])
    try:
        (folders / "pending" / "a.yaml").write_text("x")
        later = threading.Timer(0.2, (folders / "pending" / "b.yaml").write_text, args=("x",))
        started = time.monotonic()
        later.start()
        landed = waker.wait(5.0, settle_seconds=0.6)
        took = time.monotonic() - started
        later.join()
        assert took >= 0.55 and {("pending", "a.yaml"), ("pending", "b.yaml")} <= set(landed), (took, landed)

        quiet = threading.Timer(1.5, (folders / "pending" / "c.yaml").write_text, args=("x",))
        started = time.monotonic()
        quiet.start()
        assert ("pending", "c.yaml") in waker.wait(10.0, settle_seconds=1.0)
        quiet.join()
        assert time.monotonic() - started < 1.5 + 1.0, "a landing after a quiet spell waited out the settle"
        while waker.wait(0.3):  # c.yaml's write and close, after its creation woke us
            pass
        started = time.monotonic()
        assert waker.wait(0.05, settle_seconds=1.0) == []
        assert time.monotonic() - started < 1.0, "nothing landed: the timeout ends the wait, not the settle"
    finally:
        waker.stop()
