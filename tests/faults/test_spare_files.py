"""A worker writes its claimed contents, results and done files over spare job files
(``spool.moves.spares``): the old copy a claim swaps out of leased/, the leased/ copy a completion
moves to tmp/. Per job, in batches or one by one: one file created and none freed, where a worker
created three and freed two; every file it publishes is whole and its own; a spare that is gone or
no longer the worker's file is never written. The power-loss model covers the same moves
(test_power_loss.py, "... over spare files"); the I/O-error matrix fails each of their calls
(test_io_errors.py, "..._over_spares")."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

from powerloss import RecordingFS, installed
from spool.disk.fsio import fs
from spool.disk.layout import State, job_name, result_name, tmp_writer_pid
from spool.moves import spares
from spool.moves.claiming import claim_held
from spool.moves.fence import start_queued
from spool.moves.group import Finished, claim_many, complete_many
from spool.moves.store import read_job
from spool.moves.transitions import Lease
from spool.spool import Spool
from support import wait_until


def _batch(sp: Spool, size: int) -> list[str]:
    """Claim ``size`` jobs in one batch and complete them in one; their ids."""
    members = claim_many(sp, "w1", {"echo"}, size)
    assert len(members) == size
    spares.settle_claims(sp)  # the worker's first chore while the first member runs
    finished = []
    for held in members:
        lease = Lease(held.job_file.id, "w1", held.job_file.attempt)
        if finished:
            start_queued(sp, lease)
        finished.append(Finished(lease, held, json.dumps({"id": held.job_file.id}).encode()))
    assert complete_many(sp, finished) == [None] * size
    return [held.job_file.id for held in members]


def _kinds(recorder: RecordingFS) -> Counter[str]:
    """What the recorded calls did to job files (dot-files, the heartbeats, aside)."""
    kinds: Counter[str] = Counter()
    for op in recorder.ops:
        if op.name.startswith(".") or op.dst.startswith("."):
            continue
        where = op.dst_dir if op.kind in ("rename", "exchange", "link") else op.dir
        kinds[f"{op.kind}{' replace' if op.replace else ''} {where}"] += 1
    return kinds


def _check_published(spool_dir: Path, job_ids: list[str]) -> None:
    """Each job is done alone, with its own result, in files of one name each."""
    sp = Spool(spool_dir, environ={})
    with sp:
        for job_id in job_ids:
            assert read_job(sp, State.DONE, job_id).id == job_id
            result = spool_dir / "results" / result_name(job_id)
            assert json.loads(result.read_bytes()) == {"id": job_id}
            assert result.stat().st_nlink == 1 and (spool_dir / "done" / job_name(job_id)).stat().st_nlink == 1
            for state in (State.PENDING, State.LEASED):
                assert not (spool_dir / state.value / job_name(job_id)).exists()


def test_a_worker_creates_one_file_per_job_and_frees_none(sp: Spool, spool_dir: Path) -> None:
    for n in range(10):
        sp.submit("echo", {"n": n})
    spares.begin(sp)
    first = _batch(sp, 2)  # no spares yet: this batch creates its files, then keeps the old ones
    recorder = RecordingFS(spool_dir)
    with installed(recorder):
        later = [job_id for _ in range(4) for job_id in _batch(sp, 2)]
    kinds = _kinds(recorder)
    assert kinds["create tmp"] == len(later), kinds  # the claims' contents (a completion's use up the spares)
    assert kinds["rewrite tmp"] == 2 * len(later), kinds  # each result and done file, over a spare
    assert kinds["exchange leased"] == len(later), kinds  # the claimed content swapped in ...
    assert kinds["rename tmp"] == len(later), kinds  # ... and the leased/ copy moved out at done
    assert not kinds["rename replace leased"] and not kinds["unlink leased"], kinds  # nothing freed
    _check_published(spool_dir, first + later)
    kept = os.listdir(spool_dir / "tmp")
    assert kept and all(tmp_writer_pid(name) == os.getpid() for name in kept)
    spares.drop_all(sp)
    assert os.listdir(spool_dir / "tmp") == []


def test_one_by_one_a_worker_creates_one_file_per_job_and_frees_none(sp: Spool, spool_dir: Path) -> None:
    """A worker on a shallow queue claims one job at a time (``claim_held``) and completes a batch
    of one: the same swap, the same spares."""
    for n in range(6):
        sp.submit("echo", {"n": n})
    spares.begin(sp)

    def one() -> str:
        held = claim_held(sp, "w1", {"echo"})
        spares.settle_claims(sp)  # the worker's first chore while the attempt runs
        assert held is not None
        lease = Lease(held.job_file.id, "w1", held.job_file.attempt)
        assert complete_many(sp, [Finished(lease, held, json.dumps({"id": lease.job_id}).encode())]) == [None]
        return lease.job_id

    first = [one(), one()]
    recorder = RecordingFS(spool_dir)
    with installed(recorder):
        later = [one() for _ in range(4)]
    kinds = _kinds(recorder)
    assert kinds["create tmp"] == len(later) and kinds["rewrite tmp"] == 2 * len(later), kinds
    assert kinds["exchange leased"] == len(later) and kinds["rename tmp"] == len(later), kinds
    assert not kinds["rename replace leased"] and not kinds["unlink leased"], kinds
    _check_published(spool_dir, first + later)


def test_a_claim_leaves_the_fsync_of_pending_to_the_next_chore_and_its_old_copy_waits_for_it(
    sp: Spool, spool_dir: Path
) -> None:
    """The claim is durable once leased/ is fsync'd, so its handler may start then; pending/'s
    fsync only makes the old copy reusable (its first name, pending/<id>, durably gone), and the
    worker makes it as a chore while the handler runs (``spares.settle_claims``). Until then the
    copy is never written over."""
    for n in range(3):
        sp.submit("echo", {"n": n})
    spares.begin(sp)
    recorder = RecordingFS(spool_dir)
    with installed(recorder):
        held = claim_held(sp, "w1", {"echo"})
    assert held is not None
    fsynced = [op.dir for op in recorder.ops if op.kind == "fsync_dir"]
    assert "leased" in fsynced and "pending" not in fsynced, fsynced
    assert spares.claims_to_settle(sp) and sp.after_pending is not None and len(sp.after_pending) == 1
    (old_copy,) = sp.after_pending
    assert spares.take_file(sp) is None  # nothing settled to write over yet
    with installed(recorder):
        spares.settle_claims(sp)
        spares.settle_claims(sp)  # repeatable: nothing more to fsync
    fsynced = [op.dir for op in recorder.ops if op.kind == "fsync_dir"]
    assert fsynced.count("pending") == 1, fsynced
    assert not spares.claims_to_settle(sp) and spares.take_file(sp) == old_copy


def test_a_workers_chores_settle_a_claims_old_copy_at_their_first_turn(sp: Spool) -> None:
    """The attempt loop gives the worker's chores (``runner.batching.Batches``) a turn as soon as
    they are due: a claim's old copy waiting for pending/'s fsync makes them due at once."""
    from spool.runner.batching import Batches  # start-up: the runner's chores, for this test alone

    sp.submit("echo", {"n": 1})
    batches = Batches(sp, "w1", lambda *_args: None)  # a worker's handle: it keeps spares
    assert batches.due() == math.inf  # nothing to do
    assert claim_held(sp, "w1", {"echo"}) is not None
    assert batches.due() == -math.inf and spares.claims_to_settle(sp)
    batches.run()
    assert not spares.claims_to_settle(sp) and batches.due() == math.inf
    assert sp.spare_files is not None and len(sp.spare_files) == 1


def test_a_handle_that_keeps_no_spares_creates_and_removes_as_before(sp: Spool, spool_dir: Path) -> None:
    for n in range(4):
        sp.submit("echo", {"n": n})
    recorder = RecordingFS(spool_dir)
    with installed(recorder):
        done = _batch(sp, 2) + _batch(sp, 2)
    kinds = _kinds(recorder)
    assert kinds["create tmp"] == 3 * len(done) and kinds["rename replace leased"] == len(done), kinds
    assert kinds["unlink leased"] == len(done) and not kinds["exchange leased"] and not kinds["rewrite tmp"], kinds
    _check_published(spool_dir, done)
    assert os.listdir(spool_dir / "tmp") == []


def test_a_spare_gone_or_no_longer_the_workers_file_is_never_written(
    sp: Spool, spool_dir: Path, tmp_path: Path
) -> None:
    for n in range(6):
        sp.submit("echo", {"n": n})
    spares.begin(sp)
    done = _batch(sp, 2)
    claimed = claim_many(sp, "w1", {"echo"}, 2)  # settles the first batch's spares: 4 to write over
    spares.settle_claims(sp)
    assert sp.spare_files is not None and len(sp.spare_files) == 4
    swept, linked, other_mode, _ = sp.spare_files
    os.unlink(spool_dir / "tmp" / swept)  # the tmp sweep's, say
    outside = tmp_path / "outside.txt"
    os.link(spool_dir / "tmp" / linked, outside)  # a second link: writing it would write outside too
    before = outside.read_bytes()
    os.chmod(spool_dir / "tmp" / other_mode, 0o644)
    leases = [Lease(h.job_file.id, "w1", h.job_file.attempt) for h in claimed]
    start_queued(sp, leases[1])
    results = [Finished(lease, h, json.dumps({"id": lease.job_id}).encode()) for lease, h in zip(leases, claimed)]
    assert complete_many(sp, results) == [None, None]
    assert outside.read_bytes() == before and outside.stat().st_nlink == 1  # not written, its tmp/ name removed
    assert not (spool_dir / "tmp" / other_mode).exists()
    _check_published(spool_dir, done + [lease.job_id for lease in leases])


def test_a_worker_at_rest_keeps_no_spares_in_tmp(spool_dir: Path) -> None:
    """A worker with nothing to do for a whole poll removes its spares, so ``ls tmp/`` is empty
    while the spool is at rest (and ``spool fsck`` lists nothing in progress), and it still runs
    what lands next."""
    (spool_dir / "config.yaml").write_text("poll_seconds: 0.2\n")
    with Spool(spool_dir, environ={}) as sp:
        for n in range(6):
            sp.submit("echo", {"n": n})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "spool.cli", "--spool", str(spool_dir), "worker", "--import", "examples.tasks"]
    worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(os.listdir(spool_dir / "done")) == 6, timeout=60, message="the six jobs done")
        wait_until(lambda: os.listdir(spool_dir / "tmp") == [], timeout=10, message="tmp/ empty at rest")
        with Spool(spool_dir, environ={}) as sp:
            sp.submit("echo", {"n": 6})
        wait_until(lambda: len(os.listdir(spool_dir / "done")) == 7, timeout=60, message="a job after the rest")
        assert worker.poll() is None
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert os.listdir(spool_dir / "tmp") == []


def test_rewrite_spare_writes_from_the_start_and_cuts_to_the_new_length(tmp_path: Path) -> None:
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fs.write_new(folder, "spare", b"x" * 5000, sync=True)
        inode = (tmp_path / "spare").stat().st_ino
        assert fs.rewrite_spare(folder, "spare", b"short", sync=True)
        assert (tmp_path / "spare").read_bytes() == b"short" and (tmp_path / "spare").stat().st_ino == inode
        assert fs.rewrite_spare(folder, "spare", b"y" * 9000, sync=False)
        assert (tmp_path / "spare").read_bytes() == b"y" * 9000
    finally:
        os.close(folder)


def test_rewrite_spare_refuses_what_is_not_a_spare_and_writes_nothing(tmp_path: Path) -> None:
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fs.write_new(folder, "target", b"someone's file", sync=False)
        os.symlink(tmp_path / "target", tmp_path / "symlink")
        os.link(tmp_path / "target", tmp_path / "second-link")
        os.mkfifo(tmp_path / "fifo")  # an open for writing would block without O_NONBLOCK
        fs.write_new(folder, "other-mode", b"mode", sync=False)
        os.chmod(tmp_path / "other-mode", 0o644 if fs.file_mode != 0o644 else 0o600)
        for name in ("symlink", "second-link", "fifo", "other-mode", "missing"):
            assert not fs.rewrite_spare(folder, name, b"new", sync=True), name
        assert (tmp_path / "target").read_bytes() == b"someone's file"
        assert (tmp_path / "other-mode").read_bytes() == b"mode"
        assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    finally:
        os.close(folder)


def test_rename_exchange_swaps_two_names_in_two_folders(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one").write_bytes(b"1")
    (tmp_path / "b" / "two").write_bytes(b"2")
    a, b = (os.open(tmp_path / name, os.O_RDONLY | os.O_DIRECTORY) for name in "ab")
    try:
        assert fs.rename_exchange(a, "one", b, "two")
        assert not fs.rename_exchange(a, "one", b, "missing")  # nothing to swap with: the caller renames
        assert not fs.rename_exchange(a, "missing", b, "two")
    finally:
        os.close(a)
        os.close(b)
    assert (tmp_path / "a" / "one").read_bytes() == b"2" and (tmp_path / "b" / "two").read_bytes() == b"1"
