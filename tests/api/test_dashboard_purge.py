"""Purge from the dashboard over real HTTPS: an admin's form shows what an age and states would
remove and removes nothing; its confirm step purges as ``spool purge`` does (the job, its key);
every other role gets 403 on the form and on the post, and a bad age is refused in one line."""

from __future__ import annotations

import re
from typing import Any

from spool import Spool
from test_dashboard import Browser, dead_job


def exists(served: Any, job_id: str) -> bool:
    with Spool(served.root) as sp:
        return sp.state(job_id) is not None


def test_an_admin_sees_what_a_purge_removes_then_confirms_it(served: Any) -> None:
    dead = [dead_job(served, "echo", n=n) for n in range(3)]
    with Spool(served.root) as sp:
        keyed = sp.submit("echo", {}, key="nightly-42")
        sp.cancel(keyed)
        pending = sp.submit("echo", {"stays": True})
    boss = Browser(served)
    boss.login(served.token("boss", "admin"))
    form = boss.get("/purge")
    assert form.status == 200 and 'id="purge-form"' in form.body and 'id="purge-confirm"' not in form.body
    assert 'id="nav-purge"' in form.body
    young = boss.get("/purge?older_than=1h&state=dead")
    assert "0 dead jobs ended more than 1h ago" in young.body and 'id="purge-confirm"' not in young.body
    preview = boss.get("/purge?older_than=0s&state=dead")
    assert "4 dead jobs ended more than 0s ago" in preview.body and 'id="purge-confirm"' in preview.body
    assert set(re.findall(r'<tr data-id="([^"]+)"', preview.body)) == {*dead, keyed}
    assert all(exists(served, job_id) for job_id in [*dead, keyed])  # the preview removed nothing
    done = boss.post("/purge", {"csrf": boss.csrf("/purge"), "older_than": "0s", "state": "dead"})
    assert done.status == 303 and "purged+4+dead+job" in done.headers["location"]
    assert not any(exists(served, job_id) for job_id in [*dead, keyed]) and exists(served, pending)
    landed = boss.get(done.headers["location"])
    assert "purged 4 dead job(s) older than 0s" in landed.body
    with Spool(served.root) as sp:
        assert sp.submit("echo", {}, key="nightly-42") != keyed  # its key is free again: a new job


def test_only_an_admin_may_purge_and_a_bad_age_is_refused(served: Any) -> None:
    job_id = dead_job(served, "echo")
    for role in ("submit", "work"):
        other = Browser(served)
        other.login(served.token(f"some-{role}", role))
        page = other.get("/purge?older_than=0s")
        assert page.status == 403 and "only admin may purge" in page.body
        assert 'id="nav-purge"' not in other.get("/").body
        refused = other.post("/purge", {"csrf": other.csrf(), "older_than": "0s", "state": "dead"})
        assert refused.status == 403 and exists(served, job_id)
    boss = Browser(served)
    boss.login(served.token("boss", "admin"))
    bad = boss.get("/purge?older_than=soon")
    assert bad.status == 400 and "older than: expected a duration" in bad.body
    wrong = boss.post("/purge", {"csrf": boss.csrf(), "older_than": "0s", "state": "pending"})
    assert wrong.status == 400 and exists(served, job_id)
    forged = boss.post("/purge", {"csrf": "forged", "older_than": "0s", "state": "dead"})
    assert forged.status == 403 and exists(served, job_id)
