"""Real processes racing and dying: one key makes one job, each job is claimed once, and a SIGKILL at
every crash point of submit, claim, complete and fail is recovered to a clean spool and a right end.

The races use forked processes released together by a barrier (most contention for the least
start-up), and ``spool submit`` processes for the end-to-end case. The crash matrix starts every
point's ``spool submit`` / ``spool worker`` at once, each on its own spool, in one module fixture
(a fresh interpreter costs seconds on a loaded machine); one test per point then checks its story.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spool.base import crash
from spool.fsck import fsck
from spool.disk.ids import new_id
from spool.job import Job
from spool.disk.layout import State, job_name, key_name, result_name
from spool.moves.recovery import list_folders
from spool.runner.coordinator import Coordinator
from spool.spool import Spool
from spool.moves.store import read_job
from spool.moves.transitions import Lease, claim, complete
from support import ROOT, SPOOL_CMD

FORK = multiprocessing.get_context("fork")
FLAGS = {"backoff_base_seconds": 0.001}
FLAG_ARGV = ["--backoff-base-seconds", "0.001", "--log-level", "warning"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("SPOOL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**env, **extra}


def job_names(root: Path) -> list[str]:
    return sorted(n for state in State for n in os.listdir(root / state.value) if not n.startswith("."))


def join_all(processes: list[Any], timeout: float = 120.0) -> None:
    """Wait for forked processes; kill any still running (so a failing test never leaks one)."""
    try:
        for proc in processes:
            proc.join(timeout)
    finally:
        for proc in processes:
            if proc.is_alive():
                proc.kill()
                proc.join()


@pytest.fixture
def fast_spool() -> Iterator[Path]:
    """A spool on tmpfs when there is one: the races are about atomicity, not the disk's fsync."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    home = Path(tempfile.mkdtemp(prefix="spool-races-", dir=base))
    try:
        Spool.init(home / "spool", environ={}).close()
        yield home / "spool"
    finally:
        shutil.rmtree(home, ignore_errors=True)


# -- one key, one job ---------------------------------------------------------------------------


def test_spool_submit_processes_with_one_key_print_one_id(spool_dir: Path) -> None:
    # End to end through `spool submit`; the sixteen-way race itself is the forked test below.
    argv = [*SPOOL_CMD, "--spool", str(spool_dir), "submit", "echo", "--key", "invoice-2026-11-30", "-a", "n=1"]
    started = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT)
        for _ in range(6)
    ]
    try:
        outputs = [proc.communicate(timeout=120) for proc in started]
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in started] == [0] * 6, [err for _out, err in outputs]
    ids = {out.strip() for out, _err in outputs}
    assert len(ids) == 1
    (job_id,) = ids
    assert job_names(spool_dir) == [job_name(job_id)]
    assert os.listdir(spool_dir / "keys") == [key_name("invoice-2026-11-30")]
    with Spool(spool_dir, environ={}) as sp:
        assert fsck(sp).ok


def _submit_at_once(root: str, barrier: Any, out: str, keys: list[str]) -> None:
    sp = Spool(root, environ={})
    barrier.wait()
    ids = [sp.submit("echo", {"pid": os.getpid()}, key=key) for key in keys]
    Path(out).write_text("\n".join(ids))


def test_sixteen_processes_released_together_make_one_job_per_key(fast_spool: Path, tmp_path: Path) -> None:
    # All sixteen submit "the-key" first, the moment the barrier lets them go; then twenty more
    # keys, each process starting at a different one.
    others = [f"key-{n}" for n in range(20)]
    orders = [["the-key", *others[n:], *others[:n]] for n in range(16)]
    barrier = FORK.Barrier(16)
    processes = [
        FORK.Process(target=_submit_at_once, args=(str(fast_spool), barrier, str(tmp_path / f"out-{n}"), orders[n]))
        for n in range(16)
    ]
    for proc in processes:
        proc.start()
    join_all(processes)
    assert [proc.exitcode for proc in processes] == [0] * 16
    answers = [dict(zip(orders[n], (tmp_path / f"out-{n}").read_text().split())) for n in range(16)]
    for key in ["the-key", *others]:
        assert len({answer[key] for answer in answers}) == 1, key
    assert len(job_names(fast_spool)) == 21 == len(os.listdir(fast_spool / "keys"))
    with Spool(fast_spool, environ={}) as sp:
        assert fsck(sp).ok


# -- each job claimed once ------------------------------------------------------------------------


def fill(sp: Spool, count: int) -> list[str]:
    """``count`` ready jobs, as ``submit`` writes them, indexed in one ledger rebuild (fast)."""
    first = sp.submit("echo", {"n": 0})
    template = (sp.root / "pending" / job_name(first)).read_bytes()
    base = read_job(sp, State.PENDING, first)
    ids, entries = [first], [(base, State.PENDING, True)]
    for _ in range(count - 1):
        job_id = new_id()
        (sp.root / "pending" / job_name(job_id)).write_bytes(template.replace(first.encode(), job_id.encode()))
        job = Job(**{**base.job.__dict__, "id": job_id, "key": job_id})
        ids.append(job_id)
        entries.append((base.replace(job=job), State.PENDING, True))
    sp.ledger.rebuild(entries)
    return ids


def _claim_until_empty(root: str, barrier: Any, out: str) -> None:
    sp = Spool(root, environ={})
    worker = f"w{os.getpid()}"
    claimed = []
    barrier.wait()
    while (job_file := claim(sp, worker, ["echo"])) is not None:
        claimed.append(f"{job_file.id} {job_file.attempt}")
        complete(sp, Lease(job_file.id, worker, job_file.attempt), json.dumps(worker).encode())
    Path(out).write_text("\n".join(claimed))


def test_eight_processes_claim_each_of_a_thousand_jobs_exactly_once(fast_spool: Path, tmp_path: Path) -> None:
    with Spool(fast_spool, environ={}) as sp:
        ids = fill(sp, 1000)
    barrier = FORK.Barrier(8)
    processes = [
        FORK.Process(target=_claim_until_empty, args=(str(fast_spool), barrier, str(tmp_path / f"c{n}")))
        for n in range(8)
    ]
    for proc in processes:
        proc.start()
    join_all(processes, timeout=300)
    assert [proc.exitcode for proc in processes] == [0] * 8
    claims = [line.split() for n in range(8) for line in (tmp_path / f"c{n}").read_text().splitlines()]
    assert sorted(job_id for job_id, _attempt in claims) == sorted(ids)  # each exactly once
    assert {attempt for _id, attempt in claims} == {"1"}
    assert sum(1 for n in range(8) if (tmp_path / f"c{n}").read_text()) >= 2  # they really raced
    assert len(os.listdir(fast_spool / "results")) == 1000
    with Spool(fast_spool, environ={}) as sp:
        listing = list_folders(sp)
        assert len(listing.jobs) == 1000 and all(folders == [State.DONE] for folders in listing.jobs.values())
        for job_id in ids[::50]:
            done = read_job(sp, State.DONE, job_id)
            assert (done.attempt, done.tries) == (1, 1)
            assert sp.result(job_id) == done.attempts[0].worker  # the claimer's own result
        report = fsck(sp)
        assert report.ok and not report.in_progress, report.violations


# -- a SIGKILL at every crash point of the worker's claim, complete and fail ----------------------------
# (submit's points are crashed through the command line in tests/faults/test_crash_matrix.py)

WORKER_POINTS = {  # point -> the task whose run reaches it
    "worker:claim-after-reserve": "echo",
    "worker:claim-after-heartbeat": "echo",
    "worker:claim-after-rename": "echo",
    "worker:after-claim": "echo",
    "worker:claim-after-start": "echo",
    "worker:complete-after-stage": "echo",
    "worker:after-result": "echo",
    "worker:complete-after-move": "echo",
    "worker:fail-after-rename": "fail_until",
    "worker:after-fail": "fail_until",
}
# Points whose job ends dead, that only a graceful stop reaches, or that need a planted result:
# the in-process crash matrix (tests/faults/test_crash_matrix.py) covers them.
IN_PROCESS_ONLY = ["worker:bury-after-rename", "worker:release-after-rename", "worker:result-aside-after-rename"]
# A batch's points need a worker that has timed short attempts and meets several ready jobs: the
# in-process matrix claims and completes batches of three at each (and tests/crash/test_worker_batches.py
# runs real batching workers).
IN_PROCESS_ONLY += [
    "worker:claim-batch-after-sync",
    "worker:claim-batch-after-member",
    "worker:complete-batch-after-sync",
    "worker:complete-batch-after-link",
    "worker:complete-batch-after-rename",
]


def test_the_matrix_covers_every_point_of_the_worker() -> None:
    listed = [p for p in crash.all_points() if p.split(":", 1)[0] == "worker"]
    assert sorted(listed) == sorted(list(WORKER_POINTS) + IN_PROCESS_ONLY), "a new crash point needs a test here"


@dataclass
class Scenario:
    point: str
    root: Path
    job_id: str | None = None
    crash_rc: int | None = None
    crash_out: str = ""
    after_crash: list[str] = field(default_factory=list)
    final_rc: int | None = None
    final_out: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)


def _finish(started: list[subprocess.Popen[bytes]], timeout: float = 180.0) -> list[int]:
    try:
        return [proc.wait(timeout=timeout) for proc in started]
    finally:
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def coordinate(sp: Spool, until: Callable[[], bool], passes: int = 20) -> None:
    """Coordinator passes on a clock that jumps 6 s a pass (reconcile and timers every pass)."""
    now = [1000.0]
    coordinator = Coordinator(sp, clock=lambda: now[0])
    for _ in range(passes):
        if until():
            return
        coordinator.run_pass()
        now[0] += 6.0
    assert until(), "the coordinator did not bring the job back"


def ready_or_done(sp: Spool, job_id: str) -> Callable[[], bool]:
    def check() -> bool:
        row = sp.ledger.row(job_id)
        return sp.state(job_id) is State.DONE or (row is not None and row["state"] == "pending" and row["ready"] == 1)

    return check


@pytest.fixture(scope="module")
def crash_matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Scenario]:
    home = tmp_path_factory.mktemp("crash-matrix")
    scenarios = {}
    for n, point in enumerate(WORKER_POINTS):
        root = home / f"s{n}"
        Spool.init(root, environ={}).close()
        scenarios[point] = Scenario(point, root)
        with Spool(root, environ={}) as sp:
            args = {"attempt": 2} if WORKER_POINTS[point] == "fail_until" else {"n": n}
            scenarios[point].job_id = sp.submit(WORKER_POINTS[point], args, key=f"job-{n}")

    # 1. every process that must die, at once
    started = []
    for point, scenario in scenarios.items():
        env = clean_env(SPOOL_CRASH_AT=point)
        argv = [
            *SPOOL_CMD,
            "--spool",
            str(scenario.root),
            *FLAG_ARGV,
            "worker",
            "--burst",
            "--import",
            "examples.tasks",
        ]
        started.append(_start(argv, env, scenario.root.parent / f"{scenario.root.name}-crash.log"))
    for scenario, rc in zip(scenarios.values(), _finish(started)):
        scenario.crash_rc = rc
        scenario.crash_out = (scenario.root.parent / f"{scenario.root.name}-crash.log").read_text(errors="replace")
        scenario.after_crash = job_names(scenario.root)

    # 2. recovery: fsck --repair, then a coordinator
    for scenario in scenarios.values():
        with Spool(scenario.root, environ={}, flags=FLAGS) as sp:
            scenario.notes["repair"] = fsck(sp, repair=True)
            assert scenario.job_id is not None
            coordinate(sp, ready_or_done(sp, scenario.job_id))

    # 3. the process that finishes the story, at once: a worker
    started = []
    for scenario in scenarios.values():
        argv = [
            *SPOOL_CMD,
            "--spool",
            str(scenario.root),
            *FLAG_ARGV,
            "worker",
            "--burst",
            "--import",
            "examples.tasks",
        ]
        started.append(_start(argv, clean_env(), scenario.root.parent / f"{scenario.root.name}-final.log"))
    for scenario, rc in zip(scenarios.values(), _finish(started)):
        scenario.final_rc = rc
        scenario.final_out = (scenario.root.parent / f"{scenario.root.name}-final.log").read_text(errors="replace")
    return scenarios


@pytest.mark.parametrize("point", list(WORKER_POINTS))
def test_a_worker_killed_at_each_point_ends_its_job_done_once_after_recovery(
    crash_matrix: dict[str, Scenario], point: str
) -> None:
    scenario = crash_matrix[point]
    job_id = scenario.job_id
    assert job_id is not None
    assert scenario.crash_rc == -signal.SIGKILL, scenario.crash_out
    # never lost; in two folders only after the done copy was published beside the leased one
    copies = 2 if point == "worker:complete-after-move" else 1
    assert scenario.after_crash == [job_name(job_id)] * copies
    assert scenario.notes["repair"].ok, scenario.notes["repair"].violations
    assert scenario.final_rc == 0, scenario.final_out
    with Spool(scenario.root, environ={}) as sp:
        assert sp.state(job_id) is State.DONE
        assert job_names(scenario.root) == [job_name(job_id)] and (scenario.root / "done" / job_name(job_id)).exists()
        assert os.listdir(scenario.root / "results") == [result_name(job_id)]
        done = read_job(sp, State.DONE, job_id)
        outcomes = [record.outcome for record in done.attempts]
        assert outcomes.count("done") == 1 and outcomes[-1] == "done", outcomes
        assert [record.attempt for record in done.attempts] == list(range(1, done.attempt + 1))
        assert done.tries <= done.job.max_tries and done.lease is None
        value = sp.result(job_id)
        if WORKER_POINTS[point] == "fail_until":
            assert value == {"succeeded_on": done.attempt} and done.attempt >= 2
        else:
            assert value["job"] == job_id and value["attempt"] <= done.attempt
        if point in ("worker:after-result", "worker:complete-after-move"):
            assert done.attempt == 1  # the result was linked: the job never ran again
        if point == "worker:claim-after-reserve":
            assert (done.attempt, done.tries) == (1, 1)  # only its row was reserved: nothing spent
        row = sp.ledger.row(job_id)
        assert row is not None and row["state"] == "done"
        report = fsck(sp)
        assert report.ok and not report.in_progress, report.violations + report.in_progress
