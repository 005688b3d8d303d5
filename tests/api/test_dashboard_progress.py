"""A running job's progress on its page and in the list (``spool.progress``: a handler reports it,
it rides on the heartbeat). Skipped, saying so, in a version without handler progress."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from spool import Spool, task
from support import ROOT, Procs, wait_until

progress_module = pytest.importorskip("spool.progress", reason="this version has no handler progress (spool.progress)")
HERE = Path(__file__).resolve().parent


@task("dash_progress")
def dash_progress(release: str) -> dict[str, bool]:
    """Report progress, then wait (at most a minute) until the test creates ``release``."""
    progress_module.progress(0.42, "resizing <img> 42 of 100")
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"released": os.path.exists(release)}


def test_a_running_jobs_progress_shows_on_its_page_and_in_the_list(served: Any, tmp_path: Path) -> None:
    from test_dashboard import Browser

    release = tmp_path / "release"
    procs = Procs(served.root, tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)])}
    try:
        procs.start("worker", "--import", "test_dashboard_progress", env=env, name="worker")
        with Spool(served.root) as sp:
            job_id = sp.submit("dash_progress", {"release": str(release)})
        browser = Browser(served)
        browser.login(served.token("viewer", "submit"))
        page = wait_until(
            lambda: (p := browser.get(f"/jobs/{job_id}")) and 'id="progress"' in p.body and p,
            timeout=30,
            message="the job's progress on its page",
        )
        assert 'value="42"' in page.body and "resizing &lt;img&gt; 42 of 100" in page.body
        listed = browser.get("/jobs?state=leased").body
        assert job_id in listed and "42%" in listed
        release.touch()
        wait_until(lambda: "done" in browser.get(f"/jobs/{job_id}").body, timeout=30, message="the job to finish")
        assert 'id="progress"' not in browser.get(f"/jobs/{job_id}").body
    finally:
        procs.kill_all()
