"""A remote worker whose clock is behind the server's accepts a freshly made ``--self-signed``
certificate: its notBefore lies a day back (``runner.api.tls.BACKDATE``), not a moment."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from spool import Spool
from support import ROOT, SPOOL_CMD


def test_a_self_signed_certificate_is_valid_from_a_day_back(served: Any) -> None:
    cert = x509.load_pem_x509_certificate(served.cacert.read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc <= now - datetime.timedelta(hours=23), cert.not_valid_before_utc
    assert cert.not_valid_after_utc >= now + datetime.timedelta(days=3640)  # still ten years ahead


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (Debian: faketime)")
def test_a_remote_worker_ten_minutes_behind_accepts_a_fresh_certificate(served: Any, tmp_path: Path) -> None:
    with Spool(served.root, environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
    token_file = tmp_path / "token"
    token_file.write_text(served.token("remote-late", "work"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPOOL_")}
    argv = [*SPOOL_CMD, "worker", "--server", served.url, "--cacert", str(served.cacert), "--burst"]
    argv += ["--token-file", str(token_file), "--import", "examples.tasks"]
    ran = subprocess.run(
        ["faketime", "-f", "-10m", *argv],  # the wall clock 10 minutes behind; monotonic as it is
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"},
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert "not yet valid" not in ran.stderr
    assert (served.root / "done" / f"{job_id}.yaml").exists(), ran.stderr
