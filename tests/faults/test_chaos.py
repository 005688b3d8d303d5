"""Chaos with a history, bounded (8 s of faults by default; 40 s in the ``slow`` tier): clients
submit with keys while a nemesis SIGKILLs, SIGSTOPs/SIGCONTs and restarts the coordinator and three
workers, and changes the limits of two queues (``capped``, ``concurrency 2``; ``rated``, ``rate 10/s``)
that a share of the jobs goes to; then every acknowledged submit is checked against the final files,
and the limits against the handlers' recorded runs and the attempts' records (see history.py for
the checks).

The seed is printed; ``SPOOL_CHAOS_SEED=N`` replays a run's client and nemesis choices (the
processes' own timing is the machine's, so a replay is close, not exact).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from history import ChaosRun, report, run_chaos, seed_from_env
from spool.runner.attempt.child import Child
from support import Procs

# Read at import: the suite's clean_environ fixture removes every SPOOL_* variable before a test runs.
SEED = seed_from_env()


@pytest.mark.parametrize("nemesis_seconds", [8.0, pytest.param(40.0, marks=pytest.mark.slow)], ids=["short", "40s"])
def test_chaos_history_holds(spool_dir: Path, tmp_path: Path, procs: Procs, nemesis_seconds: float) -> None:
    run = ChaosRun(seed=SEED, clients=4, workers=3, nemesis_seconds=nemesis_seconds, keys=300, max_submits=250)
    verdict, nemesis = run_chaos(spool_dir, tmp_path, procs, run)
    print(report(verdict, nemesis, SEED))
    print("\n".join(nemesis.log[-15:]))
    assert verdict.figures["acknowledged"] > 0
    assert sum(nemesis.faults.values()) > 0
    assert not verdict.violations, report(verdict, nemesis, SEED) + "\n" + procs.output()[-6000:]


def test_an_attempt_child_whose_worker_is_gone_ends_without_a_traceback() -> None:
    """Found by the long chaos run: a SIGKILLed worker's pipe closes before PR_SET_PDEATHSIG
    reaches its attempt child, whose reply then met EPIPE and printed a traceback into the log."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    os.close(reply_r)  # the worker is gone: nobody will read the reply
    config = dict(
        Child(import_modules=[], allow_shell=False, max_result_bytes=1024, sys_path=[])._config,
        parent_pid=os.getpid(),
        pythonpath=None,
        request_fd=request_r,
        reply_fd=reply_w,
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "spool.runner.attempt", json.dumps(config)],
            check=False,
            pass_fds=(request_r, reply_w),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        for fd in (request_r, request_w, reply_w):
            os.close(fd)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
