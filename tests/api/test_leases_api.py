"""The work endpoints over real HTTPS (``served``: a real ``spool serve`` with a verified certificate).

Leases are taken, beaten, completed and failed by plain HTTPS calls here, as a remote worker
makes them; the job files on disk say what happened.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from spool import Spool
from spool.disk.layout import State
from spool.moves.transitions import expire


def _lease(served: Any, token: str, *, tasks: list[str] | None = None, wait: float = 5.0) -> dict[str, Any]:
    reply = served.call("POST", "/v1/leases", token=token, json={"tasks": tasks or ["echo"], "wait": wait})
    assert reply.status == 200, reply
    return reply.json["lease"]


def _state(served: Any, job_id: str) -> State | None:
    with Spool(served.root, environ={}) as sp:
        return sp.state(job_id)


def _submit(served: Any, task: str = "echo", **fields: Any) -> str:
    with Spool(served.root, environ={}) as sp:
        return sp.submit(task, fields.pop("args", {}), **fields)


def test_a_lease_names_its_holder_fence_and_heartbeat(served: Any) -> None:
    work = served.token("remote-a", "work")
    job_id = _submit(served, args={"n": 1})
    lease = _lease(served, work)
    assert lease["id"] == job_id and lease["attempt"] == 1 and lease["task"] == "echo"
    assert lease["args"] == {"n": 1} and lease["worker"] == "remote-a"
    assert lease["fence"].startswith("1-") and 0 < lease["heartbeat_seconds"] <= lease["lease_seconds"] / 3 + 1e-9
    with Spool(served.root, environ={}) as sp:
        state, job_file = sp.job(job_id)
    assert state is State.LEASED and job_file.lease is not None and job_file.lease.worker == "remote-a"
    beat = served.call(
        "POST", f"/v1/leases/{job_id}/heartbeat", token=work, json={"fence": lease["fence"], "counter": 1}
    )
    assert beat.status == 200 and beat.json == {"cancel": False, "heartbeat_seconds": lease["heartbeat_seconds"]}
    done = served.call(
        "POST", f"/v1/leases/{job_id}/complete", token=work, json={"fence": lease["fence"], "result": {"ok": 1}}
    )
    assert done.status == 200 and done.json["state"] == "done"
    with Spool(served.root, environ={}) as sp:
        assert sp.result(job_id) == {"ok": 1}


def test_only_a_work_or_admin_token_leases(served: Any) -> None:
    submit = served.token("submitter", "submit")
    assert served.call("POST", "/v1/leases", json={"tasks": ["echo"]}).status == 401
    assert served.call("POST", "/v1/leases", token="not-a-token", json={"tasks": ["echo"]}).status == 401
    assert served.call("POST", "/v1/leases", token=submit, json={"tasks": ["echo"]}).status == 403


def test_a_long_poll_answers_204_when_its_wait_runs_out(served: Any) -> None:
    work = served.token("remote-a", "work")
    started = time.monotonic()
    reply = served.call("POST", "/v1/leases", token=work, json={"tasks": ["echo"], "wait": 0.5})
    elapsed = time.monotonic() - started
    assert reply.status == 204
    assert 0.5 <= elapsed < 5.0


def test_a_submit_during_a_long_poll_is_handed_out_at_once(served: Any) -> None:
    work = served.token("remote-a", "work")
    answered: dict[str, Any] = {}

    def poll() -> None:
        answered["reply"] = served.call("POST", "/v1/leases", token=work, json={"tasks": ["echo"], "wait": 20})
        answered["at"] = time.monotonic()

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)  # let the poll reach its wait: the point is a job landing *during* it
    job_id = _submit(served)
    submitted = time.monotonic()
    waiter.join(25)
    assert answered["reply"].status == 200 and answered["reply"].json["lease"]["id"] == job_id
    # Woken by the watch of pending/, not a poll: well under the watch's fallback poll (2 s).
    assert answered["at"] - submitted < 0.5


def test_a_stale_fence_is_refused_with_409_and_the_reason(served: Any) -> None:
    work = served.token("remote-a", "work")
    job_id = _submit(served, max_tries=3)
    lease = _lease(served, work)
    with Spool(served.root, environ={}) as sp:
        assert expire(sp, job_id, lease["attempt"], "test: the term ran out") is State.PENDING
    for step, body in (
        ("heartbeat", {}),
        ("complete", {"result": 1}),
        ("fail", {"error": "late"}),
        ("release", {}),
    ):
        reply = served.call("POST", f"/v1/leases/{job_id}/{step}", token=work, json={"fence": lease["fence"], **body})
        assert reply.status == 409, (step, reply)
        assert "lease lost" in reply.json["error"] and "pending" in reply.json["error"]
    made_up = served.call(
        "POST", f"/v1/leases/{job_id}/complete", token=work, json={"fence": "1-0123456789abcdef", "result": 1}
    )
    assert made_up.status == 409
    assert _state(served, job_id) is State.PENDING
    assert not (served.root / "results" / f"{job_id}.json").exists()


def test_a_work_token_cannot_touch_another_workers_lease(served: Any) -> None:
    mine = served.token("remote-a", "work")
    other = served.token("remote-b", "work")
    job_id = _submit(served)
    lease = _lease(served, mine)
    for step, body in (
        ("complete", {"result": "stolen"}),
        ("fail", {"error": "x"}),
        ("heartbeat", {}),
        ("release", {}),
    ):
        reply = served.call("POST", f"/v1/leases/{job_id}/{step}", token=other, json={"fence": lease["fence"], **body})
        assert reply.status == 403, (step, reply)
    assert _state(served, job_id) is State.LEASED
    done = served.call("POST", f"/v1/leases/{job_id}/complete", token=mine, json={"fence": lease["fence"], "result": 7})
    assert done.status == 200
    with Spool(served.root, environ={}) as sp:
        assert sp.result(job_id) == 7


def test_fail_retries_or_buries_and_reject_ends_it(served: Any) -> None:
    work = served.token("remote-a", "work")
    retried = _submit(served, max_tries=2)
    lease = _lease(served, work)
    reply = served.call(
        "POST", f"/v1/leases/{retried}/fail", token=work, json={"fence": lease["fence"], "error": "boom"}
    )
    assert reply.status == 200 and reply.json["state"] == "pending"
    rejected = _submit(served, task="reject", max_tries=3)
    lease = _lease(served, work, tasks=["reject"])
    reply = served.call(
        "POST", f"/v1/leases/{rejected}/fail", token=work, json={"fence": lease["fence"], "error": "no", "reject": True}
    )
    assert reply.status == 200 and reply.json["state"] == "dead"
    with Spool(served.root, environ={}) as sp:
        assert sp.status(rejected)["reason"] == "failed"


def test_release_gives_the_try_back(served: Any) -> None:
    work = served.token("remote-a", "work")
    job_id = _submit(served, max_tries=1)
    lease = _lease(served, work)
    reply = served.call("POST", f"/v1/leases/{job_id}/release", token=work, json={"fence": lease["fence"]})
    assert reply.status == 200
    with Spool(served.root, environ={}) as sp:
        state, job_file = sp.job(job_id)
    assert state is State.PENDING and job_file.tries == 0
    again = _lease(served, work)  # still runnable: its only try was given back
    assert again["id"] == job_id and again["attempt"] == 2


def test_a_cancel_request_reaches_the_remote_worker_at_its_heartbeat(served: Any) -> None:
    work = served.token("remote-a", "work")
    job_id = _submit(served)
    lease = _lease(served, work)
    with Spool(served.root, environ={}) as sp:
        sp.cancel(job_id)  # a leased job: a request its worker acts on
    beat = served.call("POST", f"/v1/leases/{job_id}/heartbeat", token=work, json={"fence": lease["fence"]})
    assert beat.status == 200 and beat.json["cancel"] is True
    reply = served.call(
        "POST", f"/v1/leases/{job_id}/fail", token=work, json={"fence": lease["fence"], "error": "killed"}
    )
    assert reply.status == 200 and reply.json == {"id": job_id, "state": "dead", "reason": "cancelled"}
    with Spool(served.root, environ={}) as sp:
        assert sp.status(job_id)["reason"] == "cancelled"


def test_hostile_lease_requests_are_refused_saying_where(served: Any) -> None:
    work = served.token("remote-a", "work")
    job_id = _submit(served)
    cases: list[tuple[str, dict[str, Any] | None, bytes | None, int, str]] = [
        ("/v1/leases", {"tasks": "echo"}, None, 422, "body.tasks"),
        ("/v1/leases", {"tasks": ["../etc"]}, None, 422, "body.tasks[0]"),
        ("/v1/leases", {"tasks": ["echo"], "wait": 3600}, None, 422, "body.wait"),
        ("/v1/leases", {"tasks": ["echo"], "holder": "remote-b"}, None, 422, "body.holder"),
        ("/v1/leases", None, b"{not json", 400, "body line 1 column 2"),
        ("/v1/leases/a.b/complete", {"fence": "1-x", "result": 1}, None, 422, "path.id"),
        (f"/v1/leases/{job_id}/complete", {"result": 1}, None, 422, "body.fence"),
        (f"/v1/leases/{job_id}/heartbeat", {"fence": "1-x"}, None, 409, "body.fence"),
    ]
    for path, body, raw, status, where in cases:
        reply = served.call("POST", path, token=work, json=body, body=raw)
        assert reply.status == status, (path, body, raw, reply)
        assert reply.json["where"] == where, (path, reply.json)
    assert _state(served, job_id) is State.PENDING  # nothing was touched
    lease = _lease(served, work)
    for progress, where in (
        ({"fraction": 2}, "body.progress.fraction"),
        ({"message": 5}, "body.progress.message"),
        ({"eta": 1}, "body.progress.eta"),
        ([0.5], "body.progress"),
    ):
        body = {"fence": lease["fence"], "progress": progress}
        reply = served.call("POST", f"/v1/leases/{job_id}/heartbeat", token=work, json=body)
        assert reply.status == 422 and reply.json["where"] == where, (progress, reply)
    fine = {"fence": lease["fence"], "progress": {"fraction": 0.5, "message": "half"}}
    assert served.call("POST", f"/v1/leases/{job_id}/heartbeat", token=work, json=fine).status == 200


def test_a_result_over_max_result_bytes_is_refused_and_the_lease_holds(served: Any) -> None:
    work = served.token("remote-a", "work")
    job_id = _submit(served)
    lease = _lease(served, work)
    with Spool(served.root, environ={}) as sp:
        cap = sp.settings.max_result_bytes
    big = "x" * (cap + 10)
    reply = served.call(
        "POST", f"/v1/leases/{job_id}/complete", token=work, json={"fence": lease["fence"], "result": big}
    )
    assert reply.status == 413 and reply.json["where"] in ("body", "body.result")
    assert _state(served, job_id) is State.LEASED
    assert not (served.root / "results" / f"{job_id}.json").exists()
    ok = served.call("POST", f"/v1/leases/{job_id}/complete", token=work, json={"fence": lease["fence"], "result": 1})
    assert ok.status == 200
