"""Issue 17's schedule findings, through real processes: a purged firing with the ledger lost
(finding 2), planted ``schedule:`` keys (3), a wall clock stepped forward and back (9), and what
is said about names and files that are no schedule (15).

"One job per slot" is counted in the files (every job file in every folder), never the ledger.
Each wait is a condition with a deadline; the clock tests drive a real coordinator's wall clock
with libfaketime (a file it re-reads), its monotonic clock left alone.
"""

from __future__ import annotations

import glob
import inspect
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from crashkit import Kit
from support import run_spool, wait_until
from test_schedules_running import jobs_of, slots_of  # one reading of a schedule's firings

from spool.base.errors import InvalidJob
from spool.job import JobFile
from spool.disk.layout import State
from spool.schedule.format import slot_key
from spool.moves.store import read_job
from spool.moves.submission import submit
from spool.base.timetext import parse_time

DAY = 86400.0


def spool_ok(kit: Kit, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_spool(*args, spool=kit.spool_dir)
    assert done.returncode == 0, done.stderr
    return done


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def fired_after(kit: Kit, name: str, moment: float, count: int = 2, timeout: float = 20.0) -> list[float]:
    """Wait for ``count`` firings of ``name`` with slots after ``moment``: passes have run since."""
    wait_until(
        lambda: len([s for s in slots_of(kit, name) if s > moment]) >= count,
        timeout=timeout,
        message=f"{count} firings of {name} after {moment}",
    )
    return slots_of(kit, name)


def listed(kit: Kit) -> dict[str, dict]:
    return {v["name"]: v for v in json.loads(spool_ok(kit, "schedule", "list", "--json").stdout)}


# -- finding 2: the record of a firing is in the files ------------------------------------------


def test_a_purged_firing_with_the_ledger_lost_or_corrupt_never_fires_again(kit: Kit) -> None:
    daily = kit.spool_dir / "schedules" / "daily.yaml"
    daily.write_text("task: echo\nargs: {n: 1}\ncron: '0 0 * * *'\n")
    os.utime(daily, (time.time() - 3 * DAY, time.time() - 3 * DAY))  # catchup one: today's 00:00 fires
    spool_ok(kit, "schedule", "add", "canary", "echo", "--every", "1s")  # its firings show passes ran
    coordinator = kit.coordinator()
    kit.worker("w1")
    first = wait_until(lambda: jobs_of(kit, "daily"), timeout=20, message="today's slot to fire")
    (job_id,) = [ids[0] for ids in first.values()]
    kit.wait_state(job_id, "done")
    sigkill(coordinator)
    spool_ok(kit, "purge", "--older-than", "0s")
    assert jobs_of(kit, "daily") == {}
    for damage in ("deleted", "corrupt"):
        for path in glob.glob(str(kit.spool_dir / "ledger.sqlite3*")):
            os.unlink(path)
        if damage == "corrupt":
            (kit.spool_dir / "ledger.sqlite3").write_bytes(b"this is not a database\n" * 512)
        started = time.time()
        coordinator = kit.coordinator()
        fired_after(kit, "canary", started)
        kit.stop(coordinator)  # not SIGKILL: one mid-firing leaves the canary's ledger row behind for fsck
        assert jobs_of(kit, "daily") == {}, f"ledger {damage}: today's slot fired again"
    kit.fsck_ok()


def test_a_slot_whose_coordinator_died_before_its_record_is_not_fired_again_after_a_purge(kit: Kit) -> None:
    """The coordinator is killed between the slot's submit and its record (its job is all that
    says the slot fired); with no coordinator, ``fsck --repair`` indexes the job, a worker runs it
    and it is purged: the purge records the firing first, so the next coordinator does not fire
    that slot again."""
    daily = kit.spool_dir / "schedules" / "daily.yaml"
    daily.write_text("task: echo\nargs: {n: 1}\ncron: '0 0 * * *'\n")
    os.utime(daily, (time.time() - 3 * DAY, time.time() - 3 * DAY))  # catchup one: today's 00:00 fires
    crashed = kit.coordinator(env={"SPOOL_CRASH_AT": "coordinator:after-submit"})
    assert crashed.wait(timeout=30) == -signal.SIGKILL
    first = jobs_of(kit, "daily")
    assert len(first) == 1, first
    (job_id,) = [ids[0] for ids in first.values()]
    spool_ok(kit, "fsck", "--repair")  # the ledger row the killed coordinator never wrote
    worker = kit.worker("w1")
    kit.wait_state(job_id, "done")
    kit.stop(worker)
    spool_ok(kit, "purge", "--older-than", "0s")
    assert jobs_of(kit, "daily") == {}
    spool_ok(kit, "schedule", "add", "canary", "echo", "--every", "1s")  # its firings show passes ran
    started = time.time()
    coordinator = kit.coordinator()
    fired_after(kit, "canary", started)
    kit.stop(coordinator)  # not SIGKILL: one mid-firing leaves the canary's ledger row behind for fsck
    assert jobs_of(kit, "daily") == {}, "today's slot fired again after its job was purged"
    kit.fsck_ok()


# -- finding 3: `schedule:` keys are the schedules' own -------------------------------------------


def test_schedule_keys_are_refused_from_the_cli_the_python_api_and_a_drop(kit: Kit) -> None:
    spool_ok(kit, "schedule", "add", "tick", "echo", "--every", "2s")
    planted = "schedule:tick@2099-01-01T00:00:00.000Z"
    refused = run_spool("submit", "echo", "--key", planted, spool=kit.spool_dir)
    assert refused.returncode == 2 and "reserved" in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(InvalidJob, match="reserved"):
        kit.sp.submit("echo", {}, key=planted)
    with pytest.raises(InvalidJob, match="reserved"):
        kit.sp.submit_many([kit.sp.spec("echo", {}, key="fine"), kit.sp.spec("echo", {}, key=planted)])
    assert os.listdir(kit.spool_dir / "keys") == [] and os.listdir(kit.spool_dir / "pending") == []
    (kit.spool_dir / "pending" / "drop.yaml").write_text(f"task: echo\nkey: '{planted}'\n")
    coordinator = kit.coordinator()

    def set_aside() -> JobFile | None:
        """The drop's dead record, once whole: the drop is moved to dead/ first, then rewritten."""
        for name in os.listdir(kit.spool_dir / "dead"):
            try:
                return read_job(kit.sp, State.DEAD, name[: -len(".yaml")])
            except InvalidJob:
                return None
        return None

    record = wait_until(set_aside, timeout=20, message="the drop set aside")
    assert isinstance(record, JobFile)
    assert record.reason == "invalid" and "reserved" in (record.error or "")
    view = listed(kit)["tick"]
    assert view["next"] is not None and not view["next"].startswith("2099")
    fired_after(kit, "tick", time.time(), count=1)
    kit.stop(coordinator)


def test_a_job_planted_under_a_slot_key_is_not_taken_for_the_schedules_own(kit: Kit) -> None:
    """Keys planted before they were reserved (here through the scheduler's own entry point): a
    far-future one does not stop the schedule, and one for a real slot is passed over, said so,
    and never counted as the schedule's firing."""
    spool_ok(kit, "schedule", "add", "tick", "echo", "--every", "2s", "-a", "n:=1")
    soon = (int(time.time()) // 2 + 3) * 2.0  # a slot 4..6 s ahead
    # (On a spool from before the reservation, a plain submit; ``firing`` is how one is made now.)
    legacy = {"firing": True} if "firing" in inspect.signature(submit).parameters else {}
    for slot in (soon, 4102444800.0):  # ... and 2100-01-01
        submit(kit.sp, {"task": "touch", "args": {"path": "/dev/null"}, "key": slot_key("tick", slot)}, **legacy)
    coordinator = kit.coordinator()
    wait_until(
        lambda: [s for s in slots_of(kit, "tick") if soon < s < soon + 60],
        timeout=30,
        message="a firing after the planted slot",
    )
    kit.wait_logged(coordinator, "which this schedule did not make")
    view = listed(kit)["tick"]
    assert not view["next"].startswith("2100") and view["last_job"] is not None
    kit.stop(coordinator)
    planted_id = jobs_of(kit, "tick")[slot_key("tick", soon)][0]
    assert view["last_job"] != planted_id


# -- finding 9: a wall clock stepped forward, then back ----------------------------------------------


@pytest.fixture
def steppable_clock(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment for a process whose wall clock follows the offset in a file, and that file."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.skip("libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)")
    offset = tmp_path / "faketime.rc"
    offset.write_text("+0\n")
    env = {
        "LD_PRELOAD": found[0],
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    return env, offset


def test_a_clock_stepped_a_day_ahead_then_back_neither_floods_nor_silences(
    kit: Kit, steppable_clock: tuple[dict[str, str], Path]
) -> None:
    env, offset = steppable_clock
    spool_ok(kit, "schedule", "add", "tick", "echo", "--every", "2s", "--catchup", "none")
    coordinator = kit.coordinator(env=env)
    before = fired_after(kit, "tick", time.time(), count=1)
    offset.write_text("+1d\n")
    ahead = time.time() + DAY
    fired_after(kit, "tick", ahead, count=1, timeout=20)
    jumped = [s for s in slots_of(kit, "tick") if s > before[-1] + 60]
    assert len(jumped) <= 3, f"catchup none fired {len(jumped)} slots the clock jumped over"
    kit.wait_logged(coordinator, "wall clock jumped")
    offset.write_text("+0\n")
    back = time.time()
    wait_until(
        lambda: [s for s in slots_of(kit, "tick") if back < s < back + 60],
        timeout=20,
        message="a firing on the clock stepped back",
    )
    kit.wait_logged(coordinator, "fires again from now")
    kit.stop(coordinator)


def test_rm_then_add_starts_a_schedule_afresh(kit: Kit) -> None:
    spool_ok(kit, "schedule", "add", "tick", "echo", "--every", "1s")
    coordinator = kit.coordinator()
    fired_after(kit, "tick", time.time(), count=1)
    kit.stop(coordinator)
    assert listed(kit)["tick"]["last_slot"] is not None
    spool_ok(kit, "schedule", "rm", "tick")
    assert sorted(os.listdir(kit.spool_dir / "schedules")) == []
    spool_ok(kit, "schedule", "add", "tick", "echo", "--every", "1s")
    assert listed(kit)["tick"]["last_slot"] is None


# -- finding 15: names and files that are no schedule ---------------------------------------------


def test_a_long_name_and_files_that_are_no_schedule_are_said_so(kit: Kit) -> None:
    refused = run_spool("schedule", "add", "n" * 250, "echo", "--every", "1m", spool=kit.spool_dir)
    assert refused.returncode == 2 and "at most 64 characters" in refused.stderr
    folder = kit.spool_dir / "schedules"
    (folder / "nightly.yml").write_text("task: echo\nevery: 1s\n")
    (folder / "README").write_text("notes\n")
    daily = folder / "daily.yaml"
    daily.write_text("task: echo\ncron: '0 0 * * *'\n")
    os.utime(daily, (time.time() - 3 * DAY, time.time() - 3 * DAY))
    shown = run_spool("schedule", "list", spool=kit.spool_dir)
    assert "schedules/nightly.yml is ignored" in shown.stderr and "nightly.yaml" in shown.stderr
    assert "schedules/README is ignored" in shown.stderr
    checked = run_spool("fsck", spool=kit.spool_dir)
    assert checked.returncode == 0 and "schedules/nightly.yml is ignored" in checked.stdout
    coordinator = kit.coordinator()
    kit.wait_logged(coordinator, "schedule daily (cron 0 0 * * *): next slot")
    kit.wait_logged(coordinator, "schedules/README is ignored")
    line = next(x for x in kit.log(coordinator).splitlines() if "schedule daily (cron 0 0 * * *): next slot" in x)
    upcoming = line.split("next slot ")[1].split()[0].rstrip(";")
    assert parse_time(upcoming, "next").timestamp() > time.time() - 5, line
    spool_ok(kit, "schedule", "list")  # the log says each ignored file once, not every second
    kit.stop(coordinator)
    assert kit.log(coordinator).count("schedules/nightly.yml is ignored") == 1
