"""The server's certificate: a self-signed one made in tls/ on first use, its fingerprint, and the
server's SSLContext (TLS 1.2 at least).

``--self-signed`` makes an ECDSA P-256 key and a certificate for localhost, 127.0.0.1, ::1 and
this host's name, valid ten years from a day ago (``BACKDATE``: a client whose clock is behind
still accepts it), and keeps both in tls/ (both 0600, written whole in tmp/, fsync'd and renamed
in, the key first, under locks/tls.lock, so two servers starting at once make one pair). Clients
trust it with ``--cacert tls/cert.pem`` (or pin its SHA-256 fingerprint, printed at start).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from spool.disk import fs
from spool.handle import Handle
from spool.disk import CERT_NAME, KEY_NAME, TLS, tls_lock_name
from spool.disk import acquire
from spool.tokens import write_tls_file

VALID_DAYS = 3650
# notBefore lies this far in the past: a client whose clock is behind the server's (by minutes, or
# hours on a VM restored from a snapshot) must still accept a certificate made a moment ago. It
# widens no real risk: the certificate is self-signed and trusted by its file, not by dates.
BACKDATE = datetime.timedelta(days=1)


def self_signed(sp: Handle) -> tuple[Path, Path, bool]:
    """tls/cert.pem and tls/key.pem, made now if missing; (cert, key, made)."""
    tls_fd = sp.layout.fd(TLS)
    paths = sp.layout.path(TLS, CERT_NAME), sp.layout.path(TLS, KEY_NAME)
    with acquire(sp.layout.fd("locks"), tls_lock_name(), blocking=True):  # RACE: another server starting
        if fs.exists(tls_fd, CERT_NAME):
            return *paths, False
        key_pem, cert_pem = make_self_signed(socket.gethostname(), sp.clock.wall())
        _publish(sp, KEY_NAME, key_pem)
        _publish(sp, CERT_NAME, cert_pem)  # last: a cert in tls/ means its key is there too
    return *paths, True


def make_self_signed(host: str, now: float) -> tuple[bytes, bytes]:
    """(key PEM, certificate PEM) for ``host`` and the loopback names."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host or "localhost")])
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "::1")]
    if host and host != "localhost":
        names.append(x509.DNSName(host))
    start = datetime.datetime.fromtimestamp(now, datetime.UTC) - BACKDATE
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(cert_path: Path) -> str:
    """The certificate's SHA-256 fingerprint, as ``AB:CD:...`` (what browsers and openssl show)."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """An SSLContext that speaks TLS 1.2 or newer only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_path), str(key_path))
    return context


def _publish(sp: Handle, name: str, data: bytes) -> None:
    """Into tls/ durably, 0600 (over a key left by a crash before its cert)."""
    write_tls_file(sp, name, data)
