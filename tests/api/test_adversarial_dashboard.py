"""The dashboard attacked as a hostile page, link or job author would, over real verified HTTPS:
open redirects through ``next``, session fixation, CSRF on every POST, and markup smuggled in
through what remote workers report (an error, a progress message) and what a submitter chooses
(a key, args). The Content-Security-Policy is on every page, error pages included."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlsplit

from spool import Spool
from support import run_spool
from test_dashboard import Browser, dead_job

EVIL = "<script>alert(1)</script>"


def test_login_never_sends_the_browser_to_another_site(served: Any) -> None:
    """What held: each ``next`` below lands on a path of this server."""
    token = served.token("boss", "admin")
    for target in (
        "//evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "https://evil.example/",
        "/\t/evil.example",
        "/\n/evil.example",
        " //evil.example",
        "javascript:alert(1)",
        "/%2F/evil.example",
        "//%65vil.example",
    ):
        reply = Browser(served).post("/login", {"token": token, "next": target})
        assert reply.status == 303, (target, reply)
        location = reply.headers["location"]
        parts = urlsplit(location)
        assert parts.scheme == "" and parts.netloc == "" and location.startswith("/"), (target, location)
        assert not location.startswith("//") and "\\" not in location, (target, location)


def test_a_session_id_planted_before_login_is_not_the_one_login_makes(served: Any) -> None:
    """What held: session fixation. The planted id is never a session, before or after login."""
    browser = Browser(served)
    planted = "__Host-spool_session=planted-by-attacker"
    browser.cookie = planted
    assert browser.get("/").status == 303
    browser.login(served.token("boss", "admin"))
    assert browser.cookie != planted
    attacker = Browser(served)
    attacker.cookie = planted
    assert attacker.get("/").status == 303


def test_every_post_needs_the_sessions_csrf_token_and_an_admin(served: Any) -> None:
    """What held: no CSRF token, a wrong one, another session's one, a cross-site Origin: refused,
    and nothing moved. A read-only role with the right token is refused too."""
    added = run_spool("schedule", "add", "hourly", "echo", "--every", "1h", spool=served.root)
    assert added.returncode == 0, added.stderr
    job_id = dead_job(served)
    admin, other, viewer = Browser(served), Browser(served), Browser(served)
    admin.login(served.token("boss", "admin"))
    other.login(served.token("boss2", "admin"))
    viewer.login(served.token("viewer", "submit"))
    actions = [
        f"/jobs/{job_id}/requeue",
        f"/jobs/{job_id}/cancel",
        f"/jobs/{job_id}/run-again",
        "/schedules/hourly/disable",
        "/schedules/hourly/run",
    ]
    bulk = {"action": "requeue", "task": "echo"}
    good, others = admin.csrf(), other.csrf()
    for path in [*actions, "/bulk"]:
        fields = bulk if path == "/bulk" else {}
        for csrf in (None, "", "x" * 43, others):
            sent = {**fields, **({} if csrf is None else {"csrf": csrf})}
            assert admin.post(path, sent).status == 403, (path, csrf)
        cross = admin.request("POST", path, {**fields, "csrf": good}, Origin="https://evil.example")
        assert cross.status == 403, (path, cross)
        assert viewer.post(path, {**fields, "csrf": viewer.csrf()}).status == 403, path
    with Spool(served.root) as sp:
        state = sp.state(job_id)
        assert state is not None and state.value == "dead"
        assert sum(1 for _ in sp.ledger.ids(limit=100)) == 1  # no run-again, no schedule run
    listed = json.loads(run_spool("schedule", "list", "--json", spool=served.root).stdout)
    assert [s["enabled"] for s in listed if s["name"] == "hourly"] == [True]
    # The session's own token, from its own page, still works: the refusals were the checks.
    assert admin.post(f"/jobs/{job_id}/requeue", {"csrf": good}).status == 303


def test_markup_from_workers_and_submitters_is_escaped_under_a_strict_csp(served: Any) -> None:
    """What held: a remote worker's error and progress message, a key and args full of markup are
    shown as text; every page, the login and error pages included, carries the CSP."""
    submitter, worker = served.token("producer", "submit"), served.token("w1", "work")
    for key in (f"k{EVIL}", "k2"):
        spec = {"task": "echo", "key": key, "max_tries": 1, "args": {EVIL: f"\"'><img src=x onerror=alert(1)>{EVIL}"}}
        assert served.call("POST", "/v1/jobs", token=submitter, json=spec).status == 201
    leases = [served.call("POST", "/v1/leases", token=worker, json={"tasks": ["echo"]}).json["lease"] for _ in "ab"]
    beat = {"fence": leases[0]["fence"], "progress": {"fraction": 0.5, "message": f"half {EVIL}"}}
    assert served.call("POST", f"/v1/leases/{leases[0]['id']}/heartbeat", token=worker, json=beat).status == 200
    failed = {"fence": leases[1]["fence"], "error": f"Traceback {EVIL} </pre><svg onload=alert(1)>"}
    assert served.call("POST", f"/v1/leases/{leases[1]['id']}/fail", token=worker, json=failed).status == 200
    browser = Browser(served)
    assert "default-src 'none'" in browser.get("/login").headers["content-security-policy"]
    browser.login(served.token("boss", "admin"))
    pages = ["/", "/jobs", "/jobs?state=leased", "/jobs?state=dead", "/workers", "/schedules"]
    pages += [f"/jobs/{lease['id']}" for lease in leases] + ["/jobs/NOSUCHJOB0000000000000000", "/jobs/a.b"]
    for path in pages:
        page = browser.get(path)
        policy = page.headers.get("content-security-policy", "")
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, (path, policy)
        assert page.headers.get("x-content-type-options") == "nosniff", path
        for raw in ("<script>alert", "<img src=x", "<svg onload", "'><img"):
            assert raw not in page.body, (path, raw)
    shown = browser.get(f"/jobs/{leases[1]['id']}").body
    assert "&lt;svg onload=alert(1)&gt;" in shown


def test_what_a_link_puts_in_the_query_is_shown_as_text_and_never_breaks_a_page(served: Any) -> None:
    """What held: a filter, a search, a cursor, a ``next`` or a forged note from a link from
    elsewhere is escaped where the page shows it back, and bytes that are no UTF-8 are no 500."""
    browser = Browser(served)
    login = browser.get('/login?next=/jobs"><script>alert(1)</script>')
    assert login.status == 200 and "<script>alert" not in login.body
    browser.login(served.token("boss", "admin"))
    hostile = '"><script>alert(1)</script>'
    for path in (
        f"/jobs?search={quote(hostile)}",
        f"/jobs?task={quote(hostile)}&reason={quote(hostile)}&schedule={quote(hostile)}",
        f"/jobs?before={quote(hostile)}",
        f"/jobs?state={quote(hostile)}",
        f"/?note={quote(hostile)}&sig=00",
        "/jobs?search=%ED%A0%80%FF",
        "/jobs/%ED%A0%80",
        f"/bulk?action=requeue&task={quote(hostile)}",
    ):
        page = browser.get(path)
        assert page.status < 500 and "<script>alert" not in page.body, (path, page.status)


def test_a_hostile_last_event_id_still_gets_the_whole_stream(served: Any) -> None:
    """A ``Last-Event-ID`` of this server's epoch with a 5,000-digit version: ``int()`` refused it
    (Python's digit limit) inside the stream, which died after its first line."""
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))

    def stream(last_event_id: str | None) -> tuple[str | None, dict[str, Any] | None]:
        connection = served.connect(timeout=15)
        try:
            headers = {"Cookie": browser.cookie or ""}
            if last_event_id is not None:
                headers["Last-Event-ID"] = last_event_id
            connection.request("GET", "/events", headers=headers)
            response = connection.getresponse()
            assert response.status == 200
            event_id = None
            while line := response.readline().decode():
                if line.startswith("id: "):
                    event_id = line[4:].strip()
                if line.startswith("data: "):
                    return event_id, json.loads(line[6:])
            return event_id, None
        finally:
            connection.close()

    event_id, first = stream(None)
    assert event_id is not None and first is not None and first["full"] is True
    epoch = event_id.split(".")[0]
    for hostile in (f"{epoch}." + "9" * 5000, f"{epoch}.1e3", f"{epoch}.-1", f"{epoch}."):
        _, message = stream(hostile)
        assert message is not None and message["full"] is True, hostile[:40]
