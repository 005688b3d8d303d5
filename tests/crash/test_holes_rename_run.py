"""Issue 7, finding 6 (the supervisor's part): `spool run` keeps restarting its children after
the spool folder was renamed under it, because it hands them the spool through its own
descriptor of the folder rather than the path it was started with."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from support import ROOT, wait_until

from spool import Spool
from spool.disk.layout import State


def _worker_pids(supervisor_pid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == supervisor_pid and b"worker" in cmdline:
            pids.append(int(entry.name))
    return pids


def test_spool_run_restarts_its_workers_after_the_spool_was_renamed(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    Spool.init(old, environ={}).close()
    log = open(tmp_path / "run.log", "wb")
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spool.cli",
            "--spool",
            str(old),
            "--poll-seconds",
            "0.2",
            "--lease-seconds",
            "2",
            "run",
            "--workers",
            "1",
            "--import",
            "examples.tasks",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        first = wait_until(lambda: _worker_pids(run.pid), timeout=30, message="a worker to start")
        os.rename(old, new)
        os.kill(first[0], signal.SIGKILL)  # the supervisor restarts it: it must find the spool
        wait_until(
            lambda: [p for p in _worker_pids(run.pid) if p != first[0]], timeout=30, message="the worker restarted"
        )
        with Spool(new, environ={}) as sp:
            job_id = sp.submit("echo", {"n": 1})
            wait_until(lambda: sp.state(job_id) is State.DONE, timeout=30, message="the job done after the rename")
        assert run.poll() is None, (tmp_path / "run.log").read_text()
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        log.close()
