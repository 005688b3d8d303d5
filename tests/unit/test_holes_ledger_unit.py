"""Issue 7, findings 3, 4 and 5 in-process: the ledger is an index that never refuses a row the
files hold, never lets a raw sqlite3 error out, follows its file when it is deleted or moved
aside, and never harms a new ledger when a connection to an old one closes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from spool import Spool
from spool.base.errors import DiskFull, SpoolError
from spool.job import Job, JobFile
from spool.disk.layout import State
from spool.ledger.schema import SCHEMA_VERSION
from spool.moves.store import read_job
from spool.base.timetext import now_text

V1_JOBS = """CREATE TABLE jobs(
    id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, task TEXT NOT NULL, state TEXT NOT NULL,
    priority INTEGER NOT NULL, ready INTEGER NOT NULL DEFAULT 0, ready_seq INTEGER,
    attempt INTEGER NOT NULL, tries INTEGER NOT NULL, max_tries INTEGER NOT NULL, reason TEXT,
    submitted_at TEXT NOT NULL, updated REAL NOT NULL)"""


def _file(job_id: str, key: str) -> JobFile:
    return JobFile(job=Job(id=job_id, key=key, task="echo", args={}, max_tries=3), submitted_at=now_text())


def test_two_rows_may_carry_one_key(sp: Spool) -> None:
    """A submit racing a purge of its key writes a new job while the old row may still be there."""
    sp.ledger.record(_file("01OLDJOB", "k"), State.DEAD, ready=False, event="submit")
    sp.ledger.record(_file("01NEWJOB", "k"), State.PENDING, ready=True, event="submit")
    assert sp.ledger.states() == {"01OLDJOB": "dead", "01NEWJOB": "pending"}


def test_a_version_1_ledger_is_migrated_keeping_its_rows(spool_dir: Path) -> None:
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    db.execute(V1_JOBS)
    db.execute("INSERT INTO jobs VALUES('01KEPT', 'k', 'echo', 'pending', 0, 1, 1, 0, 0, 3, NULL, 'now', 0)")
    db.commit()
    db.close()
    with Spool(spool_dir, environ={}) as sp:
        assert sp.ledger.states() == {"01KEPT": "pending"}
        assert sp.ledger.reserve_next(None) == "01KEPT"  # claim_order was rebuilt
        sp.ledger.record(_file("01OTHER", "k"), State.PENDING, ready=True, event="submit")
    version = sqlite3.connect(spool_dir / "ledger.sqlite3").execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION  # the current one (3 since remote_workers): a v1 ledger goes all the way


def test_sqlite_errors_leave_the_ledger_typed(sp: Spool) -> None:
    from spool.base.errors import LedgerError, LedgerUnusable
    from spool.ledger.file import typed

    def error(code: int) -> sqlite3.Error:
        err = sqlite3.OperationalError("boom")
        err.sqlite_errorcode = code  # type: ignore[attr-defined]
        return err

    root_fd = sp.layout.root_fd
    assert isinstance(typed(error(sqlite3.SQLITE_FULL), sp.layout.ledger_path, root_fd), DiskFull)
    assert isinstance(typed(error(sqlite3.SQLITE_NOTADB), sp.layout.ledger_path, root_fd), LedgerUnusable)
    other = typed(error(sqlite3.SQLITE_READONLY), sp.layout.ledger_path, root_fd)
    assert type(other) is LedgerError and "boom" in str(other)


def test_a_corrupt_ledger_raises_ledger_unusable_and_set_aside_gives_a_fresh_one(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        job_id = sp.submit("echo")
    with open(spool_dir / "ledger.sqlite3", "r+b") as ledger:
        ledger.write(os.urandom(4 * 4096))
    with Spool(spool_dir, environ={}) as sp:
        with pytest.raises(SpoolError, match="fsck --repair") as raised:
            sp.ledger.counts()
        assert type(raised.value).__name__ == "LedgerUnusable"
        aside = sp.set_ledger_aside()
        assert aside and (spool_dir / aside).exists() and aside.startswith("ledger.sqlite3.corrupt-")
        assert sp.ledger.counts() == {}
        assert sp.state(job_id) is State.PENDING  # the files never needed the ledger


def test_an_open_ledger_follows_its_file_when_it_is_deleted(sp: Spool) -> None:
    first = sp.submit("echo")
    assert sp.ledger.states() == {first: "pending"}
    os.unlink(sp.root / "ledger.sqlite3")
    assert sp.ledger.states() == {}  # a fresh one, not the unlinked inode
    assert (sp.root / "ledger.sqlite3").exists()
    second = sp.submit("echo")
    with Spool(sp.root, environ={}) as other:
        assert other.ledger.states() == {second: "pending"}


HOLD = """import sys
from spool import Spool
sp = Spool(sys.argv[1], environ={})
sp.submit("echo")
print("ready", flush=True)
sys.stdin.readline()
sp.close()
"""


def test_a_ledger_deleted_beside_another_process_is_recreated_whole(spool_dir: Path) -> None:
    """Another process holds the old ledger (its WAL index mapped) when ``rm ledger.sqlite3``
    runs: the new ledger must not adopt the old -wal/-shm, and when the old process closes (the
    old inode's last connection, which SQLite would let delete ``-wal``/``-shm`` by name: the new
    ledger's names now) the new ledger stays whole."""
    old = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(spool_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert old.stdout is not None and old.stdout.readline().strip() == "ready"
        os.unlink(spool_dir / "ledger.sqlite3")  # -wal and -shm stay, in use by the other process
        with Spool(spool_dir, environ={}) as new:
            job_id = new.submit("echo")  # its row is in the new ledger's WAL
            old.communicate("close\n", timeout=60)
            assert old.returncode == 0
            check = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from spool import Spool; "
                    "print(sorted(Spool(sys.argv[1], environ={}).ledger.states()))",
                    str(spool_dir),
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert check.returncode == 0, check.stderr
            assert check.stdout.strip() == str([job_id])
            assert new.submit("echo") and len(new.ledger.states()) == 2
    finally:
        old.kill()
        old.wait()


def test_a_submit_whose_ledger_fails_after_the_commit_is_accepted(
    sp: Spool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The full-disk, purge-race and group-shared failures in one: the ledger refuses the row."""
    from spool.base.errors import LedgerError

    def broken(*args: object, **kwargs: object) -> None:
        raise LedgerError("ledger: attempt to write a readonly database")

    sp.ledger.counts()
    monkeypatch.setattr(sp.ledger, "record", broken)
    job_id = sp.submit("echo", key="kept")
    assert read_job(sp, State.PENDING, job_id).job.key == "kept"
    assert "the ledger did not record it" in caplog.text
    monkeypatch.undo()
    assert sp.submit("echo", key="kept") == job_id  # a retry finds it: no second job
