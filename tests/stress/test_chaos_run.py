"""The long chaos run (``-m stress``): more jobs, more kills, and SIGSTOPs too, under `spool run`.

tests/crash/test_supervised.py runs the short one by default; both use ``Kit.chaos`` from
tests/crashkit.py. The ``limited`` run does the same with the default queue (every job's) at
``concurrency 2``: the workers' batch claims are cut to the free slots, and the job files must show
no more than 2 attempts holding a slot at once (``check_slots``).

``CHAOS_SEED=N`` replays a run's choices of jobs and victims (each run prints its seed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crashkit import Kit
from support import Procs

from spool import Spool
from spool.disk.layout import State
from spool.queues import set_limits
from history import most_at_once

SEED = int(os.environ.get("CHAOS_SEED", "0")) or None
CAP = 2


def check_slots(sp: Spool, cap: int) -> tuple[int, int]:
    """From the job files alone (these handlers record nothing): each attempt holds its slot from
    its record's ``started`` (the claim's reservation) to its ``ended`` (its job left leased/: a
    completion, a failure, the expiry of a SIGKILLed or SIGSTOPped worker's lease, a batch member
    given back), half-open; recovery's stand-in for a claim that died unrecorded (no worker,
    started = ended) holds nothing. At most ``cap`` at once; no job's tries above its attempts
    not given back. Returns (most at once, attempts).

    Stricter than the history run's rule (a handler's recorded start): it holds because a
    ``started`` is read once the claim's transaction holds the ledger's write lock, after the
    completion that freed the slot (tests/faults/test_queue_faults.py).
    """
    from spool.base.timetext import parse_time

    slots: list[tuple[float, float, str]] = []
    for job_id, _folders in sp.ledger.states().items():
        job_file = sp.job(job_id)[1]
        spent = [r for r in job_file.attempts if r.outcome != "released"]
        assert job_file.tries <= len(spent), f"{job_id}: tries {job_file.tries} > {len(spent)} attempts started"
        for r in job_file.attempts:
            if r.worker is not None and r.started and r.ended:
                start, end = parse_time(r.started, "started"), parse_time(r.ended, "ended")
                slots.append((start.timestamp(), end.timestamp(), f"{job_id}#{r.attempt}"))
    most, when, who = most_at_once(slots)
    assert most <= cap, f"{most} attempts held a slot of a queue at concurrency {cap} at once, at {when:.3f}: {who}"
    return most, len(slots)


@pytest.mark.stress
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("stop_too", "limited"),
    [(False, False), (True, False), (True, True)],
    ids=["sigkill", "sigkill+sigstop", "sigkill+sigstop+limited"],
)
def test_a_long_run_under_random_signals_loses_nothing(
    spool_dir: Path, sp: Spool, procs: Procs, stop_too: bool, limited: bool
) -> None:
    if limited:
        set_limits(sp, "default", concurrency=CAP)
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
    if limited:
        assert all(state == State.DONE.value for state in sp.ledger.states().values())
        most, attempts = check_slots(sp, CAP)
        print(f"queue default at concurrency {CAP}: at most {most} of {attempts} attempts held a slot at once")
