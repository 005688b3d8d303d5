"""A worker's group commit (spool.moves.group), counted at the fsio seam: a batch claim syncs its
members' content once and fsyncs leased/ once; a batch completion syncs once and fsyncs results/
then done/ once each, every link before the results/ fsync and every move to done/ after it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from powerloss import RecordingFS, installed
from spool import Spool
from spool.base.errors import LedgerError
from spool.disk.layout import State, heartbeat_name
from spool.moves.fence import start_queued
from spool.moves.group import Finished, claim_many, complete_many
from spool.moves.store import job_lock, queued_beat
from spool.moves.transitions import Lease, expire


def _folder_fsyncs(recorder: RecordingFS) -> Counter[str]:
    return Counter(op.dir for op in recorder.ops if op.kind == "fsync_dir")


def _kinds(recorder: RecordingFS) -> list[str]:
    return [op.kind for op in recorder.ops if op.kind != "overwrite"]


class NoSyncfs(RecordingFS):
    """A filesystem (or kernel) without a usable syncfs: the batch fsyncs each file instead."""

    def syncfs(self, dir_fd: int) -> bool:
        return False


def _claim_and_complete(
    spool_dir: Path, count: int, fs_class: type[RecordingFS] = RecordingFS
) -> tuple[RecordingFS, RecordingFS, list[str]]:
    with Spool(spool_dir, environ={}) as sp:
        ids = [sp.submit("echo", {"n": n}) for n in range(count)]
    claims, completions = fs_class(spool_dir), fs_class(spool_dir)
    with Spool(spool_dir, environ={}) as sp:
        with installed(claims):
            members = claim_many(sp, "w1", ["echo"], count)
        assert [held.job_file.id for held in members] == ids
        leases = [Lease(held.job_file.id, "w1", held.job_file.attempt) for held in members]
        for lease in leases[1:]:
            start_queued(sp, lease)
        with installed(completions):
            done = complete_many(sp, [Finished(lease, held, b'{"ok": 1}') for lease, held in zip(leases, members)])
        assert done == [None] * count
        assert all(sp.status(job_id)["state"] == "done" for job_id in ids)
    return claims, completions, ids


def test_a_batch_claim_syncs_once_and_fsyncs_leased_once(spool_dir: Path) -> None:
    claims, _completions, _ids = _claim_and_complete(spool_dir, 8)
    assert _folder_fsyncs(claims) == {"leased": 1}
    kinds = _kinds(claims)
    assert kinds.count("syncfs") == 1 and "fsync_file" not in kinds
    sync = kinds.index("syncfs")
    assert kinds[:sync].count("create") == 8, "every member's content is written before the one sync"
    assert not {"rename", "link"} & set(kinds[:sync]), "and no name is made before it"
    assert kinds[-1] == "fsync_dir", "leased/ is fsync'd after the last rename, before any handler starts"


def test_a_batch_completion_fsyncs_results_then_done_once(spool_dir: Path) -> None:
    _claims, completions, _ids = _claim_and_complete(spool_dir, 8)
    assert _folder_fsyncs(completions) == {"results": 1, "done": 1}
    ops = [op for op in completions.ops if op.kind != "overwrite"]
    kinds = [op.kind for op in ops]
    assert kinds.count("syncfs") == 1 and "fsync_file" not in kinds
    results_sync = next(i for i, op in enumerate(ops) if op.kind == "fsync_dir" and op.dir == "results")
    done_sync = next(i for i, op in enumerate(ops) if op.kind == "fsync_dir" and op.dir == "done")
    links = [i for i, op in enumerate(ops) if op.kind == "link"]
    to_done = [i for i, op in enumerate(ops) if op.kind == "rename" and op.dst_dir == "done"]
    unlinks = [i for i, op in enumerate(ops) if op.kind == "unlink" and op.dir == "leased"]
    assert len(links) == len(to_done) == 8
    assert max(links) < results_sync < min(to_done), "no done/ entry before every result is durable"
    assert max(to_done) < done_sync < min(unlinks), "no leased/ removal before done/ is durable"


@pytest.mark.parametrize("step", ["claim", "complete"])
def test_without_syncfs_a_batch_fsyncs_every_file_before_any_name(spool_dir: Path, step: str) -> None:
    claims, completions, _ids = _claim_and_complete(spool_dir, 4, NoSyncfs)
    kinds = _kinds(claims if step == "claim" else completions)
    files = 4 if step == "claim" else 8
    first = kinds.index("fsync_file")
    assert kinds.count("fsync_file") == files and "syncfs" not in kinds
    assert max(i for i, k in enumerate(kinds) if k == "create") < first
    assert not {"rename", "link"} & set(kinds[: first + files]), "no name made before every file is durable"


def test_one_by_one_a_job_costs_two_syncs_to_claim_and_four_to_complete(spool_dir: Path) -> None:
    """The baseline the batch is measured against (claim_many of one is the single claim)."""
    claims, completions, _ids = _claim_and_complete(spool_dir, 1)
    assert _folder_fsyncs(claims) == {"leased": 1} and _kinds(claims).count("create") == 1
    assert _folder_fsyncs(completions) == {"results": 1, "done": 1}


def test_a_waiting_member_that_expires_gets_its_try_back_and_a_started_one_does_not(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        ids = [sp.submit("echo", {"n": n}) for n in range(3)]
        first, second, third = claim_many(sp, "w1", ["echo"], 3)
        assert [m.job_file.tries for m in (first, second, third)] == [1, 1, 1], "every member's try counted at pickup"
        assert not queued_beat(sp, ids[0], 1) and queued_beat(sp, ids[1], 1) and queued_beat(sp, ids[2], 1)
        start_queued(sp, Lease(ids[1], "w1", 1))
        assert not queued_beat(sp, ids[1], 1)
        beat = sp.layout.path(State.LEASED, heartbeat_name(ids[1], 1)).read_bytes()
        assert beat == b"0 w1\n", "a started member's heartbeat is an ordinary one"
        for job_id in ids:  # the worker died: the coordinator expires all three
            expire(sp, job_id, 1, "the worker died")
        status = {job_id: sp.status(job_id) for job_id in ids}
    assert [status[i]["state"] for i in ids] == ["pending"] * 3
    assert [status[i]["tries"] for i in ids] == [1, 1, 0], "only the member that never started got its try back"
    assert [status[i]["attempts"][-1]["outcome"] for i in ids] == ["expired", "expired", "released"]


def test_an_early_claim_syncs_once_before_its_handler_may_start_and_once_after(spool_dir: Path) -> None:
    """A worker's one-job claim (``claim_many(early=True)``, ``claiming.Opening``): leased/'s fsync
    counts the try and is the only sync before the claim returns; the content's fsync and its swap
    into leased/ come in ``write``, which the worker calls once its child has the attempt."""
    with Spool(spool_dir, environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
    claim_ops, write_ops = RecordingFS(spool_dir), RecordingFS(spool_dir)
    with Spool(spool_dir, environ={}) as sp:
        with installed(claim_ops):
            (held,) = claim_many(sp, "w1", ["echo"], 8, early=True)
        assert held.opening is not None and held.job_file.id == job_id
        claim_kinds = _kinds(claim_ops)
        assert [k for k in claim_kinds if k.startswith(("fsync", "syncfs"))] == ["fsync_dir"]
        assert _folder_fsyncs(claim_ops) == {"leased": 1}
        assert claim_kinds.index("rename") < claim_kinds.index("fsync_dir"), "the try is durable at the rename's fsync"
        assert sp.layout.path(State.LEASED, f"{job_id}.yaml").read_bytes() != held.data, "content not written yet"
        with installed(write_ops):
            held.opening.write()
        write_kinds = _kinds(write_ops)
        assert write_kinds[0] == "fsync_file" and "fsync_dir" not in write_kinds, write_kinds
        assert sp.layout.path(State.LEASED, f"{job_id}.yaml").read_bytes() == held.data
        assert sp.status(job_id)["state"] == "leased"
        held.opening.write()  # a second call is a no-op
        assert len(_kinds(write_ops)) == len(write_kinds)


def test_an_early_claim_whose_ledger_row_fails_stands_written(spool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Opening.write`` runs while the handler starts: a failing ledger must not take the claim
    back or raise into the attempt loop. The content is written, the lock freed, the row left to
    the coordinator's reconcile."""
    with Spool(spool_dir, environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
        (held,) = claim_many(sp, "w1", ["echo"], 8, early=True)
        assert held.opening is not None

        def broken(*_args: object, **_kwargs: object) -> None:
            raise LedgerError("the ledger is unusable (a test's)")

        monkeypatch.setattr(sp.ledger, "record", broken)
        held.opening.write()
        monkeypatch.undo()
        assert sp.layout.path(State.LEASED, f"{job_id}.yaml").read_bytes() == held.data
        lock = job_lock(sp, job_id, blocking=False)
        assert lock is not None, "the job's lock was not freed"
        lock.release()
