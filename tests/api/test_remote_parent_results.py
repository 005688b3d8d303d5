"""Parents' results on a remote worker: the lease answer carries ``parent_results``, so its
child's ``current().parent_results()`` and a shell job's ``SPOOL_PARENT_RESULTS`` file (in the
worker's $TMPDIR, gone after the attempt) see what a local worker's would; a job without parents
gets ``{}``; past the server's ``max_parent_results_bytes`` the server ends the child rejected
before handing it out, and the worker goes on with the next job."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from support import ROOT, wait_until
from test_remote import Processes

PARENT_TASKS = ("--import", "parent_tasks")  # tests/parent_tasks.py


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Remote workers import tests/parent_tasks.py; their $TMPDIR is a folder of the test's."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    scratch = tmp_path / "worker-tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    return scratch


def _finished(root: Path, job_id: str, state: str) -> dict[str, Any]:
    def there() -> dict[str, Any] | None:
        with Spool(root, environ={}) as sp:
            status = sp.status(job_id)
            row = sp.ledger.row(job_id)
        return status if status["state"] == state and row and row["state"] == state else None

    found = wait_until(there, 30, message=f"{job_id} {state}")
    assert isinstance(found, dict)
    return found


def _result(root: Path, job_id: str) -> Any:
    _finished(root, job_id, "done")
    with Spool(root, environ={}) as sp:
        return sp.result(job_id)


def test_a_remote_workers_python_and_shell_children_see_their_parents_results(
    served: Any, tmp_path: Path, importable: Path
) -> None:
    script = 'echo "$SPOOL_PARENT_RESULTS"; cat "$SPOOL_PARENT_RESULTS"'
    with Spool(served.root, environ={}) as sp:
        first = sp.submit("echo", {"n": 1})
        second = sp.submit("echo", {"word": "two"})
        child = sp.submit("parents", depends_on=[first, second])
        orphan = sp.submit("parents")
        shell_child = sp.submit("shell", {"argv": ["sh", "-c", script]}, depends_on=[first])
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        processes.coordinator()
        processes.remote("remote-p", *PARENT_TASKS, "--allow-shell")
        parents = {first: _result(served.root, first), second: _result(served.root, second)}
        assert _result(served.root, child) == {"parents": parents, "fresh_copy": True}
        assert _result(served.root, orphan) == {"parents": {}, "fresh_copy": True}
        shell = _result(served.root, shell_child)
        assert shell["exit"] == 0, shell
        path, text = shell["output"].split("\n", 1)
        assert json.loads(text) == {first: parents[first]}
        assert Path(path).parent == importable and not Path(path).exists()  # $TMPDIR, removed after
    finally:
        processes.kill_all()


def test_past_the_servers_cap_the_child_ends_rejected_and_the_remote_worker_goes_on(
    serve_spool: Any, tmp_path: Path, importable: Path
) -> None:
    served = serve_spool(env={"SPOOL_MAX_PARENT_RESULTS_BYTES": "400"})
    with Spool(served.root, environ={}) as sp:
        big = sp.submit("echo", {"text": "x" * 300})
        small = sp.submit("echo", {"text": "y" * 100})
        child = sp.submit("parents", depends_on=[big, small], max_tries=3)
        after = sp.submit("parents", depends_on=[small])  # under the cap: runs
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        processes.coordinator()
        processes.remote("remote-c", *PARENT_TASKS)
        status = _finished(served.root, child, "dead")
        assert "over max_parent_results_bytes (400)" in status["error"], status
        assert big in status["error"] and small in status["error"], status
        assert [(a["attempt"], a["outcome"]) for a in status["attempts"]] == [(1, "rejected")]
        assert _result(served.root, after) == {"parents": {small: _result(served.root, small)}, "fresh_copy": True}
        assert "ends before it is handed out" in served.log()
    finally:
        processes.kill_all()
