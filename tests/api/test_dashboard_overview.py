"""The overview over real HTTPS says what ``spool stats`` says: a task nobody handles, the oldest
ready job's age, no coordinator, the workers alive (local and remote counted apart); and it has a
table per task and per queue (jobs by state, ready, claims and failures in the last minute, the
oldest ready), against a real local worker and a real remote one."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool import Spool, task
from support import ROOT, Procs, wait_until
from test_dashboard import Browser
from test_dashboard_busy import start_remote

HERE = Path(__file__).resolve().parent


@task("tally_ok")
def tally_ok(fail: bool = False) -> str:
    if fail:
        raise RuntimeError("asked to fail")
    return "ok"


@pytest.fixture
def remote() -> Iterator[list[subprocess.Popen[bytes]]]:
    from support import kill_groups

    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        kill_groups(started)


def cells(page: Any, table: str, name: str) -> dict[str, str]:
    """column class -> text of the row ``name`` of the overview's table ``table``."""
    body = re.search(rf'<table class="tally" id="{table}">(.*?)</table>', page.body, re.S)
    assert body, page.body
    row = re.search(rf'<tr data-name="{re.escape(name)}"[^>]*>(.*?)</tr>', body.group(1), re.S)
    assert row, body.group(1)
    found = re.findall(r'<td class="([a-z]+)[^"]*">(.*?)</td>', row.group(1), re.S)
    return {cls: re.sub(r"<[^>]+>", "", text).strip() for cls, text in found}


def test_the_overview_warns_as_stats_does_and_counts_per_task_and_queue(
    served: Any, served_procs: Procs, remote: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)])}
    served_procs.start("worker", "--import", "test_dashboard_overview", "--name", "near-1", env=env, name="worker")
    start_remote(served, tmp_path, remote, "far-1", "--queues", "elsewhere")
    with Spool(served.root) as sp:
        done = [sp.submit("tally_ok", {}, queue="busyq") for _ in range(2)]
        failed = sp.submit("tally_ok", {"fail": True}, queue="busyq", max_tries=1)
        orphans = [sp.submit("nobody_handles", {"n": n}) for n in range(3)]
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))

    def settled() -> Any:
        page = browser.get("/")
        alive = "2 workers alive (1 local, 1 remote)" in page.body
        ok = cells(page, "tasks", "tally_ok")
        return page if alive and ok["done"] == "2" and ok["dead"] == "1" else None

    page = wait_until(settled, timeout=60, message="both workers alive and the jobs run")
    assert "no live worker handles task &#39;nobody_handles&#39;" in page.body and "(3 ready)" in page.body
    assert 'id="warn-coordinator"' in page.body  # none runs in this test
    assert re.search(r'oldest ready <b id="oldest-ready">\d+s</b>', page.body)
    assert "3 ready" in page.body
    ok = cells(page, "tasks", "tally_ok")
    assert ok["done"] == "2" and ok["dead"] == "1" and ok["claims"] == "3" and ok["failures"] == "1", ok
    assert ok["pending"] == "0" and ok["oldest"] == "", ok
    nobody = cells(page, "tasks", "nobody_handles")
    assert nobody["pending"] == "3" and nobody["ready"] == "3" and nobody["claims"] == "0", nobody
    assert re.fullmatch(r"\d+s", nobody["oldest"]), nobody
    busy = cells(page, "queue-tally", "busyq")
    assert busy["done"] == "2" and busy["dead"] == "1" and busy["claims"] == "3" and busy["failures"] == "1", busy
    default = cells(page, "queue-tally", "default")
    assert default["ready"] == "3", default
    assert 'href="/jobs?task=tally_ok"' in page.body and 'href="/queues#queue-busyq"' in page.body
    with Spool(served.root) as sp:
        assert [sp.state(job_id).value for job_id in done] == ["done", "done"]  # type: ignore[union-attr]
        assert sp.state(failed).value == "dead"  # type: ignore[union-attr]
        assert all(sp.state(job_id).value == "pending" for job_id in orphans)  # type: ignore[union-attr]
