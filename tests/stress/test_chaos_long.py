"""Chaos with a history, long (``-m stress``, several minutes): the run of tests/faults/test_chaos.py
with more clients, more keys and five minutes of SIGKILL, SIGSTOP/SIGCONT and restarts of the
coordinator and three workers, and of changes to the limits of the queues ``capped`` (concurrency 2)
and ``rated`` (10/s) that a share of the jobs goes to, checked by the same checker
(tests/faults/history.py: the cap over the handlers' recorded runs, the rate over the claims).

``SPOOL_CHAOS_SEED=N`` replays a run's client and nemesis choices.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Procs

import history

# Read at import: the suite's clean_environ fixture removes every SPOOL_* variable before a test runs.
SEED = history.seed_from_env()


@pytest.mark.stress
@pytest.mark.timeout(1800)
def test_a_long_chaos_run_keeps_every_promise(spool_dir: Path, tmp_path: Path, procs: Procs) -> None:
    run = history.ChaosRun(
        seed=SEED, clients=4, workers=3, nemesis_seconds=300.0, keys=1500, max_submits=4000, drain_seconds=300.0
    )
    verdict, nemesis = history.run_chaos(spool_dir, tmp_path, procs, run)
    print(history.report(verdict, nemesis, SEED))
    assert verdict.figures["acknowledged"] > 0
    assert sum(nemesis.faults.values()) > 0
    assert not verdict.violations, history.report(verdict, nemesis, SEED) + "\n" + procs.output()[-6000:]
