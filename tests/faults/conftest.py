"""Fixtures for the fault tests: a fast spool, recovery as a supervisor would run it, the end-state check.

- ``fast_spool``: an initialised spool whose config.yaml makes leases, backoffs and polls short,
  so recovery takes milliseconds (processes started on it read the same file); ``make_spool(name)``
  makes more of them.
- ``recover(sp, timeout=...)``: what a supervisor restarts after a crash, run in-process: one
  ``Coordinator`` (reconciling on every pass) and a worker made of ``claim`` + ``complete`` for
  the task ``echo``, until every ``echo`` job is done or dead. Jobs of other tasks are bystanders
  no worker here runs.
- ``check_end_state(sp)``: the promises on disk after recovery: each job in exactly one folder,
  done iff one whole JSON result, one 'done' attempt per done job, tries within max_tries,
  nothing left in tmp/, ``fsck`` clean. Returns {id: (folder, JobFile)}.
- ``add_bystanders(sp)``: a pending job of a task no worker here runs and a done job; returns
  their ids; ``bystander_files(sp, ids)``: their files' bytes, which a fault must not change.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spool import Spool
from spool.base.errors import InvalidJob
from spool.fsck import fsck
from spool.disk.fsio import fs
from spool.job import JobFile
from spool.disk.layout import State, key_name, result_name, worker_lock_name
from spool.disk.locks import acquire
from spool.moves.recovery import list_folders
from spool.runner.coordinator import Coordinator
from spool.moves.store import read_job
from spool.moves.transitions import Lease, claim, complete

FAST_CONFIG = """\
lease_seconds: 0.4
backoff_base_seconds: 0.01
backoff_max_seconds: 0.02
poll_seconds: 0.05
grace_seconds: 1
"""

RECOVERY_WORKER = "w-recover"
RECOVERY_TASKS = ("echo",)


@pytest.fixture
def fast_spool(spool_dir: Path) -> Path:
    (spool_dir / "config.yaml").write_text(FAST_CONFIG)
    return spool_dir


@pytest.fixture
def make_spool(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """More fast spools, side by side: ``make_spool("k3")`` returns its root.

    They live on /dev/shm when there is one: these tests kill processes, they don't cut power,
    so fsync costs nothing there and the matrix runs in milliseconds a point; rename, link and
    flock behave as on ext4.
    """
    shm = Path("/dev/shm")
    base = (
        Path(tempfile.mkdtemp(prefix="spool-faults-", dir=shm))
        if shm.is_dir() and os.access(shm, os.W_OK)
        else tmp_path
    )

    def make(name: str) -> Path:
        root = base / name
        Spool.init(root, environ={}).close()
        (root / "config.yaml").write_text(FAST_CONFIG)
        return root

    yield make
    if base != tmp_path:
        shutil.rmtree(base, ignore_errors=True)


def job_folders(sp: Spool) -> dict[str, list[State]]:
    return list_folders(sp).jobs


def _settled(sp: Spool) -> bool:
    """Every job a recovery worker would run sits in done/ or dead/ alone (not just has a result)."""
    for job_id, folders in job_folders(sp).items():
        if folders in ([State.DONE], [State.DEAD]):
            continue
        try:
            task = read_job(sp, folders[0], job_id).job.task
        except (InvalidJob, FileNotFoundError):  # torn, half-ingested or moving: not settled yet
            return False
        if len(folders) > 1 or task in RECOVERY_TASKS:
            return False
    return True


@pytest.fixture
def recover(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    # A restarted coordinator reconciles at start; here every pass does, so a pass never waits
    # for the 5 s reconcile period (what it does on a pass is unchanged).

    def run(sp: Spool, timeout: float = 20.0) -> None:
        coordinator = Coordinator(sp)
        coordinator.reconcile_seconds = 0.0
        deadline = time.monotonic() + timeout
        with acquire(sp.layout.fd("locks"), worker_lock_name(RECOVERY_WORKER), blocking=True):
            while True:
                coordinator.run_pass()
                job_file = claim(sp, RECOVERY_WORKER, RECOVERY_TASKS)
                if job_file is not None:
                    value = {"by": RECOVERY_WORKER, "attempt": job_file.attempt}
                    complete(sp, Lease(job_file.id, RECOVERY_WORKER, job_file.attempt), json.dumps(value).encode())
                elif _settled(sp):
                    coordinator.run_pass()  # the ledger catches up with the last moves
                    return
                else:
                    time.sleep(0.005)
                if time.monotonic() > deadline:
                    pytest.fail(f"recovery did not settle in {timeout}s: {job_folders(sp)}")

    return run


@pytest.fixture
def check_end_state() -> Callable[[Spool], dict[str, tuple[State, JobFile]]]:
    def check(sp: Spool) -> dict[str, tuple[State, JobFile]]:
        jobs: dict[str, tuple[State, JobFile]] = {}
        for job_id, folders in job_folders(sp).items():
            assert len(folders) == 1, f"{job_id} is in {len(folders)} folders: {folders}"
            state = folders[0]
            job_file = read_job(sp, state, job_id)  # whole and valid, or InvalidJob fails the test
            jobs[job_id] = (state, job_file)
            where = f"{state.value}/{job_id}"
            try:
                result = fs.read_file(sp.layout.fd("results"), result_name(job_id), sp.settings.max_result_bytes)
            except FileNotFoundError:
                result = None
            done_records = [r for r in job_file.attempts if r.outcome == "done"]
            if state is State.DONE:
                assert result is not None, f"{where}: done without a result"
                json.loads(result)
                assert len(done_records) == 1, f"{where}: {len(done_records)} attempts ended done"
            else:
                assert result is None, f"{where}: {state.value} with a result"
                assert not done_records, f"{where}: an attempt ended done but the job is {state.value}"
            if state is State.DEAD:
                assert job_file.reason, f"{where}: dead without a reason"
            assert job_file.tries <= job_file.job.max_tries, f"{where}: tries {job_file.tries} > max"
            assert job_file.tries <= job_file.attempt, f"{where}: tries {job_file.tries} > attempt {job_file.attempt}"
            if state is not State.LEASED:
                assert job_file.lease is None, f"{where}: {state.value} with a lease"
        leftovers = fs.list_dir(sp.layout.fd("tmp"))
        assert not leftovers, f"tmp/ still holds {leftovers}"
        report = fsck(sp)
        assert report.ok, f"fsck: {report.violations}"
        assert not report.in_progress, f"fsck sees moves in progress: {report.in_progress}"
        return jobs

    return check


BYSTANDER_WORKER = "w-old"


def _add_bystanders(sp: Spool) -> dict[str, str]:
    ids = {
        "bystander": sp.submit("sleep", {"seconds": 0}, key="bystander"),
        "old": sp.submit("echo", {"n": 0}, key="old"),
    }
    with acquire(sp.layout.fd("locks"), worker_lock_name(BYSTANDER_WORKER), blocking=True):
        job_file = claim(sp, BYSTANDER_WORKER, ["echo"])
        assert job_file is not None and job_file.id == ids["old"]
        complete(sp, Lease(job_file.id, BYSTANDER_WORKER, job_file.attempt), b'{"by": "w-old"}')
    return ids


def _bystander_files(sp: Spool, ids: dict[str, str]) -> dict[str, bytes]:
    names = [
        (State.PENDING, f"{ids['bystander']}.yaml"),
        ("keys", key_name("bystander")),
        (State.DONE, f"{ids['old']}.yaml"),
        ("results", result_name(ids["old"])),
        ("keys", key_name("old")),
    ]
    return {
        f"{getattr(folder, 'value', folder)}/{name}": fs.read_file(sp.layout.fd(folder), name, 1 << 20)
        for folder, name in names
    }


@pytest.fixture
def add_bystanders() -> Callable[[Spool], dict[str, str]]:
    return _add_bystanders


@pytest.fixture
def bystander_files() -> Callable[[Spool, dict[str, str]], dict[str, bytes]]:
    return _bystander_files
