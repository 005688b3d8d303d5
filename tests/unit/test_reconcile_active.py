"""``reconcile(sp, full=False)``: the coordinator's frequent pass looks at the jobs in flight, and a
full pass (every folder against every row) still comes at the first call, when the ledger was
replaced, and every ``FULL_SECONDS``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool import recovery
from spool.clock import FakeClock
from spool.layout import State, job_name
from spool.recovery import FULL_SECONDS, reconcile
from spool.spool import Spool
from spool.transitions import Lease, claim, complete


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


def listed_folders(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> list[list[State]]:
    """What each later list_folders call lists (every state: a full pass)."""
    calls: list[list[State]] = []
    real = recovery.list_folders

    def spy(sp: Spool, states: object = State) -> recovery.Listing:
        calls.append(list(states))  # type: ignore[call-overload]
        return real(sp, calls[-1])

    monkeypatch.setattr(recovery, "list_folders", spy)
    return calls


def test_the_first_pass_is_full_then_only_the_active_folders(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = listed_folders(sp, monkeypatch)
    reconcile(sp, full=False)
    reconcile(sp, full=False)
    assert calls == [list(State), [State.PENDING, State.WAITING, State.LEASED]]


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
    assert calls == [list(State)] and sp.ledger.states() == {done: "done"}
    os.unlink(sp.root / "ledger.sqlite3")  # deleted by hand under a running process
    reconcile(sp, full=False)
    assert calls[-1] == list(State) and sp.ledger.states() == {done: "done"}
