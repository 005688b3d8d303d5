"""An upgrade opens a spool the previous version wrote (docs/operations.md, "Upgrades").

``fixtures/spool-b7ed8f5.tar.gz`` was written by the code of commit b7ed8f5 (spool_format 1, ledger
schema 3, before queues/ existed; ``fixtures/make-spool-b7ed8f5.sh`` is how): two jobs done, one
dead (failed), one cancelled, two pending (one keyed), a waiting child of the keyed one, a
schedule. Today's ``spool`` reads it as it is: status, ls, fsck, stats; the ledger migrates on
open; a worker finishes the pending jobs and the child; the schedule fires its latest missed slot;
a key taken then is still taken; a queue can be set (queues/ is made when first written); and the
ledger rebuilt from the files agrees.
"""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path

import pytest

from spool.ledger.schema import SCHEMA_VERSION
from support import Procs, run_spool, wait_until

FIXTURE = Path(__file__).with_name("fixtures") / "spool-b7ed8f5.tar.gz"
D1, D2 = "01M93GM5S92XTWM23ZGX0NC9DH", "01M93GM61EBTF84ZG7RR691HED"
F, X = "01M93GM69M25SYMXRHKX16C9XR", "01M93GM8XB9KVS6AM9S7VMWJRF"
P1, P2, W1 = "01M93GM8AH5EMAHC4HN7VVQYQE", "01M93GM8JR55WV1B826STJECYR", "01M93GM8SD7WJAVFW2Y4PWNKNN"
BEFORE = {D1: "done", D2: "done", F: "dead", X: "dead", P1: "pending", P2: "pending", W1: "waiting"}
AFTER = {**BEFORE, P1: "done", P2: "done", W1: "done"}


@pytest.fixture
def old_spool(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "spool"


def user_version(root: Path) -> int:
    db = sqlite3.connect(root / "ledger.sqlite3")
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def states(root: Path) -> dict[str, str]:
    out = run_spool("ls", "--json", spool=root)
    assert out.returncode == 0, out.stderr
    return {row["id"]: row["state"] for row in json.loads(out.stdout)}


def test_the_fixture_is_what_it_says(old_spool: Path) -> None:
    assert (old_spool / ".spool").read_text() == "spool_format: 1\n"
    assert user_version(old_spool) == 3
    assert not (old_spool / "queues").exists()


def test_todays_spool_reads_and_finishes_an_old_spool(old_spool: Path, tmp_path: Path) -> None:
    status = run_spool("status", P1, "--json", spool=old_spool)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "pending"
    assert states(old_spool) == BEFORE
    assert user_version(old_spool) == SCHEMA_VERSION  # migrated on open
    assert json.loads(run_spool("result", D1, spool=old_spool).stdout)["args"] == {"msg": "done-1"}
    fsck = run_spool("fsck", spool=old_spool)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert run_spool("stats", spool=old_spool).returncode == 0
    assert "nightly" in run_spool("schedule", "list", spool=old_spool).stdout

    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Procs(old_spool, logs)
    try:
        procs.start("run", "--workers", "1", "--import", "examples.tasks", name="run")
        waited = run_spool("wait", P1, P2, W1, "--timeout", "60", spool=old_spool, timeout=90)
        assert waited.returncode == 0, waited.stdout + waited.stderr + procs.output()[-3000:]
        wait_until(lambda: len(states(old_spool)) > len(AFTER), 60, message="the schedule's missed slot fired")
    finally:
        procs.stop()
    after = states(old_spool)
    assert {job_id: after.get(job_id) for job_id in AFTER} == AFTER
    # The fixture's schedule (its file written 2026-12-05 16:29 UTC, "0 3 * * *") has missed every
    # slot since 2026-12-06 03:00: catchup one fires the latest, once, when the run starts.
    fired = sorted(set(after) - set(AFTER))
    assert len(fired) == 1, fired
    nightly = json.loads(run_spool("status", fired[0], "--json", spool=old_spool).stdout)
    assert nightly["key"].startswith("schedule:nightly@") and nightly["task"] == "echo", nightly
    child = json.loads(run_spool("result", W1, spool=old_spool).stdout)
    assert child["args"] == {"msg": "child"}
    again = run_spool("submit", "echo", "--key", "old-pending-1", spool=old_spool)
    assert again.returncode == 0 and again.stdout.strip() == P1  # the old key is still taken
    queue = run_spool("queue", "set", "default", "--concurrency", "2", spool=old_spool)
    assert queue.returncode == 0, queue.stderr
    assert (old_spool / "queues" / "default.yaml").is_file()


def test_the_ledger_of_an_old_spool_rebuilds_from_its_files(old_spool: Path) -> None:
    for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"):
        (old_spool / name).unlink(missing_ok=True)
    repair = run_spool("fsck", "--repair", spool=old_spool)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "rebuilt" in repair.stdout
    assert user_version(old_spool) == SCHEMA_VERSION
    assert states(old_spool) == BEFORE
    assert run_spool("fsck", spool=old_spool).returncode == 0
