"""Tokens: ``spool token add|list|revoke``, what tls/tokens.yaml holds (hashes only, 0600), a revoke
taking effect at the server's next request, last use recorded, and no token in the server's log."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.tokens import TokenStore
from support import run_spool, wait_until


def test_add_prints_the_token_once_as_its_last_word_and_list_never_shows_it(spool_dir: Path) -> None:
    added = run_spool("token", "add", "w-1", "--role", "work", spool=spool_dir)
    assert added.returncode == 0, added.stderr
    token = added.stdout.split()[-1]
    assert len(token) >= 43 and "w-1" in added.stdout and "work" in added.stdout
    listed = run_spool("token", "list", spool=spool_dir)
    assert listed.returncode == 0 and token not in listed.stdout
    header, row = listed.stdout.splitlines()
    assert header.split() == ["name", "role", "created", "last", "used"] and row.split()[:2] == ["w-1", "work"]
    assert row.split()[-1] == "never"
    as_json = json.loads(run_spool("token", "list", "--json", spool=spool_dir).stdout)
    assert as_json == [{"name": "w-1", "role": "work", "created": as_json[0]["created"], "last_used": None}]
    made = json.loads(run_spool("--json", "token", "add", "root", "--role", "admin", spool=spool_dir).stdout)
    assert made["name"] == "root" and made["role"] == "admin" and len(made["token"]) >= 43


def test_tokens_yaml_is_0600_and_holds_hashes_not_tokens(spool_dir: Path) -> None:
    tokens = [
        run_spool("token", "add", f"t{n}", "--role", "submit", spool=spool_dir).stdout.split()[-1] for n in (1, 2)
    ]
    path = spool_dir / "tls" / "tokens.yaml"
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    for token in tokens:
        assert token not in text and hashlib.sha256(token.encode()).hexdigest() in text
    assert not list((spool_dir / "tmp").iterdir())


def test_bad_names_roles_and_revokes_are_refused(spool_dir: Path) -> None:
    assert run_spool("token", "add", "w-1", "--role", "work", spool=spool_dir).returncode == 0
    taken = run_spool("token", "add", "w-1", "--role", "admin", spool=spool_dir)
    assert taken.returncode == 2 and "exists" in taken.stderr
    assert run_spool("token", "add", "../x", "--role", "work", spool=spool_dir).returncode == 2
    assert run_spool("token", "add", "ok", "--role", "root", spool=spool_dir).returncode == 2
    missing = run_spool("token", "revoke", "nobody", spool=spool_dir)
    assert missing.returncode == 3 and "no token named 'nobody'" in missing.stderr
    assert run_spool("token", "revoke", "w-1", spool=spool_dir).stdout.strip() == "token w-1 revoked"
    assert run_spool("token", "list", "--json", spool=spool_dir).stdout.strip() == "[]"


def test_a_revoke_takes_effect_at_the_next_request_without_a_restart(served: Any) -> None:
    token = served.token("producer", "submit")
    keep = served.token("other", "submit")
    assert served.call("GET", "/v1/jobs", token=token).status == 200
    revoked = run_spool("token", "revoke", "producer", spool=served.root)
    assert revoked.returncode == 0, revoked.stderr
    after = served.call("GET", "/v1/jobs", token=token)
    assert after.status == 401 and "revoked" in after.json["error"]
    assert served.call("GET", "/v1/jobs", token=keep).status == 200
    again = served.token("producer", "submit")  # the name can be given out again, with a new token
    assert again != token and served.call("GET", "/v1/jobs", token=again).status == 200
    assert served.call("GET", "/v1/jobs", token=token).status == 401


def test_last_use_is_recorded_and_no_token_is_logged(served: Any) -> None:
    token = served.token("producer", "submit")
    assert served.call("POST", "/v1/jobs", token=token, json={"task": "echo"}).status == 201
    served.call("GET", "/v1/jobs", token="wrong-" + token)

    def last_used() -> str | None:
        listed = json.loads(run_spool("token", "list", "--json", spool=served.root).stdout)
        return listed[0]["last_used"]

    assert wait_until(last_used, timeout=10, message="the first use to be written")
    served.kill()
    log = served.log()
    assert "POST /v1/jobs" in log and token not in log and "Bearer" not in log


def test_a_revoke_in_another_store_is_seen_and_a_last_use_mark_never_revives_it(sp: Spool) -> None:
    server_side, cli_side = TokenStore(sp), TokenStore(sp)
    token = cli_side.add("w-1", "work")
    info = server_side.verify(token)
    assert info is not None and info.name == "w-1" and info.role == "work" and info.last_used is not None
    assert cli_side.revoke("w-1") is True
    assert server_side.flush_last_used(force=True) is True  # marks a use noted before the revoke
    assert server_side.verify(token) is None and cli_side.list() == []
    assert cli_side.revoke("w-1") is False


def test_concurrent_adds_lose_none(sp: Spool) -> None:
    stores = [TokenStore(sp) for _ in range(8)]
    threads = [threading.Thread(target=store.add, args=(f"t{n}", "submit")) for n, store in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(info.name for info in TokenStore(sp).list()) == sorted(f"t{n}" for n in range(8))


def test_busy_use_does_not_rewrite_the_file_each_request(served: Any) -> None:
    token = served.token("producer", "submit")
    path = served.root / "tls" / "tokens.yaml"
    assert served.call("GET", "/v1/jobs", token=token).status == 200
    wait_until(lambda: "last_used: '20" in path.read_text(), timeout=10, message="the first use to be written")
    written = path.stat().st_ino
    for _ in range(20):
        assert served.call("GET", "/v1/jobs", token=token).status == 200
    # A negative: nothing may happen for a while. The writer looks once a second, so three of its
    # looks pass here; the next write is due a minute after the first.
    time.sleep(3.0)
    assert path.stat().st_ino == written


def test_a_work_token_may_not_take_a_local_workers_name(spool_dir: Path) -> None:
    """A work token's name is its worker's name. A local worker of that name has a lock file the
    coordinator reads as the holder's life, so sharing it would let a freed lock expire the
    remote worker's leases, and let either act on the other's leases."""
    worker = run_spool("worker", "--name", "builder", "--burst", spool=spool_dir)
    assert worker.returncode == 0, worker.stderr
    refused = run_spool("token", "add", "builder", "--role", "work", spool=spool_dir)
    assert refused.returncode == 2 and "local worker named 'builder'" in refused.stderr, refused.stderr
    assert run_spool("token", "add", "builder", "--role", "submit", spool=spool_dir).returncode == 0  # holds no lease
    assert run_spool("token", "add", "builder-2", "--role", "work", spool=spool_dir).returncode == 0


def test_a_local_worker_may_not_take_a_work_tokens_name(spool_dir: Path) -> None:
    """The other way round: `spool worker --name X` while a work token X exists is refused."""
    assert run_spool("token", "add", "remote-x", "--role", "work", spool=spool_dir).returncode == 0
    refused = run_spool("worker", "--name", "remote-x", "--burst", spool=spool_dir)
    assert refused.returncode == 2 and "work token of that name" in refused.stderr, refused.stderr
    assert run_spool("token", "add", "viewer", "--role", "submit", spool=spool_dir).returncode == 0
    assert run_spool("worker", "--name", "viewer", "--burst", spool=spool_dir).returncode == 0


def test_a_worker_started_from_python_keeps_the_same_rule(spool_dir: Path) -> None:
    """The rule lives in the worker, not only in the command line: ``Worker(sp, name=X)`` from
    Python is refused too (it used to be checked by ``spool worker`` alone)."""
    from spool.base.errors import UsageError
    from spool.runner.worker import Worker

    assert run_spool("token", "add", "remote-y", "--role", "work", spool=spool_dir).returncode == 0
    with Spool(spool_dir, environ={}) as sp:
        with pytest.raises(UsageError, match="work token of that name"):
            Worker(sp, name="remote-y", burst=True)
        assert Worker(sp, name="local-y", burst=True).run() == 0


def test_add_with_out_writes_the_token_alone_to_a_new_0600_file_and_prints_no_secret(
    spool_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ops.token"
    ran = run_spool("token", "add", "ops", "--role", "admin", "--out", str(out), spool=spool_dir)
    assert ran.returncode == 0, ran.stderr
    token = out.read_text().strip()
    assert out.stat().st_mode & 0o777 == 0o600 and len(token) >= 40
    assert token not in ran.stdout + ran.stderr and str(out) in ran.stdout
    with Spool(spool_dir, environ={}) as sp:
        found = TokenStore(sp).verify(token)
        assert found is not None and (found.name, found.role) == ("ops", "admin")
    # Never replaced: a second add to the same file is refused before any token is made.
    again = run_spool("token", "add", "ops2", "--role", "submit", "--out", str(out), spool=spool_dir)
    assert again.returncode == 2 and "exists" in again.stderr and "Traceback" not in again.stderr
    assert out.read_text().strip() == token
    with Spool(spool_dir, environ={}) as sp:
        assert [info.name for info in TokenStore(sp).list()] == ["ops"]
    # A name taken: no file is left behind.
    taken = tmp_path / "taken.token"
    refused = run_spool("token", "add", "ops", "--role", "admin", "--out", str(taken), spool=spool_dir)
    assert refused.returncode != 0 and not taken.exists(), refused.stderr
