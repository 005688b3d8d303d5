"""Several ``spool serve`` processes on one spool (issue 21's control plane), as real processes:

- a dashboard login made through one server opens pages and posts forms through another (one per
  port, as behind a proxy), a logout through either ends it on both, and a revoked token's
  session ends on both;
- two servers sharing one port with ``--reuse-port``: both listen, and when one is SIGKILLed the
  other goes on answering on that port, with the sessions made before the kill;
- the session table keeps no cookie: a copy of ``tls/sessions.sqlite3`` opens nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_dashboard import Browser

from spool import Spool
from support import run_spool, wait_until

Served = Any  # tests/api/conftest.py's Served: a running ``spool serve``


@pytest.fixture
def servers(serve_spool: Callable[..., Served], tmp_path: Path) -> Callable[..., Served]:
    """``servers(root, port, reuse_port)``: a ``spool serve --self-signed`` on the spool at ``root``
    (made if new), on ``port`` (0: any), with ``--reuse-port`` or not."""

    def start(root: Path, port: int = 0, reuse_port: bool = False) -> Served:
        if not root.exists():
            Spool.init(root, environ={}).close()
        return serve_spool(root=root, port=port, serve_args=("--reuse-port",) if reuse_port else ())

    return start


def on(browser: Browser, served: Served) -> Browser:
    """The same browser (its cookie), its next requests routed to ``served``."""
    moved = Browser(served)
    moved.cookie = browser.cookie
    return moved


def test_a_login_through_one_server_holds_on_another_and_a_logout_or_revoke_ends_it_on_both(
    servers: Callable[..., Served], tmp_path: Path
) -> None:
    served = servers(tmp_path / "spool")
    other = servers(served.root)
    assert other.port != served.port
    token = served.token("boss", "admin")
    browser = Browser(served)
    browser.login(token)
    there = on(browser, other)
    page = there.get("/")
    assert page.status == 200 and "boss" in page.body, page
    # A form of one server's page is taken by the other: the CSRF token is the session's.
    job = served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "args": {}})
    assert job.status == 201, job
    csrf = browser.csrf(f"/jobs/{job.json['id']}")
    assert there.post(f"/jobs/{job.json['id']}/cancel", {"csrf": csrf}).status == 303
    assert served.call("GET", f"/v1/jobs/{job.json['id']}", token=token).json["state"] == "dead"
    # A logout through the second ends the session on the first too.
    assert there.post("/logout", {"csrf": there.csrf()}).status == 303
    assert browser.get("/").status == 303
    # A revoked token's session ends on both servers.
    browser.login(token)
    assert on(browser, other).get("/").status == 200
    assert run_spool("token", "revoke", "boss", spool=served.root).returncode == 0
    assert on(browser, other).get("/").status == 303 and browser.get("/").status == 303


def test_two_servers_share_a_port_with_reuse_port_and_one_goes_on_when_the_other_is_killed(
    servers: Callable[..., Served], tmp_path: Path
) -> None:
    first = servers(tmp_path / "spool", reuse_port=True)
    other = servers(first.root, first.port, reuse_port=True)  # bound to the same port, or it exits
    assert other.port == first.port
    token = first.token("boss", "admin")
    browsers = [Browser(first) for _ in range(4)]
    for browser in browsers:
        browser.login(token)  # each login a new connection: the kernel picks the server
    first.kill()
    for browser in browsers:  # every session made before the kill, whichever server made it
        page = on(browser, other).get("/")
        assert page.status == 200 and "boss" in page.body, page
    replies = [other.call("GET", "/healthz").status for _ in range(10)]
    assert replies == [200] * 10


def test_the_session_table_keeps_only_hashes_of_the_cookies(served: Served) -> None:
    token = served.token("viewer", "submit")
    browser = Browser(served)
    browser.login(token)
    assert browser.cookie is not None
    session_id = browser.cookie.split("=", 1)[1]
    table = served.root / "tls" / "sessions.sqlite3"
    assert table.stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(table) as db:
        rows = db.execute("SELECT id_sha256 FROM sessions").fetchall()
    assert len(rows) == 1 and session_id not in rows[0][0] and len(rows[0][0]) == 64
    assert session_id.encode() not in table.read_bytes()
    wait_until(lambda: browser.get("/").status == 200, 10, message="the session still opens pages")
