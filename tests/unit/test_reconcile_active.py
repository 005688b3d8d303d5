"""``reconcile(sp, full=False)``: the coordinator's frequent pass looks at the jobs in flight, and a
full pass (every folder against every row) still comes at the first call, when the ledger was
replaced, and every ``FULL_SECONDS``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import behind_the_seam
from spool.moves import recovery
from spool.disk import fsio
from spool.base.clock import FakeClock
from spool.disk.layout import State, job_name
from spool.moves.recovery import ACTIVE, FULL_SECONDS
from spool.spool import Spool
from spool.moves.transitions import Lease, claim, complete


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sp(spool_dir: Path, clock: FakeClock) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, clock=clock)
    yield opened
    opened.close()


def finished(sp: Spool) -> str:
    job_id = sp.submit("echo")
    claimed = claim(sp, "w", None)
    assert claimed is not None and claimed.id == job_id
    complete(sp, Lease(job_id, "w", claimed.attempt), b'"ok"')
    return job_id


def listed_folders(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> list[set[State]]:
    """The state folders each later reconcile lists (a full pass: all five)."""
    calls: list[set[State]] = []
    by_fd = {sp.layout.fd(state): state for state in State}

    class Listing(fsio.RealFS):
        def list_dir(self, dir_fd: int) -> list[str]:
            calls[-1].add(by_fd[dir_fd])
            return super().list_dir(dir_fd)

    real_reconcile = recovery.reconcile

    def counted(*args: Any, **kwargs: Any) -> recovery.Listing:
        calls.append(set())
        with behind_the_seam(Listing()):
            return real_reconcile(*args, **kwargs)

    monkeypatch.setattr(recovery, "reconcile", counted)
    return calls


def reconcile(sp: Spool, *, full: bool = True) -> None:
    recovery.reconcile(sp, full=full)  # looked up at each call: listed_folders counts them


def test_the_first_pass_is_full_then_only_the_active_folders(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = listed_folders(sp, monkeypatch)
    reconcile(sp, full=False)
    reconcile(sp, full=False)
    assert calls == [set(State), set(ACTIVE)]


def test_a_job_that_left_the_active_folders_without_its_row_is_resynced(sp: Spool, clock: FakeClock) -> None:
    reconcile(sp, full=False)
    done = finished(sp)
    sp.ledger.record(sp.job(done)[1], State.LEASED, ready=False, event="test")  # the move's commit was lost
    reserved = sp.submit("echo")
    assert sp.ledger.reserve_next(None) == reserved  # a claim that died before its rename
    moved = sp.submit("echo")
    os.rename(sp.root / "pending" / job_name(moved), sp.root / "waiting" / job_name(moved))
    reconcile(sp, full=False)
    assert sp.ledger.states() == {done: "done", moved: "waiting", reserved: "pending"}


def test_a_job_in_an_active_folder_and_done_is_settled(sp: Spool) -> None:
    reconcile(sp, full=False)
    done = finished(sp)
    os.link(sp.root / "done" / job_name(done), sp.root / "leased" / job_name(done))  # a move's source survived
    reconcile(sp, full=False)
    assert not (sp.root / "leased" / job_name(done)).exists()
    assert sp.ledger.states() == {done: "done"}


def test_rows_only_done_can_show_wait_for_the_next_full_pass(sp: Spool, clock: FakeClock) -> None:
    done = finished(sp)
    reconcile(sp, full=False)
    sp.ledger.forget([done])
    reconcile(sp, full=False)
    assert sp.ledger.states() == {}  # done/ is not listed between full passes
    clock.advance(FULL_SECONDS)
    reconcile(sp, full=False)
    assert sp.ledger.states() == {done: "done"}
    sp.ledger.forget([done])
    reconcile(sp)  # the default is a full pass
    assert sp.ledger.states() == {done: "done"}


def test_a_replaced_ledger_makes_the_next_pass_full(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    done = finished(sp)
    reconcile(sp, full=False)
    sp.set_ledger_aside()  # as the coordinator does with an unreadable one: a fresh, empty ledger
    calls = listed_folders(sp, monkeypatch)
    reconcile(sp, full=False)
    assert calls == [set(State)] and sp.ledger.states() == {done: "done"}
    os.unlink(sp.root / "ledger.sqlite3")  # deleted by hand under a running process
    reconcile(sp, full=False)
    assert calls[-1] == set(State) and sp.ledger.states() == {done: "done"}


def test_a_full_pass_compares_done_and_dead_a_page_at_a_time(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery, "PAGE", 2)
    jobs = [finished(sp) for _ in range(5)]
    no_row, no_file, twice, wrong_row = jobs[0], jobs[1], jobs[2], jobs[3]
    reconcile(sp, full=False)
    sp.ledger.forget([no_row])
    os.unlink(sp.root / "done" / job_name(no_file))  # removed by hand (its result stays)
    os.link(sp.root / "done" / job_name(twice), sp.root / "dead" / job_name(twice))  # a move's source survived
    sp.ledger.record(sp.job(wrong_row)[1], State.DEAD, ready=False, event="test")
    reconcile(sp)
    assert not (sp.root / "dead" / job_name(twice)).exists()
    assert sp.ledger.states() == {job_id: "done" for job_id in jobs if job_id != no_file}
