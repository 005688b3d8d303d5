"""The ``dask`` engine: each engine job is a task on a Dask ``distributed`` scheduler that runs
``spool run-one`` in a subprocess of whichever Dask worker takes it.

    spool dispatch --server URL --token-file F --engine dask --engine-opt scheduler=tcp://HOST:8786

Dask re-runs a task whose worker died (``allowed-failures``, 3 by default) and may run a
function more than once; spool's tries must be the only tries. So each task is submitted with
``retries=0``, and the scheduler must run with ``distributed.scheduler.allowed-failures: 0``
(``DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0`` in its environment): a worker that dies
mid-attempt then turns the task into ``KilledWorker`` at once, a definitive verdict the
dispatcher fences the runner on. Even a re-run would be harmless: the claim at ``run-one``'s
start is the fence, and a second run of the same runner and job claims nothing.

A task's key is ``spool|<label>|<runner>|<job id>`` and it is submitted ``fire_and_forget``, so
the scheduler keeps it while the dispatcher is away: a dispatcher SIGKILLed and started again
asks the scheduler for the keys under its label and adopts them (``adopt``). A task over and
released by then is not found: its run ended, and the lease already said how.

Verdicts, from our future's status where it is over (``finished`` -> ``SUCCEEDED``; ``error``
-> ``FAILED``: ``run-one`` exited non-zero, its process was killed, or its worker died:
KilledWorker), else from the scheduler's state of the task (one look per poll round, for every
key of ours): ``released``, ``waiting``, ``queued``, ``no-worker`` -> ``PENDING``; ``processing``
-> ``RUNNING``; ``memory`` -> ``SUCCEEDED``; ``erred`` -> ``FAILED``; a key the scheduler does not
know -> ``PENDING`` if we submitted it and the scheduler has not shown it yet (it is on its way
there), else ``LOST``. An adopted task's end is not told to a new client (the scheduler forgets a
fire-and-forget task once it is over), so a dispatcher that restarted sees its adopted tasks end
as ``LOST``: nothing is fenced, and the lease says how each went.

The token reaches ``run-one`` in a file, never in the task's arguments (Dask's comms may be
plain TCP): ``--engine-opt token_file=PATH`` names a file every Dask worker can read at that
path (a shared filesystem, or a secret mounted there), default ``<state_dir>/token``, written
0600 by the dispatcher (right for workers on the dispatcher's host). The subprocess dies with its
Dask worker (``PR_SET_PDEATHSIG``), so no attempt outlives the worker that ran it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from spool.base.errors import UsageError
from spool.runner.dispatch.engine import EngineJob, RunOne, Verdict
from spool.runner.dispatch.statedir import state_folder, token_file
from spool.workers import WORKER_NAME

log = logging.getLogger("spool.dispatch")

OPTIONS = ("scheduler", "token_file", "state_dir", "label")
KEY_PREFIX = "spool"
STATES_FRESH_SECONDS = 0.1  # one look at the scheduler serves every poll of one round
PENDING = {"released", "waiting", "queued", "no-worker"}


def open_engine(run_one: RunOne, token: str, label: str, options: Mapping[str, str]) -> DaskEngine:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"--engine-opt {unknown[0]}: the dask engine takes {', '.join(OPTIONS)}")
    address = options.get("scheduler") or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if not address:
        raise UsageError("the dask engine needs --engine-opt scheduler=tcp://HOST:PORT (or $DASK_SCHEDULER_ADDRESS)")
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("the dask engine needs distributed: pip install 'spool-queue[dask]'") from None
    token_path = token_file(state_folder(label, options), token, options)
    try:
        client = Client(address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as err:
        raise UsageError(f"--engine-opt scheduler={address}: {err}") from None
    return DaskEngine(client, run_one, label, token_path)


class DaskEngine:
    def __init__(self, client: Any, run_one: RunOne, label: str, token_file: str) -> None:
        self.client, self.run_one, self.label, self.token_file = client, run_one, label, token_file
        self._futures: dict[str, Any] = {}  # key -> the Future we hold (submitted or adopted)
        self._submitted: set[str] = set()  # keys this dispatcher submitted
        self._seen: set[str] = set()  # keys the scheduler has shown us
        self._states: dict[str, str] = {}
        self._looked = 0.0

    def key_of(self, runner: str, job_id: str) -> str:
        return f"{KEY_PREFIX}|{self.label}|{runner}|{job_id}"

    # -- the protocol ------------------------------------------------------------------------

    def submit(self, runner: str, job_id: str) -> EngineJob:
        from distributed import fire_and_forget

        key = self.key_of(runner, job_id)
        argv = self.run_one.argv(runner, job_id, self.token_file)
        future = self.client.submit(run_one_process, argv, dict(self.run_one.env), key=key, pure=False, retries=0)
        fire_and_forget(future)  # the scheduler keeps it while no dispatcher holds it
        self._futures[key] = future
        self._submitted.add(key)
        self._looked = 0.0  # a new key: the next poll looks again
        return EngineJob(runner, job_id, time.time(), key)

    def poll(self, job: EngineJob) -> Verdict:
        future = self._futures.get(self._key(job))
        status = future.status if future is not None else None
        if status == "finished":
            return Verdict.SUCCEEDED
        if status == "error":
            return Verdict.FAILED  # run-one exited non-zero, or KilledWorker: its worker died
        key = self._key(job)
        state = self._scheduler_states().get(key)
        if state is None:
            # A task just submitted may not have reached the scheduler yet: pending until the
            # scheduler has shown it once. Gone after that, it is over and forgotten (an adopted
            # task's end is not told to us): the lease says how it went.
            return Verdict.PENDING if key in self._submitted and key not in self._seen else Verdict.LOST
        self._seen.add(key)
        if state in PENDING:
            return Verdict.PENDING
        if state == "processing":
            return Verdict.RUNNING
        if state == "memory":
            return Verdict.SUCCEEDED
        if state == "erred":
            return Verdict.FAILED
        return Verdict.LOST  # forgotten, or a state this module does not know

    def cancel(self, job: EngineJob) -> None:
        future = self._futures.get(self._key(job))
        if future is not None:
            self.client.cancel([future], force=True)

    def forget(self, job: EngineJob) -> None:
        key = self._key(job)
        self._submitted.discard(key)
        self._seen.discard(key)
        future = self._futures.pop(key, None)
        if future is not None:
            future.release()

    def adopt(self) -> list[EngineJob]:
        from distributed import Future

        jobs = []
        for key in sorted(self._scheduler_states(force=True)):
            parts = key.split("|")
            if len(parts) != 4 or parts[1] != self.label or not WORKER_NAME.fullmatch(parts[2]):
                continue
            self._futures[key] = Future(key, self.client)
            jobs.append(EngineJob(parts[2], parts[3], time.time(), key))
        return jobs

    def stop(self) -> None:
        self._futures.clear()  # fire_and_forget: the tasks run on for the next dispatcher
        self.client.close()

    # -- the scheduler's view ----------------------------------------------------------------

    def _key(self, job: EngineJob) -> str:
        return job.handle or self.key_of(job.runner, job.job_id)

    def _scheduler_states(self, *, force: bool = False) -> dict[str, str]:
        """Every key under our label -> its state on the scheduler, looked at once a round."""
        if force or time.monotonic() - self._looked > STATES_FRESH_SECONDS:
            prefix = f"{KEY_PREFIX}|{self.label}|"
            self._states = self.client.run_on_scheduler(_task_states, prefix)
            self._looked = time.monotonic()
        return self._states


def _task_states(prefix: str, dask_scheduler: Any = None) -> dict[str, str]:
    """On the scheduler: the state of each task whose key starts with ``prefix``."""
    assert dask_scheduler is not None
    return {
        str(key): str(task.state)
        for key, task in dask_scheduler.tasks.items()
        if isinstance(key, str) and key.startswith(prefix)
    }


def run_one_process(argv: list[str], env: dict[str, str]) -> int:
    """On a Dask worker: run ``spool run-one`` to its end; raise unless it exited 0 (the task then
    errs: a definitive verdict). The subprocess gets SIGKILL when its worker dies: a small
    launcher sets ``PR_SET_PDEATHSIG`` and execs it (no ``preexec_fn``: the worker has threads)."""
    import subprocess
    import sys

    launcher = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]
    completed = subprocess.run(launcher, env={**os.environ, **env}, stdin=subprocess.DEVNULL, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"spool run-one exited {completed.returncode}")
    return 0


# SIGKILL when the thread that started us ends (its Dask worker died); exit at once if that
# already happened between the fork and the prctl; then become run-one.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGKILL); "
    "os.getppid() == int(sys.argv[1]) or os._exit(137); os.execvp(sys.argv[2], sys.argv[2:])"
)
