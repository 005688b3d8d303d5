"""An engine that fails to answer (a down slurmctld, an API server's 500) does not stop `spool
dispatch`: the dispatcher, in this process against a real ``spool serve``, hands jobs to a real
local engine whose first submits and polls raise, says so once, and still drains the queue, one
attempt and one result per job."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.base.errors import UsageError
from spool.runner.dispatch.dispatcher import Dispatcher
from spool.runner.dispatch.engine import Engine, EngineJob, RunOne, Verdict, open_engine
from spool.runner.remote.client import ApiClient
from support import wait_until


class Flaky:
    """A real engine whose every submit and poll raises for its first ``down_seconds``, as an
    engine that is down would; ``raised`` counts them."""

    def __init__(self, engine: Engine, down_seconds: float) -> None:
        self.engine, self.down_until, self.raised = engine, time.monotonic() + down_seconds, 0

    def _down(self, what: str) -> None:
        if time.monotonic() < self.down_until:
            self.raised += 1
            raise UsageError(f"{what}: error: slurm_persist_conn_open: the controller does not answer")

    def submit(self, runner: str, job_id: str) -> EngineJob:
        self._down("sbatch")
        return self.engine.submit(runner, job_id)

    def poll(self, job: EngineJob) -> Verdict:
        self._down("squeue")
        return self.engine.poll(job)

    def __getattr__(self, name: str) -> Any:  # cancel, forget, adopt, stop: the real engine's
        return getattr(self.engine, name)


def test_an_engine_that_raises_is_said_once_and_the_queue_still_drains(
    served: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Spool(served.root, environ={}) as sp:
        job_ids = [sp.submit("echo", {"n": n}) for n in range(4)]
    token = served.token("d1", "dispatch")
    run_one = RunOne(served.url, (sys.executable, "-P", "-m", "spool.cli"), str(served.cacert), ("examples.tasks",))
    engine = Flaky(
        open_engine("local", run_one, token, "flaky", {"state_dir": str(tmp_path / "engine")}), down_seconds=1.5
    )
    client = ApiClient(served.url, token, str(served.cacert))
    dispatcher = Dispatcher(client, engine, tasks=["echo"], max_inflight=2)

    def done() -> bool:
        with Spool(served.root, environ={}) as sp:
            return all(sp.status(job_id)["state"] == "done" for job_id in job_ids)

    def stop_when_done() -> None:
        try:
            wait_until(done, 90, message="4 jobs done through a flaky engine")
            wait_until(lambda: not dispatcher.inflight, 30, message="every engine job seen to end")
        finally:
            dispatcher._on_signal(signal.SIGTERM, None)

    watcher = threading.Thread(target=stop_when_done, daemon=True)
    watcher.start()
    with caplog.at_level(logging.INFO, logger="spool.dispatch"):
        assert dispatcher.run() == 0  # the engine's errors did not end it
    watcher.join(5)
    said = [r.getMessage() for r in caplog.records if r.name == "spool.dispatch"]
    assert engine.raised >= 2  # the outage was met more than once (the backoff retries)...
    assert sum("the engine failed" in line for line in said) == 1, said  # ... and said once
    assert sum("the engine answers again" in line for line in said) == 1, said
    with Spool(served.root, environ={}) as sp:
        for n, job_id in enumerate(job_ids):
            status = sp.status(job_id)
            assert status["attempt"] == 1 and len(status["attempts"]) == 1, status
            assert sp.result(job_id)["args"] == {"n": n}
