"""``spool dispatch --engine slurm`` against a real single-node Slurm (Debian's ``slurm-wlm`` and
``munge``: a ``slurmctld`` and a ``slurmd`` of the test's own, on ports of its own) and a real
``spool serve``: the cluster drains the queue with one result per job, every batch job
``--no-requeue``; a batch job cancelled under its attempt (as a node failure ends one) is a
definitive verdict, its runner fenced at once and the job run again; a dispatcher SIGKILLed and
started again adopts its batch jobs by label. Needs root (slurmd runs the jobs) and the two
packages, which .ci/run installs; skipped otherwise."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dispatch_support import Runs, all_done, status_of, submit_jobs

from support import kill_groups, wait_until

NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "munged")


def program(name: str) -> str | None:
    """Where ``name`` is: on PATH, or in /usr/sbin (the daemons, off a plain user's PATH)."""
    return shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(program(name) for name in NEEDED),
    reason="a single-node Slurm needs root, slurm-wlm and munge (apt-get install slurm-wlm munge)",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_munge() -> None:
    """munged, as the munge user, unless one answers already."""
    if subprocess.run(["sh", "-c", "munge -n | unmunge"], capture_output=True).returncode == 0:
        return
    os.makedirs("/run/munge", exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", str(program("munged"))], check=True)
    wait_until(lambda: subprocess.run(["sh", "-c", "munge -n | unmunge"], capture_output=True).returncode == 0, 30)


class Slurm:
    """A throwaway cluster: its config, state and spool folders under ``tmp``; ``env`` has
    ``SLURM_CONF`` for the client commands."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.started = tmp, []
        for folder in ("state", "spool"):
            (tmp / folder).mkdir(parents=True)
        conf = tmp / "slurm.conf"
        conf.write_text(
            "\n".join(
                [
                    "ClusterName=spooltest",
                    "SlurmctldHost=localhost",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    f"StateSaveLocation={tmp}/state",
                    f"SlurmdSpoolDir={tmp}/spool",
                    f"SlurmctldPidFile={tmp}/slurmctld.pid",
                    f"SlurmdPidFile={tmp}/slurmd.pid",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "ReturnToService=2",
                    "MinJobAge=300",
                    "NodeName=localhost CPUs=2 RealMemory=1000 State=UNKNOWN",
                    "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        self.env = {**os.environ, "SLURM_CONF": str(conf)}
        start_munge()
        for daemon in ("slurmctld", "slurmd"):
            with open(tmp / f"{daemon}.log", "wb") as log:
                self.started.append(
                    subprocess.Popen(
                        [str(program(daemon)), "-D", "-f", str(conf)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=self.env,
                        start_new_session=True,
                    )
                )
        wait_until(self._idle, 60, 0.2, "the Slurm node idle")

    def _idle(self) -> bool:
        ran = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env)
        return ran.returncode == 0 and ran.stdout.strip() == "idle"

    def squeue(self) -> list[list[str]]:
        out = subprocess.run(
            ["squeue", "-h", "--states=all", "-o", "%i|%T|%j|%k"], capture_output=True, text=True, env=self.env
        ).stdout
        return [line.split("|") for line in out.splitlines()]

    def stop(self) -> None:
        kill_groups(self.started)


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[Slurm]:
    cluster = Slurm(tmp_path / "slurm")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def runs(served: Any, tmp_path: Path, slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runs]:
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])  # the dispatcher's sbatch and squeue
    started = Runs(served, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()
        subprocess.run(["scancel", "--full", "-u", "root"], env=slurm.env, capture_output=True)


def dispatcher(runs: Runs, *extra: str) -> subprocess.Popen[bytes]:
    args = ["dispatch", *runs._remote(), "--engine", "slurm", "--engine-opt", f"state_dir={runs.state}"]
    return runs.start("dispatch", *args, "--import", "examples.tasks", *extra)


def test_a_slurm_cluster_drains_the_queue_with_one_result_per_job(served: Any, runs: Runs, slurm: Slurm) -> None:
    runs.coordinator()
    job_ids = submit_jobs(served, "echo", {"n": 1}, n=4)
    dispatcher(runs, "--max-inflight", "2")
    wait_until(lambda: all_done(served, job_ids), 120, message="every job done through Slurm")
    for job_id in job_ids:
        assert [a["outcome"] for a in status_of(served, job_id)["attempts"]] == ["done"]

    def batch_over() -> list[list[str]]:
        batch = [row for row in slurm.squeue() if row[2].startswith("spool.")]
        return batch if {row[1] for row in batch} == {"COMPLETED"} else []

    batch = wait_until(batch_over, 60, 0.2, "each batch job COMPLETED (run-one exits after its complete)")
    assert isinstance(batch, list) and len(batch) == 4, batch
    assert {row[3] for row in batch} == {batch[0][3]}  # one label: the dispatcher's


def test_a_batch_job_ended_under_its_attempt_is_fenced_at_once_and_the_job_runs_again(
    served: Any, runs: Runs, slurm: Slurm
) -> None:
    runs.coordinator()
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 60.0})
    dispatcher(runs, "--max-inflight", "1")
    wait_until(lambda: status_of(served, job_id)["state"] == "leased", 90, message="the job leased through Slurm")
    (first,) = [row for row in slurm.squeue() if row[2].endswith(f".{job_id}") and row[1] == "RUNNING"]
    subprocess.run(["scancel", first[0]], env=slurm.env, check=True)  # ended by Slurm: CANCELLED
    wait_until(lambda: "failed; its runner is fenced" in runs.log("dispatch"), 60, message="the runner fenced")
    wait_until(lambda: len(status_of(served, job_id)["attempts"]) == 2, 90, message="a second attempt")
    first_attempt, second_attempt = status_of(served, job_id)["attempts"]
    # scancel signals the whole batch step: run-one may report its killed attempt failed or give
    # the lease back before it dies, or the fence expires it; in every case the job runs again.
    assert first_attempt["outcome"] in ("failed", "released", "expired"), first_attempt
    assert second_attempt["worker"] != first_attempt["worker"]  # another runner, another batch job
    assert not (served.root / "results" / f"{job_id}.json").exists()


def test_a_dispatcher_killed_and_started_again_adopts_its_batch_jobs(served: Any, runs: Runs, slurm: Slurm) -> None:
    runs.coordinator()
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 3.0})
    first = dispatcher(runs, "--max-inflight", "1")
    wait_until(lambda: status_of(served, job_id)["state"] == "leased", 90, message="the job leased through Slurm")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    dispatcher(runs, "--max-inflight", "1")
    wait_until(lambda: "adopted engine job" in runs.log("dispatch"), 60, message="the batch job adopted")
    wait_until(lambda: all_done(served, [job_id]), 60, message="the job done by its one attempt")
    assert [a["outcome"] for a in status_of(served, job_id)["attempts"]] == ["done"]
    wait_until(lambda: "ended" in runs.log("dispatch").split("adopted engine job")[-1], 30, message="seen over")
    batch = [row for row in slurm.squeue() if row[2].startswith("spool.")]
    assert len(batch) == 1, batch  # adopted, never submitted twice


def test_a_node_gone_down_under_an_attempt_ends_its_batch_job_unrequeued_and_spool_retries_once(
    served: Any, runs: Runs, slurm: Slurm
) -> None:
    """The issue's Slurm sandbox proof: every batch job is ``--no-requeue`` (``Requeue=0``), so a
    node set DOWN ends the running one ``NODE_FAIL`` instead of Slurm running it again, the runner
    is fenced, and spool's own retry runs the job once more when the node is back."""
    runs.coordinator()
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 3.0})
    dispatcher(runs, "--max-inflight", "1")
    wait_until(lambda: status_of(served, job_id)["state"] == "leased", 90, message="the job leased through Slurm")
    (first,) = [row for row in slurm.squeue() if row[2].endswith(f".{job_id}") and row[1] == "RUNNING"]
    shown = subprocess.run(["scontrol", "show", "job", first[0]], capture_output=True, text=True, env=slurm.env)
    assert "Requeue=0" in shown.stdout, shown.stdout
    down = ["scontrol", "update", "nodename=localhost", "state=down", "reason=spool-test"]
    subprocess.run(down, env=slurm.env, check=True)
    wait_until(
        lambda: any(row[0] == first[0] and row[1] == "NODE_FAIL" for row in slurm.squeue()), 60, 0.2, "NODE_FAIL"
    )
    wait_until(lambda: "failed; its runner is fenced" in runs.log("dispatch"), 60, message="the runner fenced")
    # Back in service (ReturnToService=2 may have brought it back already: then resume says so).
    subprocess.run(["scontrol", "update", "nodename=localhost", "state=resume"], env=slurm.env, capture_output=True)
    wait_until(lambda: all_done(served, [job_id]), 120, message="the job done by spool's retry")
    attempts = status_of(served, job_id)["attempts"]
    assert [a["outcome"] for a in attempts][-1] == "done" and len(attempts) == 2, attempts
    assert len(list((served.root / "results").iterdir())) == 1
    rows = [row for row in slurm.squeue() if row[2].endswith(f".{job_id}")]
    assert [row[1] for row in rows].count("NODE_FAIL") == 1 and len(rows) == 2, rows  # never requeued by Slurm
