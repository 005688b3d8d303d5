"""A real ``spool serve`` SIGKILLed at each of its crash points (``SPOOL_CRASH_AT=serve:...``): the
client is told nothing, the spool holds zero or one job, fsck --repair leaves every promise true,
and the client's retry of the same key, at a restarted server, answers with the one job."""

from __future__ import annotations

import http.client
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from spool import Spool

from spool.base import crash
from spool.fsck import fsck
from support import run_spool

SUBMIT_POINTS = ["serve:after-key-check", "serve:after-key", "serve:after-commit", "serve:after-submit"]
COMMITTED = ("serve:after-commit", "serve:after-submit")


def _jobs(root: Path) -> list[str]:
    return sorted(
        p.name
        for state in ("pending", "waiting", "leased", "done", "dead")
        for p in (root / state).iterdir()
        if not p.name.startswith(".")
    )


def _killed(served: Any, method: str, path: str, token: str, json: Any = None) -> None:
    """The request kills the server before it answers: the client hears no status."""
    with pytest.raises((OSError, http.client.HTTPException)):
        served.call(method, path, token=token, json=json)
    assert served.proc.wait(timeout=30) == -signal.SIGKILL


def _restart_unarmed(served: Any) -> None:
    served.env = {}
    served.restart()


def _repaired_and_clean(served: Any) -> None:
    """fsck --repair, then a clean fsck, with no server running: a live one's own atomic write in
    tmp/ (its sampler, a worker's record) would be "in progress", rightly."""
    served.kill()
    with Spool(served.root, environ={}) as sp:
        assert fsck(sp, repair=True).ok
        report = fsck(sp)
        assert report.ok and not report.in_progress, report.violations + report.in_progress


def test_every_serve_point_is_crashed_here() -> None:
    listed = [point for point in crash.all_points() if point.startswith("serve:")]
    others = ["serve:bury-after-rename", "serve:requeue-after-rename", "serve:run-after-record"]
    completes = ["serve:after-result", "serve:complete-after-move"]  # tests/api/test_remote_results.py
    runners = [  # a runner's claim and its fence: tests/api/test_dispatch_crash.py
        "serve:claim-after-reserve",
        "serve:claim-after-heartbeat",
        "serve:claim-after-rename",
        "serve:after-claim",
        "serve:expire-after-rename",
        "serve:after-expire",
    ]
    assert sorted(listed) == sorted(SUBMIT_POINTS + others + completes + runners)


def test_a_dashboard_run_now_killed_after_its_record(serve_spool: Any) -> None:
    """The dashboard's "run now" dies once its job is durable and noted in the schedule's record
    (schedules/.hourly.fired): one job, the record names it, fsck clean."""
    from test_dashboard import Browser

    served = serve_spool(env={"SPOOL_CRASH_AT": "serve:run-after-record"})
    added = run_spool("schedule", "add", "hourly", "echo", "--every", "1h", spool=served.root)
    assert added.returncode == 0, added.stderr
    browser = Browser(served)
    browser.login(served.token("ops", "admin"))
    csrf = browser.csrf("/schedules")
    with pytest.raises((OSError, http.client.HTTPException)):
        browser.post("/schedules/hourly/run", {"csrf": csrf})
    assert served.proc.wait(timeout=30) == -signal.SIGKILL
    (job,) = _jobs(served.root)
    listed = json.loads(run_spool("schedule", "list", "--json", spool=served.root).stdout)
    assert [v["last_job"] for v in listed] == [job[: -len(".yaml")]]
    _repaired_and_clean(served)


@pytest.mark.parametrize("point", SUBMIT_POINTS)
def test_a_submit_killed_at_each_point_then_retried(serve_spool: Any, point: str) -> None:
    served = serve_spool(env={"SPOOL_CRASH_AT": point})
    token = served.token("producer", "submit")
    spec = {"task": "echo", "key": "k-1", "args": {"n": 1}}
    _killed(served, "POST", "/v1/jobs", token, spec)
    after_crash = _jobs(served.root)
    assert len(after_crash) == (1 if point in COMMITTED else 0), after_crash
    _repaired_and_clean(served)
    _restart_unarmed(served)
    again = served.call("POST", "/v1/jobs", token=token, json=spec)
    assert again.status == (200 if point in COMMITTED else 201), again
    assert _jobs(served.root) == [f"{again.json['id']}.yaml"]
    assert served.call("POST", "/v1/jobs", token=token, json=spec).json["id"] == again.json["id"]
    _repaired_and_clean(served)


@pytest.mark.parametrize(
    ("point", "action", "state"),
    [
        ("serve:bury-after-rename", "cancel", "dead"),
        ("serve:requeue-after-rename", "requeue", "pending"),
    ],
)
def test_a_cancel_or_requeue_killed_after_its_rename_is_finished(
    serve_spool: Any, point: str, action: str, state: str
) -> None:
    served = serve_spool(env={"SPOOL_CRASH_AT": point})
    token = served.token("producer", "submit")
    job_id = served.call("POST", "/v1/jobs", token=token, json={"task": "echo"}).json["id"]
    if action == "requeue":
        assert served.call("POST", f"/v1/jobs/{job_id}/cancel", token=token).status == 200
    _killed(served, "POST", f"/v1/jobs/{job_id}/{action}", token)
    _repaired_and_clean(served)
    _restart_unarmed(served)
    assert served.call("GET", f"/v1/jobs/{job_id}", token=token).json["state"] == state
    assert _jobs(served.root) == [f"{job_id}.yaml"]
