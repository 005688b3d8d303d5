"""Issue 21's "Done when", at its size (the slow tier: a minute each on two cores): 200 jobs
through ``spool dispatch --engine local`` and through ``--engine dask`` (a real scheduler and 2
workers on loopback) all done, one result each, every lease held by ``pool/<runner>``, and
``spool fsck`` clean after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dispatch_support import Runs, all_done, status_of, submit_jobs
from test_dispatch_dask import Cluster, workers_up

from support import ROOT, run_spool, wait_until

JOBS = 200
pytestmark = pytest.mark.slow


class PoolRuns(Runs):
    """``Runs`` with its dispatch token named ``pool``."""

    def __init__(self, served: Any, tmp: Path) -> None:
        super().__init__(served, tmp)
        self.token_file.write_text(served.token("pool", "dispatch"))


@pytest.fixture
def runs(served: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PoolRuns]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    started = PoolRuns(served, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def check_all_done(served: Any, job_ids: list[str]) -> None:
    wait_until(lambda: all_done(served, job_ids), 600, 0.2, f"all {JOBS} jobs done")
    for job_id in job_ids:
        attempts = status_of(served, job_id)["attempts"]
        assert [a["outcome"] for a in attempts] == ["done"], attempts
        assert attempts[0]["worker"].startswith("pool/"), attempts
    assert len(list((served.root / "results").iterdir())) == JOBS
    fsck = run_spool("fsck", spool=served.root)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_200_jobs_through_the_local_engine(served: Any, runs: PoolRuns) -> None:
    runs.coordinator()
    job_ids = submit_jobs(served, "echo", {"n": 1}, n=JOBS)
    runs.dispatcher("--max-inflight", "8")
    check_all_done(served, job_ids)


def test_200_jobs_through_a_dask_cluster(served: Any, runs: PoolRuns, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    cluster = Cluster(tmp_path)
    try:
        cluster.worker("w1")
        cluster.worker("w2")
        wait_until(lambda: workers_up(cluster, 2), 60, message="two Dask workers registered")
        runs.coordinator()
        job_ids = submit_jobs(served, "echo", {"n": 1}, n=JOBS)
        args = ["dispatch", *runs._remote(), "--engine", "dask", "--engine-opt", f"scheduler={cluster.address}"]
        runs.start(
            "dispatch",
            *args,
            "--engine-opt",
            f"state_dir={runs.state}",
            "--import",
            "examples.tasks",
            "--max-inflight",
            "8",
        )
        check_all_done(served, job_ids)
    finally:
        cluster.kill_all()
