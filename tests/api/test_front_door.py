"""What a first remote setup meets at the port (issue 22): plain HTTP gets a one-line hint to use
https, bad ids are 422, and a requeue under a dead parent is a 409 that says what to requeue."""

from __future__ import annotations

import socket
from typing import Any

from spool import Spool
from spool.admin import cancel
from support import wait_until


def raw(served: Any, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a plain TCP connection to the server's port; everything it answers."""
    answer = b""
    with socket.create_connection((served.host, served.port), timeout=timeout) as conn:
        conn.sendall(data)
        try:
            while chunk := conn.recv(4096):
                answer += chunk
        except ConnectionResetError:  # closed with our bytes unread: as good as closed
            pass
    return answer


def test_plain_http_on_the_https_port_gets_a_400_that_says_to_use_https(served: Any) -> None:
    answer = raw(served, f"GET /v1/jobs HTTP/1.1\r\nHost: localhost:{served.port}\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request", answer
    assert body == f"this is an HTTPS port: use https://localhost:{served.port}/\n".encode()
    no_host = raw(served, b"GET / HTTP/1.0\r\n\r\n")  # no Host: the address it came in on
    assert no_host.endswith(f"use https://{served.host}:{served.port}/\n".encode()), no_host
    odd_host = raw(served, b"GET / HTTP/1.1\r\nHost: <script>\r\n\r\n")  # never echoed back
    assert b"<script>" not in odd_host and odd_host.startswith(b"HTTP/1.1 400"), odd_host
    assert raw(served, b"\x00\x01 not http") == b""  # neither TLS nor HTTP: closed
    assert served.call("GET", "/healthz").status == 200  # and TLS still works beside them


def test_a_malformed_job_id_is_422_on_every_route_that_takes_one(served: Any) -> None:
    token = served.token("ops", "admin")
    for method, path in [
        ("GET", "/v1/jobs/not.an.id"),
        ("GET", "/v1/jobs/-dash"),
        ("GET", "/v1/jobs/not.an.id/result"),
        ("POST", "/v1/jobs/not.an.id/cancel"),
        ("POST", "/v1/jobs/not.an.id/requeue"),
        ("POST", "/v1/jobs/a%2Fb/cancel"),
        ("POST", "/v1/jobs//requeue"),
        ("GET", "/v1/jobs/a/b/result"),
        ("GET", "/v1/jobs/" + "x" * 80),
    ]:
        reply = served.call(method, path, token=token)
        assert reply.status == 422 and reply.body["where"] == "path id", (method, path, reply)
    assert served.call("GET", "/v1/jobs/01J0000000000000000000000A", token=token).status == 404  # well formed, unknown


def test_requeue_of_a_child_under_a_dead_parent_is_a_409_naming_the_parent(served: Any) -> None:
    token = served.token("ops", "admin")
    with Spool(served.root, environ={}) as sp:
        parent = sp.submit("echo")
        child = sp.submit("echo", depends_on=[parent])
        cancel(sp, parent)
        cancel(sp, child)
    reply = served.call("POST", f"/v1/jobs/{child}/requeue", token=token)
    assert reply.status == 409, reply
    assert reply.body["error"] == (
        f"job {child} can't run while its parent {parent} is dead: requeue {parent} (or requeue {child} --with-parents)"
    )
    assert served.call("POST", f"/v1/jobs/{parent}/requeue", token=token).status == 200
    wait_until(lambda: served.call("POST", f"/v1/jobs/{child}/requeue", token=token).status == 200, timeout=10)
