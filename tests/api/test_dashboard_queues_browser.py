"""The Queues page in headless Chromium against a real ``spool serve``: an admin sees each queue's
limits and what holds it, pauses a queue with a click and resumes it, at a desktop's size and a
phone's (screenshots under the test's tmp_path, copied to ``$SPOOL_SCREENSHOTS`` when set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


from spool import Spool, queues
from spool.moves.transitions import claim_held
from support import wait_until
from test_dashboard_browser import By, Shots, text_of

SIZES = {"desktop": (1400, 900), "phone": (390, 844)}


def test_an_admin_reads_the_queues_and_pauses_one_with_a_click(served: Any, browser: Any, tmp_path: Path) -> None:
    shots = Shots(browser, tmp_path / "screenshots")
    with Spool(served.root) as sp:
        sp.submit_many([sp.spec("train", {"n": n}, queue="gpu") for n in range(4)])
        sp.submit_many([sp.spec("send", {"n": n}, queue="email") for n in range(3)])
        sp.submit_many([sp.spec("echo", {"n": n}) for n in range(5)])
        queues.set_limits(sp, "gpu", concurrency=1)
        queues.set_limits(sp, "email", paused=True)
        queues.set_limits(sp, "payments", rate="10/s")
        assert claim_held(sp, "w-browser", None, queues=["gpu"]) is not None
    (served.root / "queues" / "broken.yaml").write_text("rate: often\n")

    browser.get(served.url + "/queues")
    browser.find_element(By.ID, "token").send_keys(served.token("boss", "admin"))
    browser.find_element(By.ID, "login").click()
    wait_until(lambda: browser.find_elements(By.ID, "queues"), timeout=15, message="the queues page")
    gpu = browser.find_element(By.ID, "queue-gpu").text
    assert "queue gpu is at its concurrency 1 (1 leased)" in gpu, gpu
    assert "queue email is paused" in browser.find_element(By.ID, "queue-email").text
    assert "field 'rate'" in browser.find_element(By.ID, "queue-broken").text
    for name, (width, height) in SIZES.items():
        browser.set_window_size(width, height)
        shots.take(f"queues-{name}")

    browser.set_window_size(*SIZES["desktop"])
    browser.find_element(By.ID, "pause-gpu").click()
    wait_until(lambda: "gpu paused" in text_of(browser, "note"), timeout=15, message="the pause's note")
    assert "queue gpu is paused" in browser.find_element(By.ID, "queue-gpu").text
    with Spool(served.root) as sp:
        assert queues.limits_in_force(sp, "gpu").paused
    browser.find_element(By.ID, "resume-email").click()
    wait_until(lambda: "email resumed" in text_of(browser, "note"), timeout=15, message="the resume's note")
    assert browser.find_elements(By.ID, "pause-email") and browser.find_elements(By.ID, "resume-gpu")
    with Spool(served.root) as sp:
        assert not queues.limits_in_force(sp, "email").paused
    shots.take("queues-after-clicks")
