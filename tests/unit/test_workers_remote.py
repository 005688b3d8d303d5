"""Remote workers count as alive while a server heard from them within the lease term: on the
spool's clock (a FakeClock here, so the term's edge is exact), with the tasks they asked for,
everywhere live workers are read (``live_workers``, ``unhandled_ready``, ``spool stats``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool.base.clock import FakeClock
from spool.ledger.schema import SCHEMA_VERSION
from spool.spool import Spool
from spool.views.stats import collect
from spool.workers import handlers_of, live_workers, unhandled_ready

START = 1_800_000_000.0
TERM = 30.0  # the default lease_seconds: no coordinator has published another


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def sp(spool_dir: Path, clock: FakeClock) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, clock=clock)
    yield opened
    opened.close()


def _stats_worker(sp: Spool, name: str) -> dict[str, object] | None:
    return next((w for w in collect(sp)["workers"] if w["name"] == name), None)


def test_a_remote_worker_heard_from_within_the_term_is_alive_with_its_tasks(sp: Spool, clock: FakeClock) -> None:
    sp.submit("resize", {})
    sp.submit("nobody", {})
    assert unhandled_ready(sp) == {"nobody": 1, "resize": 1}
    sp.ledger.remote_worker_seen("far-1", "10.0.0.7", START, START, ["resize", "echo"])
    [worker] = live_workers(sp)
    assert (worker.name, worker.remote, worker.pid, worker.host, worker.tasks) == (
        "far-1",
        True,
        None,
        "10.0.0.7",
        {"resize", "echo"},
    )
    assert handlers_of(live_workers(sp), "resize") == ["far-1"]
    assert unhandled_ready(sp) == {"nobody": 1}
    seen = _stats_worker(sp, "far-1")
    assert seen is not None and seen["alive"] is True and seen["remote"] is True
    assert seen["tasks"] == ["echo", "resize"] and seen["pid"] == 0  # no process on this host

    clock.advance(TERM)  # the edge of the term: still alive
    assert [w.name for w in live_workers(sp)] == ["far-1"]
    clock.advance(0.001)  # past it: not alive, but still listed as seen
    assert live_workers(sp) == []
    assert unhandled_ready(sp) == {"nobody": 1, "resize": 1}
    seen = _stats_worker(sp, "far-1")
    assert seen is not None and seen["alive"] is False
    clock.advance(3600.0)  # an hour unheard: left out of listings
    assert _stats_worker(sp, "far-1") is None


def test_the_term_is_the_one_the_coordinator_published(sp: Spool, clock: FakeClock) -> None:
    sp.ledger.set_meta(lease_seconds=2.0)
    sp.ledger.remote_worker_seen("far-1", "h", START, START, ["echo"])
    clock.advance(2.0)
    assert [w.name for w in live_workers(sp)] == ["far-1"]
    clock.advance(0.5)
    assert live_workers(sp) == []


def test_a_heartbeat_names_no_tasks_and_keeps_the_ones_asked_for(sp: Spool, clock: FakeClock) -> None:
    sp.ledger.remote_worker_seen("far-1", "h", START, START, ["echo"])
    clock.advance(TERM)
    sp.ledger.remote_worker_seen("far-1", "h", START, clock.wall(), None)  # a heartbeat
    clock.advance(TERM)
    [worker] = live_workers(sp)
    assert worker.tasks == {"echo"}
    sp.ledger.remote_worker_seen("far-1", "h", START, clock.wall(), ["echo", "resize"])  # asks for more now
    assert live_workers(sp)[0].tasks == {"echo", "resize"}


def test_a_remote_worker_that_has_not_asked_for_tasks_yet_hides_no_warning_it_cannot_judge(sp: Spool) -> None:
    sp.submit("resize", {})
    sp.ledger.remote_worker_seen("far-1", "h", START, START, None)  # a heartbeat first: a restarted server
    assert handlers_of(live_workers(sp), "resize") is None
    assert unhandled_ready(sp) == {}


def test_an_unreadable_ledger_leaves_remote_workers_unknown_so_nothing_is_called_unhandled(
    spool_dir: Path, clock: FakeClock
) -> None:
    (spool_dir / "ledger.sqlite3").write_bytes(b"not a database, " * 512)
    with Spool(spool_dir, environ={}, clock=clock) as sp:
        workers = live_workers(sp)
    assert [w.remote for w in workers] == [True] and workers[0].tasks is None
    assert handlers_of(workers, "resize") is None


def test_a_version_2_ledger_moves_the_servers_pid_0_rows_to_remote_workers(spool_dir: Path, clock: FakeClock) -> None:
    with Spool(spool_dir, environ={}, clock=clock) as sp:
        sp.ledger.worker_seen("local-1", 4242, "here", START, START)
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    db.execute("DROP TABLE remote_workers")  # as version 2 had it: the server wrote pid 0 into workers
    db.execute("INSERT INTO workers VALUES('far-1', 0, '10.0.0.7', ?, ?)", (START, START))
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    with Spool(spool_dir, environ={}, clock=clock) as sp:
        assert [row[0] for row in sp.ledger.workers()] == ["local-1"]
        assert sp.ledger.remote_workers(0.0) == [("far-1", "10.0.0.7", START, START, None)]
    version = sqlite3.connect(spool_dir / "ledger.sqlite3").execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION == 6
