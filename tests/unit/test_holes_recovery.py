"""Issue 7, findings 2 and 9, in-process: which copies of a job are the runner's, and hand moves.

A user's file under a job's name is never the job: it is a drop (pending/) ingested under a new
id, or a planted copy (other folders) kept as an invalid record; an ingest the runner itself
interrupted is recognised by its durable drop note or its key reservation. A dead job moved
back by hand into pending/ or waiting/ is a requeue with fresh tries, for the runner and fsck.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool.base import crash
from spool.fsck import fsck
from spool.moves.ingest import set_result_aside
from spool.disk.ids import new_id
from spool.disk.layout import State, drop_note_name, job_name
from spool.moves.recovery import reconcile, resync_under_lock
from spool.spool import Spool
from spool.moves.store import folders_of, job_lock, read_job
from spool.moves.transitions import Lease, claim, complete


@pytest.fixture
def sp(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={"SPOOL_BACKOFF_BASE_SECONDS": "0.01"})
    yield opened
    opened.close()


def path_of(sp: Spool, state: State, job_id: str) -> Path:
    return sp.layout.path(state, job_name(job_id))


def all_jobs(sp: Spool) -> dict[str, tuple[State, dict]]:
    found = {}
    for state in State:
        for path in sp.layout.path(state).glob("*.yaml"):
            found[path.stem] = (state, read_job(sp, state, path.stem).to_mapping())
    return found


def dropped(sp: Spool, name: str) -> list[tuple[str, State, dict]]:
    return [
        (job_id, state, fields) for job_id, (state, fields) in all_jobs(sp).items() if fields.get("dropped_as") == name
    ]


# -- finding 2 ----------------------------------------------------------------------------------


def test_a_users_file_under_an_unused_id_is_ingested_under_a_new_id(sp: Spool) -> None:
    unused = new_id()
    path_of(sp, State.PENDING, unused).write_text("task: echo\nargs: {n: 1}\n")
    assert any("a drop named like a job id" in line for line in fsck(sp).in_progress)
    resync_under_lock(sp, unused)
    ((job_id, state, fields),) = dropped(sp, job_name(unused))
    assert job_id != unused and state is State.PENDING and fields["args"] == {"n": 1}
    assert folders_of(sp, unused) == [] and sp.ledger.row(unused) is None
    assert fsck(sp).ok


def test_an_ingest_interrupted_after_its_rename_keeps_its_id_by_its_note(sp: Spool) -> None:
    job_id = new_id()
    path_of(sp, State.PENDING, job_id).write_text("task: echo\nargs: {n: 1}\n")
    sp.layout.path(State.PENDING, drop_note_name(job_id)).write_text("mine.yaml")
    resync_under_lock(sp, job_id)
    fields = read_job(sp, State.PENDING, job_id).to_mapping()
    assert fields["dropped_as"] == "mine.yaml" and fields["args"] == {"n": 1}
    assert not sp.layout.path(State.PENDING, drop_note_name(job_id)).exists()


def test_a_keyed_ingest_interrupted_after_its_rename_keeps_its_id_by_its_reservation(sp: Spool) -> None:
    from spool.moves.submission import reserve_key

    job_id = new_id()
    reserve_key(sp, "k-1", job_id)
    path_of(sp, State.PENDING, job_id).write_text("task: echo\nkey: k-1\n")
    resync_under_lock(sp, job_id)
    assert read_job(sp, State.PENDING, job_id).job.key == "k-1"
    assert fsck(sp).ok


def test_a_users_file_beside_a_waiting_job_is_a_drop_and_the_job_is_untouched(sp: Spool) -> None:
    parent = sp.submit("echo", {"n": 0})
    child = sp.submit("echo", {"n": 1}, depends_on=[parent])
    before = path_of(sp, State.WAITING, child).read_bytes()
    path_of(sp, State.PENDING, child).write_text("task: echo\nargs: {n: impostor}\n")
    resync_under_lock(sp, child)
    assert folders_of(sp, child) == [State.WAITING] and path_of(sp, State.WAITING, child).read_bytes() == before
    ((_new, state, fields),) = dropped(sp, job_name(child))
    assert state is State.PENDING and fields["args"] == {"n": "impostor"} and fields["depends_on"] == []


def test_a_drop_beside_a_leased_job_does_not_cost_its_worker_the_result(sp: Spool) -> None:
    job_id = sp.submit("echo", {"n": 1})
    claimed = claim(sp, "w1", None)
    assert claimed is not None
    path_of(sp, State.PENDING, job_id).write_text("task: echo\nargs: {n: impostor}\n")
    complete(sp, Lease(job_id, "w1", claimed.attempt), b'"r"')  # settles the drop first, then holds
    assert folders_of(sp, job_id) == [State.DONE] and sp.result(job_id) == "r"
    assert len(dropped(sp, job_name(job_id))) == 1


def test_a_copy_of_a_done_job_dropped_in_pending_is_a_new_job_with_the_same_spec(sp: Spool) -> None:
    job_id = sp.submit("echo", {"n": 5}, key="chosen", priority=2)
    claimed = claim(sp, "w1", None)
    assert claimed is not None
    complete(sp, Lease(job_id, "w1", claimed.attempt), b'"r"')
    shutil.copy(path_of(sp, State.DONE, job_id), path_of(sp, State.PENDING, job_id))
    resync_under_lock(sp, job_id)
    # Its key is the old job's own (user-chosen, still kept), and a drop whose key already
    # exists is removed and logged; the done job is untouched.
    assert folders_of(sp, job_id) == [State.DONE] and sp.result(job_id) == "r"
    assert dropped(sp, job_name(job_id)) == []
    unkeyed = sp.submit("echo", {"n": 6}, priority=2)
    sp.cancel(unkeyed)
    shutil.copy(path_of(sp, State.DEAD, unkeyed), path_of(sp, State.PENDING, unkeyed))
    resync_under_lock(sp, unkeyed)
    ((new, state, fields),) = dropped(sp, job_name(unkeyed))
    assert state is State.PENDING and new != unkeyed and fields["key"] == new
    assert (fields["args"], fields["priority"], fields["tries"], fields.get("reason")) == ({"n": 6}, 2, 0, None)
    assert folders_of(sp, unkeyed) == [State.DEAD]
    assert fsck(sp).ok


def test_which_copies_are_the_runners(sp: Spool) -> None:
    from spool.moves.recovery import copies_of

    job_id = sp.submit("echo", {"n": 1})
    os.link(path_of(sp, State.PENDING, job_id), path_of(sp, State.WAITING, job_id))  # link+unlink fallback
    copies = copies_of(sp, job_id)
    assert (copies.keep, copies.stale, copies.drops, copies.planted) == ([State.PENDING], [State.WAITING], [], [])
    os.unlink(path_of(sp, State.WAITING, job_id))
    shutil.copy(path_of(sp, State.PENDING, job_id), path_of(sp, State.DEAD, job_id))  # planted: no reason
    copies = copies_of(sp, job_id)
    assert (copies.keep, copies.planted) == ([State.PENDING], [State.DEAD])
    resync_under_lock(sp, job_id)
    assert folders_of(sp, job_id) == [State.PENDING]
    (record,) = [fields for _s, fields in all_jobs(sp).values() if fields.get("reason") == "invalid"]
    assert f"id: {job_id}" in record["original"]


# -- finding 9 ----------------------------------------------------------------------------------


def kill_twice(sp: Spool, max_tries: int = 2) -> str:
    """A job dead after spending all its tries (each attempt's lease expired)."""
    from spool.moves.transitions import fail

    job_id = sp.submit("echo", {"n": 1}, max_tries=max_tries)
    for _ in range(max_tries):
        from spool.moves.ready import make_ready

        make_ready(sp, job_id)
        claimed = claim(sp, "w1", None)
        assert claimed is not None
        fail(sp, Lease(job_id, "w1", claimed.attempt), "boom")
    assert folders_of(sp, job_id) == [State.DEAD]
    return job_id


def test_a_dead_job_moved_back_by_hand_is_a_requeue_for_fsck_and_for_claim(sp: Spool) -> None:
    job_id = kill_twice(sp)
    os.rename(path_of(sp, State.DEAD, job_id), path_of(sp, State.PENDING, job_id))
    report = fsck(sp)
    assert not [v for v in report.violations if job_id in v and "ledger" not in v], report.violations
    assert any("moved back by hand" in line for line in report.in_progress)
    resync_under_lock(sp, job_id)  # what the coordinator's reconcile does
    claimed = claim(sp, "w2", None)
    assert claimed is not None and claimed.id == job_id
    assert (claimed.tries, claimed.attempt, claimed.reason, claimed.error) == (1, 3, None, None)


def test_fsck_repair_finishes_a_hand_move_back(sp: Spool) -> None:
    job_id = kill_twice(sp)
    os.rename(path_of(sp, State.DEAD, job_id), path_of(sp, State.PENDING, job_id))
    repaired = fsck(sp, repair=True)
    assert repaired.ok, repaired.violations
    fields = read_job(sp, State.PENDING, job_id)
    assert (fields.tries, fields.reason) == (0, None)


def test_a_claim_never_runs_a_moved_back_job_past_max_tries(sp: Spool) -> None:
    job_id = kill_twice(sp)
    os.rename(path_of(sp, State.DEAD, job_id), path_of(sp, State.PENDING, job_id))
    # the ledger caught up before any settle
    sp.ledger.record(read_job(sp, State.PENDING, job_id), State.PENDING, ready=True, event="test")
    taken = None
    for _ in range(3):
        taken = taken or claim(sp, "w2", None)
    assert taken is not None and taken.tries == 1 and taken.tries <= taken.job.max_tries


def test_a_job_moved_back_before_its_dependency_is_done_waits(sp: Spool) -> None:
    parent = sp.submit("echo", {"n": 0})
    child = sp.submit("echo", {"n": 1}, depends_on=[parent])
    sp.cancel(child)
    os.rename(path_of(sp, State.DEAD, child), path_of(sp, State.PENDING, child))
    resync_under_lock(sp, child)
    assert folders_of(sp, child) == [State.WAITING]
    assert read_job(sp, State.WAITING, child).reason is None


def test_an_invalid_record_moved_back_by_hand_goes_back_to_dead(sp: Spool) -> None:
    sp.layout.path(State.PENDING, "bad.yaml").write_text("task: [oops]\n")
    from spool.moves.ingest import ingest

    record = ingest(sp, "bad.yaml")
    assert record is not None and folders_of(sp, record) == [State.DEAD]
    os.rename(path_of(sp, State.DEAD, record), path_of(sp, State.PENDING, record))
    resync_under_lock(sp, record)
    assert folders_of(sp, record) == [State.DEAD] and read_job(sp, State.DEAD, record).reason == "invalid"


# -- a set-aside and a reconcile in another process ---------------------------------------------


def test_a_reconcile_between_a_set_asides_rename_and_its_record_leaves_the_record_to_it(
    sp: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the rename and the record, dead/<new id>.yaml holds the planted text. A
    reconcile then (another process's: a second handle, whose flock conflicts with ours) must
    leave it to the set-aside, which writes why it was set aside. It used to finish it as "an
    interrupted ingest of an invalid drop", and when its write came after ours the record lost
    its reason (CI saw it once, in tests/crash/test_holes_planted_result.py)."""
    job_id = sp.submit("echo", {"n": 1})
    sp.layout.path("results", f"{job_id}.json").write_text('{"planted": true}')
    other = Spool(sp.root, environ={})
    seen: list[str] = []

    def reconcile_in_the_gap(step: str) -> None:
        if step == "result-aside-after-rename":
            seen.extend(path.stem for path in sp.layout.path(State.DEAD).glob("*.yaml"))
            assert not resync_under_lock(other, seen[0])  # the set-aside holds the new id's lock
            reconcile(other, full=True)
            assert path_of(sp, State.DEAD, seen[0]).read_text() == '{"planted": true}'  # left to us

    monkeypatch.setattr(crash, "point", reconcile_in_the_gap)
    with job_lock(sp, job_id):  # as a claim holds it
        aside = set_result_aside(sp, read_job(sp, State.PENDING, job_id))
    other.close()
    assert seen == [aside]
    record = read_job(sp, State.DEAD, aside)
    assert record.reason == "invalid" and "a result no attempt of job" in (record.error or ""), record.error
    assert record.original == '{"planted": true}'
