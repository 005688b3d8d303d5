"""A remote worker counts as alive while the server hears from it within the lease term, with the
tasks it asked for: ``spool stats`` lists it so, and the coordinator calls none of its tasks
unhandled. It gets no lock here, so a server restart expires none of its leases. Real processes:
``spool serve`` (``served``), ``spool worker --server``, ``spool coordinator``, ``spool stats``."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.disk.layout import State
from spool.views.stats import collect
from support import run_spool, wait_until
from test_remote import LEASE_SECONDS, Processes, _done, _holder, _wait_running

CONTROL_TASK = "zz_nobody_handles"  # sorts after "sleep": the coordinator warns about tasks in order
UNHANDLED = "no live worker handles task"


@pytest.fixture
def processes(served: Any, tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "remote-logs"
    logs.mkdir()
    started = Processes(served, logs)
    try:
        yield started
    finally:
        started.kill_all()


def _worker(served: Any, name: str) -> dict[str, Any] | None:
    """``name``'s entry in ``spool stats --json``, or None when it is not listed."""
    done = run_spool("--json", "stats", spool=served.root)
    assert done.returncode == 0, done.stderr
    return next((w for w in json.loads(done.stdout)["workers"] if w["name"] == name), None)


def _alive(served: Any, name: str) -> dict[str, Any] | None:
    worker = _worker(served, name)
    return worker if worker is not None and worker["alive"] else None


def _coordinator(processes: Processes, lease_seconds: str) -> None:
    root = str(processes.served.root)
    processes.start("coordinator", "--spool", root, "--lease-seconds", lease_seconds, "coordinator")

    def published() -> bool:
        with Spool(processes.served.root, environ={}) as sp:
            term = sp.ledger.meta("lease_seconds")
        return term is not None and float(term) == float(lease_seconds)

    wait_until(published, 30, message="the term published")


def test_a_busy_remote_worker_is_alive_and_its_waiting_task_is_not_called_unhandled(
    served: Any, processes: Processes
) -> None:
    # A 1.5 s term: the record must stay fresh within it; the unhandled check every second.
    processes.coordinator("--reconcile-seconds", "1", "--unhandled-grace-seconds", "1")
    with Spool(served.root, environ={}) as sp:
        busy = sp.submit("sleep", {"seconds": 30.0}, max_tries=1)  # outlasts two checks
    worker = processes.remote("remote-a")
    _wait_running(processes, "remote-a", busy, 1)
    with Spool(served.root, environ={}) as sp:
        waiting = sp.submit("sleep", {"seconds": 0.1})  # waits: the only worker is busy
        sp.submit(CONTROL_TASK, {})  # nobody handles it: proves the coordinator's check ran
    seen = _alive(served, "remote-a")
    assert seen is not None and seen["remote"] is True and "sleep" in seen["tasks"] and "echo" in seen["tasks"]
    # The coordinator checks every few seconds; past its grace, one check warns about the control
    # task; a warning about
    # "sleep" would come in that same check, before it (tasks in order).
    wait_until(lambda: f"{UNHANDLED} {CONTROL_TASK!r}" in processes.log("coordinator"), 30, message="the control")
    assert f"{UNHANDLED} 'sleep'" not in processes.log("coordinator")
    with Spool(served.root, environ={}) as sp:
        assert sp.state(waiting) is State.PENDING, "the sleep job waited all along"
        assert collect(sp)["unhandled_tasks"] == {CONTROL_TASK: 1}
    status = run_spool("--json", "status", waiting, spool=served.root)
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["handled_by"] == ["remote-a"] and "warning" not in view, view  # spool status agrees
    stats = _alive(served, "remote-a")  # a whole term later (the grace is longer): still alive
    assert stats is not None and "sleep" in stats["tasks"]

    worker.send_signal(signal.SIGKILL)  # the worker alone: its attempt child dies with it
    worker.wait()
    gone = wait_until(lambda: (w := _worker(served, "remote-a")) and not w["alive"] and w, 30, message="not alive")
    assert isinstance(gone, dict) and gone["remote"] is True  # still listed as seen, not alive
    wait_until(lambda: f"{UNHANDLED} 'sleep'" in processes.log("coordinator"), 30, message="sleep unhandled now")


def test_a_server_restart_expires_no_remote_lease(served: Any, processes: Processes) -> None:
    _coordinator(processes, "10")  # a term longer than the restart takes, so only a lock could expire it
    with Spool(served.root, environ={}) as sp:
        job_id = sp.submit("sleep", {"seconds": 6.0}, max_tries=3)
    processes.remote("remote-a")
    _wait_running(processes, "remote-a", job_id, 1)
    assert _alive(served, "remote-a") is not None
    served.kill()
    served.start(served.port)  # the same spool, the same port
    assert _holder(served, job_id) == "remote-a", "the lease outlived the restart"
    wait_until(lambda: _done(served, [job_id]), 30, message="the job done after the restart")
    with Spool(served.root, environ={}) as sp:
        attempts = sp.status(job_id)["attempts"]
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in attempts] == [(1, "remote-a", "done")]
    assert f"expire {job_id}" not in processes.log("coordinator"), processes.log("coordinator")
    assert _alive(served, "remote-a") is not None, "heard from again by the restarted server"


def test_an_idle_remote_worker_in_its_long_poll_stays_alive_and_the_dashboard_lists_it_remote(
    served: Any, processes: Processes
) -> None:
    from test_dashboard import Browser

    processes.coordinator()  # a 1.5 s term, shorter than one long-poll's wait
    processes.remote("remote-a")
    wait_until(lambda: _alive(served, "remote-a"), 30, message="remote-a alive")
    # Sampled across several terms: a long-poll's wait alone keeps it alive, no job needed.
    deadline = time.monotonic() + 3 * float(LEASE_SECONDS)
    while time.monotonic() < deadline:
        assert _alive(served, "remote-a") is not None, "alive while it waits for a job"
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))
    page = browser.get("/workers").body
    local = page[page.index('id="local-workers"') : page.index('id="remote-workers"')]
    remote = page[page.index('id="remote-workers"') :]
    assert "remote-a" not in local and "<td>remote-a</td>" in remote, page
