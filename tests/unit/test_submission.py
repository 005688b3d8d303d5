"""spool.moves.submission: submit and ingest, keys, backpressure, dependencies; nothing half-written on refusal."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import behind_the_seam
from spool.disk import fsio
from spool.admin import cancel
from spool.base.errors import DiskFull, InvalidJob, NotFound, TryLater
from spool.disk.fsio import RealFS
from spool.disk.ids import is_valid_id, new_id
from spool.moves.ingest import ingest
from spool.disk.layout import State, job_name, key_name
from spool.runner.coordinator import Coordinator
from spool.spool import Spool
from spool.moves import batch, submission
from spool.moves.recovery import reconcile
from spool.moves.store import folders_of, read_job
from spool.moves.submission import Submitted, lookup_key
from spool.moves.transitions import Lease, claim, complete, fail


def names(sp: Spool, folder: str) -> list[str]:
    return sorted(n for n in os.listdir(sp.root / folder) if not n.startswith("."))


def job_count(sp: Spool) -> int:
    return sum(len(names(sp, state.value)) for state in State)


def test_submit_writes_one_durable_pending_file_and_returns_its_id(sp: Spool) -> None:
    job_id = sp.submit("echo", {"text": "hi"}, priority=2, max_tries=4, timeout=9)
    assert is_valid_id(job_id) and names(sp, "pending") == [job_name(job_id)]
    job_file = read_job(sp, State.PENDING, job_id)
    assert job_file.job.args == {"text": "hi"} and job_file.job.key == job_id
    assert (job_file.job.priority, job_file.job.max_tries, job_file.job.timeout) == (2, 4, 9.0)
    assert (job_file.attempt, job_file.tries, job_file.lease, job_file.attempts) == (0, 0, None, ())
    assert names(sp, "keys") == []  # a defaulted key needs no reservation
    assert names(sp, "tmp") == []
    row = sp.ledger.row(job_id)
    assert row is not None and (row["state"], row["ready"]) == ("pending", 1)


def test_settings_defaults_are_frozen_at_submit(spool_dir: Path) -> None:
    opened = Spool(spool_dir, environ={"SPOOL_MAX_TRIES": "7", "SPOOL_DEFAULT_TIMEOUT_SECONDS": "1m"})
    try:
        job_file = read_job(opened, State.PENDING, opened.submit("echo"))
        assert (job_file.job.max_tries, job_file.job.timeout) == (7, 60.0)
    finally:
        opened.close()


def test_a_key_seen_before_returns_the_existing_id_in_every_state(sp: Spool) -> None:
    submitted = sp.submit_spec({"task": "echo", "key": "invoice-1"})
    assert submitted.created
    job_id = submitted.id
    assert (sp.root / "keys" / key_name("invoice-1")).read_text() == job_id + "\n"

    def again() -> str:
        repeat = sp.submit_spec({"task": "other", "key": "invoice-1", "args": {"different": True}})
        assert not repeat.created
        return repeat.id

    assert again() == job_id  # pending
    claimed = claim(sp, "w", None)
    assert claimed is not None
    assert again() == job_id  # leased
    fail(sp, Lease(job_id, "w", 1), "boom", reject=True)
    assert again() == job_id  # dead
    assert job_count(sp) == 1 and names(sp, "keys") == [key_name("invoice-1")]


def test_a_done_job_keeps_its_key(sp: Spool) -> None:
    job_id = sp.submit("echo", key="k")
    claimed = claim(sp, "w", None)
    assert claimed is not None
    complete(sp, Lease(job_id, "w", 1), b"1")
    assert sp.submit("echo", key="k") == job_id and job_count(sp) == 1


def test_keys_are_never_file_names(sp: Spool) -> None:
    hostile = "../../../etc/passwd\n.yaml"
    job_id = sp.submit("echo", key=hostile)
    assert names(sp, "keys") == [key_name(hostile)]
    assert sp.submit("echo", key=hostile) == job_id
    assert read_job(sp, State.PENDING, job_id).job.key == hostile


def test_a_key_equal_to_a_jobs_own_id_finds_that_job(sp: Spool) -> None:
    # A defaulted key is the id: `--key ID` is that key seen before, not a second job with the same
    # key (which the ledger's unique key refused after the job file was already committed).
    job_id = sp.submit("echo")
    assert sp.submit_spec({"task": "echo", "key": job_id}) == Submitted(job_id, created=False)
    (sp.root / "pending" / "same.yaml").write_text(f"task: echo\nkey: {job_id}\n")
    assert ingest(sp, "same.yaml") == job_id
    assert job_count(sp) == 1
    other = sp.submit("echo", key="own")
    fresh = sp.submit("echo", key=other)  # that job's key is "own", so its id is a free key
    assert fresh != other and job_count(sp) == 3
    from spool.fsck import fsck

    assert fsck(sp, repair=True).ok


def test_a_reservation_without_its_job_is_taken_over(sp: Spool) -> None:
    # What a submitter killed after reserving and before committing leaves behind.
    orphan = new_id()
    (sp.root / "keys" / key_name("k")).write_text(orphan + "\n")
    assert lookup_key(sp, "k") is None
    job_id = sp.submit("echo", key="k")
    assert job_id != orphan and (sp.root / "keys" / key_name("k")).read_text() == job_id + "\n"
    assert sp.submit("echo", key="k") == job_id


def test_a_garbage_reservation_is_taken_over(sp: Spool) -> None:
    (sp.root / "keys" / key_name("k")).write_bytes(b"\xff../x")
    job_id = sp.submit("echo", key="k")
    assert sp.submit("echo", key="k") == job_id and job_count(sp) == 1


def test_depends_on_an_unknown_id_writes_nothing(sp: Spool) -> None:
    with pytest.raises(NotFound, match="depends_on: no job"):
        sp.submit("echo", key="k", depends_on=[new_id()])
    assert job_count(sp) == 0 and names(sp, "keys") == [] and names(sp, "tmp") == []


def test_depends_on_a_job_not_yet_done_waits(sp: Spool) -> None:
    parent = sp.submit("echo")
    child = sp.submit("echo", depends_on=[parent])
    assert folders_of(sp, child) == [State.WAITING]
    row = sp.ledger.row(child)
    assert row is not None and (row["state"], row["ready"]) == ("waiting", 0)
    assert sp.ledger.dependents(parent) == [child]


def test_a_bad_spec_writes_nothing(sp: Spool) -> None:
    with pytest.raises(InvalidJob):
        sp.submit_spec({"task": "echo", "key": "k", "priority": "high"})
    assert job_count(sp) == 0 and names(sp, "keys") == []


# -- backpressure -------------------------------------------------------------------------------


@pytest.fixture
def small(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, flags={"max_pending": 3})
    yield opened
    opened.close()


def test_submit_past_max_pending_is_refused_and_writes_nothing(small: Spool) -> None:
    kept = [small.submit("echo", key=f"k{n}") for n in range(3)]
    with pytest.raises(TryLater, match="spool is full") as info:
        small.submit("echo", key="one-too-many")
    assert info.value.exit_code == 75
    assert job_count(small) == 3 and len(names(small, "keys")) == 3 and names(small, "tmp") == []
    assert lookup_key(small, "one-too-many") is None
    assert small.submit("echo", key="k1") == kept[1]  # the key is checked first, even when full


def test_only_ready_jobs_and_drops_count_against_max_pending(small: Spool) -> None:
    for _ in range(3):
        small.submit("echo", delay_seconds=3600)  # delayed: not ready
    parent = small.submit("echo")
    small.submit("echo", depends_on=[parent])  # waiting: not ready
    small.submit("echo")
    (small.root / "pending" / "drop.yaml").write_text("task: echo\n")
    Coordinator(small).run_pass()  # ingests the drop: 3 ready now
    with pytest.raises(TryLater):
        small.submit("echo")
    claimed = claim(small, "w", None)
    assert claimed is not None
    small.submit("echo")  # room again


def test_drops_not_yet_ingested_count_against_max_pending(small: Spool) -> None:
    small.submit("echo")
    small.ledger.set_meta(drops=2)  # what the coordinator's last listing counted
    with pytest.raises(TryLater):
        small.submit("echo")


def test_backpressure_reads_ready_jobs_and_drops_in_one_read(small: Spool) -> None:
    assert small.ledger.backlog() == (0, 0)  # no drops counted yet: no meta row
    small.submit("echo")
    small.ledger.set_meta(drops=2)
    assert small.ledger.backlog() == (small.ledger.ready_pending_count(), 2) == (1, 2)


class DiskFullFS(RealFS):
    """The real filesystem, with a full disk for every new file."""

    def write_new(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> None:
        fsio._raise_disk_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


def test_a_full_disk_at_submit_is_try_later_and_writes_nothing(sp: Spool) -> None:
    with behind_the_seam(DiskFullFS()), pytest.raises(DiskFull) as info:
        sp.submit("echo", key="k")
    assert info.value.exit_code == 75
    assert job_count(sp) == 0 and names(sp, "keys") == [] and names(sp, "tmp") == []


# -- ingest -------------------------------------------------------------------------------------


def test_a_valid_drop_is_renamed_to_its_id_and_rewritten(sp: Spool) -> None:
    (sp.root / "pending" / "my job.yaml").write_text("task: echo\nargs: {n: 1}\npriority: 3\n")
    job_id = ingest(sp, "my job.yaml")
    assert job_id is not None and names(sp, "pending") == [job_name(job_id)]
    job_file = read_job(sp, State.PENDING, job_id)
    assert job_file.dropped_as == "my job.yaml" and job_file.job.args == {"n": 1} and job_file.job.priority == 3
    row = sp.ledger.row(job_id)
    assert row is not None and (row["state"], row["ready"]) == ("pending", 1)


def test_a_drop_with_a_kept_key_is_removed(sp: Spool) -> None:
    existing = sp.submit("echo", key="k")
    (sp.root / "pending" / "again.yaml").write_text("task: echo\nkey: k\n")
    assert ingest(sp, "again.yaml") == existing
    assert names(sp, "pending") == [job_name(existing)]


def test_a_drop_with_a_new_key_reserves_it(sp: Spool) -> None:
    (sp.root / "pending" / "a.yaml").write_text("task: echo\nkey: fresh\n")
    job_id = ingest(sp, "a.yaml")
    assert job_id is not None and lookup_key(sp, "fresh") == job_id
    assert sp.submit("echo", key="fresh") == job_id


def test_a_drop_that_depends_on_a_pending_job_waits(sp: Spool) -> None:
    parent = sp.submit("echo")
    (sp.root / "pending" / "child.yaml").write_text(f"task: echo\ndepends_on: [{parent}]\n")
    job_id = ingest(sp, "child.yaml")
    assert job_id is not None and folders_of(sp, job_id) == [State.WAITING]


def test_a_drop_gone_before_ingest_is_nothing(sp: Spool) -> None:
    assert ingest(sp, "vanished.yaml") is None
    assert job_count(sp) == 0


def test_the_coordinator_ingests_every_drop_and_never_reads_dot_or_tmp_names(sp: Spool) -> None:
    pending = sp.root / "pending"
    (pending / "one.yaml").write_text("task: echo\n")
    (pending / "two").write_text("task: echo\nargs: {n: 2}\n")
    (pending / ".hidden.yaml").write_text("not: [yaml")
    (pending / "half-written.yaml.tmp").write_text("task: ec")
    kept = sp.submit("echo")
    Coordinator(sp).run_pass()
    jobs = [n for n in names(sp, "pending") if n.endswith(".yaml") and n != "half-written.yaml.tmp"]
    assert len(jobs) == 3 and job_name(kept) in jobs
    assert {read_job(sp, State.PENDING, n[:-5]).dropped_as for n in jobs} == {None, "one.yaml", "two"}
    assert (pending / ".hidden.yaml").read_text() == "not: [yaml"
    assert (pending / "half-written.yaml.tmp").read_text() == "task: ec"
    assert names(sp, "dead") == []


def test_cancel_of_an_ingested_drop_works_like_any_job(sp: Spool) -> None:
    (sp.root / "pending" / "x.yaml").write_text("task: echo\n")
    job_id = ingest(sp, "x.yaml")
    assert job_id is not None and cancel(sp, job_id) == "cancelled"


def test_a_drop_still_being_written_waits_for_its_writer(sp: Spool) -> None:
    """A user may write pending/x.yaml in place: it is ingested once the writer closes it."""
    from spool.runner.coordinator import Coordinator

    coordinator = Coordinator(sp)
    with open(sp.root / "pending" / "slow.yaml", "w") as writer:
        writer.write("task: echo\n")
        writer.flush()
        coordinator.run_pass()
        assert sorted(os.listdir(sp.root / "pending")) == [".wake", "slow.yaml"] or os.listdir(sp.root / "pending") == [
            "slow.yaml"
        ]
        assert os.listdir(sp.root / "dead") == []
        writer.write("args: {n: 1}\n")
    coordinator.last_reconcile = -1e18  # the next pass lists the folders again
    coordinator.run_pass()
    (job_id,) = sp.ledger.ids(state="pending")
    assert sp.status(job_id)["dropped_as"] == "slow.yaml" and os.listdir(sp.root / "dead") == []
    assert sp.job(job_id)[1].job.args == {"n": 1}


def _finished_meanwhile(handle: Spool) -> str:
    """What may happen while a submitter waits to write its rows: the coordinator's pass indexes
    the committed files without rows (a resync), and a worker claims one and completes it; its id."""
    reconcile(handle, full=False)
    claimed = claim(handle, "w1", None)
    assert claimed is not None
    complete(handle, Lease(claimed.id, "w1", claimed.attempt), b"1")
    return claimed.id


def test_a_submit_indexed_late_never_sets_back_a_row_that_moved_on(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submitter slow between its durable commit and its ledger row (waiting for the ledger, a
    SIGSTOP): meanwhile the coordinator's reconcile finds the file without a row and resyncs it,
    and a worker claims and completes it. The late submit row must not make the job pending again
    (claimable, counted against max_pending, shown pending) until the next reconcile."""
    original, seen = submission._index_submit, []  # noqa: SLF001

    def late(handle, job_file, state, ready):  # type: ignore[no-untyped-def]
        seen.append(job_file.id)
        assert _finished_meanwhile(handle) == job_file.id
        original(handle, job_file, state, ready)

    monkeypatch.setattr(submission, "_index_submit", late)
    job_id = sp.submit("echo", {"i": 1})
    assert seen == [job_id]
    row = sp.ledger.row(job_id)
    assert row is not None and row["state"] == "done" and not row["ready"]
    history = sp.ledger._read("SELECT event FROM history WHERE job_id = ? ORDER BY seq", (job_id,))  # noqa: SLF001
    assert [event for (event,) in history] == ["resync", "claim", "complete", "submit"]


def test_a_batch_indexed_late_never_sets_back_a_member(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same race for ``submit_many``: its rows come in one transaction after the batch's files."""
    original = batch._index_batch  # noqa: SLF001

    def late(handle, committed):  # type: ignore[no-untyped-def]
        _finished_meanwhile(handle)
        original(handle, committed)

    monkeypatch.setattr(batch, "_index_batch", late)
    submitted = sp.submit_many([{"task": "echo", "args": {"i": n}} for n in range(3)])
    states = sorted(sp.ledger.row(s.id)["state"] for s in submitted)  # type: ignore[index]
    assert states == ["done", "pending", "pending"]
