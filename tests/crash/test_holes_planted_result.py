"""Issue 17, finding 13: a planted ``results/<id>.json`` never completes a job that did not earn it.

A result counts only beside an attempt the job had (``store.result_is_earned``). One planted for
a job never picked up, or for one waiting for its retry, is reported by fsck, then set aside by
the next claim (to dead/<new id>.yaml, reason invalid, its text kept) and the job runs normally.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from support import Procs, wait_until

from spool import Spool
from spool.disk.layout import State

Cli = Callable[..., subprocess.CompletedProcess[str]]
PLANTED = '{"planted": true}'


def invalid_records(root: Path) -> list[dict[str, object]]:
    with Spool(root, environ={}) as sp:
        found = [sp.job(path.stem)[1] for path in (root / "dead").glob("*.yaml")]
    return [job_file.to_mapping() for job_file in found if job_file.reason == "invalid"]


def test_a_planted_result_is_set_aside_and_the_job_runs(spool_dir: Path, spool_cli: Cli, procs: Procs) -> None:
    (spool_dir / "config.yaml").write_text("poll_seconds: 0.2\nbackoff_base_seconds: 0.05\nbackoff_max_seconds: 0.1\n")
    retried = spool_cli("submit", "fail_until", "--args-json", '{"attempt": 2}', "--max-tries", "3").stdout.strip()
    # The second job fails its first attempt and waits in pending/ for its retry: no worker runs meanwhile.
    worker = procs.start("worker", "--import", "examples.tasks", "--name", "w1", name="worker")
    wait_until(
        lambda: "attempt: 1" in _read_or_empty(spool_dir / "pending" / f"{retried}.yaml"),
        timeout=20,
        message="the failed first attempt",
    )
    worker.terminate()
    worker.wait(timeout=20)
    fresh = spool_cli("submit", "echo", "-a", "n=1").stdout.strip()
    for job_id in (fresh, retried):
        (spool_dir / "results" / f"{job_id}.json").write_text(PLANTED)

    checked = spool_cli("fsck")
    assert checked.returncode == 1, checked.stdout
    assert checked.stdout.count("a result no attempt of job") == 2, checked.stdout
    for job_id in (fresh, retried):
        assert json.loads(spool_cli("--json", "status", job_id).stdout)["state"] == "pending"
        told = spool_cli("result", job_id)
        assert told.returncode != 0 and "planted" not in told.stdout and "no result yet" in told.stderr, told

    procs.start("run", "--workers", "1", "--import", "examples.tasks", name="run")
    for job_id in (fresh, retried):
        wait_until(lambda j=job_id: (spool_dir / "done" / f"{j}.yaml").exists(), timeout=30, message=f"{job_id} done")
        result = json.loads(spool_cli("result", job_id).stdout)
        assert result != json.loads(PLANTED), result
        with Spool(spool_dir, environ={}) as sp:
            state, job_file = sp.job(job_id)
        assert state is State.DONE and job_file.attempt >= 1 and job_file.attempts[-1].outcome == "done"
    records = invalid_records(spool_dir)
    assert sorted(str(r["original"]) for r in records) == [PLANTED, PLANTED], records
    assert all("a result no attempt of job" in str(r["error"]) for r in records), records
    final = spool_cli("fsck")
    assert final.returncode == 0, final.stdout


def _read_or_empty(path: Path) -> str:
    """The file's text, or '' while it is elsewhere (it moves between folders under the test)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
