"""The seam between ``spool dispatch`` and an engine that places work (a subprocess, Dask, Slurm,
Kubernetes, Ray): one small protocol, so a new engine is one module.

What the others do, and what spool keeps of it: Airflow's executors take a command and report a
state per task key; Prefect's work pools hand a flow run to infrastructure and watch it; submitit
submits a pickled call to Slurm and polls ``sacct``. Each of them also owns the bookkeeping and
the retries. Here the engine only starts ``spool run-one --runner R --job ID`` somewhere and says
how it is going; the lease decides whether the run counts, and spool's tries are the only tries
(an engine's own retries are switched off by its module).

An engine says one of five ``Verdict``s of an engine job:

- ``PENDING``: accepted, not started (a busy queue): after ``--dispatch-timeout`` the dispatcher
  cancels it and dispatches the job again; no try is spent, since no claim was made;
- ``RUNNING``: started; its ``run-one`` holds the lease, or will claim at once;
- ``SUCCEEDED``: over, exit 0 (the attempt ended, or the claim found nothing);
- ``FAILED``: over for certain, not a success (a process that died, a pod Failed, KilledWorker,
  NODE_FAIL): the dispatcher fences the runner at once, so the job is retried now, not after
  the lease's term, and a late heartbeat or complete from it gets 409;
- ``LOST``: the engine can't tell (a node unreachable, a state it does not know): nothing is
  fenced; the lease expires on the coordinator's clock if the runner is really gone.

An engine job carries a label naming its dispatcher (``label``), so a dispatcher SIGKILLed and
started again finds its engine jobs (``adopt``) and loses none of them. ``stop`` lets go of the
engine's resources; the engine jobs run on, for the next dispatcher to adopt.
"""

from __future__ import annotations

import enum
import hashlib
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from spool.base.errors import UsageError


class Verdict(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # definitive: fence the runner now
    LOST = "lost"  # ambiguous: wait for the lease


@dataclass(frozen=True)
class EngineJob:
    """One engine job: ``handle`` is the engine's own name for it (a pid, a Dask key, a Slurm id)."""

    runner: str
    job_id: str
    submitted: float  # wall-clock seconds, when the dispatcher handed it to the engine
    handle: str = ""


@dataclass(frozen=True)
class RunOne:
    """What every engine job runs: ``spool run-one`` against the dispatcher's server, with the
    dispatcher's imports; ``command`` is how to start spool there (``python -P -m spool.cli``
    and the group's setting flags)."""

    server: str
    command: tuple[str, ...]
    cacert: str | None = None
    import_modules: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, runner: str, job_id: str, token_file: str) -> list[str]:
        argv = [*self.command, "run-one", "--server", self.server, "--token-file", token_file]
        argv += ["--runner", runner, "--job", job_id]
        argv += ["--cacert", self.cacert] if self.cacert else []
        argv += [arg for module in self.import_modules for arg in ("--import", module)]
        return argv


class Engine(Protocol):
    """An engine as ``spool dispatch`` drives it; every call is quick (no call waits on a job)."""

    def submit(self, runner: str, job_id: str) -> EngineJob:
        """Hand the engine ``spool run-one --runner runner --job job_id``, labelled as ours."""
        ...

    def poll(self, job: EngineJob) -> Verdict:
        """How the engine job is going now."""
        ...

    def cancel(self, job: EngineJob) -> None:
        """Stop it, started or not (a no-op for one that is over)."""
        ...

    def forget(self, job: EngineJob) -> None:
        """The dispatcher is done with it (over, cancelled, fenced): drop its label or record."""
        ...

    def adopt(self) -> list[EngineJob]:
        """The engine jobs carrying our label, left by a dispatcher before us."""
        ...

    def stop(self) -> None:
        """Let go of the engine's resources; the engine jobs run on."""
        ...


# The engines ``--engine`` names, each a module of its own loaded only when chosen (the ones beyond
# ``local`` need an optional extra).
ENGINES = {
    "local": "spool.runner.dispatch.local",
    "dask": "spool.runner.dispatch.dask",
    "slurm": "spool.runner.dispatch.slurm",
    "kubernetes": "spool.runner.dispatch.kubernetes",
}


def default_label(server: str, token: str) -> str:
    """A dispatcher's label when ``--engine-opt label=`` gives none: the same server and token
    give the same label (so a restart adopts), other tokens other labels; the token can't be
    read back from it."""
    return "d" + hashlib.sha256(f"{server}\0{token}".encode()).hexdigest()[:12]


def open_engine(name: str, run_one: RunOne, token: str, label: str, options: Mapping[str, str]) -> Engine:
    """The engine ``name`` with its ``--engine-opt`` options; UsageError for an unknown engine or
    option (each module's ``open_engine`` checks its own)."""
    if name not in ENGINES:
        raise UsageError(f"--engine {name!r}: expected one of {', '.join(sorted(ENGINES))}")
    module = importlib.import_module(ENGINES[name])
    engine: Engine = module.open_engine(run_one, token, label, options)
    return engine


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    """``--engine-opt K=V``, each once."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--engine-opt {pair!r}: expected KEY=VALUE")
        if key in options:
            raise UsageError(f"--engine-opt {key}: given twice")
        options[key] = value
    return options
