"""The JSON API attacked as a hostile client would, over real verified HTTPS (``served``): bodies
that are not quite JSON, ids that are paths, tokens of the wrong role, holders whose name is a
prefix of the caller's, forged fences. Every refusal is a JSON error saying where; nothing moves."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.runner.api.leases import MAX_POLLS_PER_TOKEN
from support import wait_until


def visible(folder: Any) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def leased_job(served: Any, worker_token: str, **spec: Any) -> dict[str, Any]:
    submitter = served.token("producer-for-lease", "submit")
    assert served.call("POST", "/v1/jobs", token=submitter, json={"task": "echo", **spec}).status == 201
    reply = served.call("POST", "/v1/leases", token=worker_token, json={"tasks": ["echo"], "wait": 0})
    assert reply.status == 200, reply
    return dict(reply.json["lease"])


def post_raw(served: Any, path: str, token: str, raw: bytes) -> Any:
    return served.call("POST", path, token=token, body=raw, headers={"Content-Type": "application/json"})


def test_a_lone_surrogate_anywhere_in_a_body_is_refused_so_the_job_stays_readable(served: Any) -> None:
    """``"\\ud800"`` is valid JSON but no Unicode text: stored, it made the job's status, result,
    the list and its dashboard page answer 500 (UTF-8 can't encode it) for everyone, for good."""
    submitter, worker = served.token("producer", "submit"), served.token("w1", "work")
    for raw in (
        b'{"task": "echo", "args": {"x": "\\ud800"}}',
        b'{"task": "echo", "args": {"\\udfff": 1}}',
        b'{"task": "echo", "key": "k\\ud800"}',
        b'{"task": "echo", "args": {"x": "\xed\xa0\x80"}}',  # the surrogate as raw (CESU-8) bytes
    ):
        reply = post_raw(served, "/v1/jobs", submitter, raw)
        assert reply.status == 400 and reply.json["where"] == "body" and "surrogate" in reply.json["error"], reply
    assert visible(served.root / "pending") == []

    lease = leased_job(served, worker)
    fence = lease["fence"].encode()
    for step, raw in (
        ("complete", b'{"fence": "%s", "result": "\\udfff"}' % fence),
        ("fail", b'{"fence": "%s", "error": "bad \\udfff"}' % fence),
        ("heartbeat", b'{"fence": "%s", "progress": {"message": "\\ud800"}}' % fence),
    ):
        reply = post_raw(served, f"/v1/leases/{lease['id']}/{step}", worker, raw)
        assert reply.status == 400 and "surrogate" in reply.json["error"], (step, reply)
    status = served.call("GET", f"/v1/jobs/{lease['id']}", token=submitter)
    assert status.status == 200 and status.json["state"] == "leased", status
    assert served.call("GET", "/v1/jobs", token=submitter).status == 200
    # A pair of escapes that spells one character is text, and is kept as that character.
    reply = post_raw(served, "/v1/jobs", submitter, b'{"task": "echo", "args": {"x": "\\ud83d\\ude00"}}')
    assert reply.status == 201, reply
    with Spool(served.root) as sp:
        assert dict(sp.job(reply.json["id"])[1].job.args) == {"x": "\U0001f600"}


def test_a_key_given_twice_in_one_object_is_refused(served: Any) -> None:
    """Parsers disagree on which of two equal keys counts (Python's: the last), so a filter in
    front of the server could have passed ``"task": "echo"`` while we ran the other one."""
    submitter = served.token("producer", "submit")
    for raw, key in (
        (b'{"task": "shell", "task": "echo"}', "task"),
        (b'{"task": "echo", "args": {"n": 1, "n": 2}}', "n"),
        (b'{"task": "echo", "priority": 1, "priority": 9}', "priority"),
    ):
        reply = post_raw(served, "/v1/jobs", submitter, raw)
        assert reply.status == 400 and reply.json["where"] == "body", reply
        assert f"key {key!r} is given more than once" in reply.json["error"], reply
    assert visible(served.root / "pending") == []


def test_bodies_that_are_not_quite_json_get_a_json_error_never_a_500(served: Any) -> None:
    """What held: each gets a 4xx JSON error naming where, and no job is written."""
    submitter = served.token("producer", "submit")
    cases = [
        b'{"task": "echo", "timeout": 1e400}',  # parses to inf
        b'{"task": "echo", "priority": 1e400}',
        b'{"task": "echo", "delay": 1e400}',
        b'{"task": "echo", "timeout": NaN}',
        b'{"task": "echo", "args": {"x": Infinity}}',
        b'{"task": "echo", "args": {"x": -1e999}}',
        b'{"task": "echo", "max_tries": ' + b"9" * 5000 + b"}",  # past Python's int digit limit
        b'{"task": "echo", "priority": ' + b"9" * 100 + b"}",
        b'{"task": "echo", "args": {"x": ' + b"[" * 150 + b"]" * 150 + b"}}",
        b"[" * 60_000,  # under the cap, too deep to parse
        b"[" * (1 << 20),  # over the cap
        b'{"task": "echo", "depends_on": ["../x"]}',
        b'{"task": "echo", "key": "a\\u0000b"}',
        b'{"task": "\\u2028"}',
        b'{"task": "echo"',
        b"\xff\xfe{}",
        b"",
        b"null",
        b'"task"',
    ]
    for raw in cases:
        reply = post_raw(served, "/v1/jobs", submitter, raw)
        assert 400 <= reply.status < 500 and isinstance(reply.json, dict), (raw[:60], reply)
        assert reply.json["error"] and reply.json["where"], (raw[:60], reply)
    assert visible(served.root / "pending") == [] and visible(served.root / "waiting") == []
    assert "Traceback" not in served.log()


def test_every_route_wants_a_token_in_every_spelling_of_its_path(served: Any) -> None:
    """What held: no route, and no HEAD, OPTIONS or trailing-slash variant, answers without one."""
    api = [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("HEAD", "/v1/jobs"),
        ("GET", "/v1/jobs/"),
        ("GET", "/v1/jobs/01J0000000000000000000000A"),
        ("HEAD", "/v1/jobs/01J0000000000000000000000A/result"),
        ("GET", "/v1/jobs/01J0000000000000000000000A/result/"),
        ("POST", "/v1/jobs/01J0000000000000000000000A/cancel"),
        ("POST", "/v1/jobs/01J0000000000000000000000A/requeue"),
        ("POST", "/v1/leases"),
        ("POST", "/v1/leases/01J0000000000000000000000A/heartbeat"),
        ("POST", "/v1/leases/01J0000000000000000000000A/complete"),
        ("POST", "/v1/leases/01J0000000000000000000000A/fail"),
        ("POST", "/v1/leases/01J0000000000000000000000A/release"),
        ("GET", "/metrics"),
        ("HEAD", "/metrics"),
        ("GET", "/openapi.json"),
    ]
    for method, path in api:
        for header in (None, "Bearer", "Bearer ", "Basic x", "bearer nope"):
            reply = served.call(method, path, headers={"Authorization": header} if header else None)
            assert reply.status in (401, 404, 405, 307), (method, path, header, reply)
            if method != "HEAD" and reply.status == 401:
                assert reply.json["where"] == "header Authorization", reply
    for method, path in [("OPTIONS", "/v1/jobs"), ("PUT", "/v1/jobs"), ("DELETE", "/v1/jobs/x")]:
        assert served.call(method, path).status == 405
    dashboard = ["/", "/jobs", "/jobs/01J0000000000000000000000A", "/bulk?action=requeue", "/schedules", "/workers"]
    for path in dashboard:
        for method in ("GET", "HEAD"):
            reply = served.call(method, path)
            assert reply.status == 303 and reply.headers["location"].startswith("/login?next="), (method, path, reply)
    assert served.call("GET", "/events").status == 401
    for path in ("/jobs/01J0000000000000000000000A/cancel", "/bulk", "/schedules/x/run"):
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert served.call("POST", path, body=b"csrf=x", headers=form).status == 401


def test_ids_that_are_paths_or_dot_files_are_refused_before_any_file_is_named(served: Any) -> None:
    """What held: an encoded ``..``, an encoded slash and a dot-file name are 422 (path id)."""
    submitter, worker = served.token("producer", "submit"), served.token("w1", "work")
    for raw in ("%2e%2e", "..%2Fconfig.yaml", "%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", ".hidden", "a%00b", "x" * 300):
        reply = served.call("GET", f"/v1/jobs/{raw}", token=submitter)
        assert reply.status == 422 and reply.json["where"] == "path id", (raw, reply)
        for step in ("cancel", "requeue"):
            reply = served.call("POST", f"/v1/jobs/{raw}/{step}", token=submitter)
            assert reply.status in (404, 405, 422), (raw, step, reply)  # 405: the GET-only catch-all
        reply = served.call("POST", f"/v1/leases/{raw}/complete", token=worker, json={"fence": "1-00", "result": 1})
        assert reply.status in (404, 405, 422), (raw, reply)


def test_roles_holders_and_fences_are_checked_exactly(served: Any) -> None:
    """What held: a work token can't submit, cancel or requeue; a submit token can't lease; worker
    ``w`` can't act on ``w1``'s lease; a fence of another attempt, a prefix of the fence, a fence
    with its attempt spelt otherwise are 409. The job is untouched throughout, then completes."""
    submitter, w, w1 = served.token("producer", "submit"), served.token("w", "work"), served.token("w1", "work")
    assert served.call("POST", "/v1/jobs", token=w, json={"task": "echo"}).status == 403
    assert served.call("POST", "/v1/leases", token=submitter, json={"tasks": ["echo"]}).status == 403
    lease = leased_job(served, w1)
    job_id, fence = lease["id"], lease["fence"]
    assert served.call("POST", f"/v1/jobs/{job_id}/cancel", token=w).status == 403
    assert served.call("POST", f"/v1/jobs/{job_id}/requeue", token=w).status == 403
    for step in ("heartbeat", "complete", "fail", "release"):
        body: dict[str, Any] = {"fence": fence, **({"result": 1} if step == "complete" else {})}
        reply = served.call("POST", f"/v1/leases/{job_id}/{step}", token=w, json=body)
        assert reply.status == 403, (step, reply)
    attempt, digest = fence.split("-")
    forged = [
        fence[:-1],
        fence + "0",
        f"0{attempt}-{digest}",
        f"{int(attempt) + 1}-{digest}",
        f"{int(attempt) - 1}-{digest}",
        f"\u0661-{digest}",  # an Arabic-Indic digit one: isdigit() says yes, but it is no attempt
        f"{attempt}-{digest.upper()}",
        f"{attempt}-",
        f" {fence}",
    ]
    for bad in forged:
        reply = served.call("POST", f"/v1/leases/{job_id}/complete", token=w1, json={"fence": bad, "result": 1})
        assert reply.status in (409, 422) and reply.json["where"] == "body.fence", (bad, reply)
    with Spool(served.root) as sp:
        state = sp.state(job_id)
        assert state is not None and state.value == "leased"
    reply = served.call("POST", f"/v1/leases/{job_id}/complete", token=w1, json={"fence": fence, "result": {"ok": 1}})
    assert reply.status == 200, reply
    assert served.call("GET", f"/v1/jobs/{job_id}/result", token=submitter).json["result"] == {"ok": 1}
    # The first result wins: a second complete (the same fence) is refused as stale.
    again = served.call("POST", f"/v1/leases/{job_id}/complete", token=w1, json={"fence": fence, "result": 2})
    assert again.status == 409 and json.dumps(again.json)


def test_a_connection_that_sends_no_head_or_trickles_one_is_closed(serve_spool: Any) -> None:
    """Slow-loris on the head: uvicorn times out neither a connection that sends nothing after its
    handshake nor a head that arrives a byte a second, so 200 of them (its connection limit) had
    every other client answered 503. Each is closed within the head deadline (``http_head_seconds``,
    10 s by default; 2 s here)."""
    served = serve_spool(env={"SPOOL_HTTP_HEAD_SECONDS": "2"})
    token = served.token("producer", "submit")
    silent, trickling = served.connect(timeout=40), served.connect(timeout=40)
    silent.connect()
    trickling.connect()
    assert silent.sock is not None and trickling.sock is not None
    head = b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\n"
    started = time.monotonic()
    closed_at = None
    for byte in head:
        try:
            trickling.sock.send(bytes([byte]))
        except OSError:
            closed_at = time.monotonic()
            break
        if time.monotonic() - started > 15:
            break
        time.sleep(0.1)
    if closed_at is None:  # the head was all sent (too slowly) or the send has not failed yet
        trickling.sock.settimeout(30)
        assert trickling.sock.recv(1) == b""
        closed_at = time.monotonic()
    assert closed_at - started <= 8.0, closed_at - started
    silent.sock.settimeout(30)
    assert silent.sock.recv(1) == b""  # closed by the server, no answer
    assert 1.5 <= time.monotonic() - started <= 10.0
    silent.close()
    trickling.close()
    # A client that sends its head promptly is served as before, on a fresh connection.
    assert served.call("GET", "/v1/jobs", token=token).status == 200


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.mark.slow  # ~15 s of a server under a crowd of long-polls
def test_many_long_polls_at_once_leave_the_server_responsive_and_leak_nothing(served: Any) -> None:
    """What held: 60 long-polls waiting together; /healthz and a listing answer promptly meanwhile,
    one job goes to exactly one of them, and two rounds later the server holds no more file
    descriptors or threads than after the first."""
    submitter = served.token("producer", "submit")
    workers = [served.token(f"w{n}", "work") for n in range(15)]  # 4 polls each: the per-token cap
    assert served.proc is not None
    pid = served.proc.pid

    body = {"tasks": ["echo"], "wait": 4}

    def one_round(submit: bool) -> list[int]:
        statuses: list[int] = []
        with ThreadPoolExecutor(60) as pool:
            polls = [
                pool.submit(served.call, "POST", "/v1/leases", token=workers[n % 15], json=body) for n in range(60)
            ]
            time.sleep(1.0)  # let them all be waiting (the check below holds either way)
            started = time.monotonic()
            assert served.call("GET", "/healthz", timeout=5).status == 200
            assert served.call("GET", "/v1/jobs", token=submitter, timeout=5).status == 200
            assert time.monotonic() - started < 3.0
            if submit:
                assert served.call("POST", "/v1/jobs", token=submitter, json={"task": "echo"}).status == 201
            statuses = [poll.result(timeout=60).status for poll in polls]
        return statuses

    first = one_round(submit=True)
    assert sorted(set(first)) == [200, 204] and first.count(200) == 1, first
    wait_until(lambda: served.call("GET", "/healthz").status == 200)
    after_first = open_fds(pid), threads_of(pid)
    for _ in range(2):
        assert set(one_round(submit=False)) == {204}
    wait_until(lambda: open_fds(pid) <= after_first[0] + 3, timeout=15, message="the server's fds to settle")
    assert threads_of(pid) <= after_first[1] + 2, (threads_of(pid), after_first)


def test_one_token_cannot_hold_more_than_its_share_of_long_polls(served: Any) -> None:
    """A hole found: one work token could open a long-poll on every connection the server takes
    (200) and starve every other client. One past MAX_POLLS_PER_TOKEN waiting gets 429 with
    Retry-After at once; another token still gets its turn, and so does this one once a poll ends."""
    greedy, other = served.token("greedy", "work"), served.token("other", "work")
    body, now = {"tasks": ["echo"], "wait": 3}, {"tasks": ["echo"], "wait": 0}  # now: never waits
    with ThreadPoolExecutor(MAX_POLLS_PER_TOKEN + 1) as pool:
        polls = [
            pool.submit(served.call, "POST", "/v1/leases", token=greedy, json=body)
            for _ in range(MAX_POLLS_PER_TOKEN + 1)
        ]
        refused = wait_until(
            lambda: next((p.result() for p in polls if p.done() and p.result().status == 429), None),
            timeout=2.5,  # at once, while the others still wait out their 3 s
            message="the poll past the cap refused",
        )
        assert refused.headers.get("retry-after") == "1" and "greedy" in refused.json["error"], refused
        assert served.call("POST", "/v1/leases", token=other, json=now).status == 204
        statuses = sorted(p.result(timeout=30).status for p in polls)
    assert statuses == [204] * MAX_POLLS_PER_TOKEN + [429], statuses
    assert served.call("POST", "/v1/leases", token=greedy, json=now).status == 204


def raw_exchange(served: Any, data: bytes, wait: float = 10.0) -> tuple[bytes, float]:
    """Send ``data`` as it is on one TLS connection; everything the server sent until it closed
    (or ``wait`` passed), and how long that took."""
    connection = served.connect(timeout=wait)
    connection.connect()
    sock = connection.sock
    assert sock is not None
    started = time.monotonic()
    sock.sendall(data)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        received += b"[still open]"
    connection.close()
    return received, time.monotonic() - started


def test_a_body_framed_both_by_transfer_encoding_and_content_length_is_refused_and_closed(served: Any) -> None:
    """h11 took the chunked framing and kept the connection open: a proxy in front that went by
    Content-Length would have read the rest as the next request (request smuggling)."""
    token = served.token("producer", "submit")
    body = b'{"task": "echo"}'
    head = b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\n"
    chunked = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    received, took = raw_exchange(served, head + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    status_line, _, rest = received.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400"), received
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["where"] == "header Content-Length", received
    assert not received.endswith(b"[still open]") and took < 5.0, (received, took)
    assert visible(served.root / "pending") == []
    # What held: a Content-Length shorter than the body reads only that much (not JSON: 400).
    received, _ = raw_exchange(served, head + b"Content-Length: 5\r\n\r\n" + body, wait=3.0)
    assert received.startswith(b"HTTP/1.1 400") and b'"where":"body line 1' in received, received
    # Chunked alone is fine.
    received, _ = raw_exchange(served, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked, wait=3.0)
    assert received.startswith(b"HTTP/1.1 201"), received
