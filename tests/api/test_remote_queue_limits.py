"""Queue limits over every worker of a spool, local and remote, as real processes (issue 20's
"Done when"): ``--concurrency 2`` over three local workers and a remote one never has more than
two attempts of the queue running at once, with the slot holders SIGKILLed (the remote one too)
and replaced during the run; pause and resume through the API hold and release a queue's jobs
for a remote worker while another queue runs.

The handler is tests/limit_tasks.py's ``interval``: each attempt writes its start, the attempts
of its queue running beside it (``peers``) and its end. How long a killed attempt counts as
running is the conservative rule of ``_intervals``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from limit_tasks import Run, read_runs

from spool import Spool
from spool.base.timetext import parse_time
from spool.disk.layout import State
from support import ROOT, run_spool, wait_until
from test_remote import LEASE_SECONDS, Processes

LIMIT_TASKS = ("--import", "limit_tasks")  # tests/limit_tasks.py
FAST = ("--poll-seconds", "0.2", "--backoff-base-seconds", "0.2", "--backoff-max-seconds", "0.5")
GPU_JOBS, DEFAULT_JOBS, NAP = 20, 3, 0.3


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process the test starts imports tests/limit_tasks.py."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))


@pytest.fixture
def processes() -> Iterator[list[Processes]]:
    """Made per served spool by the test; every process SIGKILLed at the end, whatever happened."""
    made: list[Processes] = []
    yield made
    for each in made:
        each.kill_all()


class Cluster:
    """A coordinator, local and remote workers on one served spool; the workers by pid."""

    def __init__(self, served: Any, logs: Path) -> None:
        self.served, self.root = served, served.root
        self.procs = Processes(served, logs)
        self.names: dict[int, str] = {}  # worker pid -> worker name
        self.popen: dict[int, subprocess.Popen[bytes]] = {}

    def coordinator(self) -> None:
        self.procs.coordinator(*FAST)  # the term is test_remote's LEASE_SECONDS (1.5 s)

    def local(self, name: str, *extra: str) -> int:
        argv = ["--spool", str(self.root), "--lease-seconds", LEASE_SECONDS, *FAST, "worker", "--name", name]
        return self._note(name, self.procs.start(name, *argv, *LIMIT_TASKS, *extra))

    def remote(self, name: str, *extra: str) -> int:
        token_file = self.procs.logs / f"{name}.token"
        token_file.write_text(self.served.token(name, "work") + "\n")
        token_file.chmod(0o600)
        argv = ["worker", "--server", self.served.url, "--token-file", str(token_file)]
        argv += ["--cacert", str(self.served.cacert)]
        return self._note(name, self.procs.start(name, *argv, *LIMIT_TASKS, *extra))

    def _note(self, name: str, proc: subprocess.Popen[bytes]) -> int:
        self.names[proc.pid], self.popen[proc.pid] = name, proc
        return proc.pid

    def kill(self, pid: int) -> None:
        """SIGKILL the worker alone, as the OOM killer would: its attempt child must die with it."""
        os.kill(pid, signal.SIGKILL)
        self.popen[pid].wait()

    def logs(self) -> str:
        found = sorted(self.procs.logs.glob("*.log"))
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')}" for path in found)


def _running(folder: Path) -> list[Run]:
    return [run for run in read_runs(folder) if run.end is None and run.is_alive()]


def _holder(folder: Path, pids: set[int]) -> Run | None:
    """A running attempt of the folder's queue whose worker is one of ``pids``, started less than
    half its nap ago (so the SIGKILL lands mid-run, not after its end)."""
    fresh = time.time() - NAP / 2
    return next((run for run in _running(folder) if run.ppid in pids and run.start > fresh), None)


def _kill_a_slot_holder(cluster: Cluster, folder: Path, pids: set[int], what: str) -> Run:
    found = wait_until(lambda: _holder(folder, pids), 20, 0.005, f"{what} to hold a gpu slot")
    assert isinstance(found, Run)
    cluster.kill(found.ppid)
    wait_until(lambda: not found.is_alive(), 5, 0.01, f"the handler of {found.name} to die with its worker")
    return found


def all_done(root: Path, job_ids: list[str]) -> bool:
    """Each job's move to done/ finished: recorded in the ledger, which comes after the leased/
    copy is gone (a done/ file alone may still have its leased/ copy beside it)."""
    with Spool(root, environ={}) as sp:
        for job_id in job_ids:
            row = sp.ledger.row(job_id)
            if not (row and row["state"] == "done" and _folders(root, job_id) == ["done"]):
                return False
    return True


def _folders(root: Path, job_id: str) -> list[str]:
    return [state.value for state in State if (root / state.value / f"{job_id}.yaml").exists()]


def _statuses(root: Path, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    with Spool(root, environ={}) as sp:
        return {job_id: sp.status(job_id) for job_id in job_ids}


def _all_done_once(root: Path, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Every job done, in done/ only, with one result (and no other result in results/), its
    last attempt the only one done."""
    results = sorted(path.name for path in (root / "results").iterdir())
    assert results == sorted(f"{job_id}.json" for job_id in job_ids), "one result per job, nothing else"
    statuses = _statuses(root, job_ids)
    for job_id, status in statuses.items():
        assert _folders(root, job_id) == ["done"], job_id
        outcomes = [record["outcome"] for record in status["attempts"]]
        assert outcomes.count("done") == 1 and outcomes[-1] == "done", (job_id, status["attempts"])
        assert [record["attempt"] for record in status["attempts"]] == list(range(1, status["attempt"] + 1))
    return statuses


def _intervals(runs: list[Run], statuses: dict[str, dict[str, Any]]) -> list[tuple[float, float, str]]:
    """(start, end, name) of each attempt whose handler started. The start is the handler's own.
    The end is the handler's own end line; a handler SIGKILLed with its worker wrote none, and
    counts as running until its slot was given back: the ``ended`` the coordinator stamped on the
    attempt's record when it took the job out of leased/ (plus 1 ms, as the stamp is cut to whole
    ms). The tests also wait until every killed handler's process is gone, and each handler's
    ``peers`` shows no killed one still alive beside it, so the process did not outlive that end."""
    found = []
    for run in runs:
        end = run.end
        if end is None:
            record = statuses[run.job_id]["attempts"][run.attempt - 1]
            assert record["attempt"] == run.attempt and record["outcome"] != "done" and record["ended"], record
            end = parse_time(record["ended"], "ended").timestamp() + 0.001
        assert end >= run.start, run
        found.append((run.start, end, run.name))
    return found


def most_at_once(intervals: list[tuple[float, float, str]]) -> tuple[int, list[str]]:
    """The most intervals that overlap at one instant, and which; at a tie a start counts first
    (two intervals that touch overlap)."""
    events = sorted([(start, 0, name) for start, _, name in intervals] + [(end, 1, name) for _, end, name in intervals])
    now: set[str] = set()
    best: list[str] = []
    for _, kind, name in events:
        if kind == 0:
            now.add(name)
            if len(now) > len(best):
                best = sorted(now)
        else:
            now.discard(name)
    return len(best), best


def test_concurrency_2_holds_over_three_local_workers_and_a_remote_one_through_sigkills(
    serve_spool: Any, tmp_path: Path, importable: None, processes: list[Processes]
) -> None:
    served = serve_spool()
    set_gpu = run_spool("queue", "set", "gpu", "--concurrency", "2", spool=served.root)
    assert set_gpu.returncode == 0, set_gpu.stderr
    gpu, other = tmp_path / "gpu-runs", tmp_path / "default-runs"
    gpu.mkdir()
    other.mkdir()
    with Spool(served.root, environ={}) as sp:
        gpu_ids = [
            sp.submit("interval", {"folder": str(gpu), "seconds": NAP}, queue="gpu", max_tries=5)
            for _ in range(GPU_JOBS)
        ]
        default_ids = [sp.submit("interval", {"folder": str(other), "seconds": 0.05}) for _ in range(DEFAULT_JOBS)]
    logs = tmp_path / "logs"
    logs.mkdir()
    cluster = Cluster(served, logs)
    processes.append(cluster.procs)
    cluster.coordinator()
    remote = cluster.remote("remote-1")
    # The remote worker first, so it holds a slot for sure; then the locals, one naming its queues.
    killed = [_kill_a_slot_holder(cluster, gpu, {remote}, "remote-1")]
    locals_ = {cluster.local("local-1", "--queues", "gpu,default"), cluster.local("local-2"), cluster.local("local-3")}
    cluster.remote("remote-2")
    for n in (4, 5):
        victim = _kill_a_slot_holder(cluster, gpu, locals_, "a local worker")
        killed.append(victim)
        locals_.discard(victim.ppid)
        locals_.add(cluster.local(f"local-{n}"))
    wait_until(lambda: all_done(served.root, gpu_ids + default_ids), 60, 0.05, f"every job done (logs in {logs})")
    statuses = _all_done_once(served.root, gpu_ids + default_ids)

    runs = read_runs(gpu)
    # Each kill took a running attempt down (its handler never ended), and nothing else did.
    assert {run.name for run in runs if run.end is None} == {run.name for run in killed}, killed
    for run in killed:
        record = statuses[run.job_id]["attempts"][run.attempt - 1]
        # 'lost' when a local worker died before its early claim's content was written (its handler
        # had started: spool.moves.claiming.Opening); either way the record names the worker.
        assert record["worker"] == cluster.names[run.ppid] and record["outcome"] in ("expired", "lost"), record
    assert any(run.ppid == remote for run in runs)
    assert not any(run.is_alive() for run in killed)  # an attempt child outlives its attempt, not its worker
    intervals = _intervals(runs, statuses)
    count, names = most_at_once(intervals)
    print(f"{len(runs)} gpu attempts, at most {count} at once ({names}); killed {[r.name for r in killed]}")
    assert count <= 2, f"{count} attempts of queue gpu ran at once: {names}\n{cluster.logs()}"
    assert count == 2, "the limit was never reached: the run proves nothing"
    crowded = [run for run in runs if run.peers is not None and len(run.peers) > 1]
    assert not crowded, f"handlers that saw more than one other gpu attempt alive beside them: {crowded}"
    ends = {name: end for _, end, name in intervals}
    outlived = [(run.name, peer) for run in runs for peer in run.peers or () if run.start > ends[peer]]
    assert not outlived, f"a handler alive after its slot was given back: {outlived}"
    # The default queue was never starved: its jobs ran while gpu jobs were still waiting for a slot.
    assert max(run.start for run in read_runs(other)) < max(run.start for run in runs)
    checked = run_spool("fsck", spool=served.root)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_pause_and_resume_over_the_api_hold_and_release_a_queue_for_a_remote_worker(
    served: Any, tmp_path: Path, importable: None, processes: list[Processes]
) -> None:
    admin, producer = served.token("root", "admin"), served.token("producer", "submit")
    paused = served.call("POST", "/v1/queues/email", token=admin, json={"paused": True})
    assert paused.status == 200 and paused.json["paused"] is True, paused.json
    runs = tmp_path / "runs"
    runs.mkdir()

    def submit(queue: str) -> str:
        body = {"task": "interval", "args": {"folder": str(runs), "seconds": 0.0}, "queue": queue}
        made = served.call("POST", "/v1/jobs", token=producer, json=body)
        assert made.status == 201, made.json
        return str(made.json["id"])

    email = [submit("email") for _ in range(3)]
    first = [submit("default") for _ in range(3)]  # after the email jobs: the claim passes them by
    logs = tmp_path / "logs"
    logs.mkdir()
    cluster = Cluster(served, logs)
    processes.append(cluster.procs)
    cluster.coordinator()
    cluster.remote("remote-e")

    wait_until(lambda: all_done(served.root, first), 30, message="the default jobs done while email is paused")
    later = [submit("default")]  # one more round of the worker's claims past the paused jobs
    wait_until(lambda: all_done(served.root, later), 30, message="a later default job done too")
    for job_id in email:
        got = served.call("GET", f"/v1/jobs/{job_id}", token=producer)
        assert got.json["state"] == "pending" and got.json["tries"] == 0 and got.json["attempts"] == [], got.json
        assert got.json["held_by"] == {"queue": "email", "limit": "paused", "text": "queue email is paused"}
    assert not [run for run in read_runs(runs) if run.job_id in email]
    resumed = served.call("POST", "/v1/queues/email", token=admin, json={"paused": False})
    assert resumed.status == 200 and resumed.json["held_by"] is None, resumed.json
    wait_until(lambda: all_done(served.root, email), 30, message="the email jobs done after the resume")
    statuses = _all_done_once(served.root, email + first + later)
    for job_id in email:
        attempts = statuses[job_id]["attempts"]
        assert [(a["attempt"], a["worker"], a["outcome"]) for a in attempts] == [(1, "remote-e", "done")]
