"""Every dashboard page at a phone's size (390 x 844) and a laptop's (1,400 x 900), light and dark,
in headless Chromium against a real ``spool serve`` and a real ``spool worker``: no page scrolls
sideways (``scrollWidth <= innerWidth``), whatever it holds (a failed job's long traceback and
unbroken tokens, a chain of three, several schedules, long keys, worker and queue names).

Tables scroll inside their own box; the schedules' rows line up and their buttons can be reached;
a worker's name stays on one line; the chain graph is drawn at its own size (scrolling in its box)
rather than shrunk to unreadable. Screenshots go under the test's tmp_path, and to
``$SPOOL_SCREENSHOTS`` when it is set (docs/images/ holds a few, made that way).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool import Spool, current, queues, task
from spool.schedule import folder as scheduling
from support import ROOT, Procs, wait_until
from test_dashboard_browser import By, Shots, chromium, spki_pin

HERE = Path(__file__).resolve().parent
SIZES = {"phone": (390, 844), "laptop": (1400, 900)}
TOKEN = "/srv/uploads/" + "a1b2c3d4e5f6" * 30  # one unbroken token, 373 characters
SHOTS = {"/": "overview", "/jobs?state=dead": "dead-jobs", "/jobs/ID": "failed-job", "/schedules": "schedules"}
SHOTS |= {"/busy": "busy", "/purge?older_than=0s&state=dead": "purge"}
WORKER = "render-farm-eu-west-1-worker-07"


@task("long_failure")
def long_failure(depth: int, path: str) -> None:
    """Fail with a deep traceback whose last line is one long unbroken token."""
    if depth > current().attempt:
        long_failure(depth - 1, path)
    raise RuntimeError(f"cannot open {path}")


@pytest.fixture
def browser(served: Any, tmp_path: Path) -> Iterator[Any]:
    driver = chromium(tmp_path / "chromium-profile", spki_pin(served.cacert))
    try:
        yield driver
    finally:
        driver.quit()


def size(driver: Any, width: int, height: int) -> None:
    """The viewport itself (not the window around it) set to width x height CSS pixels."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def scheme(driver: Any, value: str) -> None:
    features = [{"name": "prefers-color-scheme", "value": value}]
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": features})


def overflow(driver: Any) -> tuple[int, int]:
    return driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")


def open_page(driver: Any, url: str) -> None:
    driver.get(url)
    wait_until(
        lambda: driver.execute_script("return document.readyState") == "complete",
        timeout=15,
        message=f"{url} to load",
    )


@pytest.fixture
def procs(served: Any, tmp_path: Path) -> Iterator[Procs]:
    started = Procs(served.root, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def make_a_busy_spool(served: Any, procs: Procs) -> str:
    """A failed job in the middle of a chain of three, pending, waiting and leased jobs, several
    schedules, a paused queue and a worker with a long name; returns the failed job's id."""
    procs.start("coordinator", name="coordinator")
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "tests"), str(ROOT)])}
    procs.start(
        "worker", "--import", "test_dashboard_responsive", "--import", "examples.tasks", "--name", WORKER, env=env
    )
    with Spool(served.root) as sp:
        queues.set_limits(sp, "thumbnails-overnight", paused=True)
        root = sp.submit("echo", {"step": "fetch"}, key="import-" + "k" * 180)
        failed = sp.submit("long_failure", {"depth": 12, "path": TOKEN}, depends_on=[root], max_tries=1)
        child = sp.submit("echo", {"step": "index"}, depends_on=[failed])
        held = sp.submit("echo", {"why": "queue paused"}, queue="thumbnails-overnight", key="held-" + "q" * 120)
        sp.submit("echo", {"after": held}, depends_on=[held])
        for name, every in (("hourly-report", "1h"), ("nightly-cleanup-of-old-uploads", "24h"), ("tick", "30s")):
            fields = scheduling.schedule_fields(
                cron=None, tz=None, every=every, task="echo", args={"schedule": name, "path": TOKEN},
                priority=None, max_tries=None, timeout=None,
            )  # fmt: skip
            scheduling.add(sp, name, fields)
    wait_until(lambda: _state(served, child) == "dead", timeout=60, message="the chain to end")
    with Spool(served.root) as sp:
        running = sp.submit("sleep", {"seconds": 120})
    wait_until(lambda: _state(served, running) == "leased", timeout=30, message="a job to run")
    return failed


def test_no_page_scrolls_sideways_on_a_phone_or_a_laptop_light_or_dark(
    served: Any, browser: Any, procs: Procs, tmp_path: Path
) -> None:
    shots = Shots(browser, tmp_path / "screenshots")
    failed = make_a_busy_spool(served, procs)
    for name, (width, height) in SIZES.items():
        size(browser, width, height)
        open_page(browser, served.url + "/login")
        assert overflow(browser)[0] <= width, f"/login at {name}: {overflow(browser)}"
    browser.find_element(By.ID, "token").send_keys(served.token("boss", "admin"))
    browser.find_element(By.ID, "login").click()
    wait_until(lambda: browser.find_elements(By.ID, "live"), timeout=15, message="the overview")

    pages = ["/", "/jobs", *(f"/jobs?state={s}" for s in ("pending", "waiting", "leased", "done", "dead"))]
    pages += [f"/jobs/{failed}", "/bulk?action=requeue", "/bulk?action=cancel", "/schedules", "/queues"]
    pages += ["/workers", "/busy", "/purge", "/purge?older_than=0s&state=dead"]
    wide: list[str] = []
    for dark in (False, True):
        scheme(browser, "dark" if dark else "light")
        for name, (width, height) in SIZES.items():
            size(browser, width, height)
            for page in pages:
                open_page(browser, served.url + page)
                scroll, inner = overflow(browser)
                assert inner == width
                if scroll > inner:
                    wide.append(f"{page} at {name}{' dark' if dark else ''}: {scroll} px wide")
                if not dark and page.replace(failed, "ID") in SHOTS:
                    shots.take(f"{name}-{SHOTS[page.replace(failed, 'ID')]}")
                if page == "/schedules":
                    wide += schedule_rows_astray(browser, name)
                if page == "/workers":
                    wide += more_than_one_line(browser, "#local-workers tbody td:first-child")
                if page.startswith("/jobs/"):
                    wide += chain_unreadable(browser, name)
                    wide += more_than_one_line(browser, "#attempts tr.attempt td:nth-child(2)")
                    if not dark:
                        browser.execute_script("document.getElementById('chain-title').scrollIntoView()")
                        shots.take(f"{name}-chain")
        background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert (background == "rgb(21, 23, 26)") == dark, background
    assert not wide, "pages that scroll sideways or squeeze:\n" + "\n".join(wide)


def schedule_rows_astray(driver: Any, name: str) -> list[str]:
    """Every cell of a schedule's row ends where the row does, and its buttons can be scrolled to."""
    rows = driver.execute_script(
        """return [...document.querySelectorAll('#schedules tbody tr')].map(tr => {
             const row = tr.getBoundingClientRect();
             return [...tr.children].map(td => Math.abs(td.getBoundingClientRect().bottom - row.bottom));
           })"""
    )
    problems = [] if rows and all(max(cells) < 1 for cells in rows) else [f"schedule rows at {name}: {rows}"]
    for button in driver.find_elements(By.CSS_SELECTOR, "#schedules button"):
        driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'nearest'})", button)
        left, right = driver.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right]", button
        )
        if not 0 <= left < right <= driver.execute_script("return window.innerWidth"):
            problems.append(f"a schedule's button can't be reached at {name}: {left}-{right}")
    return problems


def more_than_one_line(driver: Any, selector: str) -> list[str]:
    cells = driver.find_elements(By.CSS_SELECTOR, selector)
    problems = [] if cells else [f"no {selector}"]
    for cell in cells:
        lines = driver.execute_script(
            """const range = document.createRange();
               range.selectNodeContents(arguments[0]);
               return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size""",
            cell,
        )
        if lines != 1:
            problems.append(f"{cell.text!r} takes {lines} lines")
    return problems


def chain_unreadable(driver: Any, name: str) -> list[str]:
    """The chain's SVG is drawn at its own size: text no smaller than the stylesheet says."""
    chain = driver.find_element(By.ID, "chain")
    drawn, own = driver.execute_script(
        "const c = arguments[0]; return [c.getBoundingClientRect().width, c.viewBox.baseVal.width]", chain
    )
    assert len(driver.find_elements(By.CSS_SELECTOR, "#chain g.node")) >= 3
    return [] if drawn >= own * 0.99 else [f"the chain is shrunk to {drawn / own:.0%} at {name}"]


def _state(served: Any, job_id: str) -> str | None:
    with Spool(served.root) as sp:
        state = sp.state(job_id)
        return state.value if state else None
