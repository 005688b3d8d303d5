"""Schedule files and their slots: the format, the cron arithmetic across DST (a fixed instant
stands in for the clock here, and only here), and the coordinator's Scheduler driven by a fake
wall clock (catchup, disable/enable, the wall clock stepping back)."""

from __future__ import annotations

import os
from pathlib import Path
from datetime import UTC, datetime

import pytest

from spool import Spool
from spool.schedule import fired as firings
from spool.schedule import folder as scheduling
from spool.admin import purge
from spool.runner.scheduler import Scheduler
from spool.schedule.format import InvalidSchedule, Schedule, parse_schedule, schedule_of_key, slot_key, slot_of_key
from spool.base.timetext import format_time


def parse(text: str, name: str = "s") -> Schedule:
    return parse_schedule(text.encode(), name, default_max_tries=3, default_timeout=60.0)


def at(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


def times(schedule: Schedule, start: float, count: int) -> list[str]:
    out, slot = [], start
    for _ in range(count):
        slot = schedule.next_slot(slot)
        out.append(format_time(slot))
    return out


# -- the format -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("task: echo\nevery: [\n", "schedules/s:"),  # unparseable YAML
        ("task: echo\ncron: '61 * * * *'\n", "not a valid cron expression"),
        ("task: echo\ncron: '* * *'\n", "expected 5 fields"),
        ("task: echo\ncron: '* * * * *'\nevery: 1m\n", "exactly one of 'cron' and 'every'"),
        ("task: echo\n", "exactly one of 'cron' and 'every'"),
        ("task: echo\nevery: 1m\nqueues: fast\n", "unknown field 'queues'"),
        ("task: echo\nevery: 1m\nkey: k\n", "unknown field 'key'"),
        ("task: echo\nevery: 0\n", "at least 1s"),
        ("task: echo\nevery: 1.5s\n", "whole number of seconds"),
        ("task: echo\nevery: soon\n", "field 'every'"),
        ("every: 1m\n", "field 'task'"),
        ("task: echo\nevery: 1m\nmax_tries: 0\n", "field 'max_tries'"),
        ("task: echo\nevery: 1m\ntz: Europe/Berlin\n", "'tz' goes with 'cron'"),
        ("task: echo\ncron: '* * * * *'\ntz: Mars/Olympus\n", "IANA time zone"),
        ("task: echo\nevery: 1m\ncatchup: some\n", "field 'catchup'"),
        ("task: echo\nevery: 1m\noverlap: queue\n", "field 'overlap'"),
        ("task: echo\nevery: 1m\nenabled: yes\n", "field 'enabled'"),  # YAML 1.2: 'yes' is a string
        ("- a list\n", "expected a mapping"),
    ],
)
def test_a_bad_file_is_an_invalid_schedule(text: str, error: str) -> None:
    with pytest.raises(InvalidSchedule, match=None) as raised:
        parse(text)
    assert error in str(raised.value), str(raised.value)


def test_a_name_outside_the_id_grammar_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match="at most 64 characters"):
        parse("task: echo\nevery: 1m\n", name="../up")


def test_a_full_file_and_its_defaults() -> None:
    full = parse(
        "cron: '0 9 * * 1-5'\ntz: Europe/Berlin\ntask: report\nargs: {to: ops}\npriority: 5\nmax_tries: 2\n"
        "timeout: 30\nenabled: false\ncatchup: all\noverlap: skip\n"
    )
    assert (full.cron, full.tz, full.enabled, full.catchup, full.overlap) == (
        "0 9 * * 1-5",
        "Europe/Berlin",
        False,
        "all",
        "skip",
    )
    assert full.spec("k") == {
        "task": "report",
        "args": {"to": "ops"},
        "priority": 5,
        "max_tries": 2,
        "timeout": 30,
        "key": "k",
    }
    plain = parse("task: echo\nevery: 5m\n")
    assert (plain.every_seconds, plain.tz, plain.enabled, plain.catchup, plain.overlap) == (
        300,
        "UTC",
        True,
        "one",
        "allow",
    )


def test_slot_keys_name_the_schedule_and_the_slot() -> None:
    key = slot_key("nightly", at(2026, 3, 29, 1, 0))
    assert key == "schedule:nightly@2026-03-29T01:00:00.000Z"
    assert schedule_of_key(key) == "nightly" and slot_of_key(key) == at(2026, 3, 29, 1, 0)
    assert schedule_of_key("invoice-7") is None and slot_of_key("schedule:x@not-a-time") is None


# -- slots --------------------------------------------------------------------------------------


def test_every_counts_whole_multiples_since_the_epoch() -> None:
    every = parse("task: echo\nevery: 1h\n")
    assert every.next_slot(at(2026, 1, 1, 10, 20)) == at(2026, 1, 1, 11, 0)
    assert every.next_slot(at(2026, 1, 1, 11, 0)) == at(2026, 1, 1, 12, 0)  # strictly after
    assert every.last_slot(at(2026, 1, 1, 11, 0)) == at(2026, 1, 1, 11, 0)
    assert list(every.slots(at(2026, 1, 1, 10, 0), at(2026, 1, 1, 13, 0))) == [
        at(2026, 1, 1, 11),
        at(2026, 1, 1, 12),
        at(2026, 1, 1, 13),
    ]


def test_six_fields_have_seconds_last() -> None:
    cron = parse("task: echo\ncron: '* * * * * */20'\n")
    assert times(cron, at(2026, 1, 1, 0, 0, 5), 3) == [
        "2026-01-01T00:00:20.000Z",
        "2026-01-01T00:00:40.000Z",
        "2026-01-01T00:01:00.000Z",
    ]


def test_berlin_spring_forward_moves_a_skipped_time_to_the_end_of_the_gap() -> None:
    # 2026-03-29: at 01:00 UTC Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 never happens.
    daily = parse("task: echo\ncron: '30 2 * * *'\ntz: Europe/Berlin\n")
    assert times(daily, at(2026, 3, 27, 12), 3) == [
        "2026-03-28T01:30:00.000Z",  # 02:30 CET
        "2026-03-29T01:00:00.000Z",  # 02:30 does not exist: 03:00 CEST, the first instant after the gap
        "2026-03-30T00:30:00.000Z",  # 02:30 CEST
    ]
    half_hourly = parse("task: echo\ncron: '*/30 * * * *'\ntz: Europe/Berlin\n")
    assert times(half_hourly, at(2026, 3, 29, 0, 0), 3) == [
        "2026-03-29T00:30:00.000Z",  # 01:30 CET
        "2026-03-29T01:00:00.000Z",  # 02:00, 02:30 (the gap) and 03:00 CEST: one slot, fired once
        "2026-03-29T01:30:00.000Z",  # 03:30 CEST
    ]


def test_berlin_autumn_overlap_fires_an_ambiguous_time_once() -> None:
    # 2026-10-25: at 01:00 UTC Berlin goes back from 03:00 CEST to 02:00 CET; 02:30 happens twice.
    daily = parse("task: echo\ncron: '30 2 * * *'\ntz: Europe/Berlin\n")
    assert times(daily, at(2026, 10, 24, 12), 3) == [
        "2026-10-25T00:30:00.000Z",  # 02:30 CEST, the first occurrence; not again at 02:30 CET
        "2026-10-26T01:30:00.000Z",  # 02:30 CET
        "2026-10-27T01:30:00.000Z",
    ]
    assert daily.last_slot(at(2026, 10, 25, 1, 45)) == at(2026, 10, 25, 0, 30)  # during the second 02:xx
    hourly = parse("task: echo\ncron: '0 * * * *'\ntz: Europe/Berlin\n")
    assert times(hourly, at(2026, 10, 24, 23, 30), 4) == [
        "2026-10-25T00:00:00.000Z",  # 02:00 CEST
        "2026-10-25T02:00:00.000Z",  # 03:00 CET: 02:00 CET (a repeat) does not fire again
        "2026-10-25T03:00:00.000Z",
        "2026-10-25T04:00:00.000Z",
    ]


# -- the coordinator's Scheduler, on a fake wall clock -------------------------------------------


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def write(sp: Spool, name: str, text: str, written: float) -> None:
    path = sp.layout.path("schedules", f"{name}.yaml")
    path.write_text(text)
    os.utime(path, (written, written))


def fired(sp: Spool, name: str) -> list[str]:
    return sorted(sp.ledger.row(job_id)["key"] for job_id in sp.ids(key_prefix=f"schedule:{name}@"))


def test_a_new_schedule_fires_from_its_next_slot_and_sleeps_until_then(sp: Spool) -> None:
    wall = Wall(at(2026, 1, 1, 10, 0, 0) + 0.5)
    write(sp, "tick", "task: echo\nevery: 10s\n", wall.now)
    scheduler = Scheduler(sp, wall=wall)
    scheduler.run_pass()
    assert fired(sp, "tick") == []
    assert scheduler.seconds_until_due() == pytest.approx(9.5)
    wall.now += 9.5
    scheduler.run_pass()
    assert fired(sp, "tick") == ["schedule:tick@2026-01-01T10:00:10.000Z"]


@pytest.mark.parametrize(("catchup", "expected"), [("none", 0), ("one", 1), ("all", 5)])
def test_catchup_after_downtime(sp: Spool, catchup: str, expected: int) -> None:
    start = at(2026, 1, 1, 10, 0, 0)
    write(sp, "c", f"task: echo\nevery: 10s\ncatchup: {catchup}\n", start - 1)
    wall = Wall(start - 0.5)
    first = Scheduler(sp, wall=wall)
    first.run_pass()
    wall.now = start
    first.run_pass()
    assert fired(sp, "c") == ["schedule:c@2026-01-01T10:00:00.000Z"]  # live: fired whatever the catchup
    later = Scheduler(sp, wall=Wall(start + 55))  # down across 10:00:10 .. 10:00:50
    later.run_pass()
    after = [k for k in fired(sp, "c") if k > "schedule:c@2026-01-01T10:00:00.000Z"]
    assert len(after) == expected, after
    if expected == 1:
        assert after == ["schedule:c@2026-01-01T10:00:50.000Z"]


def test_a_wall_clock_stepped_back_fires_no_slot_again(sp: Spool) -> None:
    wall = Wall(at(2026, 1, 1, 10, 0, 0) + 0.1)
    write(sp, "tick", "task: echo\nevery: 1s\n", wall.now)
    scheduler = Scheduler(sp, wall=wall)
    for _ in range(5):
        wall.now += 1
        scheduler.run_pass()
    before = fired(sp, "tick")
    assert len(before) == 5
    wall.now -= 4  # an NTP step back
    for _ in range(4):
        scheduler.run_pass()
        wall.now += 1
    assert fired(sp, "tick") == before
    restarted = Scheduler(sp, wall=wall)  # a new coordinator, the clock still behind
    restarted.run_pass()
    assert fired(sp, "tick") == before


def test_disable_then_enable_fires_no_backlog(sp: Spool) -> None:
    wall = Wall(at(2026, 1, 1, 10, 0, 0) + 0.1)
    write(sp, "tick", "task: echo\nevery: 1s\n", wall.now)
    scheduler = Scheduler(sp, wall=wall)
    scheduler.run_pass()
    scheduler.scan()
    write(sp, "tick", "task: echo\nevery: 1s\nenabled: false\n", wall.now)
    scheduler.scan()
    wall.now += 10
    scheduler.run_pass()
    assert fired(sp, "tick") == []
    write(sp, "tick", "task: echo\nevery: 1s\nenabled: true\n", wall.now)
    scheduler.scan()
    wall.now += 1
    scheduler.run_pass()
    assert len(fired(sp, "tick")) == 1


def test_schedule_files_are_written_atomically_and_removed(sp: Spool) -> None:
    fields = scheduling.schedule_fields(
        cron=None, tz=None, every="30s", task="echo", args={"n": 1}, priority=None, max_tries=None, timeout=None
    )
    scheduling.add(sp, "tick", fields)
    assert os.listdir(sp.layout.path("tmp")) == []
    assert scheduling.read_schedule(sp, "tick").every_seconds == 30
    assert scheduling.set_enabled(sp, "tick", False).enabled is False
    with pytest.raises(InvalidSchedule, match="exists"):
        scheduling.add(sp, "tick", fields)
    scheduling.remove(sp, "tick")
    assert os.listdir(sp.layout.path("schedules")) == []


def test_a_purged_firing_is_not_fired_again_after_a_restart(sp: Spool) -> None:
    wall = Wall(at(2026, 1, 1, 10, 0, 0) - 0.5)
    write(sp, "tick", "task: echo\nevery: 10s\n", wall.now)
    scheduler = Scheduler(sp, wall=wall)
    scheduler.run_pass()
    wall.now += 0.5
    scheduler.run_pass()
    assert len(fired(sp, "tick")) == 1
    job_id = sp.ids(key_prefix="schedule:tick@")[0]
    sp.cancel(job_id)
    assert purge(sp, 0.0) == [job_id]
    assert fired(sp, "tick") == []
    Scheduler(sp, wall=Wall(wall.now + 1)).run_pass()  # a restart: without the cache it fires 10:00:00 again
    assert fired(sp, "tick") == []


def test_catchup_all_after_a_long_downtime_is_bounded_and_walks_back_not_forward() -> None:
    from spool.runner.scheduler import MAX_FIRINGS, _latest_slots

    secondly = parse("task: echo\ncron: '* * * * * *'\n")
    until = at(2026, 1, 8)
    slots = _latest_slots(secondly, until - 7 * 86400, until, MAX_FIRINGS)  # a week of seconds missed
    assert len(slots) == MAX_FIRINGS and slots[-1] == until and slots[0] == until - MAX_FIRINGS + 1
    assert _latest_slots(secondly, until - 3, until, MAX_FIRINGS) == [until - 2, until - 1, until]


def test_backpressure_never_refuses_a_firing(spool_dir: Path) -> None:
    from spool.base.errors import TryLater

    with Spool(spool_dir, environ={"SPOOL_MAX_PENDING": "1"}) as full:
        full.submit("echo", {})
        with pytest.raises(TryLater):
            full.submit("echo", {})
        wall = Wall(at(2026, 1, 1, 10, 0, 0) - 0.5)
        write(full, "tick", "task: echo\nevery: 1s\n", wall.now)
        scheduler = Scheduler(full, wall=wall)
        scheduler.run_pass()
        wall.now += 0.5
        scheduler.run_pass()
        assert fired(full, "tick") == ["schedule:tick@2026-01-01T10:00:00.000Z"]


def test_a_firing_cut_short_is_finished_by_the_next_coordinator(sp: Spool) -> None:
    from spool.fsck import fsck
    from spool.disk.ids import new_id
    from spool.moves.submission import lock_key, reserve_key

    wall = Wall(at(2026, 1, 1, 10, 0, 0) + 0.5)
    write(sp, "tick", "task: echo\nevery: 10s\ncatchup: none\n", wall.now - 60)
    slot = at(2026, 1, 1, 10, 0, 0)
    key = slot_key("tick", slot)
    firings.begin(sp, "tick", slot)  # what _fire writes first
    with lock_key(sp, key):
        reserve_key(sp, key, new_id())  # ... then the submit reserved the key and died
    assert not fsck(sp).ok
    Scheduler(sp, wall=wall).run_pass()  # catchup none, yet the slot whose firing began is finished
    assert fired(sp, "tick") == [key]
    assert fsck(sp).ok


def test_a_firing_cut_short_before_it_wrote_anything_is_finished_too(sp: Spool) -> None:
    wall = Wall(at(2026, 1, 1, 10, 0, 0) + 0.5)
    write(sp, "tick", "task: echo\nevery: 10s\ncatchup: none\n", wall.now - 60)
    slot = at(2026, 1, 1, 10, 0, 0)
    firings.begin(sp, "tick", slot)  # began, died at once
    Scheduler(sp, wall=wall).run_pass()
    assert fired(sp, "tick") == [slot_key("tick", slot)]


def test_a_spool_from_before_the_records_fires_no_slot_its_ledger_says_fired(sp: Spool) -> None:
    """Upgraded: no schedules/.tick.fired yet, the slot's job purged, the old ledger cache says it
    fired. The cache holds it back once (never a slot past now); the next firing writes a record."""
    wall = Wall(at(2026, 1, 1, 10, 0, 5))
    write(sp, "tick", "task: echo\nevery: 10s\n", wall.now - 60)
    sp.ledger.set_meta(**{"schedule_fired:tick": format_time(at(2026, 1, 1, 10, 0, 0))})
    Scheduler(sp, wall=wall).run_pass()
    assert fired(sp, "tick") == []
    sp.ledger.set_meta(**{"schedule_fired:tick": format_time(at(2099, 1, 1))})  # a clock that was far ahead
    Scheduler(sp, wall=wall).run_pass()
    assert fired(sp, "tick") == ["schedule:tick@2026-01-01T10:00:00.000Z"]
    assert firings.read_fired(sp, "tick").slot == at(2026, 1, 1, 10, 0, 0)
