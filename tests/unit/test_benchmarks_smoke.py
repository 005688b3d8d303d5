"""The benchmarks still run: each one at a tiny size, as a real process, so they cannot rot.

They print numbers, not verdicts; these tests check only that every number is there and that
the work they measured really happened (every job drained, one file read per claim).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from support import ROOT


def _run_benchmark(tmp_path: Path, script: str, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--dir", str(tmp_path), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        _kill_leftovers(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _kill_leftovers(tmp_path: Path) -> None:
    """SIGKILL, by pid, any process still running on this test's spools (a benchmark that timed out)."""
    marker = str(tmp_path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def test_claim_cost_prints_a_row_per_size(tmp_path: Path) -> None:
    done = _run_benchmark(tmp_path, "claim_cost.py", "--sizes", "40,80", "--claims", "5")
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+)\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) ms$",
                      done.stdout, re.MULTILINE)
    assert [(size, claims) for size, claims, *_ in rows] == [("40", "5"), ("80", "5")], done.stdout
    for _size, _claims, p50, p99, files_read, *_rest in rows:
        assert 0 < float(p50) <= float(p99)
        assert float(files_read) == 1, "a claim reads one job file (the one it takes)"
    assert list(tmp_path.iterdir()) == [], "the built spools are removed without --keep"


def test_throughput_drains_every_job_and_prints_the_table(tmp_path: Path) -> None:
    strace_jobs = "5" if shutil.which("strace") else "0"
    done = _run_benchmark(tmp_path, "throughput.py", "--jobs", "20", "--workers", "2", "--cli-submits", "1",
                          "--pickups", "3", "--fsync-jobs", "2", "--strace-jobs", strace_jobs, "--json")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["drain"]["done"] == 20 and report["drain"]["dead"] == 0, done.stdout
    assert report["drain"]["rate"] > 0
    assert report["submit_python"]["jobs"] == 20 and report["submit_cli"]["jobs"] == 1
    assert report["pickup"]["count"] == 3 and 0 < report["pickup"]["handler_p50_ms"] < 60_000
    assert report["fsync_seam"]["lifecycle"] > 0
    if strace_jobs != "0":
        assert report["fsync_strace"]["submit"].get("fsync", 0) > 0, report["fsync_strace"]
        assert report["fsync_strace"]["run_per_job"] > 0
    for label in ("submit, Python API", "drain, first claim -> last done", "idle pickup, ack -> handler start",
                  "fsyncs per job (seam)"):
        assert label in done.stdout
    assert list(tmp_path.iterdir()) == []
