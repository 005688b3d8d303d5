"""Power loss: every state a power cut could leave keeps every promise after recovery (see powerloss.py).

Each scenario is recorded once over the real filesystem, then every distinct crash state it
allows (every cut point, plus up to three unsynced operations or file contents lost) is
replayed onto a real folder, recovered with ``fsck --repair`` and a coordinator pass, and
checked against what the callers were told. The bite tests remove one fsync and show the
model then finds an acknowledged job lost, so a missing fsync cannot pass unnoticed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from powerloss import History, Op, RecordingFS, Scenario, Snapshot, run_model
from spool import Spool
from spool.moves import spares, store
from spool import job as jobs
from spool.moves.ingest import ingest
from spool.disk.layout import State, job_name
from spool.runner.coordinator import Coordinator
from spool.schedule.format import slot_of_key
from spool.moves.claiming import claim_held
from spool.moves.fence import start_queued
from spool.moves.group import Finished, claim_many, complete_many
from spool.moves.transitions import Lease, claim, complete, fail
from spool.queues import set_limits

RESULT = b'{"echoed": "hello", "words": [1, 2, 3]}'
DROP = b"task: echo\nkey: drop-1\nargs: {text: dropped}\n"


def _submit(sp: Any, rec: RecordingFS, *, key: str | None = None, max_tries: int | None = None) -> str:
    job_id = sp.submit("echo", {"text": "hello"}, key=key, max_tries=max_tries)
    rec.ack("submit", id=job_id, key=key or job_id, task="echo")
    return job_id


def _claim(sp: Any, rec: RecordingFS, job_id: str) -> Lease:
    claimed = claim(sp, "w1", {"echo"})
    assert claimed is not None and claimed.id == job_id
    rec.ack("claim", id=job_id, attempt=claimed.attempt, tries=claimed.tries)
    return Lease(job_id, "w1", claimed.attempt)


def keyed_submit(sp: Any, rec: RecordingFS) -> None:
    _submit(sp, rec, key="invoice-2026-11-30")


def unkeyed_submit(sp: Any, rec: RecordingFS) -> None:
    _submit(sp, rec)


def submit_claim_complete(sp: Any, rec: RecordingFS) -> None:
    job_id = _submit(sp, rec, key="book-1")
    lease = _claim(sp, rec, job_id)
    complete(sp, lease, RESULT)
    rec.ack("complete", id=job_id, result=RESULT)


def submit_claim_fail_dead(sp: Any, rec: RecordingFS) -> None:
    job_id = _submit(sp, rec, max_tries=1)
    lease = _claim(sp, rec, job_id)
    state = fail(sp, lease, "Traceback: boom")
    assert state is State.DEAD
    rec.ack("fail", id=job_id, state=state.value)


def submit_claim_fail_retry(sp: Any, rec: RecordingFS) -> None:
    job_id = _submit(sp, rec, max_tries=3)
    lease = _claim(sp, rec, job_id)
    state = fail(sp, lease, "Traceback: boom")
    assert state is State.PENDING
    rec.ack("fail", id=job_id, state=state.value)


def write_drop(root: Path) -> None:
    fd = os.open(root / "pending" / "anything.yaml", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, DROP)
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_ingest(sp: Any, rec: RecordingFS) -> None:
    job_id = ingest(sp, "anything.yaml")
    assert job_id is not None
    rec.ack("ingest", id=job_id, key="drop-1", task="echo")


def batch_of_three(sp: Any, rec: RecordingFS) -> None:
    """submit_many of a keyed, an unkeyed and a keyed job: all three acknowledged on return."""
    specs = [
        sp.spec("echo", {"text": "a"}, key="batch-a"),
        sp.spec("echo", {"text": "b"}),
        sp.spec("echo", {"text": "c"}, key="batch-c"),
    ]
    for spec, submitted in zip(specs, sp.submit_many(specs)):
        assert submitted.created
        rec.ack("submit", id=submitted.id, key=spec.get("key", submitted.id), task="echo")


def submit_three(root: Path) -> None:
    """Three jobs accepted (durably) before the recorded run."""
    with Spool(root, environ={}) as sp:
        for key in ("b1", "b2", "b3"):
            _SUBMITTED_BEFORE[key] = sp.submit("echo", {"text": key}, key=key)


def batch_claim_and_complete(sp: Any, rec: RecordingFS) -> None:
    """A worker's group commit: three jobs claimed in one batch, the waiting two started one by
    one, then all three completed in one ``complete_many``. The first member's try is promised
    at the claim; a waiting member's only once started, and its start mark is a heartbeat (not
    durable), so the model holds the batch to its results, not to those two tries."""
    for key in ("b1", "b2", "b3"):
        rec.ack("submit", id=_SUBMITTED_BEFORE[key], key=key, task="echo")
    members = claim_many(sp, "w1", {"echo"}, 3)
    assert [held.job_file.id for held in members] == [_SUBMITTED_BEFORE[key] for key in ("b1", "b2", "b3")]
    first = members[0].job_file
    rec.ack("claim", id=first.id, attempt=first.attempt, tries=first.tries)
    leases = [Lease(held.job_file.id, "w1", held.job_file.attempt) for held in members]
    for lease in leases[1:]:
        start_queued(sp, lease)
    assert complete_many(sp, [Finished(lease, held, RESULT) for lease, held in zip(leases, members)]) == [None] * 3
    for lease in leases:
        rec.ack("complete", id=lease.job_id, result=RESULT)


_SUBMITTED_BEFORE: dict[str, str] = {}

SPARE_KEYS = ("s1", "s2", "s3", "s4")


def submit_four(root: Path) -> None:
    """Four jobs accepted (durably) before the recorded run."""
    with Spool(root, environ={}) as sp:
        for key in SPARE_KEYS:
            _SUBMITTED_BEFORE[key] = sp.submit("echo", {"text": key}, key=key)


def batches_over_spare_files(sp: Any, rec: RecordingFS) -> None:
    """A worker's handle (it keeps spare files, ``spool.moves.spares``) claims two jobs in a batch
    and completes them, then two more: the first batch swaps its claimed contents in and keeps the
    old copies, its completion moves the leased/ copies to tmp/; the second batch's claimed
    contents, results and done files are written over those spares. A spare rewritten while an
    old name of it could come back would show here as a job holding another job's content."""
    spares.begin(sp)
    for key in SPARE_KEYS:
        rec.ack("submit", id=_SUBMITTED_BEFORE[key], key=key, task="echo")
    for _round in range(2):
        members = claim_many(sp, "w1", {"echo"}, 2)
        assert len(members) == 2
        first = members[0].job_file
        rec.ack("claim", id=first.id, attempt=first.attempt, tries=first.tries)
        spares.settle_claims(sp)  # the worker's first chore while the first member runs
        leases = [Lease(held.job_file.id, "w1", held.job_file.attempt) for held in members]
        start_queued(sp, leases[1])
        assert complete_many(sp, [Finished(lease, held, RESULT) for lease, held in zip(leases, members)]) == [None] * 2
        for lease in leases:
            rec.ack("complete", id=lease.job_id, result=RESULT)
    assert rec.rewrites() >= 4, "the second round wrote no spare: the scenario checks nothing new"


def claims_one_by_one_over_spare_files(sp: Any, rec: RecordingFS) -> None:
    """The same with one job at a time, as a worker claims from a shallow queue: each claim swaps
    its content in and fsyncs leased/, the worker's next chore fsyncs pending/ (its old copy's
    first name), each completion (a batch of one) moves its leased/ copy to tmp/, and the next
    files are written over those."""
    _claims_one_by_one(sp, rec, SPARE_KEYS[:3], early=False)
    assert rec.rewrites() >= 3, "no spare was written over: the scenario checks nothing new"


def early_claims_one_by_one_over_spare_files(sp: Any, rec: RecordingFS) -> None:
    """The same with a worker's early claims (``claiming.Opening``): each try is acknowledged at
    leased/'s fsync, before its content is synced and swapped in (the handler runs meanwhile);
    the swapped-out copy waits for the next claim's fsync of leased/, then for pending/'s."""
    _claims_one_by_one(sp, rec, SPARE_KEYS, early=True)
    assert rec.rewrites() >= 2, "no spare was written over: the scenario checks nothing new"


def _claims_one_by_one(sp: Any, rec: RecordingFS, keys: Sequence[str], *, early: bool) -> None:
    spares.begin(sp)
    for key in SPARE_KEYS:
        rec.ack("submit", id=_SUBMITTED_BEFORE[key], key=key, task="echo")
    for key in keys:
        held = claim_held(sp, "w1", {"echo"}, early=early)
        assert held is not None and held.job_file.id == _SUBMITTED_BEFORE[key]
        assert (held.opening is not None) is early
        rec.ack("claim", id=held.job_file.id, attempt=held.job_file.attempt, tries=held.job_file.tries)
        if held.opening is not None:
            held.opening.write()  # once the worker's child has the attempt
        spares.settle_claims(sp)  # the worker's first chore while the attempt runs
        lease = Lease(held.job_file.id, "w1", held.job_file.attempt)
        assert complete_many(sp, [Finished(lease, held, RESULT)]) == [None]
        rec.ack("complete", id=lease.job_id, result=RESULT)


def claims_over_claims_old_copies(sp: Any, rec: RecordingFS) -> None:
    """Two batch claims before any completion: the second's claimed contents are written over the
    old copies the first swapped out, once pending/ is fsync'd (the worker's first chore,
    ``spares.settle_claims``); a first name of such a copy (pending/<id>) that came back would
    hold another job's content, which recovery takes for a new job."""
    spares.begin(sp)
    for key in SPARE_KEYS:
        rec.ack("submit", id=_SUBMITTED_BEFORE[key], key=key, task="echo")
    rounds = []
    for _round in range(2):
        members = claim_many(sp, "w1", {"echo"}, 2)
        assert len(members) == 2
        for held in members:
            rec.ack("claim", id=held.job_file.id, attempt=held.job_file.attempt, tries=held.job_file.tries)
        spares.settle_claims(sp)
        rounds.append(members)
    assert rec.rewrites() >= 2, "the second claim wrote over no old copy: the scenario checks nothing new"
    for members in rounds:
        leases = [Lease(held.job_file.id, "w1", held.job_file.attempt) for held in members]
        for lease in leases:
            start_queued(sp, lease)
        assert complete_many(sp, [Finished(lease, held, RESULT) for lease, held in zip(leases, members)]) == [None] * 2
        for lease in leases:
            rec.ack("complete", id=lease.job_id, result=RESULT)


def submit_two(root: Path) -> None:
    """Two jobs accepted (durably) before the recorded run."""
    with Spool(root, environ={}) as sp:
        for key in ("first", "second"):
            _SUBMITTED_BEFORE[key] = sp.submit("echo", {"text": key}, key=key)


def complete_then_claim_another(sp: Any, rec: RecordingFS) -> None:
    """The next claim fsyncs leased/, which also makes the completed job's removal from it durable."""
    for key, job_id in _SUBMITTED_BEFORE.items():
        rec.ack("submit", id=job_id, key=key, task="echo")
    lease = _claim(sp, rec, _SUBMITTED_BEFORE["first"])
    complete(sp, lease, RESULT)
    rec.ack("complete", id=lease.job_id, result=RESULT)
    _claim(sp, rec, _SUBMITTED_BEFORE["second"])


def write_hourly_schedule(root: Path) -> None:
    """A schedule written two hours ago that never fired: the next coordinator pass fires its last slot."""
    path = root / "schedules" / "hourly.yaml"
    path.write_text("task: echo\nargs: {text: hourly}\nevery: 1h\n")
    os.utime(path, (time.time() - 7200, time.time() - 7200))


def schedule_fires(sp: Any, rec: RecordingFS) -> None:
    """A firing is a keyed submit in the coordinator: once it returns, the slot's job is durable."""
    coordinator = Coordinator(sp)
    coordinator.run_pass()
    job_id = coordinator.scheduler.last_job["hourly"]
    key = sp.job(job_id)[1].job.key
    rec.ack("submit", id=job_id, key=key, task="echo")
    # ... and so is the schedule's record of it: no coordinator fires that slot again, purge or not.
    rec.ack("schedule", id=job_id, name="hourly", slot=slot_of_key(key))


def queue_set(sp: Any, rec: RecordingFS) -> None:
    """``spool queue set capped --concurrency 2 --rate 5/s`` (``set_limits``: the file staged in
    tmp/ and fsync'd, renamed over queues/capped.yaml, queues/ fsync'd): once it returns, the
    limits survive any power cut, and the coordinator's sync puts them in force."""
    limits = set_limits(sp, "capped", concurrency=2, rate="5/s")
    rec.ack("queue", name="capped", limits=limits)


def limited_queue_with_two_jobs(root: Path) -> None:
    """queues/capped.yaml at concurrency 1 with a rate, and two jobs of that queue, before the run."""
    with Spool(root, environ={}) as sp:
        set_limits(sp, "capped", concurrency=1, rate="100/s")
        for key in ("q1", "q2"):
            _SUBMITTED_BEFORE[key] = sp.submit("echo", {"text": key}, key=key, queue="capped")


def limited_claims_around_a_set(sp: Any, rec: RecordingFS) -> None:
    """Claim the first job of a queue at concurrency 1 (its one slot, and a claims row of its
    rate), find the second held, raise the concurrency to 2 under the lease, claim the second,
    complete the first: every power cut leaves the limits acknowledged and no slot leaked."""
    for key in ("q1", "q2"):
        rec.ack("submit", id=_SUBMITTED_BEFORE[key], key=key, task="echo")
    first = _claim(sp, rec, _SUBMITTED_BEFORE["q1"])
    assert claim(sp, "w1", {"echo"}) is None, "concurrency 1 let a second claim through"
    limits = set_limits(sp, "capped", concurrency=2)
    rec.ack("queue", name="capped", limits=limits)
    _claim(sp, rec, _SUBMITTED_BEFORE["q2"])
    complete(sp, first, RESULT)
    rec.ack("complete", id=first.job_id, result=RESULT)


SCENARIOS = [
    Scenario("keyed submit", keyed_submit, jobs_bound=(0, 1)),
    Scenario("unkeyed submit", unkeyed_submit, jobs_bound=(0, 1)),
    Scenario("submit+claim+complete", submit_claim_complete, jobs_bound=(0, 1)),
    Scenario("submit+claim+fail to dead", submit_claim_fail_dead, jobs_bound=(0, 1)),
    Scenario("submit+claim+fail to retry", submit_claim_fail_retry, jobs_bound=(0, 1)),
    # The drop was on disk before the run: whatever the cut, it becomes exactly one job.
    # A cut anywhere in the batch, between two members too: none acknowledged may be lost.
    Scenario("batch of 3 (keyed and unkeyed)", batch_of_three, jobs_bound=(0, 3)),
    Scenario("drop ingest", drop_ingest, prepare=write_drop, jobs_bound=(1, 1)),
    Scenario("complete, then claim another", complete_then_claim_another, prepare=submit_two, jobs_bound=(2, 2)),
    # A cut anywhere in a worker's batch claim or batch completion, between two members too.
    Scenario("batch claim and complete of 3", batch_claim_and_complete, prepare=submit_three, jobs_bound=(3, 3)),
    # The same by a worker that writes its files over spares (a claim's old copy, a leased/ copy).
    Scenario("batches over spare files", batches_over_spare_files, prepare=submit_four, jobs_bound=(4, 4)),
    Scenario(
        "claims one by one over spare files", claims_one_by_one_over_spare_files, prepare=submit_four, jobs_bound=(4, 4)
    ),
    Scenario(
        "early claims one by one over spare files",
        early_claims_one_by_one_over_spare_files,
        prepare=submit_four,
        jobs_bound=(4, 4),
    ),
    Scenario("claims over claims' old copies", claims_over_claims_old_copies, prepare=submit_four, jobs_bound=(4, 4)),
    # Recovery's coordinator pass fires the same slot again: its key finds the job, or makes the one.
    Scenario("schedule firing", schedule_fires, prepare=write_hourly_schedule, jobs_bound=(0, 1)),
    Scenario("queue set", queue_set, jobs_bound=(0, 0)),
    # Claims held by a limit and a set_limits between them, on a spool whose ledger has limits.
    Scenario(
        "limited claims around a queue set",
        limited_claims_around_a_set,
        prepare=limited_queue_with_two_jobs,
        jobs_bound=(2, 2),
    ),
]
SCENARIO = {scenario.name: scenario for scenario in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name.replace(" ", "-"))
def test_every_power_cut_keeps_the_promises(scenario: Scenario, tmp_path: Path) -> None:
    run = run_model(scenario, tmp_path)
    print(run.summary())
    assert run.acks, "the scenario acknowledged nothing: it would check nothing"
    assert run.with_losses > 0, "no state lost anything unsynced: the model did not explore"
    details = "\n".join(f"{v.state}:\n    " + "\n    ".join(v.problems) for v in run.violations[:5])
    assert not run.violations, f"{run.summary()}\n{details}"


# -- the model bites ------------------------------------------------------------------------------


class SkipsPendingFsync(RecordingFS):
    """The submit path with its one directory fsync removed: pending/ is never fsync'd."""

    def fsync_dir(self, dir_fd: int) -> None:
        if self.rel(dir_fd) != "pending":
            super().fsync_dir(dir_fd)


def test_model_finds_the_job_lost_without_the_pending_fsync(tmp_path: Path) -> None:
    run = run_model(
        Scenario("unkeyed submit, no fsync of pending/", unkeyed_submit),
        tmp_path,
        fs_class=SkipsPendingFsync,
        stop_after=1,
    )
    print(run.summary())
    assert run.violations, "the model passed a submit that never fsyncs pending/"
    assert any("acknowledged submit" in p and "lost" in p for p in run.violations[0].problems), run.violations[0]


def test_model_finds_the_batch_lost_without_its_pending_fsync(tmp_path: Path) -> None:
    run = run_model(
        Scenario("batch of 3, no fsync of pending/", batch_of_three), tmp_path, fs_class=SkipsPendingFsync, stop_after=1
    )
    print(run.summary())
    assert run.violations, "the model passed a batch that never fsyncs pending/"
    assert any("acknowledged submit" in p and "lost" in p for p in run.violations[0].problems), run.violations[0]


class SkipsQueuesFsync(RecordingFS):
    """``set_limits`` with its fsync of queues/ removed: the rename over the queue file is never
    made durable."""

    def fsync_dir(self, dir_fd: int) -> None:
        if self.rel(dir_fd) != "queues":
            super().fsync_dir(dir_fd)


def test_model_finds_the_queue_set_lost_without_the_queues_fsync(tmp_path: Path) -> None:
    run = run_model(Scenario("queue set, no fsync of queues/", queue_set), tmp_path, fs_class=SkipsQueuesFsync)
    print(run.summary())
    assert run.violations, "the model passed a queue set that never fsyncs queues/"
    assert any("acknowledged limits of queue capped" in p for p in run.violations[0].problems), run.violations[0]


def test_model_finds_the_queue_file_torn_when_it_is_staged_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import spool.queues

    def stage_unsynced(sp: Any, data: bytes, *, sync: bool) -> str:
        return store.stage(sp, data, sync=False)

    monkeypatch.setattr(spool.queues, "stage", stage_unsynced)
    run = run_model(Scenario("queue set, file not fsync'd", queue_set), tmp_path, stop_after=1)
    print(run.summary())
    assert run.violations, "the model passed a queue file whose content is never fsync'd"
    assert any("acknowledged limits of queue capped" in p for p in run.violations[0].problems), run.violations[0]


class FsyncsPendingBetweenMembers(RecordingFS):
    """The batch's one fsync of pending/ moved too early: right after its first member's rename,
    none after the last (a power cut between two members of the batch)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self.fsynced = False

    def rename_noreplace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        super().rename_noreplace(src_fd, src, dst_fd, dst)
        if self.rel(dst_fd) == "pending" and not self.fsynced:
            self.fsynced = True
            super().fsync_dir(dst_fd)

    def fsync_dir(self, dir_fd: int) -> None:
        if self.rel(dir_fd) != "pending":
            super().fsync_dir(dir_fd)


def test_model_finds_a_later_member_lost_when_pending_is_fsynced_between_members(tmp_path: Path) -> None:
    run = run_model(
        Scenario("batch of 3, pending/ fsync'd after its first member", batch_of_three),
        tmp_path,
        fs_class=FsyncsPendingBetweenMembers,
        stop_after=1,
    )
    print(run.summary())
    assert run.violations, "the model passed a batch whose later members' names were never fsync'd"
    lost = [p for p in run.violations[0].problems if "acknowledged submit" in p and "lost" in p]
    first = run.acks[0].info["id"]
    assert lost and not any(first in p for p in lost), run.violations[0]


class NeverSyncsSpares(RecordingFS):
    """A worker whose spare files are renamed and linked into place unsynced: no syncfs (so each
    staged file is fsync'd by name), and the fsync of a rewritten spare skipped."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self.spares: set[str] = set()

    def syncfs(self, dir_fd: int) -> bool:
        return False

    def rewrite_spare(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> bool:
        self.spares.add(name)
        return super().rewrite_spare(dir_fd, name, data, sync=sync)

    def fsync_file(self, dir_fd: int, name: str) -> None:
        if name not in self.spares:
            super().fsync_file(dir_fd, name)


def test_model_finds_a_spare_renamed_into_place_before_its_new_content_is_durable(tmp_path: Path) -> None:
    """A rewritten spare's unsynced data may come back as the file's old content: a done file or a
    result under its new name would then hold another job's old copy."""
    run = run_model(
        Scenario("batches over spare files, spares unsynced", batches_over_spare_files, prepare=submit_four),
        tmp_path,
        fs_class=NeverSyncsSpares,
        stop_after=1,
    )
    print(run.summary())
    assert run.violations, "the model passed spare files published with their new content unsynced"
    assert "its old content" in run.violations[0].state or "half rewritten" in run.violations[0].state


class NoSyncfs(RecordingFS):
    """A kernel or filesystem without a usable syncfs: the batch fsyncs each staged file instead."""

    def syncfs(self, dir_fd: int) -> bool:
        return False


@pytest.mark.parametrize("name", ["batch of 3 (keyed and unkeyed)", "batch claim and complete of 3"])
def test_every_power_cut_keeps_the_promises_of_a_batch_without_syncfs(tmp_path: Path, name: str) -> None:
    scenario = SCENARIO[name]
    run = run_model(
        Scenario(
            f"{name}, an fsync of each file", scenario.act, prepare=scenario.prepare, jobs_bound=scenario.jobs_bound
        ),
        tmp_path,
        fs_class=NoSyncfs,
    )
    print(run.summary())
    assert any(op.kind == "fsync_file" for op in run.ops) and not any(op.kind == "syncfs" for op in run.ops)
    assert run.with_losses > 0 and not run.violations, run.violations[:3]


class SyncfsDoesNothing(RecordingFS):
    """A batch whose one sync is gone: it says it synced, and nothing was (the staged files'
    content is never made durable)."""

    def syncfs(self, dir_fd: int) -> bool:
        return True


def test_model_finds_the_batch_torn_without_its_sync(tmp_path: Path) -> None:
    run = run_model(
        Scenario("batch of 3, no sync of its files", batch_of_three), tmp_path, fs_class=SyncfsDoesNothing, stop_after=1
    )
    print(run.summary())
    assert run.violations, "the model passed a batch whose files' content was never made durable"
    # The torn job file is set aside by recovery: the acknowledged job is in no folder.
    assert any("acknowledged submit" in p and "lost" in p for p in run.violations[0].problems), run.violations[0]


def test_model_syncfs_makes_everything_before_it_durable_and_nothing_after() -> None:
    """A batch's shape: two staged files, one syncfs, the two renames (a cut between the sync and
    the renames, and between the two members), the folder fsync; then one more unsynced file."""
    empty = Snapshot(dirs=["", "tmp", "pending"], names={"": {}, "tmp": {}, "pending": {}}, contents={})
    ops = [
        Op("create", "tmp", "a", data=b"AAAA"),
        Op("create", "tmp", "b", data=b"BBBB"),
        Op("syncfs", ""),
        Op("rename", "tmp", "a", dst_dir="pending", dst="a.yaml"),
        Op("rename", "tmp", "b", dst_dir="pending", dst="b.yaml"),
        Op("fsync_dir", "pending"),
        Op("create", "tmp", "c", data=b"CCCC"),
    ]
    history = History(empty, ops)

    def at(cut: int) -> list[dict[str, bytes]]:
        return [
            {f"{d}/{n}": content for (d, n), (_i, content) in history.files(state).items()}
            for state in history.states()
            if state.cut == cut
        ]

    # Before the sync, a staged file may come back empty or torn, or not at all.
    assert {files.get("tmp/a") for files in at(2)} == {b"AAAA", b"", b"AA", None}
    # Right after it, between the sync and the renames: both staged files whole, always.
    assert all(files == {"tmp/a": b"AAAA", "tmp/b": b"BBBB"} for files in at(3))
    # Between the two members: a's rename may be lost (or keep both names), b is still staged;
    # every copy of either file is whole.
    between = at(4)
    assert all(files["tmp/b"] == b"BBBB" and files.get("pending/a.yaml", b"AAAA") == b"AAAA" for files in between)
    assert any("pending/a.yaml" in files for files in between)
    assert any("pending/a.yaml" not in files for files in between)
    # After the folder fsync both are in pending/, whole; what follows the sync is not covered by it.
    after = at(7)
    assert all(files["pending/a.yaml"] == b"AAAA" and files["pending/b.yaml"] == b"BBBB" for files in after)
    assert {files.get("tmp/c") for files in after} == {b"CCCC", b"", b"CC", None}


def test_model_finds_the_job_torn_when_submit_stages_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import spool.moves.submission

    def create_job_unsynced(sp: Any, state: State, job_file: Any, data: bytes | None = None) -> None:
        staged = store.stage(sp, jobs.encode(job_file) if data is None else data, sync=False)
        store.fs.rename_noreplace(sp.layout.fd("tmp"), staged, sp.layout.fd(state), job_name(job_file.id))

    monkeypatch.setattr(spool.moves.submission, "create_job", create_job_unsynced)
    run = run_model(Scenario("keyed submit, job file not fsync'd", keyed_submit), tmp_path, stop_after=1)
    print(run.summary())
    assert run.violations, "the model passed a submit whose job file is never fsync'd"
    job_id = run.acks[0].info["id"]
    assert any(job_id in p for p in run.violations[0].problems), run.violations[0]


def test_model_finds_the_job_torn_when_a_rewrite_is_not_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 1 this model found: a job file rewritten in place without fsync'ing its new content
    (fail back to pending, the move to done, expiry, release) could come back empty after a
    power cut, and recovery then buried the job as invalid: key, task and counted try gone.
    Put the unsynced rewrite back and the model must find it again."""
    import spool.moves.claiming
    import spool.moves.outcomes

    def rewrite_job_as_before(sp: Any, state: State, job_file: Any, *, sync: bool) -> None:
        staged = store.stage(sp, jobs.encode(job_file), sync=sync)
        store.fs.rename_replace(sp.layout.fd("tmp"), staged, sp.layout.fd(state), job_name(job_file.id))
        if sync:
            store.fs.fsync_dir(sp.layout.fd(state))

    monkeypatch.setattr(spool.moves.claiming, "rewrite_job", rewrite_job_as_before)
    monkeypatch.setattr(spool.moves.outcomes, "rewrite_job", rewrite_job_as_before)  # fail's retry (retry_or_bury)
    run = run_model(SCENARIO["submit+claim+fail to retry"], tmp_path, max_drops=1, stop_after=1)
    print(run.summary())
    assert run.violations, "the model passed a rewrite whose content is never fsync'd"
    assert any("acknowledged submit" in p for p in run.violations[0].problems), run.violations[0]


def test_model_finds_the_done_job_lost_without_the_done_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 2: the move to done/ was not fsync'd, so the next claim's fsync of leased/ could make
    the job's removal from leased/ durable and its entry in done/ not: the job file vanished,
    and fsck --repair then removed its result as an orphan. Take the done/ fsync out again."""
    import spool.moves.outcomes
    from spool.job import encode
    from spool.disk.layout import job_name

    def publish_without_done_fsync(sp: Any, job_file: Any, source: State, target: State, *, crash_step: str) -> None:
        staged = store.stage(sp, encode(job_file), sync=True)
        store.fs.rename_noreplace(sp.layout.fd("tmp"), staged, sp.layout.fd(target), job_name(job_file.id))
        if target is not State.DONE:
            store.fs.fsync_dir(sp.layout.fd(target))
        store.fs.unlink(sp.layout.fd(source), job_name(job_file.id))

    monkeypatch.setattr(spool.moves.outcomes, "publish_job", publish_without_done_fsync)  # finish_done's move
    run = run_model(SCENARIO["complete, then claim another"], tmp_path, max_drops=2, stop_after=1)
    print(run.summary())
    assert run.violations, "the model passed a move to done/ that is never fsync'd"
    problems = run.violations[0].problems
    assert any("lost" in p and "in no folder" in p for p in problems), run.violations[0]


def test_model_finds_a_batch_result_lost_without_the_results_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """complete_many fsyncs results/ once, after every link and before any move to done/: taken
    out, a cut can keep a member's done/ entry and lose its result link (a done job without its
    result, which recovery can only set aside as planted: a fourth job)."""
    import spool.moves.group as group

    def fsync_dir_but_results(dir_fd: int) -> None:
        if not os.readlink(f"/proc/self/fd/{dir_fd}").endswith("/results"):
            store.fs.fsync_dir(dir_fd)  # looked up at the call: the recording seam is installed later

    class NoResultsFsync:  # the module's ``fs`` with one call changed, over the recording seam
        def __getattr__(self, name: str) -> Any:
            return fsync_dir_but_results if name == "fsync_dir" else getattr(store.fs, name)

    monkeypatch.setattr(group, "fs", NoResultsFsync())
    run = run_model(SCENARIO["batch claim and complete of 3"], tmp_path, max_drops=2, stop_after=1)
    print(run.summary())
    assert run.violations, "the model passed a batch whose result links are never fsync'd"


# -- the model's rules, on a history written by hand ----------------------------------------------


def test_model_loses_exactly_what_was_not_made_durable() -> None:
    empty = Snapshot(dirs=["", "tmp", "pending"], names={"": {}, "tmp": {}, "pending": {}}, contents={})
    ops = [
        Op("create", "tmp", "a", data=b"AAAA", synced=False),
        Op("rename", "tmp", "a", dst_dir="pending", dst="a.yaml"),
        Op("fsync_dir", "pending"),
        Op("create", "tmp", "b", data=b"BB", synced=True),
        Op("rename", "tmp", "b", dst_dir="pending", dst="b.yaml"),
    ]

    def after_all(history: History, *, b_created: bool = False) -> list[dict[str, bytes]]:
        """The states after the last op (only those that kept tmp/b's creation, if asked)."""
        made_b = set(history.effects_of[3])
        return [
            {f"{d}/{n}": content for (d, n), (_i, content) in history.files(state).items()}
            for state in history.states()
            if state.cut == len(ops) and not (b_created and any(unit.effects & made_b for unit in state.lost))
        ]

    states = after_all(History(empty, ops))
    # pending/a.yaml's name was fsync'd: always there; its data was not: whole, empty or torn.
    assert all("pending/a.yaml" in files for files in states)
    assert {files["pending/a.yaml"] for files in states} == {b"AAAA", b"", b"AA"}
    # tmp/ was never fsync'd: the source half of either rename may be lost (two names).
    assert any("tmp/a" in files for files in states) and any("tmp/b" in files for files in states)
    # b's data was fsync'd: never torn; its rename was not: lost whole, or kept.
    assert {files.get("pending/b.yaml") for files in states} == {b"BB", None}
    # Once tmp/b exists, its unsynced rename is lost whole or not at all: b is under one name or both.
    kept_b = after_all(History(empty, ops), b_created=True)
    assert all("tmp/b" in files or "pending/b.yaml" in files for files in kept_b)
    # Only the strict model lets an unsynced rename lose its target half alone (the file vanishes).
    strict = after_all(History(empty, ops, strict_renames=True), b_created=True)
    assert any("tmp/b" not in files and "pending/b.yaml" not in files for files in strict)
    # A cut before anything: the spool as it was.
    assert History(empty, ops).files(next(History(empty, ops).states())) == {}


class NeverSyncsPending(RecordingFS):
    """A worker that writes over its claims' old copies with pending/ never fsync'd: a copy's first
    name (pending/<id>) may come back after a power cut, naming what was written over it."""

    def fsync_dir(self, dir_fd: int) -> None:
        if self.rel(dir_fd) != State.PENDING.value:
            super().fsync_dir(dir_fd)


def test_model_finds_a_claims_old_copy_written_over_before_pending_is_fsynced(tmp_path: Path) -> None:
    """Why ``spares.settle_claims`` fsyncs pending/ before a claim's old copy is handed out: without
    it, pending/<A> can come back holding job C's claimed content, and recovery makes a fifth job."""
    run = run_model(
        Scenario(
            "claims over claims' old copies, pending/ unsynced",
            claims_over_claims_old_copies,
            prepare=submit_four,
            jobs_bound=(4, 4),
        ),
        tmp_path,
        fs_class=NeverSyncsPending,
        stop_after=1,
    )
    print(run.summary())
    assert run.violations, "the model passed a claim's old copy written over while its pending/ name could come back"
    assert any("jobs after recovery" in problem for problem in run.violations[0].problems), run.violations[0]


def test_model_finds_an_early_claims_old_copy_written_over_before_leased_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why an early claim's swapped-out copy waits in ``after_leased``: its swap into leased/ comes
    after that claim's fsync of leased/, so until the next one leased/<id> can come back naming the
    old copy; handed out at pending/'s fsync alone, it is written over with another job's content."""

    def straight_to_pending(sp: Any, swapped: str) -> None:
        sp.after_pending.append(swapped)

    monkeypatch.setattr(spares, "keep_swapped_late", straight_to_pending)
    run = run_model(SCENARIO["early claims one by one over spare files"], tmp_path, stop_after=1)
    print(run.summary())
    assert run.violations, "the model passed an early claim's old copy written over while leased/ could name it"
