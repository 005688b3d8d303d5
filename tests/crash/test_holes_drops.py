"""Issue 7, findings 2, 9 and 17, through the folders only, beside a real coordinator process.

- A drop never takes, replaces or bypasses a job, whatever its name: a file a user writes as
  ``pending/<id>.yaml`` (the id of a waiting, done or dead job, or an unused id) becomes
  ``pending/<new id>.yaml`` with ``dropped_as``; ``cp dead/X.yaml pending/`` is a new job with
  X's spec; a copy planted in dead/ goes to dead/<new id> as invalid and the job keeps running.
- ``mv dead/X.yaml pending/`` is a requeue with fresh tries: it never runs past max_tries.
- A worker killed between staging its result and moving the job leaves garbage in tmp/, not a
  broken promise: the coordinator sweeps it, and fsck lists garbage as garbage (exit 0).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import Procs, wait_until

from spool import Spool
from spool.disk.ids import new_id
from spool.disk.layout import State

FAST_CONFIG = "lease_seconds: 2\npoll_seconds: 0.2\nbackoff_base_seconds: 0.05\nbackoff_max_seconds: 0.1\n"
Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def fast(spool_dir: Path) -> Path:
    (spool_dir / "config.yaml").write_text(FAST_CONFIG)
    return spool_dir


def drop_as(root: Path, name: str, text: str) -> None:
    """Write a drop the way the README tells a user to: under a dot name, then rename it in."""
    staging = root / "pending" / ".drop.partial"
    staging.write_text(text)
    os.rename(staging, root / "pending" / name)


def jobs_by_folder(root: Path) -> dict[str, list[str]]:
    return {state.value: sorted(p.stem for p in (root / state.value).glob("*.yaml")) for state in State}


def read(root: Path, job_id: str) -> dict[str, Any]:
    """The job's whole file as the runner reads it, with its state."""
    with Spool(root, environ={}) as sp:
        state, job_file = sp.job(job_id)
    return job_file.to_mapping() | {"state": state.value}


def ingested_from(root: Path, name: str) -> str | None:
    """The id of the job whose file says it was dropped as ``name``, if there is one yet."""
    for state in State:
        for path in (root / state.value).glob("*.yaml"):
            try:
                text = path.read_text(errors="replace")
            except FileNotFoundError:  # moved on (renamed by the ingest, claimed) since the listing
                continue
            if f"dropped_as: {name}" in text:
                return path.stem
    return None


def coordinator_seen(root: Path) -> bool:
    with Spool(root, environ={}) as sp:
        return sp.ledger.meta("coordinator_seen") is not None


def fsck_ok(spool_cli: Cli) -> subprocess.CompletedProcess[str]:
    checked = spool_cli("fsck")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return checked


# -- finding 2: a drop named like a job ---------------------------------------------------------


def test_a_drop_named_like_a_waiting_job_neither_replaces_it_nor_bypasses_its_dependency(
    fast: Path, spool_cli: Cli, procs: Procs
) -> None:
    parent = spool_cli("submit", "echo", "-a", "n=parent").stdout.strip()  # no worker: it stays pending
    child = spool_cli("submit", "echo", "-a", "n=child", "--depends-on", parent).stdout.strip()
    assert (fast / "waiting" / f"{child}.yaml").exists()
    before = (fast / "waiting" / f"{child}.yaml").read_bytes()
    procs.start("coordinator", name="coordinator")
    drop_as(fast, f"{child}.yaml", "task: echo\nargs: {n: impostor}\n")
    impostor = wait_until(lambda: ingested_from(fast, f"{child}.yaml"), timeout=30, message="the drop's ingest")
    assert impostor != child
    wait_until(lambda: not (fast / "pending" / f"{child}.yaml").exists(), timeout=30, message="the drop's rename")
    assert (fast / "waiting" / f"{child}.yaml").read_bytes() == before, "the waiting job was replaced"
    status = read(fast, child)
    assert status["state"] == "waiting" and status["args"] == {"n": "child"} and status["depends_on"] == [parent]
    dropped = read(fast, impostor)
    assert dropped["args"] == {"n": "impostor"} and dropped["depends_on"] == []
    assert jobs_by_folder(fast)["pending"] == sorted([parent, impostor])
    fsck_ok(spool_cli)


@pytest.mark.parametrize("end", ["done", "dead"])
def test_a_drop_named_like_a_finished_job_is_a_new_job_and_the_old_one_stays(
    fast: Path, spool_cli: Cli, procs: Procs, end: str
) -> None:
    job_id = spool_cli("submit", "echo", "-a", "n=old").stdout.strip()
    if end == "done":
        assert spool_cli("worker", "--burst", "--import", "examples.tasks").returncode == 0
    else:
        assert spool_cli("cancel", job_id).returncode == 0
    before = (fast / end / f"{job_id}.yaml").read_bytes()
    procs.start("coordinator", name="coordinator")
    drop_as(fast, f"{job_id}.yaml", "task: echo\nargs: {n: new}\n")
    new = wait_until(lambda: ingested_from(fast, f"{job_id}.yaml"), timeout=30, message="the drop's ingest")
    assert new != job_id
    assert (fast / end / f"{job_id}.yaml").read_bytes() == before
    assert read(fast, new)["args"] == {"n": "new"}
    assert not (fast / "pending" / f"{job_id}.yaml").exists()
    fsck_ok(spool_cli)


def test_a_copy_of_a_dead_job_dropped_in_pending_is_a_new_job_with_its_spec(
    fast: Path, spool_cli: Cli, procs: Procs
) -> None:
    job_id = spool_cli("submit", "echo", "-a", "n=7", "--priority", "3", "--max-tries", "2").stdout.strip()
    assert spool_cli("cancel", job_id).returncode == 0
    before = (fast / "dead" / f"{job_id}.yaml").read_bytes()
    procs.start("coordinator", name="coordinator")
    shutil.copy(fast / "dead" / f"{job_id}.yaml", fast / "pending" / ".copy.tmp")
    os.rename(fast / "pending" / ".copy.tmp", fast / "pending" / f"{job_id}.yaml")  # `cp dead/X.yaml pending/`
    new = wait_until(lambda: ingested_from(fast, f"{job_id}.yaml"), timeout=30, message="the copy's ingest")
    assert new != job_id and (fast / "dead" / f"{job_id}.yaml").read_bytes() == before
    copy = read(fast, new)
    assert copy["task"] == "echo" and copy["args"] == {"n": "7"} and copy["priority"] == 3
    assert copy["max_tries"] == 2 and copy["tries"] == 0 and copy["attempt"] == 0
    assert copy["key"] == new, "the old job's default key is not the copy's"
    assert copy.get("reason") is None
    fsck_ok(spool_cli)


def test_a_drop_named_with_an_unused_id_gets_a_new_id(fast: Path, spool_cli: Cli, procs: Procs) -> None:
    unused = new_id()
    procs.start("coordinator", name="coordinator")
    drop_as(fast, f"{unused}.yaml", "task: echo\nargs: {n: 1}\n")
    new = wait_until(lambda: ingested_from(fast, f"{unused}.yaml"), timeout=30, message="the drop's ingest")
    assert new != unused
    assert jobs_by_folder(fast)["pending"] == [new]
    fsck_ok(spool_cli)


def test_a_copy_planted_in_dead_never_takes_the_job_it_copies(fast: Path, spool_cli: Cli, procs: Procs) -> None:
    job_id = spool_cli("submit", "echo", "-a", "n=1").stdout.strip()
    shutil.copy(fast / "pending" / f"{job_id}.yaml", fast / "dead" / f"{job_id}.yaml")  # by hand
    procs.start("coordinator", name="coordinator")
    records = wait_until(
        lambda: [
            p.stem for p in (fast / "dead").glob("*.yaml") if p.stem != job_id and "reason: invalid" in p.read_text()
        ],
        timeout=30,
        message="the planted copy's record",
    )
    assert not (fast / "dead" / f"{job_id}.yaml").exists()
    assert (fast / "pending" / f"{job_id}.yaml").exists(), "the acknowledged job was lost"
    (record,) = records
    dead = read(fast, record)
    assert dead["reason"] == "invalid" and f"id: {job_id}" in dead["original"]
    procs.start("worker", "--import", "examples.tasks", name="worker")
    wait_until(lambda: (fast / "done" / f"{job_id}.yaml").exists(), timeout=30, message="the job to run")
    fsck_ok(spool_cli)


# -- finding 9: a dead job moved back by hand -----------------------------------------------------


def test_a_dead_job_moved_back_by_hand_is_requeued_with_fresh_tries(fast: Path, spool_cli: Cli, procs: Procs) -> None:
    job_id = spool_cli("submit", "fail_until", "-a", "attempt:=4", "--max-tries", "2").stdout.strip()
    procs.start("coordinator", name="coordinator")
    procs.start("worker", "--import", "examples.tasks", name="worker")
    wait_until(lambda: (fast / "dead" / f"{job_id}.yaml").exists(), timeout=60, message="the job to die")
    assert read(fast, job_id)["tries"] == 2
    os.rename(fast / "dead" / f"{job_id}.yaml", fast / "pending" / f"{job_id}.yaml")  # `mv dead/X.yaml pending/`
    wait_until(
        lambda: (fast / "done" / f"{job_id}.yaml").exists() or (fast / "dead" / f"{job_id}.yaml").exists(),
        timeout=60,
        message="the requeued job to finish",
    )
    status = read(fast, job_id)
    assert status["state"] == "done", status  # attempts 3 and 4 are its fresh two tries
    assert status["tries"] == 2 and status["attempt"] == 4
    procs.stop()
    fsck_ok(spool_cli)


# -- finding 17: a dead worker's staging files are garbage ---------------------------------------


POINTS = ["worker:complete-after-stage", "worker:after-result", "worker:complete-after-move"]


@pytest.mark.parametrize("point", POINTS)
def test_a_dead_workers_staging_files_are_swept_by_the_coordinator(
    fast: Path, spool_cli: Cli, procs: Procs, point: str
) -> None:
    job_id = spool_cli("submit", "echo", "-a", "n=1").stdout.strip()
    procs.start("coordinator", name="coordinator")
    # After the coordinator's first pass (its start-up sweep), so only a sweep made because the
    # worker died can clean up after it.
    wait_until(lambda: coordinator_seen(fast), timeout=30, message="the coordinator's first pass")
    for _ in range(10):  # RACE: the coordinator may hold the job's lock a moment: a burst then finds nothing
        crashed = spool_cli("worker", "--burst", "--import", "examples.tasks", env={"SPOOL_CRASH_AT": point})
        if crashed.returncode != 0 or not (fast / "pending" / f"{job_id}.yaml").exists():
            break
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    procs.start("worker", "--import", "examples.tasks", name="worker")
    wait_until(
        lambda: (fast / "done" / f"{job_id}.yaml").exists() and not (fast / "leased" / f"{job_id}.yaml").exists(),
        timeout=60,
        message="the job to finish",
    )
    procs.stop()  # at once: the coordinator sweeps when the worker's lock frees, and when it stops
    assert sorted(os.listdir(fast / "tmp")) == []
    checked = fsck_ok(spool_cli)
    assert "garbage" not in checked.stdout and "VIOLATION" not in checked.stdout


@pytest.mark.parametrize("point", POINTS)
def test_fsck_lists_a_dead_writers_tmp_file_as_garbage_and_repair_removes_it(
    fast: Path, spool_cli: Cli, point: str
) -> None:
    spool_cli("submit", "echo", "-a", "n=1")
    crashed = spool_cli("worker", "--burst", "--import", "examples.tasks", env={"SPOOL_CRASH_AT": point})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    leftovers = os.listdir(fast / "tmp")
    assert leftovers, "the crash left no staging file"
    checked = spool_cli("fsck")
    assert f"garbage: tmp/{leftovers[0]}" in checked.stdout
    assert not [line for line in checked.stdout.splitlines() if line.startswith("VIOLATION") and "tmp/" in line]
    as_json = json.loads(spool_cli("fsck", "--json").stdout)
    assert [line.split(":")[0] for line in as_json["garbage"]] == [f"tmp/{name}" for name in leftovers]
    if point != "worker:complete-after-move":  # that one also left the job in two folders: a repair's work
        assert checked.returncode == 0 and as_json["ok"] is True, checked.stdout
    repaired = spool_cli("fsck", "--repair", "--json")
    assert repaired.returncode == 0 and json.loads(repaired.stdout)["garbage"] == []
    assert os.listdir(fast / "tmp") == []
