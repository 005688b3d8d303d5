"""``spool dispatch --engine dask`` against a real Dask cluster (a ``dask scheduler`` and two
``dask worker`` processes on loopback, ``allowed-failures: 0``) and a real ``spool serve``: the
cluster drains the queue with one result per job; a Dask worker SIGKILLed mid-attempt turns its
task into KilledWorker (no re-run by Dask), the dispatcher fences the runner at once, not after
the lease's term, and the job's second attempt runs on the worker that lives. Skipped without
``distributed`` (the ``dask`` extra)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from limit_tasks import read_run
from dispatch_support import Runs, all_done, status_of, submit_jobs

from support import ROOT, kill_groups, wait_until

pytest.importorskip("distributed")


class Cluster:
    """A Dask scheduler and its workers (no nanny: a killed worker stays dead), each in a session."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.started = tmp, []
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.file = tmp / "scheduler.json"
        tests = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])  # limit_tasks, for run-one's children
        env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0", "PYTHONPATH": tests}
        self.env = env
        self._start(
            "scheduler",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(self.file),
        )
        wait_until(lambda: self.file.exists() and self.file.stat().st_size > 0, 60, message="the scheduler's file")
        self.address = json.loads(self.file.read_text())["address"]

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"dask-{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "dask"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=self.env,
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        proc = self._start(
            name,
            "worker",
            "--scheduler-file",
            str(self.file),
            "--nthreads",
            "1",
            "--no-nanny",
            "--no-dashboard",
            "--name",
            name,
        )
        self.workers[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"dask-{name}.log").read_text(errors="replace")

    def kill_all(self) -> None:
        kill_groups(self.started)


@pytest.fixture(autouse=True)
def _limit_tasks_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.kill_all()


def dispatcher(runs: Runs, cluster: Cluster, *extra: str) -> subprocess.Popen[bytes]:
    args = ["dispatch", *runs._remote(), "--engine", "dask", "--engine-opt", f"scheduler={cluster.address}"]
    return runs.start(
        "dispatch", *args, "--engine-opt", f"state_dir={runs.state}", "--import", "examples.tasks", *extra
    )


def workers_up(cluster: Cluster, n: int) -> bool:
    return sum("Registered to" in cluster.log(name) for name in cluster.workers) >= n


def test_a_dask_cluster_drains_the_queue_with_one_result_per_job(served: Any, runs: Runs, cluster: Cluster) -> None:
    cluster.worker("w1")
    cluster.worker("w2")
    wait_until(lambda: workers_up(cluster, 2), 60, message="two Dask workers registered")
    runs.coordinator()
    job_ids = submit_jobs(served, "echo", {"n": 1}, n=6)
    dispatcher(runs, cluster, "--max-inflight", "3")
    wait_until(lambda: all_done(served, job_ids), 120, message="every job done through Dask")
    for job_id in job_ids:
        attempts = status_of(served, job_id)["attempts"]
        assert [a["outcome"] for a in attempts] == ["done"], attempts
    assert len(list((served.root / "results").iterdir())) == 6


def test_a_dask_worker_killed_mid_attempt_is_fenced_at_once_and_the_job_runs_again(
    served: Any, runs: Runs, cluster: Cluster, tmp_path: Path
) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    cluster.worker("w1")
    wait_until(lambda: workers_up(cluster, 1), 60, message="a Dask worker registered")
    runs.coordinator()
    (job_id,) = submit_jobs(served, "interval", {"folder": str(folder), "seconds": 60.0})
    dispatcher(runs, cluster, "--max-inflight", "1", "--import", "limit_tasks")
    first = wait_until(lambda: read_run(folder / f"{job_id}.1"), 60, message="attempt 1's handler running via Dask")
    cluster.workers["w1"].send_signal(signal.SIGKILL)  # the worker and, by PDEATHSIG, its run-one
    wait_until(lambda: not first.is_alive(), 30, message="attempt 1's handler dead with its Dask worker")
    wait_until(lambda: "fenced: " in runs.log("dispatch"), 60, message="the runner fenced on KilledWorker")
    cluster.worker("w2")
    second = wait_until(lambda: read_run(folder / f"{job_id}.2"), 60, message="attempt 2's handler, on w2")
    attempts = status_of(served, job_id)["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2], attempts
    assert attempts[0]["outcome"] == "expired" and "fenced" in (attempts[0]["error"] or ""), attempts
    # No Dask re-run: each attempt's handler ran once, and no third attempt appeared.
    assert sorted(path.name for path in folder.iterdir()) == [f"{job_id}.1", f"{job_id}.2"]
    assert second.is_alive() and not (served.root / "results" / f"{job_id}.json").exists()


def test_a_dispatcher_killed_and_started_again_adopts_its_tasks_on_the_scheduler(
    served: Any, runs: Runs, cluster: Cluster
) -> None:
    cluster.worker("w1")
    wait_until(lambda: workers_up(cluster, 1), 60, message="a Dask worker registered")
    runs.coordinator()
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 3.0})
    first = dispatcher(runs, cluster, "--max-inflight", "1")
    wait_until(lambda: status_of(served, job_id)["state"] == "leased", 60, message="the job leased through Dask")
    os.killpg(first.pid, signal.SIGKILL)  # the dispatcher alone: its task runs on, fire-and-forget
    first.wait()
    dispatcher(runs, cluster, "--max-inflight", "1")
    wait_until(lambda: "adopted engine job" in runs.log("dispatch"), 60, message="the task adopted")
    wait_until(lambda: all_done(served, [job_id]), 60, message="the job done by its one attempt")
    attempts = status_of(served, job_id)["attempts"]
    assert [a["outcome"] for a in attempts] == ["done"], attempts
    # Over, the adopted task is forgotten by the scheduler: the dispatcher lets it go unfenced.
    wait_until(lambda: "lost (ambiguous)" in runs.log("dispatch").split("adopted engine job")[-1], 30, message="over")
    assert "fenced" not in runs.log("dispatch")
