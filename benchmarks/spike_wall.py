"""Issue 19's spike, part 1: where the producer's wall goes in shape (a) today, beside Huey's.

    python benchmarks/spike_wall.py --dir DIR [--jobs N] [--rounds R] [--untraced]
        [--producer-calls clock_nanosleep,flock,fcntl,renameat2,fsync] [--json]

Shape (a): ``spool run --workers 2`` up and warm, one producer submitting N ``echo`` jobs one by
one through ``Spool.submit``. The producer times each part of every submit in its own process
(wrappers around ``os.fsync`` and the submit's own steps, no tracer on it): the job file's fsync,
the fsync of ``pending/``, the rest of writing the file (create in tmp/, write, rename), the
backpressure read, the ledger's row, the wake-up, and its on-CPU time (``time.process_time``) and
time waiting for a CPU (``/proc/self/schedstat``). ``spool run`` runs under ``strace -f
--seccomp-bpf -ttt -T -e trace=fsync,fdatasync,syncfs`` (only those calls stop), so each producer
fsync is matched with the workers' syncs in flight at the same moment: does it wait behind them?

Huey's shape (a) runs in the same round, on the same folder: its consumer (``-k process -w 2``) and
its producer each under ``strace -f --seccomp-bpf -ttt -T -e trace=fsync,fdatasync``: its syncs per
job and how long its producer's fdatasync takes. The rounds alternate which system goes first.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import resource
import shutil
import signal
import sqlite3
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

THIS = Path(__file__).resolve()
TRACE = True  # --untraced: no strace anywhere (the rates without the tracer's stops)
PRODUCER_CALLS = ""  # --producer-calls: the spool producer under ``strace -f -c -w`` for these calls
STRACE = ["strace", "-f", "-qq", "--seccomp-bpf", "-ttt", "-T"]
_DONE = re.compile(r"^(\d+)\s+([\d.]+)\s+(\w+)\((.*?)\)\s+=\s+(-?\d+).*<([\d.]+)>$")
_START = re.compile(r"^(\d+)\s+([\d.]+)\s+(\w+)\((.*?) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+)\s+([\d.]+)\s+<\.\.\. (\w+) resumed>.*=\s+(-?\d+).*<([\d.]+)>$")


# -- the producer, in its own process ----------------------------------------------------------


def _schedstat() -> tuple[float, float]:
    """(on-CPU, waiting for a CPU) seconds of this process so far, from the scheduler."""
    fields = Path("/proc/self/schedstat").read_text().split()
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


def produce(root: Path, jobs: int, out: Path) -> None:
    """Submit ``jobs`` one by one with every part timed; write the records to ``out`` (JSON)."""
    import spool.moves.submission as submission
    from spool import Spool

    parts: dict[str, float] = {}
    syncs: list[tuple[float, float, str]] = []  # (wall start, seconds, "file" | "dir")
    real_fsync = os.fsync

    def timed_fsync(fd: int) -> None:
        t0, w0 = time.perf_counter(), time.time()
        real_fsync(fd)
        took = time.perf_counter() - t0
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        parts[f"fsync_{kind}"] = parts.get(f"fsync_{kind}", 0.0) + took
        syncs.append((w0, took, kind))

    def timing(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - t0

        return wrapper

    os.fsync = timed_fsync  # type: ignore[assignment]
    submission.create_job = timing("create_job", submission.create_job)  # type: ignore[assignment]
    submission.check_room = timing("check_room", submission.check_room)  # type: ignore[assignment]
    submission._index_submit = timing("ledger_record", submission._index_submit)  # type: ignore[attr-defined]
    submission.wake = timing("wake", submission.wake)  # type: ignore[assignment]
    records = []
    with Spool(root, environ={"SPOOL_MAX_PENDING": str(jobs + 20_000)}) as sp:
        sp.submit("echo", {"i": -1})  # connections open, modules loaded
        parts.clear()
        syncs.clear()
        usage0, sched0, first = resource.getrusage(resource.RUSAGE_SELF), _schedstat(), time.time()
        for n in range(jobs):
            before = dict(parts)
            t0, c0 = time.perf_counter(), time.process_time()
            sp.submit("echo", {"i": n})
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            records.append({"wall": wall, "cpu": cpu, **{k: v - before.get(k, 0.0) for k, v in parts.items()}})
        submitted, sched1 = time.time(), _schedstat()
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
    out.write_text(
        json.dumps(
            {
                "first": first,
                "submitted": submitted,
                "records": records,
                "syncs": syncs,
                "runqueue_s": sched1[1] - sched0[1],
                "voluntary_switches": usage1.ru_nvcsw - usage0.ru_nvcsw,
                "involuntary_switches": usage1.ru_nivcsw - usage0.ru_nivcsw,
            }
        )
    )


def produce_huey(jobs: int, out: Path) -> None:
    from benchmarks.huey_app import noop

    noop(-1)
    walls, cpus, first = [], [], time.time()
    sched0 = _schedstat()
    for n in range(jobs):
        t0, c0 = time.perf_counter(), time.process_time()
        noop(n)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    submitted, sched1 = time.time(), _schedstat()
    out.write_text(
        json.dumps(
            {
                "first": first,
                "submitted": submitted,
                "records": [{"wall": w, "cpu": c} for w, c in zip(walls, cpus)],
                "runqueue_s": sched1[1] - sched0[1],
            }
        )
    )


# -- traces ------------------------------------------------------------------------------------


def read_trace(path: Path) -> list[tuple[int, float, float, str, int]]:
    """(pid, wall start, seconds, call, result) of every call in an ``strace -f -ttt -T`` file."""
    calls, started = [], {}
    for line in path.read_text(errors="replace").splitlines():
        if m := _DONE.match(line):
            calls.append((int(m[1]), float(m[2]), float(m[6]), m[3], int(m[5])))
        elif m := _START.match(line):
            started[(m[1], m[3])] = float(m[2])
        elif m := _RESUMED.match(line):
            t0 = started.pop((m[1], m[3]), float(m[2]) - float(m[5]))
            calls.append((int(m[1]), t0, float(m[5]), m[3], int(m[4])))
    return calls


def in_window(calls: list[Any], first: float, last: float) -> list[Any]:
    return [c for c in calls if first <= c[1] <= last]


def overlap_split(mine: list[tuple[float, float, str]], theirs: list[tuple[float, float, str]]) -> dict[str, Any]:
    """For each of ``mine`` (start, seconds, kind): did any of ``theirs`` run at the same time?
    Median and mean seconds of each kind, split by overlapped or not."""
    spans = sorted((t0, t0 + d, kind) for t0, d, kind in theirs)
    starts = [s[0] for s in spans]
    groups: dict[str, list[float]] = {}
    for t0, took, kind in mine:
        t1 = t0 + took
        hi = bisect.bisect_right(starts, t1)
        hit = {s[2] for s in spans[max(0, hi - 64) : hi] if s[1] > t0}
        label = f"{kind}, during a worker's " + ("syncfs" if "syncfs" in hit else "fsync" if hit else "nothing")
        groups.setdefault(label, []).append(took)
    return {
        k: {"n": len(v), "p50_us": statistics.median(v) * 1e6, "mean_us": statistics.fmean(v) * 1e6}
        for k, v in sorted(groups.items())
    }


# -- the rounds --------------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    from benchmarks.procs import env

    return env(**extra)


def _done_count(db: Path, sql: str) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute(sql).fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def _wait(db: Path, sql: str, count: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while _done_count(db, sql) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} jobs not done after {timeout:.0f}s ({db})")
        time.sleep(0.005)
    return time.time()


def _stop(proc: subprocess.Popen[Any], signum: int) -> None:
    from benchmarks.procs import kill

    kill(proc, signum)


def _traced(trace: Path, calls: str, cmd: list[str]) -> list[str]:
    """``cmd`` under strace, or as it is where ``--untraced`` (``TRACE`` off) asks."""
    return [*STRACE, "-e", f"trace={calls}", "-o", str(trace), *cmd] if TRACE else cmd


def round_spool(work: Path, jobs: int, timeout: float) -> dict[str, Any]:
    from benchmarks.procs import popen
    from spool import Spool

    root = work / f"wall-spool-{time.monotonic_ns()}"
    Spool.init(root, environ={}).close()
    trace = root.parent / (root.name + ".trace")
    cmd = [
        sys.executable,
        "-m",
        "spool.cli",
        "--spool",
        str(root),
        "run",
        "--workers",
        "2",
        "--import",
        "examples.tasks",
    ]
    runner = popen(_traced(trace, "fsync,fdatasync,syncfs", cmd), _env(), work / "wall.log")
    db, sql = root / "ledger.sqlite3", "SELECT count(*) FROM jobs WHERE state = 'done'"
    try:
        out = root.parent / (root.name + ".json")
        subprocess.run([sys.executable, str(THIS), "_produce", str(root), "5", str(out)], env=_env(), check=True)
        _wait(db, sql, 6, timeout)
        time.sleep(0.5)
        produce = [sys.executable, str(THIS), "_produce", str(root), str(jobs), str(out)]
        summary = root.parent / (root.name + ".calls")
        if PRODUCER_CALLS:  # wall time inside each call, counted by strace (only these calls stop)
            produce = [
                "strace",
                "-f",
                "-c",
                "-w",
                "--seccomp-bpf",
                "-e",
                f"trace={PRODUCER_CALLS}",
                "-o",
                str(summary),
            ] + produce
        subprocess.run(produce, env=_env(), check=True)
        last = _wait(db, sql, 6 + jobs + 1, timeout)
    finally:
        _stop(runner, signal.SIGTERM)
    if PRODUCER_CALLS:
        print(f"   producer under strace -c -w ({jobs} submits and 1 warm-up):\n" + summary.read_text().rstrip())
        summary.unlink()
    p = json.loads(out.read_text())
    workers = in_window(read_trace(trace), p["first"], last) if TRACE else []
    shutil.rmtree(root, ignore_errors=True)
    trace.unlink(missing_ok=True)
    return _summary("spool", p, last, jobs, workers)


def round_huey(work: Path, jobs: int, timeout: float) -> dict[str, Any]:
    from benchmarks.procs import popen

    db = work / f"wall-huey-{time.monotonic_ns()}.db"
    trace, ptrace = Path(f"{db}.trace"), Path(f"{db}.ptrace")
    environ = _env(BENCH_HUEY_DB=str(db))
    cmd = [sys.executable, "-m", "huey.bin.huey_consumer", "benchmarks.huey_app.huey", "-k", "process", "-w", "2"]
    consumer = popen(_traced(trace, "fsync,fdatasync", cmd), environ, work / "wall.log")
    sql = "SELECT count(*) FROM kv"
    try:
        out = Path(f"{db}.json")
        produce_cmd = [sys.executable, str(THIS), "_produce_huey", "5", str(out)]
        subprocess.run(produce_cmd, env=environ, check=True, cwd=ROOT)
        _wait(db, sql, 6, timeout)
        time.sleep(0.5)
        produce_cmd = _traced(ptrace, "fsync,fdatasync", produce_cmd)
        produce_cmd[-2] = str(jobs)
        subprocess.run(produce_cmd, env=environ, check=True, cwd=ROOT)
        last = _wait(db, sql, 6 + jobs + 1, timeout)
    finally:
        _stop(consumer, signal.SIGINT)
    p = json.loads(out.read_text())
    mine = (
        [c for c in in_window(read_trace(ptrace), p["first"], p["submitted"]) if c[3] == "fdatasync"] if TRACE else []
    )
    p["syncs"] = [(c[1], c[2], c[3]) for c in mine if c[3] == "fdatasync"]
    workers = in_window(read_trace(trace), p["first"], last) if TRACE else []
    for path in (db, trace, ptrace, out, Path(f"{db}-wal"), Path(f"{db}-shm")):
        path.unlink(missing_ok=True)
    return _summary("huey", p, last, jobs, workers)


def _summary(name: str, p: dict[str, Any], last: float, jobs: int, workers: list[Any]) -> dict[str, Any]:
    recs = p["records"]
    per_job = {k: sum(r.get(k, 0.0) for r in recs) * 1000 / jobs for k in recs[0]}
    theirs = [(c[1], c[2], c[3]) for c in workers]
    worker_calls: dict[str, int] = {}
    worker_time: dict[str, float] = {}
    for c in workers:
        worker_calls[c[3]] = worker_calls.get(c[3], 0) + 1
        worker_time[c[3]] = worker_time.get(c[3], 0.0) + c[2]
    return {
        "system": name,
        "traced": TRACE,
        "jobs": jobs,
        "drain": jobs / (last - p["first"]),
        "submits": jobs / (p["submitted"] - p["first"]),
        "submit_p50_ms": statistics.median(r["wall"] for r in recs) * 1000,
        "ms_per_job": per_job,
        "runqueue_ms_per_job": p["runqueue_s"] * 1000 / jobs,
        "producer_syncs": overlap_split([tuple(s) for s in p["syncs"]], theirs),  # type: ignore[misc]
        "worker_syncs_per_job": {k: v / jobs for k, v in worker_calls.items()},
        "worker_sync_ms_per_job": {k: v * 1000 / jobs for k, v in worker_time.items()},
        "load": os.getloadavg()[0],
    }


def show(r: dict[str, Any]) -> None:
    per = r["ms_per_job"]
    print(
        f"{r['system']:6} drain {r['drain']:6.0f}/s  submits {r['submits']:6.0f}/s  "
        f"submit p50 {r['submit_p50_ms']:.3f} ms  load {r['load']:.2f}"
    )
    print("   producer ms/job: " + ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
    print(f"   producer waiting for a CPU: {r['runqueue_ms_per_job']:.3f} ms/job")
    for k, v in r["producer_syncs"].items():
        print(f"   producer {k:38} n {v['n']:5}  p50 {v['p50_us']:7.0f} us  mean {v['mean_us']:7.0f} us")
    calls = r["worker_syncs_per_job"]
    print(
        "   workers' syncs/job: "
        + ", ".join(f"{k} {v:.2f} ({r['worker_sync_ms_per_job'][k]:.3f} ms)" for k, v in sorted(calls.items()))
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_produce"]:
        produce(Path(argv[1]), int(argv[2]), Path(argv[3]))
        return 0
    if argv[:1] == ["_produce_huey"]:
        produce_huey(int(argv[1]), Path(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--untraced", action="store_true", help="no strace (the overlap split is left out)")
    parser.add_argument("--producer-calls", default="", help="e.g. clock_nanosleep,flock,fcntl,renameat2,fsync")
    parser.add_argument("--json", action="store_true")
    o = parser.parse_args(argv)
    global TRACE, PRODUCER_CALLS
    TRACE, PRODUCER_CALLS = not o.untraced, o.producer_calls
    work = Path(tempfile.mkdtemp(prefix="spool-wall-", dir=o.dir))
    results = []
    try:
        for i in range(o.rounds):
            order = (round_spool, round_huey) if i % 2 == 0 else (round_huey, round_spool)
            for fn in order:
                r = fn(work, o.jobs, o.timeout)
                r["round"] = i
                results.append(r)
                show(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if o.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
