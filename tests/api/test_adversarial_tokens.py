"""The token store attacked from the disk: a tokens.yaml or a tls/ that is a symlink to a file
someone else wrote. Neither is ever read through, nor written through; the CLI says what is wrong."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.base.errors import SpoolError
from spool.tokens import TokenStore
from support import run_spool

PLANTED = "planted-token-of-the-attacker"


def planted_file(where: Path) -> Path:
    digest = hashlib.sha256(PLANTED.encode()).hexdigest()
    where.write_text(
        f"tokens:\n- name: evil\n  role: admin\n  sha256: {digest}\n"
        "  created: 2026-01-01T00:00:00.000Z\n  last_used: null\n"
    )
    return where


def test_a_symlinked_tokens_file_is_never_read_through_nor_written_through(spool_dir: Path, tmp_path: Path) -> None:
    """What held: the planted admin token is never accepted; ``token list`` and ``token add`` say
    the file is a link and write nothing (the link's target is as it was)."""
    target = planted_file(tmp_path / "outside.yaml")
    before = target.read_bytes()
    (spool_dir / "tls").mkdir(exist_ok=True)
    (spool_dir / "tls" / "tokens.yaml").symlink_to(target)
    with Spool(spool_dir, environ={}) as sp:
        with pytest.raises(SpoolError, match="symbolic link"):
            TokenStore(sp).verify(PLANTED)  # refused, not read
    listed = run_spool("token", "list", spool=spool_dir)
    assert listed.returncode != 0 and "evil" not in listed.stdout, listed
    added = run_spool("token", "add", "ops", "--role", "admin", spool=spool_dir)
    assert added.returncode != 0 and "symbolic link" in added.stderr, added
    assert target.read_bytes() == before
    tokens = spool_dir / "tls" / "tokens.yaml"
    tokens.unlink()  # what the operator does once told
    assert run_spool("token", "add", "ops", "--role", "admin", spool=spool_dir).returncode == 0
    assert not tokens.is_symlink() and stat.S_IMODE(tokens.stat().st_mode) == 0o600
    with Spool(spool_dir, environ={}) as sp:
        assert TokenStore(sp).verify(PLANTED) is None
        assert [info.name for info in TokenStore(sp).list()] == ["ops"]


def test_a_symlinked_tls_folder_is_refused(spool_dir: Path, tmp_path: Path) -> None:
    """What held: a tls/ that is a link to a folder someone else filled is refused by name."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted_file(elsewhere / "tokens.yaml")
    tls = spool_dir / "tls"
    if tls.exists():
        shutil.rmtree(tls)
    os.symlink(elsewhere, tls)
    with Spool(spool_dir, environ={}) as sp, pytest.raises(SpoolError, match="not a plain folder"):
        TokenStore(sp).verify(PLANTED)
    listed = run_spool("token", "list", spool=spool_dir)
    assert listed.returncode != 0 and "not a plain folder" in listed.stderr, listed
    served = run_spool("serve", "--self-signed", "--port", "0", spool=spool_dir, timeout=30)
    assert served.returncode != 0 and "not a plain folder" in served.stderr, served
    assert sorted(p.name for p in elsewhere.iterdir()) == ["tokens.yaml"]  # no key or cert made there


def test_a_server_whose_tokens_file_turns_into_a_link_refuses_everyone_without_leaking(served: Any) -> None:
    """What held: fail closed. Every call answers a bare JSON 500 (no traceback, no path, nothing
    of the file); the server's log names neither token; /healthz still answers."""
    token = served.token("producer", "submit")
    assert served.call("GET", "/v1/jobs", token=token).status == 200
    tokens = served.root / "tls" / "tokens.yaml"
    outside = planted_file(served.root.parent / "outside.yaml")
    tokens.unlink()
    tokens.symlink_to(outside)
    for presented in (token, PLANTED):
        reply = served.call("GET", "/v1/jobs", token=presented)
        assert reply.status == 500 and reply.json == {
            "error": "internal error (InvalidJob); see the server's log",
            "where": None,
        }, reply
    assert served.call("GET", "/healthz").status == 200
    log = served.log()
    assert token not in log and PLANTED not in log and "Bearer" not in log
