"""What one claim costs at 1,000 and at 100,000 pending jobs, and what ``reconcile()`` costs.

    python benchmarks/claim_cost.py --sizes 1000,100000 --claims 200

For each size it builds a spool with that many ready ``echo`` jobs in pending/, then, in this
process, times ``transitions.claim`` (the worker's PENDING -> LEASED) for ``--claims`` jobs and
``transitions.complete`` for each of them, counting the filesystem calls each one makes through
the ``spool.disk.fsio`` seam. Then it times the coordinator's ``recovery.reconcile`` (folder listings
against the ledger) on the spool at rest: a full pass, and the ``full=False`` one the coordinator
makes between full ones.

How the spool is built: not through ``submit`` (two fsyncs a job; 100,000 of them take
minutes and are not what is measured here). Each job file is encoded with the real encoder
(``spool.job.encode``) and written straight into pending/ without fsync, by a pool of
processes; the ledger's rows come from ``Ledger.rebuild`` over the same ``JobFile`` values (what
``spool fsck --repair`` does after listing the folders); then one ``os.sync()``, so the timed
claims do not pay for the build's write-back. The files are then in the page cache, as they are
on a busy host.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # examples.tasks, when run as a script from anywhere

from spool import Spool, registry
from spool.disk import fsio
from spool.disk.ids import new_id
from spool.job import Job, JobFile, encode
from spool.disk.layout import State, job_name
from spool.moves.recovery import list_folders, reconcile
from spool.base.timetext import now_text
from spool.moves.transitions import Lease, claim, complete

TASK = "echo"


# -- counting through the seam -------------------------------------------------------------------


class CountingFS(fsio.RealFS):
    """The real filesystem, counting each seam call by name (and each fsync, wherever it is)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def read_file(
        self, dir_fd: int, name: str, max_bytes: int, *, single_link: bool = False, settled: bool = False
    ) -> bytes:
        self.calls["read_file"] += 1
        return super().read_file(dir_fd, name, max_bytes, single_link=single_link, settled=settled)

    def write_new(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> None:
        self.calls["write_new"] += 1
        self.calls["fsync"] += int(sync)
        super().write_new(dir_fd, name, data, sync=sync)

    def fsync_dir(self, dir_fd: int) -> None:
        self.calls["fsync"] += 1
        super().fsync_dir(dir_fd)

    def fsync_file(self, dir_fd: int, name: str) -> None:
        self.calls["fsync"] += 1
        super().fsync_file(dir_fd, name)

    def syncfs(self, dir_fd: int) -> bool:
        """One syncfs counts as one sync (it stands in for several fsyncs: that is its point)."""
        synced = super().syncfs(dir_fd)
        self.calls["fsync"] += int(synced)
        self.calls["syncfs"] += int(synced)
        return synced

    def list_dir(self, dir_fd: int) -> list[str]:
        self.calls["list_dir"] += 1
        return super().list_dir(dir_fd)

    def lstat(self, dir_fd: int, name: str) -> os.stat_result | None:
        self.calls["stat"] += 1
        return super().lstat(dir_fd, name)

    def rename_noreplace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        self.calls["rename"] += 1
        super().rename_noreplace(src_fd, src, dst_fd, dst)

    def rename_replace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        self.calls["rename"] += 1
        super().rename_replace(src_fd, src, dst_fd, dst)

    def link(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        self.calls["link"] += 1
        super().link(src_fd, src, dst_fd, dst)


@contextmanager
def swapped_fs(replacement: fsio.RealFS) -> Iterator[None]:
    """Put ``replacement`` behind the seam every spool module calls, and back afterwards."""
    original = fsio.use(replacement)
    try:
        yield
    finally:
        fsio.use(original)


# -- building a big spool fast --------------------------------------------------------------------


def _write_chunk(args: tuple[str, list[tuple[str, int, str]], str | None]) -> int:
    pending, rows, queue = args
    dir_fd = os.open(pending, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for job_id, index, submitted_at in rows:
            data = encode(_job_file(job_id, index, submitted_at, queue))
            fsio.fs.write_new(dir_fd, job_name(job_id), data, sync=False)
    finally:
        os.close(dir_fd)
    return len(rows)


def _job_file(job_id: str, index: int, submitted_at: str, queue: str | None = None) -> JobFile:
    job = Job(id=job_id, key=job_id, task=TASK, args={"i": index})
    if queue is not None:
        job = dataclasses.replace(job, queue=queue)
    return JobFile(job=job, submitted_at=submitted_at)


def build_spool(root: Path, size: int, processes: int = 2, queue: str | None = None) -> float:
    """A spool with ``size`` ready jobs in pending/ (in ``queue``; None: the default one) and a
    ledger that agrees; returns seconds."""
    started = time.perf_counter()
    sp = Spool.init(root, environ={})
    try:
        submitted_at = now_text()
        rows = [(new_id(), index, submitted_at) for index in range(size)]
        pending = str(sp.layout.path(State.PENDING))
        chunk = max(1, min(2000, size // (processes * 4) or 1))
        chunks = [(pending, rows[i : i + chunk], queue) for i in range(0, size, chunk)]
        if size < 5000:  # in this process: a fork pool once hung a smoke test (19:34 UTC, 2026-12-01)
            written = sum(map(_write_chunk, chunks))
        else:
            with multiprocessing.get_context("fork").Pool(processes) as pool:
                written = sum(pool.imap_unordered(_write_chunk, chunks))
        assert written == size
        sp.ledger.rebuild((_job_file(job_id, index, at, queue), State.PENDING, True) for job_id, index, at in rows)
        os.sync()
    finally:
        sp.close()
    return time.perf_counter() - started


# -- measuring ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 200 values is the 198th smallest)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def measure(root: Path, claims: int, reconcile_runs: int = 3) -> dict[str, Any]:
    import examples.tasks  # noqa: F401  (registers echo and the others, as a worker would)

    tasks = sorted(registry.registered())
    counting = CountingFS()
    claim_ms: list[float] = []
    complete_ms: list[float] = []
    claim_calls: Counter[str] = Counter()
    complete_calls: Counter[str] = Counter()
    with Spool(root, environ={}) as sp, swapped_fs(counting):
        _ = sp.ledger  # open the connection outside the timings
        for _ in range(claims):
            counting.calls.clear()
            started = time.perf_counter()
            job_file = claim(sp, "bench-worker", tasks)
            claim_ms.append((time.perf_counter() - started) * 1000)
            if job_file is None:
                raise SystemExit("ran out of ready jobs: --claims is larger than the size")
            claim_calls.update(counting.calls)
            counting.calls.clear()
            started = time.perf_counter()
            complete(sp, Lease(job_file.id, "bench-worker", job_file.attempt), b'{"ok": true}')
            complete_ms.append((time.perf_counter() - started) * 1000)
            complete_calls.update(counting.calls)
        listing_s, reconcile_s, active_s = [], [], []
        for _ in range(reconcile_runs):
            started = time.perf_counter()
            list_folders(sp)
            listing_s.append(time.perf_counter() - started)
            counting.calls.clear()
            started = time.perf_counter()
            reconcile(sp)
            reconcile_s.append(time.perf_counter() - started)
        reconcile_calls = dict(counting.calls)
        for _ in range(reconcile_runs):  # the coordinator's pass between full ones (pending/ is in it)
            started = time.perf_counter()
            reconcile(sp, full=False)
            active_s.append(time.perf_counter() - started)
    return {
        "claim_ms": claim_ms,
        "complete_ms": complete_ms,
        "claim_calls": {k: v / claims for k, v in claim_calls.items()},
        "complete_calls": {k: v / claims for k, v in complete_calls.items()},
        "listing_s": listing_s,
        "reconcile_s": reconcile_s,
        "reconcile_calls": reconcile_calls,
        "reconcile_active_s": active_s,
    }


def _calls(per_op: dict[str, float], *names: str) -> str:
    return " ".join(f"{name}={per_op.get(name, 0):g}" for name in names)


def run(
    sizes: Sequence[int], claims: int, base: Path | None, keep: bool, out: TextIO = sys.stdout
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        if claims > size:
            raise SystemExit(f"--claims {claims} is more than the size {size}")
        work = Path(tempfile.mkdtemp(prefix=f"claim-cost-{size}-", dir=base))
        try:
            build_s = build_spool(work / "spool", size)
            print(
                f"size {size}: built in {build_s:.1f}s (encode + write without fsync, Ledger.rebuild, os.sync)",
                file=out,
                flush=True,
            )
            result = measure(work / "spool", claims)
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
        result.update(size=size, build_s=build_s)
        rows.append(result)
        c, d = result["claim_ms"], result["complete_ms"]
        print(
            f"  claim    p50 {percentile(c, 0.5):7.2f} ms  p99 {percentile(c, 0.99):7.2f} ms  "
            f"per claim: {_calls(result['claim_calls'], 'read_file', 'stat', 'list_dir', 'rename', 'fsync')}",
            file=out,
        )
        print(
            f"  complete p50 {percentile(d, 0.5):7.2f} ms  p99 {percentile(d, 0.99):7.2f} ms  "
            "per complete: "
            f"{_calls(result['complete_calls'], 'read_file', 'stat', 'list_dir', 'rename', 'link', 'fsync')}",
            file=out,
        )
        print(
            f"  reconcile {statistics.median(result['reconcile_s']) * 1000:8.1f} ms median of "
            f"{len(result['reconcile_s'])} "
            f"(folder listing alone {statistics.median(result['listing_s']) * 1000:.1f} ms; "
            f"{_calls(result['reconcile_calls'], 'list_dir', 'read_file', 'stat')}; "
            f"full=False {statistics.median(result['reconcile_active_s']) * 1000:.1f} ms)",
            file=out,
            flush=True,
        )
    print(f"\nclaim cost: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end", file=out)
    print("  pending  claims  claim p50  claim p99  files read/claim  complete p50  complete p99  reconcile", file=out)
    for r in rows:
        c, d = r["claim_ms"], r["complete_ms"]
        print(
            f"  {r['size']:>7}  {len(c):>6}  {percentile(c, 0.5):6.2f} ms  {percentile(c, 0.99):6.2f} ms  "
            f"{r['claim_calls'].get('read_file', 0):>16g}  "
            f"{percentile(d, 0.5):9.2f} ms  {percentile(d, 0.99):9.2f} ms  "
            f"{statistics.median(r['reconcile_s']) * 1000:7.1f} ms",
            file=out,
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000", help="pending jobs to claim from, comma-separated")
    parser.add_argument("--claims", type=int, default=200, help="claims (each followed by its complete) per size")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the spools (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the built spools")
    options = parser.parse_args(argv)
    sizes = [int(text.replace("_", "")) for text in options.sizes.split(",") if text.strip()]
    run(sizes, options.claims, options.dir, options.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
