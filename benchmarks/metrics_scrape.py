"""What one ``GET /metrics`` scrape costs at 100,000 jobs (the collector itself, without HTTPS).

    python benchmarks/metrics_scrape.py --jobs 100000

It makes a spool and fills its ledger straight through SQL (the scrape reads only the ledger; a
job file per job would only cost the build): ``--jobs`` rows over four tasks, 60% done, 10% dead
after three failed attempts, 30% ready in pending/, with the history rows their moves write
(submit, claim, complete or fail). Then it times, in this process, ``generate_latest`` over the
collector ``GET /metrics`` uses: the first scrape (which folds the whole history), steady scrapes
(no new rows), and scrapes after 1,000 new transitions each.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from spool import Spool  # noqa: E402
from spool.runner.api.metrics import SpoolCollector  # noqa: E402

TASKS = ("resize", "email", "report", "sync")
SUBMITTED_AT = "2026-12-01T12:00:00.000Z"


def fill(db: sqlite3.Connection, jobs: int, start: int = 0, at: float = 1.7e9) -> None:
    job_rows, history = [], []
    for n in range(start, start + jobs):
        job_id, task = f"J{n:025d}", TASKS[n % len(TASKS)]
        kind = n % 10
        state = "done" if kind < 6 else "dead" if kind == 6 else "pending"
        attempt = 3 if state == "dead" else 1 if state == "done" else 0
        job_rows.append(
            (
                job_id,
                job_id,
                task,
                state,
                0,
                int(state == "pending"),
                n,
                attempt,
                attempt,
                3,
                "failed" if state == "dead" else None,
                SUBMITTED_AT,
                at,
            )
        )
        history.append((job_id, at, "submit", 0, None))
        for a in range(1, attempt + 1):
            history.append((job_id, at + a, "claim", a, "w"))
            history.append((job_id, at + a + 0.25, "complete" if state == "done" else "fail", a, "w"))
    db.executemany(
        "INSERT INTO jobs(id, key, task, state, priority, ready, ready_seq, attempt, tries, max_tries, "
        "reason, submitted_at, updated) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
        job_rows,
    )
    db.executemany("INSERT INTO history(job_id, at, event, attempt, worker) VALUES(?,?,?,?,?)", history)
    db.commit()


def timed(registry: CollectorRegistry) -> float:
    started = time.perf_counter()
    generate_latest(registry)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="spool-metrics-"))
    try:
        root = folder / "spool"
        Spool.init(root, environ={}).close()
        sp = Spool(root, environ={})
        sp.ledger.counts()  # created and migrated
        db = sqlite3.connect(sp.layout.ledger_path)
        fill(db, options.jobs)
        rows = db.execute("SELECT count(*) FROM history").fetchone()[0]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SpoolCollector(sp))
        first = timed(registry)
        steady = [timed(registry) for _ in range(options.rounds)]
        grown = []
        for round_ in range(options.rounds):
            fill(db, 250, start=options.jobs + 250 * round_)  # ~1,000 history rows
            grown.append(timed(registry))
        print(f"jobs {options.jobs:,}  history rows {rows:,}")
        print(f"first scrape (folds the whole history)   {first:8.1f} ms")
        print(f"steady scrape, median of {options.rounds}              {statistics.median(steady):8.1f} ms")
        print(f"scrape after ~1,000 new rows, median      {statistics.median(grown):8.1f} ms")
        db.close()
        sp.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
