"""submit_many's durability recipe, counted at the fsio seam: one sync of every file's content
for the batch (syncfs, or an fsync of each where it is missing) before any name is made, one
fsync of each folder, and nothing told before the last fsync."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from powerloss import RecordingFS, installed
from spool import Spool
from spool.moves import batch


def _record(root: Path, act: object, fs_class: type[RecordingFS] = RecordingFS) -> RecordingFS:
    recorder = fs_class(root)
    with Spool(root, environ={}) as sp, installed(recorder):
        act(sp)  # type: ignore[operator]
    return recorder


def _folder_fsyncs(recorder: RecordingFS) -> Counter[str]:
    return Counter(op.dir for op in recorder.ops if op.kind == "fsync_dir")


def _files(recorder: RecordingFS) -> tuple[int, int]:
    """(files created, of which fsync'd as they were written); runner dot-files (the wake-up) not counted."""
    created = [op for op in recorder.ops if op.kind == "create" and not op.name.startswith(".")]
    return len(created), sum(op.synced for op in created)


def _kinds(recorder: RecordingFS) -> list[str]:
    return [op.kind for op in recorder.ops if op.kind != "overwrite"]


class NoSyncfs(RecordingFS):
    """A filesystem (or kernel) without a usable syncfs: the batch fsyncs each file instead."""

    def syncfs(self, dir_fd: int) -> bool:
        return False


def _batch_of_fifty(spool_dir: Path) -> object:
    with Spool(spool_dir, environ={}) as sp:
        parent = sp.submit("echo")

    def act(sp: Spool) -> None:
        specs = [sp.spec("echo", {"n": n}, key=f"k{n}" if n % 2 else None) for n in range(40)]
        specs += [sp.spec("echo", {"n": n}, key=f"w{n}", depends_on=[parent]) for n in range(10)]
        specs += [sp.spec("echo", key="k1")]  # a repeat: no job, no file
        assert sum(s.created for s in sp.submit_many(specs)) == 50

    return act


def test_a_batch_syncs_once_then_fsyncs_each_folder_once(spool_dir: Path) -> None:
    recorder = _record(spool_dir, _batch_of_fifty(spool_dir))
    assert _folder_fsyncs(recorder) == {"keys": 1, "pending": 1, "waiting": 1}
    assert _files(recorder) == (50 + 30, 0)  # 50 job files, 30 reservations: none fsync'd one by one
    kinds = _kinds(recorder)
    assert kinds.count("syncfs") == 1
    # The one sync follows the last file written and precedes the first name made from one.
    sync = kinds.index("syncfs")
    assert kinds[:sync] == ["create"] * 80
    keys = [op for op in recorder.ops if op.kind == "rename" and op.dst_dir == "keys"]
    assert kinds[sync + 1 : sync + 31] == ["rename"] * 30 and kinds[sync + 31] == "fsync_dir"  # keys/, before any job
    assert [op for op in recorder.ops if op.kind != "overwrite"][sync + 31].dir == "keys" and len(keys) == 30
    # Each name is made durable before anything is told: the last folder fsync follows the last rename.
    assert kinds[sync + 32 : sync + 82] == ["rename"] * 50
    assert kinds[sync + 82 :] == ["fsync_dir", "fsync_dir"]  # nothing left staged to remove
    print(f"submit_many of 50 (30 keyed): {len(recorder.ops)} ops, folder fsyncs {dict(_folder_fsyncs(recorder))}")


def test_without_syncfs_a_batch_fsyncs_every_file_before_any_name(spool_dir: Path) -> None:
    recorder = _record(spool_dir, _batch_of_fifty(spool_dir), NoSyncfs)
    assert _folder_fsyncs(recorder) == {"keys": 1, "pending": 1, "waiting": 1}
    kinds = _kinds(recorder)
    assert kinds[:160] == ["create"] * 80 + ["fsync_file"] * 80 and "syncfs" not in kinds
    created = {op.name for op in recorder.ops if op.kind == "create"}
    assert {op.name for op in recorder.ops if op.kind == "fsync_file"} == created


def test_one_by_one_the_same_jobs_fsync_a_folder_each(spool_dir: Path) -> None:
    """The baseline the batch is measured against: each submit fsyncs its folder (and keys/)."""

    def act(sp: Spool) -> None:
        for n in range(10):
            sp.submit("echo", {"n": n}, key=f"k{n}" if n % 2 else None)

    recorder = _record(spool_dir, act)
    assert _folder_fsyncs(recorder) == {"keys": 5, "pending": 10}
    assert _files(recorder) == (15, 15)


def test_a_batch_of_kept_keys_writes_and_fsyncs_nothing(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        sp.submit_many([sp.spec("echo", key=f"k{n}") for n in range(5)])
    recorder = _record(spool_dir, lambda sp: sp.submit_many([sp.spec("echo", key=f"k{n}") for n in range(5)]))
    assert [op for op in recorder.ops if op.kind != "overwrite"] == []


def test_each_round_of_keys_fsyncs_each_folder_once(spool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch, "_keys_per_round", lambda: 4)
    recorder = _record(spool_dir, lambda sp: sp.submit_many([sp.spec("echo", key=f"k{n}") for n in range(10)]))
    assert _folder_fsyncs(recorder) == {"keys": 3, "pending": 3}  # rounds of 4, 4 and 2 keys
    assert _files(recorder) == (20, 0) and _kinds(recorder).count("syncfs") == 3
