"""spool.moves.fence: a live attempt trusts the JobFile it kept only while leased/<id>.yaml holds exactly
the bytes its claim wrote; any other bytes are parsed and checked as anyone else's file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spool.moves import fence
from spool.base.errors import InvalidJob, LeaseLost
from spool.job import decode
from spool.disk.layout import State, heartbeat_name, job_name
from spool.base.records import LeaseStatus
from spool.spool import Spool
from spool.moves.store import folders_of, read_job
from spool.moves.transitions import Lease, claim_held, complete, expire, fail


@pytest.fixture
def sp(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={})
    yield opened
    opened.close()


def _claimed(sp: Spool, **options: object) -> tuple[fence.Held, Lease]:
    sp.submit("echo", {"n": 1}, **options)  # type: ignore[arg-type]
    held = claim_held(sp, "w1", None)
    assert held is not None
    return held, Lease(held.job_file.id, "w1", held.job_file.attempt)


def test_the_kept_job_file_is_what_its_bytes_decode_to(sp: Spool, spool_dir: Path) -> None:
    held, lease = _claimed(sp)
    path = spool_dir / "leased" / job_name(lease.job_id)
    assert path.read_bytes() == held.data
    assert decode(held.data, source="x", expected_id=lease.job_id, max_bytes=1 << 22) == held.job_file
    assert read_job(sp, State.LEASED, lease.job_id) == held.job_file


def test_equal_bytes_skip_the_parse(sp: Spool, monkeypatch: pytest.MonkeyPatch) -> None:
    held, lease = _claimed(sp)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed bytes the claim wrote itself")

    monkeypatch.setattr(fence, "decode_job", no_parse)
    assert fence.lease_status(sp, lease, held) is LeaseStatus.HELD
    assert fence.check_fence(sp, lease, held) is held.job_file
    complete(sp, lease, b"1", held)
    assert folders_of(sp, lease.job_id) == [State.DONE]


def test_other_bytes_are_parsed_and_checked(sp: Spool, spool_dir: Path) -> None:
    held, lease = _claimed(sp)
    path = spool_dir / "leased" / job_name(lease.job_id)
    path.write_bytes(held.data + b"\n")  # the same content: parsed, and it holds
    assert fence.check_fence(sp, lease, held) == held.job_file
    path.write_bytes(b"{not: [a job")  # torn or planted: never taken for the kept file
    with pytest.raises(InvalidJob):
        fence.check_fence(sp, lease, held)
    assert fence.lease_status(sp, lease, held) is LeaseStatus.LOST


def test_a_newer_attempt_is_never_mistaken_for_ours(sp: Spool) -> None:
    held, lease = _claimed(sp, max_tries=3)
    assert expire(sp, lease.job_id, lease.attempt, "test") is State.PENDING
    with pytest.raises(LeaseLost):
        fail(sp, lease, "late", held=held)
    assert fence.lease_status(sp, lease, held) is LeaseStatus.LOST


def test_the_claim_writes_the_first_heartbeat(sp: Spool, spool_dir: Path) -> None:
    held, lease = _claimed(sp)
    beat = spool_dir / "leased" / heartbeat_name(lease.job_id, lease.attempt)
    assert beat.read_bytes() == b"0 w1\n"
    complete(sp, lease, b"1", held)
    assert not beat.exists()


def test_expire_settles_a_claim_that_died_after_its_rename(sp: Spool, spool_dir: Path) -> None:
    """The file renamed into leased/ still at attempt 0, its first heartbeat naming attempt 1."""
    job_id = sp.submit("echo", {"n": 1}, max_tries=3)
    os.rename(spool_dir / "pending" / job_name(job_id), spool_dir / "leased" / job_name(job_id))
    (spool_dir / "leased" / heartbeat_name(job_id, 1)).write_bytes(b"0 gone\n")
    assert expire(sp, job_id, 1, "worker gone died") is State.PENDING
    settled = read_job(sp, State.PENDING, job_id)
    assert (settled.attempt, settled.tries, settled.lease) == (1, 1, None)
    assert not [n for n in os.listdir(spool_dir / "leased") if job_id in n]
