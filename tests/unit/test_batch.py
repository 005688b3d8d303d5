"""spool.moves.batch: submit_many, in order, one job per key, everything checked before anything is written."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import behind_the_seam
from spool.moves import batch
from spool.disk import fsio, linux
from spool import job as jobs
from spool.base.errors import DiskFull, InvalidJob, NotFound, TryLater
from spool.disk.fsio import RealFS
from spool.disk.layout import State, job_name, key_name
from spool.spool import Spool, build_spec
from spool.moves.store import read_job
from spool.moves.submission import Submitted, lookup_key
from spool.moves.transitions import claim


def names(sp: Spool, folder: str) -> list[str]:
    return sorted(n for n in os.listdir(sp.root / folder) if not n.startswith("."))


def all_jobs(sp: Spool) -> list[str]:
    return sorted(n for state in State for n in names(sp, state.value))


def nothing_written(sp: Spool) -> None:
    assert all_jobs(sp) == [] and names(sp, "keys") == [] and names(sp, "tmp") == []
    assert sp.ledger.counts() == {}


def test_ids_come_back_in_input_order_and_are_claimed_in_it(sp: Spool) -> None:
    specs = [sp.spec("echo", {"n": n}, key=f"k{n}" if n % 2 else None) for n in range(6)]
    submitted = sp.submit_many(specs)
    assert [s.created for s in submitted] == [True] * 6
    assert len({s.id for s in submitted}) == 6
    assert names(sp, "pending") == sorted(job_name(s.id) for s in submitted)
    assert names(sp, "keys") == sorted(key_name(f"k{n}") for n in (1, 3, 5))
    for n, s in enumerate(submitted):
        job_file = read_job(sp, State.PENDING, s.id)
        assert job_file.job.args == {"n": n}
        assert job_file.job.key == (f"k{n}" if n % 2 else s.id)
    order = []
    while (claimed := claim(sp, "w", None)) is not None:
        order.append(claimed.id)
    assert order == [s.id for s in submitted]


def test_a_key_repeated_in_the_batch_makes_one_job_and_answers_with_its_id(sp: Spool) -> None:
    specs = [
        {"task": "echo", "key": "a"},
        {"task": "echo"},
        {"task": "other", "key": "a", "args": {"x": 1}},
        {"task": "echo", "key": "b"},
        {"task": "echo", "key": "a"},
    ]
    submitted = sp.submit_many(specs)
    first = submitted[0].id
    assert submitted[2] == submitted[4] == Submitted(first, created=False)
    assert [s.created for s in submitted] == [True, True, False, True, False]
    assert len(all_jobs(sp)) == 3 and read_job(sp, State.PENDING, first).job.task == "echo"
    assert names(sp, "keys") == sorted([key_name("a"), key_name("b")])
    assert sp.ledger.counts() == {"pending": 3}


def test_keys_stay_idempotent_across_batches_and_single_submits(sp: Spool) -> None:
    single = sp.submit("echo", key="s")
    first = sp.submit_many([sp.spec("echo", key="a"), sp.spec("echo", key="s"), sp.spec("echo", key="b")])
    assert [s.created for s in first] == [True, False, True] and first[1].id == single
    again = sp.submit_many([sp.spec("echo", key="b"), sp.spec("echo", key="c"), sp.spec("echo", key="a")])
    assert again == [Submitted(first[2].id, False), again[1], Submitted(first[0].id, False)] and again[1].created
    assert sp.submit("echo", key="c") == again[1].id
    unkeyed = sp.submit("echo")
    assert sp.submit_many([sp.spec("echo", key=unkeyed)]) == [Submitted(unkeyed, created=False)]  # its own id
    assert len(all_jobs(sp)) == 5 and len(names(sp, "keys")) == 4 and names(sp, "tmp") == []


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"task": "echo", "priority": "high"}, InvalidJob, r"^job 2: field 'priority'"),
        ({"task": "echo", "id": "01JD0000000000000000000000"}, InvalidJob, r"^job 2: field 'id'"),
        ("echo", InvalidJob, r"^job 2: expected a mapping"),
        ({"task": "echo", "args": {"blob": "x" * 5000}}, InvalidJob, r"^job 2: job is .* over max_job_bytes"),
        ({"task": "echo", "depends_on": ["01JD0000000000000000000000"]}, NotFound, r"^job 2: depends_on: no job"),
    ],
)
def test_one_bad_spec_refuses_the_whole_batch_naming_it_and_nothing_is_written(
    spool_dir: Path, bad: object, error: type[Exception], message: str
) -> None:
    with Spool(spool_dir, environ={}, flags={"max_job_bytes": 4096}) as sp:
        specs = [sp.spec("echo", key="k0"), sp.spec("echo"), bad, sp.spec("echo", key="k3")]
        with pytest.raises(error, match=message):
            sp.submit_many(specs)  # type: ignore[list-item]
        nothing_written(sp)


def test_one_spec_instead_of_a_list_is_refused(sp: Spool) -> None:
    with pytest.raises(InvalidJob, match="got one spec"):
        sp.submit_many({"task": "echo"})
    nothing_written(sp)


def test_an_empty_batch_is_an_empty_answer(sp: Spool) -> None:
    assert sp.submit_many([]) == [] and sp.submit_many(iter(())) == []
    nothing_written(sp)


def test_the_spec_helper_is_build_spec_on_the_spools_clock(sp: Spool) -> None:
    assert sp.spec("echo", {"n": 1}, key="k", priority=3, max_tries=2, timeout=5, depends_on=["x"]) == build_spec(
        "echo", {"n": 1}, key="k", priority=3, max_tries=2, timeout=5, depends_on=["x"]
    )
    delayed, parent = sp.submit_many([sp.spec("echo", delay_seconds=3600), sp.spec("echo")])
    (child,) = sp.submit_many([sp.spec("echo", depends_on=[parent.id])])
    assert sp.state(child.id) is State.WAITING and sp.state(delayed.id) is State.PENDING
    assert sp.ledger.ready_pending_count() == 1  # the delayed job is not ready


# -- backpressure ---------------------------------------------------------------------------------


@pytest.fixture
def small(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, flags={"max_pending": 3})
    yield opened
    opened.close()


def test_a_batch_past_max_pending_is_refused_whole_and_writes_nothing(small: Spool) -> None:
    with pytest.raises(TryLater, match="this batch would add 4") as info:
        small.submit_many([small.spec("echo", key=f"k{n}") for n in range(4)])
    assert info.value.exit_code == 75
    nothing_written(small)
    kept = small.submit_many([small.spec("echo", key=f"k{n}") for n in range(3)])
    assert len(all_jobs(small)) == 3
    # Full now: a retry of the accepted batch still finds its jobs; one new job is refused.
    assert small.submit_many([small.spec("echo", key=f"k{n}") for n in range(3)]) == [
        Submitted(s.id, created=False) for s in kept
    ]
    with pytest.raises(TryLater):
        small.submit_many([small.spec("echo", key="k0"), small.spec("echo", key="new")])
    assert len(all_jobs(small)) == 3 and lookup_key(small, "new") is None and names(small, "tmp") == []


def test_repeated_keys_count_once_against_max_pending(small: Spool) -> None:
    submitted = small.submit_many([small.spec("echo", key="a")] * 5 + [small.spec("echo"), small.spec("echo")])
    assert len({s.id for s in submitted}) == 3 and len(all_jobs(small)) == 3


# -- rounds, and an error in the middle -------------------------------------------------------------


def test_more_keys_than_one_round_holds_are_cut_into_rounds(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch, "_keys_per_round", lambda: 2)
    specs = [sp.spec("echo", key=f"k{n % 5}") for n in range(8)] + [sp.spec("echo")]
    submitted = sp.submit_many(specs)
    assert [s.created for s in submitted] == [True] * 5 + [False] * 3 + [True]
    assert [s.id for s in submitted[5:8]] == [s.id for s in submitted[:3]]
    assert len(all_jobs(sp)) == 6 and len(names(sp, "keys")) == 5


class FullAfter(RealFS):
    """The real filesystem until ``allowed`` new files were written; then every one is ENOSPC."""

    def __init__(self, allowed: int) -> None:
        super().__init__()
        self.allowed = allowed

    def write_new(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> None:
        if self.allowed == 0:
            fsio._raise_disk_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        self.allowed -= 1
        super().write_new(dir_fd, name, data, sync=sync)


class FullAfterRenames(RealFS):
    """The real filesystem until ``allowed`` renames into a folder were made; then each is ENOSPC
    (a folder that must grow a block on a full disk)."""

    def __init__(self, allowed: int) -> None:
        super().__init__()
        self.allowed = allowed

    def rename_noreplace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        if self.allowed == 0:
            fsio._raise_disk_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        self.allowed -= 1
        super().rename_noreplace(src_fd, src, dst_fd, dst)


def test_a_full_disk_while_staging_writes_nothing_and_unreserves_everything(sp: Spool) -> None:
    """Every file of a round is staged before any is linked or renamed: a full disk half way
    through the staging leaves no job, no reservation, nothing in tmp/."""
    specs = [sp.spec("echo", key=f"k{n}") for n in range(3)]
    with behind_the_seam(FullAfter(3 + 1)), pytest.raises(DiskFull):  # 3 job files, then 1 reservation
        sp.submit_many(specs)
    assert all_jobs(sp) == [] and names(sp, "keys") == [] and names(sp, "tmp") == []
    assert [s.created for s in sp.submit_many(specs)] == [True, True, True]
    assert len(all_jobs(sp)) == 3 and len(names(sp, "keys")) == 3


def test_a_full_disk_mid_batch_keeps_the_committed_and_unreserves_the_rest(sp: Spool) -> None:
    specs = [sp.spec("echo", key=f"k{n}") for n in range(3)]
    with behind_the_seam(FullAfterRenames(3 + 1)), pytest.raises(DiskFull):  # 3 reservations, 1 job, then ENOSPC
        sp.submit_many(specs)
    (committed,) = all_jobs(sp)  # the first member was renamed; the caller was told nothing
    assert names(sp, "keys") == [key_name("k0")] and names(sp, "tmp") == []
    again = sp.submit_many(specs)
    assert [s.created for s in again] == [False, True, True] and job_name(again[0].id) == committed
    assert len(all_jobs(sp)) == 3 and len(names(sp, "keys")) == 3


def test_a_batch_writes_the_bytes_one_encode_would(spool_dir: Path) -> None:
    """The batch encodes the runner's part of its members once: each file is still exactly
    ``job.encode`` of its job, whatever the spec holds, and a spec just within the limit passes
    while the whole file is over it."""
    with Spool(spool_dir, environ={}, flags={"max_job_bytes": 4096}) as sp:
        parent = sp.submit("echo")
        specs = [
            sp.spec("echo", {"text": "héllo ☃", "nested": {"a": [1, 2.5, None, True]}}, key="k1"),
            sp.spec("echo", {"yes": "no", "n": "0x1F", "empty": ""}, delay_seconds=60),
            sp.spec("other", depends_on=[parent], priority=-3, max_tries=1, timeout=0.5),
            sp.spec("echo", {"blob": "x" * (4096 - 140)}),  # the spec within 4096 bytes, the file over
            {"task": "echo", "args": {}},
        ]
        submitted = sp.submit_many(specs)
        for answer in submitted:
            state = next(state for state in State if (spool_dir / state.value / job_name(answer.id)).exists())
            on_disk = (spool_dir / state.value / job_name(answer.id)).read_bytes()
            assert on_disk == jobs.encode(read_job(sp, state, answer.id)), on_disk
        assert len(on_disk) < 4096 < len((spool_dir / "pending" / job_name(submitted[3].id)).read_bytes())


def test_syncfs_is_trusted_only_on_filesystems_known_to_sync_everything(
    sp: Spool, spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """syncfs is used where the filesystem's type says it syncs every file (here: what `stat -f`
    says this one is); on any other (FUSE, NFS, an overlay) the batch fsyncs each file instead."""
    shown = subprocess.run(["stat", "-f", "-c", "%t", str(spool_dir)], capture_output=True, text=True, check=True)
    tmp_fd = sp.layout.fd("tmp")
    assert linux.fs_type(tmp_fd) == int(shown.stdout, 16)
    monkeypatch.setattr(linux, "fs_type", lambda fd: 0x65735546)  # FUSE
    assert fsio.fs.syncfs(tmp_fd) is False
    synced: list[str] = []
    monkeypatch.setattr(fsio.fs, "fsync_file", lambda fd, name: synced.append(name))  # the seam's own method
    assert all(s.created for s in sp.submit_many([sp.spec("echo", {"n": n}) for n in range(3)]))
    assert len(synced) == 3
