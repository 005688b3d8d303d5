"""The server speaks HTTPS only, TLS 1.2 or newer, with a certificate a client can verify: plain
HTTP, TLS 1.1, a client trusting another CA and a wrong host name all fail; the fingerprint it
prints is its certificate's."""

from __future__ import annotations

import hashlib
import http.client
import socket
import ssl
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from spool.runner.api import tls


def test_plain_http_gets_only_a_hint_to_use_https(served: Any) -> None:
    """Never the API's answer over plain HTTP: a 400 whose body says to use https (frontdoor.py)."""
    connection = http.client.HTTPConnection(served.host, served.port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        reply = connection.getresponse()
        status, body = reply.status, reply.read()
    finally:
        connection.close()
    assert status == 400 and body == f"this is an HTTPS port: use https://{served.host}:{served.port}/\n".encode()


def test_tls_1_1_is_refused_and_1_2_accepted(served: Any) -> None:
    old = served.context()
    with warnings.catch_warnings():  # naming TLS 1.1 is deprecated: offering it is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # so the client's own policy does not refuse first
    with pytest.raises(ssl.SSLError):
        served.call_with(old)
    exactly_1_2 = served.context()
    exactly_1_2.maximum_version = ssl.TLSVersion.TLSv1_2
    connection = served.connect(context=exactly_1_2)
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    assert connection.sock.version() == "TLSv1.2"
    connection.close()


def test_a_client_trusting_another_ca_fails(served: Any, tmp_path: Path) -> None:
    _key, other_cert = tls.make_self_signed("localhost", time.time())
    (tmp_path / "other.pem").write_bytes(other_cert)
    other = ssl.create_default_context(cafile=str(tmp_path / "other.pem"))
    with pytest.raises(ssl.SSLCertVerificationError):
        served.call_with(other)


def test_the_host_name_is_checked(served: Any) -> None:
    context = served.context()
    with socket.create_connection((served.host, served.port), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError, match="match"):
            context.wrap_socket(raw, server_hostname="example.com")
    with socket.create_connection((served.host, served.port), timeout=10) as raw:  # localhost is in its names
        with context.wrap_socket(raw, server_hostname="localhost") as wrapped:
            assert wrapped.version() in ("TLSv1.2", "TLSv1.3")


def test_the_printed_fingerprint_is_the_certificate_s_and_it_is_kept(served: Any) -> None:
    first = (served.logs / "serve-1.out").read_text()
    assert "made a self-signed certificate" in first
    printed = next(
        line.split()[-1] for line in first.splitlines() if line.startswith("certificate SHA-256 fingerprint")
    )
    with socket.create_connection((served.host, served.port), timeout=10) as raw:
        with served.context().wrap_socket(raw, server_hostname=served.host) as wrapped:
            der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    digest = hashlib.sha256(der).hexdigest().upper()
    assert printed == ":".join(digest[i : i + 2] for i in range(0, 64, 2))
    assert (served.root / "tls" / "key.pem").stat().st_mode & 0o777 == 0o600
    served.restart()  # the same pair again, not a new one
    second = (served.logs / "serve-2.out").read_text()
    assert "made a self-signed" not in second and printed in second
