"""What a sync costs on a disk that was idle a moment before: the floor of an idle pickup.

    python benchmarks/sync_after_idle.py --dir DIR [--syncs 60] [--gaps 0,10,30,100]

An idle pickup (submit returned -> handler started) runs a claim on a quiet disk: its try must be
durable before the handler starts, and spool's claim makes two ordered syncs for it (the claimed
content's fsync, then leased/'s after the swap that names it; ``spool.moves.claiming``). This
prints, for each gap (ms of sleep between two rounds), the p50 and p99 of the same two syncs in
plain Python: a 400-byte rewrite of a small file and its fsync, then two renames in its folder and
the folder's fsync. No spool code runs. On this project's 2-core VMs a sync after even 10 ms of
quiet costs about ten times one made back to back (docs/performance.md, "A pickup that waited").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import percentile  # noqa: E402

FILES = 50  # rewritten in turn, as a worker rewrites its spare job files


def one_round(folder: Path, folder_fd: int, n: int) -> tuple[float, float]:
    """One rewrite + fsync, then two renames + the folder's fsync; each sync's seconds."""
    name, moved = folder / f"f{n % FILES}", folder / f"g{n % FILES}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, b"x" * 400, 0)
        started = time.perf_counter()
        os.fsync(fd)
        file_sync = time.perf_counter() - started
    finally:
        os.close(fd)
    os.rename(name, moved)
    os.rename(moved, name)
    started = time.perf_counter()
    os.fsync(folder_fd)
    return file_sync, time.perf_counter() - started


def measure(folder: Path, syncs: int, gap_seconds: float) -> dict[str, float]:
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        one_round(folder, folder_fd, 0)  # the files exist before the timed rounds
        rounds = []
        for n in range(syncs):
            if gap_seconds:
                time.sleep(gap_seconds)
            rounds.append(one_round(folder, folder_fd, n))
    finally:
        os.close(folder_fd)
    files, folders = [r[0] for r in rounds], [r[1] for r in rounds]
    return {
        "file_p50_ms": percentile(files, 0.5) * 1000,
        "file_p99_ms": percentile(files, 0.99) * 1000,
        "folder_p50_ms": percentile(folders, 0.5) * 1000,
        "folder_p99_ms": percentile(folders, 0.99) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="the folder (and so the disk) to measure on")
    parser.add_argument("--syncs", type=int, default=60, help="rounds per gap")
    parser.add_argument("--gaps", default="0,10,30,100", help="ms of quiet before each round, comma-separated")
    o = parser.parse_args(argv)
    gaps = [float(text) for text in o.gaps.split(",")]
    with tempfile.TemporaryDirectory(prefix="spool-sync-idle-", dir=o.dir) as work:
        print(f"sync after idle in {work} ({o.syncs} rounds per gap)")
        print("  gap ms   file fsync p50 / p99 ms   folder fsync p50 / p99 ms")
        for gap in gaps:
            r = measure(Path(work), o.syncs, gap / 1000)
            print(
                f"  {gap:6g}   {r['file_p50_ms']:10.3f} / {r['file_p99_ms']:<10.3f}"
                f"   {r['folder_p50_ms']:10.3f} / {r['folder_p99_ms']:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
