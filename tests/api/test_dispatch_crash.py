"""Dispatch's new steps crashed with real processes (issue 21: the fault suite covers a runner's
claim, its fence and adoption), each followed by recovery and ``fsck``:

- ``serve:claim-*`` and ``serve:after-claim``: the server SIGKILLs itself while a ``run-one``
  claims its job; the server restarts, and a second ``run-one`` for the same job runs it: one
  result, and tries spent only where a claim was made (SPEC's try at pickup);
- ``serve:expire-after-rename`` and ``serve:after-expire``: the server dies mid-fence of a runner;
  restarted, the fence is asked again and the job runs again to one result;
- ``dispatch:after-engine-submit`` and ``dispatch:after-fence``: the dispatcher dies right after
  the engine took an engine job, or right after a fence; started again it adopts what the engine
  holds and loses nothing.

tests/faults/test_crash_matrix.py runs the serve points in-process too, as the worker's and the
coordinator's transitions; the dispatch points move no file and are crashed only here.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from dispatch_support import Runs, all_done, status_of, submit_jobs

from spool import Spool
from spool.base import crash
from spool.fsck import fsck
from support import wait_until

CLAIM_POINTS = [
    "serve:claim-after-reserve",
    "serve:claim-after-heartbeat",
    "serve:claim-after-rename",
    "serve:after-claim",
]
FENCE_POINTS = ["serve:expire-after-rename", "serve:after-expire"]
DISPATCH_POINTS = ["dispatch:after-engine-submit", "dispatch:after-fence"]


def fsck_clean(served: Any) -> None:
    with Spool(served.root, environ={}) as sp:
        assert fsck(sp, repair=True).ok
        report = fsck(sp)
        assert report.ok and not report.in_progress, report.violations + report.in_progress


def back_in_line(served: Any, job_id: str) -> bool:
    """Whether the ledger has the job ready in pending/: what a claim takes."""
    with Spool(served.root, environ={}) as sp:
        row = sp.ledger.row(job_id)
    return row is not None and row["state"] == "pending" and row["ready"] == 1


def restart_with(served: Any, crash_at: str | None) -> None:
    """SIGKILL the server (if alive) and start it again on its port, armed for ``crash_at`` or not."""
    served.kill()
    if crash_at is None:
        served.env.pop("SPOOL_CRASH_AT", None)
    else:
        served.env["SPOOL_CRASH_AT"] = crash_at
    served.start(served.port)


def test_every_dispatch_and_runner_point_is_crashed_here() -> None:
    listed = [p for p in crash.all_points() if p.startswith("dispatch:")]
    assert sorted(listed) == sorted(DISPATCH_POINTS)
    serve = set(crash.all_points())
    assert set(CLAIM_POINTS + FENCE_POINTS) <= serve


@pytest.mark.parametrize("point", CLAIM_POINTS)
def test_a_server_killed_in_a_runners_claim_loses_nothing(served: Any, runs: Runs, point: str) -> None:
    runs.coordinator()
    (job_id,) = submit_jobs(served, "echo", {"n": 1})
    restart_with(served, point)
    first = runs.run_one("r-first", job_id, claim_patience="3")  # a setting: 60 s by default
    wait_until(lambda: served.proc.poll() is not None, 30, message=f"the server dead at {point}")
    assert first.wait(timeout=60) == 1  # its claim got no answer: it gives up
    restart_with(served, None)
    # A run-one asks once: start it when the job is back in line (the coordinator's reconcile takes
    # a reservation back, a lease of a claim that reached leased/ expires), not before.
    wait_until(lambda: back_in_line(served, job_id), 60, message="the job back in line")
    second = runs.run_one("r-second", job_id)
    wait_until(lambda: all_done(served, [job_id]), 60, message="the job done by a later run-one")
    assert second.wait(timeout=60) == 0
    status = status_of(served, job_id)
    assert [a["outcome"] for a in status["attempts"]][-1] == "done"
    assert len(list((served.root / "results").iterdir())) == 1
    # A claim that reached leased/ counted its try (SPEC: at pickup); one killed before it did not.
    claimed_before_the_kill = point in ("serve:claim-after-rename", "serve:after-claim")
    assert status["tries"] == (2 if claimed_before_the_kill else 1), status
    fsck_clean(served)


@pytest.mark.parametrize("point", FENCE_POINTS)
def test_a_server_killed_mid_fence_fences_when_asked_again(served: Any, runs: Runs, point: str) -> None:
    # A term the server's two restarts can't outlast on a loaded machine: the lease must still be
    # there for the fence to end it (at 1.5 s it sometimes expired first, and nothing was fenced).
    runs.coordinator(lease_seconds="15.0")
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 60.0})
    run_one = runs.run_one("r-held", job_id)
    # Running, not only leased: a server killed before its answer reached run-one would leave it
    # asking for a job it already holds until the lease expires and it claims it again.
    wait_until(lambda: f"lease {job_id} attempt=1 " in runs.log("r-held"), 60, message="r-held running the job")
    restart_with(served, point)
    fence = ["curl", "-sS", "--cacert", str(served.cacert), "-X", "POST", "-H"]
    fence += [f"Authorization: Bearer {runs.token_file.read_text().strip()}", "-d", "{}"]
    fence += [f"{served.url}/v1/runners/r-held/fence"]
    first = subprocess.run(fence, capture_output=True, text=True, timeout=60)  # the server dies answering it
    wait_until(lambda: served.proc.poll() is not None, 30, message=f"the server dead at {point}: {first}")
    restart_with(served, None)
    done = subprocess.run(fence, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: run_one.poll() is not None, 60, message="the fenced run-one ends")
    wait_until(lambda: status_of(served, job_id)["state"] == "pending", 60, message="the job back in the queue")
    attempts = status_of(served, job_id)["attempts"]
    # Killed after the rename, the file's attempt record is still open: the next claim closes it
    # (SPEC: whoever takes the lock next finishes the move), or run-one's next call, which finds
    # its lease gone, closes it as lost; killed after, it says expired.
    expected = ("expired",) if point == "serve:after-expire" else (None, "lost")
    assert attempts[0]["outcome"] in expected, attempts
    assert len(attempts) == 1 and not (served.root / "results" / f"{job_id}.json").exists()
    fsck_clean(served)


@pytest.mark.parametrize("point", DISPATCH_POINTS)
def test_a_dispatcher_killed_at_its_point_is_adopted_and_loses_nothing(
    served: Any, runs: Runs, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs.coordinator()
    task = "crash_worker" if point == "dispatch:after-fence" else "sleep"  # a failed engine job is fenced
    (job_id,) = submit_jobs(served, task, {} if task == "crash_worker" else {"seconds": 1.0}, max_tries=2)
    monkeypatch.setenv("SPOOL_CRASH_AT", point)
    first = runs.dispatcher("--max-inflight", "1")
    assert first.wait(timeout=90) == -9, runs.log("dispatch")  # SIGKILLed at its point
    monkeypatch.delenv("SPOOL_CRASH_AT")
    runs.dispatcher("--max-inflight", "1")
    if task == "sleep":
        wait_until(lambda: all_done(served, [job_id]), 90, message="the job done by the adopted engine job")
        assert [a["outcome"] for a in status_of(served, job_id)["attempts"]] == ["done"]
        assert "adopted engine job" in runs.log("dispatch")
    else:  # it crashes every run-one it gets: dead after its two tries, each counted once
        wait_until(lambda: status_of(served, job_id)["state"] == "dead", 120, message="the job dead after 2 tries")
        assert len(status_of(served, job_id)["attempts"]) == 2
    wait_until(lambda: not runs.engine_records(), 60, message="every engine job let go")
    fsck_clean(served)
    assert os.environ.get("SPOOL_CRASH_AT") is None
