"""Instructions, not seconds: a backlog worker's per job and a submit's, counted by callgrind.

On a shared 2-core VM a run's wall and CPU times move 5-10% between identical runs, so a cut of
a few percent of the CPU is lost in them. ``valgrind --tool=callgrind`` counts the instructions a
process executes, which repeat to ~0.3% for the same code and inputs whatever else the machine is
doing (docs/performance.md, "CPU cuts counted in instructions"). Two rows:

- **worker**: ``spool worker --burst`` (the worker process under callgrind, not its attempt child)
  draining ``--jobs`` pending ``echo`` jobs, less the same worker with none (its start-up);
- **submit**: one process calling ``Spool.submit`` ``--submits`` times, less one calling it a tenth
  as often, per submit.

Each spool is made in ``--dir`` (tmpfs by default, where no sync costs anything: the instructions
are the same on any disk, the kernel's are not counted). To compare two versions, run this from a
checkout of each. Instructions are not time: a cut of cheap ones (attribute reads) buys less
than its share, and a worker in a backlog spends about a quarter of its time in the kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import process_env  # noqa: E402
from spool import Spool  # noqa: E402

_SUBMITS = """
import sys
from pathlib import Path
from spool import Spool
with Spool(Path(sys.argv[2]), environ={"SPOOL_MAX_PENDING": "1000000"}) as sp:
    for n in range(int(sys.argv[1])):
        sp.submit("echo", {"i": n})
"""


def _counted(command: list[str]) -> int:
    """The instructions callgrind counted for ``command`` (its own process only)."""
    ran = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        env=process_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", ran.stderr)
    if ran.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed ({ran.returncode}): {ran.stderr[-2000:]}")
    return int(found.group(1))


def _fresh(work: Path, name: str, pending: int) -> Path:
    root = work / name
    Spool.init(root, environ={}).close()
    with Spool(root, environ={"SPOOL_MAX_PENDING": str(pending + 1000)}) as sp:
        for n in range(pending):
            sp.submit("echo", {"i": n})
    return root


def worker(work: Path, jobs: int) -> dict[str, float]:
    def drained(pending: int) -> int:
        root = _fresh(work, f"worker-{pending}", pending)
        command = [sys.executable, "-m", "spool.cli", "--spool", str(root), "worker", "--burst"]
        count = _counted([*command, "--import", "examples.tasks"])
        left = sum(1 for name in os.listdir(root / "pending") if name.endswith(".yaml"))
        if left:
            raise SystemExit(f"the worker left {left} of {pending} jobs in pending/")
        return count

    start_up, total = drained(0), drained(jobs)
    return {"jobs": jobs, "start_up": start_up, "per_job": (total - start_up) / jobs}


def submit(work: Path, submits: int) -> dict[str, float]:
    few = max(1, submits // 10)

    def counted(n: int) -> int:
        root = _fresh(work, f"submit-{n}", 0)
        return _counted([sys.executable, "-c", _SUBMITS, str(n), str(root)])

    return {"submits": submits, "per_submit": (counted(submits) - counted(few)) / (submits - few)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    parser.add_argument("--dir", default=shm, help="where the spools are made (default: /dev/shm)")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs the worker drains (1,000: ~30 s)")
    parser.add_argument("--submits", type=int, default=550, help="submits counted (550: ~20 s)")
    parser.add_argument("--json", action="store_true", help="one JSON line after the table")
    o = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("instructions: skipped, valgrind is not installed (Debian: apt install valgrind)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="spool-instructions-", dir=o.dir))
    try:
        report = {"worker": worker(work, o.jobs), "submit": submit(work, o.submits)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    w, s = report["worker"], report["submit"]
    print(f"instructions (callgrind), checkout {ROOT}")
    per_job, start_up = w["per_job"] / 1e6, w["start_up"] / 1e6
    print(f"  backlog worker, per job ({w['jobs']:.0f} jobs)    {per_job:8.3f} M   start-up {start_up:.0f} M")
    print(f"  Spool.submit, per submit ({s['submits']:.0f})       {s['per_submit'] / 1e3:8.0f} k")
    if o.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
