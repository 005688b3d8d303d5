"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``)
driven by Selenium, against a real ``spool serve`` and a real ``spool run`` on the same spool.

It logs in with a token, watches the done count rise while jobs run (the numbers arrive by
server-sent events), opens a failed job and sees its traceback, requeues it with a click and sees
it run again, and filters the list by task. Screenshots go to ``screenshots/`` under the test's
tmp_path, and are copied to ``$SPOOL_SCREENSHOTS`` when it is set.

The browser trusts the server's self-signed certificate by its public key alone
(``--ignore-certificate-errors-spki-list`` with the SHA-256 of this certificate's key): any other
certificate, or a host-name mismatch with another key, still fails.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from spool import Spool
from support import ROOT, SPOOL_CMD, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        "headless Chromium is not installed (Debian: apt-get install chromium chromium-driver)", allow_module_level=True
    )

from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

SLEEP_JOBS = 24
# Read at import: the suite's clean_environ fixture removes every SPOOL_* variable before a test runs.
COPY_SHOTS_TO = os.environ.get("SPOOL_SCREENSHOTS")


def spki_pin(cert_path: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)): what Chromium's SPKI allow-list takes."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def chromium(profile: Path, pin: str) -> Any:
    """Headless Chromium that trusts, besides the system's CAs, only the key ``pin`` names."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        f"--user-data-dir={profile}",
        f"--ignore-certificate-errors-spki-list={pin}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


def test_the_browser_trusts_this_servers_key_only(served: Any, tmp_path: Path) -> None:
    other_key = base64.b64encode(hashlib.sha256(b"not this server's key").digest()).decode()
    driver = chromium(tmp_path / "other-profile", other_key)
    try:
        driver.get(served.url + "/login")
        assert not driver.find_elements(By.ID, "token"), "a page was shown over a certificate nobody trusts"
    finally:
        driver.quit()


@pytest.fixture
def running(served: Any, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``spool run --workers 2`` on the served spool, its process group SIGKILLed at the end."""
    with open(tmp_path / "run.log", "wb") as log:
        proc = subprocess.Popen(
            [*SPOOL_CMD, "--spool", str(served.root), "run", "--workers", "2", "--import", "examples.tasks"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class Shots:
    def __init__(self, driver: Any, folder: Path) -> None:
        self.driver, self.folder = driver, folder
        folder.mkdir(parents=True, exist_ok=True)
        self.saved: list[Path] = []

    def take(self, name: str) -> None:
        path = self.folder / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), path
        self.saved.append(path)
        if COPY_SHOTS_TO:
            Path(COPY_SHOTS_TO).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(COPY_SHOTS_TO) / path.name)


def text_of(driver: Any, element_id: str) -> str:
    """An element's text, or "" when there is none (or it went with a reload: pages follow the
    spool live, and a job's page reloads when its job changes state). Read in one step in the
    page: a find then a read raced a re-render, which Chrome 156 reports not as a stale element
    but as "Node with given id does not belong to the document" (a CI run of 2026-12-07)."""
    try:
        script = "const el = document.getElementById(arguments[0]); return el ? (el.innerText ?? el.textContent) : ''"
        found = driver.execute_script(script, element_id)
    except WebDriverException:
        return ""
    return str(found or "")


def test_a_person_watches_jobs_run_opens_a_failure_requeues_it_and_filters(
    served: Any, browser: Any, running: Any, tmp_path: Path
) -> None:
    shots = Shots(browser, tmp_path / "screenshots")
    token = served.token("boss", "admin")
    with Spool(served.root) as sp:
        failed = sp.submit("fail_until", {"attempt": 99}, max_tries=1)
        sp.submit("echo", {"hello": "world"})
    wait_until(lambda: _state(served, failed) == "dead", timeout=30, message="the failing job to end dead")

    browser.get(served.url + "/")
    assert "/login" in browser.current_url
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "login").click()
    wait_until(lambda: text_of(browser, "count-dead") == "1", timeout=15, message="the live counts")
    assert "boss" in text_of(browser, "who")

    # The done count rises on the open page while jobs run: it is never reloaded.
    start = int(text_of(browser, "count-done") or 0)
    with Spool(served.root) as sp:
        sp.submit_many([sp.spec("sleep", {"seconds": 0.25}, key=f"nap-{i}") for i in range(SLEEP_JOBS)])
    seen = {start}

    def risen_to_all() -> bool:
        seen.add(int(text_of(browser, "count-done") or 0))
        return max(seen) >= start + SLEEP_JOBS

    wait_until(risen_to_all, timeout=60, interval=0.1, message="the done count to rise")
    assert len(seen) >= 3, f"the count jumped at once, not while jobs ran: {sorted(seen)}"
    assert browser.find_elements(By.CSS_SELECTOR, "#chart polyline.series.completed")
    browser.find_element(By.CSS_SELECTOR, '#zoom [data-window="300"]').click()
    assert text_of(browser, "axis-start") == "-5 min"
    shots.take("01-overview")

    # Open the failed job from the dead list and read its traceback.
    browser.get(served.url + "/jobs?state=dead")
    browser.find_element(By.LINK_TEXT, failed).click()
    wait_until(lambda: browser.find_elements(By.ID, "error-last"), timeout=15, message="the job's page")
    traceback = text_of(browser, "error-last")
    assert "Traceback (most recent call last)" in traceback and "attempt 1 fails on purpose" in traceback
    shots.take("02-failed-job")

    browser.find_element(By.ID, "requeue").click()
    # The note, unless the page already followed the requeued job's next move live (a reload,
    # which a loaded machine's worker can make before the note is read): then the move says it.
    wait_until(
        lambda: "requeued" in text_of(browser, "note") or _attempt(served, failed) == 2,
        timeout=15,
        message="the requeue's note",
    )
    wait_until(lambda: _attempt(served, failed) == 2, timeout=30, message="the requeued job to run again")

    # Filter by task in the list's form (the list follows the spool live: wait for it whole).
    browser.get(served.url + "/jobs")
    wait_until(lambda: browser.find_elements(By.ID, "f-apply"), timeout=15, message="the list's form")

    def apply_filter() -> bool:
        try:
            Select(browser.find_element(By.ID, "f-task")).select_by_visible_text("sleep")
            browser.find_element(By.ID, "f-apply").click()
            return True
        except (StaleElementReferenceException, NoSuchElementException):
            return False  # a live reload between the find and the click: again

    wait_until(apply_filter, timeout=15, message="the filter applied")
    wait_until(lambda: "task=sleep" in browser.current_url, timeout=15, message="the filtered list")
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-id]")
    assert len(rows) == SLEEP_JOBS and {row.get_attribute("data-task") for row in rows} == {"sleep"}
    shots.take("03-filtered-by-task")

    # The system's dark preference: the same page, dark, with the chain of a job drawn.
    with Spool(served.root) as sp:
        parent = sp.submit("echo", {"step": "fetch"})
        child = sp.submit("echo", {"step": "parse"}, depends_on=[parent])
        sp.submit("echo", {"step": "index"}, depends_on=[child])
    browser.get(served.url + f"/jobs/{child}")
    light = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    )
    wait_until(lambda: _state(served, child) == "done", timeout=30, message="the chain's middle job to run")
    browser.get(served.url + f"/jobs/{child}")
    dark = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert dark != light and browser.find_elements(By.CSS_SELECTOR, "#chain g.node.state-done")
    shots.take("04-dark-job-chain")
    assert all(path.stat().st_size > 10_000 for path in shots.saved)


def _state(served: Any, job_id: str) -> str | None:
    with Spool(served.root) as sp:
        state = sp.state(job_id)
        return state.value if state else None


def _attempt(served: Any, job_id: str) -> int:
    with Spool(served.root) as sp:
        return sp.job(job_id)[1].attempt
