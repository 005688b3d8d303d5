"""spool.moves.recovery and spool.fsck: every interrupted state ``settle`` names, made for real, then finished.

Each interrupted state is made by the real transition in a forked process that SIGKILLs itself at a
crash point (``crash_at``), or, where no crash point separates the two halves of a move, by doing
the first half by hand through fsio. Then ``resync`` (or ``fsck --repair``) runs and the test looks
at the end state, and ``fsck`` must find every promise holding.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spool.base import crash
from spool.fsck import fsck, sweep_tmp
from spool.disk.fsio import fs
from spool.disk.ids import new_id
from spool.base.timetext import format_time
from spool.moves.claiming import claim_held
from spool.moves.ingest import ingest
from spool.disk.layout import State, job_lock_name, job_name, key_name, result_name, worker_lock_name
from spool.disk.locks import acquire
from spool.moves.recovery import resync_under_lock
from spool.runner.coordinator import Coordinator
from spool.spool import Spool
from spool.moves.store import folders_of, move_job, read_job
from spool.moves.submission import lookup_key
from spool.moves.transitions import Lease, claim, complete, expire, fail

FLAGS = {"backoff_base_seconds": 0.001}


@pytest.fixture
def sp(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={}, flags=FLAGS)
    yield opened
    opened.close()


def crash_at(sp: Spool, point: str, action: Callable[[Spool], object]) -> None:
    """Run ``action`` in a forked process armed for ``point``; it must die there by SIGKILL."""
    role = point.split(":", 1)[0]
    pid = os.fork()
    if pid == 0:  # the child: its own Spool (fds, ledger connection), then the real transition
        try:
            child = Spool(sp.root, environ={}, flags=FLAGS)
            crash.arm(role, {"SPOOL_CRASH_AT": point})
            action(child)
        finally:
            os._exit(3)  # only reached if the point was never hit
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"{point} was never reached"


def as_worker(name: str, then: Callable[[Spool, Lease], object] | None = None) -> Callable[[Spool], None]:
    """A worker's steps: hold its liveness lock, claim, then ``then`` with the lease."""

    def run(child: Spool) -> None:
        acquire(child.layout.fd("locks"), worker_lock_name(name), blocking=True)
        claimed = claim(child, name, None)
        assert claimed is not None
        if then is not None:
            then(child, Lease(claimed.id, name, claimed.attempt))

    return run


def settle_now(sp: Spool, job_id: str) -> None:
    assert resync_under_lock(sp, job_id)


def assert_clean(sp: Spool) -> None:
    report = fsck(sp)
    assert report.ok, report.violations
    assert not report.in_progress, report.in_progress


def where(sp: Spool, job_id: str) -> list[State]:
    return folders_of(sp, job_id)


def row_state(sp: Spool, job_id: str) -> str | None:
    row = sp.ledger.row(job_id)
    return row["state"] if row else None


# -- the worker's points ------------------------------------------------------------------------


def test_a_claim_killed_after_its_rename_is_a_spent_try(sp: Spool) -> None:
    job_id = sp.submit("echo")
    crash_at(sp, "worker:claim-after-rename", as_worker("w1"))
    assert where(sp, job_id) == [State.LEASED]
    stranded = read_job(sp, State.LEASED, job_id)
    assert stranded.lease is None and stranded.attempt == 0
    report = fsck(sp)
    assert not report.ok and any("leased without a lease" in v for v in report.violations)
    settle_now(sp, job_id)
    back = read_job(sp, State.PENDING, job_id)
    assert (back.attempt, back.tries, back.lease) == (1, 1, None)
    assert back.attempts[-1].outcome == "lost" and back.backoff_seconds is not None
    assert back.attempts[-1].worker == "w1", "the claim's first heartbeat names its worker"
    assert row_state(sp, job_id) == "pending"
    assert_clean(sp)


def test_an_early_claim_killed_after_its_handler_was_sent_is_a_spent_try_of_its_worker(sp: Spool) -> None:
    """A worker's early claim (``claiming.Opening``) killed before its content is written: the
    pending copy in leased/, the lease's first heartbeat; settled as the try it spent, by whom."""
    job_id = sp.submit("echo")

    def early(c: Spool) -> None:
        held = claim_held(c, "w1", None, early=True)
        assert held is not None and held.opening is not None
        held.opening.write()

    crash_at(sp, "worker:claim-after-start", early)
    stranded = read_job(sp, State.LEASED, job_id)
    assert stranded.lease is None and stranded.attempt == 0
    claimed_at = 1_700_000_000.25  # when the first heartbeat was written: the claim's moment
    os.utime(sp.layout.path(State.LEASED, f".{job_id}.1.hb"), (claimed_at, claimed_at))
    settle_now(sp, job_id)
    back = read_job(sp, State.PENDING, job_id)
    assert (back.attempt, back.tries, back.lease) == (1, 1, None)
    record = back.attempts[-1]
    assert (record.outcome, record.worker, record.started) == ("lost", "w1", format_time(claimed_at))
    assert_clean(sp)


def test_a_lost_claim_of_the_last_try_is_dead_expired(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=1)
    crash_at(sp, "worker:claim-after-rename", as_worker("w1"))
    settle_now(sp, job_id)
    dead = read_job(sp, State.DEAD, job_id)
    assert (dead.reason, dead.tries) == ("expired", 1)
    assert_clean(sp)


def test_a_worker_killed_after_claim_is_expired_at_once_when_its_lock_is_free(sp: Spool) -> None:
    job_id = sp.submit("echo")
    crash_at(sp, "worker:after-claim", as_worker("w1"))
    assert where(sp, job_id) == [State.LEASED] and row_state(sp, job_id) == "leased"
    assert_clean(sp)  # a held lease is a consistent state
    Coordinator(sp).run_pass()
    assert where(sp, job_id) == [State.PENDING]
    assert read_job(sp, State.PENDING, job_id).attempts[-1].outcome == "expired"
    assert_clean(sp)


def test_a_complete_killed_after_staging_leaves_only_tmp_for_the_sweep(sp: Spool) -> None:
    job_id = sp.submit("echo")
    crash_at(sp, "worker:complete-after-stage", as_worker("w1", lambda c, lease: complete(c, lease, b'"r"')))
    assert where(sp, job_id) == [State.LEASED] and os.listdir(sp.root / "results") == []
    assert len(os.listdir(sp.root / "tmp")) == 1
    report = fsck(sp)
    # Garbage, not a broken promise (issue 7, finding 17): listed apart, cleaned by --repair.
    assert report.ok and any("left over by a process that is gone" in g for g in report.garbage)
    repaired = fsck(sp, repair=True)
    assert repaired.ok and os.listdir(sp.root / "tmp") == [] and repaired.garbage == []
    assert any(line.startswith("tmp/") for line in repaired.repaired)


def test_a_complete_killed_after_the_result_link_is_done(sp: Spool) -> None:
    job_id = sp.submit("echo")
    crash_at(sp, "worker:after-result", as_worker("w1", lambda c, lease: complete(c, lease, b'"r"')))
    assert where(sp, job_id) == [State.LEASED]
    assert sp.state(job_id) is State.DONE and sp.result(job_id) == "r"  # the result is the commit point
    report = fsck(sp)
    assert any("move to done is in progress" in line for line in report.in_progress)
    settle_now(sp, job_id)
    assert where(sp, job_id) == [State.DONE] and row_state(sp, job_id) == "done"
    done = read_job(sp, State.DONE, job_id)
    assert done.lease is None and done.attempts[-1].outcome == "done"
    fsck(sp, repair=True)  # the staged result's tmp name
    assert_clean(sp)


def test_a_complete_killed_after_the_move_is_finished(sp: Spool) -> None:
    job_id = sp.submit("echo")
    crash_at(sp, "worker:complete-after-move", as_worker("w1", lambda c, lease: complete(c, lease, b'"r"')))
    # The done file is whole at its commit point; the leased copy is still beside it.
    assert where(sp, job_id) == [State.DONE, State.LEASED]
    assert read_job(sp, State.DONE, job_id).lease is None
    settle_now(sp, job_id)
    assert where(sp, job_id) == [State.DONE]  # the more advanced copy won
    done = read_job(sp, State.DONE, job_id)
    assert done.lease is None and done.attempts[-1].ended and row_state(sp, job_id) == "done"
    fsck(sp, repair=True)
    assert_clean(sp)


def test_a_fail_killed_after_its_rename_is_pending_with_the_record_closed(sp: Spool) -> None:
    job_id = sp.submit("echo")
    crash_at(sp, "worker:fail-after-rename", as_worker("w1", lambda c, lease: fail(c, lease, "boom")))
    assert where(sp, job_id) == [State.PENDING]
    assert read_job(sp, State.PENDING, job_id).lease is not None
    settle_now(sp, job_id)
    back = read_job(sp, State.PENDING, job_id)
    assert back.lease is None and back.attempts[-1].outcome == "lost" and back.tries == 1
    assert row_state(sp, job_id) == "pending"
    assert_clean(sp)
    claimed = claim(sp, "w2", None)
    assert claimed is not None and (claimed.attempt, claimed.tries) == (2, 2)


def test_a_fail_killed_after_it_finished_leaves_nothing_to_do(sp: Spool) -> None:
    job_id = sp.submit("echo", max_tries=1)
    crash_at(sp, "worker:after-fail", as_worker("w1", lambda c, lease: fail(c, lease, "boom")))
    assert where(sp, job_id) == [State.DEAD] and row_state(sp, job_id) == "dead"
    assert_clean(sp)


# -- the coordinator's points ---------------------------------------------------------------------


def test_an_expire_killed_after_its_rename_is_pending_with_the_record_closed(sp: Spool) -> None:
    job_id = sp.submit("echo")
    assert claim(sp, "w1", None) is not None
    crash_at(sp, "coordinator:expire-after-rename", lambda c: expire(c, job_id, 1, "no heartbeat"))
    assert where(sp, job_id) == [State.PENDING]
    settle_now(sp, job_id)
    back = read_job(sp, State.PENDING, job_id)
    assert back.lease is None and back.attempts[-1].outcome == "lost"
    assert_clean(sp)


def test_an_expire_killed_after_it_finished_leaves_nothing_to_do(sp: Spool) -> None:
    job_id = sp.submit("echo")
    assert claim(sp, "w1", None) is not None
    crash_at(sp, "coordinator:after-expire", lambda c: expire(c, job_id, 1, "no heartbeat"))
    assert where(sp, job_id) == [State.PENDING] and row_state(sp, job_id) == "pending"
    assert_clean(sp)


def test_an_ingest_killed_after_its_rename_is_finished_once(sp: Spool) -> None:
    (sp.root / "pending" / "mine.yaml").write_text("task: echo\nkey: dropped-key\nargs: {n: 5}\n")
    crash_at(sp, "coordinator:ingest-after-rename", lambda c: ingest(c, "mine.yaml"))
    names = [n for n in os.listdir(sp.root / "pending") if not n.startswith(".")]
    assert len(names) == 1 and names[0] != "mine.yaml"  # renamed: can never be ingested twice
    job_id = names[0][:-5]
    Coordinator(sp).run_pass()  # reconcile finds a runner name holding a user's text
    job_file = read_job(sp, State.PENDING, job_id)
    assert job_file.job.args == {"n": 5} and job_file.job.key == "dropped-key"
    assert lookup_key(sp, "dropped-key") == job_id
    assert row_state(sp, job_id) == "pending"
    assert_clean(sp)


def test_an_invalid_drop_killed_after_its_rename_still_becomes_a_dead_record(sp: Spool) -> None:
    (sp.root / "pending" / "bad.yaml").write_text("task: [unclosed\n")
    crash_at(sp, "coordinator:ingest-after-rename", lambda c: ingest(c, "bad.yaml"))
    names = os.listdir(sp.root / "dead")
    assert len(names) == 1
    job_id = names[0][:-5]
    fsck(sp, repair=True)
    dead = read_job(sp, State.DEAD, job_id)
    assert dead.reason == "invalid" and dead.original == "task: [unclosed\n" and dead.error
    assert_clean(sp)


def test_an_ingest_killed_after_it_finished_leaves_nothing_to_do(sp: Spool) -> None:
    (sp.root / "pending" / "mine.yaml").write_text("task: echo\n")
    crash_at(sp, "coordinator:after-ingest", lambda c: ingest(c, "mine.yaml"))
    Coordinator(sp).run_pass()  # the ledger record came after the point: reconcile catches up
    assert_clean(sp)


# -- by hand: the first half of a move that has no crash point between its halves ------------------


def test_dead_without_a_reason_becomes_failed(sp: Spool) -> None:
    job_id = sp.submit("echo")
    assert claim(sp, "w1", None) is not None
    move_job(sp, job_id, State.LEASED, State.DEAD)  # bury's rename, without its rewrite
    settle_now(sp, job_id)
    dead = read_job(sp, State.DEAD, job_id)
    assert dead.reason == "failed" and dead.lease is None and dead.attempts[-1].ended
    assert row_state(sp, job_id) == "dead"
    assert_clean(sp)


@pytest.mark.parametrize("folder", [State.DEAD, State.PENDING, State.WAITING])
def test_a_result_makes_the_job_done_wherever_its_file_is(sp: Spool, folder: State) -> None:
    """A result its attempt linked: the done job's file moved back by hand goes back to done/."""
    job_id = sp.submit("echo")
    assert claim(sp, "w1", None) is not None
    complete(sp, Lease(job_id, "w1", 1), b'"mine"')
    move_job(sp, job_id, State.DONE, folder)
    assert sp.state(job_id) is State.DONE
    assert not fsck(sp).ok
    settle_now(sp, job_id)
    assert where(sp, job_id) == [State.DONE] and row_state(sp, job_id) == "done"
    assert json.loads((sp.root / "results" / result_name(job_id)).read_text()) == "mine"
    assert_clean(sp)


@pytest.mark.parametrize("folder", [State.DEAD, State.PENDING, State.WAITING])
def test_a_result_no_attempt_linked_is_set_aside(sp: Spool, folder: State) -> None:
    """Issue 17, finding 13: planted for a job never picked up, a result is not the job's."""
    job_id = sp.submit("echo")
    if folder is not State.PENDING:
        move_job(sp, job_id, State.PENDING, folder)
    (sp.root / "results" / result_name(job_id)).write_text('"planted"')
    assert sp.state(job_id) is folder
    report = fsck(sp)
    assert any("a result no attempt of job" in line for line in report.violations), report.violations
    settle_now(sp, job_id)
    assert where(sp, job_id) == [folder] and not (sp.root / "results" / result_name(job_id)).exists()
    (record,) = [read_job(sp, State.DEAD, p.stem) for p in (sp.root / "dead").glob("*.yaml") if p.stem != job_id]
    assert record.reason == "invalid" and record.original == '"planted"', record
    assert_clean(sp)


@pytest.mark.parametrize(
    ("ahead", "behind"),
    [
        (State.LEASED, State.PENDING),
        (State.DONE, State.LEASED),
        (State.DEAD, State.PENDING),
        (State.PENDING, State.WAITING),
    ],
)
def test_in_two_folders_the_more_advanced_copy_wins(sp: Spool, ahead: State, behind: State) -> None:
    job_id = sp.submit("echo")
    if ahead is State.LEASED or ahead is State.DONE:
        claimed = claim(sp, "w1", None)
        assert claimed is not None
        if ahead is State.DONE:
            complete(sp, Lease(job_id, "w1", 1), b"1")
    elif ahead is State.DEAD:
        sp.cancel(job_id)
    # The link half of a link+unlink move (the fallback where renameat2 is missing).
    fs.link(sp.layout.fd(ahead), job_name(job_id), sp.layout.fd(behind), job_name(job_id))
    report = fsck(sp)
    assert any("in 2 folders" in v for v in report.violations)
    settle_now(sp, job_id)
    assert where(sp, job_id) == [ahead] and row_state(sp, job_id) == ahead.value
    assert_clean(sp)


# -- fsck on its own ----------------------------------------------------------------------------


def dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_fsck_names_each_broken_promise_and_repair_fixes_what_it_can(sp: Spool) -> None:
    done = sp.submit("echo", key="kept")
    claim(sp, "w1", None)
    complete(sp, Lease(done, "w1", 1), b"1")
    over = sp.submit("echo", max_tries=1)
    (sp.root / "keys" / key_name("orphan")).write_text(new_id() + "\n")
    (sp.root / "results" / result_name(new_id())).write_text("1")
    (sp.root / "tmp" / f"{dead_pid()}-abc.tmp").write_text("x")
    os.unlink(sp.root / "keys" / key_name("kept"))
    path = sp.root / "pending" / job_name(over)
    path.write_text(path.read_text().replace("tries: 0", "tries: 5"))
    report = fsck(sp)
    text = "\n".join(report.violations)
    for words in (
        "a reservation without its job",
        "a result without a job",
        "key 'kept' is not reserved",
        "tries 5 over max_tries 1",
    ):
        assert words in text, words
    # A tmp leftover breaks no promise: it is garbage (issue 7, finding 17), which repair removes.
    assert any("left over by a process" in line for line in report.garbage)
    repaired = fsck(sp, repair=True)
    assert any("tries 5 over max_tries 1" in v for v in repaired.violations)  # not repairable: reported
    # and tries over attempt; and the orphan result, which repair keeps for a person (it may be
    # the only trace of an acknowledged job whose file was lost)
    assert len(repaired.violations) == 3
    assert any("a result without a job file" in v for v in repaired.violations)
    assert lookup_key(sp, "kept") == done
    assert os.listdir(sp.root / "tmp") == [] and len(os.listdir(sp.root / "results")) == 2


def test_a_result_whose_job_a_live_purge_just_took_away_is_in_progress(sp: Spool) -> None:
    """A purge renames the job file away before it unlinks the result, under the job's lock:
    fsck beside it sees a result without a job, which is a purge in flight, not a violation."""
    job_id = sp.submit("echo")
    claim(sp, "w1", None)
    complete(sp, Lease(job_id, "w1", 1), b"1")
    purger = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    with purger:  # the purge's first step, its lock still held
        os.rename(sp.root / "done" / job_name(job_id), sp.root / "tmp" / f"{os.getpid()}-purged.tmp")
        report = fsck(sp)
        assert not report.violations, report.violations
        assert any(f"results/{result_name(job_id)}: its job's lock is held" in line for line in report.in_progress)
    report = fsck(sp)  # the purger gone and its work unfinished: now it is one
    assert any("a result without a job file" in v for v in report.violations), report.violations


def test_an_interrupted_purge_is_finished_by_the_tmp_sweep(sp: Spool) -> None:
    from spool.disk.layout import purge_marker_name

    job_id = sp.submit("echo")
    claim(sp, "w1", None)
    complete(sp, Lease(job_id, "w1", 1), b"1")
    (sp.root / "logs" / f"{job_id}.1.log").write_text("out")
    # The purge's commit point (job file into tmp/ under its marker name), then the purger died.
    marker = purge_marker_name(job_id).replace(str(os.getpid()), str(dead_pid()), 1)
    os.rename(sp.root / "done" / job_name(job_id), sp.root / "tmp" / marker)
    assert any("a result without a job file" in v for v in fsck(sp).violations)
    repaired = fsck(sp, repair=True)
    assert repaired.ok, repaired.violations
    assert os.listdir(sp.root / "results") == [] and os.listdir(sp.root / "logs") == []
    assert os.listdir(sp.root / "tmp") == []


def test_fsck_reports_a_torn_file_a_stray_and_a_done_job_without_result(sp: Spool) -> None:
    torn, lost = sp.submit("echo"), sp.submit("echo")
    path = sp.root / "pending" / job_name(torn)
    path.write_bytes(path.read_bytes()[:40])
    move_job(sp, lost, State.PENDING, State.DONE)
    (sp.root / "leased" / "notes.txt").write_text("hi")
    text = "\n".join(fsck(sp).violations)
    assert "not a whole job file" in text and "done without results" in text and "notes.txt" in text


def test_fsck_calls_a_move_under_a_held_lock_in_progress(sp: Spool) -> None:
    job_id = sp.submit("echo")
    move_job(sp, job_id, State.PENDING, State.DEAD)  # dead without a reason...
    held = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    assert held is not None
    with held:  # ...while its mover still holds the lock
        report = fsck(sp)
        assert any("dead without a reason (its lock is held" in line for line in report.in_progress)
        assert not any("dead without a reason" in line for line in report.violations)
    assert any("dead without a reason" in line for line in fsck(sp).violations)


def test_a_job_seen_mid_move_is_judged_again_under_its_lock_not_by_whether_the_lock_is_held_later(
    sp: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsck sees a job in done/ and leased/ while publish_job holds its lock between the link and
    the unlink; the move ends before fsck asks about the lock (the stress tier's drain caught this
    window): the job is looked at again under the lock, and is whole."""
    import spool.fsck.jobs as checker  # start-up: the module whose lock seam this test wraps

    job_id = sp.submit("echo")
    crash_at(sp, "worker:complete-after-move", as_worker("w1", lambda c, lease: complete(c, lease, b'"r"')))
    assert where(sp, job_id) == [State.DONE, State.LEASED]  # as publish_job leaves it mid-move
    mover = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    with mover:  # held all along: what was seen is a move in flight
        report = fsck(sp)
    assert not [line for line in report.violations if "folders" in line], report.violations
    assert any(f"{job_id}: in 2 folders (done, leased) (its lock is held" in line for line in report.in_progress)

    mover = acquire(sp.layout.fd("locks"), job_lock_name(job_id), blocking=True)
    real_job_lock_held = checker.job_lock_held

    def the_move_ends_first(handle: Spool, looked_id: str) -> object:
        if (sp.root / "leased" / job_name(job_id)).exists():  # once: the first look again
            os.unlink(sp.root / "leased" / job_name(job_id))
            mover.release()
        return real_job_lock_held(handle, looked_id)

    monkeypatch.setattr(checker, "job_lock_held", the_move_ends_first)
    report = fsck(sp)
    assert not [line for line in report.violations if job_id in line and "ledger" not in line], report.violations
    assert not [line for line in report.in_progress if "folders" in line], report.in_progress
    monkeypatch.undo()
    fsck(sp, repair=True)  # the ledger the killed complete never wrote, its staged result
    assert_clean(sp)


def test_fsck_repair_puts_a_ledger_behind_the_files_right(sp: Spool) -> None:
    job_id = sp.submit("echo")
    sp.ledger.record(read_job(sp, State.PENDING, job_id), State.DONE, ready=False, event="test")
    report = fsck(sp)
    assert any("ledger: 1 job(s) disagree" in v for v in report.violations)
    assert fsck(sp, repair=True).ok and row_state(sp, job_id) == "pending"
    claimed = claim(sp, "w", None)
    assert claimed is not None and claimed.id == job_id


def test_a_result_is_whole_json_or_fsck_says_so(sp: Spool) -> None:
    job_id = sp.submit("echo")
    claim(sp, "w", None)
    complete(sp, Lease(job_id, "w", 1), json.dumps({"a": 1}).encode())
    assert fsck(sp).ok
    (sp.root / "results" / result_name(job_id)).write_text('{"a": ')
    assert any("not a whole JSON result" in v for v in fsck(sp).violations)


def test_a_directory_planted_in_tmp_is_left_and_never_stops_the_sweep(sp: Spool) -> None:
    """tmp/ is the runner's staging: a directory planted there (no writer's pid in its name) can't
    be unlinked. The sweep removes what it can and leaves that for a person (fsck lists it); the
    coordinator's pass that sweeps goes on (EISDIR stopped it, at every restart, before)."""
    (sp.root / "tmp" / "planted").mkdir()
    (sp.root / "tmp" / "planted-full").mkdir()
    (sp.root / "tmp" / "planted-full" / "x").write_text("x")
    (sp.root / "tmp" / "left.tmp").write_bytes(b"staged by a writer that is gone")
    assert sweep_tmp(sp) == ["left.tmp"]
    Coordinator(sp).run_pass()  # its first pass reconciles, and sweeps tmp/
    assert sorted(os.listdir(sp.root / "tmp")) == ["planted", "planted-full"]
    report = fsck(sp, repair=True)
    assert report.ok and sorted(g.split(":")[0] for g in report.garbage) == ["tmp/planted", "tmp/planted-full"]
