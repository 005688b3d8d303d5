"""Issue 17, finding 1: ``spool fsck`` (and ``--repair``) beside a real drain and a resubmitting producer.

fsck used to judge keys by one listing of the folders: a job that moved after the listing looked
missing, plain fsck reported its key as "a reservation without its job" (exit 1) and ``--repair``
unlinked the reservation, so the producer's next submit of that key made a second job. Here
``spool run --workers 2`` drains a few hundred keyed jobs while a producer resubmits every key
with ``submit_many``, and ``spool fsck`` / ``spool fsck --repair`` run in a loop meanwhile: every
key must end with exactly one job, every fsck (plain or repairing) must exit 0 without calling a
reservation an orphan, and the last fsck is clean.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, Procs, run_spool, wait_until

from spool import Spool
from spool.disk.layout import State
from spool.yaml.safe import load_yaml

PRODUCER = """
import sys, time
from spool import Spool
root, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with Spool(root) as sp:
    specs = [sp.spec("sleep", {"seconds": 0.01}, key=f"k-{n}") for n in range(count)]
    end, rounds = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        made = [s for s in sp.submit_many(specs) if s.created]
        rounds += 1
        if made:
            print("created", len(made), flush=True)
print("rounds", rounds, flush=True)
"""


def jobs_per_key(root: Path) -> dict[str, list[str]]:
    """Every job file in every state folder, by its key (job ids that appear twice count once)."""
    keys: dict[str, set[str]] = {}
    for state in State:
        for path in (root / state.value).glob("*.yaml"):
            text = load_yaml(path.read_bytes(), max_bytes=1 << 20, source=str(path))
            assert isinstance(text, dict)
            keys.setdefault(str(text["key"]), set()).add(str(text["id"]))
    return {key: sorted(ids) for key, ids in keys.items()}


def fsck_loop_beside_drain(spool_dir: Path, procs: Procs, keys: int, seconds: float) -> None:
    (spool_dir / "config.yaml").write_text("poll_seconds: 0.2\nmax_pending: 100000\n")
    with Spool(spool_dir, environ={}) as sp:
        sp.submit_many([sp.spec("sleep", {"seconds": 0.01}, key=f"k-{n}") for n in range(keys)])
    procs.start("run", "--workers", "2", "--import", "examples.tasks", name="run")
    producer = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, str(spool_dir), str(keys), str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    procs.started.append(producer)  # type: ignore[arg-type]
    failures: list[str] = []
    runs = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for args in (("fsck",), ("fsck", "--repair")):
            done = run_spool(*args, spool=spool_dir)
            runs += 1
            if done.returncode != 0:
                failures.append(f"{' '.join(args)} exit {done.returncode}: {done.stdout[-600:]}{done.stderr[-300:]}")
            # Every job keeps its key throughout: no reservation is ever an orphan here.
            removed = [line for line in done.stdout.splitlines() if "reservation without its job" in line]
            failures += [f"{' '.join(args)}: {line}" for line in removed]
    out, _ = producer.communicate(timeout=60)
    assert producer.returncode == 0, out
    wait_until(
        lambda: not any(any((spool_dir / s.value).glob("*.yaml")) for s in (State.PENDING, State.LEASED)),
        timeout=60,
        message="the drain to finish",
    )
    doubled = {key: ids for key, ids in jobs_per_key(spool_dir).items() if len(ids) != 1}
    assert len(jobs_per_key(spool_dir)) == keys
    assert not doubled, f"{len(doubled)} key(s) with more than one job, e.g. {list(doubled.items())[:3]}; {out}"
    assert "created" not in out, out
    assert not failures, f"{len(failures)} problem(s) in {runs} fsck runs:\n" + "\n".join(failures[:3])
    final = run_spool("fsck", spool=spool_dir)
    assert final.returncode == 0, final.stdout + final.stderr


def test_fsck_and_repair_beside_a_drain_and_a_resubmitting_producer(spool_dir: Path, procs: Procs) -> None:
    fsck_loop_beside_drain(spool_dir, procs, keys=300, seconds=6.0)


@pytest.mark.stress
def test_fsck_and_repair_beside_a_big_drain(spool_dir: Path, procs: Procs) -> None:
    fsck_loop_beside_drain(spool_dir, procs, keys=3000, seconds=25.0)


def test_repair_rebuild_counts_every_job_while_jobs_move(spool_dir: Path, procs: Procs) -> None:
    """``rebuilt from the files (N jobs)`` names every job, even those that moved during its listing."""
    (spool_dir / "config.yaml").write_text("poll_seconds: 0.2\nmax_pending: 100000\n")
    count = 300
    with Spool(spool_dir, environ={}) as sp:
        sp.submit_many([sp.spec("sleep", {"seconds": 0.01}) for _ in range(count)])
    procs.start("run", "--workers", "2", "--import", "examples.tasks", name="run")
    seen = []
    for _ in range(8):
        done = run_spool("fsck", "--repair", spool=spool_dir)
        seen += [line for line in done.stdout.splitlines() if "rebuilt from the files" in line]
    assert seen and all(f"({count} jobs)" in line for line in seen), seen
