"""Queues over real HTTPS: a submit's ``queue``, a job's ``queue`` and ``held_by``, ``?queue=``,
``GET /v1/queues`` and an admin's ``POST /v1/queues/{name}``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spool import Spool
from spool.moves.transitions import claim
from spool.runner.api.queues import bounded
from support import run_spool


def queue_cli(root: Path, *args: str) -> Any:
    ran = run_spool("queue", *args, spool=root)
    assert ran.returncode == 0, ran.stderr
    return ran


def test_a_submit_names_its_queue_and_a_held_job_says_which_limit_holds_it(served: Any) -> None:
    producer = served.token("producer", "submit")
    queue_cli(served.root, "pause", "email")
    held = served.call("POST", "/v1/jobs", token=producer, json={"task": "echo", "queue": "email"})
    assert held.status == 201 and held.json["queue"] == "email"
    assert "queue: email" in (served.root / "pending" / f"{held.json['id']}.yaml").read_text()
    free = served.call("POST", "/v1/jobs", token=producer, json={"task": "echo"})
    assert free.json["queue"] == "default" and free.json["held_by"] is None
    got = served.call("GET", f"/v1/jobs/{held.json['id']}", token=producer)
    assert got.json["held_by"] == {"queue": "email", "limit": "paused", "text": "queue email is paused"}
    listed = served.call("GET", "/v1/jobs?queue=email", token=producer)
    assert [job["id"] for job in listed.json["jobs"]] == [held.json["id"]]
    queue_cli(served.root, "resume", "email")
    queue_cli(served.root, "set", "email", "--concurrency", "1")
    with Spool(served.root, environ={}) as sp:
        taken = claim(sp, "w", None, queues=["email"])
        assert taken is not None and taken.id == held.json["id"]
    second = served.call("POST", "/v1/jobs", token=producer, json={"task": "echo", "queue": "email"})
    assert second.json["held_by"]["limit"] == "concurrency"
    assert "concurrency 1 (1 leased)" in second.json["held_by"]["text"]


def test_a_bad_queue_in_a_submit_is_422_naming_the_field_and_writes_nothing(served: Any) -> None:
    producer = served.token("producer", "submit")
    for bad in ("a/b", "", 5, "x" * 65):
        refused = served.call("POST", "/v1/jobs", token=producer, json={"task": "echo", "queue": bad})
        assert refused.status == 422 and refused.json["where"] == "body.queue", (bad, refused.json)
    assert not list((served.root / "pending").iterdir())
    assert served.call("GET", "/v1/jobs?queue=email&colour=red", token=producer).status == 422


def test_get_queues_is_what_queue_list_json_prints_and_only_admin_sets(served: Any) -> None:
    reader, admin = served.token("reader", "work"), served.token("root", "admin")
    queue_cli(served.root, "set", "api", "--rate", "10/m")
    listed = served.call("GET", "/v1/queues", token=reader)
    assert listed.status == 200
    printed = json.loads(queue_cli(served.root, "list", "--json").stdout)
    assert listed.json["queues"] == printed and listed.json["truncated"] is False
    assert printed[0]["name"] == "api" and printed[0]["rate"] == "10/m"
    refused = served.call("POST", "/v1/queues/api", token=reader, json={"paused": True})
    assert refused.status == 403
    paused = served.call("POST", "/v1/queues/api", token=admin, json={"paused": True, "concurrency": 3})
    assert paused.status == 200, paused.json
    assert paused.json["paused"] is True and paused.json["concurrency"] == 3 and paused.json["rate"] == "10/m"
    assert paused.json["held_by"]["limit"] == "paused"
    before = (served.root / "queues" / "api.yaml").read_text()
    for body, where in (
        ({"rate": "5/x"}, "body"),
        ({"concurrency": 0}, "body"),
        ({"concurrency": "2"}, "body.concurrency"),
        ({"colour": "red"}, "body.colour"),
        ({}, "body"),
    ):
        bad = served.call("POST", "/v1/queues/api", token=admin, json=body)
        assert bad.status == 422 and bad.json["where"] == where, (body, bad.json)
    assert served.call("POST", "/v1/queues/a.b", token=admin, json={"paused": True}).status == 422
    assert (served.root / "queues" / "api.yaml").read_text() == before
    cleared = served.call("POST", "/v1/queues/api", token=admin, json={"clear": True, "paused": False})
    assert cleared.json["concurrency"] is None and cleared.json["rate"] is None and cleared.json["held_by"] is None


def test_the_queue_list_is_bounded_keeping_limited_queues_then_the_busiest() -> None:
    def view(name: str, pending: int, paused: bool = False) -> dict[str, Any]:
        return {
            "name": name,
            "error": None,
            "paused": paused,
            "concurrency": None,
            "rate": None,
            "pending": pending,
            "leased": 0,
        }

    views = [view("a", 1), view("b", 9), view("c", 0, paused=True), view("d", 5)]
    assert [v["name"] for v in bounded(views, 2)] == ["b", "c"]
    assert bounded(views, 4) == views
