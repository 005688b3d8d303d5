"""``GET /metrics`` against a real ``spool serve`` over verified HTTPS, with a real ``spool run``
doing the work: jobs that complete, fail and retry, are rejected, and one whose worker is killed
mid-attempt (its lease expires); the scrape parses with prometheus-client's own parser and its
counts match the folders, file by file, and the history's counters match what was run. A
second round of jobs shows the counters growing from the rows folded since the first scrape."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spool.disk.layout import State, is_dot_name
from support import ROOT, SPOOL_CMD, run_spool, wait_until

FAST = (
    "--lease-seconds",
    "2",
    "--poll-seconds",
    "0.2",
    "--backoff-base-seconds",
    "0.1",
    "--backoff-max-seconds",
    "0.2",
)
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture
def runner(served: Any, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``spool run --workers 2`` on the served spool; its process group is killed at the end."""
    log = open(tmp_path / "run.log", "wb")
    argv = [*SPOOL_CMD, "--spool", str(served.root), *FAST, "run", "--workers", "2", "--import", "examples.tasks"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    log.close()
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _submit(served: Any, task: str, *args: str) -> str:
    ran = run_spool("submit", task, *args, spool=served.root)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def _scrape(served: Any, token: str) -> Samples:
    reply = served.call("GET", "/metrics", token=token)
    assert reply.status == 200, reply
    assert reply.headers["content-type"].startswith("text/plain; version=")  # the exposition format
    samples: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(reply.body):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def _folders(root: Path) -> dict[str, int]:
    return {state.value: sum(1 for name in os.listdir(root / state.value) if not is_dot_name(name)) for state in State}


def _by_state(samples: Samples) -> dict[str, int]:
    totals = {state.value: 0 for state in State}
    for labels, value in samples["spool_jobs"].items():
        totals[dict(labels)["state"]] += int(value)
    return totals


def _of(samples: Samples, name: str, **labels: str) -> float:
    return samples[name].get(tuple(sorted(labels.items())), 0.0)


def _wait_all(served: Any, ids: list[str]) -> None:
    ran = run_spool("wait", *ids, "--timeout", "60", spool=served.root, timeout=90)
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr  # 1: some ended dead, as they should


def test_metrics_need_a_token_and_match_the_folders(served: Any, runner: subprocess.Popen[bytes]) -> None:
    assert served.call("GET", "/metrics").status == 401
    assert served.call("GET", "/metrics", token="not-a-token").status == 401
    token = served.token("scraper", "submit")
    assert served.call("GET", "/metrics", token=served.token("w-1", "work")).status == 200  # any role

    echoes = [_submit(served, "echo", "-a", f"n={n}") for n in range(5)]
    retried = [_submit(served, "fail_until", "-a", "attempt:=2", "--max-tries", "3") for _ in range(2)]
    rejected = _submit(served, "reject")
    expired = _submit(served, "crash_worker", "--max-tries", "1")  # its worker dies: the lease expires
    stuck = _submit(served, "nobody_handles_this")  # stays ready in pending/
    _wait_all(served, [*echoes, *retried, rejected, expired])

    def matching() -> Samples | None:
        samples = _scrape(served, token)
        return samples if _by_state(samples) == _folders(served.root) else None

    samples = wait_until(matching, timeout=30, message="the metrics' counts to match the folders")
    assert isinstance(samples, dict)
    assert _folders(served.root) == {"pending": 1, "waiting": 0, "leased": 0, "done": 7, "dead": 2}
    assert _of(samples, "spool_jobs", state="done", task="echo") == 5
    assert _of(samples, "spool_jobs", state="done", task="fail_until") == 2
    assert _of(samples, "spool_jobs", state="dead", task="reject") == 1
    assert _of(samples, "spool_jobs", state="dead", task="crash_worker") == 1
    assert _of(samples, "spool_jobs", state="pending", task="nobody_handles_this") == 1
    assert _of(samples, "spool_jobs", state="leased", task="echo") == 0  # every state, zeros included

    assert sum(samples["spool_submits_total"].values()) == 10
    assert _of(samples, "spool_completions_total", task="echo") == 5
    assert _of(samples, "spool_completions_total", task="fail_until") == 2
    assert _of(samples, "spool_failures_total", task="fail_until") == 2
    assert _of(samples, "spool_failures_total", task="reject") == 1
    assert _of(samples, "spool_retries_total", task="fail_until") == 2
    assert _of(samples, "spool_retries_total", task="reject") == 0  # rejected: dead at once
    assert _of(samples, "spool_lease_expiries_total", task="crash_worker") == 1
    assert _of(samples, "spool_retries_total", task="crash_worker") == 0  # max_tries 1: buried
    assert _of(samples, "spool_attempt_duration_seconds_count", task="echo") == 5
    assert _of(samples, "spool_attempt_duration_seconds_count", task="fail_until") == 4
    assert _of(samples, "spool_attempt_duration_seconds_bucket", task="echo", le="+Inf") == 5
    assert _of(samples, "spool_attempt_duration_seconds_sum", task="echo") > 0
    assert _of(samples, "spool_oldest_ready_age_seconds", task="nobody_handles_this") >= 0
    assert stuck not in (echoes + retried)

    more = [_submit(served, "echo", "-a", f"n={n}") for n in range(5, 8)]
    _wait_all(served, more)
    later = wait_until(
        lambda: (s := _scrape(served, token)) and _of(s, "spool_completions_total", task="echo") == 8 and s,
        timeout=30,
        message="the second round in the counters",
    )
    assert isinstance(later, dict)
    assert _by_state(later) == _folders(served.root)
    assert sum(later["spool_submits_total"].values()) == 13
    assert _of(later, "spool_attempt_duration_seconds_count", task="echo") == 8
    assert _of(later, "spool_failures_total", task="fail_until") == 2  # nothing folded twice
