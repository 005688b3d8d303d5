"""Remote workers as real processes: ``spool worker --server URL --token T --cacert F`` against a
real ``spool serve`` (``served``), with a real coordinator whose clock decides every lease."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.base.errors import SpoolError
from spool.disk.layout import State
from spool.moves.remote_leases import fence_worker
from support import ROOT, SPOOL_CMD, kill_groups, wait_until

LEASE_SECONDS = "1.5"


class Processes:
    """Remote workers and coordinators a test starts, each in its own group, SIGKILLed at the end."""

    def __init__(self, served: Any, logs: Path) -> None:
        self.served, self.logs = served, logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [*SPOOL_CMD, *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )
        self.started.append(proc)
        return proc

    def remote(self, name: str, *extra: str, token: str | None = None) -> subprocess.Popen[bytes]:
        token = token or self.served.token(name, "work")
        argv = ["worker", "--server", self.served.url, "--token", token, "--cacert", str(self.served.cacert)]
        return self.start(name, *argv, "--import", "examples.tasks", *extra)

    def coordinator(self, *flags: str) -> subprocess.Popen[bytes]:
        """A coordinator with a short term, once it has published it (leases then name its beat)."""
        root = str(self.served.root)
        proc = self.start("coordinator", "--spool", root, "--lease-seconds", LEASE_SECONDS, *flags, "coordinator")
        wait_until(lambda: _published_term(self.served) == float(LEASE_SECONDS), 30, message="the term published")
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def kill_all(self) -> None:
        kill_groups(self.started)


@pytest.fixture
def processes(served: Any, tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "remote-logs"
    logs.mkdir()
    started = Processes(served, logs)
    try:
        yield started
    finally:
        started.kill_all()


def _published_term(served: Any) -> float | None:
    with _spool(served) as sp:
        term = sp.ledger.meta("lease_seconds")
    return float(term) if term else None


def _spool(served: Any) -> Spool:
    return Spool(served.root, environ={})


def _done(served: Any, job_ids: list[str]) -> bool:
    """Each job's file in done/: its result linked and its last attempt recorded."""
    return all((served.root / "done" / f"{job_id}.yaml").exists() for job_id in job_ids)


def _holder(served: Any, job_id: str) -> str | None:
    """The worker whose lease holds the job now, or None (not leased, or moving right now)."""
    try:
        with _spool(served) as sp:
            state, job_file = sp.job(job_id)
    except (FileNotFoundError, SpoolError):
        return None
    return job_file.lease.worker if state is State.LEASED and job_file.lease else None


def _wait_running(processes: Processes, worker: str, job_id: str, attempt: int) -> None:
    """Until ``worker`` says it runs the attempt: the claim on disk alone is not that (a lease the
    server claimed and could not hand over waits out its term instead)."""
    line = f"lease {job_id} attempt={attempt} "
    wait_until(lambda: line in processes.log(worker), 30, message=f"{worker} to run attempt {attempt} of {job_id}")


def test_a_remote_worker_with_a_work_token_completes_jobs(served: Any, processes: Processes) -> None:
    with _spool(served) as sp:
        job_ids = [sp.submit("echo", {"n": n}) for n in range(3)]
    processes.remote("remote-a")
    wait_until(lambda: _done(served, job_ids), 30, message="3 jobs done by the remote worker")
    with _spool(served) as sp:
        for n, job_id in enumerate(job_ids):
            assert sp.result(job_id)["args"] == {"n": n}
            attempts = sp.status(job_id)["attempts"]
            assert [(a["worker"], a["outcome"]) for a in attempts] == [("remote-a", "done")]


def test_heartbeats_over_the_api_keep_a_long_attempt_past_many_terms(served: Any, processes: Processes) -> None:
    processes.coordinator()  # a 1.5 s term: the remote worker beats every 0.5 s
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 4.0}, max_tries=1)
    processes.remote("remote-a")
    wait_until(lambda: _done(served, [job_id]), 30, message="the long attempt done")
    with _spool(served) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in attempts] == [(1, "remote-a", "done")]


def test_a_killed_remote_workers_lease_expires_on_the_coordinators_clock(served: Any, processes: Processes) -> None:
    processes.coordinator()
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 2.0}, max_tries=3)
    first = processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    first.send_signal(signal.SIGKILL)  # the worker alone: its attempt child dies with it
    first.wait()
    processes.remote("remote-b")
    wait_until(lambda: _done(served, [job_id]), 30, message="remote-b finished the job")
    with _spool(served) as sp:
        status = sp.status(job_id)
    outcomes = [(a["attempt"], a["worker"], a["outcome"]) for a in status["attempts"]]
    assert outcomes == [(1, "remote-a", "expired"), (2, "remote-b", "done")]
    assert list((served.root / "results").iterdir()) == [served.root / "results" / f"{job_id}.json"]
    assert "no heartbeat" in (status["attempts"][0]["error"] or "")


def test_a_paused_remote_worker_finds_its_lease_lost_and_drops_its_attempt(served: Any, processes: Processes) -> None:
    """The seed's slow worker: it wakes after its lease expired and another worker took the job."""
    processes.coordinator()
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 3.0}, max_tries=3)
    slow = processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    slow.send_signal(signal.SIGSTOP)  # the worker only: its attempt child runs on
    processes.remote("remote-b")
    _wait_running(processes, "remote-b", job_id, 2)
    slow.send_signal(signal.SIGCONT)
    wait_until(lambda: _done(served, [job_id]), 30, message="remote-b finished the job")
    wait_until(
        lambda: (
            f"of {job_id} killed" in processes.log("remote-a") or f"of {job_id} dropped" in processes.log("remote-a")
        ),
        10,
        message="remote-a to drop its stale attempt",
    )
    assert slow.poll() is None  # it lives on, polling for the next job
    with _spool(served) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in attempts] == [
        (1, "remote-a", "expired"),
        (2, "remote-b", "done"),
    ]
    assert len(list((served.root / "results").iterdir())) == 1


def _seen_by_server(served: Any, worker: str) -> bool:
    """The server records a remote worker as heard from when its lease request arrives (in the
    ledger's remote_workers table, where spool.workers reads who is alive)."""
    with _spool(served) as sp:
        return any(row[0] == worker for row in sp.ledger.remote_workers(0.0))


def test_a_remote_worker_killed_in_its_long_poll_is_handed_nothing(served: Any, processes: Processes) -> None:
    """No coordinator runs, so a job handed to the dead poller would stay leased for its whole
    term (30 s): the server notices the client left and gives a job it claimed back at once."""
    idle = processes.remote("remote-a")
    wait_until(lambda: _seen_by_server(served, "remote-a"), 30, message="remote-a's long-poll at the server")
    idle.send_signal(signal.SIGKILL)
    idle.wait()
    with _spool(served) as sp:
        job_id = sp.submit("echo", {"n": 1})
    processes.remote("remote-b")
    wait_until(lambda: _done(served, [job_id]), 15, message="remote-b finished the job")
    with _spool(served) as sp:
        outcomes = [(a["worker"], a["outcome"]) for a in sp.status(job_id)["attempts"]]
    assert outcomes in ([("remote-b", "done")], [("remote-a", "released"), ("remote-b", "done")])


def test_a_cancel_kills_the_remote_attempt(served: Any, processes: Processes) -> None:
    processes.coordinator()
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 60.0})
    processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    with _spool(served) as sp:
        sp.cancel(job_id)
    wait_until(lambda: _spool_state(served, job_id) is State.DEAD, 10, message="the job cancelled")
    with _spool(served) as sp:
        assert sp.status(job_id)["reason"] == "cancelled"


def _spool_state(served: Any, job_id: str) -> State | None:
    with _spool(served) as sp:
        return sp.state(job_id)


def test_a_remote_worker_survives_the_server_restarting(served: Any, processes: Processes) -> None:
    with _spool(served) as sp:
        first = sp.submit("echo", {"n": 1})
    processes.remote("remote-a")
    wait_until(lambda: _done(served, [first]), 30, message="the first job done")
    served.kill()
    wait_until(lambda: "server unreachable" in processes.log("remote-a"), 30, message="the worker to notice")
    served.start(served.port)  # the same spool, the same port
    with _spool(served) as sp:
        second = sp.submit("echo", {"n": 2})
    wait_until(lambda: _done(served, [second]), 30, message="the job after the restart done")
    log = processes.log("remote-a")
    assert log.count("server unreachable, retrying") == 1, log
    assert log.count("server reachable again") == 1, log


def test_an_attempt_running_across_a_server_restart_completes_under_its_fence(
    served: Any, processes: Processes
) -> None:
    """The restarted server keeps nothing from before, yet honours the fence: it is the file's."""
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 2.0})
    processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    served.kill()
    served.start(served.port)
    wait_until(lambda: _done(served, [job_id]), 30, message="the job done after the restart")
    with _spool(served) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in attempts] == [(1, "remote-a", "done")]


def test_sigterm_releases_a_running_attempt_past_the_grace(served: Any, processes: Processes) -> None:
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 60.0}, max_tries=1)
    worker = processes.remote("remote-a", token=None)
    _wait_running(processes, "remote-a", job_id, 1)
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping: attempt" in processes.log("remote-a"), 10, message="the first signal seen")
    worker.send_signal(signal.SIGTERM)  # the second: no grace, release at once
    assert worker.wait(15) == 0
    with _spool(served) as sp:
        state, job_file = sp.job(job_id)
    assert state is State.PENDING and job_file.tries == 0  # its only try given back


def test_sigterm_stops_an_idle_remote_worker_at_once(served: Any, processes: Processes) -> None:
    worker = processes.remote("remote-a")
    wait_until(lambda: _seen_by_server(served, "remote-a"), 30, message="remote-a's long-poll at the server")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(3) == 0  # well within its 10 s long-poll
    log = processes.log("remote-a")
    assert "remote worker stopped" in log and "unreachable" not in log


def test_sigterm_lets_a_running_attempt_finish_within_the_grace(served: Any, processes: Processes) -> None:
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 1.0})
    worker = processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert _done(served, [job_id])
    with _spool(served) as sp:
        assert [(a["worker"], a["outcome"]) for a in sp.status(job_id)["attempts"]] == [("remote-a", "done")]


def _revoke(served: Any, name: str, *, fence: bool) -> None:
    """``spool token revoke NAME``; with ``fence``, then ``fence_worker`` as that command will."""
    done = subprocess.run(
        [*SPOOL_CMD, "--spool", str(served.root), "token", "revoke", name], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    if fence:
        with _spool(served) as sp:
            fence_worker(sp, name)


@pytest.mark.parametrize("fence", [True, False], ids=["fenced", "cli"])
def test_revoking_a_token_fences_its_workers_leases(served: Any, processes: Processes, fence: bool) -> None:
    processes.coordinator()
    with _spool(served) as sp:
        job_id = sp.submit("sleep", {"seconds": 3.0}, max_tries=3)
    first = processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    _revoke(served, "remote-a", fence=fence)
    wait_until(lambda: _holder(served, job_id) != "remote-a", 1.0, message="the revoked worker's lease fenced")
    assert first.wait(15) == 1  # the server refuses its token (401): it stops, saying so
    assert "refused this worker's token" in processes.log("remote-a")
    processes.remote("remote-b")
    wait_until(lambda: _done(served, [job_id]), 30, message="remote-b finished the job")
    with _spool(served) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert [(a["worker"], a["outcome"]) for a in attempts] == [("remote-a", "expired"), ("remote-b", "done")]
    assert "revoked" in (attempts[0]["error"] or "")
    assert len(list((served.root / "results").iterdir())) == 1


def test_a_remote_worker_refuses_a_certificate_it_does_not_trust(served: Any, processes: Processes) -> None:
    token = served.token("remote-a", "work")
    argv = ["worker", "--server", served.url, "--token", token, "--import", "examples.tasks"]  # no --cacert
    proc = processes.start("untrusting", *argv)
    assert proc.wait(30) != 0
    assert "certificate" in processes.log("untrusting")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--server", "http://127.0.0.1:1", "--token", "t"], "expected an https:// URL"),
        (["--server", "https://127.0.0.1:1"], "needs a work token"),
        (["--server", "https://127.0.0.1:1", "--token", "t", "--name", "x"], "the work token's name"),
        (["--token", "t"], "go with --server"),
        (["--server", "https://127.0.0.1:1", "--token", "t", "--cacert", "/nonexistent.pem"], "--cacert"),
    ],
)
def test_remote_worker_usage_errors_say_what_is_wrong(tmp_path: Path, args: list[str], says: str) -> None:
    done = subprocess.run(
        [*SPOOL_CMD, "--spool", str(tmp_path / "none"), "worker", *args], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
