"""spool.moves.transitions, chains and admin: each move's checks, its commit, and what it leaves behind.

In-process on a real spool folder. Each test drives the transition functions directly, the way the
worker, the coordinator and the CLI call them, and then looks at the folders and files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import behind_the_seam
from spool import queues
from spool.admin import cancel, purge, requeue, requeue_all_dead
from spool.moves.chains import advance_waiting
from spool.moves.ready import make_ready
from spool.base.errors import AlreadyTerminal, LeaseLost, NotFound, SpoolError
from spool.disk.fsio import RealFS
from spool.disk.ids import new_id
from spool.job import JobFile
from spool.disk.layout import (
    State,
    cancel_name,
    heartbeat_name,
    job_lock_name,
    job_name,
    key_name,
    log_name,
    result_name,
)
from spool.disk.locks import acquire
from spool.spool import Spool
from spool.moves.store import folders_of, read_job
from spool.moves.submission import lookup_key
from spool.moves.outcomes import backoff_seconds
from spool.moves.transitions import (
    Lease,
    cancel_leased,
    claim,
    complete,
    expire,
    fail,
    heartbeat,
    lease_status,
    release,
)


@pytest.fixture
def sp(spool_dir: Path) -> Iterator[Spool]:
    """The spool with a short, known backoff (base 2 s: a first retry waits 1..2 s)."""
    opened = Spool(spool_dir, environ={}, flags={"backoff_base_seconds": 2})
    yield opened
    opened.close()


def lease_for(job_file: JobFile, worker: str = "w1") -> Lease:
    return Lease(job_file.id, worker, job_file.attempt)


def take(sp: Spool, worker: str = "w1", tasks: list[str] | None = None) -> tuple[JobFile, Lease]:
    claimed = claim(sp, worker, tasks)
    assert claimed is not None
    return claimed, lease_for(claimed, worker)


def listing(sp: Spool, folder: str) -> list[str]:
    return sorted(n for n in os.listdir(sp.root / folder) if not n.startswith("."))


def where(sp: Spool, job_id: str) -> list[str]:
    return [state.value for state in folders_of(sp, job_id)]


def ledger_state(sp: Spool, job_id: str) -> tuple[str, int] | None:
    row = sp.ledger.row(job_id)
    return (row["state"], row["ready"]) if row else None


# -- claim ------------------------------------------------------------------------------------


def test_claim_moves_the_job_and_counts_the_try_before_returning(sp: Spool) -> None:
    job_id = sp.submit("echo", {"n": 1})
    claimed, lease = take(sp)
    assert claimed.id == job_id and where(sp, job_id) == ["leased"]
    on_disk = read_job(sp, State.LEASED, job_id)
    assert on_disk == claimed
    assert (on_disk.attempt, on_disk.tries) == (1, 1)
    assert on_disk.lease is not None and on_disk.lease.worker == "w1" and on_disk.lease.attempt == 1
    assert [(r.attempt, r.worker, r.ended) for r in on_disk.attempts] == [(1, "w1", None)]
    assert ledger_state(sp, job_id) == ("leased", 0)
    assert claim(sp, "w2", None) is None


def test_claim_takes_only_the_tasks_it_knows(sp: Spool) -> None:
    sp.submit("echo")
    assert claim(sp, "w", ["other"]) is None
    assert claim(sp, "w", []) is None
    assert claim(sp, "w", ["other", "echo"]) is not None


def test_claim_skips_a_job_whose_lock_is_held_and_gives_it_back(sp: Spool) -> None:
    first, second = sp.submit("echo"), sp.submit("echo")
    held = acquire(sp.layout.fd("locks"), job_lock_name(first), blocking=True)
    assert held is not None
    with held:
        claimed, _ = take(sp)
        assert claimed.id == second
        assert claim(sp, "w", None) is None
    assert ledger_state(sp, first) == ("pending", 1)
    assert take(sp)[0].id == first


def test_claim_with_a_ledger_ahead_of_the_files_resyncs_and_takes_the_next(sp: Spool) -> None:
    gone, kept = sp.submit("echo"), sp.submit("echo")
    os.unlink(sp.root / "pending" / job_name(gone))  # as if a purge or a hand removed it
    assert take(sp)[0].id == kept
    assert sp.ledger.row(gone) is None


def test_higher_priority_first_then_the_order_they_became_ready(sp: Spool) -> None:
    low = sp.submit("echo", priority=-1)
    first = sp.submit("echo")
    delayed = sp.submit("echo", delay_seconds=3600)
    second = sp.submit("echo")
    high = sp.submit("echo", priority=5)
    assert make_ready(sp, delayed)  # ready last, so it goes behind `second` though submitted before it
    order = [take(sp)[0].id for _ in range(5)]
    assert order == [high, first, second, delayed, low]


def test_not_before_keeps_a_job_unclaimable_until_made_ready(sp: Spool) -> None:
    job_id = sp.submit("echo", delay_seconds=3600)
    assert ledger_state(sp, job_id) == ("pending", 0)
    assert claim(sp, "w", None) is None
    assert where(sp, job_id) == ["pending"]
    assert make_ready(sp, job_id)
    assert take(sp)[0].id == job_id


class CountingFS(RealFS):
    """The real filesystem, counting what each call touched."""

    calls: Counter[str]

    def read_file(self, dir_fd: int, name: str, max_bytes: int, *, single_link: bool = False) -> bytes:
        self.calls["read_file"] += 1
        return super().read_file(dir_fd, name, max_bytes, single_link=single_link)

    def list_dir(self, dir_fd: int) -> list[str]:
        self.calls["list_dir"] += 1
        return super().list_dir(dir_fd)

    def unlink(self, dir_fd: int, name: str, *, missing_ok: bool = False) -> None:
        self.calls[f"unlink {name}"] += 1
        super().unlink(dir_fd, name, missing_ok=missing_ok)


@pytest.fixture
def counting_fs() -> Iterator[Counter[str]]:
    # What is behind the seam every module calls (`fsio.use`), the real one put back after.
    counting = CountingFS()
    counting.calls = Counter()
    with behind_the_seam(counting):
        yield counting.calls


@pytest.fixture
def big_sp() -> Iterator[Spool]:
    """A spool on tmpfs when there is one: 5,000 files on a busy disk cost seconds and prove nothing more."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    home = Path(tempfile.mkdtemp(prefix="spool-claim-", dir=base))
    try:
        with Spool.init(home / "spool", environ={}) as opened:
            yield opened
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_claim_reads_one_job_file_not_the_pending_folder(big_sp: Spool, counting_fs: Counter[str]) -> None:
    sp = big_sp
    template_id = sp.submit("echo", {"n": 0})
    template = (sp.root / "pending" / job_name(template_id)).read_bytes()
    base = read_job(sp, State.PENDING, template_id)
    entries = []
    for _ in range(4999):  # 5,000 pending: written directly, indexed in one ledger rebuild
        job_id = new_id()
        (sp.root / "pending" / job_name(job_id)).write_bytes(template.replace(template_id.encode(), job_id.encode()))
        entries.append(
            (
                base.replace(job=base.job.__class__(**{**base.job.__dict__, "id": job_id, "key": job_id})),
                State.PENDING,
                True,
            )
        )
    sp.ledger.rebuild([(base, State.PENDING, True), *entries])
    queues.sync(sp)  # once per ledger (the coordinator's, or the first claim's): queues/ read in
    counting_fs.clear()
    claimed, _ = take(sp)
    assert counting_fs["list_dir"] == 0
    assert counting_fs["read_file"] <= 2, counting_fs
    for _ in range(20):
        take(sp)
    assert counting_fs["list_dir"] == 0 and counting_fs["read_file"] <= 2 * 21, counting_fs


# -- heartbeat and lease status ------------------------------------------------------------------


def test_heartbeat_is_a_counter_beside_the_job_and_lease_status_reads_the_fence(sp: Spool) -> None:
    sp.submit("echo")
    claimed, lease = take(sp)
    heartbeat(sp, lease, 7)
    assert (sp.root / "leased" / heartbeat_name(claimed.id, 1)).read_bytes() == f"7 {lease.worker}\n".encode()
    assert listing(sp, "leased") == [job_name(claimed.id)]  # a dot-file is never a job
    assert lease_status(sp, lease) == "held"
    assert lease_status(sp, Lease(claimed.id, "w1", 2)) == "lost"
    cancel(sp, claimed.id)
    assert lease_status(sp, lease) == "cancel"


def test_a_stale_cancel_request_is_removed_at_the_claim_and_an_absent_one_is_never_unlinked(
    sp: Spool, counting_fs: Counter[str]
) -> None:
    job_id = sp.submit("echo")
    _, lease = take(sp)
    complete(sp, lease, b"1")
    # No cancel request anywhere: no unlink of one (an unlink takes leased/'s lock even to find nothing).
    assert counting_fs[f"unlink {cancel_name(job_id)}"] == 0
    # One left by an earlier lease (a crash after a move out of leased/) must not cancel the next.
    stale = sp.submit("echo")
    (sp.root / "leased" / cancel_name(stale)).write_text("2026-12-06T00:00:00Z")
    _, lease = take(sp)
    assert counting_fs[f"unlink {cancel_name(stale)}"] == 1
    assert not (sp.root / "leased" / cancel_name(stale)).exists()
    assert lease_status(sp, lease) == "held"


# -- complete -----------------------------------------------------------------------------------


def test_complete_links_the_one_result_and_moves_to_done(sp: Spool) -> None:
    job_id = sp.submit("echo")
    claimed, lease = take(sp)
    heartbeat(sp, lease, 1)
    complete(sp, lease, b'{"answer": 42}')
    assert where(sp, job_id) == ["done"]
    assert json.loads((sp.root / "results" / result_name(job_id)).read_bytes()) == {"answer": 42}
    assert sp.result(job_id) == {"answer": 42}
    done = read_job(sp, State.DONE, job_id)
    assert done.lease is None and done.attempts[-1].outcome == "done" and done.attempts[-1].ended
    assert os.listdir(sp.root / "tmp") == []
    assert [n for n in os.listdir(sp.root / "leased") if n.startswith(f".{job_id}")] == []
    assert ledger_state(sp, job_id) == ("done", 0)


def test_a_stale_fence_is_refused_and_links_nothing(sp: Spool) -> None:
    job_id = sp.submit("echo")
    _, old = take(sp, "slow")
    assert expire(sp, job_id, 1, "no heartbeat") is State.PENDING
    assert make_ready(sp, job_id)
    _, new = take(sp, "fast")
    assert new.attempt == 2
    for late in (
        lambda: complete(sp, old, b'"late"'),
        lambda: fail(sp, old, "late failure"),
        lambda: release(sp, old),
        lambda: cancel_leased(sp, old),
    ):
        with pytest.raises(LeaseLost):
            late()
        assert os.listdir(sp.root / "results") == [] and os.listdir(sp.root / "tmp") == []
        assert where(sp, job_id) == ["leased"] and read_job(sp, State.LEASED, job_id).attempt == 2
    complete(sp, new, b'"fresh"')
    with pytest.raises(LeaseLost):
        complete(sp, old, b'"late"')
    assert sp.result(job_id) == "fresh"


def test_a_second_result_is_refused_and_the_first_stays(sp: Spool) -> None:
    job_id = sp.submit("echo")
    _, lease = take(sp)
    (sp.root / "results" / result_name(job_id)).write_bytes(b'"first"')  # someone linked first
    with pytest.raises(LeaseLost, match="already has a result"):
        complete(sp, lease, b'"second"')
    assert sp.result(job_id) == "first"
    assert os.listdir(sp.root / "tmp") == []
    with pytest.raises(LeaseLost):
        complete(sp, lease, b'"third"')
    assert sp.result(job_id) == "first"


def test_done_if_and_only_if_there_is_a_result(sp: Spool) -> None:
    ok, failing, rejected = sp.submit("echo"), sp.submit("echo", max_tries=1), sp.submit("echo")
    for _ in range(3):
        claimed, lease = take(sp)
        if claimed.id == ok:
            complete(sp, lease, b"null")
        else:
            fail(sp, lease, "boom", reject=claimed.id == rejected)
    assert sp.state(ok) is State.DONE and (sp.root / "results" / result_name(ok)).exists()
    for job_id in (failing, rejected):
        assert sp.state(job_id) is State.DEAD and not (sp.root / "results" / result_name(job_id)).exists()
    assert sorted(os.listdir(sp.root / "results")) == [result_name(ok)]


# -- fail, expire, release ----------------------------------------------------------------------------


def test_fail_with_tries_left_goes_back_to_pending_after_a_backoff(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=3)
    _, lease = take(sp)
    assert fail(sp, lease, "Traceback\nValueError: boom") is State.PENDING
    retry = read_job(sp, State.PENDING, job_id)
    assert retry.backoff_seconds is not None and 1.0 <= retry.backoff_seconds <= 2.0
    assert retry.lease is None and retry.error == "Traceback\nValueError: boom"
    assert retry.attempts[-1].outcome == "failed" and retry.attempts[-1].error == retry.error
    assert (retry.attempt, retry.tries) == (1, 1)
    assert ledger_state(sp, job_id) == ("pending", 0)
    assert claim(sp, "w", None) is None  # the backoff is the coordinator's to end
    assert make_ready(sp, job_id)
    claimed, _ = take(sp)
    assert (claimed.attempt, claimed.tries, claimed.backoff_seconds) == (2, 2, None)


def test_fail_without_tries_left_is_dead_failed_with_the_last_error(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=2)
    for attempt in (1, 2):
        _, lease = take(sp)
        state = fail(sp, lease, f"error {attempt}")
        if state is State.PENDING:
            make_ready(sp, job_id)
    assert state is State.DEAD
    dead = read_job(sp, State.DEAD, job_id)
    assert (dead.reason, dead.error, dead.tries, dead.attempt) == ("failed", "error 2", 2, 2)
    assert [r.outcome for r in dead.attempts] == ["failed", "failed"]
    assert ledger_state(sp, job_id) == ("dead", 0)


def test_reject_is_dead_at_once_with_tries_left(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=5)
    _, lease = take(sp)
    assert fail(sp, lease, "Reject: bad input", reject=True) is State.DEAD
    dead = read_job(sp, State.DEAD, job_id)
    assert dead.reason == "failed" and dead.tries == 1 and dead.attempts[-1].outcome == "rejected"


def test_a_long_error_is_kept_to_its_last_four_kib(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=1)
    _, lease = take(sp)
    fail(sp, lease, "x" * 100_000 + "\nthe real error")
    error = read_job(sp, State.DEAD, job_id).error
    assert error is not None and len(error.encode()) <= 4096 and error.endswith("the real error")


def test_fail_after_a_result_finishes_done_and_drops_the_failure(sp: Spool) -> None:
    job_id = sp.submit("echo")
    _, lease = take(sp)
    (sp.root / "results" / result_name(job_id)).write_bytes(b"1")
    with pytest.raises(LeaseLost, match="already has a result"):
        fail(sp, lease, "boom")
    assert where(sp, job_id) == ["done"]


def test_release_gives_back_the_try_and_is_ready_at_once(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=1)
    _, lease = take(sp)
    heartbeat(sp, lease, 3)
    release(sp, lease)
    released = read_job(sp, State.PENDING, job_id)
    assert (released.attempt, released.tries, released.lease) == (1, 0, None)
    assert released.attempts[-1].outcome == "released"
    assert not (sp.root / "leased" / heartbeat_name(job_id, 1)).exists()
    claimed, _ = take(sp)
    assert (claimed.attempt, claimed.tries) == (2, 1)  # a max_tries=1 job can still run


def test_expire_returns_to_pending_with_backoff_or_dead_when_spent(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=2)
    take(sp)
    assert expire(sp, job_id, 1, "no heartbeat for 30s") is State.PENDING
    back = read_job(sp, State.PENDING, job_id)
    assert back.backoff_seconds is not None and back.error == "no heartbeat for 30s"
    assert back.attempts[-1].outcome == "expired"
    make_ready(sp, job_id)
    take(sp)
    assert expire(sp, job_id, 1, "stale attempt") is None  # a stale view changes nothing
    assert where(sp, job_id) == ["leased"]
    assert expire(sp, job_id, 2, "no heartbeat for 30s") is State.DEAD
    assert read_job(sp, State.DEAD, job_id).reason == "expired"


def test_expire_never_waits_on_a_busy_lock_and_never_sends_a_done_job_back(sp: Spool) -> None:
    job_id = sp.submit("echo")
    take(sp)
    held = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    assert held is not None
    with held:
        assert expire(sp, job_id, 1, "x") is None
    (sp.root / "results" / result_name(job_id)).write_bytes(b"1")
    assert expire(sp, job_id, 1, "x") is State.DONE
    assert where(sp, job_id) == ["done"]


def test_expire_honours_a_cancel_request(sp: Spool) -> None:
    job_id = sp.submit("echo")
    take(sp)
    assert cancel(sp, job_id) == "requested"
    assert expire(sp, job_id, 1, "worker died") is State.DEAD
    assert read_job(sp, State.DEAD, job_id).reason == "cancelled"
    assert not (sp.root / "leased" / cancel_name(job_id)).exists()


def test_backoff_grows_exponentially_to_its_cap_with_jitter(sp: Spool) -> None:
    capped = Spool(sp.root, environ={}, flags={"backoff_base_seconds": 1, "backoff_max_seconds": 5})
    try:
        for tries, ceiling in ((1, 1), (2, 2), (3, 4), (4, 5), (30, 5)):
            values = {backoff_seconds(capped, tries) for _ in range(50)}
            assert all(ceiling / 2 <= value <= ceiling for value in values)
            assert len(values) > 1
    finally:
        capped.close()


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_pending_and_waiting_is_dead_cancelled_before_it_returns(sp: Spool) -> None:
    parent = sp.submit("echo")
    pending, waiting = sp.submit("echo"), sp.submit("echo", depends_on=[parent])
    assert where(sp, waiting) == ["waiting"]
    for job_id in (pending, waiting):
        assert cancel(sp, job_id) == "cancelled"
        dead = read_job(sp, State.DEAD, job_id)
        assert dead.reason == "cancelled" and where(sp, job_id) == ["dead"]
        assert ledger_state(sp, job_id) == ("dead", 0)


def test_cancel_leased_is_a_request_the_worker_acts_on(sp: Spool) -> None:
    job_id = sp.submit("echo")
    _, lease = take(sp)
    assert cancel(sp, job_id) == "requested"
    assert (sp.root / "leased" / cancel_name(job_id)).exists() and where(sp, job_id) == ["leased"]
    cancel_leased(sp, lease)
    dead = read_job(sp, State.DEAD, job_id)
    assert dead.reason == "cancelled" and dead.attempts[-1].outcome == "cancelled"
    assert not (sp.root / "leased" / cancel_name(job_id)).exists()


def test_cancel_of_a_finished_or_unknown_job_changes_nothing(sp: Spool) -> None:
    done = sp.submit("echo")
    _, lease = take(sp)
    complete(sp, lease, b"1")
    with pytest.raises(AlreadyTerminal, match="already done; nothing changed"):
        cancel(sp, done)
    assert where(sp, done) == ["done"]
    dead = sp.submit("echo")
    cancel(sp, dead)
    with pytest.raises(AlreadyTerminal, match="already dead"):
        cancel(sp, dead)
    with pytest.raises(NotFound):
        cancel(sp, new_id())


def test_a_result_wins_over_a_late_cancel(sp: Spool) -> None:
    job_id = sp.submit("echo")
    _, lease = take(sp)
    cancel(sp, job_id)
    complete(sp, lease, b"1")
    assert sp.state(job_id) is State.DONE
    with pytest.raises(LeaseLost):
        cancel_leased(sp, lease)


# -- chains: promote and skip ---------------------------------------------------------------------


def finish(sp: Spool, job_id: str, ok: bool) -> None:
    claimed, lease = take(sp)
    assert claimed.id == job_id
    complete(sp, lease, b"1") if ok else fail(sp, lease, "boom", reject=True)


def test_a_waiting_job_is_promoted_when_every_dependency_is_done(sp: Spool) -> None:
    a, b = sp.submit("echo"), sp.submit("echo")
    child = sp.submit("echo", depends_on=[a, b])
    assert advance_waiting(sp, child) is None
    finish(sp, a, True)
    assert advance_waiting(sp, child) is None  # b still pending
    finish(sp, b, True)
    assert advance_waiting(sp, child) is State.PENDING
    assert take(sp)[0].id == child


def test_a_child_of_a_done_job_starts_pending(sp: Spool) -> None:
    parent = sp.submit("echo")
    finish(sp, parent, True)
    assert where(sp, sp.submit("echo", depends_on=[parent])) == ["pending"]


def test_a_dependency_that_died_skips_the_child_and_requeue_rearms_it(sp: Spool) -> None:
    parent = sp.submit("echo")
    child = sp.submit("echo", depends_on=[parent])
    grandchild = sp.submit("echo", depends_on=[child])
    finish(sp, parent, False)
    assert advance_waiting(sp, child) is State.DEAD
    assert advance_waiting(sp, grandchild) is State.DEAD
    skipped = read_job(sp, State.DEAD, child)
    assert (skipped.reason, skipped.skipped_because) == ("skipped", parent)
    assert read_job(sp, State.DEAD, grandchild).skipped_because == child

    assert requeue(sp, parent) is State.PENDING
    assert where(sp, child) == ["waiting"] and where(sp, grandchild) == ["waiting"]
    assert read_job(sp, State.WAITING, child).reason is None
    finish(sp, parent, True)
    assert advance_waiting(sp, child) is State.PENDING
    finish(sp, child, True)
    assert advance_waiting(sp, grandchild) is State.PENDING


# -- requeue ------------------------------------------------------------------------------------


def test_requeue_dead_gives_a_fresh_set_of_tries_and_keeps_the_fence(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=1)
    _, lease = take(sp)
    fail(sp, lease, "boom")
    assert requeue(sp, job_id) is State.PENDING
    fresh = read_job(sp, State.PENDING, job_id)
    assert (fresh.tries, fresh.attempt, fresh.reason, fresh.error) == (0, 1, None, None)
    assert ledger_state(sp, job_id) == ("pending", 1)
    claimed, _ = take(sp)
    assert (claimed.attempt, claimed.tries) == (2, 1)


def test_requeue_refuses_what_is_not_dead(sp: Spool) -> None:
    job_id = sp.submit("echo")
    with pytest.raises(AlreadyTerminal, match="not dead; nothing changed"):
        requeue(sp, job_id)
    with pytest.raises(NotFound):
        requeue(sp, new_id())


def test_requeue_all_dead_by_task(sp: Spool) -> None:
    a, b, c = sp.submit("echo", max_tries=1), sp.submit("other", max_tries=1), sp.submit("echo", max_tries=1)
    for _ in range(3):
        claimed, lease = take(sp)
        fail(sp, lease, "boom")
    assert sorted(requeue_all_dead(sp, task="echo")) == sorted([a, c])
    assert where(sp, b) == ["dead"]
    assert requeue_all_dead(sp) == [b]


# -- purge --------------------------------------------------------------------------------------


def test_purge_removes_job_result_logs_and_key_and_the_key_is_free_again(sp: Spool) -> None:
    job_id = sp.submit("echo", key="invoice-7")
    _, lease = take(sp)
    (sp.root / "logs" / log_name(job_id, 1)).write_text("output\n")
    complete(sp, lease, b"1")
    dead_id = sp.submit("echo", key="other", max_tries=1)
    _, lease = take(sp)
    fail(sp, lease, "boom")
    assert purge(sp, 3600) == []  # too young
    assert sorted(purge(sp, 0)) == sorted([job_id, dead_id])
    for folder in ("pending", "waiting", "leased", "done", "dead", "results", "keys", "logs", "tmp"):
        assert listing(sp, folder) == [], folder
    assert lookup_key(sp, "invoice-7") is None and sp.ledger.row(job_id) is None
    assert not (sp.root / "keys" / key_name("invoice-7")).exists()
    again = sp.submit("echo", key="invoice-7")
    assert again != job_id and lookup_key(sp, "invoice-7") == again


def test_purge_keeps_what_is_not_finished(sp: Spool) -> None:
    pending = sp.submit("echo")
    with pytest.raises(SpoolError, match="not finished"):
        purge(sp, 0, [State.PENDING])
    assert purge(sp, 0) == [] and where(sp, pending) == ["pending"]
