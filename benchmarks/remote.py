"""Remote workers over the API against local workers, in one run on one host and one disk.

    python benchmarks/remote.py [--dir DIR] [--jobs N] [--pickups N] [--remote-workers N]
                                [--rounds R] [--json]

One spool, one ``spool serve --self-signed --reuse-port`` on 127.0.0.1 and one ``spool
coordinator`` for the whole run; then, for each side in turn (``--remote-workers`` (2) remote
workers ``spool worker --server`` with one server; as many fresh ones while a second ``spool serve
--reuse-port`` joins the first on its port, the kernel spreading their connections over the two;
these two sides alternate ``--rounds`` times, medians reported, so a burst of load from elsewhere
on a shared machine falls on both; then 2 local ``spool worker`` processes; the other sides
stopped):

- idle pickup: ``--pickups`` (100) times, a random 0-50 ms pause, one ``bench_clock`` job submitted
  through the Python API; latency = the handler's first ``time.time()`` - the moment submit
  returned (both clocks are this host's). The workers are idle, waiting: remote ones in a
  long-poll on the server, local ones on inotify.
- drain: ``--jobs`` (2,000) trivial ``echo`` jobs in one ``submit_many`` while the workers wait;
  last, ``--dispatch-jobs`` (200) drained by ``spool dispatch --engine local`` (a run-one each);
  rate = N / (submit returned -> the N-th job file in done/); and the CPU each process (with its
  children) spent over it, per job, from /proc/PID/stat (``spool serve``: every server summed).
  The servers idle on the local side.

Every process it starts is in its own process group, killed at the end; the work folder is
removed. Numbers, not verdicts.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.throughput import open_spool, percentile, process_env  # noqa: E402
from spool import Spool  # noqa: E402

SPOOL = [sys.executable, "-m", "spool.cli"]
TASKS = ["--import", "examples.tasks", "--import", "benchmarks.throughput"]


class Processes:
    def __init__(self, root: Path, logs: Path) -> None:
        self.root, self.logs = root, logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``spool --spool ROOT ARGS``, logged to ``logs/<name>.log``."""
        return self._spawn(name, [*SPOOL, "--spool", str(self.root), *args])

    def start_python(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``python ARGS`` from the checkout (not a spool command), logged like the others."""
        return self._spawn(name, [sys.executable, *args])

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=process_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def stop(self, procs: Sequence[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(url_port: int, cacert: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cacert.exists():
            try:
                context = ssl.create_default_context(cafile=str(cacert))
                conn = http.client.HTTPSConnection("127.0.0.1", url_port, timeout=2, context=context)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except (OSError, ssl.SSLError, http.client.HTTPException):
                pass
        time.sleep(0.05)
    raise SystemExit(f"spool serve did not answer /healthz within {timeout:.0f}s")


def add_token(root: Path, name: str) -> str:
    done = subprocess.run(
        [*SPOOL, "--spool", str(root), "token", "add", name, "--role", "work"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()[-1]


def count_done(root: Path) -> int:
    return sum(1 for name in os.listdir(root / "done") if not name.startswith("."))


def pickups(sp: Spool, count: int, timeout: float) -> list[float]:
    """Seconds from submit returned to the handler's first line, ``count`` times."""
    latencies = []
    for _ in range(count):
        time.sleep(random.uniform(0.0, 0.05))
        job_id = sp.submit("bench_clock")
        acked = time.time()
        result = sp.root / "results" / f"{job_id}.json"
        deadline = time.monotonic() + timeout
        while not result.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"no result for {job_id} after {timeout:.0f}s")
            time.sleep(0.002)
        latencies.append(sp.result(job_id)["started"] - acked)
        done = sp.root / "done" / f"{job_id}.yaml"
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
    return latencies


def drain(sp: Spool, jobs: int, timeout: float) -> float:
    """jobs/s: N echo jobs in one batch, to the N-th file in done/."""
    before = count_done(sp.root)
    started = time.monotonic()
    sp.submit_many([sp.spec("echo", {"i": i}) for i in range(jobs)])
    deadline = started + timeout
    while count_done(sp.root) < before + jobs:
        if time.monotonic() > deadline:
            raise SystemExit(f"{count_done(sp.root) - before} of {jobs} done after {timeout:.0f}s")
        time.sleep(0.005)
    return jobs / (time.monotonic() - started)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live descendants (a worker's attempt child)."""
    ticks, total, queue = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while queue:
        current = queue.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            queue += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def measure(sp: Spool, o: argparse.Namespace, roles: dict[str, list[int]]) -> dict[str, float]:
    sp.submit("bench_clock")  # warm: each worker's attempt child started, connections open
    pickups(sp, 2, o.timeout)
    latencies = pickups(sp, o.pickups, o.timeout)
    before = {role: sum(cpu_seconds(pid) for pid in pids) for role, pids in roles.items()}
    rate = drain(sp, o.jobs, o.timeout)
    after = {role: sum(cpu_seconds(pid) for pid in pids) for role, pids in roles.items()}
    results = {
        "pickup_p50_ms": percentile(latencies, 0.50) * 1000,
        "pickup_p99_ms": percentile(latencies, 0.99) * 1000,
        "drain_jobs_per_s": rate,
    }
    for role in roles:
        results[f"cpu_ms_per_job_{role}"] = (after[role] - before[role]) * 1000 / o.jobs
    return results


def run(o: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="spool-remote-bench-", dir=o.dir))
    root, logs = work / "spool", work / "logs"
    logs.mkdir()
    Spool.init(root, environ={}).close()
    procs = Processes(root, logs)
    try:
        port = free_port()
        serve_args = ("serve", "--self-signed", "--reuse-port", "--host", "127.0.0.1", "--port", str(port))
        serve = procs.start("serve", *serve_args)
        cacert = root / "tls" / "cert.pem"
        wait_healthy(port, cacert, 60)
        coordinator = procs.start("coordinator", "coordinator")
        sp = open_spool(root, o.jobs)
        results: dict[str, Any] = {
            "jobs": o.jobs,
            "pickups": o.pickups,
            "remote_workers": o.remote_workers,
            "sim_workers": o.sim_workers,
        }
        url = f"https://127.0.0.1:{port}"
        shared = {"serve": [serve.pid], "coordinator": [coordinator.pid]}
        names = iter(f"bench-remote-{n}" for n in range(1, 2 * o.remote_workers * o.rounds + 1))
        rounds: dict[str, list[dict[str, float]]] = {"remote": [], "remote_2_serves": []}
        for turn in range(o.rounds):  # the sides alternate, so a burst of load elsewhere hits both
            for side in ("remote", "remote_2_serves"):
                second = None
                if side == "remote_2_serves":
                    second = procs.start(f"serve-2-{turn}", *serve_args)
                    wait_listening(logs / f"serve-2-{turn}.log", second, 60)
                remote = [remote_worker(procs, root, next(names), url, cacert) for _ in range(o.remote_workers)]
                serves = [serve.pid] + ([second.pid] if second else [])
                rounds[side].append(measure(sp, o, {**shared, "serve": serves, "workers": [p.pid for p in remote]}))
                procs.stop(remote)
                if second is not None:
                    procs.stop([second])
        if o.sim_workers:
            rounds.update(sim_rounds(sp, o, procs, serve, serve_args, url, cacert, logs, shared))
        for side, runs in rounds.items():
            results[side] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        results["rounds"] = rounds
        local = [procs.start(f"local-{n}", "worker", *TASKS) for n in (1, 2)]
        results["local"] = measure(sp, o, {**shared, "workers": [p.pid for p in local]})
        procs.stop(local)
        if o.dispatch_jobs:
            results["dispatch"] = dispatch_drain(sp, procs, o, url, cacert, shared)
        sp.close()
        return results
    finally:
        procs.kill_all()
        shutil.rmtree(work, ignore_errors=True)


def sim_rounds(
    sp: Spool,
    o: argparse.Namespace,
    procs: Processes,
    serve: subprocess.Popen[bytes],
    serve_args: tuple[str, ...],
    url: str,
    cacert: Path,
    logs: Path,
    shared: dict[str, list[int]],
) -> dict[str, list[dict[str, float]]]:
    """The control plane alone: ``--sim-workers`` simulated remote workers in one process
    (``benchmarks.remote_sim``: a lease and a complete per job, no handler run), draining with one
    server and with two, alternating ``--rounds`` times."""
    token_file = sp.root.parent / "sim.token"
    add = [*SPOOL, "--spool", str(sp.root), "token", "add", "bench-sim", "--role", "dispatch", "--out", str(token_file)]
    subprocess.run(add, cwd=ROOT, env=process_env(), capture_output=True, check=True)
    sim_args = ["--url", url, "--cacert", str(cacert), "--token-file", str(token_file)]
    rounds: dict[str, list[dict[str, float]]] = {"sim": [], "sim_2_serves": []}
    for turn in range(o.rounds):
        for side in ("sim", "sim_2_serves"):
            second = None
            if side == "sim_2_serves":
                second = procs.start(f"serve-sim-{turn}", *serve_args)
                wait_listening(logs / f"serve-sim-{turn}.log", second, 60)
            sim = procs.start_python(
                f"sim-{turn}-{side}",
                "-m",
                "benchmarks.remote_sim",
                *sim_args,
                "--threads",
                str(o.sim_workers),
                "--name",
                f"s{turn}{side[-1]}",
            )
            serves = [serve.pid] + ([second.pid] if second else [])
            roles = {**shared, "serve": serves, "workers": [sim.pid]}
            before = {role: sum(cpu_seconds(pid) for pid in pids) for role, pids in roles.items()}
            rate = drain(sp, o.jobs, o.timeout)
            after = {role: sum(cpu_seconds(pid) for pid in pids) for role, pids in roles.items()}
            run = {"drain_jobs_per_s": rate}
            run.update({f"cpu_ms_per_job_{role}": (after[role] - before[role]) * 1000 / o.jobs for role in roles})
            rounds[side].append(run)
            procs.stop([sim])
            if second is not None:
                procs.stop([second])
    return rounds


def remote_worker(procs: Processes, root: Path, name: str, url: str, cacert: Path) -> subprocess.Popen[bytes]:
    token = add_token(root, name)
    return procs.start(name, "worker", "--server", url, "--token", token, "--cacert", str(cacert), *TASKS)


def wait_listening(log: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Until ``spool serve`` says it listens (a second one on the port: /healthz may reach the first)."""
    deadline = time.monotonic() + timeout
    while b"listening on " not in (log.read_bytes() if log.exists() else b""):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the second spool serve did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)


def dispatch_drain(
    sp: Spool, procs: Processes, o: argparse.Namespace, url: str, cacert: Path, shared: dict[str, list[int]]
) -> dict[str, float]:
    """``spool dispatch --engine local --max-inflight 8`` draining ``--dispatch-jobs`` echo jobs:
    a ``spool run-one`` process (and its attempt child) per job, the bound of an engine that starts
    a process per job; jobs/s and the servers' CPU per job."""
    token_file = sp.root.parent / "dispatch.token"
    done = subprocess.run(
        [
            *SPOOL,
            "--spool",
            str(sp.root),
            "token",
            "add",
            "bench-dispatch",
            "--role",
            "dispatch",
            "--out",
            str(token_file),
        ],
        capture_output=True,
        text=True,
        env=process_env(),
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"token add: {done.stderr.strip()}")
    before = {role: sum(cpu_seconds(pid) for pid in pids) for role, pids in shared.items()}
    started = time.monotonic()
    proc = procs.start(
        "dispatch",
        "dispatch",
        "--server",
        url,
        "--token-file",
        str(token_file),
        "--cacert",
        str(cacert),
        "--engine",
        "local",
        "--engine-opt",
        f"state_dir={sp.root.parent / 'engine'}",
        "--max-inflight",
        "8",
        *TASKS,
    )
    before_done = count_done(sp.root)
    sp.submit_many([sp.spec("echo", {"i": i}) for i in range(o.dispatch_jobs)])
    deadline = started + o.timeout
    while count_done(sp.root) < before_done + o.dispatch_jobs:
        if time.monotonic() > deadline:
            raise SystemExit(f"dispatch: {count_done(sp.root) - before_done} of {o.dispatch_jobs} done")
        time.sleep(0.01)
    rate = o.dispatch_jobs / (time.monotonic() - started)
    after = {role: sum(cpu_seconds(pid) for pid in pids) for role, pids in shared.items()}
    procs.stop([proc])
    results = {"drain_jobs_per_s": rate}
    for role in shared:
        results[f"cpu_ms_per_job_{role}"] = (after[role] - before[role]) * 1000 / o.dispatch_jobs
    return results


def print_table(r: dict[str, Any]) -> None:
    rows = [
        (f"idle pickup p50 ms ({r['pickups']}, 0-50 ms gaps)", "pickup_p50_ms", "{:.1f}"),
        ("idle pickup p99 ms", "pickup_p99_ms", "{:.1f}"),
        (
            f"drain jobs/s ({r['jobs']} echo, {r['remote_workers']} remote / 2 local workers)",
            "drain_jobs_per_s",
            "{:.0f}",
        ),
        ("  CPU ms per job: spool serve", "cpu_ms_per_job_serve", "{:.2f}"),
        ("  CPU ms per job: coordinator", "cpu_ms_per_job_coordinator", "{:.2f}"),
        ("  CPU ms per job: the workers (+ children)", "cpu_ms_per_job_workers", "{:.2f}"),
    ]
    if "dispatch" in r:
        d = r["dispatch"]
        print(
            f"spool dispatch --engine local, 8 in flight: {d['drain_jobs_per_s']:.1f} jobs/s; CPU ms per job: "
            f"spool serve {d['cpu_ms_per_job_serve']:.2f}, coordinator {d['cpu_ms_per_job_coordinator']:.2f}"
        )
    width = max(len(label) for label, _, _ in rows)
    print(f"{'':{width}}  {'remote (API)':>13}  {'remote, 2 serves':>16}  {'local':>8}")
    for label, key, fmt in rows:
        cells = [fmt.format(r[side][key]) for side in ("remote", "remote_2_serves", "local")]
        print(f"{label:{width}}  {cells[0]:>13}  {cells[1]:>16}  {cells[2]:>8}")
    if "sim" in r:
        for side, label in (("sim", "1 serve"), ("sim_2_serves", "2 serves")):
            sim = r[side]
            print(
                f"control plane, {r['sim_workers']} simulated remote workers, {label}: "
                f"{sim['drain_jobs_per_s']:.0f} jobs/s; CPU ms per job: spool serve {sim['cpu_ms_per_job_serve']:.2f}, "
                f"coordinator {sim['cpu_ms_per_job_coordinator']:.2f}, "
                f"the simulator {sim['cpu_ms_per_job_workers']:.2f}"
            )
    if len(r["rounds"]["remote"]) > 1:
        for side, runs in r["rounds"].items():
            print(f"drain jobs/s, each round, {side}: " + ", ".join(f"{run['drain_jobs_per_s']:.0f}" for run in runs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the work folder goes (default: the temp dir)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--pickups", type=int, default=100)
    parser.add_argument("--dispatch-jobs", type=int, default=200, help="jobs drained by spool dispatch (0: skip)")
    parser.add_argument(
        "--remote-workers", type=int, default=2, help="remote workers on each remote side (local: always 2)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="times the two remote sides alternate (medians)")
    parser.add_argument(
        "--sim-workers",
        type=int,
        default=16,
        help="simulated remote workers (benchmarks/remote_sim.py) for the control-plane sides (0: skip)",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    o = parser.parse_args(argv)
    results = run(o)
    print_table(results)
    if o.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
