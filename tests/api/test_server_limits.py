"""Limits against clients that hold the server's connections: an oversized request head is refused
by the parser, and an idle keep-alive connection is closed by the server."""

from __future__ import annotations

import time
from typing import Any


def test_a_request_head_over_16_kib_is_refused(served: Any) -> None:
    token = served.token("producer", "submit")
    answer = served.call("GET", "/v1/jobs", token=token, headers={"X-Padding": "p" * 20_000})
    assert answer.status == 431 and answer.json["where"] == "headers", answer
    assert served.call("GET", "/v1/jobs", token=token, headers={"X-Padding": "p" * 8_000}).status == 200


def test_an_idle_keep_alive_connection_is_closed(served: Any) -> None:
    token = served.token("producer", "submit")
    connection = served.connect(timeout=20)
    connection.request("GET", "/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert connection.getresponse().read() and connection.sock is not None
    started = time.monotonic()
    assert connection.sock.recv(1) == b""  # the server's close (after its keep-alive timeout)
    assert 3.0 <= time.monotonic() - started <= 15.0
    connection.close()
