"""What the dashboard's overview, busy view and chain graph read at 100,000 jobs (without HTTPS).

    python benchmarks/dashboard_overview.py --jobs 100000

It fills a spool's ledger straight through SQL as ``metrics_scrape.py`` does (four tasks, 60%
done, 10% dead after three failed attempts, 30% ready; their history rows), adds 200 leased jobs
and a chain of 50, then times, in this process, each read a page makes: ``dashboard_now.health``
(the overview's warnings, as ``spool stats`` reads them), ``dashboard_now.tallies`` (its per-task and per-queue
tables), ``dashboard_now.running`` (the busy view's rows) and ``browse.chain_edges`` from the
chain's middle (its graph). Medians of ``--rounds``.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from metrics_scrape import SUBMITTED_AT, fill  # noqa: E402

from spool import Spool  # noqa: E402
from spool.views import browse, dashboard_now  # noqa: E402

LEASED, CHAIN = 200, 50


def add_leased_and_chain(db: sqlite3.Connection, at: float) -> str:
    """200 leased jobs with their claims, and a chain of 50 (each depends on the one before):
    returns the chain's middle job."""
    rows, history, deps = [], [], []
    for n in range(LEASED):
        job_id = f"L{n:025d}"
        rows.append((job_id, job_id, "resize", "leased", 0, 0, n, 1, 1, 3, None, SUBMITTED_AT, at))
        history.append((job_id, at + n, "claim", 1, f"w{n % 8}"))
    for n in range(CHAIN):
        job_id = f"C{n:025d}"
        rows.append((job_id, job_id, "report", "done", 0, 0, n, 1, 1, 3, None, SUBMITTED_AT, at))
        if n:
            deps.append((job_id, f"C{n - 1:025d}"))
    db.executemany(
        "INSERT INTO jobs(id, key, task, state, priority, ready, ready_seq, attempt, tries, max_tries, "
        "reason, submitted_at, updated) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    db.executemany("INSERT INTO history(job_id, at, event, attempt, worker) VALUES(?,?,?,?,?)", history)
    db.executemany("INSERT INTO deps(job_id, dep_id) VALUES(?,?)", deps)
    db.commit()
    return f"C{CHAIN // 2:025d}"


def median_ms(read: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="spool-dashboard-"))
    try:
        root = folder / "spool"
        Spool.init(root, environ={}).close()
        sp = Spool(root, environ={})
        sp.ledger.counts()  # created and migrated
        now = time.time()
        db = sqlite3.connect(sp.layout.ledger_path)
        fill(db, options.jobs, at=now - 30)  # the history's last minute holds every row
        middle = add_leased_and_chain(db, now - 20)
        rows = db.execute("SELECT count(*) FROM history").fetchone()[0]
        print(f"jobs {options.jobs + LEASED + CHAIN:,}  history rows {rows:,}  (medians of {options.rounds})")
        reads: dict[str, Callable[[], object]] = {
            "overview warnings (dashboard_now.health)": lambda: dashboard_now.health(sp),
            "overview tables (dashboard_now.tallies)": lambda: dashboard_now.tallies(sp, time.time() - 60),
            "busy view rows (200 leased)": lambda: dashboard_now.running(sp, 200),
            f"chain graph edges (a chain of {CHAIN})": lambda: browse.chain_edges(sp, middle, 60),
        }
        for name, read in reads.items():
            print(f"{name:45} {median_ms(read, options.rounds):8.1f} ms")
        db.close()
        sp.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
