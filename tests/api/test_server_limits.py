"""Limits against clients that hold the server's connections: an oversized request head is refused
by the parser, and an idle keep-alive connection is closed by the server.

The deadlines are settings (``http_idle_seconds``, ``http_body_seconds``, ``tls_handshake_seconds``):
each test shortens its own to a second or two and checks the rule, not the default's length; one
test checks that the defaults are still what docs/api.md says."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from spool.settings import Settings

SHORT = {"SPOOL_HTTP_IDLE_SECONDS": "1.5", "SPOOL_HTTP_BODY_SECONDS": "2", "SPOOL_TLS_HANDSHAKE_SECONDS": "2"}


def test_the_default_deadlines_are_the_documented_ones() -> None:
    defaults = Settings()
    assert (defaults.http_idle_seconds, defaults.http_head_seconds) == (5.0, 10.0)
    assert (defaults.http_body_seconds, defaults.tls_handshake_seconds) == (30.0, 10.0)


def test_a_request_head_over_16_kib_is_refused(served: Any) -> None:
    token = served.token("producer", "submit")
    answer = served.call("GET", "/v1/jobs", token=token, headers={"X-Padding": "p" * 20_000})
    assert answer.status == 431 and answer.json["where"] == "headers", answer
    assert served.call("GET", "/v1/jobs", token=token, headers={"X-Padding": "p" * 8_000}).status == 200


def test_an_idle_keep_alive_connection_is_closed(serve_spool: Any) -> None:
    served = serve_spool(env=SHORT)
    token = served.token("producer", "submit")
    connection = served.connect(timeout=20)
    connection.request("GET", "/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert connection.getresponse().read() and connection.sock is not None
    started = time.monotonic()
    assert connection.sock.recv(1) == b""  # the server's close (after its keep-alive timeout)
    assert 1.0 <= time.monotonic() - started <= 8.0
    connection.close()


def test_a_body_that_trickles_in_is_cut_with_408(serve_spool: Any) -> None:
    """A slow-loris upload: under the cap, but never whole. Cut after ``http_body_seconds``."""
    served = serve_spool(env=SHORT)
    token = served.token("producer", "submit")
    connection = served.connect(timeout=60)
    connection.putrequest("POST", "/v1/jobs")
    connection.putheader("Authorization", f"Bearer {token}")
    connection.putheader("Content-Length", "1000")
    connection.endheaders()
    connection.send(b'{"task": "echo", ')  # and nothing more
    started = time.monotonic()
    reply = connection.getresponse()
    assert reply.status == 408 and json.loads(reply.read()) == {
        "error": "body not received whole within 2 s",
        "where": "body",
    }
    assert 1.5 <= time.monotonic() - started <= 10.0
    connection.close()
    assert not any(p for p in (served.root / "pending").iterdir() if not p.name.startswith("."))


def test_a_stalled_tls_handshake_is_cut(serve_spool: Any) -> None:
    served = serve_spool(env=SHORT)
    with socket.create_connection((served.host, served.port), timeout=60) as raw:
        raw.send(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
        started = time.monotonic()
        assert raw.recv(1) == b""
        assert 1.5 <= time.monotonic() - started <= 10.0  # asyncio's own default would be 60 s
