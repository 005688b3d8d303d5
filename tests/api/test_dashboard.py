"""The dashboard over real HTTPS (``served``: a real ``spool serve`` with a verified certificate):
login and its cookie, CSRF, read-only roles, revocation, filters and keyset paging, bulk actions
with their confirm step, escaping, schedules and the event stream."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from spool import Spool
from spool.moves.submission import submit
from support import Procs, run_spool, wait_until


class Browser:
    """One browser's view of the dashboard: it keeps the session cookie the server sets."""

    def __init__(self, served: Any) -> None:
        self.served = served
        self.cookie: str | None = None

    def request(self, method: str, path: str, fields: dict[str, str] | None = None, **headers: str) -> Any:
        sent = dict(headers)
        if self.cookie:
            sent["Cookie"] = self.cookie
        body = None
        if fields is not None:
            body = urlencode(fields).encode()
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        reply = self.served.call(method, path, body=body, headers=sent)
        cookie = reply.headers.get("set-cookie")
        if cookie:
            value = cookie.split(";")[0]
            self.cookie = None if value.endswith("=") else value
        return reply

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, fields: dict[str, str]) -> Any:
        return self.request("POST", path, fields)

    def login(self, token: str) -> Any:
        reply = self.post("/login", {"token": token})
        assert reply.status == 303, reply
        return reply

    def csrf(self, path: str = "/") -> str:
        page = self.get(path)
        assert page.status == 200, page
        found = re.search(r'name="csrf" value="([^"]+)"', page.body)
        assert found, page.body
        return found.group(1)


def ids_on(page: Any) -> list[str]:
    return re.findall(r'<tr data-id="([^"]+)"', page.body)


def state_of(served: Any, job_id: str) -> str:
    with Spool(served.root) as sp:
        state = sp.state(job_id)
        assert state is not None
        return state.value


def dead_job(served: Any, task: str = "echo", **args: Any) -> str:
    """A job cancelled while pending: dead, with reason cancelled."""
    with Spool(served.root) as sp:
        job_id = sp.submit(task, args)
        sp.cancel(job_id)
    return job_id


def test_login_sets_a_strict_secure_session_cookie_that_is_not_the_token(served: Any) -> None:
    browser = Browser(served)
    first = browser.get("/")
    assert first.status == 303 and first.headers["location"].startswith("/login")
    token = served.token("boss", "admin")
    refused = browser.post("/login", {"token": token + "x"})
    assert refused.status == 401 and "not valid" in refused.body and browser.cookie is None
    reply = browser.login(token)
    cookie = reply.headers["set-cookie"]
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"secure", "httponly", "samesite=strict", "path=/"} <= flags, cookie
    assert token not in cookie
    page = browser.get("/")
    assert page.status == 200 and "boss" in page.body
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "<script>" not in page.body and "onclick" not in page.body  # no inline script at all
    # Logging out ends the session on the server: the old cookie no longer opens a page.
    old = browser.cookie
    assert browser.post("/logout", {"csrf": browser.csrf()}).status == 303
    assert browser.cookie is None
    browser.cookie = old
    assert browser.get("/").status == 303


def test_a_post_without_the_sessions_csrf_token_is_refused_and_moves_nothing(served: Any) -> None:
    job_id = dead_job(served)
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    csrf = browser.csrf(f"/jobs/{job_id}")
    for fields in ({}, {"csrf": "x" + csrf}, {"csrf": ""}):
        refused = browser.post(f"/jobs/{job_id}/requeue", fields)
        assert refused.status == 403 and "CSRF" in refused.body, refused
    other = Browser(served)
    other.login(served.token("boss2", "admin"))
    assert other.post(f"/jobs/{job_id}/requeue", {"csrf": csrf}).status == 403  # another session's token
    stranger = Browser(served)
    assert stranger.post(f"/jobs/{job_id}/requeue", {"csrf": csrf}).status == 401  # no session at all
    here = f"https://{served.host}:{served.port}"
    for origin in ("https://evil.example", "null", here.replace("https", "http")):
        cross = browser.request("POST", f"/jobs/{job_id}/requeue", {"csrf": csrf}, Origin=origin)
        assert cross.status == 403 and "not one of this dashboard" in cross.body, origin
    assert Browser(served).request("POST", "/login", {"token": "x"}, Origin="https://evil.example").status == 403
    assert state_of(served, job_id) == "dead"
    done = browser.request("POST", f"/jobs/{job_id}/requeue", {"csrf": csrf}, Origin=here)
    assert done.status == 303 and "requeued" in done.headers["location"]
    assert 'id="note">requeued: now pending<' in browser.get(done.headers["location"]).body
    # A note is shown only as this server signed it: a link from elsewhere can't put words on a page.
    forged = browser.get(f"/jobs/{job_id}?note=your+token+expired%2C+paste+it+at+evil.example&sig=0")
    assert forged.status == 200 and 'id="note"' not in forged.body
    assert state_of(served, job_id) == "pending"


@pytest.mark.parametrize("role", ["submit", "work"])
def test_submit_and_work_tokens_see_a_read_only_dashboard(served: Any, role: str) -> None:
    job_id = dead_job(served)
    browser = Browser(served)
    browser.login(served.token("viewer", role))
    page = browser.get(f"/jobs/{job_id}")
    assert page.status == 200 and "read-only" in page.body
    assert "/requeue" not in page.body and "/run-again" not in page.body and "/cancel" not in page.body
    assert "bulk-requeue" not in browser.get("/jobs").body
    csrf = browser.csrf(f"/jobs/{job_id}")  # the logout form's: a valid CSRF token of this session
    for path in (f"/jobs/{job_id}/requeue", f"/jobs/{job_id}/run-again"):
        refused = browser.post(path, {"csrf": csrf})
        assert refused.status == 403 and "only admin" in refused.body
    assert browser.get("/bulk?action=requeue").status == 403
    assert browser.post("/bulk", {"csrf": csrf, "action": "requeue"}).status == 403
    assert state_of(served, job_id) == "dead"
    with Spool(served.root) as sp:
        assert sp.ids() == [job_id]  # no "run again" happened


def test_revoking_the_token_ends_its_sessions(served: Any) -> None:
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    assert browser.get("/jobs").status == 200
    assert run_spool("token", "revoke", "boss", spool=served.root).returncode == 0
    assert browser.get("/jobs").status == 303


def test_filters_and_keyset_pages_show_every_match_once_newest_first(served: Any) -> None:
    with Spool(served.root) as sp:
        alpha = [
            s.id
            for s in sp.submit_many([sp.spec("echo", {"n": i, "tag": f"zz{i}"}, key=f"alpha-{i}") for i in range(70)])
        ]
        beta = [s.id for s in sp.submit_many([sp.spec("sleep", {"seconds": i}, key=f"beta-{i}") for i in range(30)])]
        # A firing of schedule nightly (only a schedule's own submit may take a `schedule:` key).
        spec = sp.spec("echo", {"n": -1}, key="schedule:nightly@2026-01-01T00:00:00.000Z")
        nightly = submit(sp, spec, firing=True).id
        for job_id in alpha[:3]:
            sp.cancel(job_id)
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))

    seen, path, pages = [], "/jobs?task=echo", 0
    while path:
        page = browser.get(path)
        assert page.status == 200
        seen += ids_on(page)
        pages += 1
        found = re.search(r'href="(/jobs\?[^"]*before=[^"]*)" id="page-next"', page.body)
        path = found.group(1).replace("&amp;", "&") if found else ""
    assert pages == 2 and seen == sorted(alpha + [nightly], reverse=True)  # each once, newest first

    assert set(ids_on(browser.get("/jobs?task=sleep"))) == set(beta)
    assert set(ids_on(browser.get("/jobs?state=dead&reason=cancelled"))) == set(alpha[:3])
    assert ids_on(browser.get("/jobs?schedule=nightly")) == [nightly]
    assert ids_on(browser.get("/jobs?search=alpha-42")) == [alpha[42]]  # the key
    assert ids_on(browser.get("/jobs?search=zz17")) == [alpha[17]]  # the args
    assert ids_on(browser.get("/jobs?search=" + alpha[5])) == [alpha[5]]  # the id
    assert ids_on(browser.get("/jobs?search=nothing-like-it")) == []
    bad = browser.get("/jobs?state=finished")
    assert bad.status == 400 and "state" in bad.body
    assert browser.get("/jobs?before=..%2Fetc").status == 400


def test_a_bulk_requeue_shows_what_it_will_touch_then_moves_only_those(served: Any) -> None:
    picked = [dead_job(served, "echo", n=i) for i in range(4)]
    other = dead_job(served, "sleep", seconds=1)
    with Spool(served.root) as sp:
        waiting = sp.submit("echo", {"n": 99})
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    confirm = browser.get("/bulk?action=requeue&task=echo")
    assert confirm.status == 200 and "Requeue 4 dead jobs?" in confirm.body
    assert all(job_id in confirm.body for job_id in picked) and other not in confirm.body
    assert all(state_of(served, job_id) == "dead" for job_id in picked)  # the confirm page moved nothing
    csrf = re.search(r'name="csrf" value="([^"]+)"', confirm.body)
    assert csrf
    fields = {"csrf": csrf.group(1), "action": "requeue", "task": "echo", "reason": "", "schedule": "", "search": ""}
    done = browser.post("/bulk", fields)
    assert done.status == 303 and "requeued+4" in done.headers["location"]
    assert [state_of(served, job_id) for job_id in picked] == ["pending"] * 4
    assert state_of(served, other) == "dead" and state_of(served, waiting) == "pending"
    cancel = browser.post("/bulk", {**fields, "action": "cancel"})
    assert cancel.status == 303 and "cancelled+5" in cancel.headers["location"]
    assert state_of(served, other) == "dead" and state_of(served, waiting) == "dead"


def test_what_a_job_holds_is_escaped_and_run_again_makes_a_new_job(served: Any) -> None:
    with Spool(served.root) as sp:
        job_id = sp.submit("echo", {"html": "<script>alert(1)</script>", "quote": "\"'&"}, key="<b>k</b>")
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    page = browser.get(f"/jobs/{job_id}")
    assert page.status == 200
    assert "<script>alert" not in page.body and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.body
    assert "<b>k</b>" not in page.body
    again = browser.post(f"/jobs/{job_id}/run-again", {"csrf": browser.csrf()})
    assert again.status == 303
    new_id = again.headers["location"].split("?")[0].rsplit("/", 1)[-1]
    assert new_id != job_id
    with Spool(served.root) as sp:
        assert sp.job(new_id)[1].job.args == sp.job(job_id)[1].job.args
    assert browser.get("/jobs/NOSUCHJOB").status == 404
    assert browser.get("/jobs/a.b").status == 400


def test_schedules_show_their_firings_and_can_be_disabled_and_run_now(served: Any) -> None:
    added = run_spool("schedule", "add", "hourly", "echo", "--every", "1h", "-a", "n:=1", spool=served.root)
    assert added.returncode == 0, added.stderr
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    page = browser.get("/schedules")
    assert page.status == 200 and "hourly" in page.body and "never" in page.body
    csrf = browser.csrf("/schedules")
    ran = browser.post("/schedules/hourly/run", {"csrf": csrf})
    assert ran.status == 303
    job_id = ran.headers["location"].split("?")[0].rsplit("/", 1)[-1]
    with Spool(served.root) as sp:
        assert sp.job(job_id)[1].job.key.startswith("schedule:hourly@")
    assert job_id in browser.get("/schedules").body  # its last firings
    assert browser.post("/schedules/hourly/disable", {"csrf": csrf}).status == 303
    listed = json.loads(run_spool("schedule", "list", "--json", spool=served.root).stdout)
    assert [s["enabled"] for s in listed if s["name"] == "hourly"] == [False]
    assert browser.post("/schedules/nope/enable", {"csrf": csrf}).status == 404


def test_the_event_stream_needs_a_session_and_sends_the_counts(served: Any) -> None:
    with Spool(served.root) as sp:
        for i in range(3):
            sp.submit("echo", {"n": i})
    browser = Browser(served)
    assert browser.get("/events").status == 401
    browser.login(served.token("viewer", "submit"))

    def first_message() -> dict[str, Any]:
        connection = served.connect(timeout=10)
        try:
            connection.request("GET", "/events", headers={"Cookie": browser.cookie or ""})
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("content-type", "").startswith("text/event-stream")
            while True:
                line = response.readline().decode()
                if line.startswith("data: "):
                    return json.loads(line[6:])
        finally:
            connection.close()

    message = wait_until(lambda: (m := first_message())["counts"].get("pending") == 3 and m, timeout=10)
    assert isinstance(message, dict) and message["full"] is True and message["window"] == 3600


def test_a_jobs_chain_is_drawn_with_its_parents_and_children_and_their_states(served: Any) -> None:
    with Spool(served.root) as sp:
        parent = sp.submit("echo", {"n": 1})
        other = dead_job(served)
        child = sp.submit("echo", {"n": 2}, depends_on=[parent, other])
        grandchild = sp.submit("echo", {"n": 3}, depends_on=[child])
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))
    page = browser.get(f"/jobs/{child}").body
    chain = page[page.index('<svg class="chain"') : page.index("</svg>", page.index('<svg class="chain"'))]
    for job_id, state in ((parent, "pending"), (other, "dead"), (child, "waiting"), (grandchild, "waiting")):
        assert f'href="/jobs/{job_id}"' in chain and job_id in chain
        assert re.search(rf'node state-{state}[^"]*" data-id="{job_id}">\s*<title>.*?</title>\s*<rect', chain), job_id
    assert chain.count('class="edge"') == 3  # two parents in, one child out
    other_page = browser.get(f"/jobs/{other}").body
    assert '<svg class="chain"' in other_page and f'href="/jobs/{child}"' in other_page  # its child, seen from it


def test_the_workers_page_shows_each_local_worker_with_what_it_holds(served: Any, tmp_path: Path) -> None:
    procs = Procs(served.root, tmp_path)
    try:
        procs.start("worker", "--name", "w-one", "--import", "examples.tasks", name="worker")
        with Spool(served.root) as sp:
            job_id = sp.submit("sleep", {"seconds": 30})
        wait_until(lambda: state_of(served, job_id) == "leased", timeout=30, message="the worker to take the job")
        browser = Browser(served)
        browser.login(served.token("viewer", "submit"))
        page = wait_until(
            lambda: (p := browser.get("/workers")) and job_id in p.body and p, timeout=15, message="the holder listed"
        )
        row = re.search(r"<tr class=\"alive\"><td>w-one</td>.*?</tr>", page.body, re.S)
        assert row and job_id in row.group(0) and "sleep" in row.group(0), page.body
    finally:
        procs.kill_all()


def test_a_form_is_read_only_when_small_well_formed_and_a_form(served: Any) -> None:
    job_id = dead_job(served)
    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    csrf = browser.csrf()
    path = f"/jobs/{job_id}/requeue"
    big = browser.request("POST", path, {"csrf": csrf, "pad": "x" * 20_000})
    assert big.status == 413
    twice = browser.served.call(
        "POST",
        path,
        body=f"csrf={csrf}&csrf={csrf}".encode(),
        headers={"Cookie": browser.cookie or "", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert twice.status == 400 and "more than once" in twice.body
    as_json = browser.served.call("POST", path, json={"csrf": csrf}, headers={"Cookie": browser.cookie or ""})
    assert as_json.status == 415
    assert state_of(served, job_id) == "dead"
