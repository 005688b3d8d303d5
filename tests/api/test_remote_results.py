"""A remote worker's outcome as the server records it: a result the server would refuse fails the
attempt at once, with the local worker's words; a complete whose answer was lost (the server
killed between saving the result and answering) is the worker's own win, logged as one."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from spool import Spool, task
from support import ROOT, run_spool, wait_until
from test_remote import Processes

HERE = Path(__file__).resolve().parent


@task("lone_surrogate")
def lone_surrogate() -> dict[str, str]:
    """A value Python encodes as JSON, but whose text is no Unicode: the API refuses it (400)."""
    return {"s": "\ud800"}


def _attempts(root: Path, job_id: str) -> list[tuple[int, str, str | None]]:
    with Spool(root, environ={}) as sp:
        return [(a["attempt"], a["outcome"], a["error"]) for a in sp.status(job_id)["attempts"]]


@pytest.fixture
def importable(monkeypatch: Any) -> None:
    """Workers (and their attempt children) import this module's tasks."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)]))


def test_a_result_the_server_refuses_fails_the_remote_attempt_as_a_local_worker_does(
    served: Any, tmp_path: Path, importable: None
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        with Spool(served.root, environ={}) as sp:
            job_id = sp.submit("lone_surrogate", {}, max_tries=1)
        processes.remote("remote-s", "--import", "test_remote_results")
        wait_until(lambda: (served.root / "dead" / f"{job_id}.yaml").exists(), 20, message="the job failed")
        with Spool(served.root, environ={}) as sp:
            status = sp.status(job_id)
        assert status["reason"] == "failed", status
        (remote_attempt,) = _attempts(served.root, job_id)  # one try
        assert "dropped" not in processes.log("remote-s")
    finally:
        processes.kill_all()

    # The local worker, on a spool of its own, fails it the same way, in the same words.
    local = tmp_path / "local"
    assert run_spool("init", spool=local).returncode == 0
    local_id = run_spool("submit", "lone_surrogate", "--max-tries", "1", spool=local).stdout.strip()
    ran = run_spool("worker", "--burst", "--import", "test_remote_results", spool=local, timeout=60)
    assert ran.returncode == 0, ran.stderr
    local_attempts = _attempts(local, local_id)
    assert [(n, outcome) for n, outcome, _ in local_attempts] == [(1, "failed")]
    assert local_attempts == [remote_attempt], (local_attempts, remote_attempt)
    error = remote_attempt[2]
    assert error is not None and "a string holds a lone surrogate \\ud800, which is not Unicode text" in error


@pytest.mark.parametrize("point", ["serve:after-result", "serve:complete-after-move"])
def test_a_complete_saved_before_the_server_died_is_the_remote_workers_own_win(
    serve_spool: Any, tmp_path: Path, point: str
) -> None:
    served = serve_spool(env={"SPOOL_CRASH_AT": point})
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        with Spool(served.root, environ={}) as sp:
            job_id = sp.submit("echo", {"n": 1})
        processes.remote("remote-w")
        assert served.proc.wait(timeout=30) == -signal.SIGKILL  # killed after saving, before answering
        assert (served.root / "results" / f"{job_id}.json").exists()
        served.env = {}
        served.restart()  # the same port: the worker's retried complete reaches it
        processes.coordinator()  # finishes a move the crash left half done
        said = f"complete {job_id} attempt=1 -> done"
        wait_until(lambda: said in processes.log("remote-w"), 20, message="the worker's retry answered")
        wait_until(lambda: (served.root / "done" / f"{job_id}.yaml").exists(), 20, message="the job in done/")
        log = processes.log("remote-w")
        assert "dropped" not in log, log
        assert _attempts(served.root, job_id) == [(1, "done", None)]  # done once, by this attempt
        with Spool(served.root, environ={}) as sp:
            assert sp.result(job_id)["args"] == {"n": 1}
    finally:
        processes.kill_all()


def test_a_409_names_the_jobs_state_and_the_attempt_whose_result_it_holds(served: Any) -> None:
    work = served.token("remote-x", "work")
    with Spool(served.root, environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
    lease = served.call("POST", "/v1/leases", token=work, json={"tasks": ["echo"]}).json["lease"]
    body = {"fence": lease["fence"], "result": {"n": 1}}
    assert served.call("POST", f"/v1/leases/{job_id}/complete", token=work, json=body).status == 200
    again = served.call("POST", f"/v1/leases/{job_id}/complete", token=work, json=body)  # an answer lost
    assert again.status == 409 and again.json["state"] == "done" and again.json["attempt"] == 1, again
    assert again.json["same_result"] is True and "done already, with the result of attempt 1" in again.json["error"]
    other = served.call("POST", f"/v1/leases/{job_id}/complete", token=work, json={**body, "result": {"n": 2}})
    assert other.status == 409 and other.json["same_result"] is False and "done already" not in other.json["error"]
    guess = served.call(
        "POST", f"/v1/leases/{job_id}/complete", token=served.token("remote-y", "work"), json=body
    )  # another worker learns the state, never whether a guess is the job's result
    assert guess.status == 409 and guess.json["state"] == "done" and "same_result" not in guess.json, guess
    stale = served.call("POST", f"/v1/leases/{job_id}/fail", token=work, json={"fence": "7-0123456789abcdef"})
    assert stale.status == 409 and (stale.json["state"], stale.json["attempt"]) == ("done", 1), stale


def test_a_result_over_the_servers_cap_fails_the_remote_attempt_in_one_try(serve_spool: Any, tmp_path: Path) -> None:
    served = serve_spool(config="max_result_bytes: 1000\n")  # the worker's own cap is the default 1 MiB
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        with Spool(served.root, environ={}) as sp:
            job_id = sp.submit("echo", {"pad": "x" * 2000}, max_tries=1)
        processes.remote("remote-big")
        wait_until(lambda: (served.root / "dead" / f"{job_id}.yaml").exists(), 20, message="the job failed")
        ((attempt, outcome, error),) = _attempts(served.root, job_id)
        assert (attempt, outcome) == (1, "failed") and error is not None
        assert error.startswith("result refused: the result is ") and "over max_result_bytes (1000)" in error
        assert "dropped" not in processes.log("remote-big")
    finally:
        processes.kill_all()
