"""Monitoring as an operator deploys it (issue 22): ``examples/monitoring/`` checked by promtool, and
each alert rule tested against a real ``/metrics`` of a real ``spool serve``.

A broken spool (no coordinator, a task nobody handles, a schedule that never fires, jobs dying)
and a healthy one (a coordinator and a worker running, the schedule firing) are scraped; the
scraped series become promtool's input as if the state held for half an hour (gauges constant,
ages and lags above 0 growing with the clock, the dead count rising as it did between two scrapes), and
``promtool test rules`` checks which alerts fire. Debian's ``prometheus`` package gives promtool;
.ci/run installs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spool import Spool
from support import ROOT, Procs, run_spool, wait_until

MONITORING = ROOT / "examples" / "monitoring"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install prometheus")
GROWING = ("spool_queue_oldest_ready_age_seconds", "spool_oldest_ready_age_seconds", "spool_schedule_lag_seconds")
MINUTES = 40


def promtool(*args: str, cwd: Path) -> str:
    assert PROMTOOL is not None
    ran = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout


def scrape(served: Any, token: str) -> dict[str, float]:
    """'name{labels}' -> value, for every sample of /metrics (histogram parts included)."""
    reply = served.call("GET", "/metrics", token=token)
    assert reply.status == 200, reply
    found = {}
    for family in text_string_to_metric_families(reply.body):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def series_of(before: dict[str, float], after: dict[str, float]) -> list[dict[str, str]]:
    """promtool input, one sample a minute for MINUTES: the first minute as ``before``, then
    ``after`` held; an age or lag above 0 grows by 60 s a minute (what waits goes on waiting; 0
    means nothing waits, and stays so)."""
    found = [{"series": 'up{instance="spool:8443",job="spool"}', "values": f"1x{MINUTES}"}]
    for name, value in sorted(after.items()):
        metric = name.split("{")[0]
        if metric in GROWING and value > 0:
            found.append({"series": name, "values": f"{value:g}+60x{MINUTES}"})
        else:
            first = before.get(name, value)
            found.append({"series": name, "values": f"{first:g} {value:g}x{MINUTES - 1}"})
    return found


def rule_test(tmp_path: Path, series: list[dict[str, str]], expected: dict[int, list[dict[str, Any]]]) -> None:
    """Run ``promtool test rules`` over alerts.yml: at each minute of ``expected``, exactly those
    alerts (every rule is listed: an empty list asserts it does not fire). The copy tested has no
    annotations (promtool would compare their rendered text; ``check rules`` parses them)."""
    document = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    rules = document["groups"][0]["rules"]
    for rule in rules:
        rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(document))
    checks = []
    for minute, firing in expected.items():
        for rule in rules:
            mine = [alert for alert in firing if alert["alertname"] == rule["alert"]]
            checks.append(
                {
                    "eval_time": f"{minute}m",
                    "alertname": rule["alert"],
                    "exp_alerts": [{"exp_labels": {**rule.get("labels", {}), **alert["labels"]}} for alert in mine],
                }
            )
    test = {
        "rule_files": ["alerts.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    promtool("test", "rules", "test.yml", cwd=tmp_path)


def test_the_example_rules_and_scrape_config_pass_promtool(tmp_path: Path) -> None:
    assert "SUCCESS: 6 rules found" in promtool("check", "rules", str(MONITORING / "alerts.yml"), cwd=tmp_path)
    config = (MONITORING / "prometheus.yml").read_text().replace("/etc/prometheus/", f"{tmp_path}/")
    (tmp_path / "prometheus.yml").write_text(config)
    shutil.copy(MONITORING / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "spool.token").write_text("a-token\n")
    (tmp_path / "spool-cert.pem").write_text("")
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def test_alerts_fire_on_a_broken_spools_real_metrics(served: Any, tmp_path: Path) -> None:
    """No coordinator runs: the schedule never fires, a task nobody handles waits, jobs die."""
    token = served.token("prometheus", "submit")
    ran = run_spool("schedule", "add", "tick", "--every", "1s", "echo", spool=served.root)
    assert ran.returncode == 0, ran.stderr
    with Spool(served.root, environ={}) as sp:
        sp.submit("nobody_handles", {})
        doomed = [sp.submit("echo", {"n": n}) for n in range(6)]
    wait_until(lambda: scrape(served, token).get('spool_schedule_lag_seconds{schedule="tick"}', 0) > 0, 30, 0.2)
    before = scrape(served, token)
    with Spool(served.root, environ={}) as sp:
        for job_id in doomed:
            sp.cancel(job_id)  # dead: 6 more in a minute
    after = scrape(served, token)
    assert after["spool_coordinator_up{}"] == 0 and after['spool_workers_alive{kind="local"}'] == 0
    assert after['spool_unhandled_ready_jobs{task="nobody_handles"}'] == 1
    assert after['spool_jobs{state="dead",task="echo"}'] == 6
    assert served.call("GET", "/healthz").json == {"ok": True, "coordinator": False}
    rule_test(
        tmp_path,
        series_of(before, after),
        {
            3: [
                {"alertname": "SpoolNoCoordinator", "labels": {}},
                {"alertname": "SpoolDeadJobsRising", "labels": {"task": "echo"}},
            ],
            10: [
                {"alertname": "SpoolNoCoordinator", "labels": {}},
                {"alertname": "SpoolTaskUnhandled", "labels": {"task": "nobody_handles"}},
                {"alertname": "SpoolScheduleLag", "labels": {"schedule": "tick"}},
                {"alertname": "SpoolDeadJobsRising", "labels": {"task": "echo"}},
            ],
            25: [
                {"alertname": "SpoolNoCoordinator", "labels": {}},
                {"alertname": "SpoolTaskUnhandled", "labels": {"task": "nobody_handles"}},
                {"alertname": "SpoolScheduleLag", "labels": {"schedule": "tick"}},
                {"alertname": "SpoolOldestReadyJobOld", "labels": {"queue": "default"}},
            ],
        },
    )


def test_no_alert_fires_on_a_healthy_spools_real_metrics(served: Any, tmp_path: Path) -> None:
    """A coordinator and a worker run: the schedule fires, every task is handled, nothing waits."""
    token = served.token("prometheus", "submit")
    (tmp_path / "logs").mkdir()
    procs = Procs(served.root, tmp_path / "logs")
    try:
        procs.start("--poll-seconds", "0.2", "coordinator", name="coordinator")
        procs.start("--poll-seconds", "0.2", "worker", "--import", "examples.tasks", name="worker")
        ran = run_spool("schedule", "add", "tick", "--every", "1s", "echo", spool=served.root)
        assert ran.returncode == 0, ran.stderr
        with Spool(served.root, environ={}) as sp:
            job_id = sp.submit("echo", {"n": 1})
            wait_until(lambda: sp.state(job_id) is not None and sp.state(job_id).value == "done", 30)

        def quiet() -> dict[str, float] | None:
            now = scrape(served, token)
            ready = sum(v for k, v in now.items() if k.startswith("spool_queue_ready_jobs"))
            lag = now.get('spool_schedule_lag_seconds{schedule="tick"}', 1)
            alive = now['spool_workers_alive{kind="local"}'] == 1 and now["spool_coordinator_up{}"] == 1
            return now if alive and lag == 0 and ready == 0 else None

        after = wait_until(quiet, 30, 0.2, "a scrape with the schedule fired and nothing ready")
        assert served.call("GET", "/healthz").json == {"ok": True, "coordinator": True}
        rule_test(tmp_path, series_of(after, after), {3: [], 10: [], 25: []})
    finally:
        procs.stop()


def test_the_server_says_in_its_log_when_no_coordinator_runs(serve_spool: Any, tmp_path: Path) -> None:
    """A first remote setup runs `spool serve` alone: its log says at once that retries, expiry and
    schedules wait for a coordinator, says it again when one stops, and when one starts."""
    served = serve_spool(env={"SPOOL_POLL_SECONDS": "0.2"})
    missing = "no coordinator runs for this spool"
    wait_until(lambda: missing in served.log(), 30, message="the warning at start")
    (tmp_path / "logs").mkdir()
    procs = Procs(served.root, tmp_path / "logs")
    try:
        procs.start("--poll-seconds", "0.2", "coordinator", name="coordinator")
        wait_until(lambda: "a coordinator runs for this spool again" in served.log(), 30, message="seen starting")
    finally:
        procs.stop()
    wait_until(lambda: served.log().count(missing) == 2, 30, message="the warning again once it stopped")
