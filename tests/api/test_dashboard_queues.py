"""Queues on the dashboard and in /metrics, over a real ``spool serve`` (issue 20): the queues page
shows each queue's limits, counts and what holds it, and a broken file's error; a job's page says
which limit holds it; an admin pauses and resumes from the page (the file and the ledger change,
nothing else); any other role is refused and changes nothing; /metrics has the queues' gauges;
and many invented task and queue names leave /metrics and the queues page bounded, with the
counts of the names past the cap summed under ``_other``."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from spool import Spool, queues
from spool.moves.transitions import claim_held
from test_dashboard import Browser

WORKER = "w-queues"


def _claim(sp: Spool, queue: str) -> str:
    held = claim_held(sp, WORKER, None, queues=[queue])
    assert held is not None, queue
    return held.job_file.id


def _limited(served: Any) -> dict[str, str]:
    """gpu at its concurrency (1 of 1 leased, 2 ready), email paused, api at a rate, a broken file."""
    with Spool(served.root) as sp:
        gpu = [sp.submit("train", {"n": n}, queue="gpu") for n in range(3)]
        email = sp.submit("send", {}, queue="email")
        plain = sp.submit("echo", {})
        queues.set_limits(sp, "gpu", concurrency=1)
        queues.set_limits(sp, "email", paused=True)
        queues.set_limits(sp, "api", rate="10/m")
        leased = _claim(sp, "gpu")
    (served.root / "queues" / "broken.yaml").write_text("concurrency: -3\n")
    waiting = next(job_id for job_id in gpu if job_id != leased)
    return {"leased": leased, "held": waiting, "email": email, "plain": plain}


def _file(served: Any, name: str) -> Any:
    return yaml.safe_load((served.root / "queues" / f"{name}.yaml").read_text())


def _row(page: str, name: str) -> str:
    found = re.search(rf'<tr id="queue-{name}".*?</tr>', page, re.S)
    assert found, page
    return found.group(0)


def _cells(row: str) -> dict[str, str]:
    return dict(re.findall(r'<td class="(concurrency|rate|pending|ready|leased|claims)">(.*?)</td>', row, re.S))


def test_the_queues_page_shows_limits_counts_holds_and_a_broken_file(served: Any) -> None:
    jobs = _limited(served)
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))
    page = browser.get("/queues")
    assert page.status == 200 and 'href="/queues" class="here"' in page.body
    gpu = _row(page.body, "gpu")
    none = '<span class="empty">none</span>'
    want = {"concurrency": "1", "rate": none, "pending": "2", "ready": "2", "leased": "1", "claims": "1"}
    assert _cells(gpu) == want, gpu
    assert "queue gpu is at its concurrency 1 (1 leased)" in gpu and 'data-limit="concurrency"' in gpu
    assert "queue email is paused" in _row(page.body, "email") and "badge paused" in _row(page.body, "email")
    assert "10/m" in _row(page.body, "api")
    broken = _row(page.body, "broken")
    assert "queues/broken.yaml" in broken and "concurrency" in broken and "last valid limits hold" in broken
    assert "/pause" not in page.body and "/resume" not in page.body  # read-only: no buttons

    held = browser.get(f"/jobs/{jobs['held']}").body
    assert re.search(r'id="queue"><a href="/queues#queue-gpu">gpu</a>', held), held
    assert 'data-limit="concurrency"' in held and "queue gpu is at its concurrency 1 (1 leased)" in held
    assert 'data-limit="paused"' in browser.get(f"/jobs/{jobs['email']}").body
    plain = browser.get(f"/jobs/{jobs['plain']}").body
    assert 'id="queue"><a href="/queues#queue-default">default</a>' in plain and 'id="hold"' not in plain
    assert 'id="hold"' not in browser.get(f"/jobs/{jobs['leased']}").body  # leased: nothing holds it


def test_an_admin_pauses_and_resumes_from_the_page_and_nobody_else_can(served: Any) -> None:
    jobs = _limited(served)
    viewer = Browser(served)
    viewer.login(served.token("viewer", "work"))
    csrf = viewer.csrf("/queues")
    before = (served.root / "queues" / "gpu.yaml").read_bytes()
    for path in ("/queues/gpu/pause", "/queues/email/resume", "/queues/fresh/pause"):
        refused = viewer.post(path, {"csrf": csrf})
        assert refused.status == 403 and "only admin" in refused.body, refused
    assert (served.root / "queues" / "gpu.yaml").read_bytes() == before
    assert not (served.root / "queues" / "fresh.yaml").exists()

    admin = Browser(served)
    admin.login(served.token("boss", "admin"))
    csrf = admin.csrf("/queues")
    assert admin.post("/queues/gpu/pause", {"csrf": "x" + csrf}).status == 403  # CSRF, as every action
    page = admin.get("/queues").body
    assert 'id="pause-gpu"' in page and 'id="resume-email"' in page
    assert 'id="pause-broken"' not in page  # a broken file is fixed by hand (or --clear), not paused
    done = admin.post("/queues/gpu/pause", {"csrf": csrf})
    assert done.status == 303, done
    assert "gpu paused" in admin.get(done.headers["location"]).body
    assert _file(served, "gpu") == {"concurrency": 1, "paused": True}  # the concurrency kept
    with Spool(served.root) as sp:
        assert queues.limits_in_force(sp, "gpu").paused and queues.hold_of(sp, "gpu") is not None
        assert sp.state(jobs["held"]).value == "pending"  # a pause moves no job
        assert claim_held(sp, "w-other", None, queues=["gpu"]) is None
    assert 'data-limit="paused"' in admin.get(f"/jobs/{jobs['held']}").body
    assert admin.post("/queues/email/resume", {"csrf": csrf}).status == 303
    assert _file(served, "email") == {"paused": False}
    with Spool(served.root) as sp:
        assert not queues.limits_in_force(sp, "email").paused
        assert _claim(sp, "email") == jobs["email"]  # resumed: its job is claimed at once
    refused = admin.post("/queues/no%20such/pause", {"csrf": csrf})
    assert refused.status == 400 and "a queue&#39;s name is letters" in refused.body, refused
    refused = admin.post("/queues/broken/pause", {"csrf": csrf})  # a broken file is fixed by hand
    assert refused.status == 400 and "broken.yaml" in refused.body
    assert (served.root / "queues" / "broken.yaml").read_text() == "concurrency: -3\n"


def _samples(served: Any, token: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    reply = served.call("GET", "/metrics", token=token)
    assert reply.status == 200, reply
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(reply.body):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def _one(samples: Any, name: str, **labels: str) -> float:
    return samples[name][tuple(sorted(labels.items()))]


def test_metrics_have_each_queues_jobs_claims_and_limits(served: Any) -> None:
    _limited(served)
    with Spool(served.root) as sp:
        queues.sync(sp)  # the hand-written broken file, as the coordinator's next pass reads it
    samples = _samples(served, served.token("viewer", "submit"))
    assert _one(samples, "spool_queue_jobs", queue="gpu", state="leased") == 1
    assert _one(samples, "spool_queue_jobs", queue="gpu", state="pending") == 2
    assert _one(samples, "spool_queue_ready_jobs", queue="gpu") == 2
    assert _one(samples, "spool_queue_jobs", queue="email", state="pending") == 1
    assert _one(samples, "spool_queue_claims_total", queue="gpu") == 1
    assert _one(samples, "spool_queue_claims_total", queue="default") == 0
    assert _one(samples, "spool_queue_concurrency_limit", queue="gpu") == 1
    assert _one(samples, "spool_queue_paused", queue="email") == 1
    assert _one(samples, "spool_queue_paused", queue="gpu") == 0
    assert abs(_one(samples, "spool_queue_rate_limit_per_second", queue="api") - 10 / 60) < 1e-9
    assert _one(samples, "spool_queue_file_broken", queue="broken") == 1
    assert _one(samples, "spool_queue_file_broken", queue="gpu") == 0
    assert _one(samples, "spool_queue_oldest_ready_age_seconds", queue="gpu") >= 0
    assert ("queue", "default") not in {label for key in samples["spool_queue_concurrency_limit"] for label in key}
    by_state: dict[str, float] = defaultdict(float)
    for key, value in samples["spool_queue_jobs"].items():
        by_state[dict(key)["state"]] += value
    for key, value in samples["spool_jobs"].items():
        by_state[dict(key)["state"]] -= value
    assert set(by_state.values()) == {0}, by_state  # every job counted once per queue and per task


def test_many_task_and_queue_names_leave_metrics_and_the_queues_page_bounded(serve_spool: Any) -> None:
    """200 invented task names and 200 invented queues: /metrics names at most 50 of each (the
    default caps) plus ``_other``, the sums still match every job and claim, a limited queue with
    one job keeps its own series against 200 busier ones, and the queues page has 50 rows and one
    summed row."""
    served = serve_spool()
    with Spool(served.root) as sp:
        sp.submit_many(
            [{"task": f"t{n:03}", "args": {"i": i}, "queue": f"q{n:03}"} for n in range(200) for i in (0, 1)]
        )
        sp.submit("echo", {}, queue="tiny")
        queues.set_limits(sp, "tiny", concurrency=1)
        claimed = [_claim(sp, f"q{n:03}") for n in range(0, 200, 20)]
    samples = _samples(served, served.token("viewer", "submit"))
    for family, label in (("spool_jobs", "task"), ("spool_queue_jobs", "queue"), ("spool_submits_total", "task")):
        names = {dict(key)[label] for key in samples[family]}
        assert len(names) == 51 and "_other" in names, (family, sorted(names))
    queue_names = {dict(key)["queue"] for key in samples["spool_queue_claims_total"]}
    assert len(queue_names) == 51 and "tiny" in queue_names and "_other" in queue_names
    assert _one(samples, "spool_queue_concurrency_limit", queue="tiny") == 1
    assert sum(samples["spool_queue_claims_total"].values()) == len(claimed)
    assert sum(samples["spool_queue_ready_jobs"].values()) == 401 - len(claimed)
    for family in ("spool_jobs", "spool_queue_jobs"):
        leased = sum(v for key, v in samples[family].items() if dict(key)["state"] == "leased")
        pending = sum(v for key, v in samples[family].items() if dict(key)["state"] == "pending")
        assert (pending, leased) == (401 - len(claimed), len(claimed)), family

    browser = Browser(served)
    browser.login(served.token("boss", "admin"))
    page = browser.get("/queues").body
    rows = re.findall(r'<tr id="queue-([^"]+)"', page)
    assert len(rows) == 51 and rows[-1] == "_other" and "tiny" in rows, rows
    other = _row(page, "_other")
    assert "151 more queues, summed" in other
    shown_pending = sum(int(_cells(_row(page, name))["pending"]) for name in rows)
    assert shown_pending == 401 - len(claimed), shown_pending
    assert page.count('id="pause-') == 50  # no button for the summed row
