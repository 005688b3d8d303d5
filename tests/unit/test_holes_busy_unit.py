"""Issue 17, finding 4, in-process: a stopped coordinator is told from a busy one
(``runner.pauses``), and firing and ingest are cut into budgets so each pass gets to its lease watch.
The real-process test is tests/api/test_holes_busy_coordinator.py."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from spool import Spool
from spool.disk.layout import State
from spool.runner.coordinator import Coordinator
from spool.runner.pauses import PauseWatch
from spool.runner.scheduler import Scheduler


class Clock:
    def __init__(self, now: float = 1000.0, step: float = 0.0) -> None:
        self.now, self.step = now, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_without_its_thread_a_pause_is_the_gap_between_two_takes() -> None:
    clock = Clock()
    pauses = PauseWatch(5.0, clock=clock)
    assert pauses.take(1000.0) is None  # the first reading
    assert pauses.take(1004.0) is None
    assert pauses.take(1010.0) == 6.0
    assert pauses.take(1011.0) is None


def test_a_stale_ticker_is_one_pause_whoever_notices_it_first() -> None:
    clock = Clock()
    pauses = PauseWatch(5.0, clock=clock)
    pauses.start()
    try:
        assert pauses.take(clock.now) is None
        clock.now += 30.0  # every thread stopped: the ticker's last reading is 30 s old
        assert pauses.take(clock.now) == 30.0  # taken here, or from the ticker if it ran first
        deadline = time.monotonic() + 5
        while pauses._last != clock.now and time.monotonic() < deadline:  # the ticker reads the new time
            time.sleep(0.01)
        assert pauses.take(clock.now) is None, "the same pause reported twice"
    finally:
        pauses.stop()


def test_a_busy_main_thread_is_no_pause() -> None:
    pauses = PauseWatch(0.3)
    pauses.start()
    try:
        assert pauses.take(time.monotonic()) is None
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # a long pass of pure Python work, holding the GIL
            sum(range(1000))
        assert pauses.take(time.monotonic()) is None
    finally:
        pauses.stop()


def _at(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


def _fired(sp: Spool) -> list[str]:
    return sorted(sp.ledger.row(job_id)["key"] for job_id in sp.ids(key_prefix="schedule:"))


def test_firing_over_budget_goes_on_at_the_next_pass_and_fires_each_slot_once(sp: Spool) -> None:
    start = _at(2026, 1, 1, 10, 0, 0)
    for name in ("a", "b", "c"):
        path = sp.layout.path("schedules", f"{name}.yaml")
        path.write_text("task: echo\nevery: 10s\ncatchup: all\n")
        os.utime(path, (start - 1, start - 1))
    wall = Clock(start + 35)  # down across 10:00:00 .. 10:00:30: four slots each to catch up
    scheduler = Scheduler(sp, wall=wall, clock=Clock(step=1.0))
    passes = 0
    while scheduler.seconds_until_due() == 0.0 or passes == 0:
        before = len(_fired(sp))
        scheduler.run_pass(budget_seconds=0.5)
        passes += 1
        assert len(_fired(sp)) - before <= 1, "a pass past its budget fired more than its first slot"
        assert passes < 50
    expected = sorted(f"schedule:{name}@2026-01-01T10:00:{s:02}.000Z" for name in "abc" for s in (0, 10, 20, 30))
    assert _fired(sp) == expected
    assert passes == len(expected)


def test_ingest_over_budget_leaves_the_rest_to_the_next_pass(sp: Spool) -> None:
    for n in range(4):
        (sp.layout.path(State.PENDING) / f"drop-{n}.yaml").write_text(f"task: echo\nargs: {{n: {n}}}\n")
    coordinator = Coordinator(sp, clock=Clock(step=10.0))  # every reading is past the budget
    coordinator.run_pass()
    assert len(coordinator.drop_backlog) == 3
    assert coordinator._next_wait() == 0.0  # the next pass comes at once
    for _ in range(3):
        coordinator.run_pass()
    assert coordinator.drop_backlog == []
    assert sorted(sp.job(job_id)[1].job.args["n"] for job_id in sp.ids()) == [0, 1, 2, 3]
    assert not [name for name in os.listdir(sp.layout.path(State.PENDING)) if name.startswith("drop-")]
