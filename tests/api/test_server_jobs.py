"""``/v1/jobs`` over real HTTPS: who may call, the answers a submit gets, the caps on what a client
sends, and the reads, pages, cancels and requeues of jobs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from support import fill_disk

JOB_BODY_CAP = 64 * 1024 + 16 * 1024  # max_job_bytes (default) + the JSON margin (runner.api.context)


def jobs_in(root: Path) -> list[str]:
    return sorted(
        p.name
        for state in ("pending", "waiting", "leased", "done", "dead")
        for p in (root / state).iterdir()
        if not p.name.startswith(".")
    )


# -- who may call -------------------------------------------------------------------------------


def test_no_token_or_a_bad_one_is_401_and_a_wrong_role_403(served: Any) -> None:
    bare = served.call("POST", "/v1/jobs", json={"task": "echo"})
    assert bare.status == 401 and bare.json["where"] == "header Authorization" and "Bearer" in bare.json["error"]
    assert bare.headers["www-authenticate"] == "Bearer"
    wrong = served.call("POST", "/v1/jobs", token="not-a-token", json={"task": "echo"})
    assert wrong.status == 401 and "unknown or revoked" in wrong.json["error"]
    basic = served.call("GET", "/v1/jobs", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status == 401
    worker = served.token("w-1", "work")
    refused = served.call("POST", "/v1/jobs", token=worker, json={"task": "echo"})
    assert refused.status == 403 and "'work'" in refused.json["error"]
    assert jobs_in(served.root) == []  # nothing refused was written
    admin = served.token("root", "admin")
    assert served.call("POST", "/v1/jobs", token=admin, json={"task": "echo"}).status == 201


def test_a_shell_job_needs_an_admin_token(served: Any) -> None:
    producer, admin = served.token("producer", "submit"), served.token("root", "admin")
    spec = {"task": "shell", "args": {"argv": ["true"]}}
    refused = served.call("POST", "/v1/jobs", token=producer, json=spec)
    assert refused.status == 403 and refused.json["where"] == "body.task" and "admin" in refused.json["error"]
    assert jobs_in(served.root) == []
    accepted = served.call("POST", "/v1/jobs", token=admin, json=spec)
    assert accepted.status == 201 and accepted.json["task"] == "shell"
    with Spool(served.root, environ={}) as sp:  # dead, then only admin may run it again
        sp.cancel(accepted.json["id"])
    job_id = accepted.json["id"]
    assert served.call("POST", f"/v1/jobs/{job_id}/requeue", token=producer).status == 403
    assert served.call("POST", f"/v1/jobs/{job_id}/requeue", token=admin).json == {"id": job_id, "state": "pending"}


# -- what a submit is told ----------------------------------------------------------------------


def test_201_then_200_for_the_same_key_with_the_same_id(served: Any) -> None:
    token = served.token("producer", "submit")
    spec = {"task": "echo", "args": {"n": 1}, "key": "invoice-7", "priority": 3, "max_tries": 2, "timeout": 60}
    first = served.call("POST", "/v1/jobs", token=token, json=spec)
    again = served.call("POST", "/v1/jobs", token=token, json=spec)
    assert (first.status, again.status) == (201, 200)
    assert first.json["id"] == again.json["id"] and again.json["key"] == "invoice-7"
    assert first.json["priority"] == 3 and first.json["max_tries"] == 2
    assert jobs_in(served.root) == [f"{first.json['id']}.yaml"]


def test_delay_and_depends_on_are_taken(served: Any) -> None:
    token = served.token("producer", "submit")
    parent = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "delay": 3600}).json
    assert parent["state"] == "pending" and parent["not_before"]
    child = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "depends_on": [parent["id"]]})
    assert child.status == 201 and child.json["state"] == "waiting" and child.json["depends_on"] == [parent["id"]]
    unknown = served.call(
        "POST", "/v1/jobs", token=token, json={"task": "echo", "depends_on": ["01JD0000000000000000000000"]}
    )
    assert unknown.status == 422 and unknown.json["where"] == "body.depends_on"


def test_429_with_retry_after_when_full_and_nothing_written(serve_spool: Any) -> None:
    served = serve_spool(config="max_pending: 2\n")
    token = served.token("producer", "submit")
    ids = [
        served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": f"k{n}"}).json["id"] for n in (1, 2)
    ]
    full = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": "k3"})
    assert full.status == 429 and int(full.headers["retry-after"]) >= 1 and "full" in full.json["error"]
    assert jobs_in(served.root) == sorted(f"{job_id}.yaml" for job_id in ids)
    seen = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": "k1"})
    assert seen.status == 200 and seen.json["id"] == ids[0]  # the key is checked first


# -- what a client may send ---------------------------------------------------------------------


def test_bad_json_is_400_and_a_wrong_schema_422_saying_where(served: Any) -> None:
    token = served.token("producer", "submit")
    headers = {"Content-Type": "application/json"}
    broken = served.call("POST", "/v1/jobs", token=token, body=b'{"task": "echo",', headers=headers)
    assert (
        broken.status == 400 and "not JSON" in broken.json["error"] and broken.json["where"].startswith("body line 1")
    )
    assert served.call("POST", "/v1/jobs", token=token, body=b"\xff\xfe", headers=headers).status == 400
    assert served.call("POST", "/v1/jobs", token=token, body=b'{"task": NaN}', headers=headers).status == 400
    deep = b'{"task": "echo", "args": {"a": ' + b"[" * 30_000 + b"]" * 30_000 + b"}}"  # within the cap
    too_deep = served.call("POST", "/v1/jobs", token=token, body=deep, headers=headers)
    assert too_deep.status == 400 and "nested too deeply" in too_deep.json["error"]
    nested = {
        "task": "echo",
        "args": {
            "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
        },
    }
    parsed = served.call("POST", "/v1/jobs", token=token, json=nested)  # JSON can read it; a job can't hold it
    assert parsed.status == 422 and parsed.json["where"] == "body.args" and "nested too deeply" in parsed.json["error"]
    cases = [
        ([1, 2], "body"),
        ({"args": {}}, "body.task"),
        ({"task": 7}, "body.task"),
        ({"task": "echo", "colour": "red"}, "body.colour"),
        ({"task": "echo", "args": [1]}, "body.args"),
        ({"task": "echo", "priority": "high"}, "body.priority"),
        ({"task": "echo", "max_tries": -1}, "body.max_tries"),
        ({"task": "echo", "delay": "soon"}, "body.delay"),
        ({"task": "../../etc/passwd"}, "body.task"),
    ]
    for spec, where in cases:
        answer = served.call("POST", "/v1/jobs", token=token, json=spec)
        assert answer.status == 422 and answer.json["where"] == where and answer.json["error"], (spec, answer)
    assert jobs_in(served.root) == []


def test_413_from_content_length_without_reading_the_body(served: Any) -> None:
    token = served.token("producer", "submit")
    for length in (JOB_BODY_CAP + 1, 50 * 1024 * 1024):  # over the submit's cap; over every endpoint's
        connection = served.connect(timeout=10)
        connection.putrequest("POST", "/v1/jobs")
        connection.putheader("Authorization", f"Bearer {token}")
        connection.putheader("Content-Length", str(length))
        connection.endheaders()  # not one byte of the body follows
        reply = connection.getresponse()
        assert reply.status == 413, length
        connection.close()
    big = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "args": {"text": "x" * JOB_BODY_CAP}})
    assert big.status == 413 and big.json["where"] == "body"
    yaml_over = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "args": {"text": "x" * 70_000}})
    assert yaml_over.status == 413 and "max_job_bytes" in yaml_over.json["error"]
    assert jobs_in(served.root) == []


def test_413_for_a_slow_chunked_body_as_soon_as_it_passes_the_cap(served: Any) -> None:
    token = served.token("producer", "submit")
    connection = served.connect(timeout=10)
    connection.putrequest("POST", "/v1/jobs")
    connection.putheader("Authorization", f"Bearer {token}")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    chunk, sent = b"x" * 8192, 0
    while sent <= JOB_BODY_CAP:  # slowly, and never the last chunk: the answer can't wait for the end
        connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sent += len(chunk)
        time.sleep(0.03)
    reply = connection.getresponse()
    assert reply.status == 413
    connection.close()
    assert jobs_in(served.root) == []


# -- reading, paging, managing ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs/..",
        "/v1/jobs/../done/x",
        "/v1/jobs/.hidden",
        "/v1/jobs/a%2Fb",
        "/v1/jobs/" + "A" * 200,
        "/v1/jobs/x%00y",
    ],
)
def test_a_path_like_id_is_422(served: Any, path: str) -> None:
    token = served.token("producer", "submit")
    answer = served.call("GET", path, token=token)
    assert answer.status == 422 and answer.json["where"] == "path id", answer


def test_reads_404_405_and_json_errors_everywhere(served: Any) -> None:
    token = served.token("producer", "submit")
    unknown = served.call("GET", "/v1/jobs/01JD0000000000000000000000", token=token)
    assert unknown.status == 404 and "no job" in unknown.json["error"]
    assert served.call("GET", "/v1/nothing", token=token).json["error"] == "no such endpoint"
    wrong = served.call("DELETE", "/v1/jobs", token=token)
    assert wrong.status == 405 and "not allowed" in wrong.json["error"]
    job_id = served.call("POST", "/v1/jobs", token=token, json={"task": "echo"}).json["id"]
    early = served.call("GET", f"/v1/jobs/{job_id}/result", token=token)
    assert early.status == 404 and "no result yet" in early.json["error"]


def test_list_pages_newest_first_and_filters(served: Any) -> None:
    token = served.token("producer", "submit")
    ids = [
        served.call("POST", "/v1/jobs", token=token, json={"task": "a" if n % 2 else "b"}).json["id"] for n in range(5)
    ]
    seen, cursor = [], None
    while True:
        page = served.call("GET", "/v1/jobs?limit=2" + (f"&cursor={cursor}" if cursor else ""), token=token).json
        seen += [view["id"] for view in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    only_a = served.call("GET", "/v1/jobs?task=a&state=pending", token=token).json["jobs"]
    assert [view["id"] for view in only_a] == [ids[3], ids[1]]
    for query, where in (
        ("state=lost", "query state"),
        ("limit=0", "query limit"),
        ("cursor=../x", "query cursor"),
        ("colour=red", "colour"),
    ):
        answer = served.call("GET", f"/v1/jobs?{query}", token=token)
        assert answer.status == 422 and answer.json["where"] == where, query


def test_cancel_and_requeue_and_a_work_token_may_do_neither(served: Any) -> None:
    token, worker = served.token("producer", "submit"), served.token("w-1", "work")
    job_id = served.call("POST", "/v1/jobs", token=token, json={"task": "echo"}).json["id"]
    assert served.call("GET", f"/v1/jobs/{job_id}", token=worker).status == 200  # reading is every role's
    assert served.call("POST", f"/v1/jobs/{job_id}/cancel", token=worker).status == 403
    assert served.call("POST", f"/v1/jobs/{job_id}/cancel", token=token).json == {"id": job_id, "outcome": "cancelled"}
    assert served.call("GET", f"/v1/jobs/{job_id}", token=token).json["reason"] == "cancelled"
    again = served.call("POST", f"/v1/jobs/{job_id}/cancel", token=token)
    assert again.status == 409 and "already dead" in again.json["error"]
    dead = served.call("GET", f"/v1/jobs/{job_id}/result", token=token)
    assert dead.status == 409
    assert served.call("POST", f"/v1/jobs/{job_id}/requeue", token=worker).status == 403
    assert served.call("POST", f"/v1/jobs/{job_id}/requeue", token=token).json == {"id": job_id, "state": "pending"}
    assert served.call("POST", f"/v1/jobs/{job_id}/requeue", token=token).status == 409
    assert (served.root / "pending" / f"{job_id}.yaml").exists()


def test_a_full_disk_is_503_with_retry_after_and_nothing_written(serve_spool: Any, small_disk: Path) -> None:
    served = serve_spool(parent=small_disk)
    token = served.token("producer", "submit")
    first = served.call("POST", "/v1/jobs", token=token, json={"task": "echo"})
    assert first.status == 201
    fill_disk(small_disk / "filler")
    full = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": "on-a-full-disk"})
    assert full.status == 503 and int(full.headers["retry-after"]) >= 1, full
    assert "space" in full.json["error"].lower()
    assert jobs_in(served.root) == [f"{first.json['id']}.yaml"]
    assert not any((served.root / "keys").iterdir()) and not any((served.root / "tmp").iterdir())
    (small_disk / "filler").unlink()
    again = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": "on-a-full-disk"})
    assert again.status == 201


def test_the_same_key_from_many_clients_at_once_makes_one_job(served: Any) -> None:
    token = served.token("producer", "submit")
    replies: list[Any] = []
    barrier = threading.Barrier(8)

    def submit() -> None:
        barrier.wait()
        replies.append(served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "key": "once"}))

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(reply.status for reply in replies) == [200] * 7 + [201]
    assert len({reply.json["id"] for reply in replies}) == 1
    assert jobs_in(served.root) == [f"{replies[0].json['id']}.yaml"]
