"""Pool mode (issue 21): ``spool worker --server ... --runner NAME`` under one ``dispatch`` token,
many workers with one secret, as a Slurm array or a Kubernetes Deployment runs them. Real
processes against a real ``spool serve``: two workers named by ``--runner`` drain the queue, each
lease held by ``<token name>/<runner>``; a worker with a dispatch token and no ``--runner`` is
refused in one line; a bad runner name is a usage error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dispatch_support import Runs, all_done, status_of, submit_jobs

from support import run_spool, wait_until


def pool_worker(runs: Runs, runner: str | None) -> Any:
    args = ["worker", *runs._remote(), "--import", "examples.tasks"]
    return runs.start(f"worker-{runner}", *args, *(["--runner", runner] if runner else []))


def test_two_workers_under_one_dispatch_token_drain_the_queue_as_their_runners(served: Any, runs: Runs) -> None:
    runs.coordinator()
    job_ids = submit_jobs(served, "sleep", {"seconds": 0.2}, n=8)
    pool_worker(runs, "node-1")
    pool_worker(runs, "node-2")
    wait_until(lambda: all_done(served, job_ids), 60, message="the pool drained the queue")
    holders = {status_of(served, job_id)["attempts"][0]["worker"] for job_id in job_ids}
    assert holders <= {"d1/node-1", "d1/node-2"} and holders, holders
    for job_id in job_ids:
        assert [a["outcome"] for a in status_of(served, job_id)["attempts"]] == ["done"]


def test_a_dispatch_token_without_a_runner_is_refused_in_one_line(served: Any, runs: Runs) -> None:
    proc = pool_worker(runs, None)
    assert proc.wait(timeout=60) != 0
    log = runs.log("worker-None")
    assert "runner" in log and "Traceback" not in log, log


def test_a_bad_runner_name_is_a_usage_error(runs: Runs, tmp_path: Path) -> None:
    ran = run_spool("worker", *runs._remote(), "--runner", "a/b", spool=tmp_path)
    assert ran.returncode == 2 and "--runner 'a/b'" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    ran = run_spool("worker", "--runner", "x", spool=tmp_path)
    assert ran.returncode == 2 and "go with --server" in ran.stderr, ran.stderr
