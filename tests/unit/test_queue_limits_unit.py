"""Issue 20's core in one process, on a real spool: a job's queue, the limits decided inside the
reservation (spool.ledger.limits), queues/<name>.yaml and its sync, the ledger's migration.

The multi-process proofs (3 workers and a remote one under a concurrency limit, SIGKILLs, a rate
over real workers, pause and resume) are in tests/crash/; these pin each rule where it is made.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from spool import Spool, queues
from spool.base.errors import InvalidJob
from spool.disk.layout import State
from spool.ledger.limits import Limits
from spool.ledger.schema import SCHEMA_VERSION
from spool.moves.claiming import claim_held
from spool.moves.group import claim_many
from spool.moves.store import folders_of, read_job


def _submit(sp: Spool, n: int, queue: str | None = None, priority: int = 0) -> list[str]:
    return [sp.submit("echo", {"n": i}, queue=queue, priority=priority) for i in range(n)]


def test_a_jobs_queue_is_in_its_file_only_when_chosen(sp: Spool) -> None:
    plain, mail = sp.submit("echo"), sp.submit("echo", queue="mail")
    assert b"queue:" not in (sp.layout.path(State.PENDING) / f"{plain}.yaml").read_bytes()  # as before queues
    assert read_job(sp, State.PENDING, mail).job.queue == "mail"
    assert read_job(sp, State.PENDING, plain).job.queue == "default"
    with pytest.raises(InvalidJob, match="field 'queue'"):
        sp.submit("echo", queue="../x")


def test_a_drop_and_a_schedule_template_name_their_queue(sp: Spool) -> None:
    from spool.moves.ingest import ingest
    from spool.schedule.format import parse_schedule

    (sp.layout.path(State.PENDING) / "drop.yaml").write_text("task: echo\nqueue: mail\n")
    ingest(sp, "drop.yaml")
    (job_id,) = [i for i in sp.ledger.states() if sp.ledger.row(i)["queue"] == "mail"]
    assert read_job(sp, State.PENDING, job_id).dropped_as == "drop.yaml"
    schedule = parse_schedule(b"every: 1m\ntask: echo\nqueue: mail\n", "s", default_max_tries=3, default_timeout=60)
    assert schedule.spec("schedule:s@x")["queue"] == "mail"


def test_concurrency_counts_leases_and_a_batch_takes_only_the_room(sp: Spool) -> None:
    gpu, other = _submit(sp, 5, "gpu", priority=5), _submit(sp, 3)
    queues.set_limits(sp, "gpu", concurrency=2)
    got = claim_many(sp, "w1", None, 16)
    taken = [held.job_file.id for held in got]
    assert len([i for i in taken if i in gpu]) == 2 and set(other) <= set(taken)  # the others are not starved
    assert claim_many(sp, "w2", None, 16) == []
    hold = queues.hold_of(sp, "gpu")
    assert hold is not None and hold.limit == "concurrency" and "2 leased" in hold.text
    for job_id in gpu:
        if job_id not in taken:  # held back: still ready in pending/, no try spent
            job_file = read_job(sp, State.PENDING, job_id)
            assert (job_file.attempt, job_file.tries) == (0, 0)


def test_a_slot_comes_back_when_its_job_leaves_leased(sp: Spool) -> None:
    from spool.moves.transitions import complete

    _submit(sp, 3, "gpu")
    queues.set_limits(sp, "gpu", concurrency=1)
    first = claim_held(sp, "w1", None)
    assert first is not None and claim_held(sp, "w2", None) is None
    lease = first.job_file.lease
    assert lease is not None
    complete(sp, lease, b"{}")
    assert claim_held(sp, "w2", None) is not None


def test_a_rate_is_a_sliding_window_of_claims_whose_times_are_the_attempts_started(sp: Spool) -> None:
    _submit(sp, 6, "api")
    queues.set_limits(sp, "api", rate="2/s")
    got = claim_many(sp, "w1", None, 16)
    assert len(got) == 2 and claim_held(sp, "w1", None) is None
    retry_at = sp.ledger.retry_at
    assert retry_at is not None and 0 < retry_at - time.time() <= 1.0
    hold = queues.hold_of(sp, "api")
    assert hold is not None and hold.limit == "rate"
    started = {held.job_file.attempts[-1].started for held in got}
    (at_ms,) = {row[0] for row in sp.ledger._read("SELECT at_ms FROM claims WHERE queue = 'api'")}
    assert started == {time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at_ms // 1000)) + f".{at_ms % 1000:03d}Z"}
    deadline = time.monotonic() + 5
    while (held := claim_held(sp, "w1", None)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held is not None


def test_a_slot_a_claim_could_not_take_is_given_back_to_the_window(sp: Spool) -> None:
    (job_id,) = _submit(sp, 1, "api")
    queues.set_limits(sp, "api", rate="1/h")
    reservation = sp.ledger.reserve_many(None, 1)
    assert reservation.ids == [job_id] and sp.ledger.reserve_many(None, 1).ids == []
    sp.ledger.unreserve(job_id)  # its lock was busy: nothing was claimed
    assert claim_held(sp, "w1", None) is not None


def test_a_paused_queue_is_claimed_by_nobody_and_resume_releases_it(sp: Spool) -> None:
    mail, other = _submit(sp, 2, "mail", priority=9), _submit(sp, 1)
    queues.set_limits(sp, "mail", paused=True)
    assert [held.job_file.id for held in claim_many(sp, "w1", None, 16)] == other
    assert queues.hold_of(sp, "mail") is not None
    queues.set_limits(sp, "mail", paused=False)
    assert sorted(held.job_file.id for held in claim_many(sp, "w1", None, 16)) == sorted(mail)


def test_a_worker_names_its_queues(sp: Spool) -> None:
    mail, _ = _submit(sp, 2, "mail"), _submit(sp, 2, "bulk", priority=9)
    got = claim_many(sp, "w1", None, 16, queues=["mail"])
    assert sorted(held.job_file.id for held in got) == sorted(mail)


def test_a_held_queues_backlog_is_not_scanned_past(sp: Spool) -> None:
    """A paused queue with many ready jobs ahead of another's in claim order: the claim reads each
    queue's own head, so its cost does not grow with the held backlog."""
    sp.submit_many([sp.spec("echo", {"n": i}, queue="held", priority=9) for i in range(3000)])
    (wanted,) = _submit(sp, 1)
    queues.set_limits(sp, "held", paused=True)
    plan = sp.ledger._read(
        "EXPLAIN QUERY PLAN SELECT -priority, ready_seq, id, queue FROM jobs INDEXED BY claim_by_queue "
        "WHERE state = 'pending' AND ready = 1 AND queue = ? ORDER BY priority DESC, ready_seq LIMIT 1",
        ("default",),
    )
    assert any("claim_by_queue" in str(row) for row in plan)
    held = claim_held(sp, "w1", None)
    assert held is not None and held.job_file.id == wanted


def test_a_broken_file_keeps_the_last_valid_limits_and_says_why(sp: Spool) -> None:
    _submit(sp, 3, "gpu")
    queues.set_limits(sp, "gpu", concurrency=1)
    (sp.layout.path("queues") / "gpu.yaml").write_text("concurrency: lots\n")
    files = queues.sync(sp)
    assert files["gpu"].limits is None and "concurrency" in (files["gpu"].error or "")
    limits, error, _ = sp.ledger.queue_limit_rows()["gpu"]
    assert limits == Limits(concurrency=1) and error
    assert claim_held(sp, "w1", None) is not None and claim_held(sp, "w2", None) is None
    with pytest.raises(InvalidJob):
        queues.set_limits(sp, "gpu", rate="1/s")  # refuses to build on a file it can't read
    queues.set_limits(sp, "gpu", clear=True, concurrency=2)
    assert claim_held(sp, "w2", None) is not None


def test_a_removed_file_removes_its_limits(sp: Spool) -> None:
    _submit(sp, 2, "gpu")
    queues.set_limits(sp, "gpu", paused=True)
    (sp.layout.path("queues") / "gpu.yaml").unlink()
    queues.sync(sp)
    assert len(claim_many(sp, "w1", None, 16)) == 2


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ("rate: 5/x\n", "field 'rate'"),
        ("rate: 0/s\n", "field 'rate'"),
        ("concurrency: 0\n", "field 'concurrency'"),
        ("paused: yes\n", "field 'paused'"),
        ("limit: 3\n", "unknown field 'limit'"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_bad_queue_files_are_refused_with_the_field_named(sp: Spool, fields: str, error: str) -> None:
    (sp.layout.path("queues") / "q.yaml").write_text(fields)
    assert error in (queues.read_files(sp)["q"].error or "")


def test_a_spool_made_before_queues_has_no_folder_until_one_is_set(spool_dir: Path) -> None:
    (spool_dir / "queues").rmdir()
    with Spool(spool_dir, environ={}) as sp:
        assert queues.sync(sp) == {}
        queues.set_limits(sp, "gpu", concurrency=3)
        assert (spool_dir / "queues" / "gpu.yaml").read_text() == "concurrency: 3\npaused: false\n"


def test_a_version_3_ledger_gains_the_queue_column_and_keeps_its_key_index(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        job_id = sp.submit("echo", key="k1")
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    for statement in ("DROP TABLE queue_limits", "DROP TABLE claims", "DROP INDEX claim_by_queue"):
        db.execute(statement)
    db.execute("DROP INDEX leased_by_queue")
    db.execute("ALTER TABLE jobs DROP COLUMN queue")
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    with Spool(spool_dir, environ={}) as sp:
        assert sp.ledger.row(job_id)["queue"] == "default"
        assert claim_held(sp, "w1", None) is not None
        assert folders_of(sp, job_id) == [State.LEASED]
    indexes = {row[1] for row in sqlite3.connect(spool_dir / "ledger.sqlite3").execute("PRAGMA index_list(jobs)")}
    assert {"by_key", "claim_order", "claim_by_queue", "leased_by_queue"} <= indexes


def test_a_version_4_ledger_gains_the_reserved_column_and_keeps_queues_and_their_indexes(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        queues.set_limits(sp, "gpu", concurrency=1)
        job_id = sp.submit("echo", queue="gpu")
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    db.execute("ALTER TABLE jobs DROP COLUMN reserved")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    with Spool(spool_dir, environ={}) as sp:
        assert sp.ledger.row(job_id)["queue"] == "gpu"  # copied over, not the default
        held = claim_held(sp, "w1", None, queues=["gpu"])  # the per-queue head: claim_by_queue
        assert held is not None and held.job_file.id == job_id
    db = sqlite3.connect(spool_dir / "ledger.sqlite3")
    indexes = {row[1] for row in db.execute("PRAGMA index_list(jobs)")}
    assert {"by_key", "claim_order", "claim_by_queue", "leased_by_queue", "by_state"} <= indexes
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
