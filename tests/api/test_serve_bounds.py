"""What one client, one token or one careless submitter can take from ``spool serve`` (issue 17):
the access log keeps no query value, dashboard streams are capped per token with connections kept
for everyone else, a token's logins never log another token out, and many task names leave
``/metrics``, the job list's filter and the coordinator's log bounded."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from spool import Spool
from spool.runner.api.context import MAX_STREAMS
from spool.runner.api.dashboard.auth import SESSIONS_PER_TOKEN
from spool.runner.api.dashboard.site import MAX_STREAMS_PER_TOKEN
from support import Procs, wait_until
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


class Streams:
    """Event streams held open (each a connection of its own), closed at the end."""

    def __init__(self, served: Any) -> None:
        self.served = served
        self.opened: list[Any] = []

    def open(self, browser: Browser) -> int:
        connection = self.served.connect(timeout=10)
        connection.request("GET", "/events", headers={"Cookie": browser.cookie or ""})
        response = connection.getresponse()
        if response.status == 200:
            self.opened.append(connection)
        else:
            assert response.getheader("retry-after"), response.getheaders()
            response.read()
            connection.close()
        return int(response.status)

    def close(self) -> None:
        for connection in self.opened:
            connection.close()


def test_one_session_cannot_hold_more_than_its_share_of_event_streams(served: Any) -> None:
    """~230 streams from one read-only session held every connection: /healthz and the API got
    503. Past MAX_STREAMS_PER_TOKEN a stream is refused at once (429, Retry-After), the API still
    answers, and a slot comes back when a stream ends."""
    token = served.token("viewer", "submit")
    browser = Browser(served)
    browser.login(token)
    streams = Streams(served)
    try:
        statuses = [streams.open(browser) for _ in range(MAX_STREAMS_PER_TOKEN + 3)]
        assert statuses == [200] * MAX_STREAMS_PER_TOKEN + [429] * 3, statuses
        assert served.call("GET", "/healthz").status == 200
        assert served.call("POST", "/v1/jobs", token=token, json={"task": "echo", "args": {}}).status == 201
        streams.opened.pop().close()
        wait_until(lambda: streams.open(browser) == 200, timeout=5, message="a stream's slot to come back")
    finally:
        streams.close()


def test_many_tokens_together_cannot_hold_the_connections_kept_for_the_api(served: Any) -> None:
    """Every token at its share still leaves the server's reserve: past MAX_STREAMS streams in
    all, 429 for the next, whoever asks."""
    browsers = []
    for n in range(MAX_STREAMS // MAX_STREAMS_PER_TOKEN + 1):
        browsers.append(Browser(served))
        browsers[-1].login(served.token(f"viewer{n}", "submit"))
    streams = Streams(served)
    try:
        statuses = [streams.open(b) for b in browsers for _ in range(MAX_STREAMS_PER_TOKEN)]
        assert statuses.count(200) == MAX_STREAMS and set(statuses) == {200, 429}, statuses
        assert served.call("GET", "/healthz").status == 200
    finally:
        streams.close()


def test_many_task_names_leave_metrics_the_job_filter_and_the_coordinator_log_bounded(
    serve_spool: Any, tmp_path: Path
) -> None:
    """9,000 task names made /metrics 4.36 MB, every /jobs page 9,023 options and the coordinator
    log 9,001 lines at once. Now the max_tasks_shown busiest have their own series and options,
    the rest are summed as "_other", and the coordinator says it in one line."""
    env = {"SPOOL_MAX_TASKS_SHOWN": "20"}
    served = serve_spool(env=env)
    with Spool(served.root) as sp:
        sp.submit_many([{"task": "busy", "args": {"n": n}} for n in range(30)])
        sp.submit_many([{"task": f"t{n:03}", "args": {}} for n in range(500)])
    token = served.token("viewer", "submit")

    text = served.call("GET", "/metrics", token=token).body
    labels = set(re.findall(r'task="([^"]*)"', text))
    assert len(labels) == 21 and {"busy", "_other"} <= labels, sorted(labels)
    pending = re.findall(r'^spool_jobs\{state="pending",task="[^"]*"\} (\S+)$', text, re.M)
    assert sum(float(n) for n in pending) == 530 and len(text.splitlines()) < 1500

    browser = Browser(served)
    browser.login(token)
    page = browser.get("/jobs").body
    assert 'list="f-task-names"' in page and len(re.findall(r"<option", page)) < 60, page.count("<option")
    assert 'value="busy"' in page
    found = browser.get("/jobs?task=t123").body  # any task still filters, typed
    assert re.search(r'id="summary">\s*1 matching', found), found

    procs = Procs(served.root, tmp_path)
    try:
        coordinator = procs.start("coordinator", env=env, name="coordinator")
        wait_until(lambda: "530 ready job(s) of 501 tasks" in procs.output(), timeout=20, message="the summary line")
        assert coordinator.poll() is None
        assert procs.output().count("no live worker handles") == 1, procs.output()[-3000:]
    finally:
        procs.kill_all()
