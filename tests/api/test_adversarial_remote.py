"""``spool worker --server`` against a hostile server: a real HTTPS server of the test's own (its
certificate verified by the worker, as in production) that answers with an endless body, a
trickle, a redirect, or a lease no spool would hand out. The worker must neither hang, nor fill
its memory, nor take the lease."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spool.runner.api.tls import make_self_signed
from spool.runner.remote.worker import Refused, RemoteLease
from spool.runner.remote.client import MAX_REPLY_BYTES, ApiClient, Unreachable
from support import ROOT, SPOOL_CMD

Answer = Callable[[ssl.SSLSocket], None]


class HostileServer:
    """HTTPS on 127.0.0.1 (a self-signed certificate for it); each connection's request is read
    (head and Content-Length body), then ``answer`` writes whatever it likes."""

    def __init__(self, tmp: Path, answer: Answer) -> None:
        key, cert = make_self_signed("localhost", time.time())
        self.cert, key_path = tmp / "hostile-cert.pem", tmp / "hostile-key.pem"
        self.cert.write_bytes(cert)
        key_path.write_bytes(key)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(self.cert), str(key_path))
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                raw, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(raw,), daemon=True).start()

    def _one(self, raw: socket.socket) -> None:
        try:
            with self.context.wrap_socket(raw, server_side=True) as conn:
                conn.settimeout(30)
                self.requests.append(read_request(conn))
                self.answer(conn)
        except (OSError, ssl.SSLError):
            pass  # the client went away, as it should

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        self._thread.join(5)


def read_request(conn: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def send_json(conn: ssl.SSLSocket, status: int, value: Any, extra: str = "") -> None:
    body = json.dumps(value).encode()
    conn.sendall(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Callable[[Answer], HostileServer]]:
    made: list[HostileServer] = []

    def start(answer: Answer) -> HostileServer:
        server = HostileServer(tmp_path, answer)
        made.append(server)
        return server

    yield start
    for server in made:
        server.close()


def call_in_thread(client: ApiClient, timeout_seconds: float, limit: float) -> tuple[BaseException | None, float]:
    """Make one call in a thread; what it raised and how long it took (the test fails, instead
    of hanging, if it did not end within ``limit``)."""
    outcome: list[BaseException | None] = []
    started = time.monotonic()

    def run() -> None:
        try:
            client.call("/v1/leases", {"tasks": ["echo"], "wait": 0}, timeout_seconds=timeout_seconds)
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            outcome.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        client.abort()  # free the thread before failing
        pytest.fail(f"the call did not end within {limit} s")
    return outcome[0], time.monotonic() - started


def test_an_endless_answer_is_cut_at_the_reply_cap_not_read_into_memory(hostile: Any) -> None:
    """A Content-Length of 1 TiB and bytes for as long as the worker reads: it stops at the cap."""

    def endless(conn: ssl.SSLSocket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n")
        block = b" " * 65536
        while True:
            conn.sendall(block)

    server = hostile(endless)
    client = ApiClient(server.url, "t0ken", str(server.cert))
    raised, _took = call_in_thread(client, timeout_seconds=60, limit=20)
    assert isinstance(raised, Unreachable) and f"over {MAX_REPLY_BYTES} bytes" in str(raised), raised
    client.close()


def test_an_answer_that_trickles_in_forever_is_cut_at_the_calls_timeout(hostile: Any) -> None:
    """One byte every 0.2 s never trips the socket's own timeout (2 s); the call's deadline does."""

    def trickle(conn: ssl.SSLSocket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        while True:
            conn.sendall(b" ")
            time.sleep(0.2)

    server = hostile(trickle)
    client = ApiClient(server.url, "t0ken", str(server.cert))
    raised, took = call_in_thread(client, timeout_seconds=2.0, limit=30)
    assert isinstance(raised, Unreachable) and "no whole answer within 2 s" in str(raised), raised
    assert 1.5 <= took <= 10.0, took
    client.close()


def lease_of(**changes: Any) -> dict[str, Any]:
    lease = {
        "id": "01J0000000000000000000000A",
        "attempt": 1,
        "fence": "1-0123456789abcdef",
        "task": "echo",
        "args": {},
        "timeout_seconds": 60.0,
        "tries_left": 2,
        "heartbeat_seconds": 1.0,
    }
    return {"lease": {**lease, **changes}}


@pytest.mark.parametrize(
    "changes",
    [
        {"id": "../jobs/01J0000000000000000000000A"},  # our next calls would go to another endpoint
        {"id": ".hidden"},
        {"task": "../x"},
        {"attempt": 0},
        {"attempt": True},
        {"attempt": 1.5},
        {"timeout_seconds": float("nan")},
        {"timeout_seconds": float("inf")},
        {"timeout_seconds": -1},
        {"heartbeat_seconds": float("nan")},  # the beat loop would spin without sleeping
        {"heartbeat_seconds": float("inf")},  # and never beat
        {"fence": ""},
        {"fence": "x" * 1000},
        {"args": []},
    ],
)
def test_a_lease_no_spool_would_hand_out_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(Refused):
        RemoteLease.from_reply(lease_of(**changes))
    assert RemoteLease.from_reply(lease_of()).job_id == "01J0000000000000000000000A"


def test_a_worker_handed_a_path_like_lease_id_stops_and_never_calls_a_path_of_it(hostile: Any, tmp_path: Path) -> None:
    """End to end: the real ``spool worker --server`` takes the hostile lease, refuses it, exits 1,
    and sent nothing but its lease request (no heartbeat to ``/v1/leases/../...``)."""

    def answer(conn: ssl.SSLSocket) -> None:
        send_json(conn, 200, lease_of(id="../jobs/01J0000000000000000000000A"), "Connection: close\r\n")

    server = hostile(answer)
    argv = [*SPOOL_CMD, "worker", "--server", server.url, "--token", "t0ken", "--cacert", str(server.cert)]
    argv += ["--import", "examples.tasks"]
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=dict(os.environ)
    )
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, err
    assert b"names no job this worker can take" in err, err
    paths = [request.split(b" ")[1] for request in server.requests]
    assert paths == [b"/v1/leases"], paths


def test_a_redirect_is_never_followed(hostile: Any) -> None:
    """What held: a 307 to another host is an answer, not a place the token is sent."""

    def redirect(conn: ssl.SSLSocket) -> None:
        send_json(conn, 307, {}, "Location: https://evil.example/v1/leases\r\n")

    server = hostile(redirect)
    client = ApiClient(server.url, "t0ken", str(server.cert))
    reply = client.call("/v1/leases", {"tasks": ["echo"]}, timeout_seconds=10)
    assert reply.status == 307 and len(server.requests) == 1
    client.close()


def test_a_servers_error_text_reaches_the_log_as_one_short_line(hostile: Any) -> None:
    """A server's ``error`` went into the worker's log whole: a megabyte a retry, and newlines or
    terminal escapes that forge log lines of their own."""

    def loud(conn: ssl.SSLSocket) -> None:
        send_json(conn, 409, {"error": "lost\n2026-01-01 INFO spool.worker: forged\x1b[2J" + "x" * (1 << 20)})

    server = hostile(loud)
    client = ApiClient(server.url, "t0ken", str(server.cert))
    said = client.call("/v1/leases/01J0000000000000000000000A/complete", {"fence": "1-0"}, timeout_seconds=10).error()
    assert said.startswith("lost\\n2026-01-01 INFO") and "\n" not in said and "\x1b" not in said, said[:100]
    assert len(said) <= 520
    client.close()
