"""``spool serve``'s command line: --cert/--key or --self-signed (one of them), a certificate of
one's own, and one line and exit 1 for a port already taken."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from spool.runner.api import tls
from support import run_spool


def test_serve_needs_one_way_to_its_certificate(spool_dir: Path, tmp_path: Path) -> None:
    for args in ([], ["--cert", "c.pem"], ["--self-signed", "--cert", "c.pem", "--key", "k.pem"]):
        ran = run_spool("serve", *args, spool=spool_dir, timeout=30)
        assert ran.returncode == 2 and "--cert FILE --key FILE, or --self-signed" in ran.stderr, (args, ran.stderr)
    missing = run_spool(
        "serve", "--cert", str(tmp_path / "no.pem"), "--key", str(tmp_path / "no.pem"), spool=spool_dir, timeout=30
    )
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr


def test_a_certificate_of_one_s_own(serve_spool: Any, tmp_path: Path) -> None:
    key_pem, cert_pem = tls.make_self_signed("localhost", time.time())
    (tmp_path / "own.pem").write_bytes(cert_pem)
    (tmp_path / "own.key").write_bytes(key_pem)
    served = serve_spool(cert=(tmp_path / "own.pem", tmp_path / "own.key"))
    assert served.call("GET", "/healthz").status == 200  # verified against own.pem
    assert not (served.root / "tls" / "cert.pem").exists()


def test_a_port_in_use_is_one_line_and_exit_1(spool_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        ran = run_spool("serve", "--self-signed", "--port", str(port), spool=spool_dir, timeout=30)
    assert ran.returncode == 1 and "in use" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
