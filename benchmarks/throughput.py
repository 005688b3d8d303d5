"""Throughput of a whole host: submit rate, drain rate, idle pickup latency, fsyncs per job.

    python benchmarks/throughput.py --jobs 5000 --workers 2

What it does, in order, each on a fresh spool in the temp dir (or ``--dir``):

1. submit (Python API): ``Spool.submit("echo", {"i": n})`` ``--jobs`` times in this process,
   with nothing else running. Each submit is durable on return (two fsyncs).
2. submit (CLI): ``--cli-submits`` sequential ``spool submit echo -a i=n`` processes: what a
   shell script pays per job (mostly interpreter start-up).
3. drain: with the ``--jobs`` jobs of step 1 already waiting, starts ``spool run --workers N
   --import examples.tasks --import benchmarks.throughput`` (a supervisor, a coordinator and N
   workers, each worker with its attempt child) and waits until all are done. The rate is jobs
   over the span from the first claim to the last complete, both read from the ledger's history.
   Also the CPU seconds each kind of process spent per 1,000 jobs (from /proc).
4. idle pickup: on the same, now idle, system, ``--pickups`` times in a row: submit ONE
   ``bench_clock`` job (defined below; its handler returns ``time.time()`` at its first line),
   wait for its result, pause ~0.1 s so the workers are back asleep. Latency = handler start
   minus the moment ``submit`` returned (the job was acknowledged). Also claim minus ack, from
   the attempt record's ``started`` (stamped by the claim, millisecond resolution).
5. fsyncs per job, two ways: in this process, through the ``spool.disk.fsio`` seam (a ``RealFS``
   subclass counting the fsync inside ``write_new(sync=True)`` and each ``fsync_dir``) over the
   real submit, claim and complete of ``--fsync-jobs`` jobs; and, when ``strace`` is on PATH,
   over real processes (``strace -f -c -e trace=fsync,fdatasync``), which also counts SQLite's
   own syncs (WAL checkpoints) and everything the coordinator does meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # examples.tasks and benchmarks.*, when run as a script

from spool import Spool, task
from spool.disk.layout import job_name, result_name
from spool.base.timetext import parse_time

SPOOL = [sys.executable, "-m", "spool.cli"]
TASK_MODULES = ("examples.tasks", "benchmarks.throughput")


@task("bench_clock")
def bench_clock() -> dict[str, float]:
    """The handler's first line stamps the wall clock: the end of the idle pickup latency."""
    return {"started": time.time()}


# -- helpers --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 200 values is the 198th smallest)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def process_env() -> dict[str, str]:
    """This environment without SPOOL_* settings, with the checkout importable, and with Python's
    bytecode cache on (in a folder of the temp dir, never in the checkout): an environment that
    sets PYTHONDONTWRITEBYTECODE (this project's sandboxes do) would otherwise make every process
    compile spool's ~215 KB of source again, ~25 ms of each `spool submit` that a pip-installed
    spool (compiled at install) never pays."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOOL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "spool-bench-pycache"))
    return env


def open_spool(root: Path, jobs: int) -> Spool:
    # max_pending (10,000 by default) would refuse a larger load: this measures the rate, not backpressure.
    return Spool(root, environ={"SPOOL_MAX_PENDING": str(max(10_000, jobs + 1_000))})


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Host:
    """``spool run`` as a real process tree; dies with us (PDEATHSIG) and is stopped on exit."""

    def __init__(self, root: Path, workers: int, log_path: Path, wrap: Sequence[str] = ()) -> None:
        imports = [arg for module in TASK_MODULES for arg in ("--import", module)]
        parent = os.getpid()

        def tie_to_parent() -> None:
            from spool.runner.lifeline import die_with_parent

            die_with_parent(parent)

        self.log_path = log_path
        with open(log_path, "ab") as log:
            # preexec_fn is safe here: this process runs no threads of its own.
            self.proc = subprocess.Popen(
                [*wrap, *SPOOL, "--spool", str(root), "run", "--workers", str(workers), *imports],
                cwd=ROOT,
                env=process_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=tie_to_parent,
            )  # noqa: PLW1509

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tree(self) -> list[int]:
        """Every live descendant pid, breadth first."""
        found, queue = [], [self.proc.pid]
        while queue:
            pid = queue.pop(0)
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                children = []
            for child in map(int, children):
                found.append(child)
                queue.append(child)
        return found

    def signal_tree_root(self, signum: int) -> None:
        """Signal the ``spool run`` supervisor (under strace, the traced process, not strace)."""
        pids = [self.proc.pid, *self.tree()]
        for pid in pids:
            if _role(pid) == "supervisor":
                os.kill(pid, signum)
                return
        if self.alive():
            os.kill(self.proc.pid, signum)

    def stop(self, timeout: float = 60.0) -> None:
        if self.alive():
            self.signal_tree_root(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def _role(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    words = [a.decode(errors="replace") for a in argv]
    if not words or os.path.basename(words[0]) == "strace":
        return "strace"
    if "spool.runner.attempt" in words or "spool.runner.child" in words:
        return "attempt child"
    for role, word in (("coordinator", "coordinator"), ("worker", "worker"), ("supervisor", "run")):
        if word in words:
            return role
    return "other"


def cpu_seconds_by_role(pids: Sequence[int]) -> dict[str, float]:
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = _role(pid)
        totals[role] = totals.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return totals


# -- 1. submit through the Python API -------------------------------------------------------------


def submit_python(sp: Spool, jobs: int) -> dict[str, Any]:
    latencies = []
    started = time.perf_counter()
    for n in range(jobs):
        t0 = time.perf_counter()
        sp.submit("echo", {"i": n})
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    return {
        "jobs": jobs,
        "seconds": elapsed,
        "rate": jobs / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


# -- 2. submit through the CLI --------------------------------------------------------------------


def submit_cli(root: Path, count: int) -> dict[str, Any]:
    env = process_env()
    latencies = []
    subprocess.run(
        [*SPOOL, "--spool", str(root), "submit", "echo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )  # untimed: fills the bytecode cache, makes the ledger
    started = time.perf_counter()
    for n in range(count):
        t0 = time.perf_counter()
        done = subprocess.run(
            [*SPOOL, "--spool", str(root), "submit", "echo", "-a", f"i={n}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        latencies.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(f"spool submit failed ({done.returncode}): {done.stderr.strip()}")
    elapsed = time.perf_counter() - started
    return {
        "jobs": count,
        "seconds": elapsed,
        "rate": count / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


# -- 3. drain -------------------------------------------------------------------------------------


def drain(sp: Spool, host: Host, jobs: int, timeout: float) -> dict[str, Any]:
    """Wait for ``jobs`` completes; rates from the ledger's history, CPU per role from /proc."""
    started = time.perf_counter()

    def first_claim() -> bool:
        return _history_span(sp)[0] is not None

    def all_done() -> bool:
        if not host.alive():
            raise RuntimeError(f"spool run exited early ({host.proc.returncode}); see {host.log_path}")
        counts = sp.ledger.counts()
        return counts.get("done", 0) + counts.get("dead", 0) >= jobs

    wait_for(first_claim, timeout, "the first claim", interval=0.01)
    cpu_before = cpu_seconds_by_role(host.tree())
    wait_for(all_done, timeout, f"{jobs} jobs to end", interval=0.1)
    cpu_after = cpu_seconds_by_role(host.tree())
    wall = time.perf_counter() - started
    first, last = _history_span(sp)
    counts = sp.ledger.counts()
    assert first is not None and last is not None
    cpu = {role: cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0) for role in cpu_after}
    return {
        "jobs": jobs,
        "done": counts.get("done", 0),
        "dead": counts.get("dead", 0),
        "span": last - first,
        "rate": counts.get("done", 0) / (last - first),
        "wall_from_start": wall,
        "cpu_per_1000": {role: seconds * 1000 / jobs for role, seconds in sorted(cpu.items()) if seconds > 0},
    }


def _history_span(sp: Spool) -> tuple[float | None, float | None]:
    rows = sp.ledger._read(
        "SELECT (SELECT min(at) FROM history WHERE event = 'claim'), "
        "(SELECT max(at) FROM history WHERE event = 'complete')"
    )
    return rows[0][0], rows[0][1]


# -- 4. idle pickup -------------------------------------------------------------------------------


def idle_pickup(sp: Spool, host: Host, count: int, timeout: float = 60.0) -> dict[str, Any]:
    results, done = sp.layout.path("results"), sp.layout.path("done")
    to_handler, to_claim = [], []
    time.sleep(0.5)  # let the drain's last wake-ups settle
    for _ in range(count):
        job_id = sp.submit("bench_clock")
        acked = time.time()
        result_path = results / result_name(job_id)

        def landed(path: Path = result_path) -> bool:
            return path.exists() or not host.alive()

        wait_for(landed, timeout, f"the result of {job_id}", interval=0.002)
        if not host.alive():
            raise RuntimeError(f"spool run exited ({host.proc.returncode}); see {host.log_path}")
        to_handler.append(sp.result(job_id)["started"] - acked)
        wait_for((done / job_name(job_id)).exists, timeout, f"{job_id} to reach done/", interval=0.002)
        claimed = parse_time(sp.status(job_id)["attempts"][-1]["started"], "started").timestamp()
        to_claim.append(claimed - acked)
        time.sleep(random.uniform(0.08, 0.12))  # the workers go back to waiting on inotify
    return {
        "count": count,
        "handler_p50_ms": percentile(to_handler, 0.5) * 1000,
        "handler_p99_ms": percentile(to_handler, 0.99) * 1000,
        "claim_p50_ms": percentile(to_claim, 0.5) * 1000,
        "claim_p99_ms": percentile(to_claim, 0.99) * 1000,
    }


# -- 5. fsyncs per job ----------------------------------------------------------------------------


def fsyncs_in_process(root: Path, jobs: int) -> dict[str, float]:
    """fsync calls per job of each real transition, counted at the ``spool.disk.fsio`` seam."""
    from benchmarks.claim_cost import CountingFS, swapped_fs
    from spool.moves.transitions import Lease, claim, complete

    Spool.init(root, environ={}).close()
    counting = CountingFS()
    per: dict[str, int] = {"submit": 0, "submit with --key": 0, "claim": 0, "complete": 0}
    with open_spool(root, jobs) as sp, swapped_fs(counting):
        for n in range(jobs):
            for phase, key in (("submit", None), ("submit with --key", f"bench-{n}")):
                counting.calls.clear()
                sp.submit("echo", {"i": n}, key=key)
                per[phase] += counting.calls["fsync"]
        for _ in range(2 * jobs):
            counting.calls.clear()
            job_file = claim(sp, "bench-worker", ["echo"])
            assert job_file is not None
            per["claim"] += counting.calls["fsync"]
            counting.calls.clear()
            complete(sp, Lease(job_file.id, "bench-worker", job_file.attempt), b'{"ok": true}')
            per["complete"] += counting.calls["fsync"]
    out = {
        "submit": per["submit"] / jobs,
        "submit with --key": per["submit with --key"] / jobs,
        "claim": per["claim"] / (2 * jobs),
        "complete": per["complete"] / (2 * jobs),
    }
    out["lifecycle"] = out["submit"] + out["claim"] + out["complete"]
    return out


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$", re.MULTILINE)


def _strace_counts(path: Path) -> dict[str, int]:
    text = path.read_text() if path.exists() else ""
    return {name: int(calls) for calls, name in _STRACE_ROW.findall(text)}


def fsyncs_strace(work: Path, jobs: int, workers: int, timeout: float) -> dict[str, Any] | None:
    """fsync + fdatasync per job over real processes, by ``strace -f -c``; None without strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    root = work / "strace-spool"
    Spool.init(root, environ={}).close()
    wrap = [strace, "-f", "-c", "--seccomp-bpf", "-e", "trace=fsync,fdatasync", "-o"]
    submit_out, run_out = work / "strace-submit.txt", work / "strace-run.txt"
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.throughput import open_spool;"
        f"from pathlib import Path\nwith open_spool(Path({str(root)!r}), {jobs}) as sp:\n"
        f"    [sp.submit('echo', {{'i': n}}) for n in range({jobs})]"
    )
    subprocess.run(
        [*wrap, str(submit_out), sys.executable, "-c", code], cwd=ROOT, env=process_env(), check=True, timeout=timeout
    )
    host = Host(root, workers, work / "strace-run.log", wrap=[*wrap, str(run_out)])
    try:
        with open_spool(root, jobs) as sp:
            wait_for(
                lambda: sum(sp.ledger.counts().get(s, 0) for s in ("done", "dead")) >= jobs or not host.alive(),
                timeout,
                f"{jobs} jobs to end under strace",
                interval=0.2,
            )
    finally:
        host.stop()
    submit_counts, run_counts = _strace_counts(submit_out), _strace_counts(run_out)
    return {
        "jobs": jobs,
        "submit": submit_counts,
        "run": run_counts,
        "submit_per_job": sum(submit_counts.values()) / jobs,
        "run_per_job": sum(run_counts.values()) / jobs,
    }


# -- the whole run --------------------------------------------------------------------------------


def run(options: argparse.Namespace, out: TextIO = sys.stdout) -> dict[str, Any]:
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    work = Path(tempfile.mkdtemp(prefix="throughput-", dir=options.dir))
    report: dict[str, Any] = {"load_before": os.getloadavg()}
    try:
        root = work / "spool"
        Spool.init(root, environ={}).close()
        with open_spool(root, options.jobs) as sp:
            report["submit_python"] = submit_python(sp, options.jobs)
            say(f"submit (Python API): {options.jobs} jobs, {report['submit_python']['rate']:.0f} jobs/s")
            cli_root = work / "cli-spool"
            Spool.init(cli_root, environ={}).close()
            report["submit_cli"] = submit_cli(cli_root, options.cli_submits)
            say(f"submit (CLI): {options.cli_submits} processes, {report['submit_cli']['rate']:.1f} jobs/s")
            host = Host(root, options.workers, work / "run.log")
            try:
                report["drain"] = drain(sp, host, options.jobs, options.timeout)
                say(
                    f"drain: {report['drain']['done']} done in {report['drain']['span']:.1f}s, "
                    f"{report['drain']['rate']:.1f} jobs/s"
                )
                if options.pickups:
                    report["pickup"] = idle_pickup(sp, host, options.pickups)
                    say(f"idle pickup: {options.pickups} jobs, p50 {report['pickup']['handler_p50_ms']:.1f} ms")
            except BaseException:
                sys.stderr.write((work / "run.log").read_text(errors="replace")[-4000:])
                raise
            finally:
                host.stop()
        report["fsync_seam"] = fsyncs_in_process(work / "fsync-spool", options.fsync_jobs)
        if options.strace_jobs:
            report["fsync_strace"] = fsyncs_strace(work, options.strace_jobs, options.workers, options.timeout)
        report["load_after"] = os.getloadavg()
    finally:
        if options.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_table(report, options, out)
    return report


def print_table(report: Mapping[str, Any], options: argparse.Namespace, out: TextIO = sys.stdout) -> None:
    def row(what: str, value: str, note: str = "") -> None:
        print(f"  {what:<34} {value:>16}   {note}", file=out)

    print(
        f"\nthroughput: {options.jobs} echo jobs, {options.workers} workers, {os.cpu_count()} cores, "
        f"load {report['load_before'][0]:.1f} before / {report['load_after'][0]:.1f} after",
        file=out,
    )
    sub, cli = report["submit_python"], report["submit_cli"]
    row(
        "submit, Python API",
        f"{sub['rate']:.0f} jobs/s",
        f"p50 {sub['p50_ms']:.1f} ms, p99 {sub['p99_ms']:.1f} ms per submit",
    )
    row(
        "submit, `spool submit` processes",
        f"{cli['rate']:.1f} jobs/s",
        f"p50 {cli['p50_ms']:.0f} ms, p99 {cli['p99_ms']:.0f} ms per process ({cli['jobs']} sequential)",
    )
    d = report["drain"]
    row(
        "drain, first claim -> last done",
        f"{d['rate']:.1f} jobs/s",
        f"{d['done']} done, {d['dead']} dead in {d['span']:.1f}s ({d['wall_from_start']:.1f}s from `spool run`)",
    )
    row("  CPU s per 1000 jobs", "", ", ".join(f"{role} {s:.1f}" for role, s in d["cpu_per_1000"].items()))
    if "pickup" in report:
        p = report["pickup"]
        row(
            "idle pickup, ack -> handler start",
            f"p50 {p['handler_p50_ms']:.1f} ms",
            f"p99 {p['handler_p99_ms']:.1f} ms over {p['count']} single jobs",
        )
        row(
            "idle pickup, ack -> claim",
            f"p50 {p['claim_p50_ms']:.1f} ms",
            f"p99 {p['claim_p99_ms']:.1f} ms (ms stamps)",
        )
    f = report["fsync_seam"]
    row(
        "fsyncs per job (seam)",
        f"{f['lifecycle']:g}",
        f"submit {f['submit']:g} (with a key {f['submit with --key']:g}), "
        f"claim {f['claim']:g}, complete {f['complete']:g}",
    )
    s = report.get("fsync_strace")
    if s:
        row(
            "fsync+fdatasync per job (strace)",
            f"{s['submit_per_job'] + s['run_per_job']:.2f}",
            f"submit {s['submit_per_job']:.2f} {s['submit']}, spool run {s['run_per_job']:.2f} {s['run']} "
            f"over {s['jobs']} jobs",
        )
    elif options.strace_jobs:
        row("fsync+fdatasync per job (strace)", "n/a", "strace not on PATH (apt-get install strace)")
    if options.json:
        print(json.dumps(report, default=str), file=out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000, help="jobs submitted, then drained")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cli-submits", type=int, default=50, help="sequential `spool submit` processes")
    parser.add_argument("--pickups", type=int, default=200, help="single jobs submitted to the idle system")
    parser.add_argument("--fsync-jobs", type=int, default=100, help="jobs for the in-process fsync count")
    parser.add_argument("--strace-jobs", type=int, default=1000, help="jobs for the strace fsync count (0: skip)")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up waiting after this many seconds")
    parser.add_argument("--dir", type=Path, default=None, help="where to make the spools (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the spools and logs")
    parser.add_argument("--json", action="store_true", help="also print the whole report as one JSON line")
    run(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
