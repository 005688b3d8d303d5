"""Live job lists and job pages in headless Chromium against a real ``spool serve`` (and a real
``spool worker``): the rows arrive over the dashboard's one event stream, never by a reload.

A list shows a job submitted after it was drawn, and its new state; a job's page shows a running
job's progress as the handler reports it, then its end; the state tabs of the page a bulk action
lands on count the action's moves at once. "Within a second" is a wait with a deadline here (a
test never times speed): the sampler reads once a second, so the page has it within about one.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from spool import Spool, task
from support import ROOT, Procs, wait_until
from test_dashboard_browser import By, text_of

progress_module = pytest.importorskip("spool.progress", reason="this version has no handler progress (spool.progress)")
HERE = Path(__file__).resolve().parent
DEADLINE = 10.0  # seconds: far past the one a sample takes, for a loaded machine


@task("live_steps")
def live_steps(folder: str) -> dict[str, bool]:
    """Report 25%, wait for ``folder``/go, report 75%, wait for ``folder``/end (a minute at most)."""
    for percent, step in ((25, "go"), (75, "end")):
        progress_module.progress(percent / 100, f"step {percent}")
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(folder, step)) and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"ok": True}


def log_in(served: Any, browser: Any, path: str) -> None:
    browser.get(served.url + path)
    browser.find_element(By.ID, "token").send_keys(served.token("boss", "admin"))
    browser.find_element(By.ID, "login").click()
    wait_until(lambda: path in browser.current_url, timeout=15, message=f"{path} after the login")


def mark(browser: Any) -> None:
    """Leave a mark on the page: gone after any reload."""
    browser.execute_script("window.notReloaded = true")


def not_reloaded(browser: Any) -> bool:
    return bool(browser.execute_script("return window.notReloaded === true"))


def row_of(browser: Any, job_id: str) -> tuple[str, str] | None:
    """A listed job's (state, text), read in one step (the stream redraws rows at any time)."""
    found = browser.execute_script(
        "const tr = document.querySelector(`#jobs tr[data-id='${arguments[0]}']`);"
        "return tr ? [tr.dataset.state, tr.textContent] : null",
        job_id,
    )
    return (found[0], found[1]) if found else None


def row_state(browser: Any, job_id: str) -> str | None:
    found = row_of(browser, job_id)
    return found[0] if found else None


def test_a_job_list_shows_a_new_job_and_its_new_state_without_a_reload(served: Any, browser: Any) -> None:
    with Spool(served.root) as sp:
        older = sp.submit("echo", {"n": 0})
    log_in(served, browser, "/jobs")
    wait_until(lambda: browser.find_element(By.ID, "jobs").get_attribute("data-updated"), timeout=DEADLINE)
    mark(browser)
    with Spool(served.root) as sp:
        newer = sp.submit("echo", {"n": 1}, key="live-key")
    wait_until(lambda: row_state(browser, newer) == "pending", timeout=DEADLINE, message="the new job in the list")
    ids = browser.execute_script("return [...document.querySelectorAll('#jobs tr[data-id]')].map(tr => tr.dataset.id)")
    assert ids == [newer, older]  # newest first, as the server draws it
    assert "live-key" in row_of(browser, newer)[1]  # type: ignore[index]
    submitted = browser.execute_script(
        "const t = document.querySelector(`#jobs tr[data-id='${arguments[0]}'] time.ago`);"
        "return [t.textContent, t.title]",
        newer,
    )
    assert submitted[0] == "just now" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", submitted[1]), (
        submitted
    )
    wait_until(lambda: text_of(browser, "tab-pending").endswith("2"), timeout=DEADLINE, message="the pending tab")

    with Spool(served.root) as sp:
        sp.cancel(older)
    wait_until(lambda: row_state(browser, older) == "dead", timeout=DEADLINE, message="the cancelled job's state")
    assert not_reloaded(browser)

    # A list of one state drops a job that leaves it and takes in one that arrives.
    browser.get(served.url + "/jobs?state=pending")
    wait_until(lambda: browser.find_element(By.ID, "jobs").get_attribute("data-updated"), timeout=DEADLINE)
    mark(browser)
    assert row_state(browser, newer) == "pending" and row_state(browser, older) is None
    with Spool(served.root) as sp:
        sp.cancel(newer)
        third = sp.submit("echo", {"n": 2})
    wait_until(
        lambda: row_state(browser, newer) is None and row_state(browser, third) == "pending",
        timeout=DEADLINE,
        message="the pending list to follow",
    )
    assert not_reloaded(browser)


def test_a_jobs_page_shows_its_progress_live_then_its_end(
    served: Any, browser: Any, served_procs: Procs, tmp_path: Path
) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    with Spool(served.root) as sp:
        job_id = sp.submit("live_steps", {"folder": str(steps)})
    log_in(served, browser, f"/jobs/{job_id}")
    assert text_of(browser, "state") == "pending"
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)])}
    served_procs.start("worker", "--import", "test_dashboard_live_browser", env=env, name="worker")

    # Its claim changes its state: the page follows (it draws the new state's whole story).
    wait_until(lambda: "step 25" in text_of(browser, "progress"), timeout=30, message="the first progress")
    assert text_of(browser, "state") == "leased"
    mark(browser)
    (steps / "go").touch()
    wait_until(lambda: "step 75" in text_of(browser, "progress"), timeout=DEADLINE, message="the next progress")
    assert not_reloaded(browser)  # progress is drawn in place
    assert browser.find_element(By.CSS_SELECTOR, "#progress progress").get_attribute("value") == "75"
    (steps / "end").touch()
    wait_until(lambda: text_of(browser, "state") == "done", timeout=30, message="the job's end on its page")
    assert not browser.find_elements(By.ID, "progress") and browser.find_elements(By.ID, "result")

    # The list says how long it ran, and when it was submitted as people say it (the time in a title).
    browser.get(served.url + "/jobs?state=done")
    ran, ago, title = browser.execute_script(
        "const tr = document.querySelector(`#jobs tr[data-id='${arguments[0]}']`);"
        "const t = tr.querySelector('time.ago');"
        "return [tr.querySelector('td.duration').textContent, t.textContent, t.title]",
        job_id,
    )
    assert re.fullmatch(r"\d+\.\d s|\d+ min \d+ s", ran), ran
    assert re.fullmatch(r"just now|\d+ (s|min) ago", ago) and title.endswith("Z"), (ago, title)


def test_the_tabs_count_a_bulk_requeue_on_the_page_it_lands_on(served: Any, browser: Any) -> None:
    with Spool(served.root) as sp:
        ids = [sp.submit("echo", {"n": n}) for n in range(6)]
        for job_id in ids:
            sp.cancel(job_id)
    log_in(served, browser, "/jobs?state=dead")
    wait_until(lambda: text_of(browser, "tab-dead").endswith("6"), timeout=DEADLINE, message="six dead")
    browser.find_element(By.ID, "bulk-requeue").click()
    wait_until(lambda: browser.find_elements(By.ID, "bulk-confirm"), timeout=15, message="the confirm page")
    browser.find_element(By.ID, "bulk-confirm").click()
    wait_until(lambda: "requeued 6" in text_of(browser, "note"), timeout=15, message="the bulk requeue's note")
    # Read at once, before any stream message: the page was drawn with the counts after the moves.
    counts = browser.execute_script(
        "return [...document.querySelectorAll('.tabs .n[data-state]')].map(n => [n.dataset.state, n.textContent])"
    )
    assert dict(counts)["dead"] == "0" and dict(counts)["pending"] == "6", counts
    assert not browser.find_elements(By.CSS_SELECTOR, "#jobs tr[data-id]")
