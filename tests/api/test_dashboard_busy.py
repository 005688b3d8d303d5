"""The busy view (``/busy``) over real HTTPS: what runs now, with its task, queue, worker (a local
``spool worker`` and a remote one over the API), start, runtime and progress; linked from the
nav, readable by every role."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from support import ROOT, SPOOL_CMD, Procs, kill_groups, wait_until
from test_dashboard import Browser

HERE = Path(__file__).resolve().parent


@pytest.fixture
def remote(served: Any, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        kill_groups(started)


def start_remote(served: Any, tmp_path: Path, started: list[subprocess.Popen[bytes]], name: str, *extra: str) -> None:
    token = served.token(name, "work")
    argv = ["worker", "--server", served.url, "--token", token, "--cacert", str(served.cacert)]
    with open(tmp_path / f"{name}.log", "wb") as log:
        started.append(
            subprocess.Popen(
                [*SPOOL_CMD, *argv, "--import", "examples.tasks", *extra],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )
        )


def busy_rows(page: Any) -> dict[str, str]:
    """job id -> its row's HTML, for every row of the busy table."""
    return dict(re.findall(r'<tr data-id="([^"]+)" data-state="leased">(.*?)</tr>', page.body, re.S))


def test_the_busy_view_shows_what_runs_now_on_local_and_remote_workers(
    served: Any, served_procs: Procs, remote: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)])}
    served_procs.start("worker", "--import", "test_dashboard_progress", "--name", "here-1", env=env, name="worker")
    start_remote(served, tmp_path, remote, "far-away-7")
    with Spool(served.root) as sp:
        local_job = sp.submit("dash_progress", {"release": str(release)}, queue="default")
        remote_job = sp.submit("sleep", {"seconds": 60}, queue="slow")
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))

    def both_running() -> dict[str, str] | None:
        rows = busy_rows(browser.get("/busy"))
        ready = local_job in rows and "42%" in rows[local_job] and remote_job in rows
        return rows if ready else None

    rows = wait_until(both_running, timeout=60, message="both jobs on the busy view")
    assert "dash_progress" in rows[local_job] and "here-1" in rows[local_job] and "where-local" in rows[local_job]
    assert "resizing &lt;img&gt; 42 of 100" in rows[local_job]
    assert "sleep" in rows[remote_job] and "far-away-7" in rows[remote_job] and "where-remote" in rows[remote_job]
    assert 'href="/queues#queue-slow"' in rows[remote_job]
    for row in rows.values():
        assert re.search(r'data-started="[0-9.]+"', row) and "running " in row
        assert re.search(r'<time class="ago" datetime="\d{4}-\d\d-\d\dT[0-9:.]+Z"', row)
    page = browser.get("/busy")
    assert 'id="nav-busy"' in page.body and "2 running" in page.body
    release.touch()
    wait_until(lambda: local_job not in busy_rows(browser.get("/busy")), timeout=30, message="the job to end")


def test_the_busy_view_says_when_nothing_runs(served: Any) -> None:
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    page = browser.get("/busy")
    assert page.status == 200 and "nothing runs now" in page.body and "0 running" in page.body


def test_in_a_browser_the_busy_view_shows_a_job_that_starts_and_counts_its_runtime(
    served: Any, served_procs: Procs, tmp_path: Path
) -> None:
    from test_dashboard_browser import chromium, spki_pin
    from test_dashboard_live_browser import log_in

    served_procs.start("worker", "--import", "examples.tasks", "--name", "here-2", name="worker")
    driver = chromium(tmp_path / "chromium-profile", spki_pin(served.cacert))
    try:
        log_in(served, driver, "/busy")
        with Spool(served.root) as sp:
            job_id = sp.submit("sleep", {"seconds": 60})

        def runtime() -> str:
            found = driver.execute_script(
                "const td = document.querySelector(`#busy tr[data-id='${arguments[0]}'] td.duration`);"
                "return td ? td.textContent : ''",
                job_id,
            )
            return str(found or "")

        first = wait_until(runtime, timeout=20, message="the job on the busy view, without a reload by hand")
        assert str(first).startswith("running ")
        wait_until(lambda: runtime() not in ("", first), timeout=15, message="its runtime to count on")
    finally:
        driver.quit()
