"""The first look at ``spool serve``: it answers over verified HTTPS, and a submitted job can be read
back by its id."""

from __future__ import annotations

from typing import Any


def test_healthz_is_anonymous_and_a_submit_reads_back(served: Any) -> None:
    assert served.call("GET", "/healthz").json == {"ok": True, "coordinator": False}  # none runs here
    token = served.token("producer", "submit")
    created = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "args": {"n": 1}})
    assert created.status == 201, created
    job_id = created.json["id"]
    assert created.json["state"] == "pending" and created.json["task"] == "echo"
    read = served.call("GET", f"/v1/jobs/{job_id}", token=token)
    assert read.status == 200 and read.json["id"] == job_id and read.json["state"] == "pending"
    assert (served.root / "pending" / f"{job_id}.yaml").exists()
