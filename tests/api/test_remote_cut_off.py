"""A remote worker cut off from its server (issue 21's fence): once a full lease term has passed
with no beat the server confirmed, the attempt is killed as a lost lease's is, because the
coordinator may by then have expired the lease and handed the job to another worker. Before, the
attempt ran on for as long as the server was away, beside the job's next attempt.

The handler is tests/limit_tasks.py's ``interval``: its run file names the attempt's pid, so the
test sees the kernel end it."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from limit_tasks import read_run
from test_remote import LEASE_SECONDS, Processes, _spool, _wait_running

from support import ROOT, wait_until


@pytest.fixture(autouse=True)
def _limit_tasks_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))


@pytest.fixture
def processes(served: Any, tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "remote-logs"
    logs.mkdir()
    started = Processes(served, logs)
    try:
        yield started
    finally:
        started.kill_all()


def test_a_remote_worker_cut_off_from_its_server_kills_its_attempt_after_a_full_term(
    served: Any, processes: Processes, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    processes.coordinator()  # a term of LEASE_SECONDS: beats every third of it
    with _spool(served) as sp:
        job_id = sp.submit("interval", {"folder": str(runs), "seconds": 120.0}, max_tries=3)
    worker = processes.remote("remote-a", "--import", "limit_tasks")
    _wait_running(processes, "remote-a", job_id, 1)
    first = wait_until(lambda: read_run(runs / f"{job_id}.1"), 30, message="the handler's start line")
    assert first.is_alive()
    served.kill()  # from now on no beat is answered: connection refused
    wait_until(lambda: not first.is_alive(), 30, message="the attempt killed once a full term passed unconfirmed")
    # The runner kills the attempt, then logs why: the line may land just after the handler is gone.
    wait_until(lambda: "no beat confirmed" in processes.log("remote-a"), 10, message="the cut-off logged")
    log = processes.log("remote-a")
    said = re.search(r"no beat confirmed by the server for ([0-9.]+)s, past a full lease term \(([0-9.]+)s\)", log)
    assert said, log
    assert float(said.group(1)) > float(said.group(2)) == float(LEASE_SECONDS)
    assert worker.poll() is None  # the worker lives on, waiting for its server
    # The server back: the lease, beaten no more, expires on the coordinator's clock and the job
    # runs again, here or elsewhere; the killed attempt never reports.
    served.start(served.port)
    wait_until(lambda: read_run(runs / f"{job_id}.2"), 60, message="the job's second attempt")
    with _spool(served) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert attempts[0]["attempt"] == 1 and attempts[0]["outcome"] == "expired", attempts
    assert not (served.root / "results" / f"{job_id}.json").exists()


def test_a_server_stopped_past_the_lease_makes_the_runner_kill_its_attempt_and_one_result_follows(
    served: Any, processes: Processes, tmp_path: Path
) -> None:
    """SIGSTOP, not a kill: the connection stays open and every beat hangs until its timeout, so
    the cut-off must come from the missing confirmations, not from a refused connection."""
    runs = tmp_path / "runs"
    runs.mkdir()
    processes.coordinator()
    with _spool(served) as sp:
        # Longer than the cut-off takes here: a term (1.5 s) and a beat hanging until its 5 s timeout.
        job_id = sp.submit("interval", {"folder": str(runs), "seconds": 12.0}, max_tries=3)
    processes.remote("remote-a", "--import", "limit_tasks")
    _wait_running(processes, "remote-a", job_id, 1)
    first = wait_until(lambda: read_run(runs / f"{job_id}.1"), 30, message="the handler's start line")
    assert served.proc is not None
    os.killpg(served.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: not first.is_alive(), 30, message="the attempt killed while the server is stopped")
    finally:
        os.killpg(served.proc.pid, signal.SIGCONT)
    # The runner kills the attempt, then logs why: the line may land just after the handler is gone.
    wait_until(lambda: "no beat confirmed by the server" in processes.log("remote-a"), 10, message="the cut-off logged")
    wait_until(lambda: (served.root / "done" / f"{job_id}.yaml").exists(), 90, message="the job done after SIGCONT")
    with _spool(served) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert [a["outcome"] for a in attempts][-1] == "done" and len(attempts) >= 2, attempts
    assert len(list((served.root / "results").iterdir())) == 1
    killed = read_run(runs / f"{job_id}.1")
    assert killed is not None and killed.end is None  # the killed attempt never finished its handler


def test_a_stopping_worker_whose_server_is_gone_gives_up_its_outcome_past_the_grace_and_exits(
    served: Any, processes: Processes
) -> None:
    """SIGTERM lets the running attempt finish; its complete finds no server. Past the grace the
    backoff waits no more, so the outcome call must give up (the lease expires) rather than retry
    in a tight loop: such a worker spun at full CPU for as long as the server was gone."""
    processes.coordinator()
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 1.5})
    token = served.token("remote-a", "work")
    argv = ["--grace-seconds", "3", "worker", "--server", served.url, "--token", token, "--cacert"]
    worker = processes.start("remote-a", *argv, str(served.cacert), "--import", "examples.tasks")
    _wait_running(processes, "remote-a", job_id, 1)
    worker.send_signal(signal.SIGTERM)  # finish the attempt within 3 s, then stop
    served.kill()  # its complete will find nobody
    assert worker.wait(timeout=60) == 0
    assert "before its complete was saved" in processes.log("remote-a")
