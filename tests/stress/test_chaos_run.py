"""The long chaos run (``-m stress``): more jobs, more kills, and SIGSTOPs too, under `spool run`.

tests/crash/test_supervised.py runs the short one by default; both use ``Kit.chaos`` from
tests/crashkit.py.

``CHAOS_SEED=N`` replays a run's choices of jobs and victims (each run prints its seed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crashkit import Kit
from support import Procs

from spool import Spool

SEED = int(os.environ.get("CHAOS_SEED", "0")) or None


@pytest.mark.stress
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("stop_too", [False, True], ids=["sigkill", "sigkill+sigstop"])
def test_a_long_run_under_random_signals_loses_nothing(
    spool_dir: Path, sp: Spool, procs: Procs, stop_too: bool
) -> None:
    kit = Kit(spool_dir, sp, procs)
    report = kit.chaos(
        jobs=2000,
        kill_seconds=60.0,
        every_seconds=0.2,
        stop_too=stop_too,
        seed=SEED,
        naps=(0.0, 0.05, 0.2),
        drain_timeout=900.0,
    )
    print(
        f"\nchaos (seed {report.seed}): 2000 jobs, {sum(report.kills.values())} signals {report.kills} over "
        f"{report.chaos_seconds:.0f}s; submit {report.submit_seconds:.0f}s, "
        f"drained {report.drain_seconds:.0f}s after"
    )
    assert sum(report.kills.values()) >= 30, "the chaos hit something"
