"""The crash kit: helpers the multi-process tests share (tests/crash, tests/stress).

``Kit`` starts real ``spool`` processes on a test's spool (through the ``procs`` fixture, which
SIGKILLs them at teardown) and looks at what they did; tests/crash/conftest.py makes one per
test (the ``kit`` fixture) and puts ``TASK_MODULE`` on PYTHONPATH as ``crash_tasks``. Terms are
short so a test takes seconds: ``FAST`` are the group flags every process gets (lease 2 s, poll
0.2 s, backoff 0.2 s .. 1 s).

Workers import ``examples.tasks`` and ``crash_tasks``. Its one task, ``trace``, appends ``pid
attempt time`` to a file when an attempt starts and then naps, so a test knows which process ran
which attempt, and when. It naps with select(), not time.sleep(): libfaketime 0.9.10 makes
time.sleep() fail with EINVAL when it leaves the monotonic clock alone, as test_clock.py asks it to.

``Kit.chaos`` is the random-SIGKILL run that tests/crash/test_supervised.py and
tests/stress/test_chaos_run.py share. Import it as ``from crashkit import Kit``, like ``support``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import Procs, run_spool, wait_until

from spool import Spool
from spool.base.errors import InvalidJob
from spool.disk.layout import State
from spool.moves.store import read_job

LEASE_SECONDS = 2.0
BACKOFF_BASE_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 1.0
FAST = ("--lease-seconds", "2", "--poll-seconds", "0.2", "--backoff-base-seconds", "0.2", "--backoff-max-seconds", "1")
TASK_IMPORTS = ("--import", "examples.tasks", "--import", "crash_tasks")

TASK_MODULE = '''
"""Tasks for tests/crash (written by its conftest.py from crashkit.TASK_MODULE)."""
import os
import select
import time

from spool import current, task


def nap(seconds):
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


@task("trace")
def trace(path, seconds=0.0, slow_attempts=1000, pad=0):
    """Note ``pid attempt time`` in ``path``; nap ``seconds`` in the first ``slow_attempts`` attempts;
    a result ``pad`` bytes longer."""
    attempt = current().attempt
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()} {attempt} {time.time():.6f}\\n")
    if attempt <= slow_attempts:
        nap(seconds)
    return {"attempt": attempt, "pid": os.getpid(), **({"pad": "x" * pad} if pad else {})}
'''


@dataclass(frozen=True)
class Run:
    """One line of a trace file: an attempt's handler started."""

    pid: int
    attempt: int
    at: float  # the attempt child's wall clock


@dataclass
class ChaosReport:
    seed: int  # replays the same choices of jobs and victims (not the same timing)
    kills: dict[str, int] = field(default_factory=dict)
    submit_seconds: float = 0.0
    chaos_seconds: float = 0.0
    drain_seconds: float = 0.0


def _signal_all(pids: list[int], sig: int) -> bool:
    sent = False
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent = True
        except ProcessLookupError:
            pass
    return sent


# -- /proc ------------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, from every thread's /proc children list."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                found += [int(p) for p in handle.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def alive(pid: int) -> bool:
    """Running, sleeping or stopped; a zombie or a vanished pid is dead."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def supervised(supervisor: int) -> dict[int, str]:
    """pid -> role of each process under a `spool run`: coordinator, worker, attempt (a worker's
    child), or starting (forked, still running the supervisor's own program)."""
    found = {}
    for pid in children(supervisor):
        command = command_of(pid)
        role = (
            "coordinator"
            if command.endswith(" coordinator")
            else "worker"
            if " worker " in command + " "
            else "starting"
        )
        found[pid] = role
        if role == "worker":
            found.update({child: "attempt" for child in children(pid)})
    return found


def runs(path: Path) -> list[Run]:
    """The trace file's lines, in order (a line still being written is left out)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            found.append(Run(int(parts[0]), int(parts[1]), float(parts[2])))
    return found


def run_of(path: Path, attempt: int) -> Run | None:
    return next((r for r in runs(path) if r.attempt == attempt), None)


class Kit:
    """Start spool processes on the test's spool and look at what they did."""

    lease_seconds = LEASE_SECONDS
    backoff_base_seconds = BACKOFF_BASE_SECONDS
    backoff_max_seconds = BACKOFF_MAX_SECONDS
    fast = FAST
    children = staticmethod(children)
    alive = staticmethod(alive)
    supervised = staticmethod(supervised)
    runs = staticmethod(runs)

    def __init__(self, spool_dir: Path, sp: Spool, procs: Procs) -> None:
        self.spool_dir, self.sp, self.procs = spool_dir, sp, procs

    def run_of(self, path: Path, attempt: int) -> Run | None:
        """The traced run of ``attempt``, once no worker's claim is still being written: a
        worker's handler starts before its claim's content is (``spool.moves.claiming.Opening``),
        so a test that stops or kills the worker of a running attempt waits for that too (a
        kill inside that window is a lost claim, which the crash matrix and test_races cover)."""
        run = run_of(path, attempt)
        return run if run is not None and not self.claims_being_written() else None

    def claims_being_written(self) -> list[str]:
        """Jobs in leased/ with a heartbeat for an attempt their file does not have yet."""
        leased = self.spool_dir / "leased"
        found = []
        for beat in leased.glob(".*.hb"):
            job_id, _, number = beat.name[1:-3].rpartition(".")
            try:
                behind = read_job(self.sp, State.LEASED, job_id).attempt < int(number)
            except (FileNotFoundError, InvalidJob, ValueError):
                continue  # moved on meanwhile
            if behind:
                found.append(job_id)
        return found

    # -- processes ------------------------------------------------------------------------------

    def coordinator(self, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.procs.start(*FAST, *flags, "coordinator", env=env, name="coordinator")

    def worker(
        self, name: str, *flags: str, extra: tuple[str, ...] = (), env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        return self.procs.start(*FAST, *flags, "worker", "--name", name, *TASK_IMPORTS, *extra, env=env, name=name)

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.started.index(proc)
        return "\n".join(p.read_text(errors="replace") for p in self.procs.logs.glob(f"*-{index}.log"))

    def wait_logged(self, proc: subprocess.Popen[bytes], text: str, timeout: float = 30.0) -> None:
        def seen() -> bool:
            if text in self.log(proc):
                return True
            if proc.poll() is not None:
                pytest.fail(f"exited with {proc.returncode} before logging {text!r}:\n{self.log(proc)}")
            return False

        wait_until(seen, timeout=timeout, message=f"{text!r} in the log")

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=timeout)

    # -- jobs -----------------------------------------------------------------------------------

    def state(self, job_id: str) -> str | None:
        state = self.sp.state(job_id)
        return state.value if state else None

    def wait_state(self, job_id: str, state: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the move to ``state`` is finished: the file is there and its transition was
        recorded in the ledger (which comes after the file's rewrite), not just a result linked."""

        def settled() -> bool:
            row = self.sp.ledger.row(job_id)
            return bool(row and row["state"] == state and self.state(job_id) == state)

        wait_until(settled, timeout=timeout, message=f"{job_id} to be {state}")
        return self.sp.status(job_id)

    def submit_many(self, count: int, task: str, args: dict[str, Any], **options: Any) -> list[str]:
        return [self.sp.submit(task, args, **options) for _ in range(count)]

    def fsck_ok(self) -> None:
        checked = run_spool("fsck", spool=self.spool_dir)
        assert checked.returncode == 0, f"fsck found violations:\n{checked.stdout}\n{checked.stderr}"

    def folders(self) -> dict[str, list[str]]:
        """job id -> every state folder holding it (a job in two folders shows up with two)."""
        found: dict[str, list[str]] = {}
        for state in State:
            for entry in (self.spool_dir / state.value).iterdir():
                name = entry.name
                if name.endswith(".yaml") and not name.startswith("."):
                    found.setdefault(name[:-5], []).append(state.value)
        return found

    def assert_all_done(self, job_ids: list[str]) -> None:
        """Every job done, once: one folder, one result, attempts numbered 1..n, tries in bounds."""
        where = self.folders()
        twice = {job_id: places for job_id, places in where.items() if len(places) > 1}
        assert not twice, f"jobs in two folders: {twice}"
        results = sorted(p.name for p in (self.spool_dir / "results").iterdir())
        assert results == sorted(f"{job_id}.json" for job_id in job_ids), "one result per job, nothing else"
        for job_id in job_ids:
            assert where.get(job_id) == ["done"], f"{job_id}: {where.get(job_id)}"
            status = self.sp.status(job_id)
            assert 1 <= status["tries"] <= status["max_tries"], status
            assert [r["attempt"] for r in status["attempts"]] == list(range(1, status["attempt"] + 1)), status
            assert status["attempts"][-1]["outcome"] == "done", status
            assert all(r["ended"] for r in status["attempts"]), status

    # -- random SIGKILLs under `spool run` ------------------------------------------------------

    def chaos(
        self,
        *,
        jobs: int,
        kill_seconds: float,
        every_seconds: float = 0.3,
        stop_too: bool = False,
        seed: int | None = None,
        naps: tuple[float, ...] = (0.0, 0.01, 0.05),
        drain_timeout: float = 240.0,
    ) -> ChaosReport:
        """Load ``jobs`` jobs (half through the Python API, half dropped as files for the
        coordinator to ingest under fire), start `spool run --workers 2`, and every
        ``every_seconds`` for ``kill_seconds`` SIGKILL a random supervised process (coordinator,
        worker or attempt child; with ``stop_too``, a quarter of the time SIGSTOP it for up to twice
        the lease term instead). Then let it drain and check every promise."""
        report = ChaosReport(seed=random.randrange(2**32) if seed is None else seed)
        rng = random.Random(report.seed)
        print(f"chaos seed {report.seed} (shown with a failure's captured output)")
        started = time.monotonic()
        submitted = [
            self.sp.submit("sleep", {"seconds": rng.choice(naps)}, max_tries=20, priority=rng.choice((0, 0, 1)))
            for _ in range(jobs // 2)
        ]
        drops = [f"chaos-{n}.yaml" for n in range(jobs - len(submitted))]
        for name in drops:
            staged = self.spool_dir / "pending" / f".{name}"
            staged.write_text(f"task: sleep\nkey: {name}\nmax_tries: 20\nargs: {{seconds: {rng.choice(naps)}}}\n")
            staged.rename(staged.with_name(name))
        report.submit_seconds = time.monotonic() - started
        supervisor = self.procs.start(*FAST, "run", "--workers", "2", "--import", "examples.tasks", name="run")
        wait_until(
            lambda: "coordinator" in supervised(supervisor.pid).values(),
            timeout=30,
            message="the supervisor's children",
        )
        started = time.monotonic()
        stopped: dict[int, float] = {}  # pid -> when to SIGCONT it
        while time.monotonic() - started < kill_seconds:
            assert supervisor.poll() is None, f"the supervisor exited with {supervisor.returncode}"
            due = [pid for pid, until in stopped.items() if until <= time.monotonic()]
            _signal_all(due, signal.SIGCONT)
            for pid in due:
                del stopped[pid]
            victims = {pid: role for pid, role in supervised(supervisor.pid).items() if pid not in stopped}
            if victims:
                pid = rng.choice(sorted(victims))
                sig = signal.SIGSTOP if stop_too and rng.random() < 0.25 else signal.SIGKILL
                if _signal_all([pid], sig):
                    if sig == signal.SIGSTOP:  # sometimes past the lease term, sometimes not
                        stopped[pid] = time.monotonic() + rng.uniform(0.1, 2 * LEASE_SECONDS)
                    label = f"{victims[pid]} {'SIGSTOP' if sig == signal.SIGSTOP else 'SIGKILL'}"
                    report.kills[label] = report.kills.get(label, 0) + 1
            time.sleep(every_seconds)  # the chaos's own cadence, not a wait for a condition
        _signal_all(list(stopped), signal.SIGCONT)
        report.chaos_seconds = time.monotonic() - started
        started = time.monotonic()
        done = self.spool_dir / "done"
        wait_until(
            lambda: len(list(done.glob("*.yaml"))) >= jobs,
            timeout=drain_timeout,
            interval=0.2,
            message=f"all {jobs} jobs done (logs in {self.procs.logs})",
        )
        report.drain_seconds = time.monotonic() - started
        ingested = [path.stem for path in done.glob("*.yaml") if path.stem not in set(submitted)]
        # By key, not dropped_as: an ingest killed between its rename and its rewrite can't know
        # the drop's old name any more, and records "(interrupted ingest)".
        assert sorted(self.sp.status(job_id)["key"] for job_id in ingested) == sorted(drops), (
            "each drop ingested exactly once"
        )
        self.assert_all_done(submitted + ingested)
        self.fsck_ok()
        assert self.stop(supervisor, timeout=60) == 0
        self.fsck_ok()
        return report
