"""spool.ledger: the index answers claim order, keys and counts; it holds nothing the files can't rebuild."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool.ledger.reservations import BUSY_FIRST_SECONDS, BUSY_LAST_SECONDS
from spool.moves.chains import advance_waiting
from spool.moves.group import claim_many
from spool.moves.ready import make_ready
from spool.disk.layout import State, job_name
from spool.moves.recovery import list_folders, reconcile
from spool.spool import Spool
from spool.moves.store import job_lock, read_job
from spool.moves.submission import lookup_key
from spool.moves.transitions import Lease, claim, complete, fail
from support import run_spool


@pytest.fixture
def sp(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, flags={"backoff_base_seconds": 0.001})
    yield opened
    opened.close()


def test_reserve_next_takes_the_best_ready_job_of_the_tasks_once(sp: Spool) -> None:
    a = sp.submit("echo")
    b = sp.submit("other", priority=1)
    assert sp.ledger.reserve_next(["echo"]) == a
    assert sp.ledger.reserve_next(["echo"]) is None  # reserved: no one else gets it
    sp.ledger.unreserve(a)
    assert sp.ledger.reserve_next(None) == b
    assert sp.ledger.reserve_next(None) == a
    assert sp.ledger.reserve_next(None) is None


def test_a_job_still_ready_keeps_its_place_in_line(sp: Spool) -> None:
    first, second = sp.submit("echo"), sp.submit("echo")
    job_file = read_job(sp, State.PENDING, first)
    sp.ledger.record(job_file, State.PENDING, ready=True, event="resync")  # a resync of a ready job
    assert sp.ledger.reserve_next(None) == first
    assert sp.ledger.reserve_next(None) == second


def test_a_record_out_of_the_claim_order_writes_the_row_the_full_upsert_writes(
    sp: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one-statement UPDATE (a claim, a completion) against the SELECT + upsert it replaces:
    # the same row, its ready_seq kept; a missing row still gets its deps from the insert.
    import spool.ledger.core as ledger_module

    dep = sp.submit("echo")
    job_id = sp.submit("echo", depends_on=[dep])
    job_file = read_job(sp, State.WAITING, job_id)

    def recorded(*, one_statement: bool, row_there: bool) -> dict[str, object]:
        sp.ledger.forget([job_id])
        if row_there:
            sp.ledger.record_many([(job_file, State.PENDING, True)], event="ready")
        with monkeypatch.context() as patch:
            if not one_statement:
                patch.setattr(ledger_module, "_update_unready", lambda *args: False)
            sp.ledger.record(job_file, State.DEAD, ready=False, event="cancel", now=5.0)
        row = sp.ledger.row(job_id)
        assert row is not None and sorted(sp.ledger.dependents(dep)) == [job_id]
        return {**row, "ready_seq": row["ready_seq"] is not None}

    full = recorded(one_statement=False, row_there=True)
    assert full["ready_seq"] is True  # kept from its time in the claim order
    assert recorded(one_statement=True, row_there=True) == full
    assert recorded(one_statement=True, row_there=False) == recorded(one_statement=False, row_there=False)


def test_history_records_each_transition(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=2)
    claim(sp, "w1", None)
    fail(sp, Lease(job_id, "w1", 1), "Traceback\nValueError: boom")
    make_ready(sp, job_id)
    claim(sp, "w2", None)
    complete(sp, Lease(job_id, "w2", 2), b"1")
    events = [(event, attempt, worker) for _at, event, attempt, worker, _d in sp.ledger.history(job_id)]
    assert events == [
        ("submit", 0, None),
        ("claim", 1, "w1"),
        ("fail", 1, "w1"),
        ("ready", 1, None),
        ("claim", 2, "w2"),
        ("complete", 2, "w2"),
    ]
    assert sp.ledger.history(job_id)[2][4] == "ValueError: boom"


def test_reconcile_makes_the_ledger_agree_with_the_folders(sp: Spool) -> None:
    kept, removed, moved = sp.submit("echo"), sp.submit("echo"), sp.submit("echo")
    os.unlink(sp.root / "pending" / job_name(removed))
    os.rename(sp.root / "pending" / job_name(moved), sp.root / "waiting" / job_name(moved))
    sp.ledger.forget([kept])
    reconcile(sp)
    assert sp.ledger.states() == {kept: "pending", moved: "waiting"}


def build_every_state(sp: Spool) -> dict[str, tuple[str, str | None]]:
    """One job in each state the spool can hold, each with its own key: {key: (state, reason)}."""

    def submit(key: str, **kwargs: object) -> str:
        return sp.submit("echo", {"key": key}, key=key, **kwargs)  # type: ignore[arg-type]

    def run(job_id: str, ok: bool, worker: str = "w") -> None:
        claimed = claim(sp, worker, None)
        assert claimed is not None and claimed.id == job_id
        if ok:
            complete(sp, Lease(job_id, worker, claimed.attempt), json.dumps(job_id).encode())
        else:
            fail(sp, Lease(job_id, worker, claimed.attempt), "boom", reject=True)

    done = submit("done")
    run(done, True)
    failed = submit("failed")
    run(failed, False)
    parent = submit("parent")
    child = submit("child", depends_on=[parent])
    run(parent, False)
    assert advance_waiting(sp, child) is State.DEAD  # skipped
    cancelled = submit("cancelled")
    sp.cancel(cancelled)
    submit("leased")
    assert claim(sp, "w", None) is not None
    submit("delayed", delay_seconds=3600)
    head = submit("head")
    submit("waiting", depends_on=[head])
    submit("ready", priority=-1)
    (sp.root / "pending" / "bad drop.yaml").write_text("task: [\n")
    reconcile(sp)
    from spool.moves.ingest import ingest

    ingest(sp, "bad drop.yaml")
    return {
        "done": ("done", None),
        "failed": ("dead", "failed"),
        "parent": ("dead", "failed"),
        "child": ("dead", "skipped"),
        "cancelled": ("dead", "cancelled"),
        "leased": ("leased", None),
        "delayed": ("pending", None),
        "head": ("pending", None),
        "waiting": ("waiting", None),
        "ready": ("pending", None),
    }


def test_deleting_the_ledger_and_fsck_repair_restores_every_state_and_key(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        expected = build_every_state(sp)
        ids = {key: lookup_key(sp, key) for key in expected}
        before = {job_id: sp.status(job_id) for job_id in sp.ledger.ids()}
        assert len(before) == len(expected) + 1  # and the invalid drop
    for suffix in ("", "-wal", "-shm"):
        path = spool_dir / f"ledger.sqlite3{suffix}"
        if path.exists():
            path.unlink()

    repair = run_spool("fsck", "--repair", spool=spool_dir)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "ledger: rebuilt from the files (11 jobs)" in repair.stdout

    listed = run_spool("ls", "--json", spool=spool_dir)
    assert listed.returncode == 0, listed.stderr
    views = {view["id"]: view for view in json.loads(listed.stdout)}
    assert views == before  # ls, and so status, says what it said before
    stats = json.loads(run_spool("stats", "--json", spool=spool_dir).stdout)
    on_disk = {
        state.value: len([n for n in os.listdir(spool_dir / state.value) if not n.startswith(".")]) for state in State
    }
    assert {state: count for state, count in stats["counts"].items() if count} == {
        state: count for state, count in on_disk.items() if count
    }
    assert stats["ready"] == 2  # head and ready; the delayed one is not

    with Spool(spool_dir, environ={}) as sp:
        for key, (state, reason) in expected.items():
            job_id = ids[key]
            assert job_id is not None
            assert (sp.status(job_id)["state"], sp.status(job_id)["reason"]) == (state, reason), key
            assert sp.submit("echo", key=key) == job_id, key  # every key still finds its job
        assert sp.ledger.dependents(ids["head"]) == [ids["waiting"]]
        order = [claim(sp, "w2", None) for _ in range(3)]
        assert [c.id if c else None for c in order] == [ids["head"], ids["ready"], None]
        folders = list_folders(sp)
        assert sum(len(states) for states in folders.jobs.values()) == len(expected) + 1


def test_a_claim_that_met_a_busy_lock_is_asked_back_soon_and_backs_off_while_it_stays_busy(sp: Spool) -> None:
    """``retry_soon``: a worker's idle wait ends at ``retry_at`` (runner.worker._idle_wait)."""
    ledger = sp.ledger
    ledger.retry_at = None
    before = time.time()
    ledger.retry_soon()
    assert ledger.retry_at is not None and before + BUSY_FIRST_SECONDS <= ledger.retry_at <= time.time() + 0.01
    pauses = []
    for _ in range(12):  # each one still busy at the retry it asked for
        ledger.retry_soon()
        pauses.append(ledger._busy_pause)  # noqa: SLF001
    assert pauses[:3] == [2 * BUSY_FIRST_SECONDS, 4 * BUSY_FIRST_SECONDS, 8 * BUSY_FIRST_SECONDS]
    assert pauses[-1] == BUSY_LAST_SECONDS
    ledger._busy_until -= 2 * BUSY_LAST_SECONDS  # noqa: SLF001 (a quiet second and more since)
    ledger.retry_soon()
    assert ledger._busy_pause == BUSY_FIRST_SECONDS  # noqa: SLF001
    ledger.retry_at = before  # a rate window's earlier moment is kept
    ledger.retry_soon()
    assert ledger.retry_at == before


def test_a_batch_claim_that_met_several_busy_locks_asks_back_once(sp: Spool) -> None:
    """One claim is one retry: the first pause, not one doubling per member given back."""
    ids = [sp.submit("echo", {"n": n}) for n in range(3)]
    sp.ledger.retry_at = None
    with job_lock(sp, ids[0]), job_lock(sp, ids[1]):  # another process's, as far as a claim can tell
        claimed = claim_many(sp, "w1", None, 3)
    assert [held.job_file.id for held in claimed] == [ids[2]]
    assert sp.ledger._busy_pause == BUSY_FIRST_SECONDS  # noqa: SLF001
    assert sp.ledger.states()[ids[0]] == sp.ledger.states()[ids[1]] == "pending"
