"""Schedules with real processes: a real coordinator (SIGKILLed, at each firing crash point too),
real workers, the real clock. Each test waits on a condition with a deadline.

A slot's job carries the key ``schedule:<name>@<slot>``; "one job per slot" is counted by the
distinct ids each key has in the files (every job file in every folder), not by the ledger.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from collections import Counter

import pytest
from crashkit import Kit
from support import run_spool, wait_until

from spool.disk.layout import State
from spool.schedule.format import slot_of_key
from spool.moves.store import read_job

FIRING_POINTS = ("after-key-check", "after-key", "after-commit", "after-submit")


def jobs_of(kit: Kit, name: str) -> dict[str, list[str]]:
    """key -> the ids of every job file in any folder carrying it, for ``name``'s firings."""
    found: dict[str, list[str]] = {}
    for state in State:
        for file_name in os.listdir(kit.spool_dir / state.value):
            if file_name.startswith(".") or not file_name.endswith(".yaml"):
                continue
            job_id = file_name[: -len(".yaml")]
            try:
                key = read_job(kit.sp, state, job_id).job.key
            except (FileNotFoundError, ValueError):
                continue
            if key.startswith(f"schedule:{name}@"):
                found.setdefault(key, []).append(job_id)
    return found


def slots_of(kit: Kit, name: str) -> list[float]:
    return sorted(slot for key in jobs_of(kit, name) if (slot := slot_of_key(key)) is not None)


def add_every(kit: Kit, name: str, seconds: int, *extra: str) -> None:
    added = run_spool(
        "schedule", "add", name, "echo", "--every", f"{seconds}s", "-a", "n:=1", *extra, spool=kit.spool_dir
    )
    assert added.returncode == 0, added.stderr


def wait_fired(kit: Kit, name: str, count: int, timeout: float = 20.0) -> list[float]:
    wait_until(lambda: len(slots_of(kit, name)) >= count, timeout=timeout, message=f"{count} firings of {name}")
    return slots_of(kit, name)


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def assert_one_job_per_slot(kit: Kit, name: str) -> None:
    jobs = jobs_of(kit, name)
    doubled = {key: ids for key, ids in jobs.items() if len(set(ids)) != 1}
    assert not doubled, f"a slot fired twice: {doubled}"
    all_ids = [job_id for ids in jobs.values() for job_id in ids]
    assert len(all_ids) == len(set(all_ids)) == len(jobs)


def test_a_one_second_schedule_never_fires_a_slot_twice_across_sigkills(kit: Kit) -> None:
    add_every(kit, "tick", 1)
    kit.worker("w1")
    for point in FIRING_POINTS:
        before = len(slots_of(kit, "tick"))
        crashing = kit.coordinator(env={"SPOOL_CRASH_AT": f"coordinator:{point}"})
        assert crashing.wait(timeout=20) == -signal.SIGKILL, kit.log(crashing)
        coordinator = kit.coordinator()
        wait_fired(kit, "tick", before + 2)
        sigkill(coordinator)  # plain SIGKILL, anywhere in its loop
    coordinator = kit.coordinator()
    fired = wait_fired(kit, "tick", len(slots_of(kit, "tick")) + 3)
    kit.stop(coordinator)
    assert_one_job_per_slot(kit, "tick")
    assert all(slot == math.floor(slot) for slot in fired)
    # About once a second while a coordinator ran: the last run's slots are consecutive.
    last_run = fired[-3:]
    assert [b - a for a, b in zip(last_run, last_run[1:])] == [1.0, 1.0], fired
    for job_id in [ids[0] for ids in jobs_of(kit, "tick").values()]:
        kit.wait_state(job_id, "done")
    kit.fsck_ok()


def test_after_downtime_across_five_slots_catchup_none_one_all(kit: Kit) -> None:
    for catchup in ("none", "one", "all"):
        add_every(kit, catchup, 2, "--catchup", catchup)
    coordinator = kit.coordinator()
    names = ("none", "one", "all")
    wait_until(lambda: all(slots_of(kit, n) for n in names), timeout=20, message="a first firing of each")
    last = max(slots_of(kit, "all"))
    wait_until(lambda: all(last in slots_of(kit, n) for n in names), timeout=10, message="slot L everywhere")
    sigkill(coordinator)
    assert time.time() < last + 2, "killed after the next slot: the machine is too slow for this test"
    wait_until(lambda: time.time() >= last + 10.2, timeout=15, message="five slots to pass")  # L+2 .. L+10
    coordinator = kit.coordinator()
    live = last + 12
    wait_until(lambda: all(live in slots_of(kit, n) for n in names), timeout=20, message="the next live slot")
    kit.stop(coordinator)
    missed = {n: [s for s in slots_of(kit, n) if last < s <= last + 10] for n in names}
    assert missed["none"] == [], missed
    assert missed["one"] == [last + 10], missed
    assert missed["all"] == [last + 2 * k for k in range(1, 6)], missed
    for name in names:
        assert_one_job_per_slot(kit, name)


def test_a_broken_file_beside_a_good_one(kit: Kit) -> None:
    add_every(kit, "good", 1)
    broken = kit.spool_dir / "schedules" / "broken.yaml"
    broken.write_text("task: echo\nevery: 0\n")
    coordinator = kit.coordinator()
    fired = wait_fired(kit, "good", 3)
    listed = run_spool("schedule", "list", "--json", spool=kit.spool_dir)
    views = {v["name"]: v for v in json.loads(listed.stdout)}
    assert "every" in views["broken"]["error"] and views["broken"]["next"] is None
    assert views["good"]["error"] is None and views["good"]["last_slot"] is not None
    assert kit.log(coordinator).count("schedule broken fires nothing") == 1  # once, not every pass
    # A new error: said once more. Renamed into place: written in place, the running coordinator
    # may read it truncated between open and write, which is a change of its own (said too).
    staged = broken.with_name(".broken.yaml.tmp")
    staged.write_text("task: echo\ncron: 'not cron at all'\n")
    staged.rename(broken)
    kit.wait_logged(coordinator, "not cron at all")
    wait_fired(kit, "good", len(fired) + 3)
    assert kit.log(coordinator).count("schedule broken fires nothing") == 2
    assert jobs_of(kit, "broken") == {}
    kit.stop(coordinator)
    assert_one_job_per_slot(kit, "good")


@pytest.mark.parametrize("atomically", [True, False])
def test_a_file_written_by_hand_is_picked_up_within_a_second(kit: Kit, atomically: bool) -> None:
    coordinator = kit.coordinator()
    kit.wait_logged(coordinator, "coordinator started")
    folder = kit.spool_dir / "schedules"
    text = "task: echo\nargs: {n: 2}\nevery: 1s\n"
    if atomically:
        (folder / "hand.yaml.tmp").write_text(text)
        os.rename(folder / "hand.yaml.tmp", folder / "hand.yaml")
    else:
        with open(folder / "hand.yaml", "w") as handle:  # torn for a moment: read as broken, then whole
            handle.write(text[:12])
            handle.flush()
            time.sleep(0.2)
            handle.write(text[12:])
    written = time.monotonic()
    kit.wait_logged(coordinator, "schedule hand (every 1s): next slot", timeout=5)
    assert time.monotonic() - written < 1.0 + 0.5  # within a second (plus the log's own lag)
    wait_fired(kit, "hand", 2)
    kit.stop(coordinator)
    assert_one_job_per_slot(kit, "hand")


def test_overlap_skip_waits_for_the_previous_job(kit: Kit) -> None:
    added = run_spool(
        "schedule",
        "add",
        "slow",
        "sleep",
        "--every",
        "1s",
        "-a",
        "seconds:=2.5",
        "--overlap",
        "skip",
        spool=kit.spool_dir,
    )
    assert added.returncode == 0, added.stderr
    coordinator = kit.coordinator()
    kit.worker("w1")
    wait_until(lambda: len(jobs_of(kit, "slow")) >= 3, timeout=30, message="three firings")
    kit.stop(coordinator)
    slots = slots_of(kit, "slow")
    gaps = Counter(b - a for a, b in zip(slots, slots[1:]))
    assert all(gap >= 2 for gap in gaps), slots  # never a slot while the 2.5 s job ran
    assert_one_job_per_slot(kit, "slow")


def test_a_second_coordinator_taking_over_fires_no_slot_twice(kit: Kit) -> None:
    add_every(kit, "tick", 1)
    first = kit.coordinator()
    kit.wait_logged(first, "coordinator started")
    second = kit.coordinator()  # waits on the first one's lock
    kit.wait_logged(second, "another coordinator runs")
    fired = wait_fired(kit, "tick", 3)
    sigkill(first)
    kit.wait_logged(second, "coordinator started")
    wait_fired(kit, "tick", len(fired) + 3)
    kit.stop(second)
    assert_one_job_per_slot(kit, "tick")
    assert "schedule tick fired" not in kit.log(second).split("coordinator started")[0]
