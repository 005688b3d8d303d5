"""Backpressure's count of ready jobs (meta 'ready_pending', schema version 6) is kept by triggers:
after every kind of write to ``jobs`` it equals a count of the rows, and a version-5 ledger gains
it, counted, on open."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from spool import Spool
from spool.base.records import Lease
from spool.fsck import fsck
from spool.ledger.schema import SCHEMA_VERSION
from spool.moves.claiming import claim_held
from spool.moves.transitions import complete, fail, release


def counted(sp: Spool) -> tuple[int, int]:
    """(the kept count backpressure reads, a count of the rows)."""
    return sp.ledger.backlog()[0], sp.ledger.ready_pending_count()


def claim(sp: Spool) -> Lease:
    held = claim_held(sp, "w1", None)
    assert held is not None
    return Lease(held.job_file.id, "w1", held.job_file.attempt)


def test_the_kept_count_follows_every_kind_of_write(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={"SPOOL_BACKOFF_BASE_SECONDS": "0.01"}) as sp:
        seen = []

        def check() -> None:
            kept, rows = counted(sp)
            seen.append(kept)
            assert kept == rows
            assert sp.ledger.meta("ready_pending") == str(kept)  # kept, not counted for want of the row

        parent = sp.submit("echo", {"i": 0})
        check()
        sp.submit("echo", {"i": 1}, depends_on=[parent])  # waiting: not ready
        sp.submit("echo", {"i": 2}, delay_seconds=3600)  # delayed: not ready
        sp.submit_many([{"task": "echo", "args": {"i": i}} for i in range(3, 8)])
        check()
        first = claim(sp)  # the parent: pending -> leased
        check()
        complete(sp, first, json.dumps(1).encode())  # its child is promoted on the next pass
        check()
        failing = claim(sp)
        fail(sp, failing, "boom")  # back to pending after a short backoff
        check()
        given_back = claim(sp)
        release(sp, given_back)  # ready again at once
        check()
        cancelled = sp.ids(state="pending")[0]
        sp.cancel(cancelled)  # pending -> dead
        check()
        sp.requeue(cancelled)  # dead -> pending
        check()
        (spool_dir / "ledger.sqlite3").unlink()  # rebuilt from the files by fsck
        for suffix in ("-wal", "-shm"):
            (spool_dir / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
        assert fsck(sp, repair=True).ok
        check()
    assert len(set(seen)) > 3  # it moved up and down, and each time matched the rows


def test_a_version_5_ledger_gains_the_count_counted_on_open(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        sp.submit_many([{"task": "echo", "args": {"i": i}} for i in range(4)])
        claim(sp)
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    for trigger in ("ready_pending_in", "ready_pending_out", "ready_pending_moved"):
        db.execute(f"DROP TRIGGER {trigger}")
    db.execute("DELETE FROM meta WHERE name = 'ready_pending'")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    with Spool(spool_dir, environ={}) as sp:
        assert counted(sp) == (3, 3)
        claim(sp)
        assert counted(sp) == (2, 2)  # and kept from there on
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
