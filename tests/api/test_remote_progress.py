"""A remote worker's handler reports progress: it rides on the API's heartbeat into the lease's
heartbeat file, where `GET /v1/jobs/{id}` (and `spool status`, the dashboard) read it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from spool import Spool, task
from spool.progress import progress
from support import ROOT, wait_until
from test_remote import Processes

HERE = Path(__file__).resolve().parent


@task("remote_progress")
def remote_progress(release: str) -> dict[str, bool]:
    """Report progress, then wait (at most a minute) until the test creates ``release``."""
    progress(0.42, "page 42 of 100")
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"released": os.path.exists(release)}


def test_a_remote_handlers_progress_reaches_the_jobs_status(served: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)]))
    release = tmp_path / "release"
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        with Spool(served.root, environ={}) as sp:
            job_id = sp.submit("remote_progress", {"release": str(release)})
        token = served.token("remote-p", "work")
        argv = ["worker", "--server", served.url, "--token", token, "--cacert", str(served.cacert)]
        processes.start("remote-p", *argv, "--import", "test_remote_progress")
        reader = served.token("reader", "submit")
        shown = wait_until(
            lambda: (got := served.call("GET", f"/v1/jobs/{job_id}", token=reader).json).get("progress") and got,
            30,
            message="the remote handler's progress in the job's status",
        )
        assert shown["state"] == "leased"
        assert shown["progress"] == {"fraction": 0.42, "message": "page 42 of 100"}
        release.touch()
        wait_until(lambda: (served.root / "done" / f"{job_id}.yaml").exists(), 30, message="the job done")
        assert served.call("GET", f"/v1/jobs/{job_id}", token=reader).json["progress"] is None
    finally:
        processes.kill_all()
