"""Hand-picked bulk actions over real HTTPS (and in headless Chromium): rows ticked in a job list
are requeued or cancelled, and only those; the page it lands on counts the moves in its tabs;
the CSRF token and the admin role are checked like every other action."""

from __future__ import annotations

import re
from typing import Any


from spool import Spool
from support import wait_until
from test_dashboard import Browser, dead_job, state_of
from test_dashboard_browser import By, text_of
from test_dashboard_live_browser import log_in


def tabs(page_body: str) -> dict[str, str]:
    return dict(re.findall(r'<span class="n" data-state="([a-z]+)">(\d+)</span>', page_body))


def test_ticked_rows_are_requeued_or_cancelled_and_the_landing_tabs_count_it(served: Any) -> None:
    dead = [dead_job(served, "echo", n=n) for n in range(4)]
    with Spool(served.root) as sp:
        pending = [sp.submit("echo", {"p": n}) for n in range(3)]
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    listed = browser.get("/jobs?state=dead")
    assert all(f'name="pick-{job_id}"' in listed.body for job_id in dead) and 'id="picked-requeue"' in listed.body
    csrf = browser.csrf("/jobs?state=dead")
    back = "/jobs?state=dead"
    fields = {"csrf": csrf, "back": back, "action": "requeue", f"pick-{dead[0]}": "1", f"pick-{dead[2]}": "1"}
    fields[f"pick-{pending[0]}"] = "1"  # not dead: left as it is
    moved = browser.post("/bulk/picked", fields)
    assert moved.status == 303 and moved.headers["location"].startswith("/jobs?state=dead&note=requeued+2+of+3")
    assert [state_of(served, job_id) for job_id in dead] == ["pending", "dead", "pending", "dead"]
    assert state_of(served, pending[0]) == "pending"
    landed = browser.get(moved.headers["location"])
    assert "requeued 2 of 3 ticked; 1 not dead" in landed.body
    assert tabs(landed.body)["dead"] == "2" and tabs(landed.body)["pending"] == "5", tabs(landed.body)
    assert set(re.findall(r'<tr data-id="([^"]+)"', landed.body)) == {dead[1], dead[3]}

    cancel = {"csrf": csrf, "back": "/jobs?state=pending", "action": "cancel"}
    cancel |= {f"pick-{job_id}": "1" for job_id in (pending[1], pending[2], dead[1])}
    moved = browser.post("/bulk/picked", cancel)
    assert moved.status == 303 and "cancelled+2+of+3" in moved.headers["location"]
    assert [state_of(served, job_id) for job_id in pending] == ["pending", "dead", "dead"]
    landed = browser.get(moved.headers["location"])
    assert tabs(landed.body)["pending"] == "3" and tabs(landed.body)["dead"] == "4", tabs(landed.body)


def test_a_hand_picked_action_needs_the_admin_role_the_csrf_token_and_a_tick(served: Any) -> None:
    job_id = dead_job(served, "echo")
    viewer = Browser(served)
    viewer.login(served.token("viewer", "submit"))
    listed = viewer.get("/jobs?state=dead")
    assert 'name="pick-' not in listed.body and 'id="picked"' not in listed.body
    refused = viewer.post("/bulk/picked", {"csrf": viewer.csrf(), "action": "requeue", f"pick-{job_id}": "1"})
    assert refused.status == 403 and state_of(served, job_id) == "dead"
    boss = Browser(served)
    boss.login(served.token("boss", "admin"))
    forged = boss.post("/bulk/picked", {"csrf": "forged", "action": "requeue", f"pick-{job_id}": "1"})
    assert forged.status == 403 and state_of(served, job_id) == "dead"
    none = boss.post("/bulk/picked", {"csrf": boss.csrf(), "action": "requeue"})
    assert none.status == 400 and "no job was ticked" in none.body
    bad = boss.post("/bulk/picked", {"csrf": boss.csrf(), "action": "requeue", "pick-../../etc": "1"})
    assert bad.status == 400 and state_of(served, job_id) == "dead"
    away = boss.post(
        "/bulk/picked", {"csrf": boss.csrf(), "action": "requeue", "back": "//evil.example/", f"pick-{job_id}": "1"}
    )
    assert away.status == 303 and away.headers["location"].startswith("/jobs?note=")


def test_in_a_browser_ticked_rows_are_requeued_and_the_tabs_count_them_at_once(served: Any, browser: Any) -> None:
    dead = [dead_job(served, "echo", n=n) for n in range(5)]
    log_in(served, browser, "/jobs?state=dead")
    wait_until(lambda: text_of(browser, "tab-dead").endswith("5"), timeout=15, message="five dead")
    for job_id in dead[1:3]:
        browser.find_element(By.CSS_SELECTOR, f"input[name='pick-{job_id}']").click()
    browser.find_element(By.ID, "picked-requeue").click()
    wait_until(lambda: "requeued 2 of 2" in text_of(browser, "note"), timeout=15, message="the requeue's note")
    # Read at once, before any stream message: the page was drawn with the counts after the moves.
    counts = browser.execute_script(
        "return [...document.querySelectorAll('.tabs .n[data-state]')].map(n => [n.dataset.state, n.textContent])"
    )
    assert dict(counts)["dead"] == "3" and dict(counts)["pending"] == "2", counts
    shown = browser.execute_script(
        "return [...document.querySelectorAll('#jobs tr[data-id]')].map(tr => tr.dataset.id)"
    )
    assert sorted(shown) == sorted([dead[0], *dead[3:]])
    assert [state_of(served, job_id) for job_id in dead] == ["dead", "pending", "pending", "dead", "dead"]
    browser.find_element(By.ID, "pick-all").click()  # ticks every row shown
    ticked = browser.execute_script("return document.querySelectorAll('#jobs td.pick input:checked').length")
    assert ticked == 3
