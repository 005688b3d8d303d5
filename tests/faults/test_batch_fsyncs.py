"""submit_many's durability recipe, counted at the fsio seam: one fsync of each folder for the
batch, every file's content fsync'd before its name, and nothing told before the last fsync."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from powerloss import RecordingFS, installed
from spool import Spool, batch


def _record(root: Path, act: object) -> RecordingFS:
    recorder = RecordingFS(root)
    with Spool(root, environ={}) as sp, installed(recorder):
        act(sp)  # type: ignore[operator]
    return recorder


def _folder_fsyncs(recorder: RecordingFS) -> Counter[str]:
    return Counter(op.dir for op in recorder.ops if op.kind == "fsync_dir")


def _files(recorder: RecordingFS) -> tuple[int, int]:
    """(files created, of which fsync'd); runner dot-files (the wake-up) not counted."""
    created = [op for op in recorder.ops if op.kind == "create" and not op.name.startswith(".")]
    return len(created), sum(op.synced for op in created)


def test_a_batch_fsyncs_each_folder_once_and_every_file_before_its_name(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        parent = sp.submit("echo")

    def act(sp: Spool) -> None:
        specs = [sp.spec("echo", {"n": n}, key=f"k{n}" if n % 2 else None) for n in range(40)]
        specs += [sp.spec("echo", {"n": n}, key=f"w{n}", depends_on=[parent]) for n in range(10)]
        specs += [sp.spec("echo", key="k1")]  # a repeat: no job, no file
        assert sum(s.created for s in sp.submit_many(specs)) == 50

    recorder = _record(spool_dir, act)
    assert _folder_fsyncs(recorder) == {"keys": 1, "pending": 1, "waiting": 1}
    assert _files(recorder) == (50 + 30, 50 + 30)  # 50 job files, 30 reservations: all fsync'd
    # Each name is made durable before anything is told: the last folder fsync follows the last rename.
    last_rename = max(i for i, op in enumerate(recorder.ops) if op.kind == "rename")
    assert [op.kind for op in recorder.ops[last_rename + 1 :] if op.kind != "overwrite"] == ["fsync_dir", "fsync_dir"]
    keys_fsync = next(i for i, op in enumerate(recorder.ops) if op.kind == "fsync_dir" and op.dir == "keys")
    assert keys_fsync < min(i for i, op in enumerate(recorder.ops) if op.kind == "rename"), "keys durable first"
    print(f"submit_many of 50 (30 keyed): {len(recorder.ops)} ops, folder fsyncs {dict(_folder_fsyncs(recorder))}")


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
    assert _files(recorder) == (20, 20)
