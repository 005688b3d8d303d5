"""docs/operations.md's backup of a live spool and its restore, run as written.

A real ``spool run`` drains jobs while ``examples/systemd/spool-backup.sh`` copies the spool (its
freeze is a SIGSTOP of the run's process tree here, ``freeze.py``, where the doc's is the units'
cgroup) and a producer keeps submitting keyed jobs. The copy is restored elsewhere with ``cp -a``, and must hold
every job acknowledged before the backup began, each in exactly one folder; ``spool fsck --repair``
then ``spool fsck`` passes; a ``spool run`` on the copy finishes every job with one result; and the
live spool, thawed, goes on to finish its own jobs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from spool import Spool
from spool.disk import State
from freeze import signal_tree
from support import ROOT, Procs, run_spool, wait_until

SCRIPT = ROOT / "examples" / "systemd" / "spool-backup.sh"
FREEZE = Path(__file__).with_name("freeze.py")
JOBS = 240
STATES = [s.value for s in State]


def folders_of(root: Path, job_id: str) -> list[str]:
    return [state for state in STATES if (root / state / f"{job_id}.yaml").exists()]


def job_ids(root: Path) -> set[str]:
    return {p.stem for state in STATES for p in (root / state).glob("*.yaml") if not p.name.startswith(".")}


def done_count(root: Path) -> int:
    return sum(1 for _ in (root / "done").glob("*.yaml"))


def submit_keyed(root: Path, stop: threading.Event, submitted: list[str]) -> None:
    """A producer beside the backup: keyed submits, each acknowledged one recorded."""
    n = 0
    while not stop.is_set():
        out = run_spool("submit", "echo", "-a", f"n={n}", "--key", f"during-{n}", spool=root)
        assert out.returncode == 0, out.stderr
        submitted.append(out.stdout.strip())
        n += 1


def test_a_copy_taken_while_jobs_run_restores_whole(spool_dir: Path, tmp_path: Path, procs: Procs) -> None:
    (spool_dir / "config.yaml").write_text("lease_seconds: 3\nbackoff_max_seconds: 1\n")
    sp = Spool(spool_dir, environ={})
    try:
        before = [
            sp.submit("sleep", {"seconds": 0.02}, key=f"before-{i}") if i % 2 else sp.submit("echo", {"i": i})
            for i in range(JOBS)
        ]
    finally:
        sp.close()
    run = procs.start("run", "--workers", "2", "--import", "examples.tasks", name="live")
    wait_until(lambda: done_count(spool_dir) >= 20, timeout=60, message="the live run to finish some jobs")

    stop, during = threading.Event(), []
    producer = threading.Thread(target=submit_keyed, args=(spool_dir, stop, during))
    producer.start()
    dest = tmp_path / "backup"
    try:
        backup = subprocess.run(
            ["sh", str(SCRIPT), str(spool_dir), str(dest)],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **os.environ,
                "SPOOL_FREEZE": f"{sys.executable} {FREEZE} stop {run.pid}",
                "SPOOL_THAW": f"{sys.executable} {FREEZE} cont {run.pid}",
                "SPOOL_PYTHON": sys.executable,
            },
        )
    finally:
        stop.set()
        producer.join(timeout=60)
        signal_tree(run.pid, signal.SIGCONT)  # whatever the script did, the live run goes on
    assert backup.returncode == 0, backup.stderr
    assert "ledger not copied" not in backup.stderr  # SQLite's backup reads past the frozen writers
    assert (dest / "ledger.sqlite3").is_file() and not (tmp_path / "backup.partial").exists()
    in_flight = done_count(dest)
    assert 0 < in_flight < JOBS, f"the copy was not taken mid-run ({in_flight} of {JOBS} done)"

    restored = tmp_path / "restored"
    subprocess.run(["cp", "-a", str(dest), str(restored)], check=True)
    for job_id in before:  # the copy is what a crash would leave: a move caught half way is in two
        assert folders_of(restored, job_id), f"{job_id} is missing from the copy"
    repair = run_spool("fsck", "--repair", spool=restored)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    for job_id in before:
        assert len(folders_of(restored, job_id)) == 1, (job_id, folders_of(restored, job_id))
    check = run_spool("fsck", spool=restored)
    assert check.returncode == 0, check.stdout + check.stderr

    copied = job_ids(restored)
    assert set(before) <= copied
    logs = tmp_path / "restored-logs"
    logs.mkdir()
    on_copy = Procs(restored, logs)
    try:
        on_copy.start("run", "--workers", "2", "--import", "examples.tasks", name="restored")
        waited = run_spool("wait", *sorted(copied), "--timeout", "120", spool=restored, timeout=150)
        assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr
    finally:
        on_copy.stop()
    for job_id in copied:
        assert folders_of(restored, job_id) == ["done"], (job_id, folders_of(restored, job_id))
        assert (restored / "results" / f"{job_id}.json").is_file()
    assert {p.stem for p in (restored / "results").glob("*.json")} == copied
    assert run_spool("fsck", spool=restored).returncode == 0

    live = run_spool("wait", *before, *during, "--timeout", "120", spool=spool_dir, timeout=150)
    assert live.returncode == 0, live.stdout[-2000:] + live.stderr
    procs.stop()
    assert run_spool("fsck", spool=spool_dir).returncode == 0
