"""The benchmark of issue 9: one command, one table, spool and (if installed) Huey side by side.

    python benchmarks/bench.py [--dir DIR] [--jobs N] [--quick] [--no-huey] [--json]

Everything runs in one fresh folder made under ``--dir`` (default: the temp dir), removed at
the end, so spool and Huey are measured on the same disk in the same run. The table says which
disk and filesystem that is and whether its ext4 has a journal. It prints numbers, never
verdicts; the issue's targets are printed beside the rows they are about.

What is measured (each in real processes unless said otherwise):

- submit, Python API one by one: a process submitting ``--submit-jobs`` jobs into a fresh spool
  (Huey: a fresh SQLite file) with nothing consuming. ``Spool.submit_many`` of 10,000 jobs if
  the class has it. ``spool submit`` as fresh processes (p50/p99) beside ``python -c pass``.
- end-to-end drain: the consumer already running (``spool run --workers 2``; Huey:
  ``huey_consumer -k process -w 2``), quiet (its start-up done: under 10% of a core over 0.5 s)
  and warmed up by one job; a producer process submits N
  trivial jobs one by one through the Python API while the workers consume. drain = N / (first
  submit -> N-th result): spool's N-th result is the last ``complete`` in the ledger's history
  (stamped after the result and the move to done/ are durable); Huey's is the latest end time
  its tasks returned. Also the producer's own rate, and CPU ms per job of each process.
- idle pickup: 100 times, a single job into the idle system, a random 0-50 ms gap after each
  result; latency = the handler's first ``time.time()`` - the moment submit returned.
- claim cost at 1,000 and 100,000 pending (``claim_cost.py``; ``--quick``: 10,000).
- drain with 100,000 finished jobs kept (``--quick``: 10,000), the end-to-end drain again, and
  the coordinator's and a worker's RSS (VmHWM, VmRSS) on that spool. How the finished jobs are
  made: one job goes through the real ``submit``, ``claim`` and ``complete``; each of the
  others is a copy of its files (done/, results/, locks/) and ledger rows with the id replaced,
  so each is byte for byte what the runner would have written (timestamps aside); then
  ``spool fsck`` must find no violation.
- file creations and fsyncs per job: ``strace -f -z`` over the producer and ``spool run``
  draining ``--strace-jobs`` jobs (n/a without strace), and the fsyncs per transition counted
  at the ``spool.disk.fsio`` seam in one process.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import claim_cost, peers, peers_report  # noqa: E402
from benchmarks.procs import CHILDREN, kill, popen  # noqa: E402
from benchmarks.throughput import (  # noqa: E402
    Host,
    cpu_seconds_by_role,
    fsyncs_in_process,
    open_spool,
    percentile,
    process_env,
    submit_cli,
)
from spool import Spool  # noqa: E402

THIS = Path(__file__).resolve()
# Huey deletes a task at dequeue; a worker whose next SQLite write then fails ("database is locked",
# its 5 s busy timeout, seen on this loaded machine) never stores the result and nothing retries it.
HUEY_STALL = 20.0  # seconds without a new result: that job's result is lost, count it and go on
HUEY_POLLS = {"default poll": [], "5 ms poll": ["-d", "0.005", "-m", "0.005", "-b", "1"]}
STRACE_CALLS = (
    "open,openat,creat,mkdir,mkdirat,link,linkat,rename,renameat,renameat2,fsync,fdatasync,sync_file_range,syncfs"
)

_HOSTS: list[Any] = []


def huey_importable() -> bool:
    try:
        import huey  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


# -- the disk --------------------------------------------------------------------------------------


def disk_info(path: Path) -> dict[str, str]:
    def out(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    source, target, fstype, options = (
        out("findmnt", "-n", "-T", str(path), "-o", "SOURCE,TARGET,FSTYPE,OPTIONS").split() + ["?"] * 4
    )[:4]
    info = {
        "dir": str(path),
        "source": source,
        "mount": target,
        "fstype": fstype,
        "options": options,
        "stat_f": out("stat", "-f", "-c", "%T", str(path)) or "?",
        "journal": "unknown",
        "inodes_free": str(os.statvfs(path).f_favail),
        "create_us": f"{create_cost(path):.1f}",
    }
    if fstype == "ext4":
        features = out("dumpe2fs", "-h", source) if shutil.which("dumpe2fs") else ""
        features = next((line for line in features.splitlines() if line.startswith("Filesystem features")), "")
        if features:
            info["journal"] = (
                "yes (dumpe2fs: has_journal)" if "has_journal" in features else "no (dumpe2fs: no has_journal)"
            )
        elif Path("/proc/fs/jbd2").is_dir():
            dev = os.path.basename(source)
            has = any(entry.name.startswith(dev + "-") for entry in Path("/proc/fs/jbd2").iterdir())
            info["journal"] = (
                "yes" if has else "no"
            ) + f" (dumpe2fs refused; /proc/fs/jbd2 {'has' if has else 'has no'} {dev}-*)"
    return info


def loop_cost(steps: int = 1_000_000) -> float:
    """CPU milliseconds this process spends on ``steps`` additions in a Python loop (the least of
    three rounds: contention only adds): the CPU's speed at this moment, printed in the header.

    These machines share their cores with neighbours: between two sessions (2026-12-07 20:47 and
    2026-12-08 00:09) the same code's CPU per job grew 2.3-2.5x, for Huey as for spool. A ratio in
    one run cancels it only where both sides are bound alike: spool's CPU-bound rows (a backlog's
    drain) fall against Huey's sync-bound ones when the CPU is slow (docs/performance.md)."""
    rounds = []
    for _ in range(3):
        cpu0, total = _cpu_self(), 0
        for step in range(steps):
            total += step
        rounds.append((_cpu_self() - cpu0) * 1e3)
    return min(rounds)


def create_cost(path: Path, files: int = 100) -> float:
    """CPU microseconds this process spends per new empty file in a fresh folder under ``path``
    (the median of three rounds of ``files`` creates): an indicator, printed with the disk.

    On an ext4 without a journal (this project's root disk) the inode allocator passes over every
    inode freed in the last 60 s (300 s while its inode table block is dirty) before it takes a
    free one (``recently_deleted`` in the kernel's fs/ext4/ialloc.c), so a file's creation costs
    what the deletions of the last minutes make it: 6-8 us on a quiet disk, 80-200 us after a run's
    folders were removed. spool makes three lasting files per job and its peers none, so a root-disk
    row taken minutes after a mass deletion undercounts spool (docs/performance.md, "A file's birth
    costs what the last minutes' deletions make it"). The probe removes its own 300 files.
    """
    rounds = []
    for n in range(3):
        folder = path / f"create-cost-{n}"
        folder.mkdir()
        fd = os.open(folder, os.O_RDONLY)
        try:
            cpu0 = _cpu_self()
            for i in range(files):
                os.close(os.open(str(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fd))
            rounds.append((_cpu_self() - cpu0) * 1e6 / files)
            for i in range(files):
                os.unlink(str(i), dir_fd=fd)
        finally:
            os.close(fd)
        folder.rmdir()
    return sorted(rounds)[1]


def _warn_if_few_inodes(free: int, o: argparse.Namespace, depth: int, say: Callable[[str], None]) -> None:
    """Say so before a run that may fill the disk's inode table (``free``: ``disk_info``'s count;
    a small loop image: 2 GB has 131,072, and old runs' folders keep theirs): the run would end in
    a bare ENOSPC traceback."""
    # a job leaves ~3 files; the depth rows keep ~1 per claim-cost job and ~3 per kept job to the end
    makes = 3 * (o.many_jobs + 6 * o.jobs) + (0 if o.peers_only else 4 * depth)
    if free < makes:
        say(f"warning: {free:,} free inodes on this disk (df -i); a run makes up to ~{makes:,} files: clear old runs")


# -- child processes -------------------------------------------------------------------------------


def run_child(
    kind: str, params: dict[str, Any], timeout: float, env: dict[str, str] | None = None, wrap: Sequence[str] = ()
) -> dict[str, Any]:
    """``bench.py _child KIND JSON`` in a fresh process; returns the JSON line it prints."""
    proc = popen([*wrap, sys.executable, str(THIS), "_child", kind, json.dumps(params)], env or process_env())
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc, signal.SIGKILL)
        raise RuntimeError(f"{kind} took more than {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed ({proc.returncode}): {stderr.strip()[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def kill_everything(work: Path) -> None:
    """Stop every host, SIGKILL every child's process group, then any process naming ``work``."""
    for host in _HOSTS:
        try:
            host.stop(timeout=15)
        except Exception:  # noqa: BLE001 - the killpg below is the backstop
            pass
    for proc in CHILDREN:
        kill(proc, signal.SIGKILL)
    marker = str(work).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes() or marker in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


class HueyHost:
    """``huey_consumer benchmarks.huey_app.huey -k process -w 2 [poll options]`` on ``db``."""

    def __init__(self, db: Path, poll: Sequence[str], log: Path) -> None:
        self.db, self.log_path = db, log
        self.proc = popen(
            [
                sys.executable,
                "-m",
                "huey.bin.huey_consumer",
                "benchmarks.huey_app.huey",
                "-k",
                "process",
                "-w",
                "2",
                *poll,
            ],
            huey_env(db),
            log,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tree(self) -> list[int]:
        found, queue = [self.proc.pid], [self.proc.pid]
        while queue:
            pid = queue.pop(0)
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                children = []
            found.extend(map(int, children))
            queue.extend(map(int, children))
        return found

    def cpu_by_role(self) -> dict[str, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        totals: dict[str, float] = {}
        for pid in self.tree():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            role = "consumer" if pid == self.proc.pid else "worker"
            totals[role] = totals.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
        return totals

    def stop(self, timeout: float = 15.0) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGINT)  # graceful: finish the task in hand
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        kill(self.proc, signal.SIGKILL)


def huey_env(db: Path) -> dict[str, str]:
    return {**process_env(), "BENCH_HUEY_DB": str(db)}


# -- what the child processes do (``bench.py _child KIND JSON``) ----------------------------------


def _history_seq(sp: Spool) -> int:
    """The newest history row's seq: counting only rows after it is a rowid range scan, not a
    scan of every row (at 100,000 kept jobs the full scan took 14-23 ms every 20 ms, ~1.7 ms of
    CPU per job drained, taken from the two cores the workers share)."""
    return int(sp.ledger._read("SELECT coalesce(max(seq), 0) FROM history", ())[0][0])


def _spool_wait_done(sp: Spool, since: float, count: int, timeout: float, after_seq: int = 0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        done, last = sp.ledger._read(
            "SELECT count(*), max(at) FROM history WHERE seq > ? AND event = 'complete' AND at >= ?",
            (after_seq, since),
        )[0]
        if done >= count:
            return float(last)
        if time.monotonic() > deadline:
            raise SystemExit(f"{done} of {count} jobs done after {timeout:.0f}s")
        time.sleep(0.02)


def _spool_one(sp: Spool, timeout: float) -> tuple[float, float]:
    """Submit one bench_clock job; (handler start - ack, ack), once its file is in done/."""
    from spool.disk.layout import job_name, result_name

    job_id = sp.submit("bench_clock")
    acked = time.time()
    result, done = sp.layout.path("results") / result_name(job_id), sp.layout.path("done") / job_name(job_id)
    deadline = time.monotonic() + timeout
    while not result.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no result for {job_id} after {timeout:.0f}s")
        time.sleep(0.002)
    started = sp.result(job_id)["started"]
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    return started - acked, acked


def _spool_recovery(sp: Spool, timeout: float) -> float:
    """SIGKILL the worker running a 30 s ``sleep`` job; seconds until its next attempt is claimed.

    The worker's pid is in its name (``host-pid-random``); the next attempt is the job's file in
    leased/ with a higher attempt, polled every 5 ms. The job is cancelled afterwards."""
    from spool.disk.layout import State

    job_id = sp.submit("sleep", {"seconds": 30.0}, max_tries=3)
    deadline = time.monotonic() + timeout

    def leased_attempt() -> tuple[int, str] | None:
        try:
            state, job_file = sp.job(job_id)
        except Exception:  # noqa: BLE001 - a file caught between folders: look again
            return None
        if state is not State.LEASED or job_file.lease is None or job_file.lease.attempt != job_file.attempt:
            return None
        return job_file.attempt, job_file.lease.worker

    while (held := leased_attempt()) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"{job_id} was never leased")
        time.sleep(0.005)
    attempt, worker = held
    time.sleep(0.2)  # the attempt child is running the handler
    os.kill(int(worker.rsplit("-", 2)[1]), signal.SIGKILL)
    killed = time.monotonic()
    while (now := leased_attempt()) is None or now[0] == attempt:
        if time.monotonic() > deadline:
            raise SystemExit(f"{job_id}: no attempt after {attempt} within {timeout:.0f}s of the SIGKILL")
        time.sleep(0.005)
    seconds = time.monotonic() - killed
    sp.cancel(job_id, timeout_seconds=30)
    return seconds


def _huey_one(timeout: float) -> float:
    from benchmarks.huey_app import clock

    handle = clock()
    acked = time.time()
    deadline = time.monotonic() + timeout
    while True:
        value = handle.get()
        if value is not None:
            return value - acked
        if time.monotonic() > deadline:
            raise SystemExit(f"no Huey result after {timeout:.0f}s")
        time.sleep(0.002)


def _rates(latencies: list[float], elapsed: float) -> dict[str, float]:
    return {
        "jobs": len(latencies),
        "seconds": elapsed,
        "rate": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


def _cpu_self() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(kind: str, p: dict[str, Any]) -> dict[str, Any]:
    timeout = float(p.get("timeout", 600))
    latencies: list[float] = []
    if kind == "submit-spool":  # one by one, nothing consuming
        with open_spool(Path(p["root"]), p["jobs"]) as sp:
            started = time.perf_counter()
            for n in range(p["jobs"]):
                t0 = time.perf_counter()
                sp.submit("echo", {"i": n})
                latencies.append(time.perf_counter() - t0)
            return _rates(latencies, time.perf_counter() - started)
    if kind == "submit-many-spool":
        with open_spool(Path(p["root"]), p["jobs"]) as sp:
            specs = [{"task": "echo", "args": {"i": n}} for n in range(p["jobs"])]
            started = time.perf_counter()
            sp.submit_many(specs)
            elapsed = time.perf_counter() - started
            return {"jobs": p["jobs"], "seconds": elapsed, "rate": p["jobs"] / elapsed}
    if kind == "submit-huey":
        from benchmarks.huey_app import noop

        started = time.perf_counter()
        for n in range(p["jobs"]):
            t0 = time.perf_counter()
            noop(n)
            latencies.append(time.perf_counter() - t0)
        return _rates(latencies, time.perf_counter() - started)
    if kind == "drain-spool":
        with open_spool(Path(p["root"]), p["jobs"]) as sp:
            _spool_one(sp, timeout)  # the consumer is up and warm
            time.sleep(0.3)
            cpu0, latencies, after_seq = _cpu_self(), [], _history_seq(sp)
            first = time.time()
            for n in range(p["jobs"]):
                t0 = time.perf_counter()
                sp.submit("echo", {"i": n})
                latencies.append(time.perf_counter() - t0)
            submitted, cpu = time.time(), _cpu_self() - cpu0
            last = _spool_wait_done(sp, first, p["jobs"], timeout, after_seq)
        return {
            "first": first,
            "submitted": submitted,
            "last": last,
            "producer_cpu": cpu,
            "producer": _rates(latencies, submitted - first),
        }
    if kind == "drain-huey":
        from benchmarks.huey_app import noop

        _huey_one(timeout)
        time.sleep(0.3)
        cpu0, latencies, handles = _cpu_self(), [], []
        first = time.time()
        for n in range(p["jobs"]):
            t0 = time.perf_counter()
            handles.append(noop(n))
            latencies.append(time.perf_counter() - t0)
        submitted, cpu = time.time(), _cpu_self() - cpu0
        deadline, progress, lost = time.monotonic() + timeout, time.monotonic(), 0
        ends: list[float] = []
        for handle in reversed(handles):  # the last one first: by then nearly all are in
            while (value := handle.get()) is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"Huey: {len(ends)} of {p['jobs']} results after {timeout:.0f}s")
                if time.monotonic() - progress > HUEY_STALL:  # ran or not, its result is not coming
                    lost += 1
                    break
                time.sleep(0.01)
            else:
                ends.append(value)
            progress = time.monotonic()
        return {
            "first": first,
            "submitted": submitted,
            "lost": lost,
            "last": max(ends),
            "producer_cpu": cpu,
            "producer": _rates(latencies, submitted - first),
        }
    if kind in ("pickup-spool", "pickup-huey"):
        rng, latencies = random.Random(p.get("seed", 9)), []
        pickup_sp: Spool | None = open_spool(Path(p["root"]), 1000) if kind == "pickup-spool" else None
        try:
            if pickup_sp is not None:
                _spool_one(pickup_sp, timeout)
            else:
                _huey_one(timeout)
            for _ in range(p["count"]):
                time.sleep(rng.uniform(0.0, 0.05))
                latencies.append(_spool_one(pickup_sp, timeout)[0] if pickup_sp is not None else _huey_one(timeout))
        finally:
            if pickup_sp is not None:
                pickup_sp.close()
        return {
            "count": len(latencies),
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
        }
    if kind == "recover-spool":
        with open_spool(Path(p["root"]), 1000) as sp:
            return {"seconds": [_spool_recovery(sp, timeout) for _ in range(p["count"])]}
    raise SystemExit(f"unknown child {kind!r}")


# -- the measurements ------------------------------------------------------------------------------


def measure_submits(work: Path, o: argparse.Namespace, huey: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    root = work / "submit-spool"
    Spool.init(root, environ={}).close()
    out["spool"] = run_child("submit-spool", {"root": str(root), "jobs": o.submit_jobs}, o.timeout)
    if hasattr(Spool, "submit_many"):
        many = work / "submit-many-spool"
        Spool.init(many, environ={}).close()
        try:
            out["submit_many"] = run_child("submit-many-spool", {"root": str(many), "jobs": o.many_jobs}, o.timeout)
        except RuntimeError as error:
            out["submit_many"] = {"error": str(error).splitlines()[-1][:200]}
    cli = work / "cli-spool"
    Spool.init(cli, environ={}).close()
    out["cli"] = submit_cli(cli, o.cli_submits)
    latencies = []
    for _ in range(o.cli_submits):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60, env=process_env())
        latencies.append(time.perf_counter() - t0)
    out["python_pass"] = _rates(latencies, sum(latencies))
    if huey:
        out["huey"] = run_child(
            "submit-huey", {"jobs": o.submit_jobs}, o.timeout, env=huey_env(work / "huey-submit.db")
        )
    return out


def role_rss(pids: Sequence[int]) -> dict[str, dict[str, float]]:
    from benchmarks.throughput import _role

    out: dict[str, dict[str, float]] = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        role = _role(pid)
        mb: dict[str, float] = {
            name: int(fields[name].split()[0]) / 1024 for name in ("VmHWM", "VmRSS") if name in fields
        }
        if mb and mb.get("VmHWM", 0) >= out.get(role, {}).get("VmHWM", -1):
            out[role] = mb
    return out


def settle(
    cpu_by_role: Callable[[], dict[str, float]], ready: Callable[[dict[str, float]], bool], timeout: float = 30.0
) -> dict[str, Any]:
    """Wait until the consumer is up and quiet (< 10% of a core over 0.5 s): start-up work is not the drain's.

    At most ``timeout`` seconds (the row then shows that long): on a loaded machine an idle
    consumer may never look quiet, and a benchmark must not wait minutes for it."""
    started = time.monotonic()
    last = cpu_by_role()
    while time.monotonic() - started < timeout:
        time.sleep(0.5)
        now = cpu_by_role()
        if ready(now) and sum(now.values()) - sum(last.values()) < 0.05:
            break
        last = now
    return {"seconds": time.monotonic() - started, "cpu_s": now}


def spool_drain(work: Path, root: Path, o: argparse.Namespace, jobs: int, label: str) -> dict[str, Any]:
    host = Host(root, 2, work / f"{label}.log")
    _HOSTS.append(host)
    try:
        up = settle(lambda: cpu_seconds_by_role(host.tree()), lambda cpu: {"coordinator", "worker"} <= set(cpu))
        cpu0 = up["cpu_s"]
        r = run_child("drain-spool", {"root": str(root), "jobs": jobs, "timeout": o.timeout}, o.timeout + 60)
        cpu1 = cpu_seconds_by_role(host.tree())
        r["rate"] = jobs / (r["last"] - r["first"])
        r["startup"] = up
        r["cpu_ms_per_job"] = {
            role: (cpu1[role] - cpu0.get(role, 0.0)) * 1000 / jobs
            for role in sorted(cpu1)
            if role in ("coordinator", "worker", "attempt child", "supervisor")
        }
        r["cpu_ms_per_job"]["producer"] = r["producer_cpu"] * 1000 / jobs
        r["rss_mb"] = role_rss(host.tree())
        if o.pickups and label == "drain":
            r["pickup"] = run_child("pickup-spool", {"root": str(root), "count": o.pickups, "timeout": 60}, o.timeout)
        if o.recoveries and label == "drain":
            r["recovery"] = run_child("recover-spool", {"root": str(root), "count": o.recoveries, "timeout": 60}, 600)
        if not host.alive():
            raise RuntimeError(f"spool run exited ({host.proc.returncode}); see {host.log_path}")
    except BaseException:
        sys.stderr.write((work / f"{label}.log").read_text(errors="replace")[-3000:])
        raise
    finally:
        host.stop()
    return r


def huey_drain(work: Path, name: str, poll: Sequence[str], o: argparse.Namespace) -> dict[str, Any]:
    db = work / f"huey-{name.replace(' ', '-')}.db"
    host = HueyHost(db, poll, work / f"huey-{name.replace(' ', '-')}.log")
    _HOSTS.append(host)
    try:
        up = settle(host.cpu_by_role, lambda cpu: {"consumer", "worker"} <= set(cpu))
        cpu0 = up["cpu_s"]
        r = run_child("drain-huey", {"jobs": o.jobs, "timeout": o.timeout}, o.timeout + 60, env=huey_env(db))
        cpu1 = host.cpu_by_role()
        r["rate"] = (o.jobs - r["lost"]) / (r["last"] - r["first"])
        r["startup"] = up
        r["cpu_ms_per_job"] = {role: (cpu1[role] - cpu0.get(role, 0.0)) * 1000 / o.jobs for role in sorted(cpu1)}
        r["cpu_ms_per_job"]["producer"] = r["producer_cpu"] * 1000 / o.jobs
        if o.pickups:
            r["pickup"] = run_child("pickup-huey", {"count": o.pickups, "timeout": 60}, o.timeout, env=huey_env(db))
        if not host.alive():
            raise RuntimeError(f"huey_consumer exited ({host.proc.returncode}); see {host.log_path}")
    except BaseException:
        sys.stderr.write(host.log_path.read_text(errors="replace")[-3000:])
        raise
    finally:
        host.stop()
    return r


def measure_claims(work: Path, o: argparse.Namespace, big: int) -> list[dict[str, Any]]:
    sink = io.StringIO()
    small = min(1000, max(o.claims, big // 2))
    rows = claim_cost.run([small, big], o.claims, work, True, out=sink)  # kept: removed at the end (create_cost)
    return [
        {
            "size": r["size"],
            "build_s": r["build_s"],
            "claim_p50_ms": percentile(r["claim_ms"], 0.5),
            "claim_p99_ms": percentile(r["claim_ms"], 0.99),
            "complete_p50_ms": percentile(r["complete_ms"], 0.5),
            "reconcile_ms": statistics.median(r["reconcile_s"]) * 1000,
        }
        for r in rows
    ]


def build_kept(root: Path, count: int) -> dict[str, Any]:
    """A spool holding ``count`` finished jobs, each a copy of one that went the real way."""
    import examples.tasks  # noqa: F401  (echo)
    from spool.fsck import fsck
    from spool.disk.ids import new_id
    from spool.disk.layout import job_name, result_name
    from spool.moves.transitions import Lease, claim, complete

    started = time.perf_counter()
    with Spool.init(root, environ={}) as sp:
        template = sp.submit("echo", {"i": 0})
        job_file = claim(sp, "bench-worker", ["echo"])
        assert job_file is not None and job_file.id == template
        complete(
            sp,
            Lease(template, "bench-worker", job_file.attempt),
            json.dumps({"args": {"i": 0}, "job": template, "attempt": job_file.attempt}).encode(),
        )
        files = {}
        for folder, name in (
            ("done", job_name(template)),
            ("results", result_name(template)),
            ("locks", f"{template}.lock"),
        ):
            path = root / folder / name
            if path.exists():
                files[folder] = (name, path.read_bytes())
        jobs_row = sp.ledger._read("SELECT * FROM jobs WHERE id = ?", (template,))[0]
        history = sp.ledger._read(
            "SELECT job_id, at, event, attempt, worker, detail FROM history WHERE job_id = ?", (template,)
        )
    ids = [new_id() for _ in range(count - 1)]
    tb = template.encode()
    for folder, (name, data) in files.items():
        dir_fd = os.open(root / folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for job_id in ids:
                fd = os.open(name.replace(template, job_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
                os.write(fd, data.replace(tb, job_id.encode()))
                os.close(fd)
        finally:
            os.close(dir_fd)
    db = sqlite3.connect(root / "ledger.sqlite3")
    with db:
        marks = ",".join("?" * len(jobs_row))
        db.executemany(
            f"INSERT INTO jobs VALUES({marks})",
            ([job_id if value == template else value for value in jobs_row] for job_id in ids),
        )
        db.executemany(
            "INSERT INTO history(job_id, at, event, attempt, worker, detail) VALUES(?,?,?,?,?,?)",
            ((job_id, *row[1:]) for job_id in ids for row in history),
        )
    db.close()
    os.sync()
    built = time.perf_counter() - started
    with Spool(root, environ={}) as sp:
        report = fsck(sp)
    return {
        "jobs": count,
        "build_s": built,
        "fsck_jobs": report.jobs,
        "fsck_violations": len(report.violations),
        "fsck_first": report.violations[:3],
        "copied": sorted(files),
    }


_OPEN = re.compile(r"^(?:open|openat|creat)\((.*)\)\s+=\s+\d+", re.MULTILINE)
_CALL = re.compile(r"^(\w+)\(", re.MULTILINE)


def parse_strace(prefix: Path) -> Counter[str]:
    """Counts over ``strace -ff -o PREFIX`` output (one file per process, PREFIX.PID)."""
    text = "".join(path.read_text(errors="replace") for path in prefix.parent.glob(prefix.name + ".*"))
    counts: Counter[str] = Counter()
    for name in _CALL.findall(text):
        if name not in ("open", "openat", "creat"):
            counts[name.replace("at", "") if name in ("mkdirat", "linkat", "renameat") else name] += 1
    for args in _OPEN.findall(text):
        if "O_TMPFILE" in args:
            counts["O_TMPFILE"] += 1
        elif "O_CREAT" in args and "O_EXCL" in args:
            counts["O_CREAT|O_EXCL"] += 1
        elif "O_CREAT" in args or args.startswith("creat"):
            counts["O_CREAT (no O_EXCL)"] += 1
    return counts


def measure_syscalls(work: Path, o: argparse.Namespace) -> dict[str, Any] | None:
    strace = shutil.which("strace")
    if strace is None:
        return None
    root = work / "strace-spool"
    Spool.init(root, environ={}).close()
    wrap = [strace, "-ff", "-z", "-qq", "-e", f"trace={STRACE_CALLS}", "-o"]
    host = Host(root, 2, work / "strace-run.log", wrap=[*wrap, str(work / "strace-run.txt")])
    _HOSTS.append(host)
    try:
        run_child(
            "drain-spool",
            {"root": str(root), "jobs": o.strace_jobs, "timeout": o.timeout},
            o.timeout + 60,
            wrap=[*wrap, str(work / "strace-producer.txt")],
        )
    finally:
        host.stop()
    producer, run = parse_strace(work / "strace-producer.txt"), parse_strace(work / "strace-run.txt")
    jobs = o.strace_jobs + 1  # and the warm-up job
    both = producer + run
    return {
        "jobs": jobs,
        "producer": dict(producer),
        "run": dict(run),
        "creations_per_job": (both["O_CREAT|O_EXCL"] + both["O_TMPFILE"] + both["mkdir"]) / jobs,
        "creat_no_excl_per_job": both["O_CREAT (no O_EXCL)"] / jobs,
        "links_per_job": both["link"] / jobs,
        "renames_per_job": (both["rename"] + both["renameat2"]) / jobs,
        "fsyncs_per_job": (both["fsync"] + both["fdatasync"] + both["sync_file_range"] + both["syncfs"]) / jobs,
        "fsyncs_producer_per_job": (producer["fsync"] + producer["fdatasync"] + producer["syncfs"]) / jobs,
        "fsyncs_run_per_job": (run["fsync"] + run["fdatasync"] + run["syncfs"]) / jobs,
        "syncfs_producer_per_job": producer["syncfs"] / jobs,
        "syncfs_run_per_job": run["syncfs"] / jobs,
    }


# -- the run ----------------------------------------------------------------------------------------


def run(o: argparse.Namespace, out: TextIO = sys.stdout) -> dict[str, Any]:
    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    huey = not o.no_huey and huey_importable()
    big = 10_000 if o.quick else 100_000
    big = o.depth or big
    work = Path(tempfile.mkdtemp(prefix="spool-bench-", dir=o.dir))
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "jobs": o.jobs,
        "depth": big,
        "many_jobs": o.many_jobs,
        "strace_jobs": o.strace_jobs,
        "cores": os.cpu_count(),
        "loop_ms": f"{loop_cost():.0f}",
        "load_before": os.getloadavg(),
        "disk": disk_info(work),
        "python": sys.version.split()[0],
        "huey": None,
    }
    if huey:
        import huey as huey_module

        report["huey"] = huey_module.__version__
    elif not o.no_huey:
        report["huey_missing"] = True
    try:
        say(f"in {work} ({report['disk']['source']} {report['disk']['fstype']}, journal {report['disk']['journal']})")
        _warn_if_few_inodes(int(report["disk"]["inodes_free"]), o, big, say)
        if o.peers_only:
            report["peers"] = measure_peers(work, o, huey, say)
            report["load_after"] = os.getloadavg()
            return _finish(report, o, out)
        report["submit"] = measure_submits(work, o, huey)
        say(f"submits: spool {report['submit']['spool']['rate']:.0f}/s")
        root = work / "spool"
        Spool.init(root, environ={}).close()
        report["drain"] = spool_drain(work, root, o, o.jobs, "drain")
        say(f"spool drain {report['drain']['rate']:.0f}/s")
        if huey:
            report["huey_runs"] = {}
            for name, poll in HUEY_POLLS.items():
                report["huey_runs"][name] = huey_drain(work, name, poll, o)
                say(f"Huey {name} drain {report['huey_runs'][name]['rate']:.0f}/s")
        if not o.no_peers:
            report["peers"] = measure_peers(work, o, huey, say)
        if o.queues:  # before the kept spool's 300,000 files are removed: these rows are timed (create_cost)
            report["queues"] = measure_queues(work, o, big, say)
        report["claims"] = measure_claims(work, o, big)
        say("claim cost done")
        kept = work / "kept-spool"
        report["kept_build"] = build_kept(kept, big)
        say(f"kept spool built: {report['kept_build']}")
        report["kept"] = spool_drain(work, kept, o, o.jobs, "kept")
        say(f"kept drain {report['kept']['rate']:.0f}/s")
        if not o.keep:
            shutil.rmtree(kept, ignore_errors=True)  # its 300,000 files go now: the rows after count calls, not time
        report["fsync_seam"] = fsyncs_in_process(work / "fsync-spool", 20)
        if o.strace_jobs:
            report["strace"] = measure_syscalls(work, o)
    finally:
        report["load_after"] = os.getloadavg()
        kill_everything(work)
        if o.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return _finish(report, o, out)


def measure_queues(work: Path, o: argparse.Namespace, big: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Issue 20's rows (``benchmarks/queues.py``) in this work folder: drains with and without
    queues and limits, the claim unlimited and limited at 1,000 and ``big`` pending, syscalls."""
    from benchmarks import queues  # here, not at the top: queues.py imports this module

    options = argparse.Namespace(
        jobs=o.queues_jobs,
        binding_jobs=min(40, o.queues_jobs),
        repeats=o.queues_repeats,
        shapes="a,a2,b,c,d",
        base=o.queues_base,
        sizes=sorted({min(1000, big), big}),
        claims=o.claims,
        reserves=500,
        blocks=5,
        strace_jobs=o.strace_jobs,
        timeout=o.timeout,
    )
    return queues.measure(work / "queues", options, say)


def _finish(report: dict[str, Any], o: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    print_table(report, o, out)
    if o.json:
        print(json.dumps(report, default=str), file=out)
    return report


def measure_peers(work: Path, o: argparse.Namespace, huey: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """Issue 19's three shapes for spool, Huey, pgqueuer and procrastinate (``benchmarks/peers.py``)."""
    if o.peer_strace_jobs and shutil.which("strace") is None:
        o.peer_strace_jobs = 0
    if o.backlog is None:
        o.backlog = 2_000 if o.quick else 10_000
    if os.geteuid() == 0:
        os.chmod(work, 0o711)  # the PostgreSQL cluster runs as another user, under this folder
    created = create_cost(work)  # the rows before may have removed files (see create_cost)
    return {**peers.measure(work, o, huey, say), "create_us": f"{created:.1f}"}


def print_table(r: dict[str, Any], o: Any, out: TextIO) -> None:
    runs = r.get("huey_runs") or {}
    d = r["disk"]
    inodes = f"{int(d['inodes_free']):,}" if "inodes_free" in d else "?"  # (runs before 2026-12-06 lack it)
    print(
        f"\nspool bench, {r['date']}: {r['cores']} cores, load {r['load_before'][0]:.1f} before / "
        f"{r.get('load_after', [float('nan')])[0]:.1f} after, Python {r['python']}, N = {r['jobs']}"
        + (f"; a million Python loop steps take {r['loop_ms']} ms of CPU (loop_cost)" if "loop_ms" in r else ""),
        file=out,
    )
    print(
        f"disk: --dir {Path(d['dir']).parent} is on {d['source']} mounted at {d['mount']}, {d['fstype']} "
        f"(stat -f: {d['stat_f']}), journal: {d['journal']}; options {d['options']}; "
        f"free inodes {inodes} at the start; a new file here costs {d.get('create_us', '?')} us of CPU",
        file=out,
    )
    if d["journal"].startswith("no"):
        print(
            "  (no journal: each new file passes over the inodes freed in the last 60-300 s; "
            "start a run 5 minutes after removing an earlier one's folder)",
            file=out,
        )
    if "submit" not in r:  # --peers-only
        peers_report.print_table(r["peers"], out)
        return
    if r.get("huey"):
        print(
            f"Huey {r['huey']} SqliteHuey, huey_consumer -k process -w 2; 5 ms poll = -d 0.005 -m 0.005 -b 1", file=out
        )
    elif r.get("huey_missing"):
        print("Huey: not importable (pip install -e .[bench]), its columns are empty", file=out)
    else:
        print("Huey: skipped (--no-huey)", file=out)
    names = list(runs)
    head = f"  {'':<44} {'spool':>20}"
    for name in names:
        head += f" {'Huey ' + name:>18} {'spool/Huey':>10}"
    print(head + "   target", file=out)

    def row(
        label: str,
        spool_value: float | str | None,
        huey_values: Sequence[float | None] = (),
        fmt: str = "{:.0f}",
        target: str = "",
    ) -> None:
        def show(value: float | str | None) -> str:
            return "-" if value is None else value if isinstance(value, str) else fmt.format(value)

        if isinstance(spool_value, str) and len(spool_value) > 20:  # a breakdown: no columns to line up
            print(f"  {label:<44} {spool_value}" + (f"   {target}" if target else ""), file=out)
            return
        line = f"  {label:<44} {show(spool_value):>20}"
        for value in list(huey_values) + [None] * (len(names) - len(huey_values)):
            ratio = spool_value / value if isinstance(spool_value, (int, float)) and value else None
            line += f" {show(value):>18} {('-' if ratio is None else f'{ratio:.2f}'):>10}"
        print(line + (f"   {target}" if target else ""), file=out)

    s = r["submit"]
    hs = s.get("huey", {}).get("rate")
    row(
        f"submit, Python API one by one, jobs/s ({s['spool']['jobs']})",
        s["spool"]["rate"],
        [hs] * len(names),
        target=">= Huey's enqueue rate",
    )
    row("  p50 / p99 ms per submit", f"{s['spool']['p50_ms']:.1f} / {s['spool']['p99_ms']:.1f}")
    many = s.get("submit_many")
    row(
        f"submit_many of {o.many_jobs:,}, jobs/s",
        "n/a (not built yet)" if many is None else many.get("rate", "error: " + str(many.get("error"))),
        target=">= 20,000 jobs/s",
    )
    c, pp = s["cli"], s["python_pass"]
    row(
        f"`spool submit` process, p50 / p99 ms ({c['jobs']}, .pyc)",
        f"{c['p50_ms']:.0f} / {c['p99_ms']:.0f}",
        target=f"p50 <= 1.5 x python -c pass + 40 = {1.5 * pp['p50_ms'] + 40:.0f} ms",
    )
    row("`python -c pass`, p50 / p99 ms", f"{pp['p50_ms']:.0f} / {pp['p99_ms']:.0f}")
    dr = r["drain"]
    row(
        f"end-to-end drain of {r['jobs']}, 2 workers, jobs/s",
        dr["rate"],
        [runs[n]["rate"] for n in names],
        target="spool >= 1.5 x Huey default poll",
    )
    for n in names:
        if runs[n].get("lost"):
            row(f"  Huey {n}: results never stored (of {r['jobs']})", f"{runs[n]['lost']} (counted out of its rate)")
    row(
        "  producer's submit rate meanwhile, jobs/s",
        dr["producer"]["rate"],
        [runs[n]["producer"]["rate"] for n in names],
    )
    if "pickup" in dr:
        pk = dr["pickup"]
        row(
            f"idle pickup p50 ms ({pk['count']}, 0-50 ms gaps)",
            pk["p50_ms"],
            [runs[n].get("pickup", {}).get("p50_ms") for n in names],
            "{:.1f}",
            "<= 2 ms",
        )
        row(
            "idle pickup p99 ms",
            pk["p99_ms"],
            [runs[n].get("pickup", {}).get("p99_ms") for n in names],
            "{:.1f}",
            "<= 6 ms (issue 19; 10 in issue 9)",
        )
    if "recovery" in dr:
        secs = dr["recovery"]["seconds"]
        row(
            f"SIGKILLed worker's job: next attempt after, s ({len(secs)})",
            f"p50 {percentile(secs, 0.5):.2f} / max {max(secs):.2f}",
            target="<= 1 s",
        )
    cpu = dr["cpu_ms_per_job"]
    row("CPU ms per job, by process (drain)", ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    for n in names:
        row(f"  Huey {n}", ", ".join(f"{k} {v:.1f}" for k, v in runs[n]["cpu_ms_per_job"].items()))
    small, large = r["claims"]
    row(
        f"claim p50 / p99 ms at {small['size']:,} pending", f"{small['claim_p50_ms']:.1f} / {small['claim_p99_ms']:.1f}"
    )
    row(
        f"claim p50 / p99 ms at {large['size']:,} pending",
        f"{large['claim_p50_ms']:.1f} / {large['claim_p99_ms']:.1f}",
        target="within 1.2 x the 1,000 one",
    )
    row(
        f"  ratio of p50s, {large['size']:,} / {small['size']:,}",
        large["claim_p50_ms"] / small["claim_p50_ms"],
        fmt="{:.2f}",
    )
    row(
        f"reconcile() ms at {small['size']:,} / {large['size']:,}",
        f"{small['reconcile_ms']:.0f} / {large['reconcile_ms']:.0f}",
    )
    k, kb = r["kept"], r["kept_build"]
    row(f"drain with {kb['jobs']:,} finished kept, jobs/s", k["rate"], target="within 1.2 x the empty drain")
    row("  ratio to the drain on an empty spool", k["rate"] / dr["rate"], fmt="{:.2f}")
    row("  fsck of the kept spool (jobs, violations)", f"{kb['fsck_jobs']}, {kb['fsck_violations']}")
    if "startup" in k and "startup" in dr:
        row(
            "consumer start-up until quiet, s (kept / empty)",
            f"{k['startup']['seconds']:.1f} / {dr['startup']['seconds']:.1f}",
        )
        row(
            "  coordinator CPU s by then (kept / empty)",
            f"{k['startup']['cpu_s'].get('coordinator', 0):.2f} / {dr['startup']['cpu_s'].get('coordinator', 0):.2f}",
        )
    for role in ("coordinator", "worker"):
        mb, empty = k["rss_mb"].get(role, {}), dr["rss_mb"].get(role, {})
        row(
            f"{role} RSS MB at {kb['jobs']:,} (VmHWM / VmRSS)",
            f"{mb.get('VmHWM', 0):.0f} / {mb.get('VmRSS', 0):.0f}",
            target="coordinator <= 80 MB" if role == "coordinator" else "",
        )
        row("  the same on the empty spool", f"{empty.get('VmHWM', 0):.0f} / {empty.get('VmRSS', 0):.0f}")
    st = r.get("strace")
    if st:
        row(f"file creations per job (strace, {st['jobs']} jobs)", st["creations_per_job"], fmt="{:.2f}")
        row("  O_CREAT opens without O_EXCL per job", st["creat_no_excl_per_job"], fmt="{:.2f}")
        row("  links / renames per job", f"{st['links_per_job']:.2f} / {st['renames_per_job']:.2f}")
        row("fsync+fdatasync per job (strace)", st["fsyncs_per_job"], fmt="{:.2f}")  # syncfs counted too
        row("  producer / spool run", f"{st['fsyncs_producer_per_job']:.2f} / {st['fsyncs_run_per_job']:.2f}")
        if "syncfs_run_per_job" in st:
            row(
                "  of them syncfs: producer / spool run",
                f"{st['syncfs_producer_per_job']:.2f} / {st['syncfs_run_per_job']:.2f}",
            )
    else:
        row("file creations, fsyncs per job (strace)", "n/a (no strace)" if o.strace_jobs else "n/a (skipped)")
    f = r["fsync_seam"]
    row("fsyncs per job at the fsio seam", f["lifecycle"], fmt="{:g}")  # a syncfs counts as one
    row("  submit / claim / complete", f"{f['submit']:g} / {f['claim']:g} / {f['complete']:g}")
    if "peers" in r:
        peers_report.print_table(r["peers"], out)
    else:
        print("\npeers (issue 19): skipped (--no-peers)", file=out)
    if "queues" in r:
        from benchmarks import queues

        queues.print_table(r["queues"], out)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        print(json.dumps(child(argv[1], json.loads(argv[2]))), flush=True)
        return 0
    if argv[:1] == ["--replay"]:  # the table again, from the JSON line a run printed
        report = json.loads(Path(argv[1]).read_text().strip().splitlines()[-1])
        print_table(
            report, argparse.Namespace(many_jobs=report["many_jobs"], strace_jobs=report["strace_jobs"]), sys.stdout
        )
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="the folder (and so the disk) to measure on")
    parser.add_argument("--jobs", type=int, default=3000, help="N of the end-to-end drains")
    parser.add_argument("--quick", action="store_true", help="10,000 instead of 100,000 for the depth rows")
    parser.add_argument("--no-huey", action="store_true", help="spool only, even if huey is importable")
    parser.add_argument("--json", action="store_true", help="also print the whole report as one JSON line")
    parser.add_argument("--submit-jobs", type=int, default=1000, help="jobs of the one-by-one submit rate")
    parser.add_argument("--many-jobs", type=int, default=10_000, help="jobs of one submit_many")
    parser.add_argument("--cli-submits", type=int, default=20, help="`spool submit` and `python -c pass` processes")
    parser.add_argument("--pickups", type=int, default=100, help="single jobs into the idle system")
    parser.add_argument("--claims", type=int, default=100, help="claims timed at each depth")
    parser.add_argument("--recoveries", type=int, default=5, help="workers SIGKILLed mid-job (0: skip)")
    parser.add_argument(
        "--depth", type=int, default=0, help="override the 100,000 (or --quick 10,000) of the depth rows"
    )
    parser.add_argument("--strace-jobs", type=int, default=200, help="jobs drained under strace (0: skip)")
    parser.add_argument("--no-peers", action="store_true", help="skip issue 19's peer shapes (peers.py)")
    parser.add_argument("--peers-only", action="store_true", help="only issue 19's peer shapes")
    parser.add_argument("--backlog", type=int, default=None, help="jobs of shape (b) (10,000; --quick 2,000)")
    parser.add_argument("--producers", type=int, default=4, help="producer processes of shape (c)")
    parser.add_argument("--peer-strace-jobs", type=int, default=300, help="peer jobs under strace (0: skip)")
    parser.add_argument("--queues", action="store_true", help="also issue 20's rows (queues.py; ~40 min)")
    parser.add_argument("--queues-jobs", type=int, default=1000, help="N of each --queues drain")
    parser.add_argument("--queues-repeats", type=int, default=5, help="rounds of the --queues drains")
    parser.add_argument("--queues-base", type=Path, default=None, help="a checkout to drain shape a with too")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    options = parser.parse_args(argv)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    run(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
