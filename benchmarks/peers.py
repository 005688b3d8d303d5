"""Issue 19's peer rows of ``benchmarks/bench.py``: spool, Huey, pgqueuer and procrastinate, three shapes.

Each system runs with 2 workers, in the same run, on the same folder (``--dir``):

- (a) one producer submits N jobs one by one while the workers drain;
- (b) backlog: ``--backlog`` jobs loaded first with nothing consuming, then drained;
- (c) ``--producers`` (4) producer processes submit N jobs between them at once while the workers drain.

Per system and shape: drain jobs/s, accepted submits/s, and CPU ms per job summed over every
process of the system (producers from their own ``getrusage``; workers, and for PostgreSQL the
postmaster and all its children, from /proc: utime+stime+cutime+cstime, so backends that exited
are counted through the postmaster). Then ``--peer-strace-jobs`` (300) jobs of shape (a) under
``strace -ff -z``, attached to the workers and the PostgreSQL server, and wrapped around the
producer: fsync-family calls per job (fsync, fdatasync, sync_file_range, syncfs) and file creations per job.

Drain ends when the system reports every job finished, polled every 10 ms: spool's ledger (jobs
in ``done``, read-only SQLite), Huey's result rows (``kv``), pgqueuer's id sequence minus its
queue table (a job's row is deleted when its completion is logged), procrastinate's id sequence
minus its ``todo``/``doing`` rows. Shape (b)'s drain runs from the first finished job seen to the
last, so no system's start-up is in it; (a) and (c) run from the first submit to the last finish.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import pgcluster  # noqa: E402
from benchmarks.procs import CHILDREN, collect, cpu_of, env, kill, popen, run, tree  # noqa: E402
from benchmarks.peers_report import SHAPES, parse_strace  # noqa: E402

APPS = ROOT / "benchmarks" / "peer_apps.py"
PG_SYSTEMS = ("pgqueuer", "procrastinate")
SYNC_CALLS = "fsync,fdatasync,sync_file_range,syncfs,open,openat,creat,mkdir,mkdirat"
POLL = 0.01


def available(huey: bool, cluster_error: str | None) -> tuple[list[str], dict[str, str]]:
    """The systems to run, and one line for each one left out."""
    systems, skipped = ["spool"], {}
    if huey:
        systems.append("huey")
    for name in PG_SYSTEMS:
        if importlib.util.find_spec(name) is None:
            skipped[name] = f"{name}: not importable (pip install -e '.[bench]'), skipped"
        elif cluster_error:
            skipped[name] = f"{' and '.join(PG_SYSTEMS)}: skipped, {cluster_error}"
        else:
            systems.append(name)
    return systems, skipped


class System:
    """One system's store, workers and 'how many jobs are finished' in the work folder."""

    def __init__(self, name: str, work: Path, cluster: pgcluster.Cluster | None) -> None:
        self.name, self.work, self.cluster = name, work, cluster
        self.workers: list[subprocess.Popen[str]] = []
        self.store = work
        self._db: Any = None
        self.offset = 0
        self.lost = 0  # jobs accepted and never finished (see wait_done)

    @property
    def environ(self) -> dict[str, str]:
        extra = {"BENCH_HUEY_DB": str(self.store)} if self.name == "huey" else {}
        if self.cluster is not None:
            extra["BENCH_PG_DSN"] = self.cluster.dsn.replace("dbname=postgres", f"dbname={self.name}")
        return env(**extra)

    def fresh(self, label: str) -> None:
        """A new spool / Huey file for each shape; PostgreSQL keeps its database (the queue is empty)."""
        self.close()
        if self.name == "spool":
            from spool import Spool

            self.store = self.work / f"peers-spool-{label}"
            Spool.init(self.store, environ={}).close()
        elif self.name == "huey":
            self.store = self.work / f"peers-huey-{label}.db"

    def install(self) -> None:
        import psycopg

        assert self.cluster is not None
        with psycopg.connect(self.cluster.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.name}")
        run([sys.executable, str(APPS), "install", self.name], self.environ)

    def start(self, wrap: list[str] | None = None) -> None:
        log = self.work / f"peers-{self.name}.log"
        if self.name == "spool":
            cmd = [sys.executable, "-m", "spool.cli", "--spool", str(self.store), "run", "--workers", "2"]
            self.workers = [popen([*cmd, "--import", "examples.tasks"], self.environ, log)]
        elif self.name == "huey":
            cmd = [sys.executable, "-m", "huey.bin.huey_consumer", "benchmarks.huey_app.huey", "-k", "process"]
            self.workers = [popen([*cmd, "-w", "2"], self.environ, log)]
        else:
            self.workers = [popen([sys.executable, str(APPS), "worker", self.name], self.environ, log) for _ in "12"]

    def stop(self) -> None:
        for proc in self.workers:
            kill(proc, signal.SIGINT if self.name == "huey" else signal.SIGTERM)
        self.workers = []

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def pids(self) -> list[int]:
        """The workers' process trees, and the PostgreSQL server's for the PostgreSQL queues."""
        server = self.cluster.pids() if self.cluster is not None and self.name in PG_SYSTEMS else []
        return tree([p.pid for p in self.workers]) + server

    def done(self) -> int:
        try:
            if self._db is None:
                self._db = self._connect()
            return int(self._db.execute(self._done_sql()).fetchall()[0][0])  # all: the read ends here
        except (sqlite3.OperationalError, OSError):
            self.close()  # not made yet (Huey's tables come with its first connection)
            return 0

    def _connect(self) -> Any:
        if self.name == "spool":
            return sqlite3.connect(f"file:{self.store / 'ledger.sqlite3'}?mode=ro", uri=True)
        if self.name == "huey":
            return sqlite3.connect(f"file:{self.store}?mode=ro", uri=True)
        import psycopg

        return psycopg.connect(self.environ["BENCH_PG_DSN"], autocommit=True)

    def _done_sql(self) -> str:
        if self.name == "spool":
            return "SELECT count(*) FROM jobs WHERE state = 'done'"
        if self.name == "huey":
            return "SELECT count(*) FROM kv"
        if self.name == "pgqueuer":
            return (
                "SELECT coalesce((SELECT last_value FROM pgqueuer_id_seq WHERE is_called), 0)"
                " - (SELECT count(*) FROM pgqueuer)"
            )
        return (
            "SELECT coalesce((SELECT last_value FROM procrastinate_jobs_id_seq WHERE is_called), 0)"
            " - (SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))"
        )

    def produce(self, jobs: int, start_at: float = 0.0, wrap: list[str] | None = None) -> subprocess.Popen[str]:
        params = {"jobs": jobs, "offset": self.offset, "start_at": start_at, "root": str(self.store)}
        self.offset += jobs
        return popen([*(wrap or []), sys.executable, str(APPS), "produce", self.name, json.dumps(params)], self.environ)


STALL = 20.0  # seconds without one more finished job: the rest are lost (Huey drops a task it failed to run)


def wait_done(s: System, count: int, timeout: float, on_first: Callable[[], None] | None = None) -> float:
    """Poll until ``count`` jobs are finished; the time it saw the last one. ``on_first`` at the first one.

    A system that stops finishing jobs for ``STALL`` seconds before ``count`` has lost the rest:
    ``s.lost`` counts them and the time returned is when it finished its last one."""
    deadline, base, seen = time.monotonic() + timeout, s.done(), time.time()
    last = base
    while (now := s.done()) < count:
        if now != last:
            last, seen = now, time.time()
        elif time.time() - seen > STALL:
            s.lost += count - now
            return seen
        if on_first is not None and now > base:
            on_first()
            on_first = None
        if time.monotonic() > deadline:
            raise RuntimeError(f"{s.name}: {now} of {count} jobs finished after {timeout:.0f}s; see its log")
        if any(proc.poll() is not None for proc in s.workers):
            log = (s.work / f"peers-{s.name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{s.name}: a worker exited; its log ends:\n{log}")
        time.sleep(POLL)
    return time.time()


def warm(s: System, timeout: float) -> None:
    """Five jobs through the running workers, then wait until they are quiet (< 10% of a core over 0.5 s)."""
    target = s.done() + 5
    collect([s.produce(5)], timeout)
    wait_done(s, target, timeout)
    deadline, last = time.monotonic() + 15, cpu_of(s.pids())
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_of(s.pids())
        if now - last < 0.05:
            return
        last = now


def shape_live(s: System, jobs: int, producers: int, timeout: float) -> dict[str, Any]:
    """Shapes (a) and (c): the workers running, ``producers`` processes submit ``jobs`` between them."""
    s.start()
    try:
        warm(s, timeout)
        target, cpu0 = s.done() + jobs, cpu_of(s.pids())
        start_at = time.time() + (0.0 if producers == 1 else 3.0)  # their imports and connections done
        share = [jobs // producers + (1 if i < jobs % producers else 0) for i in range(producers)]
        procs = [s.produce(n, start_at) for n in share]
        reports = collect(procs, timeout)
        refused = sum(r.get("refused", 0) for r in reports)
        target -= refused
        lost = s.lost
        last = wait_done(s, target, timeout)
        lost = s.lost - lost
        cpu1 = cpu_of(s.pids())
    finally:
        s.stop()
    first = min(r["first"] for r in reports)
    producer_cpu = sum(r["cpu_s"] for r in reports)
    return {
        "jobs": jobs,
        "producers": producers,
        "lost": lost,
        "refused": refused,
        "drain": (jobs - refused - lost) / (last - first),
        "submits": (jobs - refused) / (max(r["submitted"] for r in reports) - first),
        "late_start_s": max(r["first"] for r in reports) - first,
        "submit_p50_ms": reports[0]["p50_ms"],
        "submit_p99_ms": reports[0]["p99_ms"],
        "cpu_ms": {"producers": producer_cpu * 1000 / jobs, "system": (cpu1 - cpu0) * 1000 / jobs},
    }


def shape_backlog(s: System, jobs: int, timeout: float) -> dict[str, Any]:
    """Shape (b): ``jobs`` loaded with nothing consuming, then 2 workers started and timed from the first finish."""
    (load,) = collect([s.produce(jobs)], timeout)
    target = s.done() + jobs - load.get("refused", 0)  # nothing consumes yet: done() is where it was
    mark: dict[str, Any] = {}
    s.start()
    try:
        mark["started"] = time.time()

        def first_seen() -> None:
            mark.update(t=time.time(), done=s.done(), cpu=cpu_of(s.pids()))

        lost = s.lost
        last = wait_done(s, target, timeout, first_seen)
        lost = s.lost - lost
        cpu1 = cpu_of(s.pids())
    finally:
        s.stop()
    if "t" not in mark:  # all finished before the second poll: time it from the start
        mark.update(t=mark["started"], done=target - jobs + load.get("refused", 0), cpu=0.0)
    counted = target - mark["done"] - lost
    return {
        "jobs": jobs,
        "lost": lost,
        "refused": load.get("refused", 0),
        "drain": counted / max(last - mark["t"], 1e-6),
        "counted": counted,
        "submits": (jobs - load.get("refused", 0)) / (load["submitted"] - load["first"]),
        "start_to_first_s": mark["t"] - mark["started"],
        "cpu_ms": {"producers": load["cpu_s"] * 1000 / jobs, "system": (cpu1 - mark["cpu"]) * 1000 / max(counted, 1)},
    }


def shape_strace(s: System, jobs: int, timeout: float) -> dict[str, Any]:
    """``jobs`` of shape (a) with strace attached to every process of the system, and around the producer."""
    prefix = s.work / f"strace-{s.name}"
    calls = ["strace", "-ff", "-qq", "-z", "-e", f"trace={SYNC_CALLS}", "-o"]
    s.start()
    try:
        warm(s, timeout)
        target = s.done() + jobs
        pids = [arg for pid in s.pids() for arg in ("-p", str(pid))]
        tracer = popen([*calls, f"{prefix}-system", *pids], env())
        time.sleep(1.0)  # attached
        collect([s.produce(jobs, wrap=[*calls, f"{prefix}-producer"])], timeout)
        wait_done(s, target, timeout)
        time.sleep(0.3)  # the last group commits and checkpoints of this batch
        kill(tracer, signal.SIGINT)
    finally:
        s.stop()
    producer, system = (
        parse_strace(s.work, f"strace-{s.name}-producer"),
        parse_strace(s.work, f"strace-{s.name}-system"),
    )
    return {"jobs": jobs, "producer": producer, "system": system}


def measure(work: Path, o: Any, huey: bool, say: Callable[[str], None] = lambda _text: None) -> dict[str, Any]:
    """Every shape for every system that can run here; a line for each one that cannot."""
    cluster, cluster_error = None, None
    if any(importlib.util.find_spec(n) for n in PG_SYSTEMS):
        if pgcluster.bindir() is None:
            cluster_error = "PostgreSQL is not installed (apt-get install postgresql)"
        else:
            cluster = pgcluster.Cluster(work / "pg")
            try:
                cluster.start()
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
                cluster_error, cluster = f"the PostgreSQL cluster did not start: {error}", None
    systems, skipped = available(huey, cluster_error)
    report: dict[str, Any] = {
        "jobs": o.jobs,
        "backlog": o.backlog,
        "producers": o.producers,
        "strace_jobs": o.peer_strace_jobs,
        "skipped": skipped,
        "postgres": pgcluster.version() if cluster else None,
        "postgres_user": (pgcluster.run_as() or ("(us)",))[0] if cluster else None,
        "systems": {},
    }
    try:
        for name in systems:
            s = System(name, work, cluster if name in PG_SYSTEMS else None)
            if name in PG_SYSTEMS:
                s.install()
            if name == "huey":
                s.fresh("pragmas")
                pragmas = subprocess.run(
                    [sys.executable, str(APPS), "pragmas", "huey"], env=s.environ, capture_output=True, text=True
                )
                report["huey_sqlite"] = json.loads(pragmas.stdout.strip() or "{}")
            out: dict[str, Any] = {}
            s.fresh("a")
            out["a"] = shape_live(s, o.jobs, 1, o.timeout)
            s.fresh("b")
            out["b"] = shape_backlog(s, o.backlog, o.timeout)
            s.fresh("c")
            out["c"] = shape_live(s, o.jobs, o.producers, o.timeout)
            if o.peer_strace_jobs:
                s.fresh("strace")
                out["strace"] = shape_strace(s, o.peer_strace_jobs, o.timeout)
            s.close()
            report["systems"][name] = out
            say(f"peers: {name} " + ", ".join(f"({k}) {out[k]['drain']:.0f}/s" for k in SHAPES))
    finally:
        for proc in CHILDREN:
            kill(proc, signal.SIGKILL)
        if cluster is not None:
            cluster.stop()
    return report
