"""Issue 17, finding 3, over the real HTTP API: a ``schedule:`` key is the schedules' own, so a
submit token (or any other) can't plant one for a slot; the refusal is a 422 saying where."""

from __future__ import annotations

import os
from typing import Any


def test_a_schedule_key_is_refused_with_422_and_nothing_is_written(served: Any) -> None:
    token = served.token("s-1", "submit")
    admin = served.token("a-1", "admin")
    for who in (token, admin):
        answer = served.call(
            "POST", "/v1/jobs", token=who, json={"task": "echo", "key": "schedule:tick@2099-01-01T00:00:00.000Z"}
        )
        assert answer.status == 422, answer
        assert answer.json["where"] == "body.key" and "reserved" in answer.json["error"], answer.json
    assert os.listdir(served.root / "pending") == [] and os.listdir(served.root / "keys") == []
    fine = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": "schedules-are-fine"})
    assert fine.status == 201, fine
