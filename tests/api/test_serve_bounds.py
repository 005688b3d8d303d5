"""What one client, one token or one careless submitter can take from ``spool serve`` (issue 17):
the access log keeps no query value, dashboard streams are capped per token with connections kept
for everyone else, a token's logins never log another token out, and many task names leave
``/metrics``, the job list's filter and the coordinator's log bounded."""

from __future__ import annotations

from typing import Any

from spool.runner.api.dashboard_auth import SESSIONS_PER_TOKEN
from support import wait_until
from test_dashboard import Browser


def test_the_access_log_shows_query_field_names_never_their_values(served: Any) -> None:
    token = served.token("producer", "submit")
    secret = "Zk3" + "q" * 40  # shaped like a token
    reply = served.call("GET", f"/v1/jobs?access_token={secret}&state=pending", token=token)
    assert reply.status in (200, 422), reply
    browser = Browser(served)
    browser.login(token)
    assert browser.get("/jobs?search=my-private-words").status == 200
    wait_until(lambda: "/jobs?search=*" in served.log(), timeout=10, message="the dashboard's access-log line")
    log = served.log()
    assert "/v1/jobs?access_token=*&state=*" in log, log[-2000:]
    assert secret not in log and "my-private-words" not in log and token not in log


def test_logging_in_often_ends_only_the_tokens_own_oldest_sessions(served: Any) -> None:
    """Each login made a session and the table dropped the oldest of all at 10,000: any token
    could log the admin out. Now a token's next login ends only its own oldest session."""
    admin = Browser(served)
    admin.login(served.token("boss", "admin"))
    viewer = served.token("viewer", "submit")
    browsers = [Browser(served) for _ in range(3 * SESSIONS_PER_TOKEN)]
    for browser in browsers:
        browser.login(viewer)
    assert admin.get("/").status == 200
    assert [b.get("/").status for b in browsers] == [303] * (2 * SESSIONS_PER_TOKEN) + [200] * SESSIONS_PER_TOKEN
